"""Every figure, table and quoted number of paper/hybridsd.tex, from the results files.

    python paper/make_figures.py            # or: make figures

Reads (nothing else; no number below is typed in by hand):

- experiments/results/simulate_al.json          trace simulation of 3,724 real code edits + model fits
- experiments/results/bench_speed.json          H200 step times against the memory-bandwidth floor
- experiments/results/bench_ngram.json          n-gram kernel time per call (CPU)
- experiments/results/zoo/*.jsonl               GPU runs of the tiny-coder model (one row per prompt)
- hybridsd/models/tiny-coder/training_config.json, heads_training_eagle1_eagle3.json
- experiments/results/sweeps/**/*.jsonl         CPU sweeps, if present (optional)

Writes paper/figures/*.pdf, paper/tables/*.tex and paper/numbers.tex (``\\newcommand`` per quoted number).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import logging

import matplotlib

matplotlib.use("Agg")
logging.getLogger("fontTools").setLevel(logging.ERROR)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PAPER = Path(__file__).resolve().parent
REPO = PAPER.parent
RESULTS = REPO / "experiments" / "results"
MODEL_DIR = REPO / "hybridsd" / "models" / "tiny-coder"
FIG, TAB = PAPER / "figures", PAPER / "tables"

sys.path.insert(0, str(REPO))
from hybridsd.analytic import chain_al  # noqa: E402

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
            mae = f"{e['mae']:.3f}"
            if e["mae"] == best:
                mae = f"\\textbf{{{mae}}}"
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


# ----------------------------------------------------------------------------- zoo model runs


def zoo() -> dict:
    files = sorted((RESULTS / "zoo").glob("*.jsonl"))
    runs = {f.stem: load_jsonl(f) for f in files}
    # tiny-coder facts
    tc = json.loads((MODEL_DIR / "training_config.json").read_text())
    num("zooParams", tc["parameters"] / 1e6, "{:.1f}")
    num("zooTrainMin", tc["wall_s"] / 60, "{:.1f}")
    num("zooPretrainMB", tc["data"]["pretrain_chars"] / 1e6, "{:.0f}")
    num("zooPretrainTokens", tc["data"]["pretrain_tokens"] / 1e6, "{:.1f}")
    num("zooSyntheticEdits", f"{tc['data']['synthetic_examples']:,}", "{}")
    num("zooRealRows", f"{tc['data']['sft_real_rows']:,}", "{}")
    num("zooEvalRows", tc["data"]["eval_rows"], "{:d}")
    num("zooEvalRepos", ", ".join(r.split("/")[1] for r in tc["data"]["eval_repos"]), "{}")
    num("zooLayers", tc["config"]["num_layers"], "{:d}")
    num("zooHidden", tc["config"]["hidden_size"], "{:d}")
    num("zooProv", provenance(tc["run_info"]), "{}")
    g = tc["quality_gate"]
    num("zooGateN", g["n"], "{:d}")
    num("zooGateOutVsBefore", g["median_out_vs_before"])
    num("zooGateRefNorm", g["median_ref_norm"])
    num("zooGateStopped", g["stopped_at_eot"], "{:d}")
    ht = json.loads((MODEL_DIR / "heads_training_eagle1_eagle3.json").read_text())
    num("headsProv", provenance(ht["run_info"]), "{}")
    num("headsGenSeq", ht["data"]["generated"], "{:d}")
    num("headsForcedTokens", ht["data"]["forced_tokens"] / 1e6, "{:.1f}")
    for k, tag in (("eagle1", "One"), ("eagle3", "Three")):
        h = ht["heads"][k]
        num(f"heads{tag}Steps", h["steps"], "{:d}")
        num(f"heads{tag}Seconds", h["train_s"], "{:.0f}")
        num(f"heads{tag}Agree", ", ".join(f"{a:.2f}" for a in h["holdout_agreement"]), "{}")
    num("headsTTT", ht["config"]["ttt_steps"], "{:d}")
    num("headsDraftVocab", ht["config"]["draft_vocab"], "{:d}")

    # aggregate per (run, method)
    agg = {}
    for run, rows in runs.items():
        by = defaultdict(list)
        for r in rows:
            by[r["config"]["method"]].append(r)
        plain = {r["example_id"]: r for r in by.get("none", [])}
        for m, rs in by.items():
            tok = sum(r["stats"]["num_tokens"] for r in rs)
            steps = sum(r["stats"]["num_target_steps"] for r in rs)
            drafts = sum(r["stats"]["num_drafts"] for r in rs)
            acc = sum(r["stats"]["num_accepted"] for r in rs)
            L = max((len(r["stats"]["accepted_per_position"]) for r in rs), default=0)
            app = np.zeros(L)
            for r in rs:
                a = r["stats"]["accepted_per_position"]
                app[: len(a)] += a
            sbd = Counter()
            for r in rs:
                sbd.update(r["stats"]["steps_by_drafter"])
            capped = sum(r["stats"]["num_tokens"] >= r["config"]["output_len"] for r in rs)
            fin = [r for r in rs if r["stats"]["num_tokens"] < r["config"]["output_len"]]
            ftok = sum(r["stats"]["num_tokens"] for r in fin)
            fst = sum(r["stats"]["num_target_steps"] for r in fin)
            same = None
            if plain and m != "none":
                key = lambda r: tuple(r["tokens"]) if "tokens" in r else (r["stats"]["num_tokens"], r["output_edit_norm"])  # noqa: E731
                pairs = [(key(r), key(plain[r["example_id"]])) for r in rs if r["example_id"] in plain]
                same = (sum(a == b for a, b in pairs), len(pairs), all("tokens" in r for r in rs))
            agg[(run, m)] = dict(
                n=len(rs), tokens=tok, steps=steps, al=tok / steps, prec=(1 + acc / drafts) if drafts else math.nan,
                rates=(app / drafts) if drafts else np.zeros(0), share=drafts / max(steps - len(rs), 1),
                by_drafter=dict(sbd), capped=capped, al_finished=(ftok / fst) if fst else math.nan, n_finished=len(fin),
                same=same, run_info=rs[0]["run_info"], config=rs[0]["config"], rows=rs)
    return agg


def zoo_outputs(agg: dict) -> None:
    main = "gate_call2"
    eag = "gate_call3_eagle"
    have_main = any(k[0] == main for k in agg)
    if not have_main:
        raise SystemExit(f"missing experiments/results/zoo/{main}.jsonl")
    a = agg
    cfg = a[(main, "ngram")]["config"]
    num("zooPrompts", a[(main, "ngram")]["n"], "{:d}")
    num("zooOutLen", cfg["output_len"], "{:d}")
    num("zooKngram", cfg["k"]["ngram"], "{:d}")
    num("zooKeagle", cfg["k"]["eagle"], "{:d}")
    num("zooMainProv", provenance(a[(main, "ngram")]["run_info"]), "{}")
    num("zooMainCommit", commit_of(a[(main, "ngram")]["run_info"])[0], "{}")
    for m, tag in (("ngram", "Ngram"), ("ngram-eagle", "NgramEagle"), ("ngram-eagle3", "NgramEagleThree"),
                   ("eagle", "EagleMain"), ("eagle3", "EagleThreeMain"), ("none", "Plain")):
        r = a[(main, m)]
        num(f"zooAL{tag}", r["al"])
        num(f"zooN{tag}", r["n"], "{:d}")
        num(f"zooCapped{tag}", r["capped"], "{:d}")
        if m != "none":
            num(f"zooPrec{tag}", r["prec"])
            num(f"zooALfin{tag}", r["al_finished"])
            num(f"zooNfin{tag}", r["n_finished"], "{:d}")
            s = r["same"]
            if s:
                num(f"zooSame{tag}", f"{s[0]} of {s[1]}", "{}")
    # EAGLE-1 alone (separate run)
    e = a[(eag, "eagle")]
    num("zooEagleProv", provenance(e["run_info"]), "{}")
    num("zooEagleCommit", commit_of(e["run_info"])[0], "{}")
    num("zooALEagle", e["al"])
    num("zooPrecEagle", e["prec"])
    num("zooNEagle", e["n"], "{:d}")
    num("zooEagleOutLen", e["config"]["output_len"], "{:d}")
    num("zooEagleRates", ", ".join(f"{x:.2f}" for x in e["rates"]), "{}")
    cond = e["rates"][1:] / e["rates"][:-1]
    num("zooEagleCond", ", ".join(f"{x:.2f}" for x in np.concatenate([e["rates"][:1], cond])), "{}")
    alpha = float(e["rates"][0])
    num("zooEagleChainFirst", float(chain_al(alpha, len(e["rates"]))))
    # alpha that makes the i.i.d. chain formula reproduce the measured precision AL
    from scipy.optimize import brentq
    a_fit = brentq(lambda t: float(chain_al(t, len(e["rates"]))) - e["prec"], 1e-6, 1 - 1e-9)
    num("zooEagleAlphaFit", a_fit)
    # the gain of the hybrid over n-gram alone
    num("zooGainEagle", a[(main, "ngram-eagle")]["al"] - a[(main, "ngram")]["al"])
    num("zooGainEagleThree", a[(main, "ngram-eagle3")]["al"] - a[(main, "ngram")]["al"])
    diag = json.loads((RESULTS / "zoo" / "head_diagnosis.json").read_text())["heads"]
    num("diagAgreeOne", diag["eagle1"]["answer_agreement"])
    num("diagAgreeThree", diag["eagle3"]["answer_agreement"])
    num("diagSame", min(h["drafter_equals_training_path"] for h in diag.values()))
    num("diagPositions", diag["eagle3"]["positions_checked"], "{:d}")
    r = a[(main, "ngram-eagle")]
    num("zooHybridEagleSteps", r["by_drafter"].get("eagle", 0), "{:d}")
    num("zooHybridNgramSteps", r["by_drafter"].get("ngram", 0), "{:d}")
    num("zooHybridEagleShare", 100 * r["by_drafter"].get("eagle", 0) / sum(r["by_drafter"].values()), "{:.1f}")
    oe = np.array([x["output_edit_norm"] for x in a[(main, "ngram-eagle")]["rows"]], dtype=float)
    num("zooOutNormMedian", float(np.median(oe)))

    # --- table
    lines = [r"\begin{tabular}{lrrrrrll}", r"\toprule",
             r"method & prompts & at cap & seq.\ AL & prec.\ AL & AL, finished & $r_1, r_2, \dots$ & "
             r"= plain \\"]
    order = ["none", "ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle3"]
    runs = sorted({k[0] for k in a}, key=lambda s: (s != main, s))
    for run in runs:
        ms = [m for m in order if (run, m) in a] + sorted(m for (rr, m) in a if rr == run and m not in order)
        ri = a[(run, ms[0])]["run_info"]
        c, note = commit_of(ri)
        lines.append(r"\midrule")
        lines.append(f"\\multicolumn{{8}}{{l}}{{\\texttt{{{tex_escape(run)}}}: commit \\texttt{{{c}}}, "
                     f"{tex_escape(ri.get('device', '?'))}, {str(ri.get('date', ''))[:10]}, "
                     f"output $\\le$ {a[(run, ms[0])]['config']['output_len']} tokens, "
                     f"CUDA graphs {'on' if a[(run, ms[0])]['config'].get('cuda_graphs') else 'off'}}} \\\\")
        for m in ms:
            r = a[(run, m)]
            rates = ", ".join(f"{x:.2f}" for x in r["rates"]) if len(r["rates"]) else "--"
            same = "--" if not r["same"] else f"{r['same'][0]}/{r['same'][1]}"
            lines.append(f"\\quad {METHOD_LABEL.get(m, m)} & {r['n']} & {r['capped']} & {fmt(r['al'])} & "
                         f"{fmt(r['prec'])} & {fmt(r['al_finished'])} & {{\\scriptsize {rates}}} & {same} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    write(TAB / "zoo.tex", "\n".join(lines) + "\n")
    num("zooOtherRuns", ", ".join(f"\\texttt{{{tex_escape(r)}}}" for r in runs if r not in (main, eag)) or "none",
        "{}")
    other = [r for r in runs if r not in (main, eag)]
    if other:
        o = other[0]
        num("zooOldProv", provenance(next(v for k, v in a.items() if k[0] == o)["run_info"]), "{}")
        num("zooOldN", next(v for k, v in a.items() if k[0] == o)["n"], "{:d}")

    # --- figure: per-prompt AL vs output edit norm, and per-position acceptance
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(6.9, 2.3), gridspec_kw={"width_ratios": [1.6, 1]})
    series = [(main, "ngram"), (main, "ngram-eagle"), (main, "ngram-eagle3"), (eag, "eagle"), (main, "eagle3")]
    offsets = {"ngram": -0.006, "ngram-eagle": 0.0, "ngram-eagle3": 0.006, "eagle": 0.0, "eagle3": 0.0}
    for run, m in series:
        if (run, m) not in a:
            continue
        rows = a[(run, m)]["rows"]
        xs = np.array([r["output_edit_norm"] for r in rows], dtype=float) + offsets[m]
        ys = np.array([r["stats"]["seq_normalized_al"] for r in rows], dtype=float)
        cap = np.array([r["stats"]["num_tokens"] >= r["config"]["output_len"] for r in rows])
        col = METHOD_COLOR[m]
        lab = f"{METHOD_LABEL[m]} ({len(rows)})"
        ax.scatter(xs[~cap], ys[~cap], s=12, color=col, label=lab, zorder=3)
        ax.scatter(xs[cap], ys[cap], s=12, facecolors="none", edgecolors=col, zorder=3)
    ax.scatter([], [], s=12, facecolors="none", edgecolors="k", label="hollow: output hit the cap")
    ax.set_xlabel("edit norm of the model's output against the input file")
    ax.set_ylabel("sequence-normalized AL (per prompt)")
    ax.set_ylim(0.8, 6.2)
    ax.legend(frameon=False, fontsize=6, loc="lower right", ncol=2)
    # per-position acceptance
    sim = json.loads((RESULTS / "simulate_al.json").read_text())["config"]
    curves = [(main, "ngram"), (main, "ngram-eagle"), (eag, "eagle"), (main, "eagle3")]
    for key in curves:
        if key not in a or not len(a[key]["rates"]):
            continue
        rr = a[key]["rates"]
        m = key[1]
        label = f"{METHOD_LABEL[m]} ({a[key]['n']})"
        ax2.plot(np.arange(1, len(rr) + 1), rr, marker="o", ms=3, color=METHOD_COLOR[m], label=label)
    sr = sim["eagle_rates"][: sim["k_eagle"]]
    ax2.plot(np.arange(1, len(sr) + 1), sr, marker="s", ms=3, ls="--", color="0.4",
             label="EAGLE, simulation")
    ax2.set_xlabel("draft position $i$")
    ax2.set_ylabel("acceptance rate $r_i$")
    ax2.set_ylim(0, 1.02)
    ax2.set_xticks(range(1, 6))
    ax2.legend(frameon=False, fontsize=6, loc="upper right", bbox_to_anchor=(1.02, 0.76), handlelength=1.4,
               title="measured (prompts)", title_fontsize=6)
    fig.tight_layout(w_pad=1.2)
    savefig(fig, "zoo")


# ----------------------------------------------------------------------------- GPU speed


def speed() -> None:
    d = json.loads((RESULTS / "bench_speed.json").read_text())
    num("speedProv", provenance(d["run_info"]), "{}")
    num("speedCommit", commit_of(d["run_info"])[0], "{}")
    floor = d["floor_ms"]
    num("speedFloor", floor)
    num("speedGoal", 1.25 * floor)
    num("speedBW", d["copy_bandwidth_TBps"])
    num("speedWeightGB", d["weight_GB"])
    num("speedLayers", d["layers"], "{:d}")
    ctxs = sorted(d["contexts"], key=int)
    names = ["hf_eager_decode", "eager_chain_q1", "eager_chain_q4", "eager_chain_q9", "eager_tree_q9",
             "graph_chain_q1", "graph_chain_q4", "graph_chain_q9", "graph_tree_q9"]
    label = {"hf_eager_decode": "HF eager decode (1 token)", "eager_chain_q1": "ours, eager, 1 token",
             "eager_chain_q4": "ours, eager, chain of 4", "eager_chain_q9": "ours, eager, chain of 9",
             "eager_tree_q9": "ours, eager, tree 1+4+4", "graph_chain_q1": "ours, CUDA graph, 1 token",
             "graph_chain_q4": "ours, CUDA graph, chain of 4", "graph_chain_q9": "ours, CUDA graph, chain of 9",
             "graph_tree_q9": "ours, CUDA graph, tree 1+4+4"}
    tagc = {"512": "A", "2048": "B"}
    for ctx in ctxs:
        t = d["contexts"][ctx]
        tg = tagc.get(ctx, "")
        if not tg:
            continue
        num(f"speedCtx{tg}", int(ctx), "{:d}")
        num(f"speedGraphOne{tg}", t["graph_chain_q1"])
        num(f"speedGraphOneX{tg}", t["graph_chain_q1"] / floor)
        num(f"speedGraphNine{tg}", t["graph_chain_q9"])
        num(f"speedGraphTree{tg}", t["graph_tree_q9"])
        num(f"speedHF{tg}", t["hf_eager_decode"])
        num(f"speedHFX{tg}", t["hf_eager_decode"] / floor)
        num(f"speedVerifyRatio{tg}", t["graph_chain_q9"] / t["graph_chain_q1"])
        num(f"speedGraphGain{tg}", t["hf_eager_decode"] / t["graph_chain_q1"])
    lines = [r"\begin{tabular}{l" + "rr" * len(ctxs) + "}", r"\toprule",
             "step & " + " & ".join(f"\\multicolumn{{2}}{{c}}{{context {c}}}" for c in ctxs) + r" \\",
             " & " + " & ".join("ms & $\\times$floor" for _ in ctxs) + r" \\", r"\midrule"]
    for n in names:
        cells = []
        for c in ctxs:
            v = d["contexts"][c].get(n)
            cells += [fmt(v), fmt(v / floor if v else None)]
        lines.append(f"{label[n]} & " + " & ".join(cells) + r" \\")
    lines += [r"\midrule", "memory-bandwidth floor & " + " & ".join(f"{floor:.2f} & 1.00" for _ in ctxs) + r" \\",
              "goal (1.25$\\times$ floor) & " + " & ".join(f"{1.25 * floor:.2f} & 1.25" for _ in ctxs) + r" \\",
              r"\bottomrule", r"\end{tabular}"]
    write(TAB / "speed.tex", "\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(3.2, 2.75))
    h = 0.38
    ys = np.arange(len(names))[::-1]
    for i, c in enumerate(ctxs):
        vals = [d["contexts"][c][n] for n in names]
        ax.barh(ys + (0.5 - i) * h, vals, h, label=f"context {c}", color=["#4c72b0", "#dd8452"][i % 2])
    ax.axvline(floor, color="k", lw=0.9, label=f"floor ({floor:.2f} ms)")
    ax.axvline(1.25 * floor, color="k", lw=0.8, ls="--", label=f"goal 1.25$\\times$ floor")
    ax.set_yticks(ys)
    ax.set_yticklabels([label[n].replace("ours, ", "") for n in names], fontsize=6.3)
    ax.set_xlabel("ms per target pass")
    ax.legend(frameon=False, loc="lower right", fontsize=6)
    fig.tight_layout()
    savefig(fig, "speed")

    # n-gram kernel cost
    g = json.loads((RESULTS / "bench_ngram.json").read_text())
    num("ngramProv", provenance(g["run_info"]), "{}")
    res = {(r["stream"], r["context"]): r for r in g["results"]}
    for ctx, tg in ((8192, "A"), (32768, "B")):
        r = res[("iid-random", ctx)]
        num(f"ngramUs{tg}", r["median_us"], "{:.1f}")
        num(f"ngramCtx{tg}", f"{ctx // 1024}k", "{}")
    num("ngramShareOfStep", 100 * res[("iid-random", 8192)]["median_us"] / 1e3 /
        d["contexts"][ctxs[0]]["graph_chain_q1"], "{:.2f}")


# ----------------------------------------------------------------------------- optional CPU sweeps


def _k_label(cfg: dict) -> str:
    m, k = cfg.get("method", "?"), cfg.get("k", {})
    if m == "none":
        return "--"
    if m.startswith("ngram-"):
        kn, ke = k.get("ngram"), k.get(m.split("-", 1)[1])
        return str(kn) if kn == ke else f"{kn}/{ke}"
    return str(k.get(m, "?"))


def sweeps() -> None:
    """CPU sweeps of another session, if present: corpus AL per (dataset, method, k, BOS mode, output length),
    and whether each output equals plain decoding's for the same prompt and settings (rows store tokens)."""
    root = RESULTS / "sweeps"
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
            f"\\texttt{{experiments/results/sweeps/}}; commit{'s' if len(commits) > 1 else ''} "
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
    zoo_outputs(zoo())
    speed()
    sweeps()
    out = ["% generated by paper/make_figures.py from experiments/results; do not edit"]
    out += [f"\\newcommand{{\\{k}}}{{{v}}}" for k, v in NUMBERS.items()]
    write(PAPER / "numbers.tex", "\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
