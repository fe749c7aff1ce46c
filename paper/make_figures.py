"""Every figure, table and quoted number of paper/hybridsd.tex, from the results files.

    python paper/make_figures.py            # or: make figures

Reads (nothing else; no number below is typed in by hand):

- experiments/results/simulate_al.json             trace simulation of 3,724 real code edits + model fits
- experiments/results/sweeps/gpu-one-call/*.jsonl  GPU sweep of tiny-coder (the primary AL measurement), sweep.json
- experiments/results/zoo/session2/                EAGLE-3 gate (retrained head vs EAGLE-1) and the GPU test log
- experiments/results/speed_session4/             8B-shape step times against the floor, HF's baselines and the
  EAGLE-1 draft cost (steps_and_baselines.json), compile="auto" (steps_auto.json), the loop overhead timed inside
  the run and tiny-coder end to end (overhead_zoo.json), the GPU test log, and the diagnostic runs before the
  session's fixes (launch.json, bench_linear.json, conditions.json, overhead.json)
- experiments/results/speed_session3/             session 3's steps, loop overhead and zoo, for comparison
- experiments/results/bench_ngram.json             n-gram kernel time per call (CPU)
- experiments/results/sweeps/cpu-small/*.jsonl     the CPU sweep (secondary), if present
- hybridsd/models/tiny-coder/                      training_config.json, heads_training_*.json, tokenizer.json,
                                                   generation_config.json
- code_edits_dev.jsonl of the data directory       the input files, to align the sweep's outputs against them

Writes paper/figures/*.pdf, paper/tables/*.tex and paper/numbers.tex (``\\newcommand`` per quoted number).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

import logging

import matplotlib

matplotlib.use("Agg")
logging.getLogger("fontTools").setLevel(logging.ERROR)
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

PAPER = Path(__file__).resolve().parent
REPO = PAPER.parent
RESULTS = REPO / "experiments" / "results"
MODEL_DIR = REPO / "hybridsd" / "models" / "tiny-coder"
FIG, TAB = PAPER / "figures", PAPER / "tables"

sys.path.insert(0, str(REPO))
from hybridsd import results  # noqa: E402

plt.rcParams.update({
    "font.family": "serif", "font.serif": ["LM Roman 10", "DejaVu Serif"], "mathtext.fontset": "cm",
    "font.size": 8, "axes.titlesize": 8.5, "axes.labelsize": 8, "legend.fontsize": 6.8,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False,
    "pdf.fonttype": 3, "savefig.bbox": "tight", "savefig.pad_inches": 0.02, "lines.linewidth": 1.2,
})
POLICY_LABEL = {"ngram": "n-gram alone", "eagle": "EAGLE alone (modelled)", "prefer-ngram": "hybrid, prefer-ngram",
                "tree": "hybrid, tree (both drafts)"}
MODEL_LABEL = {"harmonic_pr": "harmonic (PR parameters)", "harmonic_fit": "harmonic, $AL_N$ fitted",
               "harmonic_free": "harmonic, both fitted", "resync": "re-sync (edit norm)",
               "resync_runs": "re-sync (measured runs)"}
MODEL_STYLE = {"harmonic_pr": dict(color="#d62728", ls="--"), "harmonic_fit": dict(color="#ff9896", ls=":"),
               "harmonic_free": dict(color="#9467bd", ls="-."), "resync": dict(color="#2ca02c", ls="-"),
               "resync_runs": dict(color="#1f77b4", ls="-")}
METHOD_LABEL = {"none": "plain", "ngram": "n-gram", "eagle": "EAGLE-1", "eagle3": "EAGLE-3",
                "ngram-eagle": "n-gram + EAGLE-1", "ngram-eagle3": "n-gram + EAGLE-3"}
METHOD_COLOR = {"ngram": "#1f77b4", "eagle": "#ff7f0e", "eagle3": "#8c564b", "ngram-eagle": "#2ca02c",
                "ngram-eagle3": "#9467bd", "none": "#7f7f7f"}

NUMBERS: dict[str, str] = {}


# ----------------------------------------------------------------------------- helpers


def num(name: str, value, fmt: str = "{:.2f}") -> str:
    """Record a number for numbers.tex as ``\\name``; returns the formatted text."""
    if not re.fullmatch(r"[A-Za-z]+", name):
        raise ValueError(f"macro name {name!r}: letters only")
    if name in NUMBERS:
        raise ValueError(f"macro {name} defined twice")
    text = value if isinstance(value, str) else fmt.format(value)
    NUMBERS[name] = text
    return text


def tex_escape(s: str) -> str:
    return (s.replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")
            .replace("#", r"\#"))


def commit_of(run_info: dict) -> tuple[str, str]:
    """(short hash, note) from a run_info commit string such as ``"abc... (filled in afterwards ...)"``."""
    raw = str(run_info.get("commit", "unknown"))
    m = re.match(r"([0-9a-f]{7,40})(-dirty)?", raw)
    if not m:
        return "unknown", "commit not recorded"
    note = []
    if m.group(2):
        note.append("with uncommitted changes")
    if "filled in afterwards" in raw:
        note.append("recorded after the run")
    return m.group(1)[:7], ", ".join(note)


def provenance(run_info: dict) -> str:
    """``commit abc1234 (note), NVIDIA H200, torch 2.x, 2026-11-29`` for captions."""
    c, note = commit_of(run_info)
    date = str(run_info.get("date", ""))[:10]
    return (f"commit \\texttt{{{c}}}{' (' + note + ')' if note else ''}, {tex_escape(run_info.get('device', '?'))}, "
            f"torch {tex_escape(str(run_info.get('torch', '?')))}, {date}")


def fmt(v, nd=2) -> str:
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def mae_cell(mae: float, best: float, nd: int) -> str:
    """A table cell for an error, bold when it is the row group's best."""
    text = f"{mae:.{nd}f}"
    return f"\\textbf{{{text}}}" if mae == best else text


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path.relative_to(REPO)}")


def savefig(fig, name: str) -> None:
    FIG.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIG / f"{name}.pdf")
    plt.close(fig)
    print(f"wrote {(FIG / name).relative_to(REPO)}.pdf")


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def bin_labels(bins) -> list[str]:
    out = []
    for i, (a, b) in enumerate(bins):
        out.append(f"[{a:.2f}, {b:.2f}{']' if i == len(bins) - 1 else ')'}")
    return out


# ----------------------------------------------------------------------------- trace simulation


