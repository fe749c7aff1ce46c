"""experiments.diagnose_heads: bad input refused in one line before the zoo model is loaded, and the record naming
the device the run used."""

from __future__ import annotations

import json

import pytest
import torch

import hybridsd as hsd
from experiments import diagnose_heads


@pytest.mark.parametrize("argv, flag", [
    (["--prompts", "0"], "--prompts"), (["--prompts", "-1"], "--prompts"), (["--positions", "0"], "--positions"),
    (["--max-new", "0"], "--max-new"), (["--out", "{file}/d.json"], "--out"), (["--out", "{tmp}"], "--out"),
    ([], "/nonexistent"),
])
def test_bad_input_is_one_line_before_loading(argv, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(hsd.zoo, "load", lambda *a, **k: pytest.fail("the model was loaded before the check"))
    if flag == "/nonexistent":
        monkeypatch.setenv("HYBRIDSD_DATA", "/nonexistent")
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "res" / "d.json"
    with pytest.raises(SystemExit) as e:
        diagnose_heads.main(["--out", str(out), *[a.format(file=tmp_path / "file", tmp=tmp_path) for a in argv]])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and flag in err[0] and "Traceback" not in err[0], err
    assert not out.exists()


def test_the_record_names_the_cpu_it_ran_on(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine: the run still uses the CPU
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "FakeGPU")
    out = tmp_path / "d.json"
    diagnose_heads.main(["--prompts", "1", "--max-new", "4", "--positions", "1", "--out", str(out)])
    res = json.loads(out.read_text())
    assert res["run_info"]["device"].startswith("cpu (") and res["config"]["prompts"] == 1
    assert set(res["heads"]) == {"eagle1", "eagle3"} and all(h["positions_checked"] == 1 for h in res["heads"].values())
