"""Summarize spec_bench JSONL rows: corpus-level AL per config and edit-norm bin, and output match rates.

    python experiments/summarize_runs.py experiments/results/zoo/gate_call2.jsonl [--by output|reference]
    python experiments/summarize_runs.py 'experiments/results/sweeps/cpu-small/*.jsonl' --bins fine

Corpus AL = sum of tokens / sum of target passes over the rows in a cell (seq-normalized); precision AL =
1 + sum accepted / sum drafts. ``--by output`` bins by the edit norm of the model's own output against the
input file (what the n-gram drafter sees); ``--by reference`` by the reference edit's. The match rate is the
share of prompts whose output equals the plain run's (method ``none``, same prompt and config): by stored
tokens, or by output length and output edit norm for rows without tokens (a weaker proxy; the
``compared_by`` column says which). The logic lives in :mod:`hybridsd.results`.
"""

from __future__ import annotations

import argparse

import pandas as pd

from hybridsd import results

CONFIG = ["dataset", "variant", "k", "bos_mode", "dtype"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="JSONL files or glob patterns")
    p.add_argument("--by", choices=("output", "reference"), default="output")
    p.add_argument("--bins", choices=("coarse", "fine"), default="coarse",
                   help=f"coarse: {list(results.COARSE_BINS)}; fine: 0.05 wide over [0, 0.6]")
    a = p.parse_args(argv)
    pd.set_option("display.width", 200)
    df = results.load_runs(a.paths)
    al = results.corpus_al(df, CONFIG)
    rates = [c for c in al.columns if c[0] == "r" and c[1:].isdigit()]
    cols = CONFIG + ["n", "seq_al", "precision_al", "tpot_ms"] + rates
    print("corpus AL per config (tpot_ms: median):")
    print(al[cols].round(3).to_string(index=False))
    binned = results.bin_edit_norm(df, results.COARSE_BINS if a.bins == "coarse" else results.EDIT_BINS,
                                   "output_edit_norm" if a.by == "output" else "ref_edit_norm")
    binned = binned[binned.bin.notna()]
    if len(binned):
        cells = results.corpus_al(binned, ["dataset", "bin", "variant", "k"])
        table = cells.pivot_table(index=["dataset", "bin"], columns=["variant", "k"], values="seq_al", observed=True)
        table[("prompts", "")] = binned.groupby(["dataset", "bin"], observed=True).example_id.nunique()
        print(f"\nseq-normalized AL by {a.by} edit-norm bin:\n{table.round(2).to_string()}")
    mr = results.match_rate(df, by=CONFIG)
    if len(mr):
        print("\nshare of prompts whose output equals plain decoding's (match rate):")
        print(mr.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
