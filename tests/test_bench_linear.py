"""The split-K kernel of experiments/bench_linear.py under Triton's CPU interpreter, against a float64 matmul
(a subprocess: the interpreter must be on before Triton is imported)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
CASES = [(9, 100, 300, (32, 64, 3)), (1, 64, 128, None), (16, 33, 70, (16, 32, 2)), (5, 130, 1000, (64, 128, 8))]


def test_splitk_matches_matmul_in_the_triton_interpreter():
    pytest.importorskip("triton")
    code = textwrap.dedent(f"""
        import sys
        import pytest
        import torch
        sys.path.insert(0, {str(EXPERIMENTS)!r})
        from bench_linear import splitk_linear
        for t, n, k, plan in {CASES!r}:
            g = torch.Generator().manual_seed(t * n + k)
            x, w = torch.randn(t, k, generator=g), torch.randn(n, k, generator=g)
            y = splitk_linear(x, w, plan)
            assert y.shape == (t, n) and y.dtype == x.dtype
            torch.testing.assert_close(y.double(), x.double() @ w.double().T, rtol=1e-5, atol=1e-4)
        with pytest.raises(ValueError, match="at most 16 rows"):
            splitk_linear(torch.zeros(17, 8), torch.zeros(4, 8))
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
