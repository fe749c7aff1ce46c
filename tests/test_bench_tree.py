"""The tree benchmark's parts on a tiny model on the CPU (the GPU figures come from the device)."""

from __future__ import annotations

import numpy as np
from conftest import tiny_target

from experiments import bench_tree
from hybridsd.target import Target


def _calls(fn, iters: int = 2, warmup: int = 0) -> float:
    """Stand-in for CUDA-event timing: run ``fn`` and report 1 ms."""
    for _ in range(iters):
        fn()
    return 1.0


def test_random_tree_respects_depth():
    parents = bench_tree.random_tree(60, 6, 1)
    depth = np.zeros(60, dtype=int)
    for i, p in enumerate(parents):
        assert -1 <= p < i
        depth[i] = 1 if p < 0 else depth[p] + 1
    assert depth.max() <= 6 and len(set(parents)) > 5


def test_benchmark_parts_run_on_the_cpu(monkeypatch):
    monkeypatch.setattr(bench_tree, "cuda_median_ms", _calls)
    model = tiny_target("llama", vocab=1000, seed=2, layers=2)
    r = bench_tree.target_times(Target(model, 128), 20)
    assert set(r) == {"decode_ms", "chain_q9_ms", "tree_q64_ms", "tree_verify_step_ms", "tree_verify_step_accept_ms",
                      "accepted_depth"}
    assert r["accepted_depth"] == 6  # the deepest path of the random tree, with the target's tokens
    assert bench_tree.eagle2_build_ms(model, 20, 6, 10, 60) == 1.0  # the step asserts a 60-node tree
