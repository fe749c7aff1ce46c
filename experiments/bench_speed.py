"""Step times on the GPU against the memory-bandwidth floor and HF baselines, measured in one run.

    python experiments/bench_speed.py --out experiments/results/bench_speed.json

A Llama-3.1-8B-shaped ``LlamaForCausalLM`` in bf16 with random weights (a step's time does not
depend on the weights' values), batch 1. Floor = weight bytes / device-to-device copy bandwidth
measured here. Times are medians of CUDA-event timings after warm-up.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from experiments import provenance
from hybridsd.drafters.base import ProposeRequest
from hybridsd.drafters.replay import ReplayDrafter
from hybridsd.generate import _tree_layout
from hybridsd.kv_cache import bucket
from hybridsd.target import EXACT_ROWS, Target

EXACT_NEW_TOKENS = 256  # exact-mode steps attend over the span of a run generating this many tokens after ctx


def cuda_median_ms(fn, iters: int = 30, warmup: int = 5) -> float:
    """Median milliseconds of ``fn()`` by CUDA events, warm-up excluded."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus written."""
    src = torch.randn(2**30, device="cuda", dtype=torch.float32)  # 4 GiB
    dst = torch.empty_like(src)
    ms = cuda_median_ms(lambda: dst.copy_(src), iters=10)
    return 2 * src.numel() * 4 / (ms / 1e3)


def llama8b(layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                      tie_word_embeddings=False)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    return model


