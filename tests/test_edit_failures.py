"""experiments.edit_failures: the kinds of an answer's largest departure from its input, the requested lines,
the miss rules (those of zoo_gate.misses) and the command line on a hand-made sweep folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import edit_failures as ef
from experiments.zoo_gate import misses, spearman
from tests.test_results import row, write

REPO = Path(__file__).resolve().parents[1]
FILE = [f"line {i}" for i in range(12)]


@pytest.mark.parametrize("answer,kind,span", [
    (FILE[:5], "end early", (5, 12, 5, 5)),                                           # stops after 5 lines
    (FILE[:3] + FILE[9:], "skipped copy", (3, 9, 3, 3)),                              # drops lines 3-8
    (FILE[:6] + FILE[1:5] + FILE[6:], "repeated copy", (6, 6, 6, 10)),                # copies 1-4 again
    (FILE[:6] + ["new a", "new b", "new c", "new d"] + FILE[6:], "new text", (6, 6, 6, 10)),
    (FILE[:6] + ["x", "y"] + FILE[8:], "rewrite", (6, 8, 6, 8)),                      # two lines for two
])
def test_departure_names_the_largest_change(answer, kind, span):
    assert ef.departure(FILE, answer) == (kind, *span)


def test_departure_of_a_copy_is_none_and_the_largest_change_wins():
    assert ef.departure(FILE, list(FILE)) is None
    small_rewrite_then_skip = ["other"] + FILE[1:4] + FILE[10:]  # one line rewritten, lines 4-9 skipped
    assert ef.departure(FILE, small_rewrite_then_skip)[0] == "skipped copy"


def test_requested_lines_cover_replaced_deleted_and_both_sides_of_insertions():
    after = FILE[:2] + ["changed"] + FILE[3:7] + ["inserted"] + FILE[7:10]  # 2 replaced, insert at 7, 10-11 cut
    assert ef.requested_lines(FILE, after) == {2, 6, 7, 10, 11}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 0.8), st.floats(0, 1)), min_size=3, max_size=40))
def test_miss_labels_and_summary_agree_with_zoo_gate_misses(norms):
    """Over and under by the gate's rules, and the correlation without them as misses() computes it."""
    ref, out = (np.array(v, dtype=float) for v in zip(*norms))
    samples = [{"ref_norm": r, "out_norm": o, "miss": m} for r, o, m in zip(ref, out, ef.miss_labels(ref, out))]
    m, s = misses({"samples": samples}), ef.summarize(samples)
    assert (s["over"], s["under"]) == (m["long"], m["short"])
    for a, b in ((s["rho"], m["rho"]), (s["rho_without_over"], m["rho_without_long"]),
                 (s["rho_without_both"], m["rho_without_both"])):
        assert a == b or (np.isnan(a) and np.isnan(b))


def test_summarize_counts_kinds_and_sets_their_norms_to_the_references():
    before = "\n".join(FILE)
    after = "\n".join(FILE[:6] + ["asked"] + FILE[7:])  # the reference changes line 6
    answers = ["\n".join(FILE[:2]),                                             # ends early at line 2: elsewhere
               "\n".join(FILE[:6] + ["n1", "n2", "n3", "n4", "n5"] + FILE[7:]),  # new text at line 6: requested
               after]
    ref, out = np.array([0.05, 0.05, 0.3]), np.array([0.6, 0.4, 0.3])
    labels = ef.miss_labels(ref, out)
    assert labels == ["over", "over", None]
    samples = [{"ref_norm": r, "out_norm": o, "miss": m, **(ef.classify(before, after, a) if m == "over" else {})}
               for a, r, o, m in zip(answers, ref, out, labels)]
    assert [(s.get("kind"), s.get("at_request")) for s in samples] == [
        ("end early", False), ("new text", True), (None, None)]
    assert ef.classify(before, after, before) == {"kind": None, "at_request": None, "at_twin": None, "removed": 0,
                                                  "added": 0}
    s = ef.summarize(samples)
    assert s["over_kinds"]["end early"] == {"n": 1, "at_request": 0, "elsewhere": 1,
                                            "rho_without": spearman([0.05, 0.05, 0.3], [0.05, 0.4, 0.3])}
    assert s["over_kinds"]["new text"]["at_request"] == 1 and s["over_kinds"]["rewrite"]["n"] == 0


