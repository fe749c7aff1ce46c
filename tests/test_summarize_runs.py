"""experiments.summarize_runs on hand-made spec_bench rows: rows of different configs are never pooled into one
cell of its tables."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pandas")
from experiments import summarize_runs  # noqa: E402


def _row(method, example_id, tokens, passes, bos="single", output_len=64):
    return {"config_key": f"{method}-{bos}-{output_len}", "example_id": example_id, "dataset": "code-edits",
            "ref_edit_norm": 0.1, "prompt_tokens": 50, "output_edit_norm": 0.2, "tokens": list(range(tokens)),
            "stats": {"num_tokens": tokens, "num_target_steps": passes, "num_drafts": passes - 1,
                      "num_draft_tokens": 3 * (passes - 1), "num_accepted": tokens - passes,
                      "accepted_per_position": [tokens - passes], "steps_by_drafter": {}},
            "tpot_ms": 1.0, "config": {"method": method, "model": "tiny-coder", "k": {"eagle": 3},
                                       "bos_mode": bos, "output_len": output_len, "device": "cpu", "dtype": "fp32"},
            "run_info": {}}


def _lines(capsys, table: str, variant: str) -> list[list[str]]:
    """The words of ``table``'s lines (the text after its title) for ``variant``."""
    out = capsys.readouterr().out
    text = out[out.index(table):].split("\n\n")[0]
    return [line.split() for line in text.splitlines()[2:] if line.split()[1] == variant]


@pytest.mark.parametrize("setting, column", [({"bos": "doubled"}, "bos_mode"), ({"output_len": 128}, "output_len")])
def test_runs_of_two_configs_are_two_rows_of_each_table(setting, column, tmp_path, capsys):
    """EAGLE run twice over the same two prompts, with single and doubled BOS (or two output lengths): the PR-style
    and the per-config tables hold one line per config, each of its own two prompts, with the setting beside it."""
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(_row("eagle", p, 10, 5)) + "\n" for p in ("p1", "p2")))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(_row("eagle", p, 10, 2, **setting)) + "\n"
                                              for p in ("p1", "p2")))
    summarize_runs.main([str(tmp_path), "--table", "pr"])
    lines = _lines(capsys, "PR-style table", "eagle")
    assert len(lines) == 2 and [line[4] for line in lines] == ["2", "2"]  # n
    assert sorted(float(line[5]) for line in lines) == [2.0, 5.0]  # seq AL of each config
    summarize_runs.main([str(tmp_path)])
    out = capsys.readouterr().out
    per_config = out[out.index("corpus AL per config"):].split("\n\n")[0].splitlines()
    assert column in per_config[1] and len([line for line in per_config if " eagle " in line]) == 2
    binned = out[out.index("edit-norm bin"):].split("\n\n")[0]
    assert "5.0" in binned and "2.0" in binned and column in binned


def test_one_config_keeps_the_tables_columns(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(_row("eagle", p, 10, 5)) + "\n" for p in ("p1", "p2")))
    summarize_runs.main([str(tmp_path), "--table", "pr"])
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:5] == ["dataset", "variant", "k", "n", "seq_al"]


@pytest.mark.parametrize("setting", [{"change_request": "subject"}, {"prompt_lookup_min": 1}, {"tree_depth": 3},
                                     {"exact": 16}, {"eagle_dir": "/heads/other"}, {"compile": "auto"}])
def test_configs_that_differ_in_a_field_without_a_column_are_not_pooled(setting, tmp_path, capsys):
    """Two runs that differ only in a config field that none of the tables' columns shows (the change request,
    n-gram lookup, tree shape, exact mode, heads, compile; missing in one run's rows: the default): one line each,
    with that field beside them."""
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(_row("eagle", p, 10, 5)) + "\n" for p in ("p1", "p2")))
    rows = [_row("eagle", p, 10, 2) for p in ("p1", "p2")]
    for r in rows:
        r["config"].update(setting)
        r["config_key"] = "other"
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summarize_runs.main([str(tmp_path), "--table", "pr"])
    out = capsys.readouterr().out.splitlines()
    header = out[1].split()
    (field, value), = setting.items()
    assert header[:4] == ["dataset", "variant", "k", field]
    lines = sorted((line.split() for line in out[2:]), key=lambda words: words[3] == str(value))
    assert [(words[3], words[header.index("n")], words[header.index("seq_al")]) for words in lines] == [
        (str(summarize_runs.results.CONFIG_DEFAULTS[field]), "2", "2.0"), (str(value), "2", "5.0")]