def simulation() -> None:
    d = json.loads((RESULTS / "simulate_al.json").read_text())
    cfg, tabs, fits, errs = d["config"], d["tables"], d["fits"], d["test_errors"]
    allt, test, fitt = tabs["all"], tabs["test"], tabs["fit"]
    bins = d["bins"]
    nb = len(bins)
    ri = d["run_info"]
    c, note = commit_of(ri)
    num("simCommit", c, "{}")
    num("simCommitNote", note or "clean tree", "{}")
    num("simDevice", tex_escape(ri["device"]), "{}")
    num("simDate", ri["date"][:10], "{}")
    num("simProv", provenance(ri), "{}")
    num("simN", f"{sum(allt['n']):,}", "{}")
    num("simNfit", f"{sum(fitt['n']):,}", "{}")
    num("simNtest", f"{sum(test['n']):,}", "{}")
    num("simBins", nb, "{:d}")
    num("simBinWidth", bins[0][1] - bins[0][0], "{:.2f}")
    num("simMaxE", cfg["max_e"], "{:.1f}")
    num("simKngram", cfg["k_ngram"], "{:d}")
    num("simKeagle", cfg["k_eagle"], "{:d}")
    num("simMinN", cfg["min_n"], "{:d}")
    num("simMaxN", cfg["max_n"], "{:d}")
    num("simNboot", cfg["n_boot"], "{:d}")
    num("simSeconds", d["seconds"], "{:.0f}")
    rates = cfg["eagle_rates"][: cfg["k_eagle"]]
    num("simEagleRates", ", ".join(f"{r:.2f}" for r in rates), "{}")
    num("simALeagle", 1 + sum(rates), "{:.2f}")
    num("simEagleALmeasuredLow", allt["eagle_al"][0])
    num("simLevel", cfg["level"], "{}")
    num("simSegLen", d["edit_structure"]["segment_len"], "{:.1f}")
    num("simBaseEdits", d["edit_structure"]["base_edits"], "{:.1f}")
    num("simMeanTokens", float(np.average(allt["mean_tokens"], weights=allt["n"])), "{:.0f}")
    num("simShareLowBin", allt["n"][0] / sum(allt["n"]) * 100, "{:.0f}")

    for key, b in (("Low", 0), ("Mid", 4), ("High", nb - 1)):
        num(f"simBin{key}", bin_labels(bins)[b], "{}")
        num(f"simN{key}", allt["n"][b], "{:d}")
        for p, tag in (("ngram", "Ngram"), ("prefer-ngram", "Prefer"), ("tree", "Tree")):
            num(f"simAL{tag}{key}", allt[f"{p}_al"][b])
        num(f"simPrecNgram{key}", allt["ngram_precision_al"][b])
        num(f"simGainPrefer{key}", allt["prefer-ngram_al"][b] - allt["ngram_al"][b])
        num(f"simGainTree{key}", allt["tree_al"][b] - allt["prefer-ngram_al"][b])

    # errors and parameters
    tags = {"ngram": "Ngram", "prefer-ngram": "Prefer", "tree": "Tree"}
    mtags = {"harmonic_pr": "HarmPR", "harmonic_fit": "HarmFit", "harmonic_free": "HarmFree", "resync": "Resync",
             "resync_runs": "Runs"}
    for p, tag in tags.items():
        for m, mt in mtags.items():
            num(f"mae{tag}{mt}", errs[p][m]["mae"])
            num(f"max{tag}{mt}", errs[p][m]["max_abs"])
        for m in ("resync", "resync_runs"):
            f = fits[p][m]
            mt = mtags[m]
            num(f"d{tag}{mt}", f["params"]["resync"], "{:.1f}")
            num(f"a{tag}{mt}", f["params"]["novel_rate"], "{:.2f}")
            num(f"dCI{tag}{mt}", "[{:.1f}, {:.1f}]".format(*f["ci"]["resync"]), "{}")
            num(f"aCI{tag}{mt}", "[{:.2f}, {:.2f}]".format(*f["ci"]["novel_rate"]), "{}")
        num(f"harmFreeAE{tag}", fits[p]["harmonic_free"]["params"]["al_eagle"])
        num(f"harmFreeAN{tag}", fits[p]["harmonic_free"]["params"]["al_ngram"])
        num(f"harmFitAN{tag}", fits[p]["harmonic_fit"]["params"]["al_ngram"])
    num("harmPRAN", fits["ngram"]["harmonic_pr"]["params"]["al_ngram"])
    num("harmPRAE", fits["prefer-ngram"]["harmonic_pr"]["params"]["al_eagle"])
    bias = np.array(d["test_errors_by_bin"]["ngram"]["harmonic_pr"], dtype=float)
    num("harmPRNgramAllBelow", "all" if np.all(bias < 0) else f"{int(np.sum(bias < 0))} of {bias.size}", "{}")
    allb = np.concatenate([np.array(d["test_errors_by_bin"][p]["harmonic_pr"], dtype=float) for p in tags])
    allb = allb[np.isfinite(allb)]
    num("harmPRAllBelow", "every bin" if np.all(allb < 0) else f"{int(np.sum(allb < 0))} of {allb.size} bins", "{}")

    # --- table: AL per bin (all examples)
    lines = [r"\begin{tabular}{lrrrrrrrr}", r"\toprule",
             r"edit norm $e$ & $n$ & mean $e$ & tokens & n-gram & (prec.) & EAGLE & prefer & tree \\",
             r"\midrule"]
    for b, lab in enumerate(bin_labels(bins)):
        lines.append(f"{{{lab}}} & {allt['n'][b]} & {allt['mean_e'][b]:.3f} & {allt['mean_tokens'][b]:.0f} & "
                     f"{fmt(allt['ngram_al'][b])} & ({fmt(allt['ngram_precision_al'][b])}) & "
                     f"{fmt(allt['eagle_al'][b])} & {fmt(allt['prefer-ngram_al'][b])} & "
                     f"\\textbf{{{fmt(allt['tree_al'][b])}}} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "sim_al.tex", "\n".join(lines) + "\n")

    # --- table: held-out model errors with parameters
    def params_text(p, m):
        f = fits[p][m]
        pr = f["params"]
        if m.startswith("harmonic"):
            parts = []
            for k, sym in (("al_eagle", r"AL_E"), ("al_ngram", r"AL_N")):
                s = f"${sym}={pr[k]:.2f}$"
                if k in f["ci"]:
                    s += " [{:.2f}, {:.2f}]".format(*f["ci"][k])
                parts.append(s)
            return ", ".join(parts)
        s = "$d={:.1f}$ [{:.1f}, {:.1f}], $a={:.2f}$ [{:.2f}, {:.2f}]".format(
            pr["resync"], *f["ci"]["resync"], pr["novel_rate"], *f["ci"]["novel_rate"])
        return s

    lines = [r"\begin{tabular}{llp{6.4cm}rrr}", r"\toprule",
             r"policy & model & parameters (95\% CI) & MAE & RMSE & max \\", r"\midrule"]
    for i, p in enumerate(tags):
        if i:
            lines.append(r"\midrule")
        best = min(errs[p][m]["mae"] for m in mtags)
        for j, m in enumerate(mtags):
            e = errs[p][m]
            mae = mae_cell(e["mae"], best, 3)
            lines.append(f"{POLICY_LABEL[p] if j == 0 else ''} & {MODEL_LABEL[m]} & {params_text(p, m)} & {mae} & "
                         f"{e['rmse']:.3f} & {e['max_abs']:.3f} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "model_errors.tex", "\n".join(lines) + "\n")

    # --- figure: AL vs edit norm, held-out half, with each model's predictions, and residuals
    preds, resid = d["test_predictions"], d["test_errors_by_bin"]
    x = np.array(test["mean_e"], dtype=float)
    fig, axes = plt.subplots(2, 3, figsize=(6.9, 3.9), sharex=True, gridspec_kw={"height_ratios": [2.1, 1]})
    for col, p in enumerate(tags):
        ax, axr = axes[0, col], axes[1, col]
        y = np.array(test[f"{p}_al"], dtype=float)
        for m in mtags:
            ax.plot(x, np.array(preds[p][m], dtype=float), label=MODEL_LABEL[m], **MODEL_STYLE[m])
            axr.plot(x, np.array(resid[p][m], dtype=float), marker=".", ms=3, **MODEL_STYLE[m])
        ax.plot(x, y, "o", color="k", ms=3.2, label="measured (held-out half)", zorder=5)
        if p != "ngram":
            ax.plot(x, test["ngram_al"], "x", color="0.55", ms=3.2, label="n-gram alone, measured")
            ax.axhline(1 + sum(rates), color="0.7", lw=0.8, ls=(0, (1, 2)))
            ax.text(0.0, 1 + sum(rates) - 0.05, "EAGLE alone (modelled)", ha="left", va="top", fontsize=6,
                    color="0.45")
        ax.set_title(POLICY_LABEL[p])
        ax.set_ylim(1.3, 5.8)
        axr.axhline(0, color="0.5", lw=0.6)
        axr.set_ylim(-1.05, 0.7)
        axr.set_xlabel(f"edit norm $e$ ({cfg['level']}-level, bin mean)")
        if col == 0:
            ax.set_ylabel("sequence-normalized AL")
            axr.set_ylabel("predicted $-$ measured")
    h, lab = axes[0, 1].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.075), frameon=False)
    fig.tight_layout(h_pad=0.4, w_pad=0.8)
    savefig(fig, "sim_al_models")

    # --- figure: precision vs sequence-normalized AL
    xa = np.array(allt["mean_e"], dtype=float)
    fig, ax = plt.subplots(figsize=(3.3, 2.2))
    for p, col in (("ngram", "#1f77b4"), ("prefer-ngram", "#2ca02c")):
        ax.plot(xa, allt[f"{p}_precision_al"], ls="--", marker="^", ms=3, color=col,
                label=f"{POLICY_LABEL[p]}: precision AL")
        ax.plot(xa, allt[f"{p}_al"], ls="-", marker="o", ms=3, color=col,
                label=f"{POLICY_LABEL[p]}: seq.-normalized AL")
    ax.set_xlabel(f"edit norm $e$ ({cfg['level']}-level, bin mean)")
    ax.set_ylabel("AL")
    ax.legend(frameon=False, loc="lower left", fontsize=6)
    ax.set_ylim(0.6, 5.7)
    fig.tight_layout()
    savefig(fig, "sim_precision")


# ----------------------------------------------------------------------------- shared for the GPU results

SWEEP_GPU = RESULTS / "sweeps" / "gpu-one-call"
SWEEP_CPU = RESULTS / "sweeps" / "cpu-small"
S4 = RESULTS / "speed_session4"  # session 4: the speed measurements (bench_speed.py, bench_linear.py), see speed()
STEPS, STEPS_AUTO = S4 / "steps_and_baselines.json", S4 / "steps_auto.json"  # the main table; compile="auto"
LOOP = S4 / "overhead_zoo.json"  # the loop overhead (timed inside the run) and tiny-coder end to end
LAUNCH, LINEAR, CONDITIONS, OVERHEAD_FIRST = (S4 / f"{n}.json" for n in ("launch", "bench_linear", "conditions",
                                                                         "overhead"))  # diagnostics before the fixes
S3 = RESULTS / "speed_session3"  # session 3: history
S3_OVERHEAD, S3_ZOO = S3 / "overhead.json", S3 / "zoo.json"
GATE = RESULTS / "zoo" / "session2"
DATASETS = ("code-edits", "editeval", "mt-bench")
DATASET_TAG = {"code-edits": "Code", "editeval": "EditEval", "mt-bench": "MT"}
DATASET_LABEL = {"code-edits": "code edits", "editeval": "EditEval", "mt-bench": "MT-Bench"}
VARIANTS = ("none", "ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle3", "ngram-eagle tree")
VARIANT_TAG = {"none": "Plain", "ngram": "Ngram", "eagle": "EagleOne", "eagle3": "EagleThree", "ngram-eagle": "Hyb",
               "ngram-eagle3": "HybThree", "ngram-eagle tree": "Tree"}
