"""Trace simulation (experiments/results/simulation/simulate_al.json): simulated AL per edit-norm bin, the
analytic models' held-out errors and parameters, and the precision-vs-sequence AL figure."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np

from experiments.results import bin_labels
from paper.sections.style import MODEL_LABEL, MODEL_STYLE, POLICY_LABEL, legend_below, savefig
from paper.sections.tex import RESULTS, commit_of, fmt, mae_cell, num, provenance, table, tex_escape

SIMULATION = RESULTS / "simulation" / "simulate_al.json"


def make() -> None:
    """Every number, table and figure of the trace-simulation section."""
    d = json.loads(SIMULATION.read_text())
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
    table("sim_al", lines)

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
    table("model_errors", lines)

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
    legend_below(fig, axes[0, 1], 4, -0.075)
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
