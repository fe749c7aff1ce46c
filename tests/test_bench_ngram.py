"""experiments.bench_ngram: the code stream read from the data folder the project's tools share, and the results
file holding the run's settings."""

from __future__ import annotations

import json

from experiments import bench_ngram


def test_code_bytes_come_from_the_data_folder_of_the_environment(tmp_path, monkeypatch):
    rows = [{"before": "abc" * 300, "after": "abd" * 300}] * 20
    (tmp_path / "code_edits_dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("HYBRIDSD_DATA", str(tmp_path))
    assert bench_ngram.data_file() == tmp_path / "code_edits_dev.jsonl"
    monkeypatch.setattr(bench_ngram, "LENGTHS", (512,))
    out = tmp_path / "ngram.json"
    bench_ngram.main(["--calls", "3", "--seed", "7", "--out", str(out)])
    rec = json.loads(out.read_text())
    assert [r["stream"] for r in rec["results"]] == ["iid-random", "copy-random", "code-bytes"]
    assert rec["seed"] == 7 and rec["spread"] == bench_ngram.SPREAD


def test_a_missing_data_folder_leaves_the_code_stream_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HYBRIDSD_DATA", str(tmp_path / "none"))
    monkeypatch.setattr(bench_ngram, "LENGTHS", (512,))
    out = tmp_path / "ngram.json"
    bench_ngram.main(["--calls", "3", "--out", str(out)])
    assert "code-bytes" not in {r["stream"] for r in json.loads(out.read_text())["results"]}
    assert f"skipping code-bytes: {tmp_path / 'none' / 'code_edits_dev.jsonl'} not found" in capsys.readouterr().out