VARIANT_LABEL = {**METHOD_LABEL, "ngram-eagle tree": "n-gram + EAGLE-1, tree"}
VARIANT_COLOR = {**METHOD_COLOR, "ngram-eagle tree": "#d62728"}
K_TAG = {"-": "", "3": "Three", "5": "Five", "5/3": "FiveThree"}
K_ORDER = {"-": 0, "3": 1, "5": 2, "5/3": 3}


def cap_count(df) -> int:
    """Rows whose output reached the length limit."""
    return int((df.tokens >= df.output_len).sum())


def of_n(a: int, b: int) -> str:
    return f"{a} of {b}"


def signed(v: float) -> str:
    """``+0.12`` / ``-0.12`` for math mode (``0.00`` without a sign)."""
    return "0.00" if round(v, 2) == 0 else f"{v:+.2f}"


# ----------------------------------------------------------------------------- tiny-coder and its heads


def tiny_coder() -> None:
    """The zoo model's training facts and its EAGLE heads (EAGLE-3 retrained in session 2)."""
    tc = json.loads((MODEL_DIR / "training_config.json").read_text())
    num("zooParams", tc["parameters"] / 1e6, "{:.1f}")
    num("zooTrainMin", tc["wall_s"] / 60, "{:.1f}")
    num("zooPretrainMB", tc["data"]["pretrain_chars"] / 1e6, "{:.0f}")
    num("zooSyntheticEdits", f"{tc['data']['synthetic_examples']:,}", "{}")
    num("zooRealRows", f"{tc['data']['sft_real_rows']:,}", "{}")
    num("zooEvalRows", tc["data"]["eval_rows"], "{:d}")
    num("zooEvalRepos", ", ".join(r.split("/")[1] for r in tc["data"]["eval_repos"]), "{}")
    num("zooLayers", tc["config"]["num_layers"], "{:d}")
    num("zooHidden", tc["config"]["hidden_size"], "{:d}")
    g = tc["quality_gate"]
    num("zooGateN", g["n"], "{:d}")
    num("zooGateOutVsBefore", g["median_out_vs_before"])
    num("zooGateRefNorm", g["median_ref_norm"])
    num("zooGateStopped", g["stopped_at_eot"], "{:d}")
    old = json.loads((MODEL_DIR / "heads_training_eagle1_eagle3.json").read_text())
    new = json.loads((MODEL_DIR / "heads_training_eagle3.json").read_text())
    agree = lambda h: ", ".join(f"{a:.2f}" for a in h["holdout_agreement"])  # noqa: E731
    one, old3, new3 = old["heads"]["eagle1"], old["heads"]["eagle3"], new["heads"]["eagle3"]
    num("headsOneSteps", one["steps"], "{:d}")
    num("headsOneSeconds", one["train_s"], "{:.0f}")
    num("headsOneAgree", agree(one))
    num("headsPositions", len(one["holdout_agreement"]), "{:d}")
    num("headsOldThreeSteps", old3["steps"], "{:d}")
    num("headsOldThreeAgree", agree(old3))
    num("headsThreeSteps", new3["steps"], "{:d}")
    num("headsThreeSeconds", new3["train_s"], "{:.0f}")
    num("headsThreeAgree", agree(new3))
    num("headsThreeTTT", new["config"]["ttt_steps"], "{:d}")
    num("headsThreeVocab", new["config"]["draft_vocab"], "{:d}")
    num("headsThreeProv", provenance(new["run_info"]), "{}")
    num("headsThreeInit", "from the target's" if new["config"].get("init_from_target") else "from scratch", "{}")


# ----------------------------------------------------------------------------- GPU sweep: measured ALs


def sweep_provenance(df) -> None:
    """Commands, commits, device and sizes of the GPU sweep, for the text."""
    calls = json.loads((SWEEP_GPU / "sweep.json").read_text())["calls"]
    cmds = list(dict.fromkeys(re.sub(r" --out-dir \S+", "", c["command"]) for c in calls))  # where it wrote: moot
    num("gpuCmd", "; ".join(f"\\code{{{tex_escape(c)}}}" for c in cmds), "{}")
    num("gpuCalls", len(calls), "{:d}")
    commits = list(dict.fromkeys(commit_of(c["run_info"])[0] for c in calls))
    num("gpuCommits", " and ".join(f"\\texttt{{{c}}}" for c in commits), "{}")
    ri = calls[-1]["run_info"]
    num("gpuDevice", tex_escape(ri["device"]), "{}")
    num("gpuTorch", tex_escape(ri["torch"]), "{}")
    num("gpuDate", ri["date"][:10], "{}")
    num("gpuWorld", calls[-1].get("world_size", 1), "{:d}")
    num("gpuRows", len(df), "{:d}")
    ks = sorted({int(k) for k in df.k if k.isdigit()})
    num("gpuKa", ks[0], "{:d}")
    num("gpuKb", ks[-1], "{:d}")
    mixed = df[df.k.str.contains("/")]
    num("gpuHybKN", int(mixed.k_ngram.iloc[0]), "{:d}")
    num("gpuHybKE", int(mixed.k_eagle.iloc[0]), "{:d}")
    first = json.loads(next(SWEEP_GPU.glob("*ngram__k*.jsonl")).read_text().splitlines()[0])["config"]
    num("gpuMinN", first["prompt_lookup_min"], "{:d}")
    num("gpuMaxN", first["prompt_lookup_max"], "{:d}")
    num("gpuConfigs", df.config_key.nunique(), "{:d}")
    plain = df[(df.method == "none") & (df.bos_mode == "single")]
    for ds in DATASETS:
        p = plain[plain.dataset == ds]
        tag = DATASET_TAG[ds]
        num(f"gpuN{tag}", len(p), "{:d}")
        num(f"gpuOutLen{tag}", int(p.output_len.iloc[0]), "{:d}")
        num(f"gpuCapped{tag}", cap_count(p), "{:d}")
        num(f"gpuCappedOf{tag}", f"all {len(p)}" if cap_count(p) == len(p) else of_n(cap_count(p), len(p)), "{}")


def sweep_al_table(df) -> None:
    """Corpus AL per dataset, method and k (single BOS): table, and a macro per cell."""

    single = df[df.bos_mode == "single"]
    al = results.corpus_al(single, by=["dataset", "variant", "k"]).set_index(["dataset", "variant", "k"])
    mr = results.match_rate(single, by=["dataset", "variant", "k"]).set_index(["dataset", "variant", "k"])
    for (ds, var, k), r in al.iterrows():
        if var == "none":
            continue
        tag = f"{DATASET_TAG[ds]}{VARIANT_TAG[var]}{K_TAG[k]}"
        num(f"gpuAL{tag}", r.seq_al)
        num(f"gpuPrec{tag}", r.precision_al)
    keys = sorted({(v, k) for _, v, k in al.index}, key=lambda vk: (VARIANTS.index(vk[0]), K_ORDER[vk[1]]))
    best = al.reset_index().assign(g=lambda d: d.k.map(lambda k: "3" if k == "3" else "5")).query("variant != 'none'")
    best = best.loc[best.groupby(["dataset", "g"]).seq_al.idxmax(), ["dataset", "variant", "k"]]
    best = set(map(tuple, best.values))
    lines = [r"\begin{tabular}{ll" + "rrr" * len(DATASETS) + "}", r"\toprule",
             " & & " + " & ".join(f"\\multicolumn{{3}}{{c}}{{{DATASET_LABEL[d]} ({NUMBERS['gpuN' + DATASET_TAG[d]]})}}"
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
    write(TAB / "gpu_al.tex", "\n".join(lines) + "\n")
    spec = mr.reset_index()
    for ds in DATASETS:
        s = spec[spec.dataset == ds]
        lo, hi = int(s.n_same.min()), int(s.n_same.max())
        num(f"gpuSame{DATASET_TAG[ds]}", (f"{lo}" if lo == hi else f"{lo}--{hi}") + f" of {int(s.n.max())}", "{}")
    num("gpuSameBy", " and ".join(sorted(set(spec.compared_by))), "{}")


def sweep_rates_figure(df) -> None:
    """Per-position acceptance at k = 5 per method and dataset (single BOS)."""

    five = df[(df.bos_mode == "single") & (df.k == "5")]
    pr = results.position_rates(five, by=["dataset", "variant"])
    fig, axes = plt.subplots(1, len(DATASETS), figsize=(6.9, 2.15), sharey=True)
    sim = json.loads((RESULTS / "simulate_al.json").read_text())["config"]
    for ax, ds in zip(axes, DATASETS):
        for var in VARIANTS[1:]:
            p = pr[(pr.dataset == ds) & (pr.variant == var)]
            if len(p):
                ax.plot(p.position, p.rate, marker="o", ms=2.8, color=VARIANT_COLOR[var], label=VARIANT_LABEL[var])
        sr = sim["eagle_rates"][: sim["k_eagle"]]
        ax.plot(range(1, len(sr) + 1), sr, ls="--", marker="s", ms=2.5, color="0.5",
                label="EAGLE rates assumed in the simulation")
        ax.set_title(f"{DATASET_LABEL[ds]} ({NUMBERS['gpuN' + DATASET_TAG[ds]]} prompts)")
        ax.set_xlabel("draft position $i$")
        ax.set_xticks(range(1, 6))
        ax.set_ylim(0, 1.02)
    axes[0].set_ylabel("acceptance rate $r_i$")
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.13), frameon=False)
    fig.tight_layout(w_pad=0.6)
    savefig(fig, "gpu_rates")
    r = results.corpus_al(five, by=["dataset", "variant"]).set_index(["dataset", "variant"])
    for ds in DATASETS:
        for var in ("eagle", "eagle3", "ngram"):
            num(f"gpuRates{DATASET_TAG[ds]}{VARIANT_TAG[var]}",
                ", ".join(f"{r.loc[(ds, var), f'r{i}']:.2f}" for i in range(1, 6)), "{}")


