"""experiments.time_edit_data: its output checked before the tokenizer loads or any row is made."""

from __future__ import annotations

import pytest
import transformers

from experiments import time_edit_data


@pytest.mark.parametrize("where, words", [("folder", "is a folder"), ("under_file", "cannot make the folder")])
def test_an_unwritable_out_is_refused_before_any_work(where, words, tmp_path, capsys, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("work began before --out was checked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    monkeypatch.setattr(time_edit_data, "load_edits", refuse)
    (tmp_path / "file").write_text("x")
    out = {"folder": tmp_path, "under_file": tmp_path / "file" / "t.json"}[where]
    with pytest.raises(SystemExit) as e:
        time_edit_data.main(["--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--out" in err[0] and words in err[0], err


@pytest.mark.parametrize("case, words", [
    ("no_data_folder", "data directory {data} not found"), ("folder", "code_edits_dev.jsonl: is a folder"),
    ("not_json", "code_edits_dev.jsonl line 2: not JSON"), ("not_an_edit", "line 1: not a code edit"),
    ("empty", "code_edits_dev.jsonl: no code edits"), ("held_out_only", "no training edits")])
def test_missing_or_bad_edits_are_one_line_before_any_work(case, words, tmp_path, capsys, monkeypatch):
    """A $HYBRIDSD_DATA that is no folder (no other folder is tried), an edits file that is a folder, not JSON
    lines, empty or without a training row: one line naming it, exit 2, before the tokenizer loads."""
    from experiments import edit_corpus

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *a, **k: pytest.fail("work began before the edits were checked"))
    monkeypatch.setattr(edit_corpus, "REPO", tmp_path / "repo")  # no compressed copy in its .cache/
    data = tmp_path / "data"
    data.mkdir()
    edits = data / "code_edits_dev.jsonl"
    row = '{"id": "e1", "repo": "marshmallow-code/marshmallow"}\n'
    {"folder": edits.mkdir, "not_json": lambda: edits.write_text(row + "{not json\n"),
     "not_an_edit": lambda: edits.write_text("[1, 2]\n"), "empty": lambda: edits.write_text(""),
     "held_out_only": lambda: edits.write_text(row)}.get(case, lambda: None)()
    monkeypatch.setenv("HYBRIDSD_DATA", str(tmp_path / "none" if case == "no_data_folder" else data))
    out = tmp_path / "t.json"
    with pytest.raises(SystemExit) as e:
        time_edit_data.main(["--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and words.format(data=tmp_path / "none") in err[0], err
    assert not out.exists()
