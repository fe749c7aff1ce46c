"""Draft trees on the GPU (experiments/results/trees/bench_tree.json): a 64-row tree block and generate's whole
verify step on a 60-node tree against the bandwidth floor, and the cost of building an EAGLE-2 tree."""

from __future__ import annotations

import json

from paper.sections.tex import RESULTS, num, provenance

BENCH_TREE = RESULTS / "trees" / "bench_tree.json"


def make() -> None:
    d = json.loads(BENCH_TREE.read_text())
    a = d["args"]
    num("treeProv", provenance(d["run_info"]), "{}")
    num("treeCompile", a["compile"], "{}")
    num("treeDepth", a["depth"], "{:d}")
    num("treeTopK", a["top_k"], "{:d}")
    num("treeNodes", a["nodes"], "{:d}")
    num("treeFloor", d["floor_ms"])
    (ctx, r), = ((int(c), r) for c, r in d["contexts"].items() if int(c) == max(map(int, d["contexts"])))
    num("treeCtx", ctx, "{:d}")
    for key, tag in (("decode", "Decode"), ("chain_q9", "ChainNine"), ("tree_q64", "TreeBlock"),
                     ("tree_verify_step", "TreeStep")):
        num(f"tree{tag}Ms", r[f"{key}_ms"])
        num(f"tree{tag}X", r[f"{key}_x_floor"])
    num("treeBuildMs", r["eagle2_build_ms"])
    num("treeBuildXDecode", r["eagle2_build_x_decode"])
    num("treeBlockOverChain", r["tree_q64_ms"] / r["chain_q9_ms"])
    num("treeStepOverDecode", r["tree_verify_step_ms"] / r["decode_ms"])
    num("treeStepBuildOverDecode", (r["tree_verify_step_ms"] + r["eagle2_build_ms"]) / r["decode_ms"])
