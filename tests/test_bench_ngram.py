"""experiments.bench_ngram: the code stream read from the data folder the project's tools share, and the results
file holding the run's settings."""

from __future__ import annotations

import json

import pytest

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


def _no_kernel(*a, **k):
    raise AssertionError("the kernel ran before the data file was checked")


def test_a_bad_data_file_is_one_line_before_the_kernel(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_ngram, "ngram_propose", _no_kernel)
    monkeypatch.setenv("HYBRIDSD_DATA", str(tmp_path))
    data, out = tmp_path / "code_edits_dev.jsonl", tmp_path / "ngram.json"
    short = json.dumps({"before": "ab", "after": "abc"}) + "\n"
    for make, says in ((lambda: data.mkdir(), "is not a file"), (lambda: data.write_text('{"before": 1'), "not JSON"),
                       (lambda: data.write_text(""), "fewer than the longest context 32768"),
                       (lambda: data.write_text(short), "holds 5 bytes")):
        if data.is_dir():
            data.rmdir()
        make()
        with pytest.raises(SystemExit) as e:
            bench_ngram.main(["--calls", "1", "--out", str(out)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and says in err and str(data) in err and len(err.splitlines()) == 1
        assert not out.exists()
