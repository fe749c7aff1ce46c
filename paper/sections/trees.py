"""Draft trees: on the GPU (experiments/results/trees/bench_tree.json) a 64-row tree block and generate's whole
verify step on a 60-node tree against the bandwidth floor, and the cost of building an EAGLE-2 tree; on the zoo
(trees/zoo_cpu_fp32, trees/tree_al.json) the AL of EAGLE-3's dynamic tree against its chains, the analytic tree AL
against the measured one, and (sweeps/edit_norm_h200_bf16) the hybrid tree per edit-norm bin."""

from __future__ import annotations

import json

from experiments import bandwidth_floor, results
from experiments.results import bin_table
from paper.sections import edit_norm
from paper.sections.style import EAGLE_TREE as TREE
from paper.sections.style import HYBRID_TREE as HYBRID
from paper.sections.tex import RESULTS, num, provenance, table

BENCH_TREE = RESULTS / "trees" / "bench_tree.json"
MODES = RESULTS / "speed" / "trees_exact_kernels.json"  # bench_speed: tree blocks per compile mode, kernels apart
ZOO_RUNS = RESULTS / "trees" / "zoo_cpu_fp32"
TREE_AL = RESULTS / "trees" / "tree_al.json"
# (variant, k label) -> row label of the AL table
ROWS = {("ngram", "5"): "n-gram, $k=5$", ("eagle3", "3"): "EAGLE-3 chain, $k=3$",
        ("eagle3", "6"): "EAGLE-3 chain, $k=6$", (TREE, "3"): "EAGLE-3 dynamic tree",
        (HYBRID, "5/3"): "n-gram branch + EAGLE-3 tree"}


def make() -> None:
    d = json.loads(BENCH_TREE.read_text())
    a = d["args"]
    num("treeProv", provenance(d["run_info"]), "{}")
    num("treeCompile", a["compile"], "{}")
    num("treeDepth", a["depth"], "{:d}")
    num("treeTopK", a["top_k"], "{:d}")
    num("treeNodes", a["nodes"], "{:d}")
    (ctx, r), = ((int(c), r) for c, r in d["contexts"].items() if int(c) == max(map(int, d["contexts"])))
    floor = bandwidth_floor.step_floor_ms(d, ctx)
    num("treeFloor", floor)
    num("treeCtx", ctx, "{:d}")
    for key, tag in (("decode", "Decode"), ("chain_q9", "ChainNine"), ("tree_q64", "TreeBlock"),
                     ("tree_verify_step", "TreeStep")):
        num(f"tree{tag}Ms", r[f"{key}_ms"])
        num(f"tree{tag}X", r[f"{key}_ms"] / floor)
    num("treeBuildMs", r["eagle2_build_ms"])
    num("treeBuildXDecode", r["eagle2_build_x_decode"])
    num("treeBuildCompiledMs", r["eagle2_build_compiled_ms"])
    num("treeBuildCompiledXDecode", r["eagle2_build_compiled_x_decode"])
    num("treeBlockOverChain", r["tree_q64_ms"] / r["chain_q9_ms"])
    num("treeStepOverDecode", r["tree_verify_step_ms"] / r["decode_ms"])
    num("treeStepBuildOverDecode", (r["tree_verify_step_ms"] + r["eagle2_build_ms"]) / r["decode_ms"])
    modes()
    zoo_al()


