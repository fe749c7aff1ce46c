"""The tree benchmark's parts on a tiny model on the CPU (the GPU figures come from the device)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
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


@pytest.mark.parametrize("argv, words", [
    (["--out", "{folder}"], ["--out", "is a folder"]), (["--out", "{under_file}"], ["--out"]),
    (["--contexts", "2048", "0"], ["--contexts"]), (["--layers", "0"], ["--layers"]), (["--depth", "-1"], ["--depth"]),
    (["--top-k", "0"], ["--top-k"]), (["--nodes", "0"], ["--nodes"]),
    (["--depth", "2", "--top-k", "3", "--nodes", "13"], ["--nodes 13", "12 candidates"]),
    (["--top-k", "32001", "--depth", "1", "--nodes", "5"], ["--top-k 32001", "32000 tokens of the head's draft"]),
    (["--compile", "foo"], ["--compile"]), (["--compile", "reduce-overhead"], ["--compile"]),
])
def test_bad_arguments_are_refused_before_any_work(argv, words, tmp_path, capsys, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("work began before the arguments were checked")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench_tree, "llama8b", refuse)
    monkeypatch.setattr(bench_tree, "copy_bandwidth", refuse)
    (tmp_path / "file").write_text("x")
    names = {"{folder}": str(tmp_path), "{under_file}": str(tmp_path / "file" / "o.json")}
    out = tmp_path / "res" / "tree.json"
    with pytest.raises(SystemExit) as e:
        bench_tree.main(["--out", str(out), *[names.get(x, x) for x in argv]])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and all(w in err[0] for w in words), err
    assert not out.exists()
