"""Linear layers of a small block whose every row is computed alone: exact mode's matmuls on CUDA.

A row of ``row_linear``'s output is a sum over the input width in one fixed order whatever the other rows of
the block hold: one Triton program per tile of output features, over every row and the whole width (no
split-K), with a launch plan that is a function of the weight's shape only. It folds in what a decoder layer
does around its matmuls: a SiLU-gated pair of projections (gate rows, then up rows: ``silu(x @ Wg.T) *
(x @ Wu.T)``), the residual added to the rounded product (as ``res + F.linear(...)``), and an RMS norm between
two of them, in two halves: the kernel that writes the residual stream also writes it times the next norm's
weight with its sums of squares in pieces (``norm``), and the next kernel multiplies each row's product by its
``rsqrt(mean square + eps)`` (``scale``), so no kernel of its own runs the norm. On Hopper and later it is
launched as a programmatic dependent of the kernel before it (PDL): it starts while that kernel drains and
waits for its results before reading any input. Its rounding differs from cuBLAS' (and, with the norm folded,
from a norm rounded before the matmul) in the last bits; what it guarantees is that a row's bits do not depend
on the block around it.
"""

from __future__ import annotations

import functools

import torch

ROW_TILE_N = 32  # output features per program: ~N/32 programs stream the weight (no split-K: a row's order fixed)
ROW_MAX_M = 64  # rows row_linear takes (one row tile)
ROW_WAVE = 132  # programs of one wave of row_linear on an H100/H200 (one per SM)


def row_plan(n: int, k: int, element_size: int, glu: bool) -> tuple[int, int, int, int]:
    """``(BLOCK_N, BLOCK_K, stages, warps)`` of ``row_linear`` for ``n`` outputs (per half with ``glu``) over width
    ``k``: tiles of ``ROW_TILE_N`` features, or twice that where those would leave a second wave part-filled
    (``ROW_WAVE < n / ROW_TILE_N <= 2 ROW_WAVE``, without ``glu``: one wave of wider tiles streams faster); K
    steps of 256 two-byte elements (128 with the wider tiles), halved for 4-byte inputs, never much wider than
    ``k``; 5 stages, 6 with the wider tiles, 3 where a step holds two weight tiles or 4-byte ones (shared memory).
    Picked from a sweep of tile widths, K steps, stages and warps on an H200 (16 rows, Llama-3.1-8B shapes);
    ``experiments/bench_speed.py --kernels`` times the plan (``gemm_rows``' ``row_linear`` rows)."""
    if min(n, k) < 1 or element_size not in (2, 4):
        raise ValueError(f"row_plan needs n, k >= 1 and 2- or 4-byte elements, got {n}, {k}, {element_size}")
    wide = not glu and ROW_WAVE < -(-n // ROW_TILE_N) <= 2 * ROW_WAVE
    block_k = (128 if wide else 256) * 2 // element_size
    block_k = min(block_k, max(16, 1 << (k - 1).bit_length()))
    stages = 3 if glu or element_size > 2 else 6 if wide else 5
    return ROW_TILE_N * (2 if wide else 1), block_k, stages, 4


def row_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, *, glu: bool = False,
               residual: torch.Tensor | None = None, scale: torch.Tensor | None = None, eps: float = 0.0,
               norm: torch.Tensor | None = None, wrap=lambda kernel: kernel):
    """``residual + F.linear(x, w, b)`` for ``x`` ``[M, K]`` (``M <= ROW_MAX_M``), ``w`` ``[N, K]`` (``[2N, K]``, gate
    then up, with ``glu``: ``silu(gate) * up``), ``residual`` ``[M, N]`` or None; returns ``[M, N]`` in ``x``'s
    dtype (CUDA, Triton). Blocks of up to 16 rows share one row tile, so a row's bits are the same alone and in any
    such block; larger blocks take a larger tile. ``wrap``: ``torch.library.wrap_triton`` when traced by
    ``torch.compile``.

    An RMS norm folded in. ``scale`` ``[M, P]`` fp32 (with ``eps``): ``x`` is ``h * g`` for rows ``h`` whose sums of
    squares are ``scale``'s rows' sums, and each row's product is multiplied by ``rsqrt(mean(h**2) + eps)`` before
    the bias: ``F.linear(rms_norm(h, g, eps), w, b)`` up to rounding. ``norm`` ``[N]`` (a norm weight): returns
    ``(out, out * norm [M, N], sums [M, P] fp32)``, the sums of squares of ``out``'s rows in ``P`` pieces, which
    the next ``row_linear`` takes as ``x`` and ``scale``."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1] or not 1 <= x.shape[0] <= ROW_MAX_M:
        raise ValueError(f"row_linear takes x [M <= {ROW_MAX_M}, K] and w [N, K], got {tuple(x.shape)} and "
                         f"{tuple(w.shape)}")
    if glu and w.shape[0] % 2:
        raise ValueError(f"glu needs the gate and up rows of w stacked (an even count), got {w.shape[0]}")
    m, k = x.shape
    n = w.shape[0] // 2 if glu else w.shape[0]
    if scale is not None and (scale.dim() != 2 or scale.shape[0] != m or scale.dtype != torch.float32):
        raise ValueError(f"row_linear's scale is [M={m}, pieces] fp32, got {tuple(scale.shape)} {scale.dtype}")
    if norm is not None and norm.shape != (n,):
        raise ValueError(f"row_linear's norm weight is [N={n}], got {tuple(norm.shape)}")
    x, w, b, residual, scale = (t if t is None or t.stride(-1) == 1 else t.contiguous()
                                for t in (x, w, b, residual, scale))
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)  # [M, N]
    res = out if residual is None else residual
    block_n, block_k, stages, warps = row_plan(n, k, x.element_size(), glu)
    programs = -(-n // block_n)
    if norm is not None:
        xg = torch.empty_like(out)  # [M, N] out * norm
        sums = torch.empty(m, programs, dtype=torch.float32, device=x.device)  # [M, P] per program
    pieces = 1 if scale is None else scale.shape[1]
    wrap(_kernel())[(programs,)](
        x, w, w if b is None else b, res, out, out if scale is None else scale, w if norm is None else norm,
        out if norm is None else xg, out if norm is None else sums, m, n, k, pieces,
        x.stride(0), w.stride(0), res.stride(0), out.stride(0),
        BLOCK_M=max(16, 1 << (m - 1).bit_length()), BLOCK_N=block_n, BLOCK_K=block_k, HAS_BIAS=b is not None,
        GLU=glu, HAS_RES=residual is not None, SCALED=scale is not None, P_PAD=max(16, 1 << (pieces - 1).bit_length()),
        EPS=float(eps), NORM=norm is not None, IEEE=x.dtype == torch.float32, num_stages=stages, num_warps=warps,
        **pdl_options(x.device))
    return out if norm is None else (out, xg, sums)


def pdl_options(device: torch.device) -> dict:
    """Launch options of the kernel on ``device``: programmatic dependent launch (``PDL``, ``launch_pdl``) on a
    CUDA device of compute capability 9 or more whose Triton launches with it, else none (``PDL`` off)."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 9 or not _pdl_launches():
        return {"PDL": False}
    return {"PDL": True, "launch_pdl": True}


