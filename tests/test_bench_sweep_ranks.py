"""experiments.bench_sweep_ranks: every run's rows compared with the one-process run's."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments import bench_sweep_ranks


def test_rows_are_compared_with_the_one_process_run_even_when_it_has_none(tmp_path, monkeypatch):
    """The one-process run stays the reference with no rows: a later run's rows are not compared with themselves."""
    def fake_run(cmd, **kw):
        out_dir = Path(cmd[cmd.index("--out-dir") + 1])
        out_dir.mkdir()
        (out_dir / "sweep.json").write_text(json.dumps({"calls": [{"configs": [{"file": "f.jsonl", "seconds": 1}]}]}))
        if out_dir.name == "ranks4":
            (out_dir / "f.jsonl").write_text(json.dumps({"example_id": "a", "tokens": 3, "wall_s": 1.0}) + "\n")
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(bench_sweep_ranks, "subprocess", SimpleNamespace(run=fake_run))
    a = SimpleNamespace(ranks=[1, 4], preset="edit-norm", methods=["none"], extra=[])
    runs = bench_sweep_ranks.time_sweeps(a, tmp_path, {})
    assert runs[0]["rows"] == {"rows": 0, "equal": 0, "missing": 0}
    assert runs[1]["rows"] == {"rows": 0, "equal": 0, "missing": 0}


@pytest.mark.parametrize("args, says", [
    (["--ranks", "1", "4", "4"], "--ranks: distinct counts"),
    (["--", "--dry-run", "--device", "cpu"], "after --: --dry-run: not a sweep option here"),
    (["--", "--per-bin", "4", "--out-dir=x"], "after --: --out-dir=x: not a sweep option here"),
    (["--", "--pre", "edit-norm", "--methods", "none"], "after --: --pre --methods: not a sweep option here"),
    (["--", "-h"], "after --: -h: not a sweep option here"),
])
def test_duplicate_ranks_and_the_tools_own_sweep_options_are_one_line(tmp_path, monkeypatch, capsys, args, says):
    monkeypatch.setattr(bench_sweep_ranks, "time_sweeps", lambda *a: pytest.fail("a sweep ran"))
    out = tmp_path / "b.json"
    argv = ["--ranks", "1", "--methods", "none", "--work-dir", str(tmp_path / "w"), "--out", str(out)]
    with pytest.raises(SystemExit) as e:
        bench_sweep_ranks.main(argv[2:] + args if args[0] == "--ranks" else argv + args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and len(err.splitlines()) == 1
    assert not out.exists() and not (tmp_path / "w").exists()


@pytest.mark.parametrize("extra, says", [
    (["--per-bin", "x"], "the sweep refuses its options: argument --per-bin: invalid int value: 'x'"),
    (["--device", "cuda:99"], "the sweep refuses its options: --device cuda:99: no such CUDA device here"),
])
def test_sweep_options_the_sweep_refuses_are_one_line_before_any_run(tmp_path, monkeypatch, capsys, extra, says):
    """A sweep option after ``--`` that the sweep refuses: one line naming it and exit code 2, before any sweep runs
    or any folder is made (the sweep's own dry run checks them)."""
    monkeypatch.setattr(bench_sweep_ranks, "time_sweeps", lambda *a: pytest.fail("a sweep ran"))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    out = tmp_path / "b.json"
    with pytest.raises(SystemExit) as e:
        bench_sweep_ranks.main(["--ranks", "1", "2", "--methods", "none", "--work-dir", str(tmp_path / "w"),
                                "--out", str(out), "--", *extra])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not out.exists() and not (tmp_path / "w").exists()
