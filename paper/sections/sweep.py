"""The CPU sweep of tiny-coder (experiments/results/sweeps/zoo_cpu_fp32/): provenance, corpus AL per data set,
method and k, per-position acceptance, and single against doubled BOS."""

from __future__ import annotations

import json
import math
import re

import matplotlib.pyplot as plt

from experiments import results
from paper.sections.simulation import SIMULATION
from paper.sections.style import VARIANT_COLOR, VARIANT_LABEL, legend_below, savefig
from paper.sections.tex import NUMBERS, RESULTS, commit_of, fmt, num, of_n, signed, table, tex_escape

SWEEP = RESULTS / "sweeps" / "zoo_cpu_fp32"
DATASETS = ("code-edits", "editeval", "mt-bench")
DATASET_TAG = {"code-edits": "Code", "editeval": "EditEval", "mt-bench": "MT"}
DATASET_LABEL = {"code-edits": "code edits", "editeval": "EditEval", "mt-bench": "MT-Bench"}
VARIANTS = ("none", "ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle3", "ngram-eagle tree")
VARIANT_TAG = {"none": "Plain", "ngram": "Ngram", "eagle": "EagleOne", "eagle3": "EagleThree", "ngram-eagle": "Hyb",
               "ngram-eagle3": "HybThree", "ngram-eagle tree": "Tree"}
K_TAG = {"-": "", "3": "Three", "5": "Five", "5/3": "FiveThree"}
K_ORDER = {"-": 0, "3": 1, "5": 2, "5/3": 3}


def load():
    """The CPU sweep's rows (experiments.results.load_runs)."""
    return results.load_runs(str(SWEEP / "*.jsonl"))


def cap_count(df) -> int:
    """Rows whose output reached the length limit."""
    return int((df.tokens >= df.output_len).sum())


def provenance_numbers(df) -> None:
    """Commands, commits, device and sizes of the sweep, for the text."""
    calls = json.loads((SWEEP / "sweep.json").read_text())["calls"]
    cmds = list(dict.fromkeys(re.sub(r" --out-dir \S+", "", c["command"]) for c in calls))  # where it wrote: moot
    num("cpuCmd", "; ".join(f"\\code{{{tex_escape(c)}}}" for c in cmds), "{}")
    num("cpuCalls", len(calls), "{:d}")
    commits = list(dict.fromkeys(commit_of(c["run_info"])[0] for c in calls))
    num("cpuCommits", " and ".join(f"\\texttt{{{c}}}" for c in commits), "{}")
    ri = calls[-1]["run_info"]
    num("cpuDevice", tex_escape(ri["device"]), "{}")
    num("cpuTorch", tex_escape(ri["torch"]), "{}")
    num("cpuDate", ri["date"][:10], "{}")
    num("cpuWorld", calls[-1].get("world_size", 1), "{:d}")
    num("cpuRows", len(df), "{:d}")
    ks = sorted({int(k) for k in df.k if k.isdigit()})
    num("cpuKa", ks[0], "{:d}")
    num("cpuKb", ks[-1], "{:d}")
    first = json.loads(next(SWEEP.glob("*ngram__k*.jsonl")).read_text().splitlines()[0])["config"]
    num("cpuMinN", first["prompt_lookup_min"], "{:d}")
    num("cpuMaxN", first["prompt_lookup_max"], "{:d}")
    num("cpuConfigs", df.config_key.nunique(), "{:d}")
    plain = df[(df.method == "none") & (df.bos_mode == "single")]
    for ds in DATASETS:
        p = plain[plain.dataset == ds]
        tag = DATASET_TAG[ds]
        num(f"cpuN{tag}", len(p), "{:d}")
        num(f"cpuOutLen{tag}", int(p.output_len.iloc[0]), "{:d}")
        num(f"cpuCapped{tag}", cap_count(p), "{:d}")
        num(f"cpuCappedOf{tag}", f"all {len(p)}" if cap_count(p) == len(p) else of_n(cap_count(p), len(p)), "{}")


