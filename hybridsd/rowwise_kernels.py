"""The Triton kernels of :mod:`hybridsd.rowwise` (imported on first use: importing hybridsd never needs Triton).
``rms_norm_kernel``: one program per row; ``rope_kv_kernel``: one program per token, its query heads rotated into
the grouped attention layout and its key and value heads into the cache."""

import triton
import triton.language as tl

from hybridsd.pdl_kernels import pdl_wait


@triton.jit
def rms_norm_kernel(X, W, OUT, H, sxm, som, EPS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    # OUT[row] = W * (X[row] * rsqrt(mean(X[row]^2) + EPS)) in fp32, the normalized row rounded to OUT's dtype before
    # the scale and the product rounded again (HF's RMSNorm). EPS a constexpr: torch.compile passes floats as fp64
    row = pdl_wait(tl.program_id(0), PDL)
    c = tl.arange(0, BLOCK)
    ok = c < H
    w = tl.load(W + c, mask=ok, other=0.0).to(tl.float32)
    x = tl.load(X + row * sxm + c, mask=ok, other=0.0).to(tl.float32)
    dt = OUT.dtype.element_ty
    xn = (x * tl.rsqrt(tl.sum(x * x, 0) / H + EPS)).to(dt).to(tl.float32)
    tl.store(OUT + row * som + c, (w * xn).to(dt), mask=ok)


@triton.jit
def _head_norm(x1, x2, w1, w2, D: tl.constexpr, EPS: tl.constexpr, dt: tl.constexpr):
    # RMSNorm of each head (row) of a [heads, D/2] x 2 halves pair (qwen3's q_norm / k_norm), rounded as HF's
    r = tl.rsqrt((tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)) / D + EPS)[:, None]
    x1 = w1[None, :] * (x1 * r).to(dt).to(tl.float32)
    x2 = w2[None, :] * (x2 * r).to(dt).to(tl.float32)
    return x1.to(dt).to(tl.float32), x2.to(dt).to(tl.float32)


@triton.jit
def _rotated(QKV, t, sqt, col0, heads, hd, NW, c1, c2, s1, s2, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
             D: tl.constexpr, HAS_NORM: tl.constexpr, EPS: tl.constexpr, dt: tl.constexpr):
    # heads `hd` (< heads) of token t starting at column col0, normalized (HAS_NORM) and rotated: two [heads, HALF]
    d = tl.arange(0, HALF_PAD)
    ok = (hd[:, None] < heads) & (d[None, :] < HALF)
    cols = col0 + hd[:, None] * D + d[None, :]
    x1 = tl.load(QKV + t * sqt + cols, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(QKV + t * sqt + cols + HALF, mask=ok, other=0.0).to(tl.float32)
    if HAS_NORM:
        w1 = tl.load(NW + d, mask=d < HALF, other=0.0).to(tl.float32)
        w2 = tl.load(NW + HALF + d, mask=d < HALF, other=0.0).to(tl.float32)
        x1, x2 = _head_norm(x1, x2, w1, w2, D, EPS, dt)
    return ok, x1 * c1 - x2 * s1, x2 * c2 + x1 * s2


@triton.jit
def rope_kv_kernel(QKV, COS, SIN, SLOTS, QN, KN, Q, KC, VC, T, sqt, sct, skh, sks, svh, svs, HQ: tl.constexpr,
                   HKV: tl.constexpr, D: tl.constexpr, HALF_PAD: tl.constexpr, HQ_PAD: tl.constexpr,
                   HKV_PAD: tl.constexpr, HAS_NORM: tl.constexpr, EPS: tl.constexpr, PDL: tl.constexpr):
    # token t of QKV [T, (HQ + 2 HKV) D]: q heads (normalized by QN when HAS_NORM) rotated by COS, SIN [T, D] (halves
    # convention, fp32, rounded once) into Q [HKV, G*T, D] at row j*T + t for query head h*G + j; k heads likewise
    # into KC[0, :, SLOTS[t]]; v heads copied into VC[0, :, SLOTS[t]]
    t = pdl_wait(tl.program_id(0), PDL)
    HALF: tl.constexpr = D // 2
    G: tl.constexpr = HQ // HKV
    dt = Q.dtype.element_ty
    d = tl.arange(0, HALF_PAD)
    d_ok = d < HALF
    c1 = tl.load(COS + t * sct + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    c2 = tl.load(COS + t * sct + HALF + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    s1 = tl.load(SIN + t * sct + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    s2 = tl.load(SIN + t * sct + HALF + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    hq = tl.arange(0, HQ_PAD)
    ok, q1, q2 = _rotated(QKV, t, sqt, 0, HQ, hq, QN, c1, c2, s1, s2, HALF, HALF_PAD, D, HAS_NORM, EPS, dt)
    rows = ((hq // G) * G * T + (hq % G) * T + t) * D  # [HQ_PAD] where query head hq of token t starts in Q
    tl.store(Q + rows[:, None] + d[None, :], q1.to(dt), mask=ok)
    tl.store(Q + rows[:, None] + HALF + d[None, :], q2.to(dt), mask=ok)
    slot = tl.load(SLOTS + t)
    hk = tl.arange(0, HKV_PAD)
    ok, k1, k2 = _rotated(QKV, t, sqt, HQ * D, HKV, hk, KN, c1, c2, s1, s2, HALF, HALF_PAD, D, HAS_NORM, EPS, dt)
    at = hk[:, None] * skh + slot * sks + d[None, :]
    tl.store(KC + at, k1.to(dt), mask=ok)
    tl.store(KC + at + HALF, k2.to(dt), mask=ok)
    cols = (HQ + HKV) * D + hk[:, None] * D + d[None, :]
    v1 = tl.load(QKV + t * sqt + cols, mask=ok, other=0.0)
    v2 = tl.load(QKV + t * sqt + cols + HALF, mask=ok, other=0.0)
    at = hk[:, None] * svh + slot * svs + d[None, :]
    tl.store(VC + at, v1, mask=ok)
    tl.store(VC + at + HALF, v2, mask=ok)
