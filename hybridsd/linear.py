"""``x @ w.T`` for the few rows of a decode or verify step, by a split-K Triton kernel.

At batch 1 a step multiplies ``T <= 16`` token rows by each weight matrix: pure weight streaming,
bound by memory bandwidth. Library GEMMs tile the output and give each program a whole row of
``K``, so the o and down projections (``N = 4096`` outputs) run few programs, too few to keep
the memory system busy (2-3 TB/s at ``T = 9`` on an H200, against ~4.2 for a copy). ``"splitk"``
also splits ``K``: programs ``(N tile, K chunk)`` each write an fp32 partial ``[T, N tile]``,
summed in a fixed order afterwards (deterministic; under ``torch.compile`` the sum fuses with
what follows, e.g. the residual add). A row's result never depends on the other rows.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

KERNELS = ("torch", "splitk")
SPLITK_MAX_ROWS = 16  # rows one program holds (tl.dot needs at least 16)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, kernel: str = "torch") -> torch.Tensor:
    """``F.linear(x, w, b)`` for ``x`` ``[T, K]``, ``w`` ``[N, K]``; ``"splitk"`` (CUDA, Triton) serves
    ``T <= SPLITK_MAX_ROWS``, longer inputs go to ``F.linear``."""
    if kernel == "splitk" and x.shape[0] <= SPLITK_MAX_ROWS:
        y = _splitk_op()(x, w)
        return y if b is None else y + b
    return F.linear(x, w, b)


def splitk_plan(n: int, k: int, block_n: int = 64, block_k: int = 128, programs: int = 512) -> tuple[int, int, int]:
    """``(BLOCK_N, BLOCK_K, splits)``: ``N`` tiles times ``K`` chunks close to ``programs`` (a few waves of
    an H100/H200's 132 multiprocessors), each chunk a whole number of ``BLOCK_K`` tiles."""
    tiles, k_tiles = -(-n // block_n), -(-k // block_k)
    return block_n, block_k, max(1, min(k_tiles, programs // tiles))


def splitk_linear(x: torch.Tensor, w: torch.Tensor, plan: tuple[int, int, int] | None = None, num_warps: int = 4,
                  num_stages: int = 4, wrap=lambda kernel: kernel) -> torch.Tensor:
    """``x @ w.T`` (``[T, N]`` in ``x``'s dtype) by the split-K kernel; ``plan`` as :func:`splitk_plan` (its
    default); ``wrap``: ``torch.library.wrap_triton`` when traced by ``torch.compile``."""
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
    wrap(_kernel())[(-(-n // block_n), splits)](
        x, w, part, t, n, k, x.stride(0), w.stride(0), chunk,
        BLOCK_T=SPLITK_MAX_ROWS, BLOCK_N=block_n, BLOCK_K=block_k, IEEE=x.dtype == torch.float32,
        num_warps=num_warps, num_stages=num_stages)
    return part.sum(0).to(x.dtype)  # [T, N], chunks summed in order


@functools.cache
def _kernel():
    """The Triton kernel (Triton imported on first use, so importing hybridsd never needs it)."""
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


@functools.cache
def _splitk_op():
    """``splitk_linear`` as a custom op that ``torch.compile`` traces into (registered on first use)."""
    from torch.library import triton_op, wrap_triton

    @triton_op("hybridsd::splitk_linear", mutates_args={})
    def splitk_op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return splitk_linear(x, w, wrap=wrap_triton)

    return splitk_op
