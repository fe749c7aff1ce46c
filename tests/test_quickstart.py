"""experiments.quickstart: an --out it cannot write is named before any decoding; its record names the device the
decoding ran on (the CPU, also on a machine with a GPU) and each row its drafter's settings."""

from __future__ import annotations

import json

import pytest

from hybridsd import zoo

FOLDER = zoo.MODELS_DIR / "tiny-coder"
needs_weights = pytest.mark.skipif(not ((FOLDER / "config.json").is_file() and any(FOLDER.glob("*.safetensors"))),
                                   reason="tiny-coder weights not trained yet")


def test_an_out_that_is_a_folder_is_named_before_any_work(tmp_path, capsys, monkeypatch):
    from experiments import quickstart

    monkeypatch.setattr(zoo, "load", lambda *a, **k: pytest.fail("loaded the model"))
    (tmp_path / "q.json").mkdir()
    with pytest.raises(SystemExit) as e:
        quickstart.main(["--out", str(tmp_path / "q.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "is a folder" in err[0] and "q.json" in err[0]


@needs_weights
def test_the_record_names_the_cpu_and_each_drafters_settings(tmp_path, monkeypatch):
    import torch

    from experiments import quickstart

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "FakeGPU")
    quickstart.main(["--out", str(tmp_path / "q.json")])
    rec = json.loads((tmp_path / "q.json").read_text())
    assert rec["run_info"]["device"].startswith("cpu (") and rec["dtype"] == "float32"
    rows = {r["method"]: r for r in rec["rows"]}
    assert rows["plain"]["ngram"] is None and rows["plain"]["eagle"] is None
    assert rows["ngram-eagle tree"]["ngram"] == {"k": 5, "min_n": 2, "max_n": 5}
    assert rows["ngram-eagle tree"]["eagle"] == {"head": "eagle1", "k": 3}
    assert rows["ngram-eagle tree"]["hybrid_policy"] == "tree" and rows["eagle3"]["eagle"]["head"] == "eagle3"
