"""A split-K Triton kernel for few-row matmuls against ``F.linear`` on the 8B shape's matrices, 1 and 9 rows.

    python experiments/bench_linear.py --out experiments/results/bench_linear.json

Each timing is a CUDA graph of ``calls`` back-to-back multiplications cycling over copies of the weight
that together exceed the L2 cache several times (as 32 layers would), median of CUDA-event timings of
its replays after warm-up, divided by ``calls``. Bandwidth counts the weight bytes. The sweep covers
tile sizes, splits, warps and pipeline stages; ``plan`` rows use :func:`splitk_plan`.

Why: at batch 1 a verify step multiplies ``T <= 16`` rows by each weight; the o and down projections have
only ``N = 4096`` outputs, so a GEMM that gives each program a whole row of ``K`` may run too few programs to
keep the memory busy. The kernel here also splits ``K`` (programs ``(N tile, K chunk)`` write fp32 partials,
summed in a fixed order). Result (``experiments/results/speed_session4/bench_linear.json``): cuBLAS's
``F.linear`` in a CUDA graph is as fast at 9 rows as at 1 and faster than every configuration of this kernel
on every matrix but the LM head, so the library keeps ``F.linear``; the kernel stays here as the record.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from experiments import provenance

SPLITK_MAX_ROWS = 16  # rows one program holds (tl.dot needs at least 16)


def splitk_plan(n: int, k: int, block_n: int = 64, block_k: int = 128, programs: int = 512) -> tuple[int, int, int]:
    """``(BLOCK_N, BLOCK_K, splits)``: ``N`` tiles times ``K`` chunks close to ``programs`` (a few waves of
    an H100/H200's 132 multiprocessors), each chunk a whole number of ``BLOCK_K`` tiles."""
    tiles, k_tiles = -(-n // block_n), -(-k // block_k)
    return block_n, block_k, max(1, min(k_tiles, programs // tiles))


def splitk_linear(x: torch.Tensor, w: torch.Tensor, plan: tuple[int, int, int] | None = None, num_warps: int = 4,
                  num_stages: int = 4) -> torch.Tensor:
    """``x @ w.T`` (``[T, N]`` in ``x``'s dtype) by the split-K kernel; ``plan`` as :func:`splitk_plan` (its
    default)."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    w = w if w.stride(-1) == 1 else w.contiguous()
    t, k = x.shape
    n = w.shape[0]
    if t > SPLITK_MAX_ROWS:
        raise ValueError(f"the split-K kernel takes at most {SPLITK_MAX_ROWS} rows, got {t}")
    block_n, block_k, splits = plan or splitk_plan(n, k)
    chunk = -(-(-(-k // block_k)) // splits) * block_k  # columns of K per program: whole BLOCK_K tiles
    splits = -(-k // chunk)  # no empty chunk
    part = torch.empty(splits, t, n, dtype=torch.float32, device=x.device)  # [C, T, N]
    _kernel()[(-(-n // block_n), splits)](
        x, w, part, t, n, k, x.stride(0), w.stride(0), chunk,
        BLOCK_T=SPLITK_MAX_ROWS, BLOCK_N=block_n, BLOCK_K=block_k, IEEE=x.dtype == torch.float32,
        num_warps=num_warps, num_stages=num_stages)
    return part.sum(0).to(x.dtype)  # [T, N], chunks summed in order


@functools.cache
def _kernel():
    """The Triton kernel (compiled on first use)."""
    import triton
    import triton.language as tl

    @triton.jit
    def splitk_kernel(X, W, PART, T, N, K, sxt, swn, CHUNK,
                      BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr):
        j = tl.program_id(0)
        c = tl.program_id(1)
        t = tl.arange(0, BLOCK_T)
        n = j * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros([BLOCK_T, BLOCK_N], tl.float32)
        for k0 in range(c * CHUNK, c * CHUNK + CHUNK, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            k_ok = kk < K
            x = tl.load(X + t[:, None] * sxt + kk[None, :], mask=(t[:, None] < T) & k_ok[None, :], other=0.0)
            w = tl.load(W + n[:, None] * swn + kk[None, :], mask=(n[:, None] < N) & k_ok[None, :], other=0.0)
            if IEEE:
                acc += tl.dot(x, tl.trans(w), input_precision="ieee")
            else:
                acc += tl.dot(x, tl.trans(w))
        tl.store(PART + (c * T + t[:, None]) * N + n[None, :], acc, mask=(t[:, None] < T) & (n[None, :] < N))

    return splitk_kernel


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
