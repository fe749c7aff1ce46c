"""Step times of an 8B-shaped target against the memory-bandwidth floor (experiments/results/speed/): the steps
and HF's baselines, their ratios, the EAGLE-1 draft cost, the loop overhead, tiny-coder end to end, the diagnostic
runs (KV capacity, graph launch, split-K matmul, kernel profile) and the n-gram proposer's cost."""

from __future__ import annotations

import json
import math
import re

import matplotlib.pyplot as plt
import numpy as np

from experiments import bandwidth_floor, results
from paper.sections.style import savefig
from paper.sections.tex import RESULTS, commit_of, fmt, num, provenance, table, tex_escape

SPEED = RESULTS / "speed"
STEPS, STEPS_AUTO = SPEED / "steps_and_baselines.json", SPEED / "steps_auto.json"  # the main table; compile="auto"
LOOP = SPEED / "overhead_zoo.json"  # the loop overhead (timed inside the run)
ZOO = SPEED / "zoo_end_to_end.json"  # the installed tiny-coder end to end (bench_speed --zoo-only)
LAUNCH, LINEAR, CONDITIONS, OVERHEAD_FIRST = (SPEED / f"{n}.json" for n in ("launch", "bench_linear", "conditions",
                                                                            "overhead"))  # diagnostic runs
HF_WARM = (SPEED / "hf_eager_warm.json", SPEED / "hf_eager_warm_repeat.json")  # HF's eager decode, timed warm
NGRAM = SPEED / "bench_ngram.json"  # the n-gram proposer per call (CPU)
SWEEP_RANKS = SPEED / "sweep_ranks_one_h200"  # a zoo sweep with ranks sharing one GPU, with and without MPS

STEP_CONFIGS = [  # (config, label, run): our target's configurations in the tables, in this order
    ("graph", "graph", "steps_and_baselines"), ("graph_compiled", "graph + compile", "steps_and_baselines"),
    ("graph_autotune", "graph + max-autotune", "steps_and_baselines"),
    ("graph_auto", "graph + compile auto$^\\dagger$", "steps_auto")]
STEP_LAYOUTS = (("chain_q1", "1 token"), ("chain_q9", "chain of 9"), ("tree_q9", "tree 1+4+4"))
SPEED_ROWS = [  # (run, stored name, label); a None name is a \midrule
    ("hf_eager_warm", "hf_eager_decode", "HF eager decode, 1 token$^\\ddagger$"),
    ("hf_eager_warm_repeat", "hf_eager_decode", "the same, another run$^\\ddagger$"),
    ("steps_and_baselines", "hf_static_compiled_q1", "HF static cache + compile, 1 token"),
    ("steps_and_baselines", "hf_static_compiled_q8", "HF static cache + compile, 8 tokens"),
    *[row for config, label, run in STEP_CONFIGS
      for row in [(None, None, None)] + [(run, f"{config}_{step}", f"{label}: {what}") for step, what in STEP_LAYOUTS]],
    (None, None, None),
    ("steps_and_baselines", "eagle1_graph_catchup4_k1", "EAGLE-1 head, graph: catch-up 4 + 1 token"),
    ("steps_and_baselines", "eagle1_graph_catchup4_k3", "EAGLE-1 head, graph: catch-up 4 + 3 tokens"),
    ("steps_and_baselines", "eagle1_graph_per_draft_token", "EAGLE-1 head, graph: per draft token"),
    ("steps_and_baselines", "eagle1_eager_per_draft_token", "EAGLE-1 head, eager: per draft token"),
]
CTX_TAG = {2048: "A", 512: "B"}  # the contexts in table order, and their macro letters
CONFIG_TAG = {"graph": "Graph", "graph_compiled": "Comp", "graph_autotune": "Autotune", "graph_auto": "Auto"}
RATIO_ORDER = ("decode", "verify", "draft", "tree")


