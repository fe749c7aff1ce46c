"""experiments.simulate_al end to end on a small made-up edit set: EAGLE's rates by n-gram state read from an
al_by_edit_norm table, recorded in the output, and a file without that table named in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import simulate_al


@pytest.fixture()
def edits(tmp_path):
    """40 small Python files, each edited by replacing some of its lines, with their character edit norm."""
    from rapidfuzz.distance import Levenshtein

    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        lines = [f"def f{j}(x):\n    return x + {j}\n" for j in range(12)]
        before = "".join(lines)
        for j in rng.choice(12, size=int(rng.integers(1, 6)), replace=False):
            lines[j] = f"def g{j}(y, z):\n    return y * z - {j}\n"
        after = "".join(lines)
        rows.append({"id": f"e{i}", "instruction": "Change some functions", "before": before, "after": after,
                     "char_edit_norm": Levenshtein.normalized_distance(before, after)})
    path = tmp_path / "code_edits_dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eagle_rates_by_state_reach_the_simulation(edits, tmp_path):
    table = {"eagle_by_ngram_state": {"first right": {"rates": [0.8, 0.6, 0.5]}, "novel": {"rates": [0.3, 0.1]}}}
    rates = tmp_path / "states.json"
    rates.write_text(json.dumps(table))
    out = tmp_path / "sim"
    assert simulate_al.main(["--data", str(edits), "--n-boot", "0", "--eagle-rates-by-state", str(rates),
                             "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["config"]["eagle_rates"] == [0.8, 0.6, 0.5]
    assert doc["config"]["eagle_rates_novel"] == [0.3, 0.1, 0.0]  # padded to k_eagle
    assert "by n-gram state" in doc["eagle_rates_source"]
    one = tmp_path / "one"
    assert simulate_al.main(["--data", str(edits), "--n-boot", "0", "--eagle-rates", "0.8", "0.6", "0.5",
                             "--out", str(one)]) == 0
    single = json.loads(one.with_suffix(".json").read_text())

    def corpus(d, policy):  # AL over every bin
        t = d["tables"]["all"]
        n = np.array([x or 0 for x in t["n"]], dtype=float)
        return np.nansum(np.array(t[f"{policy}_al"], dtype=float) * n) / n.sum()

    # n-gram alone ignores EAGLE; the prefer-ngram hybrid, whose EAGLE drafts only where n-gram has none (new
    # text), loses AL with the lower novel rates
    assert corpus(doc, "ngram") == pytest.approx(corpus(single, "ngram"))
    assert corpus(doc, "prefer-ngram") < corpus(single, "prefer-ngram")


def test_a_file_without_the_table_is_named(edits, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"fits": {}}))
    with pytest.raises(SystemExit) as e:
        simulate_al.main(["--data", str(edits), "--eagle-rates-by-state", str(bad), "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0] and "eagle_by_ngram_state" in err[0]


def test_the_csv_rows_carry_the_config_and_run_info(edits, tmp_path, monkeypatch):
    """Each row of the CSV beside the JSON holds the run's config and run_info (the CPU it ran on, also on a machine
    with a GPU), and reads back with csv and pandas."""
    import csv

    import pandas as pd
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "FakeGPU")
    out = tmp_path / "sim"
    assert simulate_al.main(["--data", str(edits), "--n-boot", "0", "--k-ngram", "4", "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["run_info"]["device"].startswith("cpu (")
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert rows and {r["split"] for r in rows} == {"all", "fit", "test"}
    for key in ("commit", "device", "torch", "numpy", "date"):
        assert {r[key] for r in rows} == {str(doc["run_info"][key])}
    assert {r["k_ngram"] for r in rows} == {"4"} and {r["data"] for r in rows} == {str(edits)}
    assert {r["tokenizer"] for r in rows} == {doc["tokenizer"]}
    assert json.loads(rows[0]["eagle_rates"]) == doc["config"]["eagle_rates"]
    table = pd.read_csv(out.with_suffix(".csv"))
    assert len(table) == len(rows) and table["al_corpus"].notna().any() and (table["k_eagle"] == 3).all()


@pytest.mark.parametrize("argv, words", [
    (["--n-boot", "-1"], "--n-boot must be >= 0"), (["--seed", "-1"], "--seed must be >= 0"),
    (["--limit", "20", "--bins", "30"], "--bins must be <= --limit"),
    (["--max-e", "inf"], "--max-e must be > 0 and finite, got inf"),
    (["--vocab", "-5"], "--vocab must be in (256, 1000000]"), (["--vocab", "100"], "--vocab must be in"),
    (["--vocab", str(10**12)], "--vocab must be in")])
def test_bad_numbers_are_named_before_any_work(argv, words, edits, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(simulate_al, "load_code_edits", lambda path: pytest.fail("read the data"))
    with pytest.raises(SystemExit) as e:
        simulate_al.main(["--data", str(edits), "--out", str(tmp_path / "sim"), *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert not list(tmp_path.glob("sim*"))


def test_more_bins_than_examples_is_refused_before_the_simulation(edits, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(simulate_al, "iter_simulate", lambda *a: pytest.fail("simulated"))
    with pytest.raises(SystemExit) as e:
        simulate_al.main(["--data", str(edits), "--bins", "1000000000", "--out", str(tmp_path / "sim")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--bins must be <= the 40 examples" in err[0] and "1000000000" in err[0]
    assert not list(tmp_path.glob("sim*"))


@pytest.mark.parametrize("argv, words", [(["--max-e", "1e-9"], "examples have an edit norm in [0, --max-e 1e-09]"),
                                         (["--bins", "10", "--max-e", "0.04"], "--bins must be <= the 8 examples")])
def test_char_level_bins_are_checked_before_the_tokenizer(argv, words, edits, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(simulate_al, "load_tokenizer", lambda *a: pytest.fail("loaded the tokenizer"))
    with pytest.raises(SystemExit) as e:
        simulate_al.main(["--data", str(edits), "--out", str(tmp_path / "sim"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and words in err[0], err


def test_an_empty_data_file_is_named(tmp_path, capsys):
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit) as e:
        simulate_al.main(["--data", str(empty), "--out", str(tmp_path / "sim")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and f"--data {empty}: holds no code edits" in err[0], err


@pytest.fixture()
def no_project_tokenizer(tmp_path, monkeypatch):
    """simulate_al in a tree without the project tokenizer: the fallback BPE, cached under ``tmp_path``."""
    monkeypatch.setattr(simulate_al, "REPO", tmp_path)
    monkeypatch.setattr(simulate_al, "RESULTS", tmp_path / "experiments" / "results")
    return tmp_path / "experiments" / "results"


def test_the_fallback_bpe_is_cached_per_training_data_and_vocab(no_project_tokenizer):
    code = [f"def f{i}(x{i % 7}):\n    return x{i % 7} + {i * 13}\n" for i in range(200)]
    sql = [f"SELECT name{i % 5} FROM users{i} WHERE id = {i * 31};\n" for i in range(200)]
    tok, desc = simulate_al.load_tokenizer(code, 300, "a.jsonl")
    assert "vocab 300" in desc and "a.jsonl" in desc
    other, _ = simulate_al.load_tokenizer(sql, 300, "b.jsonl")
    wider, _ = simulate_al.load_tokenizer(code, 400, "a.jsonl")
    again, _ = simulate_al.load_tokenizer(code, 300, "a.jsonl")
    assert len(list(no_project_tokenizer.glob("bpe*.json"))) == 3  # one per (data, vocab)
    assert other.to_str() != tok.to_str() and wider.to_str() != tok.to_str() and again.to_str() == tok.to_str()
    assert not list(no_project_tokenizer.glob("*.tmp"))


def test_an_interrupted_cache_write_leaves_no_cache(no_project_tokenizer, monkeypatch):
    """A kill while the trained BPE is written leaves no file that a later run would take for the cache."""
    import os

    def killed(*a):
        raise OSError("killed")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(OSError):
        simulate_al.load_tokenizer(["def f(x):\n    return x\n"] * 10, 300)
    assert not list(no_project_tokenizer.glob("bpe*.json"))


def test_out_stems_keep_their_dots():
    """Two stems that differ after a dot name different files; a .json or .csv ending names the same pair."""
    from pathlib import Path

    assert simulate_al.out_file(Path("d/rates0.65"), ".json") == Path("d/rates0.65.json")
    assert simulate_al.out_file(Path("d/rates0.5"), ".csv") == Path("d/rates0.5.csv")
    assert simulate_al.out_file(Path("d/sim.json"), ".csv") == Path("d/sim.csv")
    assert simulate_al.out_file(Path("d/sim"), ".json") == Path("d/sim.json")


def test_an_out_folder_is_refused_before_any_work(edits, tmp_path, capsys, monkeypatch):
    """--out naming an existing folder (meant as the files' place) is one line and exit code 2: the files would go
    beside it as <folder>.json and <folder>.csv."""
    monkeypatch.setattr(simulate_al, "load_code_edits", lambda path: pytest.fail("read the data"))
    folder = tmp_path / "results"
    folder.mkdir()
    with pytest.raises(SystemExit) as e:
        simulate_al.main(["--data", str(edits), "--out", str(folder)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and f"--out {folder}: is a folder" in err[0], err
    assert not list(tmp_path.glob("results.*")) and not any(folder.iterdir())
