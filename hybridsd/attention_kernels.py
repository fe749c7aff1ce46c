"""The Triton kernels of :mod:`hybridsd.attention`'s split-KV attention (imported on first use: importing hybridsd
never needs Triton). ``split_kv_kernel``: one program per (KV head, chunk of keys, row tile), a partial softmax in
fp32; ``split_kv_merge``: the chunks merged by their log-sum-exp in chunk order, written token-major."""

import triton
import triton.language as tl


@triton.jit
def dot(a, b, acc, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def key_tile(q, m, l, acc, K, V, MASK, KSLOT, h, skh, sks, svh, svs, smt, S, n0, tok, row_ok, view, several,
             d, SCALE: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr,
             NB: tl.constexpr, GATHER: tl.constexpr):
    # keys n0 .. n0 + BLOCK_N - 1 into the running softmax (m, l, acc) of the tile's rows: in slot order, or
    # (GATHER) view 0's slots, and, for rows of another view when `several`, that view's (selected per row)
    n = n0 + tl.arange(0, BLOCK_N)
    key_ok = n < S
    kv_mask = key_ok[:, None] & (d[None, :] < D)
    if GATHER:
        slot = tl.load(KSLOT + n, mask=key_ok, other=0)
    else:
        slot = n
    k = tl.load(K + h * skh + slot[:, None] * sks + d[None, :], mask=kv_mask, other=0.0)  # [BLOCK_N, D_PAD]
    zero = tl.zeros([q.shape[0], BLOCK_N], tl.float32)
    s = dot(q, tl.trans(k), zero, IEEE)
    if GATHER:
        if several:
            for b in tl.static_range(1, NB):
                slot_b = tl.load(KSLOT + b * S + n, mask=key_ok, other=0)
                k_b = tl.load(K + h * skh + slot_b[:, None] * sks + d[None, :], mask=kv_mask, other=0.0)
                s = tl.where(view[:, None] == b, dot(q, tl.trans(k_b), zero, IEEE), s)
    seen = tl.load(MASK + tok[:, None] * smt + n[None, :], mask=row_ok[:, None] & key_ok[None, :], other=0)
    s = tl.where(seen != 0, s * SCALE, float("-inf"))  # [BLOCK_R, BLOCK_N] fp32 (SCALE a constexpr: as a
    # runtime argument torch.compile passes it as fp64)
    m_new = tl.maximum(m, tl.max(s, 1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m - m_new)
    l = l * alpha + tl.sum(p, 1)
    # the value products are accumulated by the dot itself on every path: the compiler folds `acc + dot` into
    # the dot's accumulator wherever nothing stands between them, so a path that selected between views first
    # would round differently from one that did not (and a row's bits would depend on its tile's path)
    acc = acc * alpha[:, None]
    v = tl.load(V + h * svh + slot[:, None] * svs + d[None, :], mask=kv_mask, other=0.0)
    pv = dot(p.to(v.dtype), v, acc, IEEE)
    if GATHER:
        if several:
            for b in tl.static_range(1, NB):
                slot_b = tl.load(KSLOT + b * S + n, mask=key_ok, other=0)
                v_b = tl.load(V + h * svh + slot_b[:, None] * svs + d[None, :], mask=kv_mask, other=0.0)
                pv = tl.where(view[:, None] == b, dot(p.to(v.dtype), v_b, acc, IEEE), pv)
    return m_new, l, pv


@triton.jit
def chunk_softmax(q, K, V, MASK, KSLOT, h, skh, sks, svh, svs, smt, S, lo, hi, tok, row_ok, view, several, g0, g1,
                  d, BLOCK_R: tl.constexpr, SCALE: tl.constexpr, BLOCK_N: tl.constexpr, D_PAD: tl.constexpr,
                  D: tl.constexpr, IEEE: tl.constexpr, NB: tl.constexpr):
    # the running softmax (m, l, acc) of the tile's rows over keys lo .. hi - 1 (NB > 0: the key tiles g0 .. g1
    # on the gathering path, the others in place)
    m = tl.full([BLOCK_R], -1e30, tl.float32)  # finite: a chunk with no visible key keeps m = -1e30, l = 0
    l = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, D_PAD], tl.float32)
    if NB == 0:
        for n0 in range(lo, hi, BLOCK_N):
            m, l, acc = key_tile(q, m, l, acc, K, V, MASK, KSLOT, h, skh, sks, svh, svs, smt, S, n0, tok, row_ok,
                                 tok, False, d, SCALE, BLOCK_N, D, IEEE, NB, False)
    else:
        g0 = tl.minimum(tl.maximum(lo, g0), hi)
        g1 = tl.maximum(tl.minimum(hi, g1), g0)
        for n0 in range(lo, g0, BLOCK_N):
            m, l, acc = key_tile(q, m, l, acc, K, V, MASK, KSLOT, h, skh, sks, svh, svs, smt, S, n0, tok, row_ok,
                                 view, several, d, SCALE, BLOCK_N, D, IEEE, NB, False)
        for n0 in range(g0, g1, BLOCK_N):
            m, l, acc = key_tile(q, m, l, acc, K, V, MASK, KSLOT, h, skh, sks, svh, svs, smt, S, n0, tok, row_ok,
                                 view, several, d, SCALE, BLOCK_N, D, IEEE, NB, True)
        for n0 in range(g1, hi, BLOCK_N):
            m, l, acc = key_tile(q, m, l, acc, K, V, MASK, KSLOT, h, skh, sks, svh, svs, smt, S, n0, tok, row_ok,
                                 view, several, d, SCALE, BLOCK_N, D, IEEE, NB, False)
    return m, l, acc


