"""experiments.train_heads on the zoo target (CPU, a few steps): the heads in --out and their training record change
together, so a run killed while training leaves the old heads with their own record."""

from __future__ import annotations

import json
import shutil

import pytest

import hybridsd as hsd
from experiments import train_heads

ZOO = hsd.zoo.path("tiny-coder")
ARGV = ["--device", "cpu", "--steps", "2", "--gen-seconds", "0", "--limit", "2", "--seq-len", "128",
        "--batch-size", "2"]
RECORD = "heads_training_eagle1_eagle3.json"


class Killed(BaseException):
    """A kill: not an Exception, so nothing on the way catches it."""


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_killed_while_training_keeps_the_old_heads_and_record(tmp_path, monkeypatch):
    out = tmp_path / "out"
    for name in ("eagle1", "eagle3"):
        shutil.copytree(ZOO / name, out / name)
    shutil.copy(ZOO / RECORD, out / RECORD)
    before = _files(out)
    real = train_heads.train_head

    def killed_at_eagle3(head, *args, **kw):
        if head.config.kind == "eagle3":
            raise Killed
        return real(head, *args, **kw)

    with monkeypatch.context() as m:
        m.setattr(train_heads, "train_head", killed_at_eagle3)
        with pytest.raises(Killed):
            train_heads.main(["--out", str(out), *ARGV])
    assert _files(out) == before  # eagle1 was trained, but nothing was written
    train_heads.main(["--out", str(out), *ARGV])  # the rerun replaces both heads and the record
    after = _files(out)
    assert all(after[p] != before[p] for p in before if p.suffix == ".safetensors")
    record = json.loads((out / RECORD).read_text())
    assert {k: v["steps"] for k, v in record["heads"].items()} == {"eagle1": 2, "eagle3": 2}
    assert not list(out.rglob("*.tmp"))


def _refused(capsys, exit_) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "error:" in err[0] and "Traceback" not in err[0], err
    return err[0]


def test_a_target_without_a_tokenizer_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    """A --target folder with config, weights and eval_split.json but no tokenizer: one line naming it, exit 2, the
    target not loaded."""
    target = tmp_path / "target"
    target.mkdir()
    for f in ZOO.iterdir():
        if f.name in ("config.json", "eval_split.json") or f.name.startswith("model"):
            shutil.copy(f, target / f.name)
    monkeypatch.setattr(train_heads, "load_target", lambda *a: pytest.fail("loaded the target"))
    with pytest.raises(SystemExit) as exit_:
        train_heads.main(["--target", str(target), "--out", str(tmp_path / "out"), *ARGV])
    assert f"--target {target}: no tokenizer" in _refused(capsys, exit_)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("broken, words", [("truncated", "cannot read the weights file"),
                                           ("a list", "holds a list, not a state dict")])
def test_init_heads_that_do_not_load_are_refused_before_loading(broken, words, tmp_path, capsys, monkeypatch):
    """--init-heads whose eagle3 weights are truncated, or whose eagle1 weights are a pickled list: one line naming
    the file, exit 2, before the target is loaded (they were first read after generation)."""
    import torch

    init = tmp_path / "init"
    for name in ("eagle1", "eagle3"):
        shutil.copytree(ZOO / name, init / name)
    if broken == "truncated":
        bad = init / "eagle3" / "model.safetensors"
        bad.write_bytes(bad.read_bytes()[:1000])
    else:
        (init / "eagle1" / "model.safetensors").unlink()
        bad = init / "eagle1" / "pytorch_model.bin"
        torch.save([1, 2], bad)
    monkeypatch.setattr(train_heads, "load_target", lambda *a: pytest.fail("loaded the target"))
    with pytest.raises(SystemExit) as exit_:
        train_heads.main(["--init-heads", str(init), "--out", str(tmp_path / "out"), *ARGV])
    err = _refused(capsys, exit_)
    assert "--init-heads" in err and str(bad) in err and words in err


def test_init_heads_are_read_once_and_stay_out_of_the_record(tmp_path, monkeypatch):
    """--init-heads: each head's weights read once (checked before loading, then used), the record's config plain."""
    reads = []
    real = train_heads.read_state_dict
    monkeypatch.setattr(train_heads, "read_state_dict", lambda path: reads.append(path) or real(path))
    out = tmp_path / "out"
    train_heads.main(["--init-heads", str(ZOO), "--out", str(out), *ARGV])
    assert reads == [ZOO / "eagle1", ZOO / "eagle3"]
    record = json.loads((out / RECORD).read_text())
    assert "init_states" not in record["config"] and record["config"]["init_heads"] == str(ZOO)
    assert {k: v["steps"] for k, v in record["heads"].items()} == {"eagle1": 2, "eagle3": 2}
