"""experiments.exact_rows: the exact-mode grid's per-mode lines merged into one row per configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.exact_rows import main, merge


def _line(model, k, mode, same, compile_="auto"):
    return {"model": model, "dtype": "torch.bfloat16", "compile": compile_, "drafter": "ngram", "k": k,
            "exact_rows": 16, "prompts": 6, "new_tokens": 48, "torch": "2.11", "device": "H200", mode: same}


def test_merge_joins_modes_and_later_runs_replace_earlier_counts():
    first = [_line("a", 1, "exact_same", "6/6"), _line("a", 1, "nonexact_same", "2/6"),
             _line("a", 3, "exact_same", "6/6"), _line("a", 1, "exact_same", "6/6", compile_=False)]
    second = [_line("a", 3, "nonexact_same", "5/6"), _line("a", 1, "nonexact_same", "4/6")]
    rows = merge([(first, {"commit": "c1"}), (second, {"commit": "c2"})])
    assert [(r["compile"], r["k"]) for r in rows] == [("auto", 1), ("auto", 3), (False, 1)]  # first appearance
    assert rows[0]["exact_same"] == "6/6" and rows[0]["nonexact_same"] == "4/6"  # replaced by the later run
    assert rows[0]["run_info"] == {"exact_same": {"commit": "c1", "device": "H200", "torch": "2.11"},
                                   "nonexact_same": {"commit": "c2", "device": "H200", "torch": "2.11"}}
    assert list(rows[2]["run_info"]) == ["exact_same"] and "nonexact_same" not in rows[2]
    assert list(rows[0])[-1] == "run_info"


def test_a_rows_modes_keep_their_own_machines():
    """Each mode's machine is in its run_info; the row itself names none (its modes may have run on two)."""
    h100 = dict(_line("a", 1, "nonexact_same", "3/6"), device="H100", torch="2.11")
    [row] = merge([([_line("a", 1, "exact_same", "6/6")], {"commit": "c1"}), ([h100], {"commit": "c2"})])
    assert row["run_info"]["exact_same"]["device"] == "H200" and row["run_info"]["nonexact_same"]["device"] == "H100"
    assert "device" not in row and "torch" not in row


def test_a_results_file_keeps_its_provenance_and_one_mode_can_be_taken(tmp_path):
    """An earlier results file as a run: its rows keep their run_info (a single one, as rows were written before,
    or one per mode); ``FILE:mode`` keeps that mode's counts only, so one mode is measured anew and the other kept."""
    old = dict(_line("a", 1, "exact_same", "5/6"), nonexact_same="2/6",
               run_info={"commit": "old", "device": "H200", "torch": "2.11"})
    results, grid = tmp_path / "exact_match.jsonl", tmp_path / "grid.jsonl"
    results.write_text(json.dumps(old) + "\n")
    grid.write_text(json.dumps(_line("a", 1, "exact_same", "6/6")) + "\n")
    out = tmp_path / "out.jsonl"
    main(["--run", f"{results}:nonexact_same", "unused", "unused", "--run", str(grid), "new", "pytest",
          "--out", str(out), "--date", "2026-12-02"])
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["exact_same"] == "6/6" and row["nonexact_same"] == "2/6"
    assert row["run_info"]["nonexact_same"]["commit"] == "old" and row["run_info"]["exact_same"]["commit"] == "new"
    main(["--run", str(out), "x", "x", "--out", str(tmp_path / "again.jsonl")])  # per-mode run_info read back
    assert json.loads((tmp_path / "again.jsonl").read_text()) == row


def test_each_modes_acceptance_travels_with_its_count(tmp_path):
    """A mode's accepted and drafted tokens come and go with its count: a run that measures a mode anew replaces
    them (or drops them, if it has none), and taking one mode of a file leaves the other's behind."""
    first = dict(_line("a", 1, "exact_same", "6/6"), exact_accepted={"ngram": 40}, exact_drafted=90,
                 nonexact_same="5/6", nonexact_accepted={"ngram": 38}, nonexact_drafted=88)
    [row] = merge([([first], {"commit": "c1"}), ([_line("a", 1, "exact_same", "6/6")], {"commit": "c2"})])
    assert "exact_accepted" not in row and "exact_drafted" not in row  # the newer exact run recorded none
    assert row["nonexact_accepted"] == {"ngram": 38} and row["nonexact_drafted"] == 88
    grid = tmp_path / "grid.jsonl"
    grid.write_text(json.dumps(first) + "\n")
    out = tmp_path / "out.jsonl"
    main(["--run", f"{grid}:nonexact_same", "c3", "pytest", "--out", str(out)])
    row = json.loads(out.read_text())
    assert row["nonexact_accepted"] == {"ngram": 38} and row["exact_rows"] == 16
    assert not {"exact_same", "exact_accepted", "exact_drafted"} & set(row)


