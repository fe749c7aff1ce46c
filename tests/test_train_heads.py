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
