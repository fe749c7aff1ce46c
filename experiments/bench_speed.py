"""Step times on the GPU against the memory-bandwidth floor and HF baselines, measured in one run.

    python experiments/bench_speed.py --out experiments/results/bench_speed.json

A Llama-3.1-8B-shaped ``LlamaForCausalLM`` in bf16 with random weights (a step's time does not
depend on the weights' values), batch 1. Floor = weight bytes / device-to-device copy bandwidth
measured here. Times are medians of CUDA-event timings after warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from hybridsd import provenance
from hybridsd.generate import _tree_layout
from hybridsd.target import Target


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
    """EAGLE-1 head on the target: catch-up of 4 committed pairs, and each further draft token."""
    import hybridsd as hsd
    from hybridsd.drafters.base import ProposeRequest

    head = hsd.EagleHead.from_target(model, kind="eagle1", dtype=torch.bfloat16)
    h = model.config.hidden_size
    tokens = np.zeros(ctx + 8, dtype=np.int64)
    out = {}
    for k in (1, 3):
        d = hsd.EagleDrafter(head, k=k)
        d.reset(ctx)
        d.observe(torch.randn(ctx, h, device="cuda", dtype=torch.bfloat16),
                  torch.randint(0, 1000, (ctx,), device="cuda"))
        d.propose(ProposeRequest(tokens, k, torch.device("cuda")))

        def step():
            d.cache.rewind(ctx)
            d.observe(torch.randn(4, h, device="cuda", dtype=torch.bfloat16),
                      torch.randint(0, 1000, (4,), device="cuda"))
            d.propose(ProposeRequest(tokens, k, torch.device("cuda")))

        out[f"catchup4_k{k}"] = cuda_median_ms(step)
    out["per_draft_token"] = (out["catchup4_k3"] - out["catchup4_k1"]) / 2
    return out


@torch.inference_mode()
def ours_ms(model, ctx: int, qs: list[int], graphs: bool, compile: bool = False) -> dict:
    """Our target step for each block size q (chain), plus a 2-branch tree of 9 tokens."""
    target = Target(model, ctx + 64, cuda_graphs=graphs, compile=compile)
    ids = torch.randint(0, 1000, (ctx,), device="cuda")
    target.forward(ids, 0, last_logits_only=True)
    out = {}
    for q in qs:
        block = torch.randint(0, 1000, (q,), device="cuda")
        out[f"chain_q{q}"] = cuda_median_ms(lambda: target.forward(block, ctx))
    pos, vis, _ = _tree_layout([4, 4], ctx)
    block = torch.randint(0, 1000, (9,), device="cuda")
    out["tree_q9"] = cuda_median_ms(lambda: target.forward(block, ctx, positions=pos, visible=vis))
    return out


def zoo_speed(n_prompts: int = 8, max_new: int = 512, device: str = "cuda") -> dict:
    """tiny-coder end to end on held-out edits: tokens/s per method against plain decoding with this engine.

    ``step_ms`` (wall time per target pass, drafting included) explains the gap between the AL and the
    measured speedup: speedup = AL x plain step_ms / step_ms."""
    import time

    import hybridsd as hsd
    from hybridsd import data, prompts

    model, tok, heads = hsd.zoo.load(device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    keep = set(json.loads((hsd.zoo.path() / "eval_split.json").read_text())["ids"])
    exs = [e for e in data.load_code_edits() if e.id in keep and len(e.input_text) < 3000][:n_prompts]
    eos = [tok.convert_tokens_to_ids("<|eot_id|>"), tok.eos_token_id]
    ng = lambda: hsd.NgramDrafter(k=5, min_n=2, max_n=5)  # noqa: E731
    methods = {"plain": lambda: None, "ngram": ng, "eagle": lambda: hsd.EagleDrafter(heads["eagle1"], k=3),
               "ngram-eagle": lambda: hsd.HybridDrafter(ng(), hsd.EagleDrafter(heads["eagle1"], k=3)),
               "ngram-eagle-tree": lambda: hsd.HybridDrafter(ng(), hsd.EagleDrafter(heads["eagle1"], k=3), "tree")}
    out = {}
    for name, make in methods.items():
        toks = passes = 0
        wall = 0.0
        for i, e in enumerate(exs):
            ids = prompts.build_prompt_ids(tok, e.prompt)
            sync()
            t = time.perf_counter()
            res = hsd.generate(model, ids, drafter=make(), max_new_tokens=max_new, eos_token_id=eos)
            sync()
            if i == 0:  # the first call of a method captures its CUDA graphs: run it again, timed
                t = time.perf_counter()
                res = hsd.generate(model, ids, drafter=make(), max_new_tokens=max_new, eos_token_id=eos)
                sync()
            wall += time.perf_counter() - t
            toks += res.stats.num_tokens
            passes += res.stats.num_target_steps
        out[name] = {"tokens_per_s": toks / wall, "seq_normalized_al": toks / passes, "tokens": toks,
                     "step_ms": 1e3 * wall / passes}
    base = out["plain"]["tokens_per_s"]
    for name, r in out.items():
        r["speedup"] = r["tokens_per_s"] / base
        print(f"zoo {name:18s} {r['tokens_per_s']:8.0f} tok/s  speedup {r['speedup']:.2f}  "
              f"AL {r['seq_normalized_al']:.2f}  step {r['step_ms']:.2f} ms")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("experiments/results/bench_speed.json"))
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--skip", nargs="*", default=[], choices=["compile", "hf-compile", "hf-generate", "eagle", "zoo"],
                   help="parts to leave out")
    a = p.parse_args()
    bw = copy_bandwidth()
    model = llama8b(a.layers)
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    floor_ms = weight_bytes / bw * 1e3
    res = {"run_info": provenance.run_info(), "copy_bandwidth_TBps": bw / 1e12, "weight_GB": weight_bytes / 1e9,
           "floor_ms": floor_ms, "layers": a.layers, "contexts": {}}
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s, weights {weight_bytes / 1e9:.2f} GB, floor {floor_ms:.2f} ms")
    for ctx in a.contexts:
        row = {"hf_eager_decode": hf_eager_decode_ms(model, ctx)}
        if "hf-compile" not in a.skip:
            row |= {f"hf_static_compiled_q{q}": hf_static_compiled_ms(model, ctx, q) for q in (1, 8)}
        row |= {f"eager_{k}": v for k, v in ours_ms(model, ctx, [1, 4, 9], graphs=False).items()}
        row |= {f"graph_{k}": v for k, v in ours_ms(model, ctx, [1, 4, 9], graphs=True).items()}
        if "compile" not in a.skip:
            row |= {f"graph_compiled_{k}": v for k, v in ours_ms(model, ctx, [1, 4, 9], True, True).items()}
        if "eagle" not in a.skip:
            row |= {f"eagle1_{k}": v for k, v in eagle_draft_ms(model, ctx).items()}
        res["contexts"][str(ctx)] = row
        for name, ms in row.items():
            if isinstance(ms, str):
                print(f"ctx {ctx:5d}  {name:28s} {ms}")
            else:
                print(f"ctx {ctx:5d}  {name:28s} {ms:8.2f} ms  {ms / floor_ms:5.2f}x floor")
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=1))  # after every context: a killed run keeps what it measured
    if "hf-generate" not in a.skip:
        ids = torch.randint(0, 1000, (512,), device="cuda")
        res["hf_generate_ms_per_token"] = {
            "greedy": hf_generate_ms_per_token(model, ids, 64),
            "prompt_lookup_10": hf_generate_ms_per_token(model, ids, 64, prompt_lookup_num_tokens=10),
        }
        print("HF generate ms/token (8B shape, random weights):", res["hf_generate_ms_per_token"])
    del model
    torch.cuda.empty_cache()
    if "zoo" not in a.skip:
        res["zoo"] = zoo_speed()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
