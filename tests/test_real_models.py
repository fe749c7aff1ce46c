"""The PR's vLLM command lines run through spec_bench on tiny on-disk targets (Llama, Qwen3), public-layout EAGLE
heads and local copies of the Hub datasets, changing only --model-dir/--eagle-dir/--dataset-path (and sizes):
greedy outputs equal plain decoding. Plus the loader's BOS, EOS and dtype choices, and the PR-style table."""

from __future__ import annotations

import importlib.util
import json
import random
import shlex
from pathlib import Path

import pytest
import torch

from tiny_checkpoints import BOS, END_OF_TEXT, EOT, datasets_on_disk, target_folder

from experiments import spec_bench
from hybridsd import checkpoint, data, prompts, zoo

REPO = Path(__file__).resolve().parents[1]

# vLLM PR #24344's command lines, verbatim (background.md), then two EAGLE-3 ones in the same spelling
PR_LINES = [
    """--method ngram-eagle --num-speculative-tokens-per-method '{"ngram": 5, "eagle": 3}' --prompt_lookup_max 5 --prompt_lookup_min 2 --tp 1 --dataset-name hf --dataset-path vdaita/edit_5k_char --num-prompts 90 --hf-output-len 2048 --blazedit-min-distance 0.01 --blazedit-max-distance 0.25 --no-oversample --print-output""",  # noqa: E501
    """--method eagle --num_spec_tokens 3 --tp 1 --dataset-name hf --dataset-path vdaita/edit_5k_char --num-prompts 90 --hf-output-len 2048 --blazedit-min-distance 0.01 --blazedit-max-distance 0.25 --no-oversample --print-output""",  # noqa: E501
    """--method ngram --num_spec_tokens 5 --prompt_lookup_max 5 --prompt_lookup_min 2 --tp 1 --dataset-name hf --dataset-path vdaita/edit_5k_char --num-prompts 90 --hf-output-len 2048 --blazedit-min-distance 0.01 --blazedit-max-distance 0.25 --no-oversample --print-output""",  # noqa: E501
    """--method ngram-eagle --num-speculative-tokens-per-method '{"ngram": 5, "eagle": 3}' --prompt_lookup_max 5 --prompt_lookup_min 2 --tp 1 --dataset-name hf --dataset-path philschmid/mt-bench --num-prompts 80 --print-output""",  # noqa: E501
    """--method eagle --num_spec_tokens 3 --tp 1 --dataset-name hf --dataset-path likaixin/InstructCoder --num-prompts 1000 --print-output""",  # noqa: E501
    """--method ngram-eagle3 --num-speculative-tokens-per-method '{"ngram": 5, "eagle3": 3}' --prompt_lookup_max 5 --prompt_lookup_min 2 --tp 1 --dataset-name hf --dataset-path philschmid/mt-bench --num-prompts 80 --print-output""",  # noqa: E501
    """--method eagle3 --num_spec_tokens 3 --tp 1 --dataset-name hf --dataset-path likaixin/InstructCoder --num-prompts 1000 --print-output""",  # noqa: E501
]
HUB_TO_LOCAL = {"vdaita/edit_5k_char": "blazedit", "philschmid/mt-bench": "mt-bench",
                "likaixin/InstructCoder": "instructcoder"}
SIZES = {"--num-prompts": {"80": "4", "1000": "3"}, "--hf-output-len": {"2048": "12"}}  # 90 stays: --no-oversample
OUT_LEN = 12
EXPECTED_ROWS = {"blazedit": 3, "mt-bench": 4, "instructcoder": 3}  # 3 Blazedit rows in 0.01-0.25; MT-Bench 3 -> 4


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    return {"llama": target_folder(root, "llama"), "qwen3": target_folder(root, "qwen3", seed=1),
            "data": datasets_on_disk(root), "root": root}


