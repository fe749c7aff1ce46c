"""experiments.results on small hand-written spec_bench rows: loading, corpus ALs, bins, match rates."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

from experiments import bandwidth_floor, results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def row(method, example_id, tokens, passes, drafts=0, accepted=0, app=(), *, k=None, policy="prefer-ngram",
        bos="single", ref=0.1, out_e=0.2, output=None, steps=None, device="cpu", dataset="code-edits"):
    """One spec_bench row with just the fields experiments.results reads."""
    r = {
        "config_key": f"{method}-{policy}-{bos}-{k}", "example_id": example_id, "dataset": dataset,
        "ref_edit_norm": ref, "prompt_tokens": 50, "output_edit_norm": out_e,
        "stats": {"num_tokens": tokens, "num_target_steps": passes, "num_drafts": drafts,
                  "num_draft_tokens": drafts * 3, "num_accepted": accepted, "accepted_per_position": list(app),
                  "steps_by_drafter": steps or {"none": passes - 1}, "accepted_by_drafter": {}},
        "trace": [], "wall_s": 0.1 * tokens, "tpot_ms": 100.0,
        "config": {"method": method, "model": "tiny-coder", "k": k or {"ngram": 5, "eagle": 3, "eagle3": 3},
                   "hybrid_policy": policy, "dataset_name": dataset, "split": "eval", "output_len": 64,
                   "temperature": 0.0, "seed": 0, "chat_template": True, "bos_mode": bos, "device": device,
                   "dtype": "auto"},
        "run_info": {"device": "cpu (x86_64, 2 threads)", "commit": "abc123", "torch": "2.13.0",
                     "transformers": "5.24.0"},
    }
    if output is not None:
        r["tokens"] = output
    return r


def write(path: Path, rows, torn: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_text(text + ('{"config_key": "x", "exa' if torn else ""))
    return path


@pytest.fixture
def runs(tmp_path):
    """Plain, n-gram, a tree hybrid with mixed k, and a doubled-BOS EAGLE run over two prompts."""
    write(tmp_path / "a.jsonl", [
        row("none", "p1", 10, 10, output=[1, 2, 3]),
        row("none", "p2", 20, 20, ref=0.3, output=[4, 5]),
        row("ngram", "p1", 10, 4, drafts=3, accepted=6, app=[3, 2, 1], output=[1, 2, 3],
            steps={"none": 0, "ngram": 3}),
        row("ngram", "p2", 20, 6, drafts=5, accepted=10, app=[5, 3, 2], ref=0.3, output=[4, 6],
            steps={"ngram": 5}),
    ], torn=True)
    write(tmp_path / "b.jsonl", [
        row("ngram-eagle", "p1", 12, 4, drafts=3, accepted=7, app=[3, 2, 1, 1], policy="tree",
            k={"ngram": 5, "eagle": 3, "eagle3": 3}, steps={"ngram+eagle": 2, "eagle": 1}),
        row("eagle", "p1", 9, 5, drafts=4, accepted=4, app=[3, 1], bos="doubled", k={"ngram": 3, "eagle": 3,
                                                                                       "eagle3": 3}),
    ])
    return tmp_path


def test_load_runs_flattens_config_counters_and_provenance(runs):
    df = results.load_runs(str(runs / "*.jsonl"))
    assert len(df) == 6  # the torn last line of a.jsonl is skipped
    ng = df[(df.method == "ngram") & (df.example_id == "p1")].iloc[0]
    assert (ng.k, ng.k_ngram, ng.variant) == ("5", 5, "ngram") and pd.isna(ng.policy)
    assert (ng.tokens, ng.passes, ng.drafts, ng.accepted) == (10, 4, 3, 6)
    assert ng.seq_al == 2.5 and ng.precision_al == 3.0
    assert ng.output_tokens == [1, 2, 3] and ng["dtype"] == "fp32" and ng.commit == "abc123"
    tree = df[df.method == "ngram-eagle"].iloc[0]
    assert (tree.variant, tree.policy, tree.k, tree.k_ngram, tree.k_eagle) == ("ngram-eagle tree", "tree", "5/3", 5, 3)
    assert tree.output_tokens is None
    eagle = df[df.method == "eagle"].iloc[0]
    assert (eagle.k, eagle.bos_mode, eagle.k_eagle) == ("3", "doubled", 3) and pd.isna(eagle.k_ngram)
    plain = df[df.method == "none"].iloc[0]
    assert plain.k == "-" and math.isnan(plain.precision_al)
    assert set(df.ranks_per_gpu) == {1}  # rows that do not say: one process per GPU


def test_load_runs_carries_whether_the_gpu_was_shared(tmp_path):
    shared = row("ngram", "p1", 10, 4, device="cuda")
    shared["run_info"]["ranks_per_gpu"] = 16
    df = results.load_runs(write(tmp_path / "s.jsonl", [shared, row("ngram", "p2", 10, 4, device="cuda")]))
    assert df.set_index("example_id").ranks_per_gpu.to_dict() == {"p1": 16, "p2": 1}


def test_load_runs_reads_gzip_compressed_files_as_the_plain_ones(runs, tmp_path):
    """A ``.jsonl.gz`` copy of every file (the torn line included) gives the same rows."""
    import gzip

    for p in runs.glob("*.jsonl"):
        with gzip.open(tmp_path / (p.name + ".gz"), "wt") as f:
            f.write(p.read_text())
    plain = results.load_runs(str(runs / "*.jsonl")).drop(columns="file")
    packed = results.load_runs(str(tmp_path / "*.jsonl.gz")).drop(columns="file")
    pd.testing.assert_frame_equal(plain, packed)


def test_load_runs_reads_a_folders_plain_and_compressed_files(runs, tmp_path_factory):
    """A folder stands for its ``*.jsonl`` and ``*.jsonl.gz`` files (a sweep stored compressed, or half of it); its
    other files (a sweep's manifest) are not read; a folder without results files is an error."""
    import gzip
    import shutil

    folder = tmp_path_factory.mktemp("sweep")
    shutil.copy(runs / "a.jsonl", folder / "a.jsonl")
    with gzip.open(folder / "b.jsonl.gz", "wt") as f:
        f.write((runs / "b.jsonl").read_text())
    (folder / "sweep.json").write_text('{"calls": []}')
    plain = results.load_runs(str(runs / "*.jsonl")).drop(columns="file")
    pd.testing.assert_frame_equal(plain, results.load_runs(folder).drop(columns="file"))
    pd.testing.assert_frame_equal(plain, results.load_runs(str(folder)).drop(columns="file"))
    with pytest.raises(FileNotFoundError):
        results.load_runs(tmp_path_factory.mktemp("empty"))


def test_load_runs_names_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        results.load_runs(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError):
        results.load_runs(str(tmp_path / "*.jsonl"))


def test_load_runs_names_a_pattern_or_folder_among_others_that_adds_no_file(runs, tmp_path):
    """Beside names that find files, a glob matching nothing or a folder without results files is an error naming
    it, not a file fewer."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for other in (str(tmp_path / "missing_*.jsonl"), empty):
        with pytest.raises(FileNotFoundError, match=str(other).replace("*", r"\*")):
            results.load_runs([str(runs / "*.jsonl"), other])


def test_corpus_al_sums_counters_before_dividing(runs):
    df = results.load_runs(str(runs / "*.jsonl"))
    al = results.corpus_al(df, by=["variant", "bos_mode"]).set_index("variant")
    ng = al.loc["ngram"]
    assert ng.n == 2 and ng.tokens == 30 and ng.passes == 10
    assert ng.seq_al == 3.0  # 30 / 10, not the mean of 2.5 and 3.33
    assert ng.precision_al == 3.0  # 1 + 16 / 8
    assert (ng.r1, ng.r2, ng.r3) == (1.0, 0.625, 0.375)  # [8, 5, 3] / 8
    assert math.isnan(ng.r4)  # no n-gram draft was longer than 3
    assert ng.precision_al == pytest.approx(1 + ng.r1 + ng.r2 + ng.r3)
    assert math.isnan(al.loc["none"].precision_al) and math.isnan(al.loc["none"].r1)
    assert al.loc["ngram-eagle tree"].r4 == pytest.approx(1 / 3)
    assert al.loc["eagle"].seq_al == 9 / 5


def test_corpus_al_keeps_groups_with_missing_keys(runs):
    df = results.load_runs(str(runs / "*.jsonl"))
    al = results.corpus_al(df, by=["policy"])
    assert len(al) == 2  # None (plain, ngram, eagle) and "tree"
    assert al.n.sum() == 6


def test_position_rates_long_form(runs):
    df = results.load_runs(str(runs / "*.jsonl"))
    pr = results.position_rates(df[df.method == "ngram"], by=["variant"])
    assert pr.position.tolist() == [1, 2, 3] and pr.rate.tolist() == [1.0, 0.625, 0.375]


def test_bin_edit_norm_edges_and_outside_values():
    df = pd.DataFrame({"e": [0.0, 0.05, 0.6, 0.7, None]})
    out = results.bin_edit_norm(df, column="e")
    assert out.bin.astype(str).tolist()[:3] == ["[0.00, 0.05)", "[0.05, 0.10)", "[0.55, 0.60]"]
    assert out.bin.isna().tolist() == [False, False, False, True, True]
    assert out.bin_mid.tolist()[:3] == pytest.approx([0.025, 0.075, 0.575])
    coarse = results.bin_edit_norm(df, bins=results.COARSE_BINS, column="e")
    assert coarse.bin.astype(str).tolist()[3] == "[0.60, 1.00]"
    assert results.bin_labels([(0.0, 0.075), (0.075, 0.15), (0.525, 0.6)]) == [
        "[0.000, 0.075)", "[0.075, 0.150)", "[0.525, 0.600]"]  # as many decimals as the edges need


def test_drafter_steps_shares(runs):
    df = results.load_runs(str(runs / "*.jsonl"))
    st = results.drafter_steps(df[df.method == "ngram"], by=["variant"])
    assert st.set_index("drafter").steps.to_dict() == {"ngram": 8, "none": 0}
    assert st.set_index("drafter").share["ngram"] == 1.0


def test_match_rate_compares_tokens_and_says_how(runs):
    df = results.load_runs(str(runs / "*.jsonl"))
    mr = results.match_rate(df, by=["variant", "bos_mode"]).set_index("variant")
    # n-gram: p1 equal, p2 differs (tokens [4, 6] vs [4, 5])
    assert (mr.loc["ngram"].n, mr.loc["ngram"].n_same, mr.loc["ngram"].match_rate) == (2, 1, 0.5)
    assert mr.loc["ngram"].compared_by == "tokens"
    # the tree run stored no tokens: length (12 vs 10) and edit norm decide, and the column says so
    assert mr.loc["ngram-eagle tree"].compared_by == "length+edit_norm"
    assert mr.loc["ngram-eagle tree"].n_same == 0
    assert "eagle" not in mr.index  # doubled BOS has no doubled plain run to compare with


def test_match_rate_proxy_counts_equal_length_and_edit_norm(tmp_path):
    write(tmp_path / "c.jsonl", [row("none", "p1", 10, 10, out_e=0.25), row("ngram", "p1", 10, 3, out_e=0.25),
                                 row("none", "p2", 10, 10, out_e=0.25), row("ngram", "p2", 10, 3, out_e=0.5)])
    mr = results.match_rate(results.load_runs(tmp_path / "c.jsonl"), by=["variant"])
    assert mr.iloc[0].to_dict() == {"variant": "ngram", "n": 2, "n_same": 1, "match_rate": 0.5,
                                    "compared_by": "length+edit_norm"}


def test_match_rate_compares_runs_of_one_change_request(tmp_path):
    """The same prompt asked with two change requests is two prompts: each speculative row is compared with the
    plain row of its own request."""
    rows = []
    for request, plain, spec in (("subject", [1, 2], [1, 2]), ("located", [3, 4], [3, 4])):
        for method, output in (("none", plain), ("ngram", spec)):
            r = row(method, "p1", 2, 2, output=output)
            r["config"]["change_request"] = request
            rows.append(r)
    write(tmp_path / "e.jsonl", rows)
    mr = results.match_rate(results.load_runs(tmp_path / "e.jsonl"), by=["variant", "change_request"])
    assert mr.n.tolist() == [1, 1] and mr.n_same.tolist() == [1, 1]


def test_bos_output_match_pairs_single_and_doubled(tmp_path):
    write(tmp_path / "d.jsonl", [row("none", "p1", 3, 3, output=[1, 2, 3]), row("none", "p1", 3, 3, bos="doubled",
                                                                            output=[1, 2, 3]),
                                 row("none", "p2", 2, 2, output=[4, 5]), row("none", "p2", 2, 2, bos="doubled",
                                                                          output=[4, 9]),
                                 row("none", "p3", 2, 2, output=[7, 7])])  # no doubled partner
    out = results.bos_output_match(results.load_runs(tmp_path / "d.jsonl"), by=["variant"])
    assert out.iloc[0].to_dict() == {"variant": "none", "n": 2, "n_same": 1, "share": 0.5}


def test_compare_bos_sums_counters_over_paired_prompts(tmp_path):
    e = {"k": {"ngram": 3, "eagle": 3, "eagle3": 3}}
    write(tmp_path / "e.jsonl", [
        row("eagle", "p1", 12, 4, drafts=3, accepted=8, app=[3, 3, 2], output=[1], **e),
        row("eagle", "p1", 12, 6, drafts=5, accepted=6, app=[3, 2, 1], bos="doubled", output=[1], **e),
        row("eagle", "p2", 8, 4, drafts=3, accepted=4, app=[2, 1, 1], output=[2], **e),
        row("eagle", "p2", 8, 2, drafts=1, accepted=6, app=[1, 1, 1], bos="doubled", output=[3], **e),
        row("eagle", "p3", 5, 5, output=[4], **e),  # no doubled partner: left out
    ])
    df = results.load_runs(tmp_path / "e.jsonl")
    c = results.compare_bos(df, by=["variant"]).iloc[0]
    assert (c.n, c.n_same_output) == (2, 1)
    assert (c.seq_al_single, c.seq_al_doubled, c.seq_loss) == (20 / 8, 20 / 8, 0.0)
    assert (c.precision_al_single, c.precision_al_doubled) == (1 + 12 / 6, 1 + 12 / 6)
    same = results.compare_bos(df, by=["variant"], same_output_only=True).iloc[0]
    assert (same.n, same.seq_al_single, same.seq_al_doubled) == (1, 3.0, 2.0)
    assert same.seq_loss == 1.0 and same.seq_loss_rel == pytest.approx(1 / 3)


def speed_doc(commit, floor, contexts, **sections):
    """A bench_speed.json document with just the fields experiments.results reads, its copy bandwidth set so that
    the floor at its (first) context is ``floor`` ms."""
    ctx = int(next(iter(contexts), 512))
    read = bandwidth_floor.weight_bytes(32) - bandwidth_floor.embedding_bytes() + bandwidth_floor.kv_bytes(32, ctx)
    return {"run_info": {"device": "GPU", "commit": commit, "date": "2026-01-01", "torch": "2.11"},
            "copy_bandwidth_TBps": read / (floor / 1e3) / 1e12, "weight_GB": bandwidth_floor.weight_bytes(32) / 1e9,
            "layers": 32, "contexts": contexts, **sections}


@pytest.fixture
def speed_files(tmp_path):
    """Two bench_speed files: a full run at context 512, and one at 2048 with EAGLE, overhead and zoo sections."""
    a = speed_doc("c512", 4.0, {"512": {"hf_eager_decode": 20.0, "graph_chain_q4": 8.0, "eager_tree_q9": 22.0,
                                        "graph_compiled_chain_q9": 6.0,
                                        "hf_static_compiled_q8": "RuntimeError: boom"}},
                  conditions="other GPU busy", args={"contexts": [512], "skip": []})
    b = speed_doc("c2048", 5.0, {"2048": {"graph_chain_q1": 10.0, "eagle1_graph_catchup4_k1": 0.6,
                                          "eagle1_graph_catchup4_k3": 1.6, "eagle1_graph_per_draft_token": 0.5,
                                          "eagle1_eager_per_draft_token": "failed: OOM"}},
                  loop_overhead={"config": "graph", "ctx": 2048,
                                 "plain": {"steps": 10, "tokens": 11, "wall_ms_per_step": 9.9,
                                           "forward_ms_per_step": 10.0, "outside_ms_per_step": -0.1,
                                           "outside_forward": -0.0101},
                                 "ngram_k8": {"steps": 4, "tokens": 11, "wall_ms_per_step": 12.0,
                                              "forward_ms_per_step": 11.4, "outside_ms_per_step": 0.6,
                                              "outside_forward": 0.05}},
                  hf_generate_ms_per_token={"greedy": 50.0, "prompt_lookup_10": 30.0},
                  zoo={"forward_ms": {"chain_q1": 1.0, "chain_q9": 1.2, "tree_q9": 1.25},
                       "plain": {"tokens_per_s": 1000.0, "seq_normalized_al": 1.0, "tokens": 100, "step_ms": 1.0,
                                 "forward_ms_per_step": 0.8, "speedup": 1.0, "forward_only_speedup": 1.0},
                       "ngram": {"tokens_per_s": 4000.0, "seq_normalized_al": 5.0, "tokens": 100, "step_ms": 1.25,
                                 "forward_ms_per_step": 1.0, "speedup": 4.0, "forward_only_speedup": 5.0},
                       "eagle3": "failed: RuntimeError: x"})
    (tmp_path / "speed_a.json").write_text(json.dumps(a))
    (tmp_path / "speed_b.json").write_text(json.dumps(b))
    return [tmp_path / "speed_a.json", tmp_path / "speed_b.json"]


def test_load_speed_long_form(speed_files):
    sp = results.load_speed(speed_files[0]).set_index("name")
    assert sp.loc["hf_eager_decode", ["impl", "layout", "block", "step"]].tolist() == ["HF eager", "decode", 1,
                                                                                       "decode q1"]
    assert sp.loc["graph_chain_q4", ["impl", "layout", "block"]].tolist() == ["CUDA graph", "chain", 4]
    assert sp.loc["graph_chain_q4", "x_floor"] == pytest.approx(2.0)
    assert sp.loc["eager_tree_q9", "context"] == 512 and sp.loc["eager_tree_q9", "step"] == "tree q9"
    compiled = sp.loc["graph_compiled_chain_q9", ["config", "impl", "layout", "block"]].tolist()
    assert compiled == ["graph_compiled", "CUDA graph + compile", "chain", 9]
    assert sp.loc["hf_eager_decode", "config"] == "hf_eager" and sp.loc["eager_tree_q9", "config"] == "eager"
    failed = sp.loc["hf_static_compiled_q8"]
    assert math.isnan(failed.ms) and failed.error == "RuntimeError: boom" and failed.block == 8
    assert sp.error.isna().sum() == 4
    assert set(sp.run) == {"speed_a"} and set(sp.commit) == {"c512"}


def test_load_speed_concatenates_files_with_their_provenance(speed_files, tmp_path):
    sp = results.load_speed(speed_files)
    assert len(sp) == 10 and sp.groupby("run").size().to_dict() == {"speed_a": 5, "speed_b": 5}
    assert sp.groupby("run").commit.unique().map(list).to_dict() == {"speed_a": ["c512"], "speed_b": ["c2048"]}
    one = sp[sp.name == "graph_chain_q1"].iloc[0]
    assert (one.run, one.context) == ("speed_b", 2048)
    assert (one.x_floor, one.floor_ms) == pytest.approx((2.0, 5.0))  # its own file's floor
    assert len(results.load_speed(str(tmp_path / "speed_*.json"))) == 10  # a glob works too


def test_load_speed_eagle_draft_entries(speed_files):
    sp = results.load_speed(speed_files[1]).set_index("name")
    per = sp.loc["eagle1_graph_per_draft_token"]
    assert (per.config, per.impl, per.layout, per.step, per.ms) == ("eagle1_graph", "EAGLE-1 head (graph)", "draft",
                                                                     "per_draft_token", 0.5)
    assert pd.isna(per.block) and per.x_floor == pytest.approx(0.1)
    assert sp.loc["eagle1_graph_catchup4_k3", "step"] == "catchup4_k3"
    eager = sp.loc["eagle1_eager_per_draft_token"]
    assert eager.impl == "EAGLE-1 head (eager)" and math.isnan(eager.ms) and eager.error == "failed: OOM"
    assert str(sp.block.dtype) == "Int64"  # blocks stay integers beside the head's missing ones


def test_load_speed_runs_one_row_per_file(speed_files):
    runs = results.load_speed_runs(speed_files).set_index("run")
    assert runs.loc["speed_a", "contexts"] == [512] and runs.loc["speed_a", "conditions"] == "other GPU busy"
    assert runs.loc["speed_b", "floors_ms"] == {2048: pytest.approx(5.0)} and pd.isna(runs.loc["speed_b", "conditions"])
    kv = bandwidth_floor.kv_bytes(32, 2048) / (runs.loc["speed_b", "copy_bandwidth_TBps"] * 1e12) * 1e3
    assert runs.loc["speed_b", "matrices_floor_ms"] == pytest.approx(5.0 - kv)  # the matmuls' floor: no KV reads
    assert runs.loc["speed_a", "args"] == {"contexts": [512], "skip": []} and pd.isna(runs.loc["speed_b", "args"])


def test_load_loop_overhead_rows_per_drafter(speed_files):
    lo = results.load_loop_overhead(speed_files)
    assert lo.drafter.tolist() == ["plain", "ngram_k8"] and set(lo.run) == {"speed_b"}  # speed_a has no section
    plain = lo.iloc[0]
    assert (plain.config, plain.context, plain.steps, plain.outside_forward) == ("graph", 2048, 10, -0.0101)
    assert pd.isna(plain.drafted) and pd.isna(plain.accepted)  # an older file without the counts
    assert str(lo.steps.dtype) == "Int64"
    empty = results.load_loop_overhead(speed_files[0])
    assert empty.empty and {"outside_forward", "drafted", "accepted"} <= set(empty.columns)


def test_load_zoo_speed_and_forward(speed_files):
    zoo = results.load_zoo_speed(speed_files).set_index("method")
    assert zoo.index.tolist() == ["plain", "ngram", "eagle3"]
    ng = zoo.loc["ngram"]
    assert (ng.speedup, ng.forward_only_speedup, ng.seq_normalized_al) == (4.0, 5.0, 5.0)
    assert ng.other_ms_per_step == pytest.approx(0.25) and pd.isna(ng.error)
    failed = zoo.loc["eagle3"]
    assert failed.error == "failed: RuntimeError: x" and math.isnan(failed.speedup)
    fwd = results.load_zoo_forward(speed_files)
    assert fwd[["layout", "block", "ms"]].values.tolist() == [["chain", 1, 1.0], ["chain", 9, 1.2], ["tree", 9, 1.25]]


@pytest.fixture
def older_speed_files(tmp_path):
    """Three files without in-loop timings: the step configurations with HF baselines, a run with the EAGLE head
    and a kernel profile, and a loop-overhead run whose drafts were all accepted."""
    steps = speed_doc("e59", 4.0, {"512": {"hf_static_compiled_q1": 6.0, "hf_static_compiled_q8": 10.0,
                                           "graph_chain_q1": 7.0, "graph_chain_q2": 7.6,
                                           "graph_chain_q9": 8.0, "graph_tree_q9": 7.8,
                                           "graph_autotune_chain_q1": 4.8, "graph_autotune_chain_q9": 5.6,
                                           "graph_autotune_tree_q9": 5.6,
                                           "graph_compiled_sdpa_chain_q1": 5.2,
                                           "graph_compiled_hf_chain_q9": "failed: RuntimeError: x"}},
                      args={"configs": ["graph", "graph_autotune", "graph_compiled_sdpa", "graph_compiled_hf"],
                            "compile_mode": None, "contexts": [512], "skip": []})
    eagle = speed_doc("e59", 5.0, {"512": {"graph_compiled_chain_q1": 6.0, "graph_compiled_chain_q9": 6.5,
                                           "graph_compiled_tree_q9": 6.6, "eagle1_graph_per_draft_token": 0.75}},
                      profile_config={"compile": "max-autotune-no-cudagraphs", "attention": "split"},
                      profile=[{"ctx": 512, "q": 1, "ms_per_step_by_kind": {"matmul": 3.0, "attention": 0.5,
                                                                             "other": 0.5},
                                "top": [{"name": "gemv", "ms_per_step": 2.0, "calls_per_step": 32.0},
                                        {"name": "split_kv_kernel", "ms_per_step": 0.5, "calls_per_step": 32.0}]},
                               {"ctx": 512, "q": 9, "ms_per_step_by_kind": {"matmul": 4.0, "other": 1.0},
                                "top": [{"name": "gemm", "ms_per_step": 4.0, "calls_per_step": 64.0}]}])
    overhead = speed_doc("c9d", 4.0, {"2048": {"graph_chain_q1": 7.0}},
                         loop_overhead={"config": "graph", "ctx": 2048,
                                        "plain": {"steps": 9, "tokens": 10, "drafted": 0, "accepted": 0,
                                                  "wall_ms_per_step": 7.0, "forward_ms_per_step": 7.0,
                                                  "outside_ms_per_step": 0.0, "outside_forward": 0.0},
                                        "replay_k8": {"steps": 2, "tokens": 10, "drafted": 8, "accepted": 8,
                                                      "wall_ms_per_step": 10.0, "forward_ms_per_step": 9.0,
                                                      "outside_ms_per_step": 1.0, "outside_forward": 0.1}})
    paths = []
    for name, doc in (("steps", steps), ("eagle", eagle), ("overhead", overhead)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(doc))
    return paths


def test_load_speed_labels_new_configurations(older_speed_files):
    sp = results.load_speed(older_speed_files[0]).set_index("name")
    assert sp.loc["graph_autotune_tree_q9", ["config", "impl", "layout", "block"]].tolist() == [
        "graph_autotune", "CUDA graph + compile (max-autotune)", "tree", 9]
    assert sp.loc["graph_compiled_sdpa_chain_q1", ["config", "impl", "block", "x_floor"]].tolist() == [
        "graph_compiled_sdpa", "CUDA graph + compile, SDPA attention", 1, 1.3]
    hf = sp.loc["graph_compiled_hf_chain_q9"]
    assert (hf.config, hf.impl, hf.error) == ("graph_compiled_hf", "CUDA graph + compiled HF model",
                                              "failed: RuntimeError: x") and math.isnan(hf.ms)
    assert sp.loc["hf_static_compiled_q1", ["config", "impl"]].tolist() == ["hf_static_compiled",
                                                                           "HF static cache + compile"]
    runs = results.load_speed_runs(older_speed_files).set_index("run")
    assert runs.loc["steps", "configs"] == ["graph", "graph_autotune", "graph_compiled_sdpa", "graph_compiled_hf"]
    assert runs.loc["eagle", "sections"] == ["profile"] and runs.loc["overhead", "sections"] == ["loop_overhead"]
    assert pd.isna(runs.loc["steps", "compile_mode"]) and pd.isna(runs.loc["eagle", "configs"])


def test_speed_vs_baselines_same_run_context_and_block(older_speed_files, speed_files):
    sp = results.speed_vs_baselines(results.load_speed(older_speed_files[:2])).set_index(["run", "name"])
    assert sp.loc[("steps", "graph_autotune_chain_q1"), "x_hf_static"] == pytest.approx(0.8)  # 4.8 / 6.0
    assert sp.loc[("steps", "graph_chain_q1"), "hf_static_ms"] == 6.0
    assert sp.loc[("steps", "graph_chain_q9"), "x_hf_static"] == 0.8  # block 9 against HF's largest, 8
    assert pd.isna(sp.loc[("steps", "graph_chain_q2"), "x_hf_static"])  # HF has no block 2
    assert pd.isna(sp.loc[("steps", "graph_chain_q1"), "hf_eager_ms"])
    assert sp.loc["eagle"].hf_static_ms.isna().all()  # the other run's baselines are not borrowed
    old = results.speed_vs_baselines(results.load_speed(speed_files)).set_index(["run", "name"])
    assert old.loc[("speed_a", "graph_chain_q4"), "x_hf_eager"] == pytest.approx(0.4)  # 8.0 / 20.0
    assert pd.isna(old.loc[("speed_b", "eagle1_graph_per_draft_token"), "x_hf_static"])


def test_load_loop_overhead_drafted_and_accepted(older_speed_files):
    lo = results.load_loop_overhead(older_speed_files).set_index("drafter")
    assert set(lo.run) == {"overhead"}  # the other two files have no section
    assert lo.loc["replay_k8", ["steps", "tokens", "drafted", "accepted"]].tolist() == [2, 10, 8, 8]
    assert (lo.loc["plain", "drafted"], lo.loc["replay_k8", "outside_forward"]) == (0, 0.1)


def test_load_speed_profile_kinds_and_top_kernels(older_speed_files):
    prof = results.load_speed_profile(older_speed_files)
    assert set(prof.run) == {"eagle"}
    one = prof[prof.block == 1].set_index("kind")
    assert one.ms_per_step.to_dict() == {"matmul": 3.0, "attention": 0.5, "other": 0.5}
    assert one.share.to_dict() == {"matmul": 0.75, "attention": 0.125, "other": 0.125}
    assert set(one.kernel_ms) == {4.0} and set(one.compile) == {"max-autotune-no-cudagraphs"}
    assert prof[prof.block == 9].kind.tolist() == ["matmul", "other"]  # a kind the profile lacks adds no row
    top = results.load_speed_profile_top(older_speed_files)
    assert top[["block", "rank", "name", "ms_per_step", "share"]].values.tolist() == [
        [1, 1, "gemv", 2.0, 0.5], [1, 2, "split_kv_kernel", 0.5, 0.125], [9, 1, "gemm", 4.0, 0.8]]
    assert results.load_speed_profile(older_speed_files[0]).empty


def test_step_ratios_per_run_context_and_config(older_speed_files):
    sp = results.load_speed(older_speed_files)
    ratios = results.step_ratios(sp, results.load_loop_overhead(older_speed_files[2]))
    assert set(ratios.measure) <= set(results.STEP_RATIO_TEXT)
    g = ratios.set_index(["measure", "run", "config"])
    assert g.loc[("decode", "steps", "graph_autotune"), "measured"] == pytest.approx(1.2)  # 4.8 / 4.0
    assert g.loc[("decode", "steps", "graph_compiled_sdpa"), "measured"] == pytest.approx(1.3)
    verify = g.loc[("verify", "steps", "graph")]  # the largest chain step of q = 2..9: q = 9
    assert verify.measured == pytest.approx(2.0) and verify.detail.startswith("largest of q=2-9: q=9")
    assert g.loc[("verify", "steps", "graph_autotune"), "measured"] == pytest.approx(1.4)
    assert ("verify", "steps", "graph_compiled_sdpa") not in g.index  # no chain step of 2-9 measured
    assert ("verify", "steps", "graph_compiled_hf") not in g.index  # failed: no time
    assert ("draft", "steps", "graph") not in g.index  # that run did not time the EAGLE head
    assert g.loc[("draft", "eagle", "graph_compiled"), "measured"] == 0.125  # 0.75 ms / 6.0 ms
    assert g.loc[("tree", "steps", "graph"), "measured"] == pytest.approx(7.8 / 8.0)
    assert g.loc[("tree", "eagle", "graph_compiled"), "measured"] == pytest.approx(6.6 / 6.5)
    out = ratios[ratios.measure == "outside"].set_index("drafter")
    assert out.measured.to_dict() == {"plain": 0.0, "replay_k8": 0.1}
    assert set(out.context) == {2048} and set(out.config) == {"graph"}
    summary = results.step_ratio_summary(ratios).set_index(["measure", "config"])
    assert summary.loc[("decode", "graph_autotune"), ["n", "lowest", "highest"]].tolist() == \
        pytest.approx([1, 1.2, 1.2])
    assert summary.loc[("outside", "graph"), "highest"].tolist() == [0.0, 0.1]  # one row per drafter


def test_step_ratio_summary_ranges():
    ratios = pd.DataFrame({"measure": ["verify"] * 3 + ["decode"], "config": ["c"] * 4, "drafter": [None] * 4,
                           "measured": [1.3, 1.4, 1.34, 1.2]})
    s = results.step_ratio_summary(ratios).set_index("measure")
    assert (s.loc["verify", "n"], s.loc["verify", "lowest"], s.loc["verify", "highest"]) == (3, 1.3, 1.4)
    assert s.loc["decode", "n"] == 1 and list(s.index) == ["verify", "decode"]  # groups in their first order


@pytest.fixture
def in_loop_speed_files(tmp_path):
    """Files with in-loop timings: a loop-overhead run with a section per configuration and in-loop timings
    (the compiled drafting steps not timed apart), a compile="auto" step run, and the diagnostics (capacity check,
    step conditions, the split-K sweep)."""
    def in_loop(wall, fwd, share):
        return {"steps": 9, "wall_ms": wall, "forward_ms": fwd, "host_forward_ms": 0.05, "outside_ms": wall - fwd,
                "outside_forward": share}

    overhead = speed_doc("3f3", 4.0, {"2048": {"graph_chain_q1": 6.0}},
                         loop_overhead={"config": "graph", "ctx": 2048,
                                        "plain": {"steps": 9, "tokens": 10, "drafted": 0, "accepted": 0,
                                                  "wall_ms_per_step": 6.2, "forward_ms_per_step": 6.0,
                                                  "outside_ms_per_step": 0.2, "outside_forward": 0.032,
                                                  "in_loop": in_loop(6.1, 6.0, 0.015)}},
                         loop_overhead_graph_compiled={"config": "graph_compiled", "ctx": 2048,
                                                       "replay_k8": {"steps": 2, "tokens": 10, "drafted": 8,
                                                                     "accepted": 8, "wall_ms_per_step": 5.5,
                                                                     "forward_ms_per_step": None,
                                                                     "outside_ms_per_step": None,
                                                                     "outside_forward": None,
                                                                     "in_loop": in_loop(5.4, 5.1, 0.06)},
                                                       "plain": {"steps": 9, "tokens": 10, "wall_ms_per_step": 5.0,
                                                                 "forward_ms_per_step": None,
                                                                 "outside_ms_per_step": None,
                                                                 "outside_forward": None}})
    auto = speed_doc("41b", 4.0, {"512": {"graph_chain_q1": 6.4, "graph_chain_q9": 7.4, "graph_auto_chain_q1": 4.8,
                                          "graph_auto_chain_q9": 5.2, "graph_auto_tree_q9": 5.2}},
                     args={"configs": ["graph", "graph_auto"], "compile_mode": None})
    launch = speed_doc("249", 4.0, {"2048": {}},
                       step_conditions={"graph_compiled": [
                           {"q": 9, "compile": True, "capacity": 2283, "fixed": 5.5, "advancing": 5.6,
                            "host_gap": 5.6, "fresh_tokens": 5.6, "verify_after": 5.7, "host_ms": 0.01,
                            "replay_ms": 5.4, "replay2_ms": 10.9}]},
                       capacity_check={"graph_compiled": [
                           {"round": r, "capacity": c, "kv_len": c, "chain_q1": 5.0, "chain_q9": ms9, "tree_q9": ms9}
                           for r in (0, 1) for c, ms9 in ((2112, 5.1), (2283, 5.5))]})
    old_conditions = speed_doc("1b3", 4.0, {"2048": {}}, step_conditions={"graph": [
        {"q": 1, "compile": False, "fixed": 8.0, "advancing": 7.8, "host_gap": 7.9, "fresh_tokens": 8.1,
         "verify_after": 8.1}]})
    linear = {"run_info": {"device": "GPU", "commit": "a33"}, "conditions": "alone", "rows": [
        {"shape": "o", "n": 8, "k": 8, "rows": 1, "kind": "F.linear", "us": 10.0, "TBps": 2.0, "rel_err": None},
        {"shape": "o", "n": 8, "k": 8, "rows": 1, "kind": "splitk_plan", "us": 12.0, "TBps": 1.6, "rel_err": 0.002,
         "block_n": 64, "block_k": 128, "splits": 8},
        {"shape": "o", "n": 8, "k": 8, "rows": 1, "kind": "splitk", "us": 11.0, "TBps": 1.8, "rel_err": 0.002,
         "block_n": 64, "block_k": 128, "splits": 4, "num_warps": 4, "num_stages": 3},
        {"shape": "o", "n": 8, "k": 8, "rows": 1, "kind": "splitk", "us": 15.0, "TBps": 1.3, "rel_err": 0.002,
         "block_n": 32, "block_k": 128, "splits": 2, "num_warps": 4, "num_stages": 4},
        {"shape": "lm_head", "n": 8, "k": 8, "rows": 9, "kind": "F.linear", "us": 250.0, "TBps": 4.2,
         "rel_err": None},
        {"shape": "lm_head", "n": 8, "k": 8, "rows": 9, "kind": "splitk", "us": 240.0, "TBps": 4.3, "rel_err": 0.003,
         "block_n": 64, "block_k": 256, "splits": 1, "num_warps": 4, "num_stages": 3}]}
    paths = []
    for name, doc in (("overhead_zoo", overhead), ("steps_auto", auto), ("launch", launch),
                      ("conditions", old_conditions), ("bench_linear", linear)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(doc))
    return paths


def test_load_loop_overhead_every_section_with_in_loop_columns(in_loop_speed_files, older_speed_files):
    lo = results.load_loop_overhead(in_loop_speed_files[0])
    assert lo[["section", "config", "drafter"]].values.tolist() == [
        ["loop_overhead", "graph", "plain"], ["loop_overhead_graph_compiled", "graph_compiled", "replay_k8"],
        ["loop_overhead_graph_compiled", "graph_compiled", "plain"]]
    graph = lo.iloc[0]
    assert (graph.in_loop_steps, graph.in_loop_wall_ms, graph.in_loop_forward_ms) == (9, 6.1, 6.0)
    assert (graph.in_loop_host_forward_ms, graph.in_loop_outside_forward) == (0.05, 0.015)
    assert graph.outside_forward == 0.032  # the older measure stays beside it
    replay = lo.iloc[1]
    assert math.isnan(replay.forward_ms_per_step) and math.isnan(replay.outside_forward)  # not timed apart: NaN
    assert replay.in_loop_outside_ms == pytest.approx(0.3) and replay.drafted == 8
    no_inner = lo.iloc[2]
    assert pd.isna(no_inner.in_loop_steps) and math.isnan(no_inner.in_loop_outside_forward)
    assert str(lo.in_loop_steps.dtype) == "Int64" and lo.outside_forward.dtype == float
    old = results.load_loop_overhead(older_speed_files[2])  # a file without in_loop still loads
    assert old.section.tolist() == ["loop_overhead"] * 2 and old.in_loop_outside_forward.isna().all()


def test_step_ratios_outside_prefers_in_loop(in_loop_speed_files, older_speed_files):
    lo = results.load_loop_overhead([in_loop_speed_files[0], older_speed_files[2]])
    out = results.step_ratios(results.load_speed(in_loop_speed_files[1]), lo)
    out = out[out.measure == "outside"].set_index(["run", "config", "drafter"])
    assert len(out) == 4  # compiled plain has neither measure: skipped
    assert out.loc[("overhead_zoo", "graph", "plain"), "measured"] == 0.015  # in_loop, not the older 0.032
    assert out.loc[("overhead_zoo", "graph", "plain"), "detail"].startswith("in_loop")
    replay = out.loc[("overhead_zoo", "graph_compiled", "replay_k8")]
    assert (replay.measured, replay.context) == (0.06, 2048)
    older = out.loc[("overhead", "graph", "replay_k8")]  # no in_loop in this file: against forwards timed apart
    assert older.measured == 0.1 and older.detail.startswith("forward timed apart")


def test_step_ratios_for_compile_auto(in_loop_speed_files):
    ratios = results.step_ratios(results.load_speed(in_loop_speed_files[1])).set_index(["measure", "config"])
    auto = ratios.xs("graph_auto", level="config")
    assert auto.measured.to_dict() == pytest.approx({"decode": 1.2, "verify": 1.3, "tree": 1.0})
    assert set(auto.impl) == {results._SPEED_IMPL["graph_auto"]}
    assert ("decode", "graph") in ratios.index and ("draft", "graph_auto") not in ratios.index  # no head timed


def test_speed_runs_with_shared_stems_stay_apart(tmp_path, speed_files):
    for folder in ("s3", "s4"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "steps.json").write_text(speed_files[0].read_text())
    sp = results.load_speed([tmp_path / "s3" / "steps.json", tmp_path / "s4" / "steps.json", speed_files[1]])
    assert list(dict.fromkeys(sp.run)) == ["s3/steps", "s4/steps", "speed_b"]
    assert results.load_speed(tmp_path / "s4" / "steps.json").run.iloc[0] == "steps"  # alone: the stem


def test_load_speed_runs_sections_and_files_without_steps(in_loop_speed_files):
    runs = results.load_speed_runs(in_loop_speed_files).set_index("run")
    assert runs.loc["overhead_zoo", "sections"] == ["loop_overhead", "loop_overhead_graph_compiled"]
    assert runs.loc["launch", "sections"] == ["step_conditions", "capacity_check"]
    assert runs.loc["steps_auto", "configs"] == ["graph", "graph_auto"]
    lin = runs.loc["bench_linear"]  # bench_linear.py's file: no floor, no contexts
    assert lin.floors_ms is None and math.isnan(lin.matrices_floor_ms) and lin.contexts == []
    assert lin.sections == ["rows"] and lin.conditions == "alone"


def test_load_capacity_check_long_form(in_loop_speed_files):
    cap = results.load_capacity_check(in_loop_speed_files)
    assert set(cap.run) == {"launch"} and len(cap) == 12  # 2 rounds x 2 capacities x 3 steps
    nine = cap[cap.step == "chain_q9"].pivot_table(index="round", columns="capacity", values="ms")
    assert (nine[2283] - nine[2112]).tolist() == pytest.approx([0.4, 0.4])
    assert cap[["layout", "block"]].drop_duplicates().values.tolist() == [["chain", 1], ["chain", 9], ["tree", 9]]


def test_load_step_conditions_old_and_new_fields(in_loop_speed_files):
    sc = results.load_step_conditions(in_loop_speed_files).set_index("run")
    new, old = sc.loc["launch"], sc.loc["conditions"]
    assert (new.config, new.block, new.capacity, new.host_ms, new.replay2_ms) == ("graph_compiled", 9, 2283, 0.01,
                                                                                 10.9)
    assert (old.config, old.block, old.fixed) == ("graph", 1, 8.0)
    assert pd.isna(old.capacity) and math.isnan(old.host_ms)


def test_bench_linear_against_splitk(in_loop_speed_files):
    lin = results.load_bench_linear(in_loop_speed_files)
    assert set(lin.run) == {"bench_linear"} and len(lin) == 6
    assert pd.isna(lin.splits.iloc[0]) and lin.splits.iloc[1] == 8 and pd.isna(lin.num_warps.iloc[1])
    vs = results.linear_vs_splitk(lin).set_index("shape")
    o = vs.loc["o"]
    assert (o.rows, o.flinear_us, o.plan_us, o.best_us, o.best_config) == (1, 10.0, 12.0, 11.0, "64 x 128, splits 4")
    assert (o.best_over_flinear, o.plan_over_flinear) == (1.1, 1.2)
    head = vs.loc["lm_head"]
    assert head.best_over_flinear == pytest.approx(0.96) and math.isnan(head.plan_us)


def test_load_hf_generate(speed_files):
    hf = results.load_hf_generate(speed_files)
    assert hf[["run", "mode", "ms_per_token"]].values.tolist() == [["speed_b", "greedy", 50.0],
                                                                   ["speed_b", "prompt_lookup_10", 30.0]]


def test_load_simulation_tables(tmp_path):
    t = {"n": [3, 0], "mean_e": [0.02, None], "mean_tokens": [100.0, None], "ngram_al": [4.0, None],
         "ngram_al_mean": [3.9, None], "ngram_precision_al": [4.5, None]}
    doc = {"run_info": {"device": "cpu"}, "config": {}, "models": {}, "bins": [[0.0, 0.05], [0.05, 0.1]],
           "tables": {"all": t, "fit": t, "test": t},
           "test_predictions": {"ngram": {"harmonic_pr": [4.5, None]}},
           "test_errors": {"ngram": {"harmonic_pr": {"mae": 0.5, "rmse": 0.5, "max_abs": 0.5, "mean_rel": 0.125,
                                                     "n": 1}}},
           "fits": {"ngram": {"harmonic_pr": {"params": {"al_ngram": 4.0}}}}}
    (tmp_path / "sim.json").write_text(json.dumps(doc))
    sim = results.load_simulation(tmp_path / "sim.json")
    assert len(sim["bins"]) == 6 and sim["bins"].bin.astype(str).iloc[0] == "[0.00, 0.05)"
    p = sim["predictions"].iloc[0]
    assert (p.measured, p.predicted, p.error) == (4.0, 4.5, 0.5)
    assert math.isnan(sim["predictions"].iloc[1].predicted)
    assert sim["errors"].iloc[0].params == "al_ngram=4" and sim["errors"].iloc[0].mae == 0.5


def test_summarize_runs_cli_prints_corpus_al(runs):
    out = subprocess.run([sys.executable, "-m", "experiments.summarize_runs", str(runs / "a.jsonl")], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    ngram_line = next(line.split() for line in out.splitlines() if line.split()[1:3] == ["ngram", "5"])
    assert ngram_line[5:8] == ["2", "3.0", "3.0"]  # n, seq AL, precision AL
    assert "match rate" in out


def test_eagle_tree_runs_are_their_own_variant(tmp_path):
    """A run whose EAGLE drafts a dynamic tree is not pooled with the chain of the same method and k."""
    chain = row("eagle3", "p1", 10, 4, drafts=3, accepted=6, app=[3, 2, 1])
    tree = row("eagle3", "p1", 10, 2, drafts=1, accepted=8, app=[1, 1, 1, 1, 1, 1])
    tree["config"]["tree"], tree["config_key"] = "dynamic", "tree"
    hybrid = row("ngram-eagle3", "p1", 10, 2, drafts=1, accepted=8, policy="tree")
    hybrid["config"]["tree"] = "dynamic"
    df = results.load_runs(str(write(tmp_path / "t.jsonl", [chain, tree, hybrid])))
    assert list(df.variant) == ["eagle3", "eagle3 (dynamic eagle tree)", "ngram-eagle3 tree (dynamic eagle tree)"]
    assert list(df.tree) == ["none", "dynamic", "dynamic"]
    al = results.corpus_al(df, by=["variant"]).set_index("variant").seq_al
    assert al["eagle3"] == 10 / 4 and al["eagle3 (dynamic eagle tree)"] == 10 / 2


def test_every_spec_bench_config_field_is_a_column():
    """Each field of spec_bench's config is shown by a column of load_runs: by one of its own, or, for the fields of
    CONFIG_DEFAULTS, by a column of that name defaulting to spec_bench's default."""
    from dataclasses import MISSING, fields

    from experiments.spec_bench import BenchConfig

    shown = {"method", "model", "k", "hybrid_policy", "dataset_name", "split", "output_len", "temperature", "seed",
             "chat_template", "bos_mode", "device", "dtype", "tree"}
    defaults = {f.name: f.default for f in fields(BenchConfig) if f.name not in shown}
    assert defaults == results.CONFIG_DEFAULTS and MISSING not in defaults.values()


def test_config_fields_without_a_column_of_their_own_become_columns(tmp_path):
    new = row("eagle", "p1", 10, 5)
    new["config"].update(change_request="subject", tree="static", tree_paths=[[0], [1], [0, 0]], exact=16)
    (tmp_path / "a.jsonl").write_text(json.dumps(new) + "\n" + json.dumps(row("eagle", "p2", 10, 5)) + "\n")
    df = results.load_runs(tmp_path / "a.jsonl").set_index("example_id")
    assert df.loc["p1", ["change_request", "tree_paths", "exact"]].tolist() == ["subject", ((0,), (1,), (0, 0)), 16]
    assert df.loc["p2", ["change_request", "tree_paths", "exact"]].tolist() == ["located", None, 0]  # the defaults


@pytest.mark.parametrize("where, value, words", [
    ("num_target_steps", math.nan, "num_target_steps is nan"), ("num_target_steps", 2.5, "num_target_steps is 2.5"),
    ("num_tokens", -1, "num_tokens is -1"), ("accepted_per_position", ["a"], "accepted_per_position"),
    ("steps_by_drafter", {"ngram": None}, "steps_by_drafter"), ("config_key", ["k"], "config_key"),
    ("example_id", {"id": 1}, "example_id")])
def test_load_runs_names_the_file_and_line_of_a_row_with_a_field_of_another_kind(where, value, words, tmp_path):
    """A step count that is not a whole number >= 1 (NaN passed the old check: its tokens were summed but not its
    passes), counters or per-position acceptance that are not counts, and keys that are not strings: ValueError
    naming the file, line and field (or, with on_bad_line, the row skipped), never another error later on."""
    bad = row("ngram", "p2", 20, 6, drafts=5, accepted=10, app=[5, 3, 2])
    (bad["stats"] if where in bad["stats"] else bad)[where] = value
    path = write(tmp_path / "a.jsonl", [row("ngram", "p1", 10, 4, drafts=3, accepted=6, app=[3, 2, 1]), bad])
    with pytest.raises(ValueError, match=f"a.jsonl line 2: not a spec_bench row .*{words}") as e:
        results.load_runs(path)
    assert len(str(e.value).splitlines()) == 1
    said = []
    df = results.load_runs(path, on_bad_line=said.append)
    assert len(said) == 1 and list(df.example_id) == ["p1"] and results.corpus_al(df).seq_al.tolist() == [2.5]
