"""The Triton kernel of :mod:`hybridsd.linear` (imported on first use: importing hybridsd never needs Triton).
``row_linear_kernel``: one program per tile of ``BLOCK_N`` output features, over every row of the block and the
whole input width in ``BLOCK_K`` steps (no split-K); a gated activation and a residual folded in."""

import triton
import triton.language as tl

from hybridsd.attention_kernels import dot


@triton.jit
def row_linear_kernel(X, W, B, RES, OUT, M, N, K, sxm, swn, srm, som, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr, GLU: tl.constexpr, HAS_RES: tl.constexpr,
                      IEEE: tl.constexpr, PDL: tl.constexpr):
    # y = X @ W[:N].T + B[:N]; GLU: OUT = silu(y) * (X @ W[N:2N].T + B[N:2N]) (gate rows, then up rows), else
    # OUT = y, plus RES when HAS_RES; each rounded to OUT's dtype as `res + F.linear(...)` and `act(g) * u` round.
    # A row's sums run over K in the same order whatever the other rows hold.
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
