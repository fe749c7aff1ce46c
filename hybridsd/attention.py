"""Attention of a block of new tokens over the KV cache, each KV head read once for its query group.

At batch 1 a decode or verify step has few query rows (the ``g`` query heads of a KV head times
the block's ``T`` tokens) against up to thousands of cached keys. ``"sdpa"`` hands the grouped
rows to ``scaled_dot_product_attention`` (one program per KV head on CUDA: a long serial loop
over the keys); ``"split"`` is a Triton kernel with one program per (KV head, chunk of keys)
whose partial softmaxes are merged by their log-sum-exp (flash-decoding) in a second kernel that
writes the token-major output the o projection reads, CUDA only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.library import triton_op, wrap_triton

KERNELS = ("sdpa", "split")
SPLIT_ROW_TILE = 64  # query rows (g * T) one split-KV program holds (4 warps) ...
SPLIT_WIDE_TILE = 128  # ... or, for a block of more rows (a draft tree) of 2-byte inputs, 8 warps (K/V tiles read
#                        once per 128 rows; fp32 tiles of 128 rows at head dim 128 overflow an H100/H200 SM's memory)
SPLIT_MAX_ROWS = 512  # query rows the split kernel serves (in row tiles); longer blocks (prefill) go to SDPA
SPLIT_PROGRAMS = 128  # programs the split kernel's grid aims at (one H100/H200 wave)
EXACT_ROW_TILE = 16  # exact mode: query rows per program, token-major (a tile of padding tokens does no work)
EXACT_CHUNK = 256  # exact mode: keys per program and partial softmax, whatever the span: a row's bits depend only on
#                    its keys (the partials merged in key order); chunks past the keys the block's tokens see are
#                    skipped (attention_plans in experiments/results/exact/speed_exact.json)


def grouped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor,
                      scale: float, kernel: str = "sdpa", key_slots: torch.Tensor | None = None,
                      branch: torch.Tensor | None = None, block: torch.Tensor | None = None,
                      rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Attention of ``q`` ``[Hkv, g*T, D]`` (row ``j*T + t``: query head ``j`` of the group, token ``t``) over
    ``keys, values`` ``[Hkv, S, D]``, where ``allowed`` ``[T, S]`` (bool) says which keys token ``t`` sees;
    every token must see at least one key. Returns ``[T, Hkv*g*D]``: token ``t``'s heads in query-head order
    (head ``h*g + j``), what the o projection reads. ``"split"`` serves blocks of up to ``SPLIT_MAX_ROWS``
    rows (decode and verify steps, draft trees included: a block of more than ``SPLIT_ROW_TILE`` rows is cut into
    row tiles, of ``SPLIT_WIDE_TILE`` rows for 2-byte inputs, each with programs of its own); longer ones
    (prefill) go to SDPA.

    Exact mode (``block`` or ``key_slots`` given). Virtual key order: with ``key_slots`` ``[NB, S]`` (int64) and
    ``branch`` ``[T]`` (int64 in ``[0, NB)``), token ``t`` reads its ``i``-th key from slot
    ``key_slots[branch[t], i]`` and ``allowed`` is in that order (without them every token reads slot order, as in
    a decode step or a chain: the split kernel is then compiled without its gathering path, with the bits of the
    gathering kernel's in-place tiles). Every token is then reduced over its keys in the order and at the places a
    plain decode step would use, whatever slots its tree branch occupies: a row's scores and value products are
    selected from its own view's (the same code for every view; a row tile all on view 0 skips the others), so a
    row's result depends only on its own keys. ``block`` ``[3]`` or ``[4]`` (int64, ``"split"`` only; default
    ``[0, S, T, S]``):
    the views differ from slot order only at slots ``block[0] .. block[1] - 1`` (the split kernel reads other key
    tiles in place), and the first ``block[2]`` tokens are real, the others padding (the split kernel's row tiles,
    :data:`EXACT_ROW_TILE` rows token-major, that hold only padding read no keys; padding rows come out as zeros);
    no real token sees the keys from ``block[3]`` on (default ``S``: the split kernel skips the key chunks wholly past
    it, which would add exact zeros, so a step's attention costs its context, not the span). The split kernel
    reduces a row's keys in partials of :data:`EXACT_CHUNK` keys merged in key order, whatever ``S``.

    ``q`` may also be token-major, ``[T, Hkv, g, D]`` (any strides but the last), and ``rotary`` ``(cos, sin)``
    (``[T, D]`` each) asks for it to be rotated first (halves convention): exact mode's split kernel does both as it
    loads the queries (in fp32, rounded to ``q``'s dtype), elsewhere they are done in torch first.
    """
    if (key_slots is None) != (branch is None):
        raise ValueError("key_slots and branch are given together")
    if rotary is not None and q.dim() != 4:
        raise ValueError(f"rotary needs token-major queries [T, Hkv, g, D], got shape {tuple(q.shape)}")
    exact = key_slots is not None or block is not None
    rows = q.shape[0] * q.shape[2] if q.dim() == 4 else q.shape[1]
    if q.dim() == 4 and not (kernel == "split" and exact and rows <= SPLIT_MAX_ROWS):
        q, rotary = grouped_rows(q, rotary), None
    if kernel == "split" and rows <= SPLIT_MAX_ROWS:
        if not exact:
            return _split_kv_op(q, keys, values, allowed, scale)
        if block is None:
            block = torch.tensor([0, *allowed.shape[::-1], allowed.shape[1]], device=q.device)
        cos, sin = rotary or (None, None)
        return _split_kv_exact_op(q, keys, values, allowed, scale, key_slots, branch, block, cos, sin)
    h, rows, d = q.shape
    t = allowed.shape[0]
    g = rows // t
    mask = allowed.repeat(g, 1)  # [g*T, S]
    if key_slots is None:
        o = F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask, scale=scale)[0]
    else:  # one batch entry per branch view; each row keeps its own branch's result
        nb = key_slots.shape[0]
        kb, vb = keys[:, key_slots].transpose(0, 1), values[:, key_slots].transpose(0, 1)  # [NB, Hkv, S, D]
        o = F.scaled_dot_product_attention(q[None].expand(nb, -1, -1, -1), kb, vb, attn_mask=mask,
                                           scale=scale)  # [NB, Hkv, g*T, D]
        pick = branch.repeat(g)  # [g*T] branch of row j*T + t
        o = o.permute(1, 2, 0, 3).gather(2, pick[None, :, None, None].expand(h, rows, 1, d))[:, :, 0]
    return o.reshape(h, g, t, d).permute(2, 0, 1, 3).reshape(t, h * g * d)  # o: [Hkv, g*T, D]


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (``[T, ..., D]``) by ``cos, sin`` (broadcast to it), halves convention."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def grouped_rows(q: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Token-major queries ``[T, Hkv, g, D]`` (rotated first by ``rotary`` ``(cos, sin)`` ``[T, D]`` when given) as
    :func:`grouped_attention`'s rows ``[Hkv, g*T, D]``, row ``j*T + t``."""
    t, h, g, d = q.shape
    if rotary is not None:
        q = rope(q, rotary[0][:, None, None], rotary[1][:, None, None])
    return q.permute(1, 2, 0, 3).reshape(h, g * t, d)