@triton.jit
def split_kv_kernel(Q, K, V, MASK, KSLOT, BRANCH, BLOCK, COS, SIN, PART, STATS, sqh, sqj, sqt, skh, sks, svh, svs,
                    smt, sct, R, T, S, CHUNK, SCALE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
                    D: tl.constexpr, D_PAD: tl.constexpr, IEEE: tl.constexpr, NB: tl.constexpr, G: tl.constexpr,
                    EXACT: tl.constexpr, ROPE: tl.constexpr):
    # Row j*T + t is query head j of KV head h (program 0), token t: its query at Q + h*sqh + j*sqj + t*sqt (ROPE:
    # not yet rotated; rotated here by COS, SIN [T, D] at row stride sct, halves convention, in fp32, rounded to
    # Q's dtype). Program c reduces keys c*CHUNK .. (c + 1)*CHUNK - 1 into a partial softmax. Not EXACT: rows
    # j*T + t in tiles. EXACT: rows tiled token-major (tile row i: token i // G, query head i % G); a tile of tokens
    # >= BLOCK[2] (padding) does nothing, and neither does a program whose keys lie wholly at or past BLOCK[3] (no
    # real token sees them: they would add exact zeros; the merge does not read its partial); key tiles past it are
    # not read. NB = 0: keys in slot order, every tile read in place. NB > 0 (exact mode): NB views of the keys,
    # view b reading its i-th key from slot KSLOT[b, i]; each row takes its token's view (BRANCH) by selection: its
    # scores and value products are those of its own view's keys, whatever the other rows. Views differ only at
    # the slots BLOCK[0] .. BLOCK[1] - 1: key tiles outside them are read in place (the same keys for every view,
    # and the same code as NB = 0's, so the same bits), and a tile whose rows all read view 0 skips the other
    # views. (NB = 0 in exact mode serves decode steps and chains: a kernel without the gathering path keeps its
    # registers; the two-view kernel spills.)
    h = tl.program_id(0)
    c = tl.program_id(1)
    i = tl.program_id(2) * BLOCK_R + tl.arange(0, BLOCK_R)  # this program's row tile
    lo = c * CHUNK
    if not EXACT:
        tok = i % T  # the block token of each row (row j*T + t)
        j = i // T
        hi = lo + CHUNK
        go = True
    else:
        tok = i // G
        j = i % G
        real = tl.program_id(2) * BLOCK_R // G < tl.load(BLOCK + 2)  # the tile holds a real token
        end = tl.minimum((tl.load(BLOCK + 3) + BLOCK_N - 1) // BLOCK_N * BLOCK_N, S)  # key tiles past: unseen
        hi = tl.minimum(lo + CHUNK, end)
        go = real & (lo < end)  # else the program has nothing to do
    if go:
        r = j * T + tok
        d = tl.arange(0, D_PAD)
        row_ok = i < R
        q_at = Q + h * sqh + j[:, None] * sqj + tok[:, None] * sqt
        q_ok = row_ok[:, None] & (d[None, :] < D)
        q = tl.load(q_at + d[None, :], mask=q_ok, other=0.0)  # [BLOCK_R, D_PAD]
        if ROPE:
            half = D // 2
            pair = tl.load(q_at + tl.where(d < half, d + half, d - half)[None, :], mask=q_ok, other=0.0)
            cos = tl.load(COS + tok[:, None] * sct + d[None, :], mask=q_ok, other=0.0).to(tl.float32)
            sin = tl.load(SIN + tok[:, None] * sct + d[None, :], mask=q_ok, other=0.0).to(tl.float32)
            rot = tl.where(d[None, :] < half, -pair.to(tl.float32), pair.to(tl.float32))
            q = (q.to(tl.float32) * cos + rot * sin).to(q.dtype)
        view = tok
        several = False
        g0 = 0
        g1 = 0
        if NB > 0:
            view = tl.load(BRANCH + tok, mask=row_ok, other=0)  # [BLOCK_R] the key view of each row
            several = tl.max(view, 0) > 0  # some row of this tile reads another view than view 0
            g0 = tl.load(BLOCK) // BLOCK_N * BLOCK_N  # key tiles g0 .. g1: the views differ
            g1 = (tl.load(BLOCK + 1) + BLOCK_N - 1) // BLOCK_N * BLOCK_N
        m, l, acc = chunk_softmax(q, K, V, MASK, KSLOT, h, skh, sks, svh, svs, smt, S, lo, hi, tok, row_ok, view,
                                  several, g0, g1, d, BLOCK_R, SCALE, BLOCK_N, D_PAD, D, IEEE, NB)
        base = (h * tl.num_programs(1) + c) * R
        tl.store(PART + (base + r[:, None]) * D + d[None, :], acc, mask=row_ok[:, None] & (d[None, :] < D))
        tl.store(STATS + (base * 2) + r, m, mask=row_ok)
        tl.store(STATS + (base * 2) + R + r, l, mask=row_ok)


@triton.jit
def split_kv_merge(PART, STATS, OUT, BLOCK, C, CHUNK, R, T, sot, BLOCK_R: tl.constexpr, D: tl.constexpr,
                   D_PAD: tl.constexpr, EXACT: tl.constexpr):
    # the partials of chunks 0 .. C - 1 (EXACT: those before the key bound BLOCK[3] only; the others, never
    # stored, would add exact zeros) merged in chunk order
    h = tl.program_id(0)
    r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    d = tl.arange(0, D_PAD)
    row_ok = r < R
    if EXACT:  # padding tokens' rows were not all computed: zeros
        row_ok = row_ok & (r % T < tl.load(BLOCK + 2))
        n = tl.minimum(C, (tl.load(BLOCK + 3) + CHUNK - 1) // CHUNK)
    else:
        n = C
    top = tl.full([BLOCK_R], -1e30, tl.float32)
    for c in range(0, n):  # the largest chunk maximum of each row
        top = tl.maximum(top, tl.load(STATS + ((h * C + c) * 2) * R + r, mask=row_ok, other=-1e30))
    den = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, D_PAD], tl.float32)
    for c in range(0, n):  # chunks in order: sum of exp(m_c - top) * (l_c, unnormalized output_c)
        base = (h * C + c) * R
        w = tl.exp(tl.load(STATS + base * 2 + r, mask=row_ok, other=-1e30) - top)  # 0 for a chunk that saw nothing
        den += w * tl.load(STATS + base * 2 + R + r, mask=row_ok, other=0.0)
        part = tl.load(PART + (base + r[:, None]) * D + d[None, :], mask=row_ok[:, None] & (d[None, :] < D),
                       other=0.0)
        acc += w[:, None] * part
    out = acc / tl.where(den > 0, den, 1.0)[:, None]  # a row read nothing (padding): 0, not 0 / 0
    g = R // T
    col = (h * g + r // T) * D  # row j*T + t of KV head h -> token t, query head h*g + j
    tl.store(OUT + (r % T)[:, None] * sot + col[:, None] + d[None, :], out.to(OUT.dtype.element_ty),
             mask=(r < R)[:, None] & (d[None, :] < D))
