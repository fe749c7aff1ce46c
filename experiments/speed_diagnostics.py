"""Why a step or the loop is slower than the floor: the graphed step under one loop condition at a time, a
graph's launch cost, KV capacity, ``torch.profiler`` views of a step's kernels and of the loop's device gaps,
and a step's matmuls and attention timed apart by block size."""

from __future__ import annotations

import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import hybridsd as hsd
from experiments.distributed import write_atomic
from experiments.speed_loop import accepted_continuation
from experiments.speed_steps import cuda_median_ms, ours_ms, random_tree
from hybridsd.attention import (EXACT_ROW_TILE, SPLIT_PROGRAMS, SPLIT_ROW_TILE, SPLIT_WIDE_TILE,
                                split_kv_attention)
from hybridsd.decoder import fused_layers
from hybridsd.drafters.replay import ReplayDrafter
from hybridsd.drafters.tree import layout
from hybridsd.kv_cache import bucket
from hybridsd.linear import row_linear
from hybridsd.target import EXACT_ROWS, Target, target_for
from hybridsd.verify import greedy_chain


@torch.inference_mode()
def step_conditions(model, ctx: int, compile: bool | str = False, q: int = 9, iters: int = 20) -> dict:
    """The graphed ``q``-token forward (through ``target_for``, as ``generate()`` gets it) timed as
    :func:`cuda_median_ms` does, under one condition of the loop at a time: ``fixed`` (same start slot each
    call), ``advancing`` (start moves by ``q``, every call attending over the span ``fixed``'s does: see
    :func:`advancing_start`), ``host_gap`` (0.5 ms of host work before each call), ``fresh_tokens`` (the block made
    from a host list each call, as a drafter's tokens are, inside the timed span) and ``verify_after`` (greedy
    verification and its host read after each call, outside the timed span). Medians in ms; on the CPU the times
    are host times."""
    device = next(model.parameters()).device
    cuda = device.type == "cuda"
    vocab = min(1000, model.config.vocab_size)
    target = target_for(model, ctx + q * (iters + 6) + 1, cuda_graphs=cuda, compile=compile)
    target.forward(torch.randint(0, vocab, (ctx,), device=device), 0, last_logits_only=True)
    block = torch.randint(0, vocab, (q,), device=device)
    host_block = block.tolist()
    base = advancing_start(ctx, q, iters + 5, target.kv.span)

    def busy_wait(s: float) -> None:
        t = time.perf_counter()
        while time.perf_counter() - t < s:
            pass

    def timed(start_of=lambda i: ctx, before=None, tokens=lambda: block, after=None) -> float:
        times = []
        for i in range(iters + 5):
            if before:
                before()
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            h = time.perf_counter()
            toks = tokens()
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
           "advancing": timed(start_of=lambda i: base + q * i), "host_gap": timed(before=lambda: busy_wait(5e-4)),
           "fresh_tokens": timed(tokens=lambda: torch.tensor(host_block, device=device)),
           "verify_after": timed(after=verify)}
    if cuda:
        out |= graph_launch(target._graphs[(q, (), target.kv.span(ctx + q))].graph)
    return out


def advancing_start(ctx: int, q: int, calls: int, span) -> int:
    """The first start, at most ``ctx``, of ``calls`` ``q``-token steps moving by ``q`` whose every step attends over
    ``span(ctx + q)`` slots, the span of a step at ``ctx`` (``span``: slots used -> slots attended, as
    ``StaticKVCache.span``); ValueError when that span holds no such run."""
    for base in range(ctx, -1, -1):
        if span(base + q) == span(base + q * calls) == span(ctx + q):
            return base
    raise ValueError(f"{calls} steps of {q} tokens do not fit in one attention span at context {ctx}")


def graph_launch(graph, iters: int = 20) -> dict:
    """A captured graph's launch: ``host_ms`` (host time of ``replay()``), ``replay_ms`` (CUDA events around one
    replay, so the launch's host time counts where the device waits for it) and ``replay2_ms`` (two replays back
    to back: the second launch overlaps the first's execution). Medians."""
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
    return {"host_ms": statistics.median(host), "replay_ms": statistics.median(one),
            "replay2_ms": statistics.median(two)}


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
def profile_step(target: Target, ctx: int, q: int, steps: int = 5, top: int = 15) -> dict:
    """Where a step's device time goes: ``torch.profiler`` over ``steps`` un-graphed steps of ``target`` (use a
    compiled one to see the fused kernels; an exact-mode one runs its padded block), kernels summed by kind (matmul,
    attention, other) plus the top ones, and the kernels launched per step (on the CPU: operators)."""
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
            "calls_per_step": sum(e.count for e in events) / steps,
            "top": [{"name": e.key[:120], "ms_per_step": getattr(e, attr) / 1e3 / steps,
                     "calls_per_step": e.count / steps} for e in ranked]}


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
    return {"device_busy_ms_per_step": busy / 1e3 / max(steps, 1),
            "device_idle_ms_per_step": idle / 1e3 / max(steps, 1),
            "gaps_over_50us": sum(g[0] > 50 for g in gaps),
            "longest_gaps": [{"us": g, "host_calls": during(a, b)} for g, a, b in longest]}


