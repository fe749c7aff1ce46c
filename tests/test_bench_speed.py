"""The speed benchmark's CPU-runnable parts on a tiny model (the GPU figures come from the device)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from conftest import tiny_target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import bench_speed  # noqa: E402

import hybridsd as hsd  # noqa: E402
from hybridsd.drafters.replay import ReplayDrafter  # noqa: E402
from hybridsd.target import Target  # noqa: E402


def test_accepted_continuation_is_a_fixed_point_in_bf16():
    """In bf16 the plain output need not survive verify passes; the fixed point does, every draft accepted."""
    model = tiny_target("llama", vocab=500, seed=1, layers=2).to(torch.bfloat16)
    ids = torch.randint(3, 500, (40,), generator=torch.Generator().manual_seed(0))
    cont = bench_speed.accepted_continuation(model, ids, 48, 8, False)
    res = hsd.generate(model, ids, drafter=ReplayDrafter(cont, 8), max_new_tokens=48, eos_token_id=[])
    assert res.tokens == cont
    assert sum(s.accepted for s in res.stats.trace) == sum(s.drafted for s in res.stats.trace) == 48 - 1 - len(
        res.stats.trace)


def test_profiles_run_on_the_cpu():
    model = tiny_target("llama", vocab=300, seed=2, layers=2)
    step = bench_speed.profile_step(Target(model, 64), 20, 3, steps=2)
    assert step["q"] == 3 and step["top"] and sum(step["ms_per_step_by_kind"].values()) > 0
    loop = bench_speed.profile_loop(model, 24, k=4, new_tokens=20)
    assert loop["accepted"] == loop["drafted"] > 0
    assert loop["steps"] == 5  # the prefill (1 token) and 4 passes of up to 4 + 1 tokens: 1 + 5 + 5 + 5 + 4
    assert loop["wall_ms_per_step"] > 0 and loop["top_host"]
