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
from hybridsd.linear import ROW_MAX_M, ROW_TILE_N, pdl_options, row_linear, row_plan


@given(st.integers(1, 70000), st.integers(1, 20000), st.sampled_from([2, 4]), st.booleans())
def test_row_plan_tiles_cover_the_weight(n, k, element_size, glu):
    block_n, block_k, stages, warps = row_plan(n, k, element_size, glu)
    assert block_n == ROW_TILE_N and warps == 4
    assert block_k & (block_k - 1) == 0 and 16 <= block_k <= 256 * 2 // element_size
    assert block_k < 2 * max(k, 16)  # never much wider than the input
    smem = stages * (16 + block_n * (2 if glu else 1)) * block_k * element_size  # x and weight tiles in flight
    assert smem <= 200 * 1024


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
""")

EXACT_LAYER = textwrap.dedent("""
    import torch, transformers as tf
    from hybridsd.decoder import fused_layers, make_layer
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=80, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, attention_bias=True)
    w = fused_layers(tf.LlamaForCausalLM(cfg).eval().model)[0]
    t, s, d, start, live = 16, 48, 12, 20, 5
    x, cos, sin = torch.randn(t, 48), torch.randn(t, d), torch.randn(t, d)
    slots = torch.arange(start, start + t)
    allowed = torch.arange(s)[None] <= slots[:, None]
    gather = (torch.arange(s).repeat(2, 1), torch.zeros(t, dtype=torch.long), torch.tensor([start, start + t, live]))
    prefix = torch.randn(2, 1, 2, start, d)
    out = {}
    for attention in ("sdpa", "split"):  # split: exact mode's kernels (row_linear and the split attention)
        for silu in (True, False):
            k_cache, v_cache = torch.zeros(1, 2, s, d), torch.zeros(1, 2, s, d)
            k_cache[..., :start, :], v_cache[..., :start, :] = prefix
            layer = make_layer(4, 2, d, 1e-6, torch.nn.functional.silu, attention, silu=silu)
            out[attention, silu] = layer(x, w, k_cache, v_cache, slots, cos, sin, allowed, s, *gather)[:live]
    for key, got in out.items():
        torch.testing.assert_close(got, out["sdpa", False], atol=2e-5, rtol=2e-5)
    print("ok")
""")


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    """Each script above run under the interpreter (``conftest.run_interpreted``): name -> None or its traceback."""
    return run_interpreted({"ROW_LINEAR": ROW_LINEAR, "EXACT_LAYER": EXACT_LAYER})


def test_row_linear_in_the_triton_interpreter(interpreted):
    """fp32 and fp16 on awkward sizes, with and without bias, SiLU gate and residual: F.linear's result, and a row
    alone equals the same row in its block; inputs that are not row-major are read right."""
    assert interpreted["ROW_LINEAR"] is None, interpreted["ROW_LINEAR"][-3000:]


def test_exact_layer_on_row_kernels_equals_the_plain_layer(interpreted):
    """A decoder layer in exact mode with the split kernel (row_linear, with and without the folded SiLU gate) gives
    the plain layer's output on the block's real tokens (fp32)."""
    assert interpreted["EXACT_LAYER"] is None, interpreted["EXACT_LAYER"][-3000:]


def test_pdl_wait_leaves_the_memory_code_alone():
    """Compiled for an H100/H200 (sm_90, no GPU needed), row_linear with PDL waits (``griddepcontrol.wait``) and
    moves memory exactly as without it: the wait's result feeds the row indices, and an opaque value in an address
    can cost the loads their alignment (vector loads, cp.async pipelining); here it does not."""
    import collections
    import re

    pytest.importorskip("triton")
    from hybridsd.linear_kernels import row_linear_kernel as fn

    bf = "*bf16"
    consts = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, HAS_BIAS=True, GLU=True, HAS_RES=True, IEEE=False)
    aligned = ("X", "W", "B", "RES", "OUT", "K", "sxm", "swn", "srm", "som")  # as the launcher specializes them
    ptx = {pdl: compile_sm90(fn, dict(X=bf, W=bf, B=bf, RES=bf, OUT=bf), consts | {"PDL": pdl}, aligned)
           for pdl in (False, True)}
    assert "griddepcontrol.wait" in ptx[True] and "griddepcontrol" not in ptx[False]
    memory = {pdl: collections.Counter(re.findall(r"(?:ld|st)\.global[.\w]*|cp\.async\.c[ag][.\w]*", text))
              for pdl, text in ptx.items()}
    assert memory[True] == memory[False] and memory[True], memory
