"""One step's time on the GPU: CUDA-event medians, the copy bandwidth that sets the memory floor, the
Llama-3.1-8B-shaped model, HF's decode-step baselines, our target's chain and tree steps and the EAGLE-1 draft."""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

import hybridsd as hsd
from experiments.bandwidth_floor import LLAMA8B
from hybridsd.drafters.base import ProposeRequest
from hybridsd.drafters.tree import layout
from hybridsd.generate import _tree_layout
from hybridsd.kv_cache import bucket
from hybridsd.target import Target, cache_kwarg

EXACT_NEW_TOKENS = 256  # exact-mode steps attend over the span of a run generating this many tokens after ctx


def random_tree(n: int, depth: int, seed: int = 0) -> tuple[int, ...]:
    """Parents of a random tree of ``n`` nodes and depth at most ``depth``."""
    rng = np.random.default_rng(seed)
    parents, depths = [], []
    for i in range(n):
        options = [-1] + [j for j in range(i) if depths[j] < depth]
        p = int(rng.choice(options))
        parents.append(p)
        depths.append(1 if p < 0 else depths[p] + 1)
    return tuple(parents)


def cuda_median_ms(fn, iters: int = 30, warmup: int = 5) -> float:
    """Median milliseconds of ``fn()`` by CUDA events, warm-up excluded (on a machine without CUDA, by the host
    clock: the CPU tests of the benchmark code)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if not torch.cuda.is_available():
            t = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t))
            continue
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
    """The benchmark target: a Llama-3.1-8B-shaped ``LlamaForCausalLM`` of ``layers`` layers, random bf16 weights, on
    the GPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=layers, **LLAMA8B)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    return model


def hf_eager_decode_ms(model, ctx: int, iters: int = 20, warmup: int = 5) -> float:
    """HF's own decode step: one token on a DynamicCache holding ``ctx`` tokens (it grows by one token per call:
    ``warmup + iters`` calls on top of ``ctx``, negligible), in steady state: the same steps run first on a
    throwaway cache, so that the attention's setup for each new key length (cuDNN builds a plan per shape, about
    1 ms of host time per layer) is done before the timed steps, not inside them."""
    from transformers import DynamicCache

    ids = torch.randint(0, 1000, (1, ctx), device=next(model.parameters()).device)
    one = ids[:, :1]
    kw = cache_kwarg(model)

    def prefilled():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, use_cache=True, **{kw: cache})
        return lambda: model(input_ids=one, use_cache=True, **{kw: cache})

    with torch.inference_mode():
        throwaway = prefilled()
        for _ in range(warmup + iters):  # every key length the timed steps meet
            throwaway()
        del throwaway
        return cuda_median_ms(prefilled(), iters=iters, warmup=warmup)


def hf_static_compiled_ms(model, ctx: int, q: int) -> float | str:
    """HF ``StaticCache`` + ``torch.compile(mode="reduce-overhead")``: a step of ``q`` tokens (error text if it
    fails)."""
    from transformers import StaticCache

    try:
        cache = StaticCache(config=model.config, max_cache_len=ctx + 256)
        ids = torch.randint(0, 1000, (1, ctx), device="cuda")
        step_ids = ids[:, :q]
        fwd = torch.compile(model.forward, mode="reduce-overhead")
        kw = cache_kwarg(model)
        with torch.inference_mode():
            model(input_ids=ids, use_cache=True, **{kw: cache})
            return cuda_median_ms(lambda: fwd(input_ids=step_ids, use_cache=True, **{kw: cache}), iters=10, warmup=5)
    except Exception as e:  # noqa: BLE001 - the baseline's failure is itself a result
        return f"failed: {type(e).__name__}: {str(e)[:200]}"


@torch.inference_mode()
def eagle_draft_ms(model, ctx: int) -> dict:
    """EAGLE-1 head on the target: catch-up of 4 committed pairs plus a k-token chain, graphed and eager;
    ``per_draft_token`` = (k=3 - k=1) / 2."""
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
def ours_ms(target: Target, ctx: int, qs: list[int], trees: tuple[int, ...] = (9,)) -> dict:
    """Our target step for each block size q (chain) after ``ctx`` committed tokens, and a tree block of each
    size in ``trees``: 9 is two branches of 4 (``tree_q9``), any other ``n`` the root and a random tree of
    ``n - 1`` nodes of depth at most 7 (``tree_q{n}``, as ``bench_tree``'s ``tree_q64``; not in exact mode,
    which verifies at most two branches). In exact mode every step is a block of ``target.exact`` rows over the
    span of a run of :data:`EXACT_NEW_TOKENS` tokens after ``ctx`` (what ``generate(exact=...)`` would use)."""
    dev, vocab = target.device, min(1000, target.model.config.vocab_size)
    ids = torch.randint(0, vocab, (ctx,), device=dev)
    if target.exact:
        target.exact_span = bucket(ctx + EXACT_NEW_TOKENS + target.exact)
    target.kv.rewind(0)
    target.forward(ids, 0, last_logits_only=True)
    out = {}
    for q in qs:
        block = torch.randint(0, vocab, (q,), device=dev)
        out[f"chain_q{q}"] = cuda_median_ms(lambda: target.forward(block, ctx))
    for n in trees:
        if n == 9:
            pos, vis, _ = _tree_layout([4, 4], ctx)
        elif target.exact:
            continue
        else:
            pos, vis = layout(random_tree(n - 1, 7), ctx)
        block = torch.randint(0, vocab, (n,), device=dev)
        try:  # a tree block that fails (e.g. to compile) is reported; the chains above are kept
            out[f"tree_q{n}"] = cuda_median_ms(lambda: target.forward(block, ctx, positions=pos, visible=vis))
        except Exception as e:  # noqa: BLE001
            out[f"tree_q{n}"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
    return out