def _refused(capsys, exit_) -> str:
    """The one error line of a refused call (exit code 2, no traceback)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("field, values", [("dataset_path", ("/data/a.parquet", "/data/b.parquet")),
                                           ("dataset_digest", ("3f79ec3847ae", "0123456789ab"))])
def test_the_match_rate_pairs_only_rows_of_the_same_data(field, values, tmp_path, capsys):
    """A plain and an n-gram run on one data set (equal outputs) and an n-gram run on another whose prompts have
    the same ids (other outputs), in one file: the n-gram run on the other data has no plain partner, so the
    match rate holds one line, the first data's, at 1.0."""
    rows = []
    for method, value, shift in (("none", values[0], 0), ("ngram", values[0], 0), ("ngram", values[1], 1)):
        for p in ("0", "1", "2"):
            r = _row(method, p, 10, 5)
            r["config"][field] = value
            r["config_key"] += f"-{value}"
            r["tokens"] = [t + shift for t in r["tokens"]]
            rows.append(r)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summarize_runs.main([str(tmp_path / "a.jsonl")])
    out = capsys.readouterr().out
    table = out[out.index("(match rate):"):].split("\n\n")[0].splitlines()[1:]
    header = table[0].split()
    assert [dict(zip(header, line.split()))["match_rate"] for line in table[1:]] == ["1.0"]
    assert values[0] in table[1]


def test_a_row_read_twice_is_refused(tmp_path, capsys, monkeypatch):
    """The same file named twice (relative and absolute), or a folder holding a results file and its gzip copy:
    one line naming the repeated prompt and both files, not every prompt counted twice."""
    import gzip

    text = "".join(json.dumps(_row("eagle", p, 10, 5)) + "\n" for p in ("p1", "p2"))
    (tmp_path / "c.jsonl").write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        summarize_runs.main(["c.jsonl", str(tmp_path / "c.jsonl")])
    line = _refused(capsys, exit_)
    assert "prompt 'p1' more than once" in line and f"c.jsonl, {tmp_path / 'c.jsonl'}" in line
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write(text)
    with pytest.raises(SystemExit) as exit_:
        summarize_runs.main([str(tmp_path)])
    line = _refused(capsys, exit_)
    assert "prompt 'p1' more than once" in line and f"{tmp_path / 'c.jsonl'}, {tmp_path / 'c.jsonl.gz'}" in line


def test_a_row_without_target_passes_is_named_and_skipped(tmp_path, capsys):
    """A damaged row with ``num_target_steps: 0`` (no AL to take) is named (file and line) and skipped, as any line
    that is not a spec_bench row; a file of nothing else is refused (exit code 2) after that line."""
    rows = [_row("eagle", p, 10, 5) for p in ("p1", "p2", "p3")]
    rows[1]["stats"]["num_target_steps"] = 0
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summarize_runs.main([str(path), "--table", "pr"])
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and f"{path} line 2: not a spec_bench row" in err[0] and "num_target_steps" in err[0]
    assert [line[3] for line in (line.split() for line in captured.out.splitlines()[2:])] == ["2"]  # n
    path.write_text(json.dumps(rows[1]) + "\n")
    with pytest.raises(SystemExit) as exit_:
        summarize_runs.main([str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 2 and f"{path} line 1: not a spec_bench row" in err[0]
    assert err[1] == f"summarize_runs: error: no spec_bench rows in {path}"


def test_a_row_whose_step_count_is_nan_is_named_and_skipped(tmp_path, capsys):
    """The first three rows of a committed run, the first with ``num_target_steps: NaN``: named and skipped, so the
    corpus AL is that of the other two (it was 5.93 instead of 4.173, its tokens summed but not its passes)."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "experiments/results/trees/zoo_cpu_fp32/code-edits__ngram.jsonl"
    rows = [json.loads(line) for line in src.read_text().splitlines()[:3]]
    rows[0]["stats"]["num_target_steps"] = float("nan")
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summarize_runs.main([str(path), "--table", "pr"])
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and f"{path} line 1: not a spec_bench row" in err[0] and "num_target_steps" in err[0], err
    seq_al = sum(r["stats"]["num_tokens"] for r in rows[1:]) / sum(r["stats"]["num_target_steps"] for r in rows[1:])
    line = captured.out.splitlines()[2].split()
    assert line[3] == "2" and float(line[4]) == round(seq_al, 3), captured.out
