"""Cost of draft trees on the GPU: verifying a 64-row tree against the bandwidth floor, and building an EAGLE-2 tree.

    python -m experiments.bench_tree --out experiments/results/bench_tree.json

A Llama-3.1-8B-shaped model in bf16 with random weights (``speed_steps.llama8b``), our target with CUDA
graphs and ``torch.compile`` (``--compile``, default ``auto``). Timed by CUDA events (medians after
warm-up, ``speed_steps.cuda_median_ms``) at each context:

- ``decode_ms``: one 1-token step; ``chain_q9_ms``: a 9-token chain block; ``tree_q64_ms``: the forward of
  a 64-row tree block (root + 63 nodes of a random tree of depth <= 7) with its tree mask;
- ``tree_verify_step_ms``: generate's whole verify step on a 60-node tree (forward padded to 64 rows, greedy
  verification, the step's host read); random tokens, so no node is accepted;
- ``tree_verify_step_accept_ms``: the same step on the tree whose deepest path carries the target's own greedy
  tokens, so that path is accepted (``accepted_depth`` nodes) and its KV compacted next to the root;
- ``eagle2_build_ms``: an EAGLE-3-shaped head (one 8B-shaped layer, 32k draft vocabulary) catching up on 4
  committed pairs and building a dynamic tree (depth 6, top-k 10, 60 nodes, host read included);
  ``eagle2_build_compiled_ms``: the same with the tree's level step compiled (unless ``--compile none``);
- ratios: each time over the floor at its context (``experiments.bandwidth_floor``: weight matrices and KV bytes over
  the device copy bandwidth) and the builds over a decode step.

The results file is written after each context and again after the compiled build.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig

from experiments import bandwidth_floor, provenance
from experiments.bandwidth_floor import LLAMA8B
from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.speed_steps import copy_bandwidth, cuda_median_ms, llama8b, random_tree
from hybridsd.drafters.base import ProposeRequest
from hybridsd.drafters.eagle_tree import EagleTreeDrafter
from hybridsd.drafters.tree import DraftTree
from hybridsd.eagle.config import config_from_target
from hybridsd.eagle.model import EagleHead
from hybridsd.generate import _tree_block, _verify_step
from hybridsd.target import COMPILE_MODES, Target


@torch.inference_mode()
def target_times(target: Target, ctx: int) -> dict:
    """Step times of decode, a 9-token chain, a 64-row tree forward and generate's verify step on a 60-node tree."""
    dev = target.device
    ids = torch.randint(0, 1000, (ctx,), device=dev)
    target.kv.rewind(0)
    target.forward(ids, 0, last_logits_only=True)
    one = torch.randint(0, 1000, (1,), device=dev)
    chain = torch.randint(0, 1000, (9,), device=dev)
    out = {"decode_ms": cuda_median_ms(lambda: target.forward(one, ctx)),
           "chain_q9_ms": cuda_median_ms(lambda: target.forward(chain, ctx))}
    big = DraftTree(torch.randint(0, 1000, (63,), device=dev), random_tree(63, 7), ("bench",) * 63)
    pos, vis = big.layout(ctx)
    feed = torch.cat([one, big.tokens])
    out["tree_q64_ms"] = cuda_median_ms(lambda: target.forward(feed, ctx, positions=pos, visible=vis))
    tree = DraftTree(torch.randint(0, 1000, (60,), device=dev), random_tree(60, 6, 1), ("bench",) * 60)
    out["tree_verify_step_ms"] = cuda_median_ms(lambda: _verify_step(target, one, ctx, tree, (), 0.0, None))
    tree = accepted_path_tree(target, one, ctx, tree)
    node = _verify_step(target, one, ctx, tree, (), 0.0, None)[0]
    out["tree_verify_step_accept_ms"] = cuda_median_ms(lambda: _verify_step(target, one, ctx, tree, (), 0.0, None))
    out["accepted_depth"] = len(tree.path(node))
    return out


def accepted_path_tree(target: Target, root: torch.Tensor, ctx: int, tree: DraftTree) -> DraftTree:
    """``tree`` with its deepest path's tokens set, level by level, to the target's greedy tokens in the tree block
    generate verifies (so greedy verification accepts that path)."""
    tokens = tree.tokens.clone()  # [n]
    for i in tree.path(int(np.argmax(tree.depths))):
        feed, positions, visible = _tree_block(target, torch.cat([root, tokens]), tree, ctx)
        logits, _ = target.forward(feed, ctx, positions=positions, visible=visible)
        tokens[i] = logits[1 + tree.parents[i]].argmax()  # the parent's row (the root's: row 0)
    return DraftTree(tokens, tree.parents, tree.sources)


