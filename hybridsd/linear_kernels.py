"""The Triton kernel of :mod:`hybridsd.linear` (imported on first use: importing hybridsd never needs Triton).
``row_linear_kernel``: one program per tile of ``BLOCK_N`` output features, over every row of the block and the
whole input width in ``BLOCK_K`` steps (no split-K); a gated activation, a residual and the two halves of an RMS
norm (the rows' scale on the input side, the next norm's weight and sums of squares on the output side) folded in."""

import triton
import triton.language as tl

from hybridsd.attention_kernels import dot


@triton.jit
def row_linear_kernel(X, W, B, RES, OUT, SS_IN, NORM_W, XG, SS_OUT, M, N, K, P_IN, sxm, swn, srm, som,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr,
                      GLU: tl.constexpr, HAS_RES: tl.constexpr, SCALED: tl.constexpr, P_PAD: tl.constexpr,
                      EPS: tl.constexpr, NORM: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr):
    # y = X @ W[:N].T + B[:N]; GLU: OUT = silu(y) * (X @ W[N:2N].T + B[N:2N]) (gate rows, then up rows), else
    # OUT = y, plus RES when HAS_RES; each rounded to OUT's dtype as `res + F.linear(...)` and `act(g) * u` round.
    # SCALED: each row's products are multiplied by rsqrt(sum(SS_IN[m, :P_IN]) / K + EPS) before the bias (X holds
    # the unnormalized rows times the norm weight, SS_IN their sums of squares in pieces). NORM: also XG = OUT *
    # NORM_W and SS_OUT[m, program] = the sum of squares of this program's features of OUT (the next norm's inputs).
    # A row's sums run over K (and the pieces) in the same order whatever the other rows hold.
    rm = tl.arange(0, BLOCK_M)
    if PDL:  # launched as a programmatic dependent of the kernel before it: wait for its results. A pure op (so
        # torch.compile's analysis of the kernel knows it writes no input) that returns the row indices, so every
        # load of X and RES and every store is ordered after it; the weights, which nobody writes, may stream before
        rm = tl.inline_asm_elementwise("griddepcontrol.wait; mov.u32 $0, $1;", "=r,r", [rm], dtype=tl.int32,
                                       is_pure=True, pack=1)  # one line: inductor copies the source into a string
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        k_ok = k < K
        x = tl.load(X + rm[:, None] * sxm + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        w_mask = n_ok[:, None] & k_ok[None, :]
        w = tl.load(W + rn[:, None] * swn + k[None, :], mask=w_mask, other=0.0)  # [BLOCK_N, BLOCK_K]
        acc = dot(x, tl.trans(w), acc, IEEE)
        if GLU:
            wu = tl.load(W + (rn + N)[:, None] * swn + k[None, :], mask=w_mask, other=0.0)
            up = dot(x, tl.trans(wu), up, IEEE)
    if SCALED:  # after the loop: elementwise work on the dot's operands inside it stalls the weight stream
        p = tl.arange(0, P_PAD)
        ss = tl.load(SS_IN + rm[:, None] * P_IN + p[None, :], mask=m_ok[:, None] & (p[None, :] < P_IN), other=0.0)
        r = 1.0 / tl.sqrt(tl.sum(ss, 1) / K + EPS)  # [BLOCK_M] fp32
        acc = acc * r[:, None]
        up = up * r[:, None]
    if HAS_BIAS:
        acc += tl.load(B + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        if GLU:
            up += tl.load(B + N + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    dt = OUT.dtype.element_ty
    out = acc.to(dt)
    if GLU:
        g = out.to(tl.float32)
        out = ((g * tl.sigmoid(g)).to(dt).to(tl.float32) * up.to(dt).to(tl.float32)).to(dt)
    ok = m_ok[:, None] & n_ok[None, :]
    if HAS_RES:
        res = tl.load(RES + rm[:, None] * srm + rn[None, :], mask=ok, other=0.0)
        out = (res.to(tl.float32) + out.to(tl.float32)).to(dt)
    tl.store(OUT + rm[:, None] * som + rn[None, :], out, mask=ok)
    if NORM:
        of = out.to(tl.float32)
        tl.store(SS_OUT + rm * tl.num_programs(0) + tl.program_id(0), tl.sum(tl.where(ok, of * of, 0.0), 1),
                 mask=m_ok)
        nw = tl.load(NORM_W + rn, mask=n_ok, other=0.0).to(tl.float32)
        tl.store(XG + rm[:, None] * N + rn[None, :], (of * nw[None, :]).to(dt), mask=ok)