def speed_table(sp, runs) -> None:
    """Every step of the runs at both contexts: ms and x its own run's floor."""
    t = sp.set_index(["run", "context", "name"]).ms
    lines = [r"\begin{tabular}{l" + "rr" * len(CTX_TAG) + "}", r"\toprule",
             " & " + " & ".join(f"\\multicolumn{{2}}{{c}}{{context {c}}}" for c in CTX_TAG) + r" \\",
             r"\cmidrule(lr){2-3}\cmidrule(lr){4-5}",
             "step & " + " & ".join(r"ms & $\times$floor" for _ in CTX_TAG) + r" \\", r"\midrule"]
    for run, label in (("steps_and_baselines", "memory-bandwidth floor"),
                       ("steps_auto", "floor of the compile-auto run$^\\dagger$")):
        lines.append(f"{label} & " + " & ".join(f"{runs.loc[run, 'floors_ms'][c]:.2f} & 1.00" for c in CTX_TAG)
                     + r" \\")
    for run, name, label in SPEED_ROWS:
        if name is None:
            lines.append(r"\midrule")
            continue
        cells = []
        for ctx in CTX_TAG:
            ms = float(t.get((run, ctx, name), math.nan))
            nd = 3 if name.startswith("eagle") else 2
            cells += [fmt(ms, nd), "--" if nd == 3 else fmt(ms / runs.loc[run, "floors_ms"][ctx])]
        lines.append(f"{label} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("speed", lines)


def ratio_cell(r) -> str:
    return "--" if r is None else f"{r.measured:.3f}"


def ratio_table(ratios) -> None:
    """The step-time ratios (``experiments.results.step_ratios``) per configuration (rows, naming the file) and
    context (columns), and the loop's time outside the forward passes per configuration and drafter."""
    labels = {"decode": "decode / floor", "verify": "verify ($k{+}1\\le9$) / floor",
              "draft": "EAGLE-1 draft token / decode", "tree": "tree of 9 / chain of 9",
              "outside": "outside forward / step"}
    g = {(r.measure, r.config, r.context, r.run): r for r in ratios.itertuples() if r.measure != "outside"}
    lines = [r"\begin{tabular}{lllrr}", r"\toprule",
             "ratio & configuration & file & " + " & ".join(f"context {c}" for c in CTX_TAG) + r" \\"]
    for measure in RATIO_ORDER:
        lines.append(r"\midrule")
        first = True
        for config, label, run in STEP_CONFIGS:
            cells = [g.get((measure, config, ctx, run)) for ctx in CTX_TAG]
            if not any(cells):
                continue
            lines.append(f"{labels[measure] if first else ''} & {label} & \\code{{{tex_escape(run)}}} & "
                         + " & ".join(map(ratio_cell, cells)) + r" \\")
            first = False
    lines.append(r"\midrule")
    out = ratios[ratios.measure == "outside"]
    for i, r in enumerate(out.itertuples()):
        label = dict((c, lab) for c, lab, _ in STEP_CONFIGS)[r.config]
        cells = [f"${100 * r.measured:.1f}$\\%" if ctx == r.context else "--" for ctx in CTX_TAG]
        lines.append(f"{labels['outside'] if i == 0 else ''} & {label}, {tex_escape(r.drafter)} & "
                     f"\\code{{{tex_escape(r.run)}}} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("step_ratios", lines)


def loop_table(loop) -> None:
    """The loop overhead per configuration and drafter: timed inside the run, and against forwards timed apart."""
    label = {c: lab for c, lab, _ in STEP_CONFIGS}
    lines = [r"\begin{tabular}{llrrrrrrr}", r"\toprule",
             r" & & & \multicolumn{5}{c}{timed inside the run} & apart \\", r"\cmidrule(lr){4-8}\cmidrule(lr){9-9}",
             (r"configuration & drafter & steps & wall & forward & host in forward & outside & outside share "
             r"& outside share \\"), r"\midrule"]
    for r in loop.itertuples():
        apart = "--" if not math.isfinite(r.outside_forward) else f"{100 * r.outside_forward:.1f}\\%"
        lines.append(f"{label[r.config]} & {tex_escape(r.drafter)} & {r.in_loop_steps} & {fmt(r.in_loop_wall_ms)} & "
                     f"{fmt(r.in_loop_forward_ms)} & {fmt(r.in_loop_host_forward_ms, 3)} & "
                     f"{fmt(r.in_loop_outside_ms, 3)} & {100 * r.in_loop_outside_forward:.1f}\\% & {apart} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("loop_overhead", lines)


def zoo_speed_table(zoo) -> None:
    order = ["plain", "ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle-tree"]
    label = {"plain": "plain", "ngram": "n-gram", "eagle": "EAGLE-1", "eagle3": "EAGLE-3",
             "ngram-eagle": "n-gram + EAGLE-1", "ngram-eagle-tree": "n-gram + EAGLE-1, tree"}
    z = zoo.set_index("method")
    lines = [r"\begin{tabular}{lrrrrrr}", r"\toprule",
             r"method & AL & tokens/s & ms/pass & forward ms/pass & speedup & forward-only \\",
             r"\midrule"]
    for m in [m for m in order if m in z.index] + [m for m in z.index if m not in order]:
        r = z.loc[m]
        lines.append(f"{label.get(m, tex_escape(m))} & {fmt(r.seq_normalized_al)} & {r.tokens_per_s:.0f} & "
                     f"{fmt(r.step_ms)} & {fmt(r.forward_ms_per_step)} & {fmt(r.speedup)} & "
                     f"{fmt(r.forward_only_speedup)} \\\\")
        tag = {"plain": "Plain", "ngram": "Ngram", "eagle": "EagleOne", "eagle3": "EagleThree", "ngram-eagle": "Hyb",
               "ngram-eagle-tree": "Tree"}.get(m)
        if tag:
            num(f"zooSpeedup{tag}", r.speedup)
            num(f"zooFwdOnly{tag}", r.forward_only_speedup)
            num(f"zooStep{tag}", r.step_ms)
            num(f"zooTokS{tag}", r.tokens_per_s, "{:.0f}")
            num(f"zooOtherShare{tag}", 100 * r.other_ms_per_step / r.step_ms, "{:.0f}")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("zoo_speed", lines)


def speed_figure(sp) -> None:
    """The main steps as multiples of their run's floor, one panel per context (the compile-auto run in green)."""
    rows = [("steps_and_baselines", n) for n in ("hf_static_compiled_q1", "hf_static_compiled_q8")] + [
        (run, f"{c}_{s}") for c, _, run in STEP_CONFIGS for s in ("chain_q1", "chain_q9")]
    label = {(run, n): lab.replace("$^\\dagger$", "") for run, n, lab in SPEED_ROWS if n}
    fig, axes = plt.subplots(1, 2, figsize=(6.6, 2.9), sharey=True)
    ys = np.arange(len(rows))[::-1]
    for ax, ctx in zip(axes, CTX_TAG):
        x = sp[sp.context == ctx].set_index(["run", "name"]).x_floor
        vals = [x.get(r, np.nan) for r in rows]
        auto = [r[0] == "steps_auto" for r in rows]
        ax.barh(ys, vals, 0.7, color=["#55a868" if a else "#4c72b0" for a in auto])
        ax.axvline(1.0, color="k", lw=0.9, label="floor")
        ax.set_xlim(0.9, 2.4)
        ax.set_title(f"context {ctx}")
        ax.set_xlabel("step time / floor")
    axes[0].set_yticks(ys)
    axes[0].set_yticklabels([label[r] for r in rows], fontsize=6.2)
    fig.legend(*axes[0].get_legend_handles_labels(), frameon=False, loc="lower center", ncol=3, fontsize=6)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    savefig(fig, "speed")


def speed_step_numbers(sp, runs, warm) -> None:
    """Each quoted step per context (ms, and x its run's floor), ratios to HF's baselines, and HF's eager decode over
    its warm runs (``warm``: their steps)."""
    ms = sp.set_index(["run", "context", "name"]).ms
    quoted = [("steps_and_baselines", "hf_static_compiled_q1", "HFStatic"),
              ("steps_and_baselines", "hf_static_compiled_q8", "HFStaticEight"),
              ("steps_and_baselines", "eagle1_graph_per_draft_token", "DraftTok"),
              ("steps_and_baselines", "eagle1_eager_per_draft_token", "DraftTokEager")] + [
        (run, f"{c}_chain_q{q}", f"{CONFIG_TAG[c]}{'One' if q == 1 else 'Nine'}")
        for c, _, run in STEP_CONFIGS for q in (1, 9)]
    for ctx, c in CTX_TAG.items():
        num(f"speedCtx{c}", ctx, "{:d}")
        for run, name, mt in quoted:
            v = float(ms[(run, ctx, name)])
            draft = name.startswith("eagle")
            num(f"speed{mt}{c}", v, "{:.3f}" if draft else "{:.2f}")
            if not draft:
                num(f"speed{mt}X{c}", v / runs.loc[run, "floors_ms"][ctx])
        main = lambda name: ms[("steps_and_baselines", ctx, name)]  # noqa: E731
        num(f"speedAutotuneVsHFStatic{c}", main("hf_static_compiled_q1") / main("graph_autotune_chain_q1"))
        num(f"speedCompVsHFStaticEight{c}", main("hf_static_compiled_q8") / main("graph_compiled_chain_q9"))
        num(f"speedCompVerifyRatio{c}", main("graph_compiled_chain_q9") / main("graph_compiled_chain_q1"))
        auto = lambda name: ms[("steps_auto", ctx, name)]  # noqa: E731
        num(f"speedAutoVerifyRatio{c}", auto("graph_auto_chain_q9") / auto("graph_auto_chain_q1"))
        num(f"speedAutoGraphOne{c}", auto("graph_chain_q1"))  # the compile-auto run's own uncompiled reference
    hf = warm[warm.name == "hf_eager_decode"]  # its own runs, each against its own floor
    for ctx, c in CTX_TAG.items():
        at = hf[hf.context == ctx].ms
        num(f"speedHF{c}", f"{at.min():.1f}--{at.max():.1f}", "{}")
    hfx = list(hf.x_floor)
    num("speedHFXLow", math.floor(min(hfx)), "{:d}")
    num("speedHFXHigh", math.ceil(max(hfx)), "{:d}")
    num("speedProvHF", run_provenance(runs.loc[HF_WARM[0].stem]), "{}")
    # the graphed steps of the two runs that both time the uncompiled graph
    both = sp[sp.config == "graph"].pivot_table(index=["context", "name"], columns="run", values="ms").dropna()
    a, b = both["steps_and_baselines"], both["steps_auto"]
    num("speedRunDiff", 100 * float(((a - b).abs() / np.minimum(a, b)).max()), "{:.1f}")
    num("speedFloorDiff", 100 * abs(runs.loc["steps_auto", "matrices_floor_ms"]
                                    / runs.loc["steps_and_baselines", "matrices_floor_ms"] - 1), "{:.1f}")


def ratio_numbers(ratios, sp) -> None:
    """The step-time ratios (``experiments.results.step_ratios``: decode and verify over the floor, a draft token
    over a decode step, tree over chain, time outside the forward passes) and their ranges, for the text."""
    steps = ratios[ratios.measure != "outside"]
    runs_of = {c: run for c, _, run in STEP_CONFIGS}
    for r in steps.itertuples():
        if runs_of.get(r.config) == r.run:
            num(f"ratio{r.measure.capitalize()}{CONFIG_TAG[r.config]}{CTX_TAG[r.context]}", r.measured,
                "{:.3f}" if r.measure in ("draft", "tree") else "{:.2f}")
    summary = results.step_ratio_summary(ratios, by=["measure", "config", "run"]).set_index(
        ["measure", "config", "run"])
    for measure, config in (("decode", "graph_auto"), ("verify", "graph_auto"), ("draft", "graph_autotune"),
                         ("decode", "graph_autotune"), ("verify", "graph_autotune"), ("decode", "graph_compiled"),
                         ("verify", "graph_compiled")):
        r = summary.loc[(measure, config, runs_of[config])]
        name = measure.capitalize() + ("" if config == "graph_auto" or measure == "draft" else CONFIG_TAG[config])
        f = "{:.3f}" if measure == "draft" else "{:.2f}"
        num(f"ratioLow{name}", r.lowest, f)
        num(f"ratioHigh{name}", r.highest, f)
    # the draft token against the compile-auto decode step of the other run (not a same-run ratio)
    ms = sp.set_index(["run", "context", "name"]).ms
    cross = [ms[("steps_and_baselines", c, "eagle1_graph_per_draft_token")]
             / ms[("steps_auto", c, "graph_auto_chain_q1")] for c in CTX_TAG]
    num("ratioDraftCrossLow", min(cross), "{:.3f}")
    num("ratioDraftCrossHigh", max(cross), "{:.3f}")
    ours = [c for c, _, _ in STEP_CONFIGS]
    tree = ratios[(ratios.measure == "tree") & ratios.config.isin(ours)]
    num("ratioTreeAllLow", tree.measured.min(), "{:.3f}")
    num("ratioTreeAllHigh", tree.measured.max(), "{:.3f}")
    num("ratioTreeAllN", len(tree), "{:d}")
    out = ratios[ratios.measure == "outside"]
    num("ratioOutsideLow", 100 * out.measured.min(), "{:.1f}")
    num("ratioOutsideHigh", 100 * out.measured.max(), "{:.1f}")
    for r in out.itertuples():
        num(f"ratioOutside{CONFIG_TAG[r.config]}{'Plain' if r.drafter == 'plain' else 'Replay'}", 100 * r.measured,
            "{:.1f}")


def loop_overhead_numbers(loop, before) -> None:
    """The loop overhead: the main run, the measure against forwards timed apart beside it, and the first in-run
    measurement (an earlier commit's run, ``overhead.json``)."""
    o = loop.set_index(["config", "drafter"])
    num("overheadCtx", int(loop.context.iloc[0]), "{:d}")
    num("overheadTokens", int(loop.tokens.max()), "{:d}")
    num("overheadStepsPlain", int(o.loc[("graph", "plain"), "in_loop_steps"]), "{:d}")
    num("overheadStepsReplay", int(o.loc[("graph", "replay_k8"), "in_loop_steps"]), "{:d}")
    num("overheadAcceptedReplay", int(o.loc[("graph", "replay_k8"), "accepted"]), "{:d}")
    num("overheadDraftedReplay", int(o.loc[("graph", "replay_k8"), "drafted"]), "{:d}")
    for (config, drafter), r in o.iterrows():
        tag = CONFIG_TAG[config] + ("Plain" if drafter == "plain" else "Replay")
        num(f"overheadHost{tag}", r.in_loop_host_forward_ms, "{:.3f}")
        num(f"overheadOutsideMs{tag}", r.in_loop_outside_ms, "{:.2f}")
        if math.isfinite(r.outside_forward):
            num(f"overheadApart{tag}", 100 * r.outside_forward, "{:.1f}")
    num("overheadHostLow", loop.in_loop_host_forward_ms.min(), "{:.3f}")
    num("overheadHostHigh", loop.in_loop_host_forward_ms.max(), "{:.3f}")
    first = before.set_index(["config", "drafter"])
    num("overheadFirstCompReplay", 100 * first.loc[("graph_compiled", "replay_k8"), "in_loop_outside_forward"],
        "{:.1f}")
    num("overheadFirstHostGraphPlain", first.loc[("graph", "plain"), "in_loop_host_forward_ms"], "{:.2f}")
    num("overheadFirstCommit", commit_of({"commit": before.commit.iloc[0]})[0], "{}")


def speed_diagnostic_numbers(runs) -> None:
    """The diagnostic runs, briefly: KV capacity, graph launch, split-K matmul, the kernel profile."""
    cap = results.load_capacity_check(LAUNCH)
    mean = cap.pivot_table(index="step", columns="capacity", values="ms")  # mean over the A B A B rounds
    (aligned, unaligned) = sorted(mean.columns)
    num("capAligned", int(aligned), "{:d}")
    num("capUnaligned", int(unaligned), "{:d}")
    num("capCostNine", mean.loc["chain_q9", unaligned] - mean.loc["chain_q9", aligned])
    num("capCostOne", mean.loc["chain_q1", unaligned] - mean.loc["chain_q1", aligned])
    num("capCommit", commit_of({"commit": runs.loc[LAUNCH.stem, "commit"]})[0], "{}")
    sc = results.load_step_conditions(LAUNCH).dropna(subset=["host_ms"])
    num("launchHostLow", sc.host_ms.min(), "{:.2f}")
    num("launchHostHigh", sc.host_ms.max(), "{:.2f}")
    raw = results.load_bench_linear(LINEAR)
    lin = results.linear_vs_splitk(raw)
    sweep = raw[raw.kind == "splitk"]
    num("linConfigs", len(sweep.drop_duplicates(["block_n", "block_k", "splits", "num_warps", "num_stages"])),
        "{:d}")
    num("linTimings", f"{len(raw):,}", "{}")
    num("linRelErrMax", float(raw.rel_err.max()), "{:.4f}")
    num("linFlinearTBLow", float(lin.flinear_TBps.min()), "{:.1f}")
    num("linFlinearTBHigh", float(lin.flinear_TBps.max()), "{:.1f}")
    num("linCommit", commit_of({"commit": runs.loc[LINEAR.stem, "commit"]})[0], "{}")
    wide = lin.pivot_table(index="shape", columns="rows", values="flinear_us")
    num("linNineOverOneMax", 100 * float((wide[9] / wide[1] - 1).abs().max()), "{:.1f}")
    body = lin[lin["shape"] != "lm_head"]
    num("linBestOverLow", 100 * (body.best_over_flinear.min() - 1), "{:.0f}")
    num("linBestOverHigh", 100 * (body.best_over_flinear.max() - 1), "{:.0f}")
    head = lin[lin["shape"] == "lm_head"].set_index("rows")
    num("linHeadBest", 100 * (1 - head.best_over_flinear.min()), "{:.0f}")
    num("linHeadNine", 100 * (1 - head.loc[9, "best_over_flinear"]), "{:.1f}")
    prof = results.load_speed_profile(CONDITIONS)
    cond = results.load_speed(CONDITIONS).set_index(["context", "name"]).ms
    num("profCommit", commit_of({"commit": runs.loc[CONDITIONS.stem, "commit"]})[0], "{}")
    num("profCtx", int(prof.context.iloc[0]), "{:d}")
    floor = runs.loc[CONDITIONS.stem, "floors_ms"][int(prof.context.iloc[0])]  # the step's
    matrices = runs.loc[CONDITIONS.stem, "matrices_floor_ms"]  # the matmul kernels' own
    for q, tag in ((1, "One"), (9, "Nine")):
        k = prof[prof.block == q].set_index("kind").ms_per_step
        graphed = cond[(int(prof.context.iloc[0]), f"graph_compiled_chain_q{q}")]
        num(f"profKernel{tag}", k.sum())
        num(f"profGraphed{tag}", graphed)
        num(f"profGaps{tag}", graphed - k.sum())
        num(f"profAbove{tag}", graphed - floor)
        num(f"profMatmul{tag}", k.get("matmul", 0.0))
        num(f"profMatmulX{tag}", k.get("matmul", 0.0) / matrices)
        num(f"profAttn{tag}", k.get("attention", 0.0))
        num(f"profOther{tag}", k.get("other", 0.0))


def make() -> None:
    """Step times (8B shape) with HF's baselines and the EAGLE-1 draft cost, compile="auto", the step ratios, the loop
    overhead, the zoo end to end, the diagnostic runs and the n-gram proposer's cost."""
    sp = results.load_speed([STEPS, STEPS_AUTO])
    warm = results.load_speed(HF_WARM)
    runs = results.load_speed_runs([STEPS, STEPS_AUTO, *HF_WARM, LOOP, LAUNCH, LINEAR, CONDITIONS,
                                    OVERHEAD_FIRST]).set_index("run")
    loop = results.load_loop_overhead(LOOP)
    zoo = results.load_zoo_speed(ZOO)
    num("speedProvZoo", provenance(json.loads(ZOO.read_text())["run_info"]), "{}")
    for path, tag in ((STEPS, "Steps"), (STEPS_AUTO, "Auto"), (LOOP, "Loop")):
        num(f"speedProv{tag}", run_provenance(runs.loc[path.stem]), "{}")
        num(f"speedCommit{tag}", commit_of({"commit": runs.loc[path.stem, "commit"]})[0], "{}")
    for path, tag in ((STEPS, "Steps"), (STEPS_AUTO, "Auto")):
        for ctx, c in CTX_TAG.items():
            num(f"speedFloor{tag}{c}", runs.loc[path.stem, "floors_ms"][ctx])
        num(f"speedBW{tag}", runs.loc[path.stem, "copy_bandwidth_TBps"])
    num("speedWeightGB", runs.loc[STEPS.stem, "weight_GB"])
    num("speedEmbedGB", bandwidth_floor.embedding_bytes() / 1e9)
    for ctx, c in CTX_TAG.items():
        num(f"speedKVGB{c}", bandwidth_floor.kv_bytes(int(runs.loc[STEPS.stem, "layers"]), ctx) / 1e9, "{:.3f}")
    catch = re.search(r"catchup(\d+)_", " ".join(sp.name))
    num("speedCatchup", int(catch.group(1)) if catch else 0, "{:d}")
    log = (SPEED / "gpu_tests.log").read_text()
    num("speedTestsPassed", re.search(r"(\d+) passed", log).group(1), "{}")
    num("speedTestsCommit", re.search(r" at ([0-9a-f]{7,40})", log.splitlines()[0]).group(1)[:7], "{}")

    speed_step_numbers(sp, runs, warm)
    ratios = results.step_ratios(sp, loop)
    ratio_numbers(ratios, sp)
    loop_overhead_numbers(loop, results.load_loop_overhead(OVERHEAD_FIRST).assign(commit=runs.loc[OVERHEAD_FIRST.stem,
                                                                                            "commit"]))
    speed_diagnostic_numbers(runs)
    hf = results.load_hf_generate(STEPS).set_index("mode").ms_per_token
    num("hfGenGreedy", hf["greedy"], "{:.1f}")
    num("hfGenLookup", hf["prompt_lookup_10"], "{:.1f}")
    speed_table(results.load_speed([STEPS, STEPS_AUTO, *HF_WARM]), runs)
    ratio_table(ratios)
    loop_table(loop)
    zoo_speed_table(zoo)
    fwd = results.load_zoo_forward(ZOO)
    num("zooFwdOne", float(fwd[(fwd.layout == "chain") & (fwd.block == 1)].ms.iloc[0]))
    num("zooSpeedTokens", f"{int(zoo.tokens.max()):,}", "{}")
    speed_figure(sp)
    sweep_ranks_numbers()

    g = json.loads(NGRAM.read_text())
    num("ngramProv", provenance(g["run_info"]), "{}")
    res = {(r["stream"], r["context"]): r for r in g["results"]}
    for ctx, tg in ((8192, "A"), (32768, "B")):
        r = res[("iid-random", ctx)]
        num(f"ngramUs{tg}", r["median_us"], "{:.1f}")
        num(f"ngramCtx{tg}", f"{ctx // 1024}k", "{}")
    one = sp[(sp.run == "steps_auto") & (sp.context == 512) & (sp.name == "graph_auto_chain_q1")].ms.iloc[0]
    num("ngramShareOfStep", 100 * res[("iid-random", 8192)]["median_us"] / 1e3 / one, "{:.2f}")


def sweep_ranks_numbers() -> None:
    """speed/sweep_ranks_one_h200/: one sweep by one process and by ranks sharing one H200 (bench_sweep_ranks), with
    and without MPS: whole-command speedups, each config's, and the rows equal to the one-process run's."""
    for name, tag in (("with_mps", "Mps"), ("without_mps", "NoMps")):
        doc = json.loads((SWEEP_RANKS / f"{name}.json").read_text())
        one, *more = doc["runs"]
        top = max(more, key=lambda r: r["ranks"])
        per_config = [one["configs"][f] / s for f, s in top["configs"].items()]
        num(f"sweepRanks{tag}", top["ranks"], "{:d}")
        num(f"sweepRanks{tag}Whole", top["speedup"], "{:.2f}")
        num(f"sweepRanks{tag}Config", f"{min(per_config):.1f}--{max(per_config):.1f}", "{}")
        num(f"sweepRanks{tag}Prov", provenance(doc["run_info"]), "{}")
        if tag == "Mps":
            num("sweepRanksOneS", one["wall_s"], "{:.0f}")
            num("sweepRanksRows", one["rows"]["rows"], "{:d}")
            num("sweepRanksEqual", "all" if all(r["rows"]["equal"] == r["rows"]["rows"] for r in doc["runs"])
                else "not all", "{}")


def run_provenance(r) -> str:
    """``provenance`` of a :func:`results.load_speed_runs` row."""
    return provenance({"commit": r.commit, "device": r.device, "torch": r.torch, "date": r.date})



# ----------------------------------------------------------------------------- the CPU sweep (secondary)