def local_argv(line: str, study: dict, family: str, out: Path) -> list[str]:
    """The PR's line with --dataset-path pointing at the local copy, smaller sizes, and --model-dir (and --eagle-dir
    for a method with a head)."""
    argv = shlex.split(line)
    for i, tok in enumerate(argv[:-1]):
        if tok == "--dataset-path":
            argv[i + 1] = str(study["data"][HUB_TO_LOCAL[argv[i + 1]]])
        elif tok in SIZES:
            argv[i + 1] = SIZES[tok].get(argv[i + 1], argv[i + 1])
    method = argv[argv.index("--method") + 1]
    kind = "eagle3" if method.endswith("eagle3") else "eagle1"
    head = ["--eagle-dir", str(study["root"] / f"{family}-{kind}")] if "eagle" in method else []  # ngram: none
    return [*argv, "--model-dir", str(study[family]), *head, "--output-len", str(OUT_LEN), "--device", "cpu",
            "--dtype", "fp32", "--check-lossless", "--output", str(out)]


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_pr_command_lines_are_lossless(study, family, capsys):
    runs = study["root"] / f"runs-{family}"
    for n, line in enumerate(PR_LINES):
        out = runs / f"{n}.jsonl"
        spec_bench.main(local_argv(line, study, family, out))
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        kind = HUB_TO_LOCAL[shlex.split(line)[shlex.split(line).index("--dataset-path") + 1]]
        assert len(rows) == EXPECTED_ROWS[kind], line
        assert {r["dataset"] for r in rows} == {kind}
        assert all(r["lossless"] for r in rows), [r["example_id"] for r in rows if not r["lossless"]]
        assert all(1 <= r["stats"]["num_tokens"] <= OUT_LEN for r in rows)
        assert all(r["run_info"]["load_s"] > 0 and r["run_info"]["peak_mem_gb"] > 0 for r in rows)
        cfg = rows[0]["config"]
        assert cfg["model"] == str(study[family]) and cfg["dtype"] == "fp32" and cfg["output_len"] == OUT_LEN
        if "ngram-eagle" in line:
            assert cfg["k"]["ngram"] == 5 and cfg["k"]["eagle3" if "eagle3" in line else "eagle"] == 3
    err = capsys.readouterr()
    assert "--num-prompts 90 but the dataset has 3 prompts" in err.err  # --no-oversample says so, once a line
    assert "--- " in err.out  # --print-output
    ids = [json.loads(x)["example_id"] for x in (runs / "3.jsonl").read_text().splitlines()]
    first = [e.id for e in data.load_hf(str(study["data"]["mt-bench"]), shuffle_seed=0)]  # vLLM's stream order
    assert sorted(first) == ["81", "82", "83"]  # MT-Bench oversampled to --num-prompts 4, as vLLM does:
    assert ids == first + [random.Random(0).choice(first) + "#2"]  # random.seed(seed), random.choice
    study[f"runs-{family}"] = runs


def test_loader_one_bos_eos_from_generation_config_dtype(study):
    t = checkpoint.load_target(study["llama"], dtype="auto")
    assert t.eos_ids == sorted([EOT, END_OF_TEXT])  # both, from generation_config.json
    assert t.dtype == "fp32" and next(t.model.parameters()).dtype == torch.float32  # auto on CPU
    ids = prompts.build_prompt_ids(t.tokenizer, "Write a haiku about rain.")
    assert ids[0] == BOS and ids.count(BOS) == 1
    assert checkpoint.torch_dtype("auto", zoo.path("tiny-coder"), "cuda") == torch.bfloat16  # the checkpoint's
    assert checkpoint.resolve("tiny-coder") == zoo.path("tiny-coder")


def test_pr_table(study, capsys):
    if "runs-llama" not in study:
        pytest.skip("needs test_pr_command_lines_are_lossless[llama]")
    pytest.importorskip("pandas")
    from experiments import summarize_runs

    summarize_runs.main([str(study["runs-llama"] / "*.jsonl"), "--table", "pr"])
    out = capsys.readouterr().out
    for word in ("seq_al", "precision_al", "r1", "tpot_ms", "blazedit", "mt-bench", "instructcoder", "ngram-eagle"):
        assert word in out


def test_replay_drafts_the_plain_output(study, tmp_path):
    out = tmp_path / "replay.jsonl"
    spec_bench.main(["--model-dir", str(study["llama"]), "--method", "replay", "--num-spec-tokens", "4",
                     "--dataset-name", "hf", "--dataset-path", str(study["data"]["instructcoder"]), "--output-len",
                     "16", "--device", "cpu", "--check-lossless", "--output", str(out)])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3 and all(r["lossless"] for r in rows)
    for r in rows:  # every drafted token accepted (fp32: the replayed plain output is what the verifier picks)
        st = r["stats"]
        assert st["num_accepted"] == st["num_draft_tokens"] and st["num_drafts"] >= 1