def sweep_bos(df) -> None:
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
    write(TAB / "gpu_bos.tex", "\n".join(lines) + "\n")
    for var in ("eagle", "eagle3"):
        d = c.xs(var, level="variant").xs("code-edits", level="dataset")
        num(f"bosMaxCode{VARIANT_TAG[var]}", float((d.seq_al_doubled - d.seq_al_single).abs().max()))


# ----------------------------------------------------------------------------- GPU sweep: theory vs measurement


def _context_runs(source: list[int], output: list[int]) -> list[int]:
    """Runs of ``output`` copyable from the context, greedily: at each position the longest stretch that occurs
    in ``source`` or earlier in ``output`` (overlap allowed, as prompt lookup can copy a repetition it is
    inside); a position with no such stretch is a new token."""
    enc = lambda s: "".join(chr(0x100 + t) for t in s)  # noqa: E731 - tokens as characters: fast substring tests
    src, out = enc(source), enc(output)
    runs, pos = [], 0
    while pos < len(out):
        lo, hi = 0, len(out) - pos
        while lo < hi:  # longest m with out[pos:pos+m] in src or out[:pos+m-1] (monotone in m)
            m = (lo + hi + 1) // 2
            if out[pos:pos + m] in src + "\x00" + out[:pos + m - 1]:
                lo = m
            else:
                hi = m - 1
        if lo:
            runs.append(lo)
            pos += lo
        else:
            pos += 1
    return runs


def theory_inputs(df):
    """Code-edit rows (single BOS) with ``length`` (output tokens), ``runs`` (copied from the input by the
    token-level Levenshtein alignment), ``ctx_runs`` (copyable from input or earlier output) and ``new_share``
    (1 - input-copied tokens / output tokens)."""
    from tokenizers import Tokenizer

    from hybridsd import data
    from hybridsd.edit_distance import copied_runs

    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    eos = set(json.loads((MODEL_DIR / "generation_config.json").read_text())["eos_token_id"])
    rows = df[(df.dataset == "code-edits") & (df.bos_mode == "single")].copy()
    inputs = {e.id: e.input_text for e in data.load_code_edits() if e.id in set(rows.example_id)}
    ids = {i: tok.encode(t, add_special_tokens=False).ids for i, t in inputs.items()}
    cache: dict = {}

    def parse(ex, out):
        key = (ex, tuple(out))
        if key not in cache:
            body = list(out)
            while body and body[-1] in eos:
                body.pop()
            cache[key] = (copied_runs(ids[ex], body), _context_runs(ids[ex], body))
        return cache[key]

    parsed = [parse(e, o) for e, o in zip(rows.example_id, rows.output_tokens)]
    rows["runs"] = [p[0] for p in parsed]
    rows["ctx_runs"] = [p[1] for p in parsed]
    rows["length"] = rows.output_tokens.map(len).astype(float)
    rows["new_share"] = 1 - rows.runs.map(sum) / rows.length
    return rows


THEORY_POLICIES = {"ngram": ("5", None), "ngram-eagle": ("5/3", "eagle"), "ngram-eagle tree": ("5/3", "eagle"),
                   "ngram-eagle3": ("5/3", "eagle3")}
THEORY_MODELS = {"harmonic_pr": "harmonic, parts (PR)", "harmonic_free": "harmonic, both fitted (in-sample)",
                 "resync": "re-sync, edit share", "resync_runs": "re-sync, runs from the input",
                 "resync_ctx": "re-sync, runs from input + output"}
THEORY_STYLE = {**MODEL_STYLE, "resync_ctx": dict(color="#17becf", ls="-", lw=1.6)}


def _bin_groups(part, edges):
    """Bin index per row (into ``edges``) and the non-empty bins in order."""
    from hybridsd.data import bin_index

    idx = bin_index(part.new_share.to_numpy(), edges)
    return idx, sorted(set(idx[idx >= 0]))


def gpu_theory(df) -> None:
    """Measured AL per bin of the outputs' new-token share against each model, parameters from the parts."""
    from hybridsd.analytic import harmonic_al, resync_al, resync_passes
    from hybridsd.fit import fit_harmonic, model_error

    rows = theory_inputs(df)
    edges = list(results.COARSE_BINS)
    sim = json.loads((RESULTS / "simulate_al.json").read_text())
    sfit, struct, k_sim = sim["fits"]["ngram"], sim["edit_structure"], sim["config"]["k_ngram"]
    alone = results.corpus_al(rows, by=["variant", "k"]).set_index(["variant", "k"]).seq_al
    ng = rows[(rows.variant == "ngram") & (rows.k == "5")]
    idx, present = _bin_groups(ng, edges)
    al_n = float(ng.tokens[idx == present[0]].sum() / ng.passes[idx == present[0]].sum())
    plain = rows[rows.variant == "none"]
    num("thN", len(plain), "{:d}")
    num("thNlow", int((_bin_groups(plain, edges)[0] == 0).sum()), "{:d}")
    num("thLowBin", bin_labels(list(zip(edges[:-1], edges[1:])))[0], "{}")
    num("thShareNewMedian", float(np.median(plain.new_share)))
    num("thShareCtxMedian", float(np.median(1 - plain.ctx_runs.map(sum) / plain.length)), "{:.3f}")
    num("thALN", al_n)
    num("thResyncD", sfit["resync"]["params"]["resync"], "{:.1f}")
    num("thResyncA", sfit["resync"]["params"]["novel_rate"])
    num("thRunsD", sfit["resync_runs"]["params"]["resync"], "{:.1f}")
    num("thRunsA", sfit["resync_runs"]["params"]["novel_rate"])
    num("thK", k_sim, "{:d}")
    preds, errs = {}, {}
    for var, (k, head) in THEORY_POLICIES.items():
        part = rows[(rows.variant == var) & (rows.k == k)]
        idx, present = _bin_groups(part, edges)
        tok = np.array([part.tokens[idx == b].sum() for b in present], dtype=float)
        meas = tok / np.array([part.passes[idx == b].sum() for b in present], dtype=float)
        x = np.array([part.new_share[idx == b].mean() for b in present])
        ln = np.array([part.length[idx == b].mean() for b in present])
        n = np.array([(idx == b).sum() for b in present])
        al_e = 1.0 if head is None else float(alone[(head, "3")])
        a_e = sfit["resync"]["params"]["novel_rate"] if head is None else al_e
        a_r = sfit["resync_runs"]["params"]["novel_rate"] if head is None else al_e
        groups = np.searchsorted(present, idx)
        groups[idx < 0] = -1

        def runs_al(col, a):
            passes = resync_passes(list(part[col]), part.length.to_numpy(), k=k_sim,
                                   resync=sfit["resync_runs"]["params"]["resync"], novel_rate=a)
            return np.array([part.length.to_numpy()[groups == g].sum() / passes[groups == g].sum()
                             for g in range(len(present))])

        free = fit_harmonic(x, meas, n_boot=0)
        p = {"harmonic_pr": harmonic_al(x, al_e, al_n), "harmonic_free": free.predict(x),
             "resync": resync_al(x, ln, k=k_sim, segment_len=struct["segment_len"], base_edits=struct["base_edits"],
                                 resync=sfit["resync"]["params"]["resync"], novel_rate=a_e),
             "resync_runs": runs_al("runs", a_r), "resync_ctx": runs_al("ctx_runs", a_r)}
        preds[var] = dict(x=x, n=n, measured=meas, p=p, al_e=al_e, free=free.params)
        errs[var] = {m: model_error(v, meas) for m, v in p.items()}
        tag = VARIANT_TAG[var]
        num(f"thALE{tag}", al_e)
        for m, mt in (("harmonic_pr", "HarmPR"), ("harmonic_free", "HarmFree"), ("resync", "Resync"),
                      ("resync_runs", "Runs"), ("resync_ctx", "Ctx")):
            num(f"thMae{tag}{mt}", errs[var][m]["mae"])
            num(f"thMax{tag}{mt}", errs[var][m]["max_abs"])
        num(f"thFreeAE{tag}", free.params["al_eagle"])
        num(f"thFreeAN{tag}", free.params["al_ngram"])
        num(f"thMeasLow{tag}", meas[0])
        num(f"thMeasHigh{tag}", meas[-1])
    num("thHighBin", bin_labels(list(zip(edges[:-1], edges[1:])))[present[-1]], "{}")
    num("thBins", "[" + ", ".join(f"{b:g}" for b in edges) + "]", "{}")
    input_models = ("harmonic_pr", "resync", "resync_runs")
    for tag, vars_ in (("Ngram", ["ngram"]), ("Hyb", [v for v in THEORY_POLICIES if v != "ngram"])):
        maes = [errs[v][m]["mae"] for v in vars_ for m in input_models]
        num(f"thRange{tag}Input", f"{min(maes):.2f}--{max(maes):.2f}", "{}")
    theory_table(preds, errs)
    theory_figure(preds)


