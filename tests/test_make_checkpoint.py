"""experiments.make_checkpoint at a tiny shape: OUT appears whole or not at all, and a rerun after a kill starts
over."""

from __future__ import annotations

import json

import pytest

import hybridsd as hsd
from experiments import make_checkpoint

SMALL = dict(vocab_size=10240, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, max_position_embeddings=1024)


class Killed(BaseException):
    """A kill: not an Exception, so nothing on the way catches it."""


def test_a_run_killed_while_writing_leaves_no_checkpoint_and_a_rerun_makes_it(tmp_path, monkeypatch):
    real_build, real_save = make_checkpoint.build, hsd.EagleHead.save_pretrained
    monkeypatch.setattr(make_checkpoint, "build", lambda out, layers, device: real_build(out, layers, device, SMALL))

    def save(head, path):
        if head.config.kind == "eagle3":
            raise Killed
        real_save(head, path)

    out = tmp_path / "ckpt"
    with monkeypatch.context() as m:
        m.setattr(hsd.EagleHead, "save_pretrained", save)
        with pytest.raises(Killed):  # the target and eagle1 are written, eagle3 is not
            make_checkpoint.main(["--out", str(out), "--layers", "4", "--device", "cpu"])
    assert not out.exists() or not any(out.iterdir())  # nothing a loader could take for a checkpoint
    make_checkpoint.main(["--out", str(out), "--layers", "4", "--device", "cpu"])
    assert sorted(p.name for p in out.iterdir()) == ["eagle1", "eagle3", "make_checkpoint.json", "target"]
    assert json.loads((out / "make_checkpoint.json").read_text())["run_info"]["device"].startswith("cpu (")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no partial folder left beside it
