"""Analytic tree AL against measurement: per-node acceptance fitted on some verify steps of a tree run predicts
the accepted length of the others through ``analytic.tree_al``.

    python -m experiments.tree_al --method eagle3 --tree dynamic --num-prompts 8 --output-len 128 \
        --out experiments/results/trees/tree_al.json

The run is spec_bench's (same model, head (``--eagle-dir`` as spec_bench's), prompts and drafter for the same
options); every verify step's tree and accepted path are recorded. A node's acceptance, given that its parent was
accepted and its earlier siblings were not, is estimated per (depth, rank among its siblings) on all steps but one
fold (steps ``i % folds != f``) and turned into each held-out step's expected tokens per pass by
``analytic.tree_al(parents, rates, sequential=True)``; the mean of those predictions is compared with the measured
mean ``1 + accepted`` of the same steps. A (depth, rank) never tried in the fitting steps gets rate 0 (counted in
``unseen_nodes``).

In a notebook: ``steps = record(cfg)`` then ``compare(steps)`` (``steps``: ``(parents, accepted path)`` pairs).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from experiments import provenance, spec_bench
from experiments.cli import Parser
from experiments.distributed import write_atomic
from hybridsd import analytic, prompts
from hybridsd.drafters.base import Drafter
from hybridsd.drafters.tree import DraftTree, structure

Step = tuple[tuple[int, ...], list[int]]  # (parents, accepted path: node indices from the root's child down)


def sibling_ranks(parents: Sequence[int]) -> np.ndarray:
    """``[n]`` rank of each node among its parent's children (0 for the first)."""
    seen: dict[int, int] = {}
    out = np.zeros(len(parents), dtype=np.int64)
    for i, p in enumerate(parents):
        out[i] = seen.get(p, 0)
        seen[p] = out[i] + 1
    return out


def _keys(parents: Sequence[int]) -> list[tuple[int, int]]:
    return list(zip(structure(parents)[0].tolist(), sibling_ranks(parents).tolist()))


def acceptance_table(steps: Sequence[Step]) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(depth, rank): (passed, tried)}``: a node is tried when its parent is the root or accepted and no earlier
    sibling was accepted; it passed when it is on the accepted path."""
    table: dict[tuple[int, int], list[int]] = {}
    for parents, path in steps:
        on = set(path)
        done: set[int] = set()  # parents whose accepted child came already
        for i, (key, p) in enumerate(zip(_keys(parents), parents)):
            if (p >= 0 and p not in on) or p in done:
                continue
            cell = table.setdefault(key, [0, 0])
            cell[1] += 1
            if i in on:
                cell[0] += 1
                done.add(p)
    return {k: (v[0], v[1]) for k, v in table.items()}


def predicted_al(parents: Sequence[int], table: dict[tuple[int, int], tuple[int, int]]) -> tuple[float, int]:
    """Expected tokens per pass of a tree from ``table`` (:func:`acceptance_table`) and the nodes it has no rate for."""
    rates, unseen = [], 0
    for key in _keys(parents):
        passed, tried = table.get(key, (0, 0))
        unseen += tried == 0
        rates.append(passed / tried if tried else 0.0)
    return analytic.tree_al(parents, rates, sequential=True), unseen


def compare(steps: Sequence[Step], folds: int = 2) -> dict:
    """Mean measured ``1 + accepted`` against the mean cross-fitted :func:`predicted_al` over ``steps``; per fold and
    all together, and the in-sample prediction (table fitted on every step) beside them."""
    if folds < 2 or len(steps) < folds:
        raise ValueError(f"compare needs folds >= 2 and at least that many steps, got {folds} folds, "
                         f"{len(steps)} steps")
    measured = np.array([1 + len(path) for _, path in steps], dtype=float)
    predicted = np.zeros(len(steps))
    unseen = 0
    for f in range(folds):
        table = acceptance_table([s for i, s in enumerate(steps) if i % folds != f])
        for i in range(f, len(steps), folds):
            predicted[i], u = predicted_al(steps[i][0], table)
            unseen += u
    full = acceptance_table(steps)
    in_sample = np.array([predicted_al(parents, full)[0] for parents, _ in steps])
    return {"steps": len(steps), "folds": folds, "measured_al": float(measured.mean()),
            "predicted_al": float(predicted.mean()), "in_sample_predicted_al": float(in_sample.mean()),
            "per_fold": [{"measured_al": float(measured[f::folds].mean()),
                          "predicted_al": float(predicted[f::folds].mean())} for f in range(folds)],
            "nodes": int(sum(len(p) for p, _ in steps)), "unseen_nodes": int(unseen),
            "rates": {f"{d},{r}": [p, t] for (d, r), (p, t) in sorted(full.items())}}


def accepted_path(tokens: Sequence[int], parents: Sequence[int], accepted: Sequence[int]) -> list[int]:
    """Nodes of the tree (``tokens``, ``parents``) whose path from the root carries ``accepted`` (first found)."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)

    def walk(node: int, depth: int) -> list[int] | None:
        if depth == len(accepted):
            return []
        for c in children.get(node, []):
            if tokens[c] == accepted[depth] and (rest := walk(c, depth + 1)) is not None:
                return [c] + rest
        return None

    path = walk(-1, 0)
    if path is None:
        raise ValueError(f"no path of the tree carries the accepted tokens {list(accepted)}")
    return path


