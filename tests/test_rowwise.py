"""Exact mode's per-row kernels (``hybridsd.rowwise``): their input checks, and under Triton's CPU interpreter their
results against the decoder's torch code, a row alone against the same row in its block.

bf16 on the GPU, compiled and under PDL launches, is checked by the exact-mode grids (``tests/test_cuda.py``).
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from conftest import run_interpreted
from hybridsd.rowwise import rms_norm_rows, rope_kv


@pytest.mark.parametrize("x_shape,w_shape", [((3, 8), (9,)), ((8,), (8,)), ((2, 3, 8), (8,))])
def test_rms_norm_rows_names_bad_shapes(x_shape, w_shape):
    with pytest.raises(ValueError, match="rms_norm_rows"):
        rms_norm_rows(torch.zeros(x_shape), torch.zeros(w_shape), 1e-6)


@pytest.mark.parametrize("change", ["qkv", "odd_d", "heads", "cos", "slots", "one_norm"])
def test_rope_kv_names_bad_shapes(change):
    t, hq, hkv, d = 3, 4, 2, 8
    args = dict(qkv=torch.zeros(t, (hq + 2 * hkv) * d), cos=torch.zeros(t, d), sin=torch.zeros(t, d),
                k_cache=torch.zeros(1, hkv, 10, d), v_cache=torch.zeros(1, hkv, 10, d), slots=torch.arange(t),
                n_heads=hq)
    if change == "qkv":
        args["qkv"] = torch.zeros(t, (hq + 2 * hkv) * d + 1)
    elif change == "odd_d":
        d = 7
        args.update(qkv=torch.zeros(t, (hq + 2 * hkv) * d), cos=torch.zeros(t, d), sin=torch.zeros(t, d),
                    k_cache=torch.zeros(1, hkv, 10, d), v_cache=torch.zeros(1, hkv, 10, d))
    elif change == "heads":
        args["n_heads"] = 3
    elif change == "cos":
        args["cos"] = torch.zeros(t + 1, d)
    elif change == "slots":
        args["slots"] = torch.arange(t + 1)
    else:
        args["q_norm"] = torch.ones(d)
    with pytest.raises(ValueError, match="rope_kv"):
        rope_kv(**args)


# Run under Triton's CPU interpreter (TRITON_INTERPRET=1 is read when triton is imported, so not here)
RMS_NORM = textwrap.dedent("""
    import torch
    from hybridsd.decoder import rms_norm
    from hybridsd.rowwise import rms_norm_rows
    torch.manual_seed(0)
    for m, h in [(1, 48), (5, 100), (16, 333), (3, 4096)]:
        for dtype in (torch.float32, torch.float16):
            x, w = torch.randn(m, h, dtype=dtype) * 3, torch.randn(h, dtype=dtype)
            got = rms_norm_rows(x, w, 1e-5)
            tol = 1e-5 if dtype == torch.float32 else 2e-3
            torch.testing.assert_close(got, rms_norm(x, w, 1e-5), atol=tol, rtol=tol)
            for i in (0, m - 1):  # a row alone: the same bits as in the block
                assert torch.equal(rms_norm_rows(x[i : i + 1], w, 1e-5)[0], got[i]), (m, h, i)
    x = torch.randn(8, 6)[:, :4]  # rows not contiguous
    torch.testing.assert_close(rms_norm_rows(x, torch.ones(4), 1e-6), rms_norm(x, torch.ones(4), 1e-6))
""")

ROPE_KV = textwrap.dedent("""
    import torch
    from hybridsd.decoder import rms_norm, rope
    from hybridsd.rowwise import rope_kv
    torch.manual_seed(0)
    for t, hq, hkv, d, norm in [(1, 4, 2, 8, False), (5, 6, 2, 12, True), (16, 3, 3, 10, False), (7, 8, 1, 16, True)]:
        for dtype in (torch.float32, torch.float16):
            s = 40
            qkv = torch.randn(t, (hq + 2 * hkv) * d, dtype=dtype)
            cos, sin = torch.randn(t, d, dtype=dtype), torch.randn(t, d, dtype=dtype)
            slots = torch.randperm(s)[:t]
            qn, kn = (torch.randn(d, dtype=dtype), torch.randn(d, dtype=dtype)) if norm else (None, None)
            kc, vc = torch.randn(1, hkv, s, d, dtype=dtype), torch.randn(1, hkv, s, d, dtype=dtype)
            kc2, vc2 = kc.clone(), vc.clone()
            q = rope_kv(qkv, cos, sin, kc, vc, slots, hq, qn, kn, 1e-6)
            # the decoder's torch code, in fp32
            x = qkv.float()
            rq, rk, rv = x.split([hq * d, hkv * d, hkv * d], dim=-1)
            rq, rk, rv = rq.view(t, hq, d), rk.view(t, hkv, d), rv.view(t, hkv, d)
            if norm:
                rq, rk = rms_norm(rq, qn.float(), 1e-6), rms_norm(rk, kn.float(), 1e-6)
            rq, rk = rope(rq, cos.float()[:, None], sin.float()[:, None]), rope(rk, cos.float()[:, None], sin.float()[:, None])
            kc2.index_copy_(2, slots, rk.to(dtype).transpose(0, 1)[None])
            vc2.index_copy_(2, slots, rv.to(dtype).transpose(0, 1)[None])
            g = hq // hkv
            want = rq.view(t, hkv, g, d).permute(1, 2, 0, 3).reshape(hkv, g * t, d)
            tol = 1e-5 if dtype == torch.float32 else 4e-3
            torch.testing.assert_close(q.float(), want, atol=tol, rtol=tol)
            torch.testing.assert_close(kc, kc2, atol=tol, rtol=tol)
            assert torch.equal(vc, vc2)
            for i in (0, t - 1):  # a token alone: the same bits as in the block
                kc3, vc3 = kc.clone(), vc.clone()
                q1 = rope_kv(qkv[i : i + 1], cos[i : i + 1], sin[i : i + 1], kc3, vc3, slots[i : i + 1], hq, qn, kn, 1e-6)
                assert torch.equal(q1, q.view(hkv, g, t, d)[:, :, i : i + 1].reshape(hkv, g, d)), (t, hq, i)
                assert torch.equal(kc3, kc) and torch.equal(vc3, vc)
""")


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    """Each script above run under the interpreter (``conftest.run_interpreted``): name -> None or its traceback."""
    return run_interpreted({"RMS_NORM": RMS_NORM, "ROPE_KV": ROPE_KV})


def test_rms_norm_rows_in_the_triton_interpreter(interpreted):
    """fp32 and fp16 on awkward widths: the decoder's RMSNorm, and a row alone equals the same row in its block."""
    assert interpreted["RMS_NORM"] is None, interpreted["RMS_NORM"][-3000:]


def test_rope_kv_in_the_triton_interpreter(interpreted):
    """fp32 and fp16, grouped and plain heads, odd half widths, with and without qwen3's head norms: the decoder's
    rope, cache write and grouped query layout; a token alone gives the same bits as in its block."""
    assert interpreted["ROPE_KV"] is None, interpreted["ROPE_KV"][-3000:]