def split_plan(rows: int, keys: int, kv_heads: int, head_dim: int, programs: int = SPLIT_PROGRAMS,
               row_tile: int | None = None) -> tuple[int, int, int, int]:
    """``(BLOCK_R, BLOCK_N, chunk, splits)``: row and key tile sizes, keys per program and number of programs
    per KV head and row tile (``ceil(rows / BLOCK_R)`` row tiles, ``BLOCK_R <= max(16, row_tile)``; default row
    tile :data:`SPLIT_ROW_TILE`, or :data:`SPLIT_WIDE_TILE` for blocks of more rows), so that the grid has about
    ``programs`` programs and each chunk whole tiles."""
    if row_tile is None:
        row_tile = SPLIT_ROW_TILE if rows <= SPLIT_ROW_TILE else SPLIT_WIDE_TILE
    if programs < 1 or row_tile < 1:
        raise ValueError(f"programs and row_tile must be >= 1, got {programs} and {row_tile}")
    block_r = max(16, _next_pow2(min(rows, row_tile)))
    row_tiles = -(-rows // block_r)
    block_n = keys_per_tile(head_dim)
    tiles = -(-keys // block_n)
    splits = max(1, min(tiles, programs // max(1, kv_heads * row_tiles)))
    chunk = -(-tiles // splits) * block_n
    return block_r, block_n, chunk, -(-keys // chunk)


def keys_per_tile(head_dim: int) -> int:
    """Keys per tile of the split kernel (a divisor of :data:`EXACT_CHUNK`)."""
    return 64 if head_dim <= 128 else 32


def _next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def split_kv_attention(q, keys, values, allowed, scale: float, wrap=lambda kernel: kernel, key_slots=None,
                       branch=None, programs: int | None = None, row_tile: int | None = None, block=None,
                       rotary=None):
    """:func:`grouped_attention` by the split-KV Triton kernel (``wrap``: ``torch.library.wrap_triton`` when
    traced by ``torch.compile``): partial results in fp32, merged in chunk order by a second kernel. ``q``:
    ``[Hkv, g*T, D]`` rows, or token-major ``[T, Hkv, g, D]``, rotated by ``rotary`` ``(cos, sin)`` ``[T, D]`` when
    given. ``key_slots, branch, block`` (either ``key_slots`` or ``block`` given: exact mode): the virtual key order,
    where it differs from slot order, the count of real tokens and the key bound (see :func:`grouped_attention`;
    exact mode's row tiles are token-major, one program per :data:`EXACT_CHUNK` keys); ``programs``, ``row_tile``:
    the grid's aim (default :data:`SPLIT_PROGRAMS`; not in exact mode) and the most query rows per program
    (:func:`split_plan`; by default :data:`SPLIT_ROW_TILE` for inputs of more than 2 bytes an element, in exact mode
    :data:`EXACT_ROW_TILE`)."""
    q, keys, values, allowed = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, keys, values, allowed))
    exact = key_slots is not None or block is not None
    nb = 0 if key_slots is None else key_slots.shape[0]
    t, s = allowed.shape
    if q.dim() == 4:  # token-major [T, Hkv, g, D]: row j*T + t of head h at h*sqh + j*sqj + t*sqt
        h, g, d = q.shape[1:]
        sqh, sqj, sqt = q.stride(1), q.stride(2), q.stride(0)
    else:
        h, d = q.shape[0], q.shape[2]
        g = q.shape[1] // t
        sqh, sqj, sqt = q.stride(0), t * q.stride(1), q.stride(1)
    rows = g * t
    if rotary is None:
        cos = sin = allowed  # unused pointers (ROPE off)
    else:
        cos, sin = (x.contiguous() for x in rotary)
    if not exact:  # unused pointers (NB = 0 compiles the plain kernel)
        key_slots, branch, block = allowed, allowed, allowed
        if row_tile is None and q.element_size() > 2:
            row_tile = SPLIT_ROW_TILE  # wide tiles are for 2-byte inputs only (shared memory)
        aim = SPLIT_PROGRAMS if programs is None else programs
        block_r, block_n, chunk, splits = split_plan(rows, s, h, d, aim, row_tile)
    else:  # one program per EXACT_CHUNK keys and row tile; the tiles of padding tokens read no keys
        if block is None:
            block = torch.tensor([0, s, t, s], device=q.device)
        elif block.shape[0] == 3:  # no key bound: every key tile may be seen
            block = torch.cat([block, block.new_tensor([s])])
        if key_slots is None:  # unused pointers (NB = 0: every key tile read in place)
            key_slots, branch = block, block
        key_slots, branch = key_slots.contiguous(), branch.contiguous()
        block_r = max(16, _next_pow2(EXACT_ROW_TILE if row_tile is None else row_tile))
        block_n, chunk = keys_per_tile(d), EXACT_CHUNK
        splits = -(-s // chunk)
    row_tiles = -(-rows // block_r)
    part = torch.empty(h, splits, rows, d, dtype=torch.float32, device=q.device)  # [Hkv, C, R, D] unnormalized
    stats = torch.empty(h, splits, 2, rows, dtype=torch.float32, device=q.device)  # [Hkv, C, (max, sum), R]
    wrap(_kernel())[(h, splits, row_tiles)](
        q, keys, values, allowed, key_slots, branch, block, cos, sin, part, stats,
        sqh, sqj, sqt, keys.stride(0), keys.stride(1), values.stride(0), values.stride(1),
        allowed.stride(0), cos.stride(0), rows, t, s, chunk,
        SCALE=scale, BLOCK_R=block_r, BLOCK_N=block_n, D=d, D_PAD=_next_pow2(max(d, 16)),
        IEEE=q.dtype == torch.float32, NB=nb, G=g, EXACT=exact, ROPE=rotary is not None,
        **({"num_warps": 8} if block_r >= 128 else {}))  # else 4
    out = torch.empty(t, h * rows * d // t, dtype=q.dtype, device=q.device)  # [T, Hkv*g*D]
    block_m = 16
    wrap(_merge_kernel())[(h, -(-rows // block_m))](
        part, stats, out, block, splits, chunk, rows, t, out.stride(0), BLOCK_R=block_m, D=d,
        D_PAD=_next_pow2(max(d, 16)), EXACT=exact)
    return out


def _kernel():
    """The split kernel (:mod:`hybridsd.attention_kernels`, imported on first use; not a cached function, which
    ``torch.compile`` would trace through with a warning)."""
    from hybridsd.attention_kernels import split_kv_kernel

    return split_kv_kernel


def _merge_kernel():
    """The kernel that merges the chunks' partial softmaxes (imported on first use)."""
    from hybridsd.attention_kernels import split_kv_merge

    return split_kv_merge


@triton_op("hybridsd::split_kv_attention", mutates_args={})
def _split_kv_op(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor,
                 scale: float) -> torch.Tensor:
    """``split_kv_attention`` as a custom op that ``torch.compile`` traces into."""
    return split_kv_attention(q, keys, values, allowed, scale, wrap=wrap_triton)


@triton_op("hybridsd::split_kv_attention_exact", mutates_args={})
def _split_kv_exact_op(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor,
                       scale: float, key_slots: torch.Tensor | None, branch: torch.Tensor | None,
                       block: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
    """``split_kv_attention`` in virtual key order (exact mode) as a custom op."""
    return split_kv_attention(q, keys, values, allowed, scale, wrap=wrap_triton, key_slots=key_slots,
                              branch=branch, block=block, rotary=None if cos is None else (cos, sin))