@torch.inference_mode()
def profile_loop(model, ctx: int, k: int = 8, new_tokens: int = 48, top: int = 15,
                 trace_out: Path | None = None) -> dict:
    """Where the time of ``generate()``'s drafting steps goes: ``torch.profiler`` over a run that drafts ``k``
    tokens a step, all accepted (:func:`accepted_continuation`), after a warm-up run. ``device_ms_per_step``: all
    device kernels and copies (the graph's included) per step; ``wall_ms_per_step``: the profiled run's wall time
    per step (prefill included); ``top_device`` and ``top_host`` (operators and runtime calls by self time)."""
    device = next(model.parameters()).device
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    ids = torch.randint(0, min(1000, model.config.vocab_size), (ctx,))
    cont = accepted_continuation(model, ids, k, max_new_tokens=new_tokens, eos_token_id=[], compile=False)

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
        if trace_out is not None:  # whole or not at all, as the results file
            write_atomic(trace_out, gzip.compress(path.read_bytes()))
    return {"ctx": ctx, "k": k, "steps": steps, "tokens": res.stats.num_tokens, "timeline": timeline,
            "accepted": sum(s.accepted for s in res.stats.trace), "drafted": sum(s.drafted for s in res.stats.trace),
            "wall_ms_per_step": 1e3 * wall / steps,
            "device_ms_per_step": sum(e.self_device_time_total for e in on_device) / 1e3 / steps,
            "top_device": rows(sorted(on_device, key=lambda e: -e.self_device_time_total)[:top],
                               "self_device_time_total"),
            "top_host": rows(host, "self_cpu_time_total")}