def test_cli_writes_the_merged_file(tmp_path):
    run = tmp_path / "grid.jsonl"
    run.write_text("".join(json.dumps(x) + "\n" for x in (_line("a", 1, "exact_same", "6/6"),
                                                            _line("a", 1, "nonexact_same", "3/6"))))
    out = tmp_path / "exact_match.jsonl"
    main(["--run", str(run), "abc1234", "pytest -k exact_mode", "--out", str(out), "--date", "2026-12-01"])
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["exact_same"] == "6/6" and row["nonexact_same"] == "3/6"
    info = {"commit": "abc1234", "date": "2026-12-01", "command": "pytest -k exact_mode", "device": "H200",
            "torch": "2.11"}
    assert row["run_info"] == {"exact_same": info, "nonexact_same": info}


def test_cli_names_a_missing_file_or_a_bad_line_and_exits_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_line("a", 1, "exact_same", "6/6")) + "\n" + json.dumps({"model": "a"}) + "\n")
    out = tmp_path / "out.jsonl"
    for path, expect in ((tmp_path / "missing.jsonl", "missing.jsonl"), (bad, "bad.jsonl:2")):
        r = subprocess.run([sys.executable, "-m", "experiments.exact_rows", "--run", str(path), "c", "cmd",
                            "--out", str(out)], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[1])
        assert r.returncode == 2 and expect in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not out.exists()


def test_a_file_named_like_a_mode_is_a_file_and_a_run_adding_nothing_is_refused(tmp_path, capsys):
    """``FILE:mode`` splits at the colon only; a run with no line (of its mode), or whose file is missing, is one
    error line, nothing written."""
    named = tmp_path / "grid_exact_same"
    named.write_text(json.dumps(_line("a", 1, "exact_same", "6/6")) + "\n")
    out = tmp_path / "out.jsonl"
    main(["--run", str(named), "c", "cmd", "--out", str(out)])
    assert json.loads(out.read_text())["exact_same"] == "6/6"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    for spec in (f"{named}:nonexact_same", str(empty)):
        with pytest.raises(SystemExit) as e:
            main(["--run", spec, "c", "cmd", "--out", str(tmp_path / "other.jsonl")])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and f"--run {spec}: no grid line" in err[0], err
        assert not (tmp_path / "other.jsonl").exists()
    missing = tmp_path / "nowhere.jsonl"  # a path that names no file: the flag and the path
    with pytest.raises(SystemExit) as e:
        main(["--run", f"{missing}:exact_same", "c", "cmd", "--out", str(tmp_path / "other.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].endswith(f"error: --run {missing}:exact_same: no file {missing}"), err


@pytest.mark.parametrize("change, words", [
    ({"run_info": "x"}, "run_info must be"),
    ({"run_info": {"nonexact_same": {"commit": "c"}}, "device": None}, "missing ['device']"),
    ({"exact_same": "abc"}, "exact_same must be"), ({"exact_same": -5}, "exact_same must be"),
    ({"exact_same": "7/6"}, "exact_same must be"), ({"exact_drafted": -1}, "exact_drafted must be"),
    ({"exact_accepted": {"ngram": "many"}}, "exact_accepted must be")])
def test_a_bad_line_is_one_error_line_naming_it_and_nothing_is_written(change, words, tmp_path, capsys):
    """A run_info that is not an object, a mode whose run_info and machine are both missing, or a count not of its
    form: one line naming the file and line, exit 2, no results file."""
    line = {k: v for k, v in {**_line("a", 1, "exact_same", "6/6"), **change}.items() if v is not None}
    grid = tmp_path / "grid.jsonl"
    grid.write_text(json.dumps(_line("a", 3, "exact_same", "6/6")) + "\n" + json.dumps(line) + "\n")
    out = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as e:
        main(["--run", str(grid), "c", "cmd", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "grid.jsonl" in err[0] and "2" in err[0], err
    assert words in err[0], err
    assert not out.exists()


def test_a_date_that_is_not_one_is_refused(tmp_path, capsys):
    grid = tmp_path / "grid.jsonl"
    grid.write_text(json.dumps(_line("a", 1, "exact_same", "6/6")) + "\n")
    for date in ("notadate", "2026-13-01", "20261201"):
        with pytest.raises(SystemExit) as e:
            main(["--run", str(grid), "c", "cmd", "--out", str(tmp_path / "out.jsonl"), "--date", date])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and "--date" in err[0] and date in err[0], err
    assert not (tmp_path / "out.jsonl").exists()