def modes() -> None:
    """trees_exact_kernels.json: the 64-row tree block per compile mode beside decode and the 9-token chain of
    the same run, and the split-KV attention of the tree block alone in 64- and 128-row tiles."""
    d = json.loads(MODES.read_text())
    r = d["contexts"]["2048"]
    floor = bandwidth_floor.step_floor_ms(d, 2048)
    num("treeModesProv", provenance(d["run_info"]), "{}")
    num("treeModesFloor", floor)
    for key, tag in (("graph_auto_chain_q1", "Decode"), ("graph_auto_chain_q9", "ChainNine"),
                     ("graph_auto_tree_q64", "Auto"), ("graph_autotune_tree_q64", "Tune")):
        num(f"treeModes{tag}Ms", r[key])
        num(f"treeModes{tag}X", r[key] / floor)
    plans = {(p["programs"], p["row_tile"]): p["ms_per_step"] for p in d["attention_plans"] if p["case"] == "tree_q64"}
    num("treeModesAttnSixtyFour", plans[(128, 64)], "{:.3f}")
    num("treeModesAttnWide", plans[(128, 128)], "{:.3f}")


def zoo_al() -> None:
    """The AL table of the zoo's tree runs, tree over chain ratios, the hybrid tree per edit-norm bin, and the
    analytic tree AL against the measured one."""
    runs = results.load_runs(str(ZOO_RUNS / "*.jsonl"))
    first = sorted(ZOO_RUNS.glob("*.jsonl"))[0]
    num("treeZooProv", provenance(json.loads(first.open().readline())["run_info"]), "{}")
    num("treeZooPrompts", int(runs.groupby(["dataset", "variant", "k"]).size().min()), "{:d}")
    num("treeZooTokens", int(runs.output_len.max()), "{:d}")
    al = results.corpus_al(runs, by=["dataset", "variant", "k"]).set_index(["variant", "k", "dataset"]).seq_al
    sums = runs.groupby(["variant", "k", "dataset"])[["tokens", "wall_s"]].sum()
    tps = sums.tokens / sums.wall_s  # generated tokens per second of generate(), CPU fp32
    lines = [r"\begin{tabular}{lrrrr}", r"\toprule",
             r"& \multicolumn{2}{c}{code edits} & \multicolumn{2}{c}{MT-Bench} \\",
             r"drafter & AL & tok/s & AL & tok/s \\", r"\midrule"]
    for (v, k), label in ROWS.items():
        lines.append(f"{label} & {al[v, k, 'code-edits']:.2f} & {tps[v, k, 'code-edits']:.0f} & "
                     f"{al[v, k, 'mt-bench']:.2f} & {tps[v, k, 'mt-bench']:.0f} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("tree_al", lines)
    for ds, tag in (("code-edits", "Code"), ("mt-bench", "Mt")):
        num(f"treeZoo{tag}OverChainThree", al[TREE, "3", ds] / al["eagle3", "3", ds])
        num(f"treeZoo{tag}OverChainSix", al[TREE, "3", ds] / al["eagle3", "6", ds])
        gain = al[TREE, "3", ds] - al["eagle3", "3", ds]  # the tree over the k=3 chain; the k=6 chain's share of it
        num(f"treeZoo{tag}DepthShare", 100 * (al["eagle3", "6", ds] - al["eagle3", "3", ds]) / gain, "{:.0f}")
        num(f"treeZoo{tag}HybOverTree", al[HYBRID, "5/3", ds] / al[TREE, "3", ds])
    bins = edit_norm.load()
    num("treeBinsPrompts", int(bins.groupby("variant").size().min()), "{:d}")
    wins = total = 0
    for column in ("ref_edit_norm", "output_edit_norm"):
        cells = {}
        for r in bin_table(bins, edit_norm.EDGES, column, n_boot=0):
            cells.setdefault(r["bin"], {})[r["variant"]] = r["seq_al"]
        for c in cells.values():
            total += 1
            wins += c[HYBRID] >= max(c["ngram"], c[TREE])
    num("treeBinsWins", wins, "{:d}")
    num("treeBinsTotal", total, "{:d}")
    ta = json.loads(TREE_AL.read_text())
    num("treeAlSteps", ta["steps"], "{:d}")
    num("treeAlMeasured", ta["measured_al"])
    num("treeAlPredicted", ta["predicted_al"])
    num("treeAlErr", 100 * (ta["predicted_al"] / ta["measured_al"] - 1), "{:+.1f}")