def _graphed_ms(run, iters: int = 20) -> float:
    """CUDA-event median of one CUDA-graph replay of ``run`` (run once before capture: warm-up, lazy init); on a
    machine without CUDA, :func:`cuda_median_ms` of ``run`` itself."""
    run()
    if not torch.cuda.is_available():
        return cuda_median_ms(run, iters=iters, warmup=0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return cuda_median_ms(graph.replay, iters=iters)


@torch.inference_mode()
def gemm_rows(model, rows: tuple[int, ...] = (1, 8, 9, 16, 64), iters: int = 20, row_kernel_rows: int = EXACT_ROWS
              ) -> list[dict]:
    """The step's matmuls alone by weight kind and block size: one CUDA graph of a kind's matmul in every layer (the
    LM head: once), in ms per step, with the weight bytes read per ms (TB/s). ``kernel`` ``"F.linear"``: as the
    fused decoder calls them (cuBLAS), for every block size in ``rows``, showing what a block of tokens costs in
    matmuls over a one-token step; ``"row_linear"`` (CUDA): exact mode's kernels on a block of ``row_kernel_rows``
    rows as its layer calls them (gate/up with its SiLU gate, o and down with their residual)."""
    layers = fused_layers(model.model)
    kinds = {"qkv": [w.wqkv for w in layers], "o": [w.wo for w in layers], "gate_up": [w.w13 for w in layers],
             "down": [w.w2 for w in layers], "lm_head": [model.lm_head.weight]}
    row_kinds = {"qkv": {}, "o": {"residual": True}, "gate_up": {"glu": True}, "down": {"residual": True}}
    out = []

    def timed(m, kind, kernel, ws, fn):
        xs = [torch.randn(m, w.shape[1], device=w.device, dtype=w.dtype) for w in ws]  # [m, in] per layer
        ms = _graphed_ms(lambda: [fn(x, w) for x, w in zip(xs, ws)], iters)
        nbytes = sum(w.numel() * w.element_size() for w in ws)
        out.append({"rows": m, "kind": kind, "kernel": kernel, "ms_per_step": ms, "TBps": nbytes / ms / 1e9})

    for m in rows:
        for kind, ws in kinds.items():
            timed(m, kind, "F.linear", ws, F.linear)
    if torch.cuda.is_available() and next(model.parameters()).is_cuda:
        for kind, opts in row_kinds.items():
            ws = kinds[kind]
            n = ws[0].shape[0] // (2 if opts.get("glu") else 1)
            res = torch.randn(row_kernel_rows, n, device=ws[0].device, dtype=ws[0].dtype) if opts.get("residual") \
                else None
            timed(row_kernel_rows, kind, "row_linear", ws,
                  lambda x, w, g=opts.get("glu", False), r=res: row_linear(x, w, glu=g, residual=r))
    return out


ATTENTION_CASES = {  # name: (block tokens, a random tree (else a chain), exact-mode views with the rows' branches
    # ("in-place": exact mode without views), exact mode's real tokens of the block (the rest padding))
    "decode": (1, False, None, 1), "chain_q9": (9, False, None, 9), "tree_q64": (64, True, None, 64),
    "exact16_decode": (16, False, "zeros", 1), "exact16_chain9": (16, False, "zeros", 9),
    "exact16_decode_in_place": (16, False, "in-place", 1), "exact16_chain9_in_place": (16, False, "in-place", 9),
    "exact16_tree9": (16, False, "halves", 9), "exact16_two_views": (16, False, "halves", 16),
}


ATTENTION_PLANS = (  # (grid aim, row tile): 64-row tiles (the default up to 64 rows), 128-row ones (above), and
    # exact mode's 16-row token-major tiles
    (32, SPLIT_ROW_TILE), (64, SPLIT_ROW_TILE), (SPLIT_PROGRAMS, SPLIT_ROW_TILE), (256, SPLIT_ROW_TILE),
    (512, SPLIT_ROW_TILE), (SPLIT_PROGRAMS, SPLIT_WIDE_TILE), (256, SPLIT_WIDE_TILE),
    (SPLIT_PROGRAMS, EXACT_ROW_TILE))  # (exact mode: the grid follows the key chunks, not the aim)


@torch.inference_mode()
def attention_plans(model, ctx: int, plans: tuple[tuple[int, int], ...] = ATTENTION_PLANS,
                    cases: tuple[str, ...] = tuple(ATTENTION_CASES), iters: int = 20) -> list[dict]:
    """The split-KV attention of a step alone, per :data:`ATTENTION_CASES` block and per plan ``(programs,
    row_tile)`` (:func:`~hybridsd.attention.split_plan`; a row tile above a block's rows only where it changes the
    plan): one CUDA graph of the attention of every layer (a KV cache per layer, ``ctx`` committed keys in a span
    of ``bucket(ctx + 64)``), in ms per step. Exact-mode cases are blocks of 16 rows whose first 1, 9 or 16 tokens
    are real (no key past them seen: ``block[3]``, as exact mode's steps tell the kernel), their queries token-major
    and rotated in the kernel; they read keys through two views (``exact16_tree9``, ``exact16_two_views``: the
    second half of the real tokens on view 1, as a tree does; the key tiles of the block gathered), through two
    views all on view 0 (the kernel with its gathering path, every key tile read in place, as
    :func:`~hybridsd.target.view_region` has it for a chain), or with no views (``*_in_place``: the kernel without
    the gathering path, which exact mode runs for decode steps and chains)."""
    cfg = model.config
    p = next(model.parameters())
    hkv, heads = cfg.num_key_value_heads, cfg.num_attention_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    span = bucket(ctx + 64)
    caches = [(torch.randn(hkv, span, d, device=p.device, dtype=p.dtype),
               torch.randn(hkv, span, d, device=p.device, dtype=p.dtype)) for _ in range(cfg.num_hidden_layers)]
    out = []
    for name in cases:
        t, tree, views, live = ATTENTION_CASES[name]
        q = torch.randn(hkv, heads // hkv * t, d, device=p.device, dtype=p.dtype)  # [Hkv, g*T, D]
        if views is not None:  # exact mode: token-major [T, Hkv, g, D], rotated in the kernel
            q = q.view(hkv, heads // hkv, t, d).permute(2, 0, 1, 3)
            extra_q = {"rotary": tuple(torch.randn(t, d, device=p.device, dtype=p.dtype) for _ in range(2))}
        else:
            extra_q = {}
        block = np.tril(np.ones((t, t), dtype=bool)) if not tree else layout(random_tree(t - 1, 7), ctx)[1]
        allowed = torch.zeros(t, span, dtype=torch.bool, device=p.device)  # [T, span]
        allowed[:, :ctx] = True
        allowed[:, ctx : ctx + t] = torch.as_tensor(block, device=p.device)
        extra = {}
        if views == "in-place":
            extra = {"block": torch.tensor([0, 0, live, ctx + live], device=p.device)}  # keys past ctx + live: unseen
        elif views is not None:
            branch = torch.zeros(t, dtype=torch.long, device=p.device)
            if views == "halves":
                branch[live // 2 : live] = 1
            region = [ctx, ctx + t] if views == "halves" else [0, 0]  # a chain's views follow slot order (view_region)
            extra = {"key_slots": torch.arange(span, device=p.device).repeat(2, 1), "branch": branch,
                     "block": torch.tensor([*region, live, ctx + live], device=p.device)}
        extra |= extra_q
        rows = heads // hkv * t
        for aim, tile in dict.fromkeys((aim, min(tile, max(rows, SPLIT_ROW_TILE))) for aim, tile in plans):
            try:
                ms = _graphed_ms(lambda: [split_kv_attention(q, k, v, allowed, d**-0.5, programs=aim, row_tile=tile,
                                                             **extra) for k, v in caches], iters)
            except Exception as e:  # noqa: BLE001 - a plan that fails (e.g. to compile) is reported, the rest timed
                ms = f"failed: {type(e).__name__}: {str(e)[:300]}"
            out.append({"case": name, "tokens": t, "programs": aim, "row_tile": tile, "ms_per_step": ms})
    return out