def theory_table(preds, errs) -> None:
    lines = [r"\begin{tabular}{llp{5.6cm}rr}", r"\toprule", r"policy & model & parameters & MAE & max \\",
             r"\midrule"]
    for i, (var, pr) in enumerate(preds.items()):
        if i:
            lines.append(r"\midrule")
        best = min(e["mae"] for e in errs[var].values())
        head = "1" if THEORY_POLICIES[var][1] is None else f"{pr['al_e']:.2f}"
        params = {"harmonic_pr": f"$AL_E={head}$ ({'n-gram alone' if head == '1' else 'measured'}), $AL_N={NUMBERS['thALN']}$ (lowest bin)",
                  "harmonic_free": f"$AL_E={pr['free']['al_eagle']:.2f}$, $AL_N={pr['free']['al_ngram']:.2f}$",
                  "resync": f"$d={NUMBERS['thResyncD']}$, $a="
                            f"{NUMBERS['thResyncA'] if head == '1' else head}$, $b$, $\\ell$ (simulation)",
                  "resync_runs": f"$d={NUMBERS['thRunsD']}$, $a={NUMBERS['thRunsA'] if head == '1' else head}$",
                  "resync_ctx": "as above"}
        for j, (m, label) in enumerate(THEORY_MODELS.items()):
            e = errs[var][m]
            mae = mae_cell(e["mae"], best, 2)
            lines.append(f"{VARIANT_LABEL[var] if j == 0 else ''} & {label} & {params[m]} & {mae} & "
                         f"{e['max_abs']:.2f} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "gpu_theory.tex", "\n".join(lines) + "\n")


def theory_figure(preds) -> None:
    fig, axes = plt.subplots(1, len(preds), figsize=(6.9, 2.35), sharey=True)
    for ax, (var, pr) in zip(axes, preds.items()):
        for m, label in THEORY_MODELS.items():
            ax.plot(pr["x"], pr["p"][m], label=label, **THEORY_STYLE.get(m, {}))
        ax.plot(pr["x"], pr["measured"], "o", color="k", ms=3.2, label="measured (GPU sweep)", zorder=5)
        for x, y, n in zip(pr["x"], pr["measured"], pr["n"]):
            ax.annotate(str(n), (x, y), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=5.5)
        ax.set_title(VARIANT_LABEL[var].replace(", tree", " (tree)").replace(" + ", " +\n")
                     + f", $k$={THEORY_POLICIES[var][0]}", fontsize=7.5)
        ax.set_xlabel("new-token share $e$ (bin mean)")
        ax.set_ylim(0.8, 6.2)
    axes[0].set_ylabel("sequence-normalized AL")
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=3, bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout(w_pad=0.5)
    savefig(fig, "gpu_theory")


# ----------------------------------------------------------------------------- the EAGLE-3 gate


def eagle3_gate() -> None:
    """The retrained EAGLE-3 head against EAGLE-1 on the same held-out edits, k = 3."""

    df = results.load_runs([str(GATE / "gate_eagle1_k3.jsonl"), str(GATE / "gate_eagle3_k3.jsonl")])
    al = results.corpus_al(df, by=["variant"]).set_index("variant")
    num("gateN", int(al.n.max()), "{:d}")
    num("gateOutLen", int(df.output_len.iloc[0]), "{:d}")
    num("gateK", int(df.k_eagle.iloc[0]), "{:d}")
    first = json.loads((GATE / "gate_eagle3_k3.jsonl").read_text().splitlines()[0])
    num("gateProv", provenance(first["run_info"]), "{}")
    num("gateCapped", cap_count(df[df.variant == "eagle"]), "{:d}")
    pair = df.pivot_table(index="example_id", columns="variant", values="output_tokens", aggfunc="first")
    same = sum(a == b for a, b in zip(pair["eagle"], pair["eagle3"]))
    num("gateSameOut", of_n(same, len(pair)), "{}")
    heads = {"eagle": ("EAGLE-1", "headsOneSteps", "headsOneAgree"),
             "eagle3": ("EAGLE-3 (retrained)", "headsThreeSteps", "headsThreeAgree")}
    lines = [r"\begin{tabular}{lrlrrrl}", r"\toprule",
             r"head & training steps & held-out agreement & seq.\ AL & prec.\ AL & TPOT (ms) & $r_1, r_2, r_3$ \\",
             r"\midrule"]
    for var, (label, steps, agree) in heads.items():
        r = al.loc[var]
        rates = ", ".join(f"{r[f'r{i}']:.2f}" for i in (1, 2, 3))
        lines.append(f"{label} & {NUMBERS[steps]} & {{\\scriptsize {NUMBERS[agree]}}} & {fmt(r.seq_al)} & "
                     f"{fmt(r.precision_al)} & {fmt(r.tpot_ms)} & {{\\scriptsize {rates}}} \\\\")
        tag = VARIANT_TAG[var]
        num(f"gateAL{tag}", r.seq_al)
        num(f"gatePrec{tag}", r.precision_al)
        num(f"gateRates{tag}", rates, "{}")
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "gate.tex", "\n".join(lines) + "\n")
    num("gateGain", al.loc["eagle3"].seq_al - al.loc["eagle"].seq_al)
    log = (GATE / "gpu_tests.log").read_text()
    m = re.search(r"(\d+) passed", log)
    num("gpuTestsPassed", m.group(1) if m else "?", "{}")
    num("gpuTestsFailed", "no" if not re.search(r"\d+ failed", log) else re.search(r"(\d+) failed", log).group(1),
        "{}")


# ----------------------------------------------------------------------------- GPU speed

STEP_CONFIGS = [  # (config, label, run): our target's configurations in the tables, in this order
    ("graph", "graph", "steps_and_baselines"), ("graph_compiled", "graph + compile", "steps_and_baselines"),
    ("graph_autotune", "graph + max-autotune", "steps_and_baselines"),
    ("graph_auto", "graph + compile auto$^\\dagger$", "steps_auto")]
