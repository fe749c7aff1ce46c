"""Where exact mode's step time goes on the 8B shape: its attention kernel alone, and whole steps of fewer rows.

    python -m experiments.exact_cost_probe --out experiments/results/exact/exact_cost_probe.json

1. ``attention``: the split-KV kernel on one layer's shapes (8 KV heads x 4 queries, head dim 128, the key span
   of a 2048-token context), microseconds per call (a CUDA graph of 64 calls): the plain kernel on 1 and
   ``rows`` tokens, and exact mode's kernel on a chain (every key tile read in place) and with every key tile
   holding a moved key (the gathering path on every tile, what each exact step cost before tiles were read in
   place).
2. ``steps``: a whole exact-mode step (``compile="auto"``) of ``rows`` rows after 2048 tokens, as
   ``bench_speed`` times ``graph_auto_exact``, for row counts below its 16, beside the floor measured here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from experiments import provenance
from experiments import speed_steps as bench
from experiments.distributed import write_atomic
from hybridsd.attention import split_kv_attention
from hybridsd.kv_cache import bucket
from hybridsd.target import Target

CTX = 2048


def graphed_us(fn, calls: int = 64) -> float:
    """Microseconds per ``fn()`` call, from a CUDA graph of ``calls`` calls."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return bench.cuda_median_ms(g.replay) * 1e3 / calls


def attention_us(rows: int, span: int) -> dict:
    hkv, g, d = 8, 4, 128
    dev = "cuda"
    k, v = (torch.randn(hkv, span, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    out = {}
    for t in (1, rows):
        q = torch.randn(hkv, g * t, d, device=dev, dtype=torch.bfloat16)
        allowed = torch.arange(span, device=dev)[None] <= (CTX + torch.arange(t, device=dev))[:, None]
        out[f"plain_q{t}"] = graphed_us(lambda: split_kv_attention(q, k, v, allowed, d**-0.5))
    branch = torch.zeros(rows, dtype=torch.long, device=dev)
    identity = torch.arange(span, device=dev).repeat(2, 1)
    moved = identity.clone()
    moved[1, ::64], moved[1, 1::64] = identity[1, 1::64], identity[1, ::64]  # a swapped pair in every tile
    for name, slots in (("exact_chain", identity), ("exact_every_tile_moved", moved)):
        out[f"{name}_rows{rows}"] = graphed_us(
            lambda: split_kv_attention(q, k, v, allowed, d**-0.5, key_slots=slots, branch=branch))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rows", type=int, nargs="*", default=[8, 4], help="exact rows of the whole steps timed "
                   "(none: the attention part only)")
    p.add_argument("--no-attention", action="store_true", help="leave the attention part out")
    a = p.parse_args()
    res = {"run_info": provenance.run_info(), "args": vars(a) | {"out": str(a.out)}, "attention_us": {}, "steps": {}}

    def save():
        write_atomic(a.out, json.dumps(res, indent=1))

    span = bucket(CTX + bench.EXACT_NEW_TOKENS + 16)
    for rows in () if a.no_attention else (16, 8, 4):
        res["attention_us"] |= attention_us(rows, span)
        print(json.dumps(res["attention_us"]), flush=True)
        save()
    if not a.rows:
        return
    model = bench.llama8b(32)
    res["floor_ms"] = sum(t.numel() * t.element_size() for t in model.parameters()) / bench.copy_bandwidth() * 1e3
    for rows in a.rows:
        target = Target(model, CTX + bench.EXACT_NEW_TOKENS + rows, cuda_graphs=True, compile="auto", exact=rows)
        target.exact_span = bucket(CTX + bench.EXACT_NEW_TOKENS + rows)
        target.kv.rewind(0)
        target.forward(torch.randint(0, 1000, (CTX,), device="cuda"), 0, last_logits_only=True)
        token = torch.randint(0, 1000, (1,), device="cuda")
        ms = bench.cuda_median_ms(lambda: target.forward(token, CTX))
        res["steps"][f"exact_rows{rows}_ctx{CTX}_q1"] = ms
        res["steps"][f"exact_rows{rows}_ctx{CTX}_q1_x_floor"] = ms / res["floor_ms"]
        print(json.dumps(res["steps"]), flush=True)
        target.kv = None
        save()


if __name__ == "__main__":
    main()