def hf_eager_decode_ms(model, ctx: int) -> float:
    """HF's own decode step: one token on a DynamicCache holding ``ctx`` tokens."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    ids = torch.randint(0, 1000, (1, ctx), device="cuda")
    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        one = ids[:, :1]

        def step():  # the cache grows by one token per call: 25 calls on top of ctx, negligible
            model(input_ids=one, past_key_values=cache, use_cache=True)

        return cuda_median_ms(step, iters=20)


def hf_static_compiled_ms(model, ctx: int, q: int) -> float | str:
    """HF ``StaticCache`` + ``torch.compile(mode="reduce-overhead")``: a step of ``q`` tokens (error text if it fails)."""
    from transformers import StaticCache

    try:
        cache = StaticCache(config=model.config, max_cache_len=ctx + 256)
        ids = torch.randint(0, 1000, (1, ctx), device="cuda")
        step_ids = ids[:, :q]
        fwd = torch.compile(model.forward, mode="reduce-overhead")
        with torch.inference_mode():
            model(input_ids=ids, past_key_values=cache, use_cache=True)
            return cuda_median_ms(lambda: fwd(input_ids=step_ids, past_key_values=cache, use_cache=True),
                                  iters=10, warmup=5)
    except Exception as e:  # noqa: BLE001 - the baseline's failure is itself a result
        return f"failed: {type(e).__name__}: {str(e)[:200]}"


def hf_generate_ms_per_token(model, ids: torch.Tensor, n: int, **kw) -> float:
    """HF ``generate`` wall time per new token (prefill included), greedy."""
    import time

    with torch.inference_mode():
        model.generate(ids[None], attention_mask=torch.ones_like(ids[None]), max_new_tokens=8, do_sample=False, **kw)
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = model.generate(ids[None], attention_mask=torch.ones_like(ids[None]), max_new_tokens=n,
                             do_sample=False, **kw)
        torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t) / (out.shape[1] - ids.numel())


@torch.inference_mode()
def eagle_draft_ms(model, ctx: int) -> dict:
    """EAGLE-1 head on the target: catch-up of 4 committed pairs plus a k-token chain, graphed and eager;
    ``per_draft_token`` = (k=3 - k=1) / 2."""
    import hybridsd as hsd

    head = hsd.EagleHead.from_target(model, kind="eagle1", dtype=torch.bfloat16)
    h = model.config.hidden_size
    tokens = np.zeros(ctx + 8, dtype=np.int64)
    hidden = torch.randn(4, h, device="cuda", dtype=torch.bfloat16)  # [4, h]
    nxt = torch.randint(0, 1000, (4,), device="cuda")  # [4]
    out = {}
    for graphs in (True, False):
        tag = "graph" if graphs else "eager"
        for k in (1, 3):
            d = hsd.EagleDrafter(head, k=k, cuda_graphs=graphs)
            d.reset(ctx)
            d.observe(torch.randn(ctx, h, device="cuda", dtype=torch.bfloat16),
                      torch.randint(0, 1000, (ctx,), device="cuda"))
            d.propose(ProposeRequest(tokens, k, torch.device("cuda")))

            def step():
                d.cache.rewind(ctx)
                d.observe(hidden, nxt)
                d.propose(ProposeRequest(tokens, k, torch.device("cuda")))

            out[f"{tag}_catchup4_k{k}"] = cuda_median_ms(step)
        out[f"{tag}_per_draft_token"] = (out[f"{tag}_catchup4_k3"] - out[f"{tag}_catchup4_k1"]) / 2
    return out


@torch.inference_mode()
def ours_ms(target: Target, ctx: int, qs: list[int]) -> dict:
    """Our target step for each block size q (chain) after ``ctx`` committed tokens, plus a 2-branch tree of 9.
    In exact mode every step is a block of ``target.exact`` rows over the span of a run of
    :data:`EXACT_NEW_TOKENS` tokens after ``ctx`` (what ``generate(exact=...)`` would use)."""
    ids = torch.randint(0, 1000, (ctx,), device="cuda")
    if target.exact:
        target.exact_span = bucket(ctx + EXACT_NEW_TOKENS + target.exact)
    target.kv.rewind(0)
    target.forward(ids, 0, last_logits_only=True)
    out = {}
    for q in qs:
        block = torch.randint(0, 1000, (q,), device="cuda")
        out[f"chain_q{q}"] = cuda_median_ms(lambda: target.forward(block, ctx))
    pos, vis, _ = _tree_layout([4, 4], ctx)
    block = torch.randint(0, 1000, (9,), device="cuda")
    out["tree_q9"] = cuda_median_ms(lambda: target.forward(block, ctx, positions=pos, visible=vis))
    return out


def accepted_continuation(model, ids, n: int, k: int, compile, rounds: int = 12) -> list[int]:
    """A continuation that :class:`ReplayDrafter` (``k``) drafts with every token accepted: in bf16 a verify
    block may round differently from one-token decoding, so the plain output is replayed, and the speculative output
    replayed again, until it reproduces itself (each round fixes at least one more step)."""
    import hybridsd as hsd

    cont = hsd.generate(model, ids, max_new_tokens=n, eos_token_id=[], compile=compile).tokens
    for _ in range(rounds):
        out = hsd.generate(model, ids, drafter=ReplayDrafter(cont, k), max_new_tokens=n, eos_token_id=[],
                           compile=compile).tokens
        if out == cont:
            break
        cont = out
    return cont


def in_loop(model, run) -> dict:
    """``run()`` (one ``generate()`` on ``model``, its target already made by a previous run) with the target's
    ``forward`` timed from inside: per step after the prefill, ``wall`` (host time from this pass's call to the
    next's, or to the end of the run), ``forward`` (on CUDA, events around the call: its host work, the graph
    launch and the device work; else host time) and ``host_forward`` (host time inside the call). Medians in ms,
    and ``outside_forward`` = 1 - sum of forward / sum of wall."""
    import time

    from hybridsd.target import _TARGETS

    cuda = next(model.parameters()).device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    target = _TARGETS[model]
    recs = []
    orig = target.forward

    def timed_forward(*args, **kw):
        ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
        h0 = time.perf_counter()
        if ev:
            ev[0].record()
        out = orig(*args, **kw)
        if ev:
            ev[1].record()
        recs.append((h0, time.perf_counter(), ev))
        return out

    target.forward = timed_forward
    try:
        sync()
        run()
        sync()
        end = time.perf_counter()
    finally:
        del target.forward
    if _TARGETS[model] is not target or len(recs) < 2:
        raise RuntimeError("generate() did not run on the instrumented target")
    steps = recs[1:]  # after the prefill
    wall = [1e3 * (nxt[0] - r[0]) for r, nxt in zip(steps, steps[1:] + [(end,)])]
    host = [1e3 * (r[1] - r[0]) for r in steps]
    fwd = [r[2][0].elapsed_time(r[2][1]) for r in steps] if cuda else host
    return {"steps": len(steps), "wall_ms": statistics.median(wall), "forward_ms": statistics.median(fwd),
            "host_forward_ms": statistics.median(host), "outside_ms": statistics.median(w - f for w, f in zip(wall, fwd)),
            "outside_forward": 1 - sum(fwd) / sum(wall)}


@torch.inference_mode()
def step_conditions(model, ctx: int, compile: bool | str = False, q: int = 9, iters: int = 20) -> dict:
    """The graphed ``q``-token forward (through ``target_for``, as ``generate()`` gets it) timed as
    :func:`cuda_median_ms` does, under one condition of the loop at a time: ``fixed`` (same start slot each
    call), ``advancing`` (start moves by ``q``), ``host_gap`` (0.5 ms of host work before each call),
    ``fresh_tokens`` (the block made from a host list each call, as a drafter's tokens are) and ``verify_after``
    (greedy verification and its host read after each call, outside the timed span). Medians in ms; on the
    CPU the times are host times."""
    import time

    from hybridsd.target import target_for
    from hybridsd.verify import greedy_chain

    device = next(model.parameters()).device
    cuda = device.type == "cuda"
    vocab = min(1000, model.config.vocab_size)
    target = target_for(model, ctx + q * (iters + 6) + 1, cuda_graphs=cuda, compile=compile)
    target.forward(torch.randint(0, vocab, (ctx,), device=device), 0, last_logits_only=True)
    block = torch.randint(0, vocab, (q,), device=device)
    host_block = block.tolist()

    def busy_wait(s: float) -> None:
        t = time.perf_counter()
        while time.perf_counter() - t < s:
            pass

    def timed(start_of=lambda i: ctx, before=None, tokens=lambda: block, after=None) -> float:
        times = []
        for i in range(iters + 5):
            if before:
                before()
            toks = tokens()
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            h = time.perf_counter()
            logits, _ = target.forward(toks, start_of(i))
            if cuda:
                b.record()
                b.synchronize()  # host sync: the timing's end
            ms = a.elapsed_time(b) if cuda else 1e3 * (time.perf_counter() - h)
            if after:
                after(toks, logits)
            if i >= 5:  # warm-up excluded
                times.append(ms)
        return statistics.median(times)

    def verify(toks, logits):
        n, tok = greedy_chain(toks[1:], logits)
        torch.cat([n.view(1), tok]).tolist()  # host sync: the step's read

    out = {"q": q, "compile": compile, "capacity": target.capacity, "fixed": timed(),
           "advancing": timed(start_of=lambda i: ctx + q * i), "host_gap": timed(before=lambda: busy_wait(5e-4)),
           "fresh_tokens": timed(tokens=lambda: torch.tensor(host_block, device=device)),
           "verify_after": timed(after=verify)}
    if cuda:
        out |= graph_launch(target._graphs[(q, (), target.kv.span(ctx + q))].graph)
    return out


def graph_launch(graph, iters: int = 20) -> dict:
    """A captured graph's launch: ``host_ms`` (host time of ``replay()``), ``replay_ms`` (CUDA events around one
    replay, so the launch's host time counts where the device waits for it) and ``replay2_ms`` (two replays back
    to back: the second launch overlaps the first's execution). Medians."""
    import time

    host, one, two = [], [], []
    for i in range(iters + 3):
        torch.cuda.synchronize()
        a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        t = time.perf_counter()
        graph.replay()
        h = time.perf_counter() - t
        b.record()
        graph.replay()
        c.record()
        c.synchronize()  # host sync: the timing's end
        if i >= 3:
            host.append(1e3 * h)
            one.append(a.elapsed_time(b))
            two.append(a.elapsed_time(c))
    return {"host_ms": statistics.median(host), "replay_ms": statistics.median(one), "replay2_ms": statistics.median(two)}


@torch.inference_mode()
def capacity_check(model, ctx: int, compile: bool | str, capacities: tuple[int, ...], rounds: int = 2) -> list[dict]:
    """The 1- and 9-token graphed steps (as :func:`ours_ms`) of targets that differ only in KV capacity, timed in
    turn ``rounds`` times (A B A B: a drift over the run shows as a difference between rounds, not capacities)."""
    rows = []
    for r in range(rounds):
        for cap in capacities:
            t = Target(model, cap, cuda_graphs=True, compile=compile)
            rows.append({"round": r, "capacity": cap, "kv_len": t.kv.span(ctx + 9), **ours_ms(t, ctx, [1, 9])})
            t.kv = None
            del t
    return rows


@torch.inference_mode()
def loop_overhead(model, ctx: int, fwd_ms: dict, compile: bool | str = False, new_tokens: int = 96) -> dict:
    """``generate()`` wall time per step against the forward time of the same block sizes (``fwd_ms``:
    ``chain_q{q}`` medians measured apart, for the same target configuration; steps of a size it lacks leave
    the forward fields None).

    ``plain``: one token per step; ``replay_k8``: 8 drafted tokens per step, all accepted. The steps' wall
    time is a run of ``new_tokens`` minus a run of 1 token (prefill and setup), medians of 3;
    ``outside_forward`` = 1 - sum over steps of the block's measured forward median / that wall time.
    ``in_loop``: one more run timed from inside (:func:`in_loop`)."""
    import time

    import hybridsd as hsd

    sync = torch.cuda.synchronize if next(model.parameters()).device.type == "cuda" else (lambda: None)
    vocab = min(1000, model.config.vocab_size)
    ids = torch.randint(0, vocab, (ctx,))
    replay = accepted_continuation(model, ids, new_tokens, 8, compile)
    out = {}
    for name, make in {"plain": lambda: None, "replay_k8": lambda: ReplayDrafter(replay, 8)}.items():
        def timed(n):
            sync()
            t = time.perf_counter()
            res = hsd.generate(model, ids, drafter=make(), max_new_tokens=n, eos_token_id=[], compile=compile)
            sync()
            return time.perf_counter() - t, res

        timed(new_tokens)  # warm-up: graph captures (and compilation) of every block size
        walls = [timed(new_tokens)[0] - timed(1)[0] for _ in range(3)]
        res = timed(new_tokens)[1]
        trace = res.stats.trace
        keys = [f"chain_q{min(s.tree_tokens + 1, 9)}" for s in trace]
        fwd = sum(fwd_ms[k] for k in keys) if all(k in fwd_ms for k in keys) else None
        wall = 1e3 * statistics.median(walls)
        out[name] = {"steps": len(trace), "tokens": res.stats.num_tokens, "wall_ms_per_step": wall / len(trace),
                     "forward_ms_per_step": None if fwd is None else fwd / len(trace),
                     "outside_ms_per_step": None if fwd is None else (wall - fwd) / len(trace),
                     "outside_forward": None if fwd is None else 1 - fwd / wall,
                     "drafted": sum(s.drafted for s in trace), "accepted": sum(s.accepted for s in trace),
                     "in_loop": in_loop(model, lambda: timed(new_tokens))}
    return out


@torch.inference_mode()
def profile_step(target: Target, ctx: int, q: int, steps: int = 5, top: int = 15) -> dict:
    """Where a step's device time goes: ``torch.profiler`` over ``steps`` un-graphed steps of ``target`` (use a
    compiled one to see the fused kernels), kernels summed by kind (matmul, attention, other) plus the top ones."""
    from torch.profiler import ProfilerActivity, profile

    cuda = target.device.type == "cuda"
    vocab = min(1000, target.model.config.vocab_size)
    ids = torch.randint(0, vocab, (ctx,), device=target.device)
    block = torch.randint(0, vocab, (q,), device=target.device)
    target.kv.rewind(0)
    target.forward(ids, 0, last_logits_only=True)
    for _ in range(3):  # warm-up (and compilation)
        target.forward(block, ctx)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            target.forward(block, ctx)
        if cuda:
            torch.cuda.synchronize()
    # CUDA: kernels only (their own device time); CPU: operators' total time (nested, so kinds overlap)
    attr = "self_device_time_total" if cuda else "cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, attr, 0) > 0
              and (not cuda or str(getattr(e, "device_type", "")).endswith("CUDA"))]
    kinds = {"attention": ("attention", "flash", "fmha", "sdpa", "softmax", "split_kv"),  # checked first
             "matmul": ("gemm", "gemv", "matmul", "mm", "cutlass", "sm90", "nvjet")}

    def kind(name: str) -> str:
        low = name.lower()
        return next((k for k, keys in kinds.items() if any(w in low for w in keys)), "other")

    by_kind: dict[str, float] = {}
    for e in events:
        by_kind[kind(e.key)] = by_kind.get(kind(e.key), 0.0) + getattr(e, attr) / 1e3 / steps
    ranked = sorted(events, key=lambda e: -getattr(e, attr))[:top]
    return {"ctx": ctx, "q": q, "ms_per_step_by_kind": by_kind,
            "top": [{"name": e.key[:120], "ms_per_step": getattr(e, attr) / 1e3 / steps, "calls_per_step": e.count / steps}
                    for e in ranked]}