class Recorder(Drafter):
    """Wraps a drafter: proposes its drafts as one tree (cut at the budget, as ``generate`` does) and keeps each
    tree's tokens and parents on the host."""

    def __init__(self, inner: Drafter) -> None:
        self.inner, self.name, self.hidden_layers = inner, inner.name, inner.hidden_layers
        self.trees: list[tuple[list[int], tuple[int, ...]]] = []

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    def check_target(self, model) -> None:
        self.inner.check_target(model)

    def reset(self, prompt_len: int) -> None:
        self.inner.reset(prompt_len)

    def observe(self, hidden, next_tokens) -> None:
        self.inner.observe(hidden, next_tokens)

    def propose(self, request):
        tree = DraftTree.join(self.inner.propose(request))
        tree = tree.clip(request.budget) if tree is not None else None
        if tree is None:
            return []
        self.trees.append((tree.tokens.tolist(), tree.parents))  # host sync: the analysis reads every tree
        return tree


def steps_of(result, trees: Sequence[tuple[list[int], tuple[int, ...]]]) -> list[Step]:
    """``(parents, accepted path)`` of every step of ``result`` (a ``GenerateResult``) that verified a tree, from the
    trees a :class:`Recorder` kept during that run (in order)."""
    out, pos, queue = [], 1, iter(trees)  # pos: output index of the step's first token (after the prefill's)
    for rec in result.stats.trace:
        if rec.tree_tokens:
            tokens, parents = next(queue)
            out.append((parents, accepted_path(tokens, parents, result.tokens[pos : pos + rec.accepted])))
        pos += rec.emitted
    return out


