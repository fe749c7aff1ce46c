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


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_file_or_link_where_the_partial_folder_goes_is_one_line_and_kept(tmp_path, monkeypatch, capsys, kind):
    """No run leaves a file or a link at ``.OUT.partial``: it may be someone's, so it is named, not deleted."""
    monkeypatch.setattr(make_checkpoint, "build", lambda *a: pytest.fail("the model was built"))
    partial = tmp_path / ".ckpt.partial"
    if kind == "file":
        partial.write_text("mine")
    else:
        (tmp_path / "elsewhere").mkdir()
        partial.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SystemExit) as e:
        make_checkpoint.main(["--out", str(tmp_path / "ckpt"), "--layers", "4", "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and f"{partial} is in the way (a {kind}" in err[0], err
    assert partial.is_symlink() if kind == "link" else partial.read_text() == "mine"
    assert not (tmp_path / "ckpt").exists()
