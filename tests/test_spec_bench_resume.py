"""spec_bench's results files across reruns: the local data a run reads is part of its rows' config key (other data
at the same path is not taken as done), and rows are standard JSON that experiments.results reads as before."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest

from experiments import results, spec_bench
from hybridsd.data import load_hf

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--method", "none", "--device", "cpu", "--dtype", "fp32", "--output-len", "2"]


def _questions(path: Path, turns: dict[int, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"question_id": i, "turns": [t]}) + "\n" for i, t in turns.items()))
    return path


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_other_local_data_at_the_same_path_is_not_taken_as_done(tmp_path, monkeypatch):
    """One relative --dataset-path in two folders, then a data folder's file changed in place: each run writes its
    own prompts' rows under its own key, none skipped as done nor filed under the other data's key."""
    out = tmp_path / "hf.jsonl"
    for name, turns in (("a", {1: "Write a haiku about rain.", 2: "What is 2 + 2?"}),
                        ("b", {1: "Explain TCP slow start."})):
        _questions(tmp_path / name / "q.jsonl", turns)
        monkeypatch.chdir(tmp_path / name)
        spec_bench.main([*ARGS, "--dataset-name", "hf", "--dataset-path", "q.jsonl", "--output", str(out)])
    rows = _rows(out)
    assert [r["example_id"] for r in rows] == ["1", "2", "1"]
    assert rows[0]["config_key"] == rows[1]["config_key"] != rows[2]["config_key"]

    out, folder = tmp_path / "mt.jsonl", tmp_path / "own"
    argv = [*ARGS, "--dataset-name", "mt-bench", "--dataset-path", str(folder), "--output", str(out)]
    _questions(folder / "mt_bench.jsonl", {1: "Write a haiku about rain."})
    spec_bench.main(argv)
    _questions(folder / "mt_bench.jsonl", {1: "Explain TCP slow start.", 9: "Say hi."})
    spec_bench.main(argv)
    rows = _rows(out)
    assert [r["example_id"] for r in rows] == ["1", "1", "9"]
    assert rows[0]["config_key"] != rows[1]["config_key"] == rows[2]["config_key"]
    assert rows[0]["config"]["dataset_digest"] != rows[1]["config"]["dataset_digest"]


def test_the_key_follows_the_data_not_its_place(tmp_path, monkeypatch):
    """A copy of the data elsewhere keeps the key (a rerun from it resumes); the default data folder and a Hub id
    add nothing to it, so the recorded results keep theirs."""
    made = []
    monkeypatch.setattr(spec_bench, "run", lambda cfg, *a, **kw: made.append(cfg) or 0)
    _questions(tmp_path / "a" / "mt_bench.jsonl", {1: "Write a haiku about rain."})
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for folder in ("a", "b"):
        spec_bench.main([*ARGS, "--dataset-name", "mt-bench", "--dataset-path", str(tmp_path / folder),
                         "--output", str(tmp_path / "o.jsonl")])
    assert made[0].key() == made[1].key() and made[0].dataset_digest is not None

    spec_bench.main([*ARGS, "--dataset-name", "mt-bench", "--num-prompts", "1", "--output", str(tmp_path / "o.jsonl")])
    assert made[2].dataset_digest is None
    recorded = _rows(REPO / "experiments/results/trees/zoo_cpu_fp32/mt-bench__ngram.jsonl")[0]
    assert spec_bench.BenchConfig(**recorded["config"]).key() == recorded["config_key"]
    assert spec_bench.BenchConfig(dataset_name="hf", dataset_path="nobody/data").dataset_digest is None


def test_hub_datasets_take_their_prompts_as_vllm_shuffles_them(tmp_path, monkeypatch):
    """--dataset-name hf takes the first --num-prompts of the rows as vLLM's benchmarks stream them, shuffled with
    --seed; --disable-shuffle takes them in the dataset's order, under the key such rows had before the shuffle."""
    ran = []
    monkeypatch.setattr(spec_bench, "run", lambda cfg, examples, *a, **kw: ran.append((cfg, examples)) or 0)
    data = _questions(tmp_path / "q.jsonl", {i: f"Question {i}?" for i in range(40)})
    argv = [*ARGS, "--dataset-name", "hf", "--dataset-path", str(data), "--num-prompts", "5",
            "--output", str(tmp_path / "o.jsonl")]
    for extra in ([], ["--seed", "1"], ["--disable-shuffle"]):
        spec_bench.main([*argv, *extra])
    (shuffled, a), (other, b), (plain, c) = ran
    assert [e.id for e in c] == ["0", "1", "2", "3", "4"] and plain.hf_shuffle is None
    assert shuffled.hf_shuffle is True and shuffled.key() != plain.key()
    assert [e.id for e in a] == [e.id for e in load_hf(str(data), shuffle_seed=0)][:5] != [e.id for e in c]
    assert [e.id for e in b] != [e.id for e in a]
    old = {k: v for k, v in plain.__dict__.items() if k != "hf_shuffle"}  # a row written before the field
    assert spec_bench.BenchConfig(**old).key() == plain.key()

    small = _questions(tmp_path / "small.jsonl", {1: "Hi?", 2: "Why?"})  # 2 prompts, 9 asked: 7 drawn as vLLM draws
    spec_bench.main([*ARGS, "--dataset-name", "hf", "--dataset-path", str(small), "--num-prompts", "9",
                     "--disable-shuffle", "--seed", "3", "--output", str(tmp_path / "o.jsonl")])
    ids = [e.id for e in ran[-1][1]]
    rng = random.Random(3)  # vLLM: random.seed(seed), then random.choice once per missing prompt
    drawn = [rng.choice(["1", "2"]) for _ in range(7)]
    assert ids[:2] == ["1", "2"] and [i.split("#")[0] for i in ids[2:]] == drawn
    assert ids[2:] == [f"{d}#{drawn[: j + 1].count(d) + 1}" for j, d in enumerate(drawn)]  # each repeat numbered


