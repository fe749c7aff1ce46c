"""Step times on the GPU against the memory-bandwidth floor and HF baselines, measured in one run.

    python -m experiments.bench_speed --out experiments/results/bench_speed.json

A Llama-3.1-8B-shaped ``LlamaForCausalLM`` in bf16 with random weights (a step's time does not
depend on the weights' values), batch 1. Floor = the bytes a step must read (the weight matrices and the
context's KV cache; ``experiments.bandwidth_floor``) / device-to-device copy bandwidth measured here. Times are
medians of CUDA-event timings after warm-up. This file holds the command line and the configurations; the
measurements are in ``speed_steps`` (one step), ``speed_loop`` (whole ``generate()`` runs) and
``speed_diagnostics`` (conditions, capacity, profiles).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from experiments import bandwidth_floor, provenance
from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.speed_diagnostics import (attention_plans, capacity_check, gemm_rows, profile_loop, profile_step,
                                           step_conditions)
from experiments.speed_loop import hf_generate_ms_per_token, loop_overhead, zoo_speed
from experiments.speed_steps import (EXACT_NEW_TOKENS, copy_bandwidth, eagle_draft_ms, hf_eager_decode_ms,
                                     hf_static_compiled_ms, llama8b, ours_ms)
from hybridsd.kv_cache import bucket
from hybridsd.target import COMPILE_MODES, EXACT_ROWS, Target


CONFIGS = ("graph", "eager", "graph_compiled", "graph_compiled_sdpa", "graph_compiled_hf", "graph_autotune",
           "graph_auto", "graph_exact", "graph_auto_exact", "graph_autotune_exact")


def config_spec(spec: str) -> str:
    """``--configs`` entry check: ``CONFIG`` or ``CONFIG=STEP,...`` (:func:`config_steps`)."""
    try:
        config_steps(spec, [], [])
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return spec


def config_steps(spec: str, chains: list[int], trees: list[int]) -> tuple[list[int], tuple[int, ...]]:
    """The chain and tree block sizes a ``--configs`` entry times: ``CONFIG`` (``chains``, ``trees``) or
    ``CONFIG=chain_q1,tree_q64`` (those steps only)."""
    name, eq, steps = spec.partition("=")
    if name not in CONFIGS:
        raise ValueError(f"unknown configuration {name!r} (one of {', '.join(CONFIGS)})")
    if not eq:
        return list(chains), tuple(trees)
    sizes: dict[str, list[int]] = {"chain": [], "tree": []}
    for step in steps.split(","):
        kind, _, q = step.partition("_q")
        if kind not in sizes or not q.isdigit() or int(q) < 1:
            raise ValueError(f"{spec!r}: steps are chain_qN or tree_qN with N >= 1, got {step!r}")
        sizes[kind].append(int(q))
    return sizes["chain"], tuple(sizes["tree"])


COMPILE_OF = {"graph": lambda mode: False, "graph_compiled": lambda mode: mode,
              "graph_autotune": lambda mode: "max-autotune-no-cudagraphs",
              "graph_auto": lambda mode: "auto"}  # generate(compile=...) of a config


def summary_table(res: dict) -> str:
    """The closing table: each step against the floor and the baselines measured in the same run."""
    floors = bandwidth_floor.floors_ms(res)
    lines = [f"floor at context {ctx}: {floor:.2f} ms" for ctx, floor in floors.items()]
    lines += [(f"({res['weight_GB']:.2f} GB of weights, {bandwidth_floor.embedding_bytes() / 1e9:.2f} of them the "
               f"input embedding, at {res['copy_bandwidth_TBps']:.2f} TB/s)"),
              f"{'ctx':>5} {'step':34s} {'ms':>7} {'x floor':>8} {'x HF eager':>10} {'x HF compiled':>13}"]
    for ctx, row in res["contexts"].items():
        floor = floors[int(ctx)]
        hf = row.get("hf_eager_decode")
        hfc = row.get("hf_static_compiled_q1")
        for name, ms in row.items():
            if not isinstance(ms, (int, float)):
                lines.append(f"{ctx:>5} {name:34s} {ms}")
                continue
            rel = f"{ms / hfc:13.2f}" if isinstance(hfc, (int, float)) else f"{'-':>13}"
            lines.append(f"{ctx:>5} {name:34s} {ms:7.2f} {ms / floor:8.2f} {ms / hf:10.2f} {rel}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("experiments/results/bench_speed.json"))
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--configs", nargs="+", default=["graph", "eager", "graph_compiled"], type=config_spec,
                   help=f"our target configurations to time (graph always included), each one of {CONFIGS}, "
                   "alone (its steps: --chains and --trees) or as CONFIG=STEP,... with steps chain_qN, tree_qN "
                   "(e.g. graph_autotune=tree_q64: that step only)")
    p.add_argument("--chains", type=int, nargs="*", default=[1, 9],
                   help="chain block sizes timed for each configuration but graph (which times 1..9)")
    p.add_argument("--trees", type=int, nargs="*", default=[9], help="tree block sizes timed for each "
                   "configuration: 9 = two branches of 4, any other n = a random tree of n - 1 nodes (not in exact "
                   "mode)")
    p.add_argument("--kernels", action="store_true", help="also time the step's matmuls (gemm_rows) and its attention "
                   "per grid aim (attention_plans) apart, at the first context, before the configurations")
    p.add_argument("--skip", nargs="*", default=[], choices=["hf-compile", "hf-generate", "eagle", "overhead", "zoo"],
                   help="parts to leave out")
    p.add_argument("--zoo-only", action="store_true", help="only the zoo's tiny-coder end to end (no 8B-shape model)")
    p.add_argument("--compile-mode", default=None, choices=COMPILE_MODES, help="torch.compile mode of our compiled "
                   "steps (default: torch's default mode)")
    p.add_argument("--overhead-configs", nargs="+", default=["graph"], choices=list(COMPILE_OF),
                   help="target configurations whose generate() loop overhead is measured")
    p.add_argument("--conditions", action="store_true", help="also time the graphed step under each condition of "
                   "the loop (step_conditions), for each overhead configuration")
    p.add_argument("--profile", action="store_true", help="also profile the (compiled, un-graphed) steps' kernels "
                   "(exact-mode configurations: their padded block too) and "
                   "generate()'s drafting steps")
    a = p.parse_args(argv)
    for flag, values, least in (("--layers", [a.layers], 1), ("--contexts", a.contexts, 1), ("--chains", a.chains, 1),
                                ("--trees", a.trees, 2)):
        if values and min(values) < least:
            p.error(f"{flag} must be >= {least}, got {min(values)}")
    specs: dict[str, set[str]] = {}
    for c in a.configs:
        specs.setdefault(c.partition("=")[0], set()).add(c)
    for name, given in specs.items():
        if len(given) > 1:
            p.error(f"--configs: {name} given with different steps ({', '.join(sorted(given))})")

    def changed(*dests: str) -> str:  # the flags among dests given other than their defaults
        return ", ".join("--" + d.replace("_", "-") for d in dests if getattr(a, d) != p.get_default(d))

    if a.zoo_only and "zoo" in a.skip:
        p.error("--zoo-only with --skip zoo: nothing left to run")
    if a.zoo_only and (given := changed("layers", "contexts", "configs", "chains", "trees", "kernels", "compile_mode",
                                        "overhead_configs", "conditions", "profile")):
        p.error(f"--zoo-only runs the zoo alone (no 8B-shape model), so {given} would be ignored")
    if "overhead" in a.skip and (given := changed("overhead_configs", "conditions")):  # --profile: its step part
        p.error(f"--skip overhead drops {given} (they run in the overhead part)")
    p.check_output(a.out)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (it times GPU steps against the memory-bandwidth floor); none here")
    if a.zoo_only:
        res = {"run_info": provenance.run_info("cuda"), "args": vars(a) | {"out": str(a.out)}, "zoo": zoo_speed()}
        write_atomic(a.out, json.dumps(res, indent=1))
        print(json.dumps(res["zoo"], indent=1))
        return
    a.configs = ["graph"] + [c for c in a.configs if c != "graph"]
    # configuration name: (chain sizes, tree sizes); each q is one compilation for a compiled configuration
    steps_of = {c.partition("=")[0]: config_steps(c, list(range(1, 10)) if c == "graph" else a.chains, a.trees)
                for c in a.configs}
    bw = copy_bandwidth()
    model = llama8b(a.layers)
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    res = {"run_info": provenance.run_info("cuda"), "args": vars(a) | {"out": str(a.out)},
           "copy_bandwidth_TBps": bw / 1e12, "weight_GB": weight_bytes / 1e9, "layers": a.layers, "contexts": {}}
    res["floors_ms"] = {str(c): bandwidth_floor.step_floor_ms(res, c) for c in a.contexts}  # for the reader
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s, weights {weight_bytes / 1e9:.2f} GB, floors {res['floors_ms']} ms")

    def save():
        a.out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(a.out, json.dumps(res, indent=1))  # after every part: a killed run keeps what it measured

    if a.kernels:  # no compilation: first, so that a run cut short by its time limit still has them
        for part, run in (("gemm_rows", lambda: gemm_rows(model)), ("attention_plans", lambda: attention_plans(
                model, a.contexts[0]))):
            try:
                res[part] = run()
                print(part, json.dumps(res[part]))
            except Exception as e:  # noqa: BLE001 - reported, the configurations still measured
                res[part] = f"failed: {type(e).__name__}: {str(e)[:300]}"
            save()

    cap = max(a.contexts) + 64  # one target per configuration serves every context (one compilation per q)
    exact_cap = max(a.contexts) + EXACT_NEW_TOKENS + EXACT_ROWS
    mode = a.compile_mode or True
    factories = {  # name: our target (default attention: the split-KV kernel); for comparison, "sdpa" = our
        # decoder with SDPA attention, "hf" = model(...) compiled instead of our decoder
        "graph": lambda: Target(model, cap, cuda_graphs=True),
        "eager": lambda: Target(model, cap),
        "graph_compiled": lambda: Target(model, cap, cuda_graphs=True, compile=mode),
        "graph_compiled_sdpa": lambda: Target(model, cap, cuda_graphs=True, compile=mode, attention="sdpa"),
        "graph_compiled_hf": lambda: Target(model, cap, cuda_graphs=True, compile=mode, decoder=False),
        "graph_autotune": lambda: Target(model, cap, cuda_graphs=True, compile="max-autotune-no-cudagraphs"),
        "graph_auto": lambda: Target(model, cap, cuda_graphs=True, compile="auto"),
        # exact mode (every step EXACT_ROWS rows): its 1- and 9-token steps beside the fastest mode's
        "graph_exact": lambda: Target(model, exact_cap, cuda_graphs=True, exact=EXACT_ROWS),
        "graph_auto_exact": lambda: Target(model, exact_cap, cuda_graphs=True, compile="auto", exact=EXACT_ROWS),
        "graph_autotune_exact": lambda: Target(model, exact_cap, cuda_graphs=True,
                                               compile="max-autotune-no-cudagraphs", exact=EXACT_ROWS),
    }
    configs = {}
    for name in steps_of:
        try:
            configs[name] = factories[name]()
        except Exception as e:  # noqa: BLE001 - reported, the rest still measured
            res.setdefault("failed_configs", {})[name] = f"{type(e).__name__}: {str(e)[:300]}"
    for ctx in a.contexts:
        row = res["contexts"].setdefault(str(ctx), {})
        row["hf_eager_decode"] = hf_eager_decode_ms(model, ctx)
        if "hf-compile" not in a.skip:
            row |= {f"hf_static_compiled_q{q}": hf_static_compiled_ms(model, ctx, q) for q in (1, 8)}
        for tag, target in configs.items():
            try:
                row |= {f"{tag}_{k}": v for k, v in ours_ms(target, ctx, *steps_of[tag]).items()}
            except Exception as e:  # noqa: BLE001 - a failed configuration is reported, the rest still measured
                row[f"{tag}_chain_q1"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
            save()
        if "eagle" not in a.skip:
            try:
                row |= {f"eagle1_{k}": v for k, v in eagle_draft_ms(model, ctx).items()}
            except Exception as e:  # noqa: BLE001 - reported, the rest still measured
                row["eagle1_graph_per_draft_token"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
        print(f"ctx {ctx}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in row.items()))
        save()
    if a.profile:  # the compiled step without graphs: which kernels the gap to the floor is made of
        t = next((configs[c] for c in ("graph_autotune", "graph_compiled", "graph_auto") if c in configs),
                 configs["graph"])
        plain = Target(model, cap, compile=t.compiled, attention=t.attention)
        res["profile_config"] = {"compile": t.compiled, "attention": t.attention}
        res["profile"] = [profile_step(plain, a.contexts[0], q) for q in (1, 9)]
        print("profile:", json.dumps(res["profile"], indent=1)[:3000])
        plain.kv = None
        for name in (c for c in configs if "exact" in c):  # exact mode's padded block, kernel by kernel
            exact = Target(model, exact_cap, compile=configs[name].compiled, exact=EXACT_ROWS)
            exact.exact_span = bucket(a.contexts[0] + EXACT_NEW_TOKENS + EXACT_ROWS)
            res.setdefault("profile_exact", {})[name] = [profile_step(exact, a.contexts[0], q) for q in (1, 9)]
            exact.kv = None
        save()
    for t in configs.values():  # free the KV caches
        t.kv = None
    del configs
    torch.cuda.empty_cache()
    if "overhead" not in a.skip:  # "graph": q = 1..9 timed apart; compiled configs: q = 1 and 9 (and in_loop)
        ctx = a.contexts[0]
        for i, cfg in enumerate(a.overhead_configs):
            if a.conditions:
                res.setdefault("step_conditions", {})[cfg] = [step_conditions(model, ctx, COMPILE_OF[cfg](mode), q)
                                                              for q in (1, 9)]
                print("step conditions", cfg, json.dumps(res["step_conditions"][cfg]))
                res.setdefault("capacity_check", {})[cfg] = capacity_check(model, ctx, COMPILE_OF[cfg](mode),
                                                                         (ctx + 64, ctx + 235))
                print("capacity check", cfg, json.dumps(res["capacity_check"][cfg]))
            fwd = {k[len(cfg) + 1:]: v for k, v in res["contexts"][str(ctx)].items() if k.startswith(cfg + "_chain")}
            section = "loop_overhead" if i == 0 else f"loop_overhead_{cfg}"
            res[section] = {"config": cfg, "ctx": ctx} | loop_overhead(model, ctx, fwd, COMPILE_OF[cfg](mode))
            print(section, json.dumps(res[section]))
            save()
        if a.profile:  # the drafting steps' time outside the forward: which kernels and host calls
            res["loop_profile"] = profile_loop(model, ctx,
                                               trace_out=a.out.with_name(a.out.stem + "_loop_trace.json.gz"))
            print("loop profile:", json.dumps(res["loop_profile"], indent=1)[:3000])
            save()
    if "hf-generate" not in a.skip:
        ids = torch.randint(0, 1000, (512,), device="cuda")
        res["hf_generate_ms_per_token"] = {
            "greedy": hf_generate_ms_per_token(model, ids, 64),
            "prompt_lookup_10": hf_generate_ms_per_token(model, ids, 64, prompt_lookup_num_tokens=10),
        }
        print("HF generate ms/token (8B shape, random weights):", res["hf_generate_ms_per_token"])
        save()
    model = None  # the 8B-shape weights freed before the zoo run (the lambdas above are spent)
    torch.cuda.empty_cache()
    if "zoo" not in a.skip:
        res["zoo"] = zoo_speed()
        save()
    print(summary_table(res))


if __name__ == "__main__":
    main()