def al_table(df) -> None:
    """Corpus AL per dataset, method and k (single BOS): table, and a macro per cell."""

    single = df[df.bos_mode == "single"]
    al = results.corpus_al(single, by=["dataset", "variant", "k"]).set_index(["dataset", "variant", "k"])
    mr = results.match_rate(single, by=["dataset", "variant", "k"]).set_index(["dataset", "variant", "k"])
    for (ds, var, k), r in al.iterrows():
        if var == "none":
            continue
        tag = f"{DATASET_TAG[ds]}{VARIANT_TAG[var]}{K_TAG[k]}"
        num(f"cpuAL{tag}", r.seq_al)
        num(f"cpuPrec{tag}", r.precision_al)
    keys = sorted({(v, k) for _, v, k in al.index}, key=lambda vk: (VARIANTS.index(vk[0]), K_ORDER[vk[1]]))
    best = al.reset_index().assign(g=lambda d: d.k.map(lambda k: "3" if k == "3" else "5")).query("variant != 'none'")
    best = best.loc[best.groupby(["dataset", "g"]).seq_al.idxmax(), ["dataset", "variant", "k"]]
    best = set(map(tuple, best.values))
    lines = [r"\begin{tabular}{ll" + "rrr" * len(DATASETS) + "}", r"\toprule",
             " & & " + " & ".join(f"\\multicolumn{{3}}{{c}}{{{DATASET_LABEL[d]} ({NUMBERS['cpuN' + DATASET_TAG[d]]})}}"
                                  for d in DATASETS) + r" \\",
             "".join(f"\\cmidrule(lr){{{3 + 3 * i}-{5 + 3 * i}}}" for i in range(len(DATASETS))),
             "method & $k$ & " + " & ".join(r"seq.\ AL & prec.\ AL & = plain" for _ in DATASETS) + r" \\",
             r"\midrule"]
    for var, k in keys:
        cells = []
        for ds in DATASETS:
            if (ds, var, k) not in al.index:
                cells += ["--", "--", ""]
                continue
            r = al.loc[(ds, var, k)]
            s = fmt(r.seq_al)
            if (ds, var, k) in best:
                s = f"\\textbf{{{s}}}"
            m = mr.loc[(ds, var, k)] if (ds, var, k) in mr.index else None
            cells += [s, fmt(r.precision_al), "" if m is None else f"{int(m.n_same)}/{int(m.n)}"]
        lines.append(f"{VARIANT_LABEL[var]} & {k.replace('-', '--')} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("cpu_al", lines)
    spec = mr.reset_index()
    for ds in DATASETS:
        s = spec[spec.dataset == ds]
        lo, hi = int(s.n_same.min()), int(s.n_same.max())
        num(f"cpuSame{DATASET_TAG[ds]}", (f"{lo}" if lo == hi else f"{lo}--{hi}") + f" of {int(s.n.max())}", "{}")
    num("cpuSameBy", " and ".join(sorted(set(spec.compared_by))), "{}")


def rates_figure(df) -> None:
    """Per-position acceptance at k = 5 per method and dataset (single BOS)."""

    five = df[(df.bos_mode == "single") & (df.k == "5")]
    pr = results.position_rates(five, by=["dataset", "variant"])
    fig, axes = plt.subplots(1, len(DATASETS), figsize=(6.9, 2.15), sharey=True)
    sim = json.loads(SIMULATION.read_text())["config"]
    for ax, ds in zip(axes, DATASETS):
        for var in VARIANTS[1:]:
            p = pr[(pr.dataset == ds) & (pr.variant == var)]
            if len(p):
                ax.plot(p.position, p.rate, marker="o", ms=2.8, color=VARIANT_COLOR[var], label=VARIANT_LABEL[var])
        sr = sim["eagle_rates"][: sim["k_eagle"]]
        ax.plot(range(1, len(sr) + 1), sr, ls="--", marker="s", ms=2.5, color="0.5",
                label="EAGLE rates assumed in the simulation")
        ax.set_title(f"{DATASET_LABEL[ds]} ({NUMBERS['cpuN' + DATASET_TAG[ds]]} prompts)")
        ax.set_xlabel("draft position $i$")
        ax.set_xticks(range(1, 6))
        ax.set_ylim(0, 1.02)
    axes[0].set_ylabel("acceptance rate $r_i$")
    legend_below(fig, axes[0], 4, -0.13)
    fig.tight_layout(w_pad=0.6)
    savefig(fig, "cpu_rates")
    r = results.corpus_al(five, by=["dataset", "variant"]).set_index(["dataset", "variant"])
    for ds in DATASETS:
        for var in ("eagle", "eagle3", "ngram"):
            num(f"cpuRates{DATASET_TAG[ds]}{VARIANT_TAG[var]}",
                ", ".join(f"{r.loc[(ds, var), f'r{i}']:.2f}" for i in range(1, 6)), "{}")


def bos(df) -> None:
    """Single vs doubled BOS for plain, EAGLE-1 and EAGLE-3: table and macros."""

    sub = df[df.variant.isin(["none", "eagle", "eagle3"])]
    c = results.compare_bos(sub, by=["dataset", "variant", "k"]).set_index(["dataset", "variant", "k"])
    same = results.compare_bos(sub, by=["dataset", "variant", "k"], same_output_only=True).set_index(
        ["dataset", "variant", "k"])
    lines = [r"\begin{tabular}{lllrrrrr}", r"\toprule",
             r"data & method & $k$ & same output & AL, single & AL, doubled & $\Delta$ & $\Delta$, same output \\",
             r"\midrule"]
    for i, ds in enumerate(DATASETS):
        if i:
            lines.append(r"\midrule")
        for var in ("none", "eagle", "eagle3"):
            for k in sorted({k for d, v, k in c.index if d == ds and v == var}, key=K_ORDER.get):
                r = c.loc[(ds, var, k)]
                d_same = same.loc[(ds, var, k)].seq_al_doubled - same.loc[(ds, var, k)].seq_al_single \
                    if (ds, var, k) in same.index else math.nan
                diff = r.seq_al_doubled - r.seq_al_single
                lines.append(f"{DATASET_LABEL[ds] if var == 'none' and k == '-' else ''} & {VARIANT_LABEL[var]} & "
                             f"{k.replace('-', '--')} & {int(r.n_same_output)}/{int(r.n)} & {fmt(r.seq_al_single)} & "
                             f"{fmt(r.seq_al_doubled)} & ${signed(diff)}$ & "
                             f"{'--' if not math.isfinite(d_same) else '$' + signed(d_same) + '$'} \\\\")
                if var != "none":
                    tag = f"{DATASET_TAG[ds]}{VARIANT_TAG[var]}{K_TAG[k]}"
                    num(f"bosDiff{tag}", signed(diff), "{}")
                    num(f"bosDiffSame{tag}", signed(d_same) if math.isfinite(d_same) else "--", "{}")
                num(f"bosSame{DATASET_TAG[ds]}{VARIANT_TAG[var]}{K_TAG[k]}",
                    of_n(int(r.n_same_output), int(r.n)), "{}")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("cpu_bos", lines)
    for var in ("eagle", "eagle3"):
        d = c.xs(var, level="variant").xs("code-edits", level="dataset")
        num(f"bosMaxCode{VARIANT_TAG[var]}", float((d.seq_al_doubled - d.seq_al_single).abs().max()))


def make():
    """Every number, table and figure of the CPU sweep's section."""
    df = load()
    provenance_numbers(df)
    al_table(df)
    rates_figure(df)
    bos(df)
