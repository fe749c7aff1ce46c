"""Summarize spec_bench JSONL rows: the PR-style table per method and dataset, corpus-level AL per config and
edit-norm bin, and output match rates.

    python -m experiments.summarize_runs 'experiments/results/llama31/*.jsonl' --table pr
    python -m experiments.summarize_runs \\
        experiments/results/sweeps/edit_norm_h200_bf16/code-edits__eagle3__pr.jsonl.gz [--by output|reference]
    python -m experiments.summarize_runs 'experiments/results/sweeps/zoo_cpu_fp32/*.jsonl' --bins fine

The PR-style table (``--table pr``; also last in ``all``): per dataset, method (and k) the prompts ``n``,
``seq_al``, ``precision_al``, median ``tpot_ms`` and the per-position acceptance ``r1, r2, ...``, as vLLM PR
#24344 reports them. A line of a results file that is not a spec_bench row (or a damaged one, without target
passes) is reported (file and line) and skipped; a prompt that the rows hold twice under one config (a file named
twice, or beside its .gz copy) is refused. Rows of different configs are not pooled: every table also splits its
cells by each setting of ``SETTINGS`` that differs among the rows (BOS mode, dtype, model, split, output length,
change request, n-gram lookup, tree shape, exact mode, ...: every config field the tables do not show).

Corpus AL = sum of tokens / sum of target passes over the rows in a cell (seq-normalized); precision AL =
1 + sum accepted / sum drafts. ``--by output`` bins by the edit norm of the model's own output against the
input file (what the n-gram drafter sees); ``--by reference`` by the reference edit's. The match rate is the
share of prompts whose output equals the plain run's (method ``none``, same prompt, data and config): by stored
tokens, or by output length and output edit norm for rows without tokens (a weaker proxy; the
``compared_by`` column says which). The logic lives in :mod:`experiments.results`.
"""

from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from experiments import results
from experiments.cli import Parser

CONFIG = ["dataset", "variant", "k", "bos_mode", "dtype"]
PR = ["dataset", "variant", "k"]
# config columns of the rows besides the tables' own: together with theirs, every field of the config
SETTINGS = ("bos_mode", "dtype", "model", "split", "output_len", "temperature", "seed", "chat_template", "device",
            *results.CONFIG_DEFAULTS)


def _text(value) -> str:
    """A setting as text; a missing value is "None", a setting of its own."""
    return "None" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def varying(df) -> list[str]:
    """The columns of ``SETTINGS`` whose value differs among ``df``'s rows (a missing value counting as one)."""
    return [c for c in SETTINGS if c in df and df[c].map(_text).nunique() > 1]


def pr_table(df) -> str:
    """The PR-style table: per dataset, method and k (and each setting that differs among the rows), ``n``,
    ``seq_al``, ``precision_al``, median ``tpot_ms`` and per-position acceptance ``r1, r2, ...``."""
    by = PR + varying(df)
    al = results.corpus_al(df, by)
    rates = [c for c in al.columns if c[0] == "r" and c[1:].isdigit()]
    return al[by + ["n", "seq_al", "precision_al", "tpot_ms"] + rates].round(3).to_string(index=False)


def main(argv: list[str] | None = None) -> None:
    p = Parser(prog="summarize_runs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="JSONL files (.jsonl, .jsonl.gz), folders of them or glob patterns")
    p.add_argument("--by", choices=("output", "reference"), default="output")
    p.add_argument("--bins", choices=("coarse", "fine"), default="coarse",
                   help=f"coarse: {list(results.COARSE_BINS)}; fine: 0.05 wide over [0, 0.6]")
    p.add_argument("--table", choices=("all", "pr"), default="all", help="pr: only the PR-style table")
    a = p.parse_args(argv)
    pd.set_option("display.width", 200)
    try:
        df = results.load_runs(a.paths, on_bad_line=lambda msg: print(f"{p.prog}: {msg}", file=sys.stderr))
    except (FileNotFoundError, ValueError) as e:  # ValueError: a file that is not readable text
        p.error(str(e))
    if df.empty:
        p.error("no spec_bench rows in " + " ".join(a.paths))
    if (twice := results.repeated_prompt(df)) is not None:  # a file named twice, or beside its .gz copy
        p.error(twice)
    df = df.assign(**{c: df[c].map(_text) for c in varying(df)})
    pr = f"PR-style table (seq-normalized AL, precision AL, median TPOT, per-position acceptance):\n{pr_table(df)}"
    if a.table == "pr":
        print(pr)
        return
    config = CONFIG + [c for c in varying(df) if c not in CONFIG]
    al = results.corpus_al(df, config)
    rates = [c for c in al.columns if c[0] == "r" and c[1:].isdigit()]
    cols = config + ["n", "seq_al", "precision_al", "tpot_ms"] + rates
    print("corpus AL per config (tpot_ms: median):")
    print(al[cols].round(3).to_string(index=False))
    binned = results.bin_edit_norm(df, results.COARSE_BINS if a.bins == "coarse" else results.EDIT_BINS,
                                   "output_edit_norm" if a.by == "output" else "ref_edit_norm")
    binned = binned[binned.bin.notna()]
    if len(binned):
        columns = ["variant", "k"] + varying(df)
        cells = results.corpus_al(binned, ["dataset", "bin"] + columns)
        table = cells.pivot_table(index=["dataset", "bin"], columns=columns, values="seq_al", observed=True)
        prompts = binned.groupby(["dataset", "bin"], observed=True).example_id.nunique()
        table[("prompts",) + ("",) * (len(columns) - 1)] = prompts
        print(f"\nseq-normalized AL by {a.by} edit-norm bin:\n{table.round(2).to_string()}")
    mr = results.match_rate(df, by=config)
    if len(mr):
        print("\nshare of prompts whose output equals plain decoding's (match rate):")
        print(mr.round(3).to_string(index=False))
    print(f"\n{pr}")


if __name__ == "__main__":
    main()
