"""Attention of a block of new tokens over the KV cache, each KV head read once for its query group.

At batch 1 a decode or verify step has few query rows (the ``g`` query heads of a KV head times
the block's ``T`` tokens) against up to thousands of cached keys. ``"sdpa"`` hands the grouped
rows to ``scaled_dot_product_attention`` (one program per KV head on CUDA: a long serial loop
over the keys); ``"split"`` is a Triton kernel with one program per (KV head, chunk of keys)
whose partial softmaxes are merged by their log-sum-exp (flash-decoding) in a second kernel that
writes the token-major output the o projection reads, CUDA only.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

KERNELS = ("sdpa", "split")
SPLIT_ROW_TILE = 64  # query rows (g * T) one split-KV program holds (4 warps) ...
SPLIT_WIDE_TILE = 128  # ... or, for a block of more rows (a draft tree) of 2-byte inputs, 8 warps (K/V tiles read
#                        once per 128 rows; fp32 tiles of 128 rows at head dim 128 overflow an H100/H200 SM's memory)
SPLIT_MAX_ROWS = 512  # query rows the split kernel serves (in row tiles); longer blocks (prefill) go to SDPA
SPLIT_PROGRAMS = 128  # programs the split kernel's grid aims at (one H100/H200 wave)


def grouped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor,
                      scale: float, kernel: str = "sdpa", key_slots: torch.Tensor | None = None,
                      branch: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of ``q`` ``[Hkv, g*T, D]`` (row ``j*T + t``: query head ``j`` of the group, token ``t``) over
    ``keys, values`` ``[Hkv, S, D]``, where ``allowed`` ``[T, S]`` (bool) says which keys token ``t`` sees;
    every token must see at least one key. Returns ``[T, Hkv*g*D]``: token ``t``'s heads in query-head order
    (head ``h*g + j``), what the o projection reads. ``"split"`` serves blocks of up to ``SPLIT_MAX_ROWS``
    rows (decode and verify steps, draft trees included: a block of more than ``SPLIT_ROW_TILE`` rows is cut into
    row tiles, of ``SPLIT_WIDE_TILE`` rows for 2-byte inputs, each with programs of its own); longer ones
    (prefill) go to SDPA.

    Virtual key order (exact mode): with ``key_slots`` ``[NB, S]`` (int64) and ``branch`` ``[T]`` (int64 in
    ``[0, NB)``), token ``t`` reads its ``i``-th key from slot ``key_slots[branch[t], i]`` and ``allowed``
    is in that order. Every token is then reduced over its keys in the order and at the places a plain decode
    step would use, whatever slots its tree branch occupies: a row's scores and value products are selected from
    its own view's (the same code for every view; a row tile all on view 0 skips the others), so a row's result
    depends only on its own keys.
    """
    if (key_slots is None) != (branch is None):
        raise ValueError("key_slots and branch are given together")
    if kernel == "split" and q.shape[1] <= SPLIT_MAX_ROWS:
        if key_slots is None:
            return _split_op()(q, keys, values, allowed, scale)
        return _split_exact_op()(q, keys, values, allowed, scale, key_slots, branch)
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
    block_n = 64 if head_dim <= 128 else 32
    tiles = -(-keys // block_n)
    splits = max(1, min(tiles, programs // max(1, kv_heads * row_tiles)))
    chunk = -(-tiles // splits) * block_n
    return block_r, block_n, chunk, -(-keys // chunk)


def _next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def split_kv_attention(q, keys, values, allowed, scale: float, wrap=lambda kernel: kernel, key_slots=None,
                       branch=None, programs: int = SPLIT_PROGRAMS, row_tile: int | None = None):
    """:func:`grouped_attention` by the split-KV Triton kernel (``wrap``: ``torch.library.wrap_triton`` when
    traced by ``torch.compile``): partial results in fp32, merged in chunk order by a second kernel.
    ``key_slots, branch``: the virtual key order of exact mode (see :func:`grouped_attention`); ``programs``,
    ``row_tile``: the grid's aim and the most query rows per program (:func:`split_plan`; by default
    :data:`SPLIT_ROW_TILE` for inputs of more than 2 bytes an element)."""
    q, keys, values, allowed = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, keys, values, allowed))
    nb = 0 if key_slots is None else key_slots.shape[0]
    if key_slots is None:  # unused pointers (NB = 0 compiles the plain kernel)
        key_slots, branch = allowed, allowed
    else:
        key_slots, branch = key_slots.contiguous(), branch.contiguous()
    h, rows, d = q.shape
    t, s = allowed.shape
    if row_tile is None and q.element_size() > 2:
        row_tile = SPLIT_ROW_TILE  # wide tiles are for 2-byte inputs only (shared memory)
    block_r, block_n, chunk, splits = split_plan(rows, s, h, d, programs, row_tile)
    row_tiles = -(-rows // block_r)
    part = torch.empty(h, splits, rows, d, dtype=torch.float32, device=q.device)  # [Hkv, C, R, D] unnormalized
    stats = torch.empty(h, splits, 2, rows, dtype=torch.float32, device=q.device)  # [Hkv, C, (max, sum), R]
    wrap(_kernel())[(h, splits, row_tiles)](
        q, keys, values, allowed, key_slots, branch, part, stats,
        q.stride(0), q.stride(1), keys.stride(0), keys.stride(1), values.stride(0), values.stride(1),
        allowed.stride(0), rows, t, s, chunk,
        SCALE=scale, BLOCK_R=block_r, BLOCK_N=block_n, D=d, D_PAD=_next_pow2(max(d, 16)),
        IEEE=q.dtype == torch.float32, NB=nb, **({"num_warps": 8} if block_r >= 128 else {}))  # else Triton's 4
    out = torch.empty(t, h * rows * d // t, dtype=q.dtype, device=q.device)  # [T, Hkv*g*D]
    block_m = 16
    wrap(_merge_kernel())[(h, -(-rows // block_m))](
        part, stats, out, splits, rows, t, out.stride(0), BLOCK_R=block_m, D=d, D_PAD=_next_pow2(max(d, 16)))
    return out


@functools.cache
def _kernel():
    """The Triton kernel (Triton imported on first use, so importing hybridsd never needs it)."""
    import triton
    import triton.language as tl

    @triton.jit
    def split_kv_kernel(Q, K, V, MASK, KSLOT, BRANCH, PART, STATS, sqh, sqr, skh, sks, svh, svs, smt, R, T, S, CHUNK,
                        SCALE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                        D_PAD: tl.constexpr, IEEE: tl.constexpr, NB: tl.constexpr):
        # NB = 0: keys in slot order. NB > 0 (exact mode): NB views of the keys, view b reading its i-th key from
        # slot KSLOT[b, i]; each row takes its token's view (BRANCH) by selection: its scores and values products are
        # those of its own view's keys, whatever the other rows. A row tile whose rows all read view 0 (a decode step,
        # a chain) skips the other views: the same selections with nothing to select, so the same bits.
        h = tl.program_id(0)
        c = tl.program_id(1)
        splits = tl.num_programs(1)
        r = tl.program_id(2) * BLOCK_R + tl.arange(0, BLOCK_R)  # this program's row tile
        d = tl.arange(0, D_PAD)
        row_ok = r < R
        q = tl.load(Q + h * sqh + r[:, None] * sqr + d[None, :], mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
        tok = r % T  # the block token of each row
        if NB > 0:
            view = tl.load(BRANCH + tok, mask=row_ok, other=0)  # [BLOCK_R] the key view of each row
            several = tl.max(view, 0) > 0  # some row of this tile reads another view than view 0
        m = tl.full([BLOCK_R], -1e30, tl.float32)  # finite: a chunk with no visible key keeps m = -1e30, l = 0
        l = tl.zeros([BLOCK_R], tl.float32)
        acc = tl.zeros([BLOCK_R, D_PAD], tl.float32)
        for n0 in range(c * CHUNK, c * CHUNK + CHUNK, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            key_ok = n < S
            kv_mask = key_ok[:, None] & (d[None, :] < D)
            if NB == 0:
                k = tl.load(K + h * skh + n[:, None] * sks + d[None, :], mask=kv_mask, other=0.0)  # [BLOCK_N, D_PAD]
            else:
                slot = tl.load(KSLOT + n, mask=key_ok, other=0)  # [BLOCK_N] view 0's slots
                k = tl.load(K + h * skh + slot[:, None] * sks + d[None, :], mask=kv_mask, other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            if NB > 0:
                if several:
                    for b in tl.static_range(1, NB):
                        slot_b = tl.load(KSLOT + b * S + n, mask=key_ok, other=0)
                        k_b = tl.load(K + h * skh + slot_b[:, None] * sks + d[None, :], mask=kv_mask, other=0.0)
                        if IEEE:
                            s_b = tl.dot(q, tl.trans(k_b), input_precision="ieee")
                        else:
                            s_b = tl.dot(q, tl.trans(k_b))
                        s = tl.where(view[:, None] == b, s_b, s)
            seen = tl.load(MASK + tok[:, None] * smt + n[None, :], mask=row_ok[:, None] & key_ok[None, :], other=0)
            s = tl.where(seen != 0, s * SCALE, float("-inf"))  # [BLOCK_R, BLOCK_N] fp32 (SCALE a constexpr:
            # as a runtime argument torch.compile passes it as fp64)
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            if NB == 0:
                v = tl.load(V + h * svh + n[:, None] * svs + d[None, :], mask=kv_mask, other=0.0)
            else:
                v = tl.load(V + h * svh + slot[:, None] * svs + d[None, :], mask=kv_mask, other=0.0)
            if IEEE:
                pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            if NB > 0:
                if several:
                    for b in tl.static_range(1, NB):
                        slot_b = tl.load(KSLOT + b * S + n, mask=key_ok, other=0)
                        v_b = tl.load(V + h * svh + slot_b[:, None] * svs + d[None, :], mask=kv_mask, other=0.0)
                        if IEEE:
                            pv_b = tl.dot(p.to(v.dtype), v_b, input_precision="ieee")
                        else:
                            pv_b = tl.dot(p.to(v.dtype), v_b)
                        pv = tl.where(view[:, None] == b, pv_b, pv)
            acc = acc * alpha[:, None] + pv
            m = m_new
        base = (h * splits + c) * R
        tl.store(PART + (base + r[:, None]) * D + d[None, :], acc, mask=row_ok[:, None] & (d[None, :] < D))
        tl.store(STATS + (base * 2) + r, m, mask=row_ok)
        tl.store(STATS + (base * 2) + R + r, l, mask=row_ok)

    return split_kv_kernel


@functools.cache
def _merge_kernel():
    """The kernel that merges the chunks' partial softmaxes (Triton imported on first use)."""
    import triton
    import triton.language as tl

    @triton.jit
    def split_kv_merge(PART, STATS, OUT, C, R, T, sot, BLOCK_R: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr):
        h = tl.program_id(0)
        r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
        d = tl.arange(0, D_PAD)
        row_ok = r < R
        top = tl.full([BLOCK_R], -1e30, tl.float32)
        for c in range(0, C):  # the largest chunk maximum of each row
            top = tl.maximum(top, tl.load(STATS + ((h * C + c) * 2) * R + r, mask=row_ok, other=-1e30))
        den = tl.zeros([BLOCK_R], tl.float32)
        acc = tl.zeros([BLOCK_R, D_PAD], tl.float32)
        for c in range(0, C):  # chunks in order: sum of exp(m_c - top) * (l_c, unnormalized output_c)
            base = (h * C + c) * R
            w = tl.exp(tl.load(STATS + base * 2 + r, mask=row_ok, other=-1e30) - top)  # 0 for a chunk that saw nothing
            den += w * tl.load(STATS + base * 2 + R + r, mask=row_ok, other=0.0)
            part = tl.load(PART + (base + r[:, None]) * D + d[None, :], mask=row_ok[:, None] & (d[None, :] < D),
                           other=0.0)
            acc += w[:, None] * part
        out = acc / den[:, None]
        g = R // T
        col = (h * g + r // T) * D  # row j*T + t of KV head h -> token t, query head h*g + j
        tl.store(OUT + (r % T)[:, None] * sot + col[:, None] + d[None, :], out.to(OUT.dtype.element_ty),
                 mask=row_ok[:, None] & (d[None, :] < D))

    return split_kv_merge


@functools.cache
def _split_op():
    """``split_kv_attention`` as a custom op that ``torch.compile`` traces into (registered on first use)."""
    from torch.library import triton_op, wrap_triton

    @triton_op("hybridsd::split_kv_attention", mutates_args={})
    def split_kv_op(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor,
                    scale: float) -> torch.Tensor:
        return split_kv_attention(q, keys, values, allowed, scale, wrap=wrap_triton)

    return split_kv_op


@functools.cache
def _split_exact_op():
    """``split_kv_attention`` in virtual key order (exact mode) as a custom op (registered on first use)."""
    from torch.library import triton_op, wrap_triton

    @triton_op("hybridsd::split_kv_attention_exact", mutates_args={})
    def split_kv_exact_op(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor,
                          scale: float, key_slots: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        return split_kv_attention(q, keys, values, allowed, scale, wrap=wrap_triton, key_slots=key_slots,
                                  branch=branch)

    return split_kv_exact_op