def test_anchor_twins_are_the_other_lines_quoted_like_an_anchor():
    before = "".join(f"{line}\n" for line in ["def a():", "    x = 1", "    return x", "", "def b():", "    y = 2",
                                                "    return x", "z = 3"])
    after = before.replace("    y = 2\n", "    y = 20\n")  # place: line 5, below `def b():`, above `return x`
    assert ef.anchor_twins(before, after) == ([], [2])  # `return x` (line 6) has a twin at line 2
    after_z = before.replace("z = 3\n", "z = 30\n")  # place: line 7, below the twin `return x`
    assert ef.anchor_twins(before, after_z) == ([2], [])


@pytest.mark.parametrize("answer_at,at_request,at_twin", [
    (3, False, True),      # new lines after the first `return x`, the anchor's twin
    (1, False, False),     # new lines far from both
    (8, True, False),      # new lines at the requested place, after the anchor itself
])
def test_classify_places_a_departure_below_a_twin_of_the_anchor(answer_at, at_request, at_twin):
    lines = ["def a():", "    x = 1", "    return x", "", "", "", "def b():", "    return x", "z = 3"]
    before = "".join(f"{line}\n" for line in lines)
    after = before.replace("z = 3\n", "z = 30\n")  # asks after the second `return x` (line 7)
    answer = lines[:answer_at] + ["new a", "new b", "new c", "new d"] + lines[answer_at:]
    c = ef.classify(before, after, "\n".join(answer), near=1)
    assert (c["kind"], c["at_request"], c["at_twin"]) == ("new text", at_request, at_twin)


@pytest.fixture
def sweep(tmp_path):
    """A data folder of three code edits and a sweep folder of their plain answers, tokenized by tiny-coder's."""
    from experiments.edit_failures import tokenizer_of

    tok = tokenizer_of("tiny-coder")
    before = "\n".join(FILE) + "\n"
    edits = [("e0", "\n".join(FILE[:6] + ["asked"] + FILE[7:]) + "\n", 0.05, "\n".join(FILE[:2]) + "\n", 0.6),
             ("e1", "\n".join(FILE[:6] + ["asked"] + FILE[7:]) + "\n", 0.05, before, 0.0),
             ("e2", "\n".join(FILE[:3]) + "\n", 0.4, "\n".join(FILE[:3]) + "\n", 0.4)]
    data = tmp_path / "data"
    data.mkdir()
    (data / "code_edits_dev.jsonl").write_text("".join(json.dumps(
        {"id": i, "instruction": "Change it", "before": before, "after": a, "char_edit_norm": r}) + "\n"
        for i, a, r, _, _ in edits))
    folder = tmp_path / "sweep"
    folder.mkdir()
    write(folder / "code-edits__none.jsonl", [row("none", i, 5, 5, ref=r, out_e=o, output=tok.encode(
        ans, add_special_tokens=False)) for i, _, r, ans, o in edits])
    return data, folder