@torch.inference_mode()
def eagle2_build_ms(model, ctx: int, depth: int, top_k: int, nodes: int, compile: bool | str = False) -> float:
    """Catch-up on 4 committed pairs and an EAGLE-2 tree by an EAGLE-3-shaped head, in ms."""
    head = EagleHead.from_target(model, kind="eagle3", dtype=next(model.parameters()).dtype)
    dev, dtype = head.fc.weight.device, head.fc.weight.dtype
    d = EagleTreeDrafter(head, depth=depth, top_k=top_k, nodes=nodes, compile=compile)
    F = head.config.feature_size
    tokens = np.zeros(ctx + 8, dtype=np.int64)
    request = ProposeRequest(tokens, depth, dev)
    d.reset(ctx)
    d.observe(torch.randn(ctx, F, device=dev, dtype=dtype), torch.randint(0, 1000, (ctx,), device=dev))
    d.propose(request)
    hidden = torch.randn(4, F, device=dev, dtype=dtype)  # [4, F]
    nxt = torch.randint(0, 1000, (4,), device=dev)  # [4]

    def step():
        d.cache.rewind(ctx)
        d.observe(hidden, nxt)
        tree = d.propose(request)
        assert len(tree) == nodes

    return cuda_median_ms(step)


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("experiments/results/bench_tree.json"))
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--contexts", type=int, nargs="+", default=[2048])
    p.add_argument("--compile", default="auto", choices=("none", *COMPILE_MODES),
                   help='torch.compile mode of the target steps ("none": no compile)')
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--nodes", type=int, default=60)
    a = p.parse_args(argv)
    for flag, values in (("--layers", [a.layers]), ("--contexts", a.contexts), ("--depth", [a.depth]),
                         ("--top-k", [a.top_k]), ("--nodes", [a.nodes])):
        if min(values) < 1:
            p.error(f"{flag} must be >= 1, got {min(values)}")
    if a.nodes > a.top_k + (a.depth - 1) * a.top_k**2:
        p.error(f"--nodes {a.nodes}: more than the {a.top_k + (a.depth - 1) * a.top_k**2} candidates of a tree of "
                f"--depth {a.depth} and --top-k {a.top_k}")
    vocab = config_from_target(LlamaConfig(num_hidden_layers=a.layers, **LLAMA8B), "eagle3").out_vocab_size
    if a.top_k > vocab:
        p.error(f"--top-k {a.top_k}: more than the {vocab} tokens of the head's draft vocabulary")
    p.check_output(a.out)
    if not torch.cuda.is_available():
        p.error("bench_tree needs a CUDA GPU")
    compile = {"none": False, "default": True}.get(a.compile, a.compile)
    model = llama8b(a.layers)
    bw = copy_bandwidth()
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    res = {"run_info": provenance.run_info("cuda"), "args": vars(a) | {"out": str(a.out)},
           "copy_bandwidth_TBps": bw / 1e12, "weight_GB": weight_bytes / 1e9, "layers": a.layers, "contexts": {}}
    res["floors_ms"] = {str(c): bandwidth_floor.step_floor_ms(res, c) for c in a.contexts}  # for the reader
    target = Target(model, max(a.contexts) + 256, cuda_graphs=True, compile=compile)
    for ctx in a.contexts:
        r = target_times(target, ctx)
        r["eagle2_build_ms"] = eagle2_build_ms(model, ctx, a.depth, a.top_k, a.nodes)
        floor_ms = res["floors_ms"][str(ctx)]
        r |= {f"{k[:-3]}_x_floor": v / floor_ms for k, v in list(r.items()) if k.endswith("_ms") and "build" not in k}
        r["eagle2_build_x_decode"] = r["eagle2_build_ms"] / r["decode_ms"]
        res["contexts"][str(ctx)] = r
        print(f"ctx {ctx}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
        write(res, a.out)
    if compile:  # last: a compilation that fails leaves the results above written
        for ctx in a.contexts:
            r = res["contexts"][str(ctx)]
            r["eagle2_build_compiled_ms"] = eagle2_build_ms(model, ctx, a.depth, a.top_k, a.nodes, compile=True)
            r["eagle2_build_compiled_x_decode"] = r["eagle2_build_compiled_ms"] / r["decode_ms"]
            print(f"ctx {ctx}: eagle2_build_compiled_ms {r['eagle2_build_compiled_ms']:.3f} "
                  f"({r['eagle2_build_compiled_x_decode']:.3f} x decode)", flush=True)
        write(res, a.out)


def write(res: dict, out: Path) -> None:
    """``res`` as JSON at ``out``, atomically."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