STEP_LAYOUTS = (("chain_q1", "1 token"), ("chain_q9", "chain of 9"), ("tree_q9", "tree 1+4+4"))
SPEED_ROWS = [  # (run, stored name, label); a None name is a \midrule
    ("steps_and_baselines", "hf_eager_decode", "HF eager decode, 1 token"),
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
GOAL_ORDER = ("decode", "verify", "draft", "tree")
S3_MAIN, S3_HEAD = "steps_and_baselines", "steps_eagle_profile"  # session 3's main run (GPU 1) and its head's run


def speed_table(sp, s3, runs, runs3) -> None:
    """Every step of session 4's runs at both contexts (ms and x its own run's floor) beside session 3's ms."""
    t, t3 = sp.set_index(["run", "context", "name"]).ms, s3.set_index(["run", "context", "name"]).ms
    lines = [r"\begin{tabular}{l" + "rrr" * len(CTX_TAG) + "}", r"\toprule",
             " & " + " & ".join(f"\\multicolumn{{3}}{{c}}{{context {c}}}" for c in CTX_TAG) + r" \\",
             r"\cmidrule(lr){2-4}\cmidrule(lr){5-7}",
             "step & " + " & ".join(r"ms & $\times$floor & session 3" for _ in CTX_TAG) + r" \\", r"\midrule"]
    for run, label in (("steps_and_baselines", "memory-bandwidth floor"),
                       ("steps_auto", "floor of the compile-auto run$^\\dagger$")):
        s3_floor = fmt(runs3.loc[S3_MAIN, "floor_ms"]) if run == "steps_and_baselines" else "--"
        lines.append(f"{label} & " + " & ".join(f"{runs.loc[run, 'floor_ms']:.2f} & 1.00 & {s3_floor}"
                                                 for _ in CTX_TAG) + r" \\")
    for run, name, label in SPEED_ROWS:
        if name is None:
            lines.append(r"\midrule")
            continue
        cells = []
        for ctx in CTX_TAG:
            ms = float(t.get((run, ctx, name), math.nan))
            old = t3.get((S3_HEAD if name.startswith("eagle") else S3_MAIN, ctx, name), math.nan)
            old = float(old) if run == "steps_and_baselines" else math.nan
            nd = 3 if name.startswith("eagle") else 2
            cells += [fmt(ms, nd), "--" if nd == 3 else fmt(ms / runs.loc[run, "floor_ms"]), fmt(old, nd)]
        lines.append(f"{label} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "speed.tex", "\n".join(lines) + "\n")


def goal_cell(r) -> str:
    """A goal's measured value for the table, $^\times$ when it misses its limit."""
    return "--" if r is None else f"{r.measured:.3f}" + ("" if r.met else r"$^\times$")


def speed_goal_table(goals) -> None:
    """Each goal per configuration (rows, naming the file) and context (columns); the loop overhead per
    configuration and drafter, measured inside the run."""
    lim = results.SPEED_GOALS
    labels = {"decode": f"decode / floor $\\le {lim['decode']:g}$",
              "verify": f"verify ($k{{+}}1\\le9$) / floor $\\le {lim['verify']:g}$",
              "draft": f"EAGLE-1 draft token / decode $\\le {lim['draft']:g}$",
              "tree": f"tree of 9 / chain of 9 $\\le {lim['tree']:g}$",
              "outside": f"outside forward / step $\\le {100 * lim['outside']:g}\\%$"}
    g = {(r.goal, r.config, r.context, r.run): r for r in goals.itertuples() if r.goal != "outside"}
    lines = [r"\begin{tabular}{lllrr}", r"\toprule",
             "goal & configuration & file & " + " & ".join(f"context {c}" for c in CTX_TAG) + r" \\"]
    for goal in GOAL_ORDER:
        lines.append(r"\midrule")
        first = True
        for config, label, run in STEP_CONFIGS:
            cells = [g.get((goal, config, ctx, run)) for ctx in CTX_TAG]
            if not any(cells):
                continue
            lines.append(f"{labels[goal] if first else ''} & {label} & \\code{{{tex_escape(run)}}} & "
                         + " & ".join(map(goal_cell, cells)) + r" \\")
            first = False
    lines.append(r"\midrule")
    out = goals[goals.goal == "outside"]
    for i, r in enumerate(out.itertuples()):
        label = dict((c, lab) for c, lab, _ in STEP_CONFIGS)[r.config]
        cells = [f"${100 * r.measured:.1f}$\\%" + ("" if r.met else r"$^\times$") if ctx == r.context else "--"
                 for ctx in CTX_TAG]
        lines.append(f"{labels['outside'] if i == 0 else ''} & {label}, {tex_escape(r.drafter)} & "
                     f"\\code{{{tex_escape(r.run)}}} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "speed_goals.tex", "\n".join(lines) + "\n")


def loop_table(loop) -> None:
    """The loop overhead per configuration and drafter: the in-run measure (the goal's) beside the older one."""
    label = {c: lab for c, lab, _ in STEP_CONFIGS}
    lines = [r"\begin{tabular}{llrrrrrrr}", r"\toprule",
             r" & & & \multicolumn{5}{c}{timed inside the run} & apart \\", r"\cmidrule(lr){4-8}\cmidrule(lr){9-9}",
             r"configuration & drafter & steps & wall & forward & host in forward & outside & outside share "
             r"& outside share \\", r"\midrule"]
    for r in loop.itertuples():
        apart = "--" if not math.isfinite(r.outside_forward) else f"{100 * r.outside_forward:.1f}\\%"
        lines.append(f"{label[r.config]} & {tex_escape(r.drafter)} & {r.in_loop_steps} & {fmt(r.in_loop_wall_ms)} & "
                     f"{fmt(r.in_loop_forward_ms)} & {fmt(r.in_loop_host_forward_ms, 3)} & "
                     f"{fmt(r.in_loop_outside_ms, 3)} & {100 * r.in_loop_outside_forward:.1f}\\% & {apart} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "loop_overhead.tex", "\n".join(lines) + "\n")


def zoo_speed_table(zoo, zoo3) -> None:
    order = ["plain", "ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle-tree"]
    label = {"plain": "plain", "ngram": "n-gram", "eagle": "EAGLE-1", "eagle3": "EAGLE-3",
             "ngram-eagle": "n-gram + EAGLE-1", "ngram-eagle-tree": "n-gram + EAGLE-1, tree"}
    z, old = zoo.set_index("method"), zoo3.set_index("method").speedup
    lines = [r"\begin{tabular}{lrrrrrrr}", r"\toprule",
             r"method & AL & tokens/s & ms/pass & forward ms/pass & speedup & forward-only & session 3 \\",
             r"\midrule"]
    for m in [m for m in order if m in z.index] + [m for m in z.index if m not in order]:
        r = z.loc[m]
        lines.append(f"{label.get(m, tex_escape(m))} & {fmt(r.seq_normalized_al)} & {r.tokens_per_s:.0f} & "
                     f"{fmt(r.step_ms)} & {fmt(r.forward_ms_per_step)} & {fmt(r.speedup)} & "
                     f"{fmt(r.forward_only_speedup)} & {fmt(old.get(m, math.nan))} \\\\")
        tag = {"plain": "Plain", "ngram": "Ngram", "eagle": "EagleOne", "eagle3": "EagleThree", "ngram-eagle": "Hyb",
               "ngram-eagle-tree": "Tree"}.get(m)
        if tag:
            num(f"zooSpeedup{tag}", r.speedup)
            num(f"zooFwdOnly{tag}", r.forward_only_speedup)
            num(f"zooStep{tag}", r.step_ms)
            num(f"zooTokS{tag}", r.tokens_per_s, "{:.0f}")
            num(f"zooOtherShare{tag}", 100 * r.other_ms_per_step / r.step_ms, "{:.0f}")
            if m in old.index:
                num(f"zooSesThreeSpeedup{tag}", old[m])
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "zoo_speed.tex", "\n".join(lines) + "\n")


def speed_figure(sp, s3) -> None:
    """The main steps as multiples of their run's floor, one panel per context: session 4 as bars (the compile-auto
    run hatched), session 3's main run as dots."""
    rows = [("steps_and_baselines", n) for n in ("hf_static_compiled_q1", "hf_static_compiled_q8")] + [
        (run, f"{c}_{s}") for c, _, run in STEP_CONFIGS for s in ("chain_q1", "chain_q9")]
    label = {(run, n): lab.replace("$^\\dagger$", "") for run, n, lab in SPEED_ROWS if n}
    fig, axes = plt.subplots(1, 2, figsize=(6.6, 2.9), sharey=True)
    ys = np.arange(len(rows))[::-1]
    for ax, ctx in zip(axes, CTX_TAG):
        x = sp[sp.context == ctx].set_index(["run", "name"]).x_floor
        old = s3[(s3.run == S3_MAIN) & (s3.context == ctx)].set_index("name").x_floor
        vals = [x.get(r, np.nan) for r in rows]
        auto = [r[0] == "steps_auto" for r in rows]
        ax.barh(ys, vals, 0.7, color=["#55a868" if a else "#4c72b0" for a in auto], label="session 4 (bars)")
        ax.plot([old.get(n, np.nan) if run == "steps_and_baselines" else np.nan for run, n in rows], ys, "o",
                color="#dd8452", ms=3.5, label="session 3 (dots)")
        ax.axvline(1.0, color="k", lw=0.9, label="floor")
        for g, ls in (("decode", "--"), ("verify", ":")):
            lim = results.SPEED_GOALS[g]
            ax.axvline(lim, color="k", lw=0.8, ls=ls, label=f"{lim:g}$\\times$ floor ({g} goal)")
        ax.set_xlim(0.9, 2.4)
        ax.set_title(f"context {ctx}")
        ax.set_xlabel("step time / floor")
    axes[0].set_yticks(ys)
    axes[0].set_yticklabels([label[r] for r in rows], fontsize=6.2)
    fig.legend(*axes[0].get_legend_handles_labels(), frameon=False, loc="lower center", ncol=5, fontsize=6)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    savefig(fig, "speed")


def speed_step_numbers(sp, s3, runs) -> None:
    """Each quoted step per context (ms, and x its run's floor), ratios to HF's baselines, and session 3's."""
    ms, ms3 = sp.set_index(["run", "context", "name"]).ms, s3.set_index(["run", "context", "name"]).ms
    quoted = [("steps_and_baselines", "hf_eager_decode", "HF"),
              ("steps_and_baselines", "hf_static_compiled_q1", "HFStatic"),
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
                num(f"speed{mt}X{c}", v / runs.loc[run, "floor_ms"])
        main = lambda name: ms[("steps_and_baselines", ctx, name)]  # noqa: E731
        num(f"speedAutotuneVsHFStatic{c}", main("hf_static_compiled_q1") / main("graph_autotune_chain_q1"))
        num(f"speedCompVsHFStaticEight{c}", main("hf_static_compiled_q8") / main("graph_compiled_chain_q9"))
        num(f"speedCompVerifyRatio{c}", main("graph_compiled_chain_q9") / main("graph_compiled_chain_q1"))
        auto = lambda name: ms[("steps_auto", ctx, name)]  # noqa: E731
        num(f"speedAutoVerifyRatio{c}", auto("graph_auto_chain_q9") / auto("graph_auto_chain_q1"))
        num(f"speedAutoGraphOne{c}", auto("graph_chain_q1"))  # the compile-auto run's own uncompiled reference
        # session 3's main run (GPU 1 of a shared host), and its head on GPU 0
        for name, mt in (("graph_chain_q1", "GraphOne"), ("graph_chain_q9", "GraphNine"),
                         ("graph_compiled_chain_q1", "CompOne"), ("graph_compiled_chain_q9", "CompNine"),
                         ("graph_autotune_chain_q1", "AutotuneOne"), ("graph_autotune_chain_q9", "AutotuneNine"),
                         ("graph_compiled_sdpa_chain_q1", "SdpaOne")):
            num(f"sesThree{mt}{c}", float(ms3[(S3_MAIN, ctx, name)]))
        num(f"sesThreeDraftTok{c}", float(ms3[(S3_HEAD, ctx, "eagle1_graph_per_draft_token")]), "{:.3f}")
        num(f"sesThreeSdpaMoreOne{c}", float(ms3[(S3_MAIN, ctx, "graph_compiled_sdpa_chain_q1")]
                                             - ms3[(S3_MAIN, ctx, "graph_compiled_chain_q1")]))
        num(f"sesGraphNineGain{c}", 100 * (1 - main("graph_chain_q9") / ms3[(S3_MAIN, ctx, "graph_chain_q9")]),
            "{:.0f}")
    hfx = [ms[("steps_and_baselines", c, "hf_eager_decode")] / runs.loc["steps_and_baselines", "floor_ms"]
           for c in CTX_TAG]
    num("speedHFXLow", math.floor(min(hfx)), "{:d}")
    num("speedHFXHigh", math.ceil(max(hfx)), "{:d}")
    # the graphed steps of the two runs of the session that both time the uncompiled graph
    both = sp[sp.config == "graph"].pivot_table(index=["context", "name"], columns="run", values="ms").dropna()
    a, b = both["steps_and_baselines"], both["steps_auto"]
    num("speedRunDiff", 100 * float(((a - b).abs() / np.minimum(a, b)).max()), "{:.1f}")
    num("speedFloorDiff", 100 * abs(runs.loc["steps_auto", "floor_ms"] / runs.loc["steps_and_baselines", "floor_ms"]
                                    - 1), "{:.1f}")


def speed_goal_numbers(goals, sp) -> None:
    """The goals' measured values, ranges and verdicts for the text."""
    for g, lim in results.SPEED_GOALS.items():
        num(f"goalLimit{g.capitalize()}", 100 * lim if g == "outside" else lim, "{:g}")
    steps = goals[goals.goal != "outside"]
    runs_of = {c: run for c, _, run in STEP_CONFIGS}
    for r in steps.itertuples():
        if runs_of.get(r.config) == r.run:
            num(f"goal{r.goal.capitalize()}{CONFIG_TAG[r.config]}{CTX_TAG[r.context]}", r.measured,
                "{:.3f}" if r.goal in ("draft", "tree") else "{:.2f}")
    summary = results.speed_goal_summary(goals, by=["goal", "config", "run"]).set_index(["goal", "config", "run"])
    for goal, config in (("decode", "graph_auto"), ("verify", "graph_auto"), ("draft", "graph_autotune"),
                         ("decode", "graph_autotune"), ("verify", "graph_autotune"), ("decode", "graph_compiled"),
                         ("verify", "graph_compiled")):
        r = summary.loc[(goal, config, runs_of[config])]
        name = goal.capitalize() + ("" if config == "graph_auto" or goal == "draft" else CONFIG_TAG[config])
        f = "{:.3f}" if goal == "draft" else "{:.2f}"
        num(f"goalMet{name}", r.verdict, "{}")
        num(f"goalNMet{name}", of_n(int(r.n_met), int(r.n)), "{}")
        num(f"goalLow{name}", r.lowest, f)
        num(f"goalHigh{name}", r.highest, f)
        if r.verdict == "met":
            num(f"goalMargin{name}", 100 * (1 - r.highest / results.SPEED_GOALS[goal]), "{:.1f}")
    # the draft token against the compile-auto decode step of the other run (not a same-run ratio)
    ms = sp.set_index(["run", "context", "name"]).ms
    cross = [ms[("steps_and_baselines", c, "eagle1_graph_per_draft_token")]
             / ms[("steps_auto", c, "graph_auto_chain_q1")] for c in CTX_TAG]
    num("goalDraftCrossLow", min(cross), "{:.3f}")
    num("goalDraftCrossHigh", max(cross), "{:.3f}")
    ours = [c for c, _, _ in STEP_CONFIGS]
    tree = goals[(goals.goal == "tree") & goals.config.isin(ours)]
    num("goalTreeAllLow", tree.measured.min(), "{:.3f}")
    num("goalTreeAllHigh", tree.measured.max(), "{:.3f}")
    num("goalTreeAllN", len(tree), "{:d}")
    num("goalMetTree", "met" if tree.met.all() else "not met everywhere", "{}")
    out = goals[goals.goal == "outside"]
    num("goalOutsideLow", 100 * out.measured.min(), "{:.1f}")
    num("goalOutsideHigh", 100 * out.measured.max(), "{:.1f}")
    num("goalMetOutside", "met" if out.met.all() else f"met in {of_n(int(out.met.sum()), len(out))}", "{}")
    for r in out.itertuples():
        num(f"goalOutside{CONFIG_TAG[r.config]}{'Plain' if r.drafter == 'plain' else 'Replay'}", 100 * r.measured,
            "{:.1f}")


def loop_overhead_numbers(loop, loop3, before) -> None:
    """The loop overhead: session 4's run, the older measure beside it, the first in-run measurement before the
    fixes, and session 3's."""
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
    old = loop3.set_index("drafter")
    num("sesThreeOutsidePlain", 100 * old.loc["plain", "outside_forward"], "{:.1f}")
    num("sesThreeOutsideReplay", 100 * old.loc["replay_k8", "outside_forward"], "{:.1f}")


def speed_diagnostic_numbers(runs) -> None:
    """The diagnostic runs of the session, briefly: KV capacity, graph launch, split-K, the kernel profile."""
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
    lin = results.linear_vs_splitk(results.load_bench_linear(LINEAR))
    num("linCommit", commit_of({"commit": runs.loc[LINEAR.stem, "commit"]})[0], "{}")
    wide = lin.pivot_table(index="shape", columns="rows", values="flinear_us")
    num("linNineOverOneMax", 100 * float((wide[9] / wide[1] - 1).abs().max()), "{:.1f}")
    body = lin[lin["shape"] != "lm_head"]
    num("linBestOverLow", 100 * (body.best_over_flinear.min() - 1), "{:.0f}")
    num("linBestOverHigh", 100 * (body.best_over_flinear.max() - 1), "{:.0f}")
    head = lin[lin["shape"] == "lm_head"]
    num("linHeadBest", 100 * (1 - head.best_over_flinear.min()), "{:.0f}")
    prof = results.load_speed_profile(CONDITIONS)
    cond = results.load_speed(CONDITIONS).set_index(["context", "name"]).ms
    num("profCommit", commit_of({"commit": runs.loc[CONDITIONS.stem, "commit"]})[0], "{}")
    num("profCtx", int(prof.context.iloc[0]), "{:d}")
    floor = runs.loc[CONDITIONS.stem, "floor_ms"]
    for q, tag in ((1, "One"), (9, "Nine")):
        k = prof[prof.block == q].set_index("kind").ms_per_step
        graphed = cond[(int(prof.context.iloc[0]), f"graph_compiled_chain_q{q}")]
        num(f"profKernel{tag}", k.sum())
        num(f"profGraphed{tag}", graphed)
        num(f"profGaps{tag}", graphed - k.sum())
        num(f"profAbove{tag}", graphed - floor)
        num(f"profMatmul{tag}", k.get("matmul", 0.0))
        num(f"profMatmulX{tag}", k.get("matmul", 0.0) / floor)
        num(f"profAttn{tag}", k.get("attention", 0.0))
        num(f"profOther{tag}", k.get("other", 0.0))


def speed() -> None:
    """Session 4's step times (8B shape) with HF's baselines and the EAGLE-1 draft cost, compile="auto", the goals,
    the loop overhead, the zoo end to end, the session's diagnostic runs, and session 3's numbers as history."""
    sp = results.load_speed([STEPS, STEPS_AUTO])
    s3 = results.load_speed([S3 / f"{S3_MAIN}.json", S3 / f"{S3_HEAD}.json"])
    runs = results.load_speed_runs([STEPS, STEPS_AUTO, LOOP, LAUNCH, LINEAR, CONDITIONS, OVERHEAD_FIRST]).set_index(
        "run")
    runs3 = results.load_speed_runs([S3 / f"{S3_MAIN}.json", S3_OVERHEAD]).set_index("run")
    loop = results.load_loop_overhead(LOOP)
    zoo = results.load_zoo_speed(LOOP)
    for path, tag in ((STEPS, "Steps"), (STEPS_AUTO, "Auto"), (LOOP, "Loop")):
        num(f"speedProv{tag}", run_provenance(runs.loc[path.stem]), "{}")
        num(f"speedCommit{tag}", commit_of({"commit": runs.loc[path.stem, "commit"]})[0], "{}")
    for path, tag in ((STEPS, "Steps"), (STEPS_AUTO, "Auto")):
        num(f"speedFloor{tag}", runs.loc[path.stem, "floor_ms"])
        num(f"speedBW{tag}", runs.loc[path.stem, "copy_bandwidth_TBps"])
    num("speedWeightGB", runs.loc[STEPS.stem, "weight_GB"])
    num("sesThreeCommit", commit_of({"commit": runs3.loc[S3_MAIN, "commit"]})[0], "{}")
    catch = re.search(r"catchup(\d+)_", " ".join(sp.name))
    num("speedCatchup", int(catch.group(1)) if catch else 0, "{:d}")
    log = (S4 / "gpu_tests.log").read_text()
    num("speedTestsPassed", re.search(r"(\d+) passed", log).group(1), "{}")
    auto_log = (S4 / "gpu_tests_auto.log").read_text()  # the compiled-graph test again, with compile="auto"
    num("speedTestsAutoPassed", re.search(r"(\d+) passed", auto_log).group(1), "{}")
    num("speedTestsCommit", re.search(r" at ([0-9a-f]{7,40})", log.splitlines()[0]).group(1)[:7], "{}")

    speed_step_numbers(sp, s3, runs)
    goals = results.speed_goals(sp, loop)
    speed_goal_numbers(goals, sp)
    goals3 = results.speed_goals(s3, results.load_loop_overhead(S3_OVERHEAD))
    v3 = results.speed_goal_summary(goals3[goals3.goal.isin(["decode", "verify"])], by=["goal", "config"])
    best = v3[(v3.goal == "verify")].sort_values("n_met").iloc[-1]
    num("sesThreeNMetVerify", of_n(int(best.n_met), int(best.n)), "{}")
    both = v3.pivot_table(index="config", columns="goal", values="verdict", aggfunc="first")
    num("sesThreeBothMet", "one configuration" if ((both == "met").all(axis=1)).any() else "no configuration", "{}")
    loop_overhead_numbers(loop, results.load_loop_overhead(S3_OVERHEAD),
                          results.load_loop_overhead(OVERHEAD_FIRST).assign(commit=runs.loc[OVERHEAD_FIRST.stem,
                                                                                            "commit"]))
    speed_diagnostic_numbers(runs)
    hf = results.load_hf_generate(STEPS).set_index("mode").ms_per_token
    num("hfGenGreedy", hf["greedy"], "{:.1f}")
    num("hfGenLookup", hf["prompt_lookup_10"], "{:.1f}")
    speed_table(sp, s3, runs, runs3)
    speed_goal_table(goals)
    loop_table(loop)
    zoo_speed_table(zoo, results.load_zoo_speed(S3_ZOO))
    fwd = results.load_zoo_forward(LOOP)
    num("zooFwdOne", float(fwd[(fwd.layout == "chain") & (fwd.block == 1)].ms.iloc[0]))
    num("zooSpeedTokens", f"{int(zoo.tokens.max()):,}", "{}")
    speed_figure(sp, s3)

    g = json.loads((RESULTS / "bench_ngram.json").read_text())
    num("ngramProv", provenance(g["run_info"]), "{}")
    res = {(r["stream"], r["context"]): r for r in g["results"]}
    for ctx, tg in ((8192, "A"), (32768, "B")):
        r = res[("iid-random", ctx)]
        num(f"ngramUs{tg}", r["median_us"], "{:.1f}")
        num(f"ngramCtx{tg}", f"{ctx // 1024}k", "{}")
    one = sp[(sp.run == "steps_auto") & (sp.context == 512) & (sp.name == "graph_auto_chain_q1")].ms.iloc[0]
    num("ngramShareOfStep", 100 * res[("iid-random", 8192)]["median_us"] / 1e3 / one, "{:.2f}")


def run_provenance(r) -> str:
    """``provenance`` of a :func:`results.load_speed_runs` row."""
    return provenance({"commit": r.commit, "device": r.device, "torch": r.torch, "date": r.date})



# ----------------------------------------------------------------------------- the CPU sweep (secondary)


def _k_label(cfg: dict) -> str:
    m, k = cfg.get("method", "?"), cfg.get("k", {})
    if m == "none":
        return "--"
    if m.startswith("ngram-"):
        kn, ke = k.get("ngram"), k.get(m.split("-", 1)[1])
        return str(kn) if kn == ke else f"{kn}/{ke}"
    return str(k.get(m, "?"))


def sweeps() -> None:
    """The CPU sweep (``sweeps/cpu-small``, secondary to the GPU sweep), if present: corpus AL per (dataset,
    method, k, BOS mode, output length), and whether each output equals plain decoding's for the same prompt
    and settings (rows store tokens)."""
    root = SWEEP_CPU
    files = sorted(root.rglob("*.jsonl")) if root.is_dir() else []
    rows = []
    for f in files:
        for line in f.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a row still being written
            if "stats" in r and "config" in r:
                rows.append(r)
    if not rows:
        write(TAB / "sweeps.tex", "No CPU sweep results (\\texttt{experiments/results/sweeps/}) were present when "
              "this PDF was built.\n")
        num("sweepRows", 0, "{:d}")
        return

    def variant(c):
        m = c.get("method", "?")
        return m + (" tree" if m.startswith("ngram-") and c.get("hybrid_policy") == "tree" else "")

    def setting(r):
        c = r["config"]
        return (r.get("dataset", c.get("dataset_name")), c.get("bos_mode", "single"), c.get("output_len"),
                c.get("temperature"), c.get("device"), c.get("dtype"))

    plain = {(setting(r), r["example_id"]): r.get("tokens") for r in rows if r["config"].get("method") == "none"}
    cells = defaultdict(list)
    for r in rows:
        c = r["config"]
        cells[(r.get("dataset", c.get("dataset_name")), c.get("bos_mode", "single"), variant(c), _k_label(c),
               c.get("output_len"))].append(r)
    order = {"none": 0, "ngram": 1, "eagle": 2, "eagle3": 3, "ngram-eagle": 4, "ngram-eagle3": 5,
             "ngram-eagle tree": 6, "ngram-eagle3 tree": 7}
    multi_len = len({k[4] for k in cells}) > 1

    def ref(r):  # plain decoding with the same settings; for plain rows, plain with a single BOS
        st_ = setting(r)
        if r["config"].get("method") == "none":
            if st_[1] == "single":
                return None
            st_ = (st_[0], "single") + st_[2:]
        return plain.get((st_, r["example_id"]))

    datasets = list(dict.fromkeys(k[0] for k in sorted(cells, key=lambda k: str(k[0]))))
    rowkeys = sorted({(k[1], k[2], k[3], k[4]) for k in cells},
                     key=lambda k: (k[0] != "single", order.get(k[1], 9), k[2], str(k[3])))
    cols = "lll" + "rrr" * len(datasets)
    lines = [f"\\begin{{tabular}}{{{cols}}}", r"\toprule",
             " & & & " + " & ".join(f"\\multicolumn{{3}}{{c}}{{{tex_escape(str(d))}}}" for d in datasets) + r" \\",
             "".join(f"\\cmidrule(lr){{{4 + 3 * i}-{6 + 3 * i}}}" for i in range(len(datasets))),
             "method & $k$ & BOS & " + " & ".join(r"$n$ & AL & = plain" for _ in datasets) + r" \\", r"\midrule"]
    for bos, var, kl, olen in rowkeys:
        cellsx = []
        for ds in datasets:
            rs = cells.get((ds, bos, var, kl, olen))
            if not rs:
                cellsx += ["", "--", ""]
                continue
            tok = sum(r["stats"]["num_tokens"] for r in rs)
            st = sum(r["stats"]["num_target_steps"] for r in rs)
            same = [r.get("tokens") == ref(r) for r in rs if ref(r) is not None and r.get("tokens") is not None]
            cellsx += [str(len(rs)), fmt(tok / st), f"{sum(same)}/{len(same)}" if same else "--"]
        name = METHOD_LABEL.get(var.split(" ")[0], var) + (" (tree)" if var.endswith("tree") else "")
        if multi_len:
            name += f", $\\le${olen}"
        lines.append(f"{name} & {kl} & {tex_escape(bos)} & " + " & ".join(cellsx) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    infos = [r.get("run_info", {}) for r in rows]
    commits = sorted({commit_of(i)[0] + (" (" + commit_of(i)[1] + ")" if commit_of(i)[1] else "") for i in infos})
    devices = sorted({tex_escape(str(i.get("device", "?"))) for i in infos})
    dates = sorted(str(i.get("date", ""))[:16].replace("T", " ") for i in infos)
    lens = sorted({r["config"].get("output_len") for r in rows})
    num("sweepRows", len(rows), "{:d}")
    commit_text = ", ".join("\\texttt{" + c.split(" ")[0] + "}" + c[len(c.split(" ")[0]):] for c in commits)
    cmds = []
    for sj in sorted(root.rglob("sweep.json")):
        try:
            cmds += [c["command"] for c in json.loads(sj.read_text()).get("calls", []) if "command" in c]
        except (json.JSONDecodeError, OSError, TypeError):
            pass
    cmd_text = "; ".join(f"\\texttt{{{tex_escape(c)}}}" for c in dict.fromkeys(cmds)) or "see the files"
    text = (f"A first CPU sweep of tiny-coder (command {cmd_text}) "
            f"had written {len(rows)} rows when this PDF was built (files under "
            f"\\texttt{{experiments/results/sweeps/cpu-small/}}; commit{'s' if len(commits) > 1 else ''} "
            f"{commit_text}; "
            f"{', '.join(devices)}; {dates[0]} to {dates[-1]} UTC). Outputs are at most "
            f"{', '.join(str(x) for x in lens)} tokens, so these ALs are for short outputs and few prompts, "
            f"and the sweep may have been incomplete. ``= plain'': outputs identical token for token to plain "
            f"decoding's for the same prompt and settings (for plain decoding with a doubled BOS: with a single BOS); BOS ``doubled'' repeats the pitfall of a chat template "
            f"applied before a tokenizer that adds BOS again.\n\n")
    write(TAB / "sweeps.tex", text + "\\begin{center}\\footnotesize\n" + "\n".join(lines) + "\n\\end{center}\n")


# ----------------------------------------------------------------------------- main


def main() -> int:
    simulation()
    tiny_coder()
    sweep = results.load_runs(str(SWEEP_GPU / "*.jsonl"))
    sweep_provenance(sweep)
    sweep_al_table(sweep)
    sweep_rates_figure(sweep)
    sweep_bos(sweep)
    gpu_theory(sweep)
    eagle3_gate()
    speed()
    sweeps()
    out = ["% generated by paper/make_figures.py from experiments/results; do not edit"]
    out += [f"\\newcommand{{\\{k}}}{{{v}}}" for k, v in NUMBERS.items()]
    write(PAPER / "numbers.tex", "\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