def test_cli_writes_the_analysis(sweep, tmp_path):
    data, folder = sweep
    out = tmp_path / "failures.json"
    proc = subprocess.run([sys.executable, "-m", "experiments.edit_failures", str(folder), "--data-dir", str(data),
                           "--out", str(out), "--bins", "2"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["model"] == "tiny-coder" and doc["command"].startswith("python -m experiments.edit_failures")
    assert [(s["id"], s["miss"], s.get("kind")) for s in doc["samples"]] == [
        ("e0", "over", "end early"), ("e1", "under", None), ("e2", None, None)]  # e1: the input copied
    assert sum(g["n"] for g in doc["by_input_quarter"]) == 3
    assert [s["twinned"] for s in doc["samples"]] == [False] * 3 and doc["all"]["over_at_twin"] == 0
    assert (doc["all"]["over"], doc["all"]["under"]) == (1, 1) and [b["n"] for b in doc["by_ref_bin"]] == [2, 1]
    assert "1 over-edited" in proc.stdout


@pytest.mark.parametrize("case", ["no folder", "no plain rows", "no data"])
def test_cli_bad_input_is_one_line_and_exit_2(sweep, tmp_path, case):
    data, folder = sweep
    if case == "no folder":
        folder = tmp_path / "absent"
    elif case == "no plain rows":
        (folder / "code-edits__none.jsonl").rename(folder / "code-edits__ngram__pr.jsonl")
    else:
        data = tmp_path / "empty"
        data.mkdir()
    proc = subprocess.run([sys.executable, "-m", "experiments.edit_failures", str(folder), "--data-dir", str(data),
                           "--out", str(tmp_path / "f.json")], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "error" in proc.stderr
    assert not (tmp_path / "f.json").exists()


@pytest.mark.parametrize("case, words", [
    ("no such model", "code-edits__none.jsonl: the rows' model /tmp/x/nomodel: no tokenizer found"),
    ("empty rows", "code-edits__none.jsonl: holds no rows")])
def test_rows_naming_no_model_or_none_are_one_line_naming_the_file(sweep, tmp_path, capsys, case, words):
    """Rows whose model cannot be found, and an empty file of plain rows: one line naming the file (and the model),
    exit code 2, nothing written."""
    data, folder = sweep
    rows = folder / "code-edits__none.jsonl"
    if case == "no such model":
        lines = [json.loads(line) for line in rows.read_text().splitlines()]
        for r in lines:
            r["config"]["model"] = "/tmp/x/nomodel"
        rows.write_text("".join(json.dumps(r) + "\n" for r in lines))
    else:
        rows.write_text("")
    with pytest.raises(SystemExit) as exit_:
        ef.main([str(folder), "--data-dir", str(data), "--out", str(tmp_path / "f.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert "error: " in err[0] and words in err[0] and not (tmp_path / "f.json").exists()


@pytest.mark.parametrize("case, words", [
    ("beside its gz copy", "holds prompt 'e0' more than once in config none-prefer-ngram-single-None"),
    ("two configs", "rows of 2 configs"),
    ("files of a run", None)])
def test_plain_rows_are_those_of_one_run_each_once(sweep, tmp_path, capsys, case, words):
    """The plain rows are code-edits__none.jsonl's or its .gz copy's: both beside each other (a prompt twice), or
    rows of two configs, are one line naming them and exit code 2; the files a run keeps beside its output (a
    damaged lines' copy, a shard, the lock) are not read."""
    import gzip

    data, folder = sweep
    rows = folder / "code-edits__none.jsonl"
    if case == "beside its gz copy":
        (folder / "code-edits__none.jsonl.gz").write_bytes(gzip.compress(rows.read_bytes()))
    elif case == "two configs":
        other = json.loads(rows.read_text().splitlines()[0]) | {"config_key": "other"}
        rows.write_text(rows.read_text() + json.dumps(other) + "\n")
    else:
        for name in ("code-edits__none.jsonl.damaged", "code-edits__none.jsonl.rank0.part"):
            (folder / name).write_text("not json\n" + rows.read_text())
        (folder / "code-edits__none.jsonl.lock").write_text("")
    argv = [str(folder), "--data-dir", str(data), "--out", str(tmp_path / "f.json"), "--bins", "2"]
    if words is None:
        ef.main(argv)
        assert json.loads((tmp_path / "f.json").read_text())["all"]["n"] == 3
        return
    with pytest.raises(SystemExit) as exit_:
        ef.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "f.json").exists()
