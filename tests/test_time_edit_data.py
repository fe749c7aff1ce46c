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