def device_gaps(trace: dict, steps: int, top: int = 12) -> dict:
    """Where the device sits idle in a chrome trace (``torch.profiler``'s export): device busy time (the union of
    kernels, copies and memsets), the idle time between the first and last device event, both per step, and the
    longest idle gaps with the host calls that ran during each (by overlap)."""
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    dev = sorted((e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    host = [e for e in evs if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver", "python_function")]
    busy, gaps, end = 0.0, [], None
    for e in dev:  # union of intervals, gaps between them
        a, b = e["ts"], e["ts"] + e["dur"]
        if end is None or a > end:
            if end is not None:
                gaps.append((a - end, end, a))
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    idle = sum(g[0] for g in gaps)

    def during(a, b):
        names: dict[str, float] = {}
        for h in host:
            o = min(b, h["ts"] + h["dur"]) - max(a, h["ts"])
            if o > 0:
                names[h["name"][:80]] = names.get(h["name"][:80], 0.0) + o
        return [{"name": n, "overlap_us": v} for n, v in sorted(names.items(), key=lambda x: -x[1])[:6]]

    longest = sorted(gaps, reverse=True)[:top]
    return {"device_busy_ms_per_step": busy / 1e3 / max(steps, 1), "device_idle_ms_per_step": idle / 1e3 / max(steps, 1),
            "gaps_over_50us": sum(g[0] > 50 for g in gaps),
            "longest_gaps": [{"us": g, "host_calls": during(a, b)} for g, a, b in longest]}


@torch.inference_mode()
def profile_loop(model, ctx: int, k: int = 8, new_tokens: int = 48, top: int = 15, trace_out: Path | None = None) -> dict:
    """Where the time of ``generate()``'s drafting steps goes: ``torch.profiler`` over a run that drafts ``k``
    tokens a step, all accepted (:func:`accepted_continuation`), after a warm-up run. ``device_ms_per_step``: all
    device kernels and copies (the graph's included) per step; ``wall_ms_per_step``: the profiled run's wall time
    per step (prefill included); ``top_device`` and ``top_host`` (operators and runtime calls by self time)."""
    import time

    import hybridsd as hsd
    from torch.profiler import ProfilerActivity, profile

    device = next(model.parameters()).device
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    ids = torch.randint(0, min(1000, model.config.vocab_size), (ctx,))
    cont = accepted_continuation(model, ids, new_tokens, k, False)

    def run():
        return hsd.generate(model, ids, drafter=ReplayDrafter(cont, k), max_new_tokens=new_tokens, eos_token_id=[])

    run()  # warm-up: graph captures
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts, with_stack=False) as prof:
        sync()
        t = time.perf_counter()
        res = run()
        sync()
        wall = time.perf_counter() - t
    steps = len(res.stats.trace) + 1  # the prefill is a pass too
    events = prof.key_averages()
    on_device = [e for e in events if getattr(e, "self_device_time_total", 0) > 0
                 and str(getattr(e, "device_type", "")).endswith("CUDA")]
    host = sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]

    def rows(evs, attr):
        return [{"name": e.key[:120], "ms_per_step": getattr(e, attr) / 1e3 / steps, "calls_per_step": e.count / steps}
                for e in evs]

    with tempfile.TemporaryDirectory() as tmp:  # the timeline: where the device waits for the host
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        timeline = device_gaps(json.loads(path.read_text()), steps)
        if trace_out is not None:
            trace_out.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(trace_out, "wb") as f:
                f.write(path.read_bytes())
    return {"ctx": ctx, "k": k, "steps": steps, "tokens": res.stats.num_tokens, "timeline": timeline,
            "accepted": sum(s.accepted for s in res.stats.trace), "drafted": sum(s.drafted for s in res.stats.trace),
            "wall_ms_per_step": 1e3 * wall / steps,
            "device_ms_per_step": sum(e.self_device_time_total for e in on_device) / 1e3 / steps,
            "top_device": rows(sorted(on_device, key=lambda e: -e.self_device_time_total)[:top], "self_device_time_total"),
            "top_host": rows(host, "self_cpu_time_total")}


def zoo_speed(n_prompts: int = 8, max_new: int = 512, device: str = "cuda") -> dict:
    """tiny-coder end to end on held-out edits: tokens/s per method against plain decoding with this engine.

    ``step_ms``: wall time per target pass, drafting included (speedup = AL x plain step_ms / step_ms).
    ``forward_only_speedup``: AL x (graphed forward of 1 token) / (mean graphed forward of the steps' block
    sizes), what the speedup would be if drafting and the host loop were free; the gap to ``speedup``
    is where the rest of the time goes."""
    import time

    import hybridsd as hsd
    from hybridsd import data, prompts
    from hybridsd.target import target_for

    model, tok, heads = hsd.zoo.load(device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    keep = set(json.loads((hsd.zoo.path() / "eval_split.json").read_text())["ids"])
    exs = [e for e in data.load_code_edits() if e.id in keep and len(e.input_text) < 3000][:n_prompts]
    eos = [tok.convert_tokens_to_ids("<|eot_id|>"), tok.eos_token_id]
    with torch.inference_mode():
        fwd = ours_ms(target_for(model, model.config.max_position_embeddings, cuda_graphs=True), 1024,
                      list(range(1, 10)))
    ng = lambda: hsd.NgramDrafter(k=5, min_n=2, max_n=5)  # noqa: E731
    eagle = lambda kind="eagle1": hsd.EagleDrafter(heads[kind], k=3)  # noqa: E731
    methods = {"plain": lambda: None, "ngram": ng, "eagle": eagle, "eagle3": lambda: eagle("eagle3"),
               "ngram-eagle": lambda: hsd.HybridDrafter(ng(), eagle()),
               "ngram-eagle-tree": lambda: hsd.HybridDrafter(ng(), eagle(), "tree")}
    out = {"forward_ms": fwd}
    for name, make in list(methods.items()):
        try:
            out[name] = zoo_method(model, tok, exs, eos, make, fwd, max_new, sync)
        except Exception as e:  # noqa: BLE001 - reported, the other methods still measured
            out[name] = f"failed: {type(e).__name__}: {str(e)[:300]}"
            methods.pop(name)
    base = out["plain"]
    for name in methods:
        r = out[name]
        r["speedup"] = r["tokens_per_s"] / base["tokens_per_s"]
        r["forward_only_speedup"] = r["seq_normalized_al"] * fwd["chain_q1"] / r["forward_ms_per_step"]
        print(f"zoo {name:18s} {r['tokens_per_s']:8.0f} tok/s  speedup {r['speedup']:.2f}  "
              f"(forward-only {r['forward_only_speedup']:.2f})  AL {r['seq_normalized_al']:.2f}  "
              f"step {r['step_ms']:.2f} ms (forward {r['forward_ms_per_step']:.2f})")
    return out


def zoo_method(model, tok, exs, eos, make, fwd: dict, max_new: int, sync) -> dict:
    """One method's totals over the prompts, timed on a second pass (the first, untimed, captures the CUDA
    graphs of every KV bucket and EAGLE catch-up size the prompts meet, as a server would at start-up)."""
    import time

    import hybridsd as hsd
    from hybridsd import prompts

    drafter = make()  # one drafter for all prompts, as a server keeps it (its graphs are captured once)
    ids_all = [prompts.build_prompt_ids(tok, e.prompt) for e in exs]
    for ids in ids_all:  # warm-up pass
        hsd.generate(model, ids, drafter=drafter, max_new_tokens=max_new, eos_token_id=eos)
    toks = passes = 0
    wall = fwd_sum = 0.0
    for ids in ids_all:
        sync()
        t = time.perf_counter()
        res = hsd.generate(model, ids, drafter=drafter, max_new_tokens=max_new, eos_token_id=eos)
        sync()
        wall += time.perf_counter() - t
        toks += res.stats.num_tokens
        passes += res.stats.num_target_steps
        fwd_sum += fwd["chain_q1"] * res.stats.num_sequences  # prefill counted as one decode step
        fwd_sum += sum(fwd[f"chain_q{min(s.tree_tokens + 1, 9)}"] for s in res.stats.trace)
    return {"tokens_per_s": toks / wall, "seq_normalized_al": toks / passes, "tokens": toks,
            "step_ms": 1e3 * wall / passes, "forward_ms_per_step": fwd_sum / passes}


COMPILE_OF = {"graph": lambda mode: False, "graph_compiled": lambda mode: mode,
              "graph_autotune": lambda mode: "max-autotune-no-cudagraphs",
              "graph_auto": lambda mode: "auto"}  # generate(compile=...) of a config


def summary_table(res: dict) -> str:
    """The closing table: each step against the floor and the baselines measured in the same run."""
    floor = res["floor_ms"]
    lines = [f"floor {floor:.2f} ms ({res['weight_GB']:.2f} GB at {res['copy_bandwidth_TBps']:.2f} TB/s)",
             f"{'ctx':>5} {'step':34s} {'ms':>7} {'x floor':>8} {'x HF eager':>10} {'x HF compiled':>13}"]
    for ctx, row in res["contexts"].items():
        hf = row.get("hf_eager_decode")
        hfc = row.get("hf_static_compiled_q1")
        for name, ms in row.items():
            if not isinstance(ms, (int, float)):
                lines.append(f"{ctx:>5} {name:34s} {ms}")
                continue
            rel = f"{ms / hfc:13.2f}" if isinstance(hfc, (int, float)) else f"{'-':>13}"
            lines.append(f"{ctx:>5} {name:34s} {ms:7.2f} {ms / floor:8.2f} {ms / hf:10.2f} {rel}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("experiments/results/bench_speed.json"))
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--configs", nargs="+", default=["graph", "eager", "graph_compiled"],
                   choices=["graph", "eager", "graph_compiled", "graph_compiled_sdpa", "graph_compiled_hf",
                            "graph_autotune", "graph_auto", "graph_exact", "graph_auto_exact",
                            "graph_autotune_exact"],
                   help="our target configurations to time (graph always included)")
    p.add_argument("--skip", nargs="*", default=[], choices=["hf-compile", "hf-generate", "eagle", "overhead", "zoo"],
                   help="parts to leave out")
    p.add_argument("--compile-mode", default=None, help='torch.compile mode of our compiled steps, e.g. '
                   '"max-autotune-no-cudagraphs" (default: torch\'s default mode)')
    p.add_argument("--overhead-configs", nargs="+", default=["graph"], choices=list(COMPILE_OF),
                   help="target configurations whose generate() loop overhead is measured")
    p.add_argument("--conditions", action="store_true", help="also time the graphed step under each condition of "
                   "the loop (step_conditions), for each overhead configuration")
    p.add_argument("--profile", action="store_true", help="also profile the (compiled, un-graphed) steps' kernels and "
                   "generate()'s drafting steps")
    a = p.parse_args()
    a.configs = ["graph"] + [c for c in a.configs if c != "graph"]
    bw = copy_bandwidth()
    model = llama8b(a.layers)
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    floor_ms = weight_bytes / bw * 1e3
    res = {"run_info": provenance.run_info(), "args": vars(a) | {"out": str(a.out)}, "copy_bandwidth_TBps": bw / 1e12, "weight_GB": weight_bytes / 1e9,
           "floor_ms": floor_ms, "layers": a.layers, "contexts": {}}
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s, weights {weight_bytes / 1e9:.2f} GB, floor {floor_ms:.2f} ms")

    def save():
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=1))  # after every part: a killed run keeps what it measured

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
    for name in a.configs:
        try:
            configs[name] = factories[name]()
        except Exception as e:  # noqa: BLE001 - reported, the rest still measured
            res.setdefault("failed_configs", {})[name] = f"{type(e).__name__}: {str(e)[:300]}"
    qs = list(range(1, 10))
    for ctx in a.contexts:
        row = res["contexts"].setdefault(str(ctx), {})
        row["hf_eager_decode"] = hf_eager_decode_ms(model, ctx)
        if "hf-compile" not in a.skip:
            row |= {f"hf_static_compiled_q{q}": hf_static_compiled_ms(model, ctx, q) for q in (1, 8)}
        for tag, target in configs.items():
            try:  # all q for the plain graphs, else q = 1 and 9 (each q is one compilation)
                row |= {f"{tag}_{k}": v for k, v in ours_ms(target, ctx, qs if tag == "graph" else [1, 9]).items()}
            except Exception as e:  # noqa: BLE001 - a failed configuration is reported, the rest still measured
                row[f"{tag}_chain_q1"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
            save()
        if "eagle" not in a.skip:
            try:
                row |= {f"eagle1_{k}": v for k, v in eagle_draft_ms(model, ctx).items()}
            except Exception as e:  # noqa: BLE001 - reported, the rest still measured
                row["eagle1_graph_per_draft_token"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
        print(f"ctx {ctx}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
        save()
    if a.profile:  # the compiled step without graphs: which kernels the gap to the floor is made of
        t = next((configs[c] for c in ("graph_autotune", "graph_compiled") if c in configs), configs["graph"])
        plain = Target(model, cap, compile=t.compiled, attention=t.attention)
        res["profile_config"] = {"compile": t.compiled, "attention": t.attention}
        res["profile"] = [profile_step(plain, a.contexts[0], q) for q in (1, 9)]
        print("profile:", json.dumps(res["profile"], indent=1)[:3000])
        plain.kv = None
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
            res["loop_profile"] = profile_loop(model, ctx, trace_out=a.out.with_name(a.out.stem + "_loop_trace.json.gz"))
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
    del model
    torch.cuda.empty_cache()
    if "zoo" not in a.skip:
        res["zoo"] = zoo_speed()
        save()
    print(summary_table(res))


if __name__ == "__main__":
    main()
