"""The split-K kernel (:mod:`hybridsd.linear`) against ``F.linear`` on the 8B shape's matrices, 1 and 9 rows.

    python experiments/bench_linear.py --out experiments/results/bench_linear.json

Each timing is a CUDA graph of ``calls`` back-to-back multiplications cycling over copies of the weight
that together exceed the L2 cache several times (as 32 layers would), median of CUDA-event timings of
its replays after warm-up, divided by ``calls``. Bandwidth counts the weight bytes. The sweep covers
tile sizes, splits, warps and pipeline stages; ``plan`` rows use :func:`hybridsd.linear.splitk_plan`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from hybridsd import provenance
from hybridsd.linear import splitk_linear, splitk_plan

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}  # (N, K) of Llama-3.1-8B


def graph_us(fn, ws, calls: int = 32, reps: int = 15) -> float:
    """Microseconds per call of ``fn(w)``, in a CUDA graph of ``calls`` calls over the weights ``ws`` in turn."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for w in ws[:2]:
            fn(w)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(ws[i % len(ws)])
    for _ in range(3):
        g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return 1e3 * statistics.median(times) / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("experiments/results/bench_linear.json"))
    p.add_argument("--rows", type=int, nargs="+", default=[1, 9])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    a = p.parse_args()
    torch.manual_seed(0)
    res = {"run_info": provenance.run_info(), "args": vars(a) | {"out": str(a.out)}, "rows": []}
    grid = list(itertools.product([32, 64, 128], [128, 256], [1, 2, 4, 8, 16], [4, 8], [3, 4]))
    for name in a.shapes:
        n, k = SHAPES[name]
        nbytes = n * k * 2
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(max(2, -(-2**31 // nbytes)))]
        for t in a.rows:
            x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
            ref = (x.float() @ ws[0].float().T)  # [t, n]
            scale = ref.abs().max().item()

            def row(kind, us, err=None, **cfg):
                r = {"shape": name, "n": n, "k": k, "rows": t, "kind": kind, "us": us,
                     "TBps": nbytes / (us * 1e-6) / 1e12, "rel_err": err} | cfg
                res["rows"].append(r)
                return r

            base = row("F.linear", graph_us(lambda w: F.linear(x, w), ws))
            best = None
            for combo in grid + [None]:  # None: the default plan
                bn, bk, s, nw, ns = combo or (None,) * 5
                cfg = dict(block_n=bn, block_k=bk, splits=s, num_warps=nw, num_stages=ns) if bn else {}
                plan = (bn, bk, s) if bn else splitk_plan(n, k)
                if bn and s > -(-k // bk):
                    continue
                kw = dict(num_warps=nw, num_stages=ns) if bn else {}
                try:
                    err = (splitk_linear(x, ws[0], plan, **kw).float() - ref).abs().max().item() / scale
                    us = graph_us(lambda w: splitk_linear(x, w, plan, **kw), ws)
                except Exception as e:  # noqa: BLE001 - a config that does not compile (shared memory) is skipped
                    res["rows"].append({"shape": name, "rows": t, **cfg, "failed": f"{type(e).__name__}: {str(e)[:120]}"})
                    continue
                r = row("splitk" if bn else "splitk_plan", us, err, **(cfg or dict(zip(("block_n", "block_k", "splits"), plan))))
                if bn and (best is None or us < best["us"]):
                    best = r
            plan_row = res["rows"][-1]
            print(f"{name:8s} T={t}: F.linear {base['us']:7.1f} us ({base['TBps']:.2f} TB/s)  plan {plan_row['us']:7.1f} us "
                  f"({plan_row['TBps']:.2f})  best {best['us']:7.1f} us ({best['TBps']:.2f}) "
                  f"{ {k: best[k] for k in ('block_n', 'block_k', 'splits', 'num_warps', 'num_stages')} }")
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(res, indent=1))
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
