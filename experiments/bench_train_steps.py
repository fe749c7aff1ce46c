"""The zoo target's edit-tuning steps on one GPU: milliseconds per step, how much of it the GPU is busy, and how
the decoder is compiled.

    python -m experiments.bench_train_steps --out F.json [--modes layers layers-graphs model model-graphs]

Runs ``train_zoo.train_phase`` (bf16) on length-bucketed batches (``sft_batches``, 65,536 tokens) of synthetic edit
examples: lengths log-normal with median 800 tokens (mean about 1,100, as the zoo's edit-tuning data), 55% of each
the prompt, random tokens. For each ``--modes`` entry (``train_zoo.compile_layers``' modes, or ``eager``) a freshly
initialised model (same seed) is compiled that way; a warm-up pass over the ``--steps`` batches compiles (and, for
``-graphs``, records) every batch shape and is timed as such; then ``--reps`` timed passes over the same batches and a
profiled pass of 40 steps (or ``--steps``): the GPU's kernel time per step against the wall time per step (a GPU
busy far less than the step lasts means the host's launches set the pace). Wall times from the host clock after a
device sync; peak memory from ``torch.cuda.max_memory_allocated``. A mode that fails is recorded with its error and
the next one runs.
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
    from experiments import train_zoo as tz
    from experiments import zoo_data as zd

    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=12_000)
    p.add_argument("--steps", type=int, default=200, help="steps per timed pass")
    p.add_argument("--reps", type=int, default=3, help="timed passes per mode")
    p.add_argument("--modes", nargs="+", default=list(tz.COMPILE_MODES), choices=("eager", *tz.COMPILE_MODES),
                   help="how the decoder is compiled (eager: not at all)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests: cpu
    p.add_argument("--batch-tokens", type=int, default=None, help=argparse.SUPPRESS)  # tests: smaller batches
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # tests: train_zoo.SMOKE's model shape
    a = p.parse_args(argv)
    if a.examples < 100 or a.steps < 10 or a.reps < 1:
        p.error("--examples must be at least 100, --steps at least 10 and --reps at least 1")
    if a.batch_tokens is not None and a.batch_tokens < 1:
        p.error(f"--batch-tokens must be >= 1, got {a.batch_tokens}")
    import torch
    from torch.profiler import ProfilerActivity, profile

    device = p.check_device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("needs a CUDA device")
    if device.type != "cuda" and set(a.modes) != {"eager"}:
        p.error("--modes other than eager need --device cuda")
    p.check_output(a.out)
    shape = {k: tz.SMOKE[k] for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size")}
    cfg = tz.TargetConfig(**({"sft_batch_tokens": a.batch_tokens} if a.batch_tokens else {}),
                          **(shape if a.smoke else {}))
    examples = synthetic_examples(a.examples)
    plan = zd.sft_batch_rows(examples, cfg.sft_batch_tokens, 2)
    if len(plan) < a.steps:
        p.error(f"--examples {a.examples} make {len(plan)} batches, fewer than --steps {a.steps}")
    shapes = {(len(b), zd.padded_width(max(len(examples[i][0]) for i in b))) for b in plan[:a.steps]}

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()  # the wall time holds every queued kernel

    def run(model, opt, steps: int) -> dict:
        batches = zd.sft_batches(examples, cfg.sft_batch_tokens, 5, seed=2, decision_weight=4.0)
        sync()
        t0 = time.perf_counter()
        info = tz.train_phase(model, opt, batches, tz.Phase("bench", steps, 1e9, 1e-5, 1, 0.1), cfg, device, [])
        sync()
        wall = time.perf_counter() - t0
        return {"steps": info["steps"], "ms_per_step": round(1e3 * wall / info["steps"], 2),
                "tokens_per_s": round(info["tokens_seen"] / wall)}

    def bench(mode: str) -> dict:
        torch.manual_seed(0)
        model = tz.build_model(cfg, 10240, {"bos": 0, "eos": 1, "eot": 4, "pad": 5}).to(device)
        if mode != "eager":
            tz.compile_layers(model, mode=mode)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        warmup = run(model, opt, a.steps)
        passes = [run(model, opt, a.steps) for _ in range(a.reps)]
        n = min(40, a.steps)
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])) \
                as prof:
            profiled = run(model, opt, n)
        kernel_us = sum(e.self_device_time_total for e in prof.key_averages()
                        if e.device_type == torch.autograd.DeviceType.CUDA
                        and not getattr(e, "is_user_annotation", False))
        return {"warmup": warmup, "passes": passes,
                "median_ms_per_step": statistics.median(r["ms_per_step"] for r in passes),
                "profiled": {**profiled, "gpu_kernel_ms_per_step": round(kernel_us / 1e3 / n, 2)},
                "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
                if device.type == "cuda" else None}

    record = {
        "what": __doc__.split("\n\n")[0], "command": "python -m experiments.bench_train_steps " + shlex.join(
            argv if argv is not None else sys.argv[1:]),
        "model": {k: getattr(cfg, k) for k in shape},
        "examples": a.examples, "batch_tokens": cfg.sft_batch_tokens, "steps": a.steps, "reps": a.reps,
        "batch_shapes": len(shapes), "modes": {}, "run_info": run_info(device),
    }
    for mode in a.modes:
        try:
            record["modes"][mode] = bench(mode)
        except Exception as e:  # recorded; the next mode still runs
            record["modes"][mode] = {"error": f"{type(e).__name__}: {e}"[:2000]}
        print(mode, json.dumps({k: v for k, v in record["modes"][mode].items() if k != "passes"}), flush=True)
        torch.compiler.reset()
        write_atomic(a.out, json.dumps(record, indent=1) + "\n")  # after each mode: a killed run keeps the rest


if __name__ == "__main__":
    main()
