"""The zoo target's edit-tuning steps on one GPU: milliseconds per step and how much of it the GPU is busy.

    python -m experiments.bench_train_steps --out F.json

Runs ``train_zoo.train_phase`` (layers compiled, bf16) on length-bucketed batches (``sft_batches``, 65,536 tokens)
of synthetic edit examples: lengths log-normal with median 800 tokens (mean about 1,100, as the zoo's edit-tuning
data), 55% of each the prompt, random tokens. After a warm-up pass that compiles every batch shape, ``--reps``
pairs of passes over the same ``--steps`` batches, one with the loss's positions found on the host
(``kept_positions``, as training runs) and one with them found on the device (a host sync per step); then a
profiled pass of 40 steps (or ``--steps``): the GPU's kernel time per step against the wall time per step (a GPU
busy far less than the step lasts means the host's launches set the pace). Wall times from the host clock after a
device sync.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info


def synthetic_examples(n: int, seed: int = 0) -> list[tuple]:
    """``n`` rows in ``sft_examples``' layout (ids, prompt length, changed, decisions, avoided)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        length = int(min(4096, max(100, rng.lognormal(np.log(800), 0.8))))
        n_prompt = int(length * 0.55)
        changed = sorted(rng.choice(length - n_prompt - 1, size=min(40, length - n_prompt - 1),
                                    replace=False).tolist())
        rows.append((rng.integers(6, 10_000, length).tolist(), n_prompt, changed, changed[:8],
                     [(c, 7) for c in changed[:5]]))
    return rows


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=12_000)
    p.add_argument("--steps", type=int, default=200, help="steps per timed pass")
    p.add_argument("--reps", type=int, default=3, help="pairs of timed passes")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests: cpu, no compilation
    p.add_argument("--batch-tokens", type=int, default=None, help=argparse.SUPPRESS)  # tests: smaller batches
    a = p.parse_args(argv)
    if a.examples < 100 or a.steps < 10 or a.reps < 1:
        p.error("--examples must be at least 100, --steps at least 10 and --reps at least 1")
    import torch
    from torch.profiler import ProfilerActivity, profile

    from experiments import train_zoo as tz

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("needs a CUDA device")
    cfg = tz.TargetConfig(**({"sft_batch_tokens": a.batch_tokens} if a.batch_tokens else {}))
    examples = synthetic_examples(a.examples)
    batches_in_plan = len(tz.sft_batch_rows(examples, cfg.sft_batch_tokens, 2))
    if batches_in_plan < a.steps:
        p.error(f"--examples {a.examples} make {batches_in_plan} batches, fewer than --steps {a.steps}")
    torch.manual_seed(0)
    model = tz.build_model(cfg, 10240, {"bos": 0, "eos": 1, "eot": 4, "pad": 5}).to(device)
    if device.type == "cuda":
        tz.compile_layers(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    loss_fn = tz.masked_loss

    def run(steps: int, host_keep: bool = True) -> dict:
        tz.masked_loss = loss_fn if host_keep else (  # the device finds the positions: nonzero syncs
            lambda m, x, y, w=None, av=None, uw=0.0, keep=None: loss_fn(m, x, y, w, av, uw, None))
        try:
            batches = tz.sft_batches(examples, cfg.sft_batch_tokens, 5, seed=2, decision_weight=4.0)
            info = tz.train_phase(model, opt, batches, tz.Phase("bench", steps, 1e9, 1e-5, 1, 0.1), cfg, device, [])
        finally:
            tz.masked_loss = loss_fn
        return {"steps": info["steps"], "ms_per_step": round(1e3 * info["wall_s"] / info["steps"], 2),
                "tokens_per_s": info["tokens_per_s"]}

    warmup = run(a.steps)
    pairs = [{"host": run(a.steps), "device": run(a.steps, host_keep=False)} for _ in range(a.reps)]
    profiled_steps = min(40, a.steps)
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])) \
            as prof:
        t0 = time.perf_counter()
        profiled = run(profiled_steps)
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kernel_us = sum(e.self_device_time_total for e in prof.key_averages()
                    if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False))
    record = {
        "what": __doc__.split("\n\n")[0], "command": "python -m experiments.bench_train_steps " + shlex.join(
            argv if argv is not None else sys.argv[1:]),
        "examples": a.examples, "batch_tokens": cfg.sft_batch_tokens, "steps": a.steps, "warmup": warmup,
        "pairs": pairs,
        "median_ms_per_step": {k: statistics.median(r[k]["ms_per_step"] for r in pairs) for k in ("host", "device")},
        "profiled": {**profiled, "wall_ms_per_step_profiled": round(1e3 * wall / profiled_steps, 2),
                     "gpu_kernel_ms_per_step": round(kernel_us / 1e3 / profiled_steps, 2)},
        "run_info": run_info(),
    }
    write_atomic(a.out, json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("median_ms_per_step", "profiled")}))


if __name__ == "__main__":
    main()
