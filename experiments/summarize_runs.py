"""Summarize spec_bench JSONL rows: corpus-level AL per method and edit-norm bin, and bf16 match rates.

    python experiments/summarize_runs.py experiments/results/zoo/gate_call2.jsonl [--by output|reference]

Corpus AL = sum of tokens / sum of target passes over the rows in a cell. ``--by output`` bins by the
edit norm of the model's own output against the input file (what the n-gram drafter sees);
``--by reference`` by the reference edit's. The match rate compares each method's tokens with the
plain run (method ``none``) of the same prompt: the share of prompts whose outputs are identical (rows
without stored tokens are compared by output length and output edit norm, a weaker proxy).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

BINS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 1.0]


def load(paths: list[Path]) -> pd.DataFrame:
    rows = []
    for p in paths:
        for line in p.read_text().splitlines():
            r = json.loads(line)
            rows.append({"method": r["config"]["method"], "example_id": r["example_id"],
                         "ref_edit_norm": r["ref_edit_norm"], "output_edit_norm": r["output_edit_norm"],
                         "tokens": r["stats"]["num_tokens"], "passes": r["stats"]["num_target_steps"],
                         "tpot_ms": r["tpot_ms"], "output": r.get("tokens")})
    return pd.DataFrame(rows)


def table(df: pd.DataFrame, by: str) -> pd.DataFrame:
    col = "output_edit_norm" if by == "output" else "ref_edit_norm"
    df = df.assign(bin=pd.cut(df[col], BINS, include_lowest=True))
    g = df.groupby(["bin", "method"], observed=True)[["tokens", "passes"]].sum()
    al = (g["tokens"] / g["passes"]).unstack("method")
    al["n"] = df[df.method == df.method.iloc[0]].groupby("bin", observed=True).size()
    return al.round(2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", type=Path, nargs="+")
    p.add_argument("--by", choices=("output", "reference"), default="output")
    a = p.parse_args()
    df = load(a.paths)
    overall = df.groupby("method")[["tokens", "passes"]].sum()
    print("corpus seq-normalized AL:", (overall.tokens / overall.passes).round(3).to_dict())
    print("median TPOT ms:", df.groupby("method").tpot_ms.median().round(2).to_dict())
    print(f"\nAL by {a.by} edit-norm bin:\n{table(df, a.by).to_string()}")
    # rows with output tokens compare them; older rows only (length, output edit norm), a weaker proxy
    key = lambda r: tuple(r.output) if isinstance(r.output, list) else (r.tokens, r.output_edit_norm)  # noqa: E731
    plain = {r.example_id: key(r) for r in df[df.method == "none"].itertuples()}
    if plain:
        same = defaultdict(list)
        for r in df[df.method != "none"].itertuples():
            if r.example_id in plain:
                same[r.method].append(key(r) == plain[r.example_id])
        print("\nshare of prompts whose output equals plain decoding's:",
              {m: f"{np.mean(v):.2f} of {len(v)}" for m, v in same.items()})


if __name__ == "__main__":
    main()