def test_oversampled_ids_pass_over_the_datasets_own(tmp_path, monkeypatch):
    """A dataset whose ids look like repeats ("5#2") keeps them, and the repeats drawn get the next free number:
    every prompt of the run has its own id (rows are keyed and resumed by it)."""
    ran = []
    monkeypatch.setattr(spec_bench, "run", lambda cfg, examples, *a, **kw: ran.append(examples) or 0)
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"question_id": q, "turns": ["Hi?"]}) + "\n" for q in ("5#2", "5", "5#3")))
    spec_bench.main([*ARGS, "--dataset-name", "hf", "--dataset-path", str(data), "--num-prompts", "8",
                     "--disable-shuffle", "--output", str(tmp_path / "o.jsonl")])
    ids = [e.id for e in ran[-1]]
    assert ids[:3] == ["5#2", "5", "5#3"] and len(set(ids)) == len(ids) == 8


def test_rows_are_standard_json_and_read_back_as_nan(tmp_path):
    """MT-Bench has no edit norm and plain decoding no precision AL: null in the row, not a bare NaN (not JSON);
    experiments.results reads them as NaN, and still reads the NaN of files written before."""
    out = tmp_path / "mt.jsonl"
    spec_bench.main([*ARGS, "--dataset-name", "mt-bench", "--num-prompts", "2", "--output", str(out)])

    def strict(line: str) -> dict:
        return json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))

    rows = [strict(line) for line in out.read_text().splitlines()]
    assert [(r["ref_edit_norm"], r["output_edit_norm"], r["stats"]["precision_al"]) for r in rows] == [(None,) * 3] * 2
    old = tmp_path / "old.jsonl"
    old.write_text(out.read_text().replace('"ref_edit_norm": null', '"ref_edit_norm": NaN'))
    assert "NaN" in old.read_text()
    for path in (out, old):
        df = results.load_runs(str(path))
        assert len(df) == 2 and df.ref_edit_norm.dtype == float and df.ref_edit_norm.isna().all()
        assert df.output_edit_norm.dtype == float  # no input to edit: null, read as NaN
        (al,) = results.corpus_al(df).itertuples()
        assert al.n == 2 and math.isnan(al.mean_ref_edit_norm) and math.isnan(al.precision_al)
        assert results.bin_edit_norm(df).bin.isna().all()


def test_finite_replaces_nan_and_infinity_at_any_depth():
    row = {"a": math.nan, "b": [1.5, math.inf, {"c": -math.inf}], "d": (math.nan, 2), "e": "NaN", "f": 3}
    assert spec_bench.finite(row) == {"a": None, "b": [1.5, None, {"c": None}], "d": [None, 2], "e": "NaN", "f": 3}


