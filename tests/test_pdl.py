"""Programmatic dependent launch (``hybridsd.pdl``): when it is used, and what it does to the kernels' code.

Compiled for an H100/H200 (sm_90; no GPU needed): with PDL each kernel waits before it touches what the kernel
before may write, and its memory instructions are those of the kernel without PDL (the wait keeps the pointers'
alignment, so loads stay vectorized and pipelined). That the waits order the kernels right is checked on the GPU,
where the exact-mode layer runs every kernel so launched (``tests/test_cuda.py``).
"""

from __future__ import annotations

import collections
import re

import pytest
import torch

from conftest import compile_sm90
from hybridsd.pdl import PDL_LEVEL, pdl_options


def test_pdl_only_on_hopper_and_later(monkeypatch):
    assert pdl_options(torch.device("cpu")) == {"PDL": 0}
    import hybridsd.pdl as pdl

    monkeypatch.setattr(pdl, "_pdl_launches", lambda: True)
    for major, want in ((8, {"PDL": 0}), (9, {"PDL": PDL_LEVEL, "launch_pdl": True})):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, m=major: (m, 0))
        assert pdl_options(torch.device("cuda", 0)) == want


def _kernels() -> dict:
    """name -> (kernel, pointer types, constexprs, arguments specialized as multiples of 16): the 8B shapes."""
    pytest.importorskip("triton")
    from hybridsd.attention_kernels import split_kv_kernel, split_kv_merge
    from hybridsd.linear_kernels import row_linear_kernel
    from hybridsd.rowwise_kernels import rms_norm_kernel, rope_kv_kernel

    bf = "*bf16"
    return {
        "row_linear": (row_linear_kernel, dict(X=bf, W=bf, B=bf, RES=bf, OUT=bf),
                       dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, HAS_BIAS=False, GLU=True, HAS_RES=True, IEEE=False),
                       ("X", "W", "B", "RES", "OUT", "K", "sxm", "swn", "srm", "som")),
        "split_kv": (split_kv_kernel, dict(Q=bf, K=bf, V=bf, MASK="*i1", KSLOT="*i64", BRANCH="*i64", BLOCK="*i64",
                                           PART="*fp32", STATS="*fp32"),
                     dict(SCALE=0.088, BLOCK_R=16, BLOCK_N=64, D=128, D_PAD=128, IEEE=False, NB=2, G=4),
                     ("Q", "K", "V", "MASK", "KSLOT", "BRANCH", "BLOCK", "PART", "STATS", "sqh", "sqr", "skh", "sks",
                      "svh", "svs", "smt")),
        "split_kv_merge": (split_kv_merge, dict(PART="*fp32", STATS="*fp32", OUT=bf, BLOCK="*i64"),
                           dict(BLOCK_R=16, D=128, D_PAD=128, EXACT=True), ("PART", "STATS", "OUT", "BLOCK", "sot")),
        "rms_norm": (rms_norm_kernel, dict(X=bf, W=bf, OUT=bf), dict(EPS=1e-5, BLOCK=4096),
                     ("X", "W", "OUT", "sxm", "som")),
        "rope_kv": (rope_kv_kernel, dict(QKV=bf, COS=bf, SIN=bf, SLOTS="*i64", QN=bf, KN=bf, Q=bf, KC=bf, VC=bf),
                    dict(HQ=32, HKV=8, D=128, HALF_PAD=64, HQ_PAD=32, HKV_PAD=8, HAS_NORM=False, EPS=1e-5),
                    ("QKV", "COS", "SIN", "SLOTS", "QN", "KN", "Q", "KC", "VC", "sqt", "sct", "skh", "sks", "svh",
                     "svs")),
    }


MEMORY = re.compile(r"(?:ld|st)\.global[.\w]*|cp\.async\.c[ag][.\w]*")


@pytest.mark.parametrize("name", ["row_linear", "split_kv", "split_kv_merge", "rms_norm", "rope_kv"])
def test_pdl_waits_and_keeps_the_memory_code(name):
    fn, pointers, consts, aligned = _kernels()[name]
    ptx = {level: compile_sm90(fn, pointers, consts | {"PDL": level}, aligned) for level in (0, 1, 2)}
    assert "griddepcontrol" not in ptx[0]
    assert "griddepcontrol.wait" in ptx[1] and "launch_dependents" not in ptx[1]
    assert "griddepcontrol.wait; griddepcontrol.launch_dependents" in ptx[2]
    kinds = {level: collections.Counter(MEMORY.findall(text)) for level, text in ptx.items()}
    assert kinds[1] == kinds[0] and kinds[2] == kinds[0], kinds
    if name != "row_linear":  # nothing before the wait; row_linear may stream its weights first
        assert all(MEMORY.search(text.split("griddepcontrol.wait")[0]) is None for text in ptx.values()
                   if "griddepcontrol" in text)