def record(cfg: spec_bench.BenchConfig, data_dir: str | None = None, num_prompts: int | None = None,
           examples: list | None = None) -> list[Step]:
    """Run spec_bench's model, drafter and prompts for ``cfg`` (``examples``: those prompts, already loaded):
    every tree step's ``(parents, accepted path)``."""
    import hybridsd as hsd

    if examples is None:
        examples = spec_bench.load_examples(cfg, data_dir, num_prompts)
    loaded = spec_bench.load_target(cfg, cfg.device)
    model = loaded.model
    drafter = Recorder(spec_bench.make_drafter(cfg, spec_bench.load_heads(cfg, model)))
    steps: list[Step] = []
    for ex in examples:
        ids = prompts.build_prompt_ids(loaded.tokenizer, ex.prompt, chat=cfg.chat_template, bos_mode=cfg.bos_mode)
        n_out = min(cfg.output_len, model.config.max_position_embeddings - len(ids))
        if n_out < 1:
            continue
        drafter.trees = []
        res = hsd.generate(model, ids, drafter=drafter, max_new_tokens=n_out, temperature=cfg.temperature,
                           eos_token_id=loaded.eos_ids, seed=cfg.seed,
                           cuda_graphs=None if cfg.cuda_graphs else False,  # None: graphs on a CUDA device only
                           on_double_bos="ignore")
        steps += steps_of(res, drafter.trees)
    return steps


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-coder")
    p.add_argument("--eagle-dir", default=None, help="EAGLE head (folder or Hub id) of --method's kind; default: the "
                   "zoo's heads beside a zoo model")
    p.add_argument("--method", default="eagle3", choices=("eagle", "eagle3", "ngram-eagle", "ngram-eagle3"))
    p.add_argument("--tree", default="dynamic", choices=("dynamic", "static"))
    p.add_argument("--tree-paths", type=spec_bench.tree_paths, default=None,
                   help="static tree: vLLM's speculative_token_tree")
    p.add_argument("--tree-depth", type=int, default=6)
    p.add_argument("--tree-top-k", type=int, default=10)
    p.add_argument("--tree-nodes", type=int, default=60)
    p.add_argument("--hybrid-policy", default="tree")
    p.add_argument("--dataset-name", default="code-edits", choices=("code-edits", "editeval", "mt-bench"))
    p.add_argument("--data-dir", default=None)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--folds", type=int, default=2)
    p.add_argument("--device", default=spec_bench.BenchConfig.device)
    p.add_argument("--out", type=Path, default=Path("experiments/results/trees/tree_al.json"))
    a = p.parse_args(argv)
    p.check_output(a.out)
    if a.num_prompts < 1:
        p.error(f"--num-prompts must be >= 1, got {a.num_prompts}")
    if a.folds < 2:
        p.error(f"--folds must be >= 2, got {a.folds}")
    p.check_device(a.device)
    try:
        cfg = spec_bench.BenchConfig(method=a.method, model=a.model, dataset_name=a.dataset_name,
                                     output_len=a.output_len, device=a.device, tree=a.tree, tree_depth=a.tree_depth,
                                     tree_top_k=a.tree_top_k, tree_nodes=a.tree_nodes, hybrid_policy=a.hybrid_policy,
                                     tree_paths=a.tree_paths, eagle_dir=a.eagle_dir)
    except ValueError as e:
        p.error(str(e))
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()  # no "Retrying in Ns" lines before an unreachable Hub id's one-line error
    try:
        spec_bench.preflight(cfg)  # the model's weight files and config, the head's config and weights' shapes
    except (ValueError, FileNotFoundError) as e:  # spec_bench's messages name its flag --model-dir
        p.error(str(e).replace("--model-dir", "--model"))
    try:
        examples = spec_bench.load_examples(cfg, a.data_dir, a.num_prompts)
    except (ValueError, FileNotFoundError) as e:
        p.error(f"--data-dir {a.data_dir}: {e}" if a.data_dir else str(e))
    try:
        steps = record(cfg, examples=examples)
    except spec_bench.WeightsMismatch as e:  # weights, checked once they are read
        p.error(str(e).replace("--model-dir", "--model"))
    if len(steps) < a.folds:  # known only after the run: the tree steps its prompts took
        p.error(f"the run took {len(steps)} tree steps, fewer than --folds {a.folds}: give more --num-prompts or "
                "--output-len")
    res = {"run_info": provenance.run_info(cfg.device), "args": vars(a) | {"out": str(a.out)}} | compare(steps, a.folds)
    print(f"tree_al: {res['steps']} steps, measured AL {res['measured_al']:.3f}, predicted {res['predicted_al']:.3f} "
          f"(in-sample {res['in_sample_predicted_al']:.3f})", file=sys.stderr)
    write_atomic(a.out, json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
