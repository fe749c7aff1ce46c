"""Exact mode's matmul kernel (``hybridsd.linear``): its launch plan, its input checks, and under Triton's CPU
interpreter its results against F.linear, row by row, and a decoder layer built on it against the plain layer.

bf16 and the bit-for-bit row independence of the compiled kernel are checked on the GPU (``tests/test_cuda.py``).
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import compile_sm90, run_interpreted
from hybridsd.linear import ROW_MAX_M, ROW_TILE_N, ROW_WAVE, pdl_options, row_linear, row_plan


@given(st.integers(1, 70000), st.integers(1, 20000), st.sampled_from([2, 4]), st.booleans())
def test_row_plan_tiles_cover_the_weight(n, k, element_size, glu):
    block_n, block_k, stages, warps = row_plan(n, k, element_size, glu)
    assert warps == 4 and block_n in (ROW_TILE_N, 2 * ROW_TILE_N)
    assert (block_n > ROW_TILE_N) == (not glu and ROW_WAVE < -(-n // ROW_TILE_N) <= 2 * ROW_WAVE)
    assert block_k & (block_k - 1) == 0 and 16 <= block_k <= 256 * 2 // element_size
    assert block_k < 2 * max(k, 16)  # never much wider than the input
    smem = stages * (16 + block_n * (2 if glu else 1)) * block_k * element_size  # x and weight tiles in flight
    assert smem <= 200 * 1024


def test_row_plan_on_llama_8b_shapes():
    """The plan the H200 sweep picked for each projection of Llama-3.1-8B (bf16): q/k/v in one wave of 64-wide
    tiles, the others in 32-wide tiles."""
    assert row_plan(6144, 4096, 2, False) == (64, 128, 6, 4)  # q/k/v
    assert row_plan(4096, 4096, 2, False) == (32, 256, 5, 4)  # o
    assert row_plan(14336, 4096, 2, True) == (32, 256, 3, 4)  # gate/up
    assert row_plan(4096, 14336, 2, False) == (32, 256, 5, 4)  # down


@pytest.mark.parametrize("args", [(0, 10, 2, False), (10, 0, 2, False), (10, 10, 1, False), (10, 10, 8, True)])
def test_row_plan_rejects_what_it_cannot_plan(args):
    with pytest.raises(ValueError, match="row_plan"):
        row_plan(*args)


@pytest.mark.parametrize("x_shape,w_shape,glu", [((ROW_MAX_M + 1, 8), (4, 8), False), ((2, 8), (4, 9), False),
                                                 ((0, 8), (4, 8), False), ((2, 8), (5, 8), True),
                                                 ((2, 2, 8), (4, 8), False)])
def test_row_linear_names_bad_shapes_before_any_kernel(x_shape, w_shape, glu):
    with pytest.raises(ValueError, match="row_linear|glu"):
        row_linear(torch.zeros(x_shape), torch.zeros(w_shape), glu=glu)


@pytest.mark.parametrize("kwargs", [dict(scale=torch.zeros(3, 4)), dict(scale=torch.zeros(2, 4, dtype=torch.float64)),
                                    dict(scale=torch.zeros(2)), dict(norm=torch.ones(5))])
def test_row_linear_names_a_bad_folded_norm_before_any_kernel(kwargs):
    with pytest.raises(ValueError, match="row_linear's (scale|norm)"):
        row_linear(torch.zeros(2, 8), torch.zeros(4, 8), **kwargs)


def test_pdl_only_on_hopper_and_later(monkeypatch):
    assert pdl_options(torch.device("cpu")) == {"PDL": False}
    import hybridsd.linear as linear

    monkeypatch.setattr(linear, "_pdl_launches", lambda: True)
    for major, want in ((8, {"PDL": False}), (9, {"PDL": True, "launch_pdl": True})):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, m=major: (m, 0))
        assert pdl_options(torch.device("cuda", 0)) == want


# Run under Triton's CPU interpreter (TRITON_INTERPRET=1 is read when triton is imported, so not here)
ROW_LINEAR = textwrap.dedent("""
    import torch, torch.nn.functional as F
    from hybridsd.linear import row_linear
    torch.manual_seed(0)
    tol = lambda dtype: dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=4e-3, atol=4e-3)
    worst = {}
    for m, n, k in [(1, 40, 72), (5, 33, 100), (16, 64, 300), (3, 7, 16), (17, 20, 40)]:
        for dtype in (torch.float32, torch.float16):
            x = torch.randn(m, k, dtype=dtype)
            w, b = torch.randn(2 * n, k, dtype=dtype) / k ** 0.5, torch.randn(2 * n, dtype=dtype)
            r = torch.randn(m, n, dtype=dtype)
            for glu in (False, True):
                for bias in (None, b if glu else b[:n]):
                    for res in (None, r):
                        ww = w if glu else w[:n]
                        got = row_linear(x, ww, bias, glu=glu, residual=res)
                        y = F.linear(x.double(), ww.double(), None if bias is None else bias.double())
                        if glu:
                            y = F.silu(y[:, :n]) * y[:, n:]
                        if res is not None:
                            y = y + res.double()
                        err = ((got.double() - y).abs().max() / y.abs().max()).item()
                        worst[str(dtype)] = max(worst.get(str(dtype), 0.0), err)
                        for i in (0, m - 1):  # a row alone: the same values as in the block
                            alone = row_linear(x[i : i + 1], ww, bias, glu=glu,
                                               residual=None if res is None else res[i : i + 1])
                            assert torch.equal(alone[0], got[i]), (m, n, k, glu, i)
    print(worst)
    assert worst["torch.float32"] < 1e-5 and worst["torch.float16"] < 3e-3, worst
    x, w, r = torch.randn(4, 40), torch.randn(40, 24).T, torch.randn(24, 4).T  # weight and residual not row-major
    torch.testing.assert_close(row_linear(x, w, residual=r), r + F.linear(x, w))
    x, w = torch.randn(2, 24), torch.randn(4300, 24)  # a grid of 64-wide tiles (row_plan)
    torch.testing.assert_close(row_linear(x, w), F.linear(x, w))
    # the RMS norm folded in: a producer's (out, out * g, sums) feed the next row_linear as x and scale
    for m, n, k2 in [(1, 40, 72), (5, 100, 33), (16, 70, 300), (3, 33, 16)]:
        for dtype in (torch.float32, torch.float16):
            a, w1 = torch.randn(m, k2, dtype=dtype), torch.randn(n, k2, dtype=dtype) / k2 ** 0.5
            res, g = torch.randn(m, n, dtype=dtype), torch.rand(n, dtype=dtype) + 0.5
            w2, b2 = torch.randn(2 * 24, n, dtype=dtype) / n ** 0.5, torch.randn(2 * 24, dtype=dtype)
            out, xg, sums = row_linear(a, w1, residual=res, norm=g)
            torch.testing.assert_close(out, row_linear(a, w1, residual=res))  # the same product
            assert sums.shape == (m, -(-n // 32)) and sums.dtype == torch.float32
            of = out.double()
            torch.testing.assert_close(xg.double(), of * g.double(), **tol(dtype))
            torch.testing.assert_close(sums.sum(1).double(), of.pow(2).sum(1), rtol=1e-5, atol=1e-5)
            h = of * torch.rsqrt(of.pow(2).mean(1, keepdim=True) + 1e-5) * g.double()  # rms_norm(out, g)
            for glu in (False, True):
                ww, bb = (w2, b2) if glu else (w2[:24], b2[:24])
                got = row_linear(xg, ww, bb, glu=glu, scale=sums, eps=1e-5)
                y = F.linear(h, ww.double(), bb.double())
                if glu:
                    y = F.silu(y[:, :24]) * y[:, 24:]
                torch.testing.assert_close(got.double(), y, **tol(dtype))
                for i in (0, m - 1):  # a row alone: the same bits as in the block, producer and consumer
                    alone = row_linear(a[i : i + 1], w1, residual=res[i : i + 1], norm=g)
                    assert all(torch.equal(p[0], q[i]) for p, q in zip(alone, (out, xg, sums))), (m, n, k2, i)
                    one = row_linear(xg[i : i + 1], ww, bb, glu=glu, scale=sums[i : i + 1], eps=1e-5)
                    assert torch.equal(one[0], got[i]), (m, n, k2, glu, i)
""")

EXACT_LAYER = textwrap.dedent("""
    import torch, transformers as tf
    from hybridsd.decoder import fused_layers, make_layer, make_row_layer
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, attention_bias=True)
    ws = fused_layers(tf.LlamaForCausalLM(cfg).eval().model)
    with torch.no_grad():
        for w in ws:  # norm weights away from 1, so a norm folded in the wrong place shows
            w.attn_norm.uniform_(0.5, 1.5), w.mlp_norm.uniform_(0.5, 1.5)
    t, s, d, start, live = 16, 48, 12, 20, 5
    x, cos, sin = torch.randn(t, 48), torch.randn(t, d), torch.randn(t, d)
    slots = torch.arange(start, start + t)
    allowed = torch.arange(s)[None] <= slots[:, None]
    gather = (torch.arange(s).repeat(2, 1), torch.zeros(t, dtype=torch.long), torch.tensor([start, start + t, live]))
    prefix = torch.randn(2, 2, 1, 2, start, d)

    def caches(i):
        k_cache, v_cache = torch.zeros(1, 2, s, d), torch.zeros(1, 2, s, d)
        k_cache[..., :start, :], v_cache[..., :start, :] = prefix[i]
        return k_cache, v_cache

    plain = make_layer(4, 2, d, 1e-6, torch.nn.functional.silu, "sdpa")
    want = x
    for i, w in enumerate(ws):  # two plain layers
        want = plain(want, w, *caches(i), slots, cos, sin, allowed, s, *gather)
    for silu in (True, False):  # exact mode's row layers (row_linear, the split attention), the norms folded
        row = make_row_layer(4, 2, d, 1e-6, torch.nn.functional.silu, silu=silu)
        h, normed = row(x, None, ws[0], ws[1].attn_norm, *caches(0), slots, cos, sin, allowed, s, *gather)
        assert normed[0].shape == (t, 48) and normed[1].dtype == torch.float32
        torch.testing.assert_close(normed[0], h * ws[1].attn_norm)
        h, last = row(h, normed, ws[1], None, *caches(1), slots, cos, sin, allowed, s, *gather)
        assert last is None
        torch.testing.assert_close(h[:live], want[:live], atol=2e-5, rtol=2e-5)
    print("ok")
""")


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    """Each script above run under the interpreter (``conftest.run_interpreted``): name -> None or its traceback."""
    return run_interpreted({"ROW_LINEAR": ROW_LINEAR, "EXACT_LAYER": EXACT_LAYER})


def test_row_linear_in_the_triton_interpreter(interpreted):
    """fp32 and fp16 on awkward sizes, with and without bias, SiLU gate and residual: F.linear's result, and a row
    alone equals the same row in its block; inputs that are not row-major are read right. With the RMS norm folded
    in: the producer's product is unchanged, its ``out * g`` and sums of squares are right, and the consumer gives
    ``F.linear(rms_norm(out, g), w, b)``; a row alone has the same bits on both sides."""
    assert interpreted["ROW_LINEAR"] is None, interpreted["ROW_LINEAR"][-3000:]


def test_exact_layer_on_row_kernels_equals_the_plain_layer(interpreted):
    """Two decoder layers in exact mode with the split kernel (row_linear, with and without the folded SiLU gate, the
    RMS norms folded into the matmuls, the second layer's from the first's) give the plain layers' output on the
    block's real tokens (fp32)."""
    assert interpreted["EXACT_LAYER"] is None, interpreted["EXACT_LAYER"][-3000:]


def _sm90_memory_ops(**flags):
    """Counts of the global loads/stores and async copies of row_linear compiled for sm_90 with ``flags``."""
    import collections
    import re

    from hybridsd.linear_kernels import row_linear_kernel as fn

    bf = "*bf16"
    consts = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, HAS_BIAS=True, GLU=True, HAS_RES=True, SCALED=False,
                  P_PAD=128, EPS=1e-5, NORM=False, IEEE=False, PDL=False) | flags
    aligned = ("X", "W", "B", "RES", "OUT", "K", "sxm", "swn", "srm", "som")  # as the launcher specializes them
    ptx = compile_sm90(fn, dict(X=bf, W=bf, B=bf, RES=bf, OUT=bf, SS_IN="*fp32", NORM_W=bf, XG=bf, SS_OUT="*fp32"),
                       consts, aligned)
    return ptx, collections.Counter(re.findall(r"(?:ld|st)\.global[.\w]*|cp\.async\.c[ag][.\w]*", ptx))


