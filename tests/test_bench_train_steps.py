"""experiments.bench_train_steps: its output and device checked before any work, and the device it ran on
recorded."""

from __future__ import annotations

import json

import pytest
import torch

from experiments import bench_train_steps
from experiments import train_zoo as tz

SMALL = ["--smoke", "--modes", "eager", "--batch-tokens", "1024", "--examples", "100", "--steps", "10", "--reps", "1"]


@pytest.mark.parametrize("argv, words", [
    (["--device", "cpu", "--out", "{under_file}"], ["--out", "cannot make the folder"]),
    (["--device", "cpu", "--out", "{folder}"], ["--out", "is a folder"]),
    (["--device", "foo", "--out", "{new}"], ["--device", "not a torch device"]),
    (["--device", "cpu", "--batch-tokens", "0", "--out", "{new}"], ["--batch-tokens"]),
])
def test_bad_output_or_device_is_refused_before_any_step(argv, words, tmp_path, capsys, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a training step ran before the arguments were checked")

    monkeypatch.setattr(tz, "train_phase", refuse)
    (tmp_path / "file").write_text("x")
    names = {"{under_file}": str(tmp_path / "file" / "o.json"), "{folder}": str(tmp_path),
             "{new}": str(tmp_path / "o.json")}
    with pytest.raises(SystemExit) as e:
        bench_train_steps.main([*SMALL, *[names.get(x, x) for x in argv]])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and all(w in err[0] for w in words), err
    assert not (tmp_path / "o.json").exists()


def test_a_cpu_run_on_a_gpu_machine_records_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "FakeGPU")
    out = tmp_path / "steps.json"
    bench_train_steps.main([*SMALL, "--device", "cpu", "--out", str(out)])
    assert json.loads(out.read_text())["run_info"]["device"].startswith("cpu (")
