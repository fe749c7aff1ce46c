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

        def step():
            model(input_ids=one, past_key_values=cache, use_cache=True)
            cache.crop(ctx) if hasattr(cache, "crop") else None  # keep the context length fixed

        return cuda_median_ms(step, iters=20)


@torch.inference_mode()
def ours_ms(model, ctx: int, qs: list[int], graphs: bool) -> dict:
    """Our target step for each block size q (chain), plus a 2-branch tree of 9 tokens."""
    target = Target(model, ctx + 64, cuda_graphs=graphs)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("experiments/results/bench_speed.json"))
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048])
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
        row |= {f"eager_{k}": v for k, v in ours_ms(model, ctx, [1, 4, 9], graphs=False).items()}
        row |= {f"graph_{k}": v for k, v in ours_ms(model, ctx, [1, 4, 9], graphs=True).items()}
        res["contexts"][str(ctx)] = row
        for name, ms in row.items():
            print(f"ctx {ctx:5d}  {name:22s} {ms:8.2f} ms  {ms / floor_ms:5.2f}x floor")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