def test_pdl_wait_leaves_the_memory_code_alone():
    """Compiled for an H100/H200 (sm_90, no GPU needed), row_linear with PDL waits (``griddepcontrol.wait``) and
    moves memory exactly as without it: the wait's result feeds the row indices, and an opaque value in an address
    can cost the loads their alignment (vector loads, cp.async pipelining); here it does not."""
    pytest.importorskip("triton")
    (plain, memory), (waiting, memory_pdl) = _sm90_memory_ops(), _sm90_memory_ops(PDL=True)
    assert "griddepcontrol.wait" in waiting and "griddepcontrol" not in plain
    assert memory_pdl == memory and memory, memory


def test_folded_norm_keeps_the_weight_stream_asynchronous():
    """With the RMS norm folded in (``scale`` and ``norm``), the K loop's loads stay the plain kernel's async copies
    (elementwise work on the dot's operands inside the loop would turn them into register loads and stall the
    weight stream): the folded norm only adds the epilogue's loads and stores."""
    pytest.importorskip("triton")
    _, plain = _sm90_memory_ops(PDL=True)
    _, folded = _sm90_memory_ops(PDL=True, SCALED=True, NORM=True)
    for op in plain:
        if op.startswith("cp.async"):
            assert folded[op] == plain[op], (op, plain, folded)
    assert sum(folded.values()) > sum(plain.values())