def test_the_default_data_folder_enters_the_key_unless_it_holds_the_projects_sets(tmp_path, monkeypatch):
    """$HYBRIDSD_DATA pointing at other data gives other keys (a resume does not take their prompts as done); the
    project's own sets, wherever they lie, give the key the committed results have."""
    made = []
    monkeypatch.setattr(spec_bench, "run", lambda cfg, *a, **kw: made.append(cfg) or 0)
    argv = [*ARGS, "--dataset-name", "mt-bench", "--output", str(tmp_path / "o.jsonl")]
    project = spec_bench.data.default_data_dir() / "mt_bench.jsonl"
    for name, turns in (("a", {1: "Write a haiku about rain."}), ("b", {1: "Explain TCP slow start."})):
        monkeypatch.setenv("HYBRIDSD_DATA", str(_questions(tmp_path / name / "mt_bench.jsonl", turns).parent))
        spec_bench.main(argv)
    shutil.copy(project, tmp_path / "mt_bench.jsonl")
    spec_bench.main([*argv, "--dataset-path", str(tmp_path)])
    monkeypatch.delenv("HYBRIDSD_DATA")
    monkeypatch.setattr(spec_bench.data, "default_data_dir", lambda: project.parent)
    spec_bench.main(argv)
    a, b, copy, default = made
    assert None not in (a.dataset_digest, b.dataset_digest) and len({a.key(), b.key(), default.key()}) == 3
    assert copy.dataset_digest is default.dataset_digest is None and copy.key() == default.key()
    assert spec_bench.data_digest("mt-bench", None) is None  # the project's data as the tests find it


def test_a_resume_says_which_rows_it_made_and_which_were_there(tmp_path, capsys):
    """A rerun after a killed sharded run merges the shard it left: the last line counts the rows this run made
    apart from those merged and those already in the file."""
    out = tmp_path / "mt.jsonl"
    argv = [*ARGS, "--dataset-name", "mt-bench", "--output", str(out)]
    spec_bench.main([*argv, "--num-prompts", "2"])
    out.rename(out.with_name(out.name + ".rank1.part"))  # what a killed 2-rank run leaves
    capsys.readouterr()
    spec_bench.main([*argv, "--num-prompts", "3"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"wrote 1 new row to {out} (2 merged from an earlier run's shards)")
    assert len(_rows(out)) == 3
    spec_bench.main([*argv, "--num-prompts", "4"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"wrote 1 new row to {out} (3 there before)"


def test_rows_counted_as_there_are_this_runs_own(tmp_path, capsys):
    """Rows of another config, or of prompts this run does not ask for, in the same file are not counted as there
    before: the count is of this run's rows that it did not make again."""
    out = tmp_path / "mt.jsonl"
    argv = [*ARGS, "--dataset-name", "mt-bench", "--output", str(out)]
    spec_bench.main([*argv, "--num-prompts", "3"])
    capsys.readouterr()
    spec_bench.main([*argv, "--num-prompts", "2", "--seed", "1"])  # another config's rows beside the first's
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"wrote 2 new rows to {out}"
    spec_bench.main([*argv, "--num-prompts", "2"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"wrote 0 new rows to {out} (2 there before)"
    assert len(_rows(out)) == 5


def test_rows_counted_as_there_are_those_found_under_the_lock(tmp_path, capsys, monkeypatch):
    """Rows another run finished after this one read its prompts, but before it took the lock, are counted as there
    before (and not made again)."""
    out = tmp_path / "mt.jsonl"
    argv = [*ARGS, "--dataset-name", "mt-bench", "--output", str(out)]
    spec_bench.main([*argv, "--num-prompts", "2"])
    rows = out.read_text()
    out.write_text(rows.splitlines(keepends=True)[0])
    real_run = spec_bench.run

    def late_rows_then_run(*a, **kw):  # the other run's second row lands before this run takes the lock
        out.write_text(rows)
        return real_run(*a, **kw)

    monkeypatch.setattr(spec_bench, "run", late_rows_then_run)
    capsys.readouterr()
    spec_bench.main([*argv, "--num-prompts", "3"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"wrote 1 new row to {out} (2 there before)"
    assert len(_rows(out)) == 3


def test_a_second_run_on_the_same_output_stops_at_once(tmp_path, capsys):
    """While a run holds the output's lock another run on it is one line and exit code 2, before the model is
    loaded; the lock goes with the run (its file too)."""
    from experiments import distributed as dp

    out = tmp_path / "runs" / "mt.jsonl"
    argv = [*ARGS, "--dataset-name", "mt-bench", "--num-prompts", "1", "--output", str(out)]
    with dp.exclusive(out):
        with pytest.raises(SystemExit) as e:
            spec_bench.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    want = f"spec_bench: error: {out}: another run is writing it (it holds mt.jsonl.lock); wait for it or stop it"
    assert e.value.code == 2 and err == [want], err
    assert not out.exists()
    spec_bench.main(argv)
    assert len(_rows(out)) == 1 and sorted(p.name for p in out.parent.iterdir()) == ["mt.jsonl"]