def _pdl_launches() -> bool:
    """Whether Triton takes ``launch_pdl`` (the release that added it also added ``tl.extra.cuda.gdc_wait``; not a
    cached function, which ``torch.compile`` would trace through with a warning)."""
    import triton.language as tl

    return hasattr(tl.extra.cuda, "gdc_wait")


def _kernel():
    """The kernel (:mod:`hybridsd.linear_kernels`, imported on first use)."""
    from hybridsd.linear_kernels import row_linear_kernel

    return row_linear_kernel


@functools.cache
def row_linear_op():
    """``row_linear`` (without ``norm``) as a custom op that ``torch.compile`` traces into (registered on first use):
    ``op(x, w, b, glu, residual, scale, eps)``."""
    from torch.library import triton_op, wrap_triton

    @triton_op("hybridsd::row_linear", mutates_args={})
    def row_linear_custom(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, glu: bool,
                          residual: torch.Tensor | None, scale: torch.Tensor | None, eps: float) -> torch.Tensor:
        return row_linear(x, w, b, glu=glu, residual=residual, scale=scale, eps=eps, wrap=wrap_triton)

    return row_linear_custom


@functools.cache
def row_linear_norm_op():
    """``row_linear`` with ``norm`` as a custom op (registered on first use): ``op(x, w, b, residual, norm) -> (out,
    out * norm, sums)``."""
    from torch.library import triton_op, wrap_triton

    @triton_op("hybridsd::row_linear_norm", mutates_args={})
    def row_linear_norm_custom(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                               residual: torch.Tensor | None, norm: torch.Tensor
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return row_linear(x, w, b, residual=residual, norm=norm, wrap=wrap_triton)

    return row_linear_norm_custom
