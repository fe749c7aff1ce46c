"""Write a random-weight target shaped like Llama-3.1-8B-Instruct and EAGLE-1/EAGLE-3 heads in the public layouts.

    python -m experiments.make_checkpoint --out /tmp/llama31-random [--layers 32] [--device cuda]

Gives ``OUT/target`` (``config.json`` as Llama-3.1-8B-Instruct's: hidden 4096, 32 layers, 32/8 heads, vocab
128256, rope llama3 scaling; bf16 safetensors shards; a generation config), ``OUT/eagle1`` and ``OUT/eagle3``
(EAGLE-3: draft vocabulary 32000, as ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``), for
``spec_bench.py --model-dir OUT/target --eagle-dir OUT/eagle3`` without Hub access. The weights are built
directly in bf16 on ``--device`` (a step's time does not depend on their values). The tokenizer is the zoo's
(Llama-3-style chat template, 10240 tokens; ids above it decode to nothing), so the BOS/EOS ids in the configs
are the zoo tokenizer's (``<|begin_of_text|>`` 0; ``<|eot_id|>`` 4 and ``<|end_of_text|>`` 1), not Llama-3.1's.

OUT is written whole: everything goes to ``.OUT.partial`` beside it, renamed to OUT when complete (with
``make_checkpoint.json``). A killed run leaves OUT empty and the partial folder, which the next run deletes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch

import hybridsd as hsd
from experiments import provenance
from experiments.cli import Parser
from experiments.distributed import write_atomic

BOS, EOT, END_OF_TEXT = 0, 4, 1  # in the zoo tokenizer
LLAMA31_8B = dict(
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5, hidden_act="silu",
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
)


def build(out: Path, layers: int, device: str, shape: dict | None = None) -> dict:
    """Write target and heads under ``out`` (``shape``: config fields replacing Llama-3.1-8B's, for tests);
    returns timings and sizes."""
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    t0 = time.perf_counter()
    cfg = LlamaConfig(**{**LLAMA31_8B, **(shape or {}), "num_hidden_layers": layers}, bos_token_id=BOS,
                      eos_token_id=[EOT, END_OF_TEXT])
    torch.manual_seed(0)
    with torch.device(device):  # built where it will run, in bf16: no fp32 copy on the host
        model = LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16).eval()
    for p in model.parameters():  # a quick, explicit init (random normal; norms stay 1)
        if p.ndim > 1:
            torch.nn.init.normal_(p, std=0.02)
    if device.startswith("cuda"):
        torch.cuda.synchronize()  # host sync: the timing covers the device's work
    built = time.perf_counter() - t0
    target = out / "target"
    model.save_pretrained(target, max_shard_size="5GB")
    GenerationConfig(bos_token_id=BOS, eos_token_id=[EOT, END_OF_TEXT], do_sample=False).save_pretrained(target)
    AutoTokenizer.from_pretrained(hsd.zoo.path("tiny-coder")).save_pretrained(target)
    saved = time.perf_counter() - t0 - built
    for kind in ("eagle1", "eagle3"):
        hsd.EagleHead.from_target(model, kind, dtype=torch.bfloat16).save_pretrained(out / kind)
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "bytes": 2 * params, "build_s": built, "save_s": saved,
            "heads_s": time.perf_counter() - t0 - built - saved, "layers": layers, "device": device}


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args(argv)
    p.check_output(a.out, folder=True)
    if a.out.exists() and any(a.out.iterdir()):
        p.error(f"--out {a.out} exists and is not empty")
    if a.layers < 4:
        p.error(f"--layers must be >= 4 (EAGLE-3 reads layers 2, L/2 and L-3), got {a.layers}")
    p.check_device(a.device)
    out = a.out.resolve()  # a link to a folder: the folder is written
    partial = out.with_name(f".{out.name}.partial")
    if partial.is_symlink() or partial.exists() and not partial.is_dir():  # no run of this tool leaves these
        p.error(f"--out {a.out}: {partial} is in the way (a {'link' if partial.is_symlink() else 'file'}, not the "
                "partial folder a killed run leaves); move it away")
    if partial.exists():  # what a killed run left
        shutil.rmtree(partial)
    info = build(partial, a.layers, a.device)
    info["run_info"] = provenance.run_info(a.device)
    write_atomic(partial / "make_checkpoint.json", json.dumps(info, indent=1))
    os.replace(partial, out)  # over an empty --out folder, if there is one
    print(json.dumps({k: v for k, v in info.items() if k != "run_info"}), file=sys.stderr)


if __name__ == "__main__":
    main()
