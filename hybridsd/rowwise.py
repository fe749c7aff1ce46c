"""Exact mode's per-row steps on CUDA around its matmuls: RMSNorm, and rope with the KV-cache write.

Each is one Triton kernel in which a row (a token) is computed by one program from its own inputs only, so its
bits do not depend on the block around it; both are launched as programmatic dependents (:mod:`hybridsd.pdl`), as
are :func:`~hybridsd.linear.row_linear` and the split-KV attention, so that in exact mode's decoder layer every
kernel starts while the one before it drains. Their rounding follows torch.compile's (fp32 inside a kernel,
rounded where HF's modules produce a tensor of the model's dtype), not eager PyTorch's op by op.
"""

from __future__ import annotations

import functools

import torch

from hybridsd.pdl import pdl_options


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def rms_norm_rows(x: torch.Tensor, weight: torch.Tensor, eps: float, wrap=lambda kernel: kernel) -> torch.Tensor:
    """HF's RMSNorm of each row of ``x`` ``[M, H]`` by ``weight`` ``[H]`` (CUDA, Triton), one program per row.
    ``wrap``: ``torch.library.wrap_triton`` when traced by ``torch.compile``."""
    if x.dim() != 2 or weight.shape != x.shape[1:]:
        raise ValueError(f"rms_norm_rows takes x [M, H] and weight [H], got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)  # [M, H]
    block = _pow2(x.shape[1])
    wrap(_kernels().rms_norm_kernel)[(x.shape[0],)](
        x, weight.contiguous(), out, x.shape[1], x.stride(0), out.stride(0), EPS=float(eps), BLOCK=block,
        num_warps=8 if block >= 4096 else 4, **pdl_options(x.device))
    return out


def rope_kv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
            slots: torch.Tensor, n_heads: int, q_norm: torch.Tensor | None = None,
            k_norm: torch.Tensor | None = None, eps: float = 1e-6, wrap=lambda kernel: kernel) -> torch.Tensor:
    """The grouped queries ``[Hkv, g*T, D]`` (row ``j*T + t``: query head ``h*g + j`` of token ``t``) of ``qkv``
    ``[T, (Hq + 2 Hkv) D]``, each head RMS-normalized by ``q_norm`` (``[D]``, qwen3) when given and rotated by ``cos,
    sin`` ``[T, D]`` (halves convention); its key heads, normalized by ``k_norm`` and rotated likewise, and its value
    heads are written into ``k_cache, v_cache`` ``[1, Hkv, S, D]`` at ``slots`` ``[T]`` (CUDA, Triton)."""
    t = qkv.shape[0]
    _, n_kv, _, d = k_cache.shape
    if (qkv.dim() != 2 or d % 2 or n_heads % n_kv or qkv.shape[1] != (n_heads + 2 * n_kv) * d
            or cos.shape != (t, d) or sin.shape != (t, d) or slots.shape != (t,) or v_cache.shape != k_cache.shape
            or (q_norm is None) != (k_norm is None)):
        raise ValueError(f"rope_kv takes qkv [T, (Hq + 2 Hkv) D] with Hkv dividing Hq = {n_heads} and D even, cos and "
                         f"sin [T, D], slots [T], caches [1, Hkv, S, D] and both head norms or none; got qkv "
                         f"{tuple(qkv.shape)}, cos {tuple(cos.shape)}, slots {tuple(slots.shape)}, cache "
                         f"{tuple(k_cache.shape)}")
    qkv, cos, sin = (x if x.stride(-1) == 1 else x.contiguous() for x in (qkv, cos, sin))
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("rope_kv writes caches whose last dimension is contiguous")
    q = torch.empty(n_kv, n_heads // n_kv * t, d, dtype=qkv.dtype, device=qkv.device)  # [Hkv, g*T, D]
    norms = (qkv, qkv) if q_norm is None else (q_norm.contiguous(), k_norm.contiguous())  # unused when None
    wrap(_kernels().rope_kv_kernel)[(t,)](
        qkv, cos, sin, slots, *norms, q, k_cache, v_cache, t, qkv.stride(0), cos.stride(0), k_cache.stride(1),
        k_cache.stride(2), v_cache.stride(1), v_cache.stride(2), HQ=n_heads, HKV=n_kv, D=d, HALF_PAD=_pow2(d // 2),
        HQ_PAD=_pow2(n_heads), HKV_PAD=_pow2(n_kv), HAS_NORM=q_norm is not None, EPS=float(eps),
        **pdl_options(qkv.device))
    return q


@functools.cache
def _kernels():
    """:mod:`hybridsd.rowwise_kernels` (imported on first use)."""
    import hybridsd.rowwise_kernels as kernels

    return kernels


@functools.cache
def rms_norm_op():
    """:func:`rms_norm_rows` as a custom op that ``torch.compile`` traces into (registered on first use)."""
    from torch.library import triton_op, wrap_triton

    @triton_op("hybridsd::rms_norm_rows", mutates_args={})
    def rms_norm_custom(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return rms_norm_rows(x, weight, eps, wrap=wrap_triton)

    return rms_norm_custom


@functools.cache
def rope_kv_op():
    """:func:`rope_kv` as a custom op that writes the caches (registered on first use)."""
    from torch.library import triton_op, wrap_triton

    @triton_op("hybridsd::rope_kv", mutates_args={"k_cache", "v_cache"})
    def rope_kv_custom(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                       v_cache: torch.Tensor, slots: torch.Tensor, n_heads: int, q_norm: torch.Tensor | None,
                       k_norm: torch.Tensor | None, eps: float) -> torch.Tensor:
        return rope_kv(qkv, cos, sin, k_cache, v_cache, slots, n_heads, q_norm, k_norm, eps, wrap=wrap_triton)

    return rope_kv_custom