def test_make_checkpoint_folder_runs(tmp_path):
    """make_checkpoint's code path at a tiny shape (the GPU run makes the 8B one): spec_bench reads it from disk."""
    from experiments import make_checkpoint

    small = dict(vocab_size=10240, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=1024)
    info = make_checkpoint.build(tmp_path, 4, "cpu", shape=small)
    cfg = json.loads((tmp_path / "target" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 4 and cfg["rope_parameters"]["rope_type"] == "llama3"
    assert info["params"] > 0 and json.loads((tmp_path / "eagle3" / "config.json").read_text())["draft_vocab_size"] \
        == 10240  # min(vocab, 32000)
    out = tmp_path / "rows.jsonl"
    (tmp_path / "mt_bench.jsonl").write_text('{"question_id": 1, "turns": ["Hi there."]}\n')
    spec_bench.main(["--model-dir", str(tmp_path / "target"), "--eagle-dir", str(tmp_path / "eagle3"),
                     "--method", "ngram-eagle3", "--dataset-name", "mt-bench", "--dataset-path", str(tmp_path),
                     "--output-len", "8", "--device", "cpu", "--check-lossless", "--output", str(out)])
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["lossless"] and row["run_info"]["model_dtype"] == "fp32"


def test_hybrid_al_notebook_renders_on_the_runs(study, monkeypatch):
    """The analysis notebook, pointed at this output folder (plus plain and tree runs) by RESULTS_DIR/MODEL."""
    if not importlib.util.find_spec("seaborn"):  # the kernel imports it, this process need not
        pytest.skip("needs seaborn")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if "runs-llama" not in study:
        pytest.skip("needs test_pr_command_lines_are_lossless[llama]")
    runs = study["runs-llama"]
    extra = {"vanilla": ["--method", "vanilla"],
             "tree": ["--method", "ngram-eagle", "--hybrid-policy", "tree", "--num-speculative-tokens-per-method",
                      '{"ngram": 5, "eagle": 3}', "--eagle-dir", str(study["root"] / "llama-eagle1")]}
    for kind, path in study["data"].items():
        for name, argv in extra.items():
            spec_bench.main([*argv, "--model-dir", str(study["llama"]), "--dataset-name", "hf", "--dataset-path",
                             str(path), "--num-prompts", "3", "--output-len", str(OUT_LEN), "--device", "cpu",
                             "--output", str(runs / f"{kind}__{name}.jsonl")])
    monkeypatch.setenv("RESULTS_DIR", str(runs))
    monkeypatch.setenv("MODEL", str(study["llama"]))
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel imports this checkout's hybridsd
    path = REPO / "notebooks" / "hybrid_al.ipynb"
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {}) for o in outputs)
    shown = " ".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert all(d in shown for d in ("blazedit", "mt-bench", "instructcoder"))  # the run's own datasets


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_bf16_graphs_from_disk(tmp_path):
    """On the GPU: a saved folder in bf16 with CUDA graphs, every method, and the replay row's step timing (the
    project's MT-Bench JSONL layout: no `datasets` needed on the GPU machine)."""
    model = target_folder(tmp_path, "llama")
    (tmp_path / "mt_bench.jsonl").write_text("".join(json.dumps({"question_id": i, "turns": [t]}) + "\n" for i, t in
                                                     enumerate(["Write a haiku about rain.", "What is 2 + 2?"])))
    for method in ("none", "ngram", "eagle3", "ngram-eagle3", "replay"):
        out = tmp_path / f"{method}.jsonl"
        head = ["--eagle-dir", str(tmp_path / "llama-eagle3")] if "eagle" in method else []
        spec_bench.main(["--model-dir", str(model), *head, "--method", method, "--dataset-name", "mt-bench",
                         "--dataset-path", str(tmp_path), "--output-len", "32", "--device", "cuda", "--dtype", "bf16",
                         "--output", str(out)])
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(rows) == 2 and all(r["run_info"]["model_dtype"] == "bf16" for r in rows)
        assert all(r["run_info"]["peak_mem_gb"] > 0 for r in rows)
        if method == "replay":
            assert all(r["replay"]["verify_ms"] > 0 and r["replay"]["predicted_tokens_per_s"] > 0 for r in rows)
