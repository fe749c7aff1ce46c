"""experiments.train_tokenizer on a tiny corpus (the stdlib's json package): bad input refused before any work, the
record saying what it was trained on and where, and a killed run leaving the folder's old tokenizer whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA_DIR
from transformers import PreTrainedTokenizerFast

from experiments import train_tokenizer as tt

FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "tokenizer_training.json")


@pytest.fixture
def tiny_corpus(monkeypatch):
    """The stdlib's json package as the only source root."""
    monkeypatch.setattr(tt, "source_roots", lambda: [Path(json.__file__).parent])


class Killed(BaseException):
    """A kill: not an Exception, so nothing on the way catches it."""


def _run(out, *argv):
    tt.main(["--smoke", "--out", str(out), "--mt-bench", str(DATA_DIR / "mt_bench.jsonl"), *argv])


@pytest.mark.parametrize("case, flag", [("out_under_a_file", "--out"), ("no_mt_bench", "--mt-bench")])
def test_bad_input_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, case, flag):
    monkeypatch.setattr(tt, "source_roots", lambda: pytest.fail("work began before the input was checked"))
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "tok" if case == "out_under_a_file" else tmp_path / "tok"
    with pytest.raises(SystemExit) as e:
        _run(out, *(["--mt-bench", str(tmp_path / "none.jsonl")] if case == "no_mt_bench" else []))
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and flag in err[0] and "Traceback" not in err[0], err


@pytest.mark.parametrize("content, words", [
    (b'{"question_id": 1, "turns": ["a"]}\n{"question_id": 2, "turns": ["b"\n', "line 2 is not valid JSON"),
    (b'{"question_id": 1, "category": "writing"}\n', "line 1: the row has no field 'turns'"),
    (b'{"question_id": 1, "turns": ["caf\xe9"]}\n', "line 1 is not UTF-8"),
    (b'{"question_id": 1, "turns": ["a", 2]}\n', "question 1: its turns and references must be"),
    (b'{"question_id": 1, "turns": ["a"], "reference": 3}\n', "question 1: its turns and references must be")])
def test_mt_bench_questions_that_are_not_are_one_line_before_the_scan(tmp_path, capsys, monkeypatch, content, words):
    """``--mt-bench`` rows that are not JSON, lack ``turns``, are not UTF-8 or hold a turn that is not text: one line
    naming the file and line (or question), exit 2, before the source scan."""
    monkeypatch.setattr(tt, "source_roots", lambda: pytest.fail("work began before the input was checked"))
    questions = tmp_path / "q.jsonl"
    questions.write_bytes(content)
    with pytest.raises(SystemExit) as e:
        _run(tmp_path / "tok", "--mt-bench", str(questions))
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and f"--mt-bench: {questions} " in err[0] and words in err[0], err


def test_smoke_writes_to_out_with_its_provenance(tmp_path, tiny_corpus):
    _run(tmp_path / "tok")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == sorted(FILES)
    info = json.loads((tmp_path / "tok" / "tokenizer_training.json").read_text())
    assert info["mt_bench"] == str(DATA_DIR / "mt_bench.jsonl") and info["config"]["vocab_size"] == 1024
    assert info["run_info"]["device"].startswith("cpu (") and info["run_info"]["commit"]


def test_a_run_killed_while_saving_leaves_the_old_tokenizer(tmp_path, tiny_corpus, monkeypatch):
    out = tmp_path / "tok"
    _run(out)
    (out / "config.json").write_text("{}")  # a model folder's other files stay
    before = {name: (out / name).read_bytes() for name in (*FILES, "config.json")}

    def torn(self, folder, *args, **kw):  # killed halfway through tokenizer.json
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "tokenizer.json").write_text('{"version": "1.0", "trunc')
        raise Killed

    with monkeypatch.context() as m:
        m.setattr(PreTrainedTokenizerFast, "save_pretrained", torn)
        with pytest.raises(Killed):
            _run(out)
    assert {name: (out / name).read_bytes() for name in before} == before
    _run(out)  # the rerun clears what the killed one left and writes the same tokenizer
    assert sorted(p.name for p in out.iterdir()) == sorted((*FILES, "config.json"))
    assert (out / "tokenizer.json").read_bytes() == before["tokenizer.json"]
