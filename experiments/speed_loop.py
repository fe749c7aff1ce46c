"""Whole ``generate()`` runs timed: wall time per step against the forward time of its blocks (timed apart
and from inside the run), HF ``generate``'s time per token, and the zoo's tiny-coder end to end per method."""

from __future__ import annotations

import json
import statistics
import time

import torch

import hybridsd as hsd
from experiments.speed_steps import ours_ms
from hybridsd import data, prompts
from hybridsd.drafters.replay import ReplayDrafter
from hybridsd.target import _TARGETS, target_for


def accepted_continuation(model, ids, k: int, rounds: int = 12, **kw) -> list[int]:
    """A continuation that :class:`ReplayDrafter` (``k``) drafts with every token accepted, for ``generate()``
    with the arguments ``kw``: in bf16 a verify block may round differently from one-token decoding, so the plain
    output is replayed, and the speculative output replayed again, until it reproduces itself (each round fixes at
    least one more step; at most ``rounds`` rounds)."""
    cont = hsd.generate(model, ids, **kw).tokens
    for _ in range(rounds):
        out = hsd.generate(model, ids, drafter=ReplayDrafter(cont, k), **kw).tokens
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
            "host_forward_ms": statistics.median(host),
            "outside_ms": statistics.median(w - f for w, f in zip(wall, fwd)),
            "outside_forward": 1 - sum(fwd) / sum(wall)}


@torch.inference_mode()
def loop_overhead(model, ctx: int, fwd_ms: dict, compile: bool | str = False, new_tokens: int = 96) -> dict:
    """``generate()`` wall time per step against the forward time of the same block sizes (``fwd_ms``:
    ``chain_q{q}`` medians measured apart, for the same target configuration; steps of a size it lacks, or holds
    a failure's text for, leave the forward fields None).

    ``plain``: one token per step; ``replay_k8``: 8 drafted tokens per step, all accepted. The steps' wall
    time is a run of ``new_tokens`` minus a run of 1 token (prefill and setup), medians of 3;
    ``outside_forward`` = 1 - sum over steps of the block's measured forward median / that wall time.
    ``in_loop``: one more run timed from inside (:func:`in_loop`)."""
    sync = torch.cuda.synchronize if next(model.parameters()).device.type == "cuda" else (lambda: None)
    vocab = min(1000, model.config.vocab_size)
    ids = torch.randint(0, vocab, (ctx,))
    replay = accepted_continuation(model, ids, 8, max_new_tokens=new_tokens, eos_token_id=[], compile=compile)
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
        fwd = sum(fwd_ms[k] for k in keys) if all(isinstance(fwd_ms.get(k), (int, float)) for k in keys) else None
        wall = 1e3 * statistics.median(walls)
        out[name] = {"steps": len(trace), "tokens": res.stats.num_tokens, "wall_ms_per_step": wall / len(trace),
                     "forward_ms_per_step": None if fwd is None else fwd / len(trace),
                     "outside_ms_per_step": None if fwd is None else (wall - fwd) / len(trace),
                     "outside_forward": None if fwd is None else 1 - fwd / wall,
                     "drafted": sum(s.drafted for s in trace), "accepted": sum(s.accepted for s in trace),
                     "in_loop": in_loop(model, lambda: timed(new_tokens))}
    return out


def hf_generate_ms_per_token(model, ids: torch.Tensor, n: int, reps: int = 3, **kw) -> float:
    """HF ``generate`` wall time per new token (prefill included), greedy: the median of ``reps`` runs after a
    warm-up run of the same length (which meets every key length first: the attention's per-shape setup is not
    timed)."""
    sync = torch.cuda.synchronize if ids.device.type == "cuda" else (lambda: None)
    mask = torch.ones_like(ids[None])
    times = []
    with torch.inference_mode():
        model.generate(ids[None], attention_mask=mask, max_new_tokens=n, do_sample=False, **kw)
        for _ in range(reps):
            sync()  # host sync: the wall time starts with an idle device and holds every queued kernel
            t = time.perf_counter()
            out = model.generate(ids[None], attention_mask=mask, max_new_tokens=n, do_sample=False, **kw)
            sync()
            times.append(1e3 * (time.perf_counter() - t) / (out.shape[1] - ids.numel()))
    return statistics.median(times)


def zoo_speed(n_prompts: int = 8, max_new: int = 512, device: str = "cuda") -> dict:
    """tiny-coder end to end on held-out edits (located change requests, the first ``n_prompts`` under 3,000
    characters): tokens/s per method against plain decoding with this engine.

    ``step_ms``: wall time per target pass, drafting included (speedup = AL x plain step_ms / step_ms).
    ``forward_only_speedup``: AL x (graphed forward of 1 token) / (mean graphed forward of the steps' block
    sizes), what the speedup would be if drafting and the host loop were free; the gap to ``speedup``
    is where the rest of the time goes."""
    model, tok, heads = hsd.zoo.load(device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    keep = set(json.loads((hsd.zoo.path() / "eval_split.json").read_text())["ids"])
    exs = [e for e in data.load_code_edits(change_request="located", ids=keep)  # the zoo format, held out
           if len(e.input_text) < 3000][:n_prompts]
    eos = [tok.convert_tokens_to_ids("<|eot_id|>"), tok.eos_token_id]
    with torch.inference_mode():
        target = target_for(model, model.config.max_position_embeddings, cuda_graphs=device.startswith("cuda"))
        fwd = ours_ms(target, 1024, list(range(1, 10)))
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
    base = out["plain"] if "plain" in methods else None  # plain failed: no speedups (None), the rest kept
    for name in methods:
        r = out[name]
        r["speedup"] = r["tokens_per_s"] / base["tokens_per_s"] if base else None
        r["forward_only_speedup"] = r["seq_normalized_al"] * fwd["chain_q1"] / r["forward_ms_per_step"]
        print(f"zoo {name:18s} {r['tokens_per_s']:8.0f} tok/s  speedup {r['speedup'] or float('nan'):.2f}  "
              f"(forward-only {r['forward_only_speedup']:.2f})  AL {r['seq_normalized_al']:.2f}  "
              f"step {r['step_ms']:.2f} ms (forward {r['forward_ms_per_step']:.2f})")
    return out


def zoo_method(model, tok, exs, eos, make, fwd: dict, max_new: int, sync) -> dict:
    """One method's totals over the prompts, timed on a second pass (the first, untimed, captures the CUDA
    graphs of every KV bucket and EAGLE catch-up size the prompts meet, as a server would at start-up)."""
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
