"""AL against the edit norm on the GPU (experiments/results/sweeps/edit_norm_h200_bf16/): the zoo target's held-out
code edits under the PR's configurations and the trees, per bin of the reference's and of the output's own edit
norm, with bootstrap CIs; the corpus table beside it; and the same configurations on every held-out edit
(experiments/results/sweeps/edit_norm_all_heldout_h100_bf16/)."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import spearmanr

from experiments import results
from paper.sections.style import EAGLE_TREE, HYBRID_TREE, VARIANT_COLOR, VARIANT_LABEL, legend_below, savefig
from paper.sections.tex import RESULTS, fmt, num, of_n, provenance, table, tex_escape

SWEEP = RESULTS / "sweeps" / "edit_norm_h200_bf16"
ALL_HELD_OUT = RESULTS / "sweeps" / "edit_norm_all_heldout_h100_bf16"  # every held-out edit in the bins
FAILURES = RESULTS / "zoo" / "edit_failures"  # experiments.edit_failures of ALL_HELD_OUT (bf16) and of ...
ALL_HELD_OUT_FP32 = RESULTS / "sweeps" / "edit_norm_all_heldout_h100_fp32"  # ... its plain decoding in fp32
FAILURE_TAGS = {"end early": "End", "skipped copy": "Skip", "repeated copy": "Repeat", "new text": "New",
                "rewrite": "Rewrite"}
EDGES = list(results.ANALYSIS_BINS)  # 8 bins over [0, 0.6], as the sweep samples them
BINNINGS = {"ref_edit_norm": "reference edit norm (as the PR bins)", "output_edit_norm": "the output's own edit norm"}
ORDER = ("ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle3", "ngram-eagle tree", EAGLE_TREE, HYBRID_TREE)
TAG = {"ngram": "Ngram", "eagle": "EagleOne", "eagle3": "EagleThree", "ngram-eagle": "Hyb", "ngram-eagle3": "HybThree",
       "ngram-eagle tree": "Tree", EAGLE_TREE: "EagleTree", HYBRID_TREE: "HybTree"}


def load():
    """The sweep's rows (experiments.results.load_runs)."""
    return results.load_runs(SWEEP)


def make() -> None:
    df = load()
    calls = json.loads((SWEEP / "sweep.json").read_text())["calls"]
    presets = sorted({c["preset"] for c in calls})
    num("enCmd", "; ".join(f"\\code{{python -m experiments.sweep --preset {tex_escape(p)}}}" for p in presets), "{}")
    num("enProv", provenance(calls[-1]["run_info"]), "{}")
    plain = df[df.variant == "none"]
    num("enN", len(plain), "{:d}")
    num("enOutLen", int(plain.output_len.iloc[0]), "{:d}")
    spec = calls[-1]["preset_spec"]  # the preset's sampling: at most per_bin prompts per bin_width of reference norm
    num("enPerBin", spec["per_bin"], "{:d}")
    num("enSampleWidth", spec.get("bin_width", 0.05), "{:g}")
    stopped = int((plain.tokens < plain.output_len).sum())
    ref_tokens = reference_tokens(plain)
    num("enStopped", of_n(stopped, len(plain)), "{}")
    num("enStoppedRef", of_n(stopped_within_reference(plain, ref_tokens), len(plain)), "{}")
    num("enRho", spearmanr(plain.ref_edit_norm, plain.output_edit_norm).statistic)
    rho_failures(plain, ref_tokens)
    num("enMedOut", float(plain.output_edit_norm.median()))
    num("enMedRef", float(plain.ref_edit_norm.median()))
    num("enBins", len(EDGES) - 1, "{:d}")
    num("enBinWidth", EDGES[1], "{:g}")
    corpus_table(df)
    cells = {b: results.bin_table(df[df.variant != "none"], EDGES, b, n_boot=1000) for b in BINNINGS}
    figure(cells)
    findings(cells)
    high_bins(df)
    num("enHigh", HIGH, "{:g}")


def reference_tokens(plain) -> np.ndarray:
    """Tokens of each plain row's reference (the zoo tokenizer on the data directory's code_edits_dev.jsonl)."""
    from transformers import AutoTokenizer

    from hybridsd import data, zoo

    tok = AutoTokenizer.from_pretrained(zoo.path(plain.model.iloc[0]), local_files_only=True)
    ref = {e.id: e.reference for e in data.load_code_edits() if e.id in set(plain.example_id)}
    return np.array([len(tok.encode(ref[i], add_special_tokens=False)) for i in plain.example_id])


def stopped_within_reference(plain, ref_tokens: np.ndarray) -> int:
    """Plain outputs that end with EOS within the zoo quality gate's cap (1.5x their reference's tokens)."""
    from experiments.zoo_gate import cap_of

    cap = np.array([cap_of(int(n)) for n in ref_tokens])
    return int(((plain.tokens < plain.output_len) & (plain.tokens <= cap)).sum())


def rho_failures(plain, ref_tokens: np.ndarray) -> None:
    """What holds the two norms' Spearman correlation down: outputs that copy the input where an edit of norm >= 0.05
    was asked (output norm < 0.02), outputs shorter than 3/4 of their reference's tokens, and outputs whose norm
    exceeds the reference's by more than 0.2 (each output in the first group that fits); the correlation with each
    group's output norms set to their references'; and how many short ones were asked for three or more changed
    places or ten or more new lines at one (the located request's places, hybridsd.edit_requests.change_places)."""
    from hybridsd import data
    from hybridsd.edit_requests import change_places

    ref, out = plain.ref_edit_norm.to_numpy(), plain.output_edit_norm.to_numpy()
    copy = (out < 0.02) & (ref >= 0.05)
    short = ~copy & (plain.tokens.to_numpy() < 0.75 * ref_tokens)
    over = ~copy & ~short & (out > ref + 0.2)
    for group, tag in ((copy, "Copy"), (short, "Short"), (over, "Over")):
        num(f"enRho{tag}N", int(group.sum()), "{:d}")
        num(f"enRho{tag}Fixed", spearmanr(ref, np.where(group, ref, out)).statistic)
    wanted = set(plain.example_id[short])
    places = [change_places(e.input_text, e.reference) for e in data.load_code_edits() if e.id in wanted]
    num("enRhoShortHard", sum(len(p) >= 3 or max(q.new_end - q.new_start for q in p) >= 10 for p in places), "{:d}")


def corpus_table(df) -> None:
    """Corpus AL, precision AL, per-position rates, match with plain decoding and TPOT per method."""
    al = results.corpus_al(df, by=["variant", "k"]).set_index("variant")
    mr = results.match_rate(df, by=["variant"]).set_index("variant")
    plain_tpot = al.loc["none"].tpot_ms
    lines = [r"\begin{tabular}{llrrlrr}", r"\toprule",
             r"method & $k$ & seq.\ AL & prec.\ AL & $r_1, r_2, r_3$ & = plain & TPOT (ms) \\", r"\midrule",
             f"plain & -- & 1.00 & -- & & & {plain_tpot:.2f} \\\\"]
    for var in ORDER:
        r = al.loc[var]
        rates = ", ".join(f"{r[f'r{i}']:.2f}" for i in (1, 2, 3))
        m = mr.loc[var]
        lines.append(f"{VARIANT_LABEL[var]} & {r.k} & {fmt(r.seq_al)} & {fmt(r.precision_al)} & "
                     f"{{\\scriptsize {rates}}} & {int(m.n_same)}/{int(m.n)} & {r.tpot_ms:.2f} \\\\")
        num(f"enAL{TAG[var]}", r.seq_al)
        num(f"enSame{TAG[var]}", of_n(int(m.n_same), int(m.n)), "{}")
        num(f"enSpeed{TAG[var]}", plain_tpot / r.tpot_ms, "{:.1f}")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("edit_norm", lines)
    num("enTpotPlain", plain_tpot)


HIGH = EDGES[5]  # the top three bins, [0.375, 0.6]: the "0.4-0.6" bins


def lowest_and_top_bins(df, binning: str):
    """Corpus AL per variant of ``df``'s prompts in the lowest bin of ``binning`` (seq AL, a Series) and in the top
    three bins (edit norm in [HIGH, 0.6]; the corpus_al frame, its ``n`` the prompts)."""
    e = df[binning]
    low = results.corpus_al(df[e < EDGES[1]], by=["variant"]).set_index("variant").seq_al
    return low, results.corpus_al(df[(e >= HIGH) & (e <= EDGES[-1])], by=["variant"]).set_index("variant")


def high_bins(df, prefix: str = "en", drop_fmt: str = "{:.0f}") -> None:
    """Corpus AL of the prompts in the top three bins (edit norm >= 0.375) against the lowest bin, by either
    binning: n-gram's and EAGLE-1's fall (percent, as ``drop_fmt``), and each hybrid against its better part there
    (macros ``prefix...``)."""
    for binning, tag in (("ref_edit_norm", "Ref"), ("output_edit_norm", "Out")):
        low, high = lowest_and_top_bins(df, binning)
        num(f"{prefix}{tag}HighN", int(high.loc["ngram"].n), "{:d}")
        for var, name in (("ngram", "Ngram"), ("eagle", "EagleOne"), ("eagle3", "EagleThree"),
                          ("ngram-eagle", "Hyb"), ("ngram-eagle3", "HybThree")):
            drop = 100 * (1 - high.loc[var].seq_al / low.loc[var])
            num(f"{prefix}{tag}High{name}", high.loc[var].seq_al)
            num(f"{prefix}{tag}High{name}Drop", drop, drop_fmt)
            num(f"{prefix}{tag}High{name}Moves", moves(drop), "{}")


def moves(drop: float) -> str:
    """``drop`` (percent lower than the lowest bin) as a phrase: "falls by 12\\%" or "rises by 5\\%"."""
    return f"{'falls' if round(drop) >= 0 else 'rises'} by {abs(round(drop)):d}\\%"


def figure(cells) -> None:
    """Seq AL per bin with 95% CIs, one panel per binning."""
    fig, axes = plt.subplots(1, 2, figsize=(6.9, 2.5), sharey=True)
    for ax, (binning, rows) in zip(axes, cells.items()):
        for j, var in enumerate(ORDER):
            rs = [r for r in rows if r["variant"] == var]
            x = np.array([r["mean_e"] for r in rs]) + (j - 3.5) * 0.002  # small offsets: CIs side by side
            y = np.array([r["seq_al"] for r in rs])
            lo, hi = zip(*(r["seq_al_ci"] for r in rs))
            ax.errorbar(x, y, yerr=[y - np.array(lo), np.array(hi) - y], marker="o", ms=2.6, lw=1.0, capsize=1.5,
                        color=VARIANT_COLOR[var], label=VARIANT_LABEL[var])
        counts = [r["n"] for r in rows if r["variant"] == "ngram"]
        xs = [r["mean_e"] for r in rows if r["variant"] == "ngram"]
        for x, n in zip(xs, counts):
            ax.annotate(str(n), (x, 1.0), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=5.5)
        ax.set_xlabel(f"{BINNINGS[binning]} (bin mean)")
        ax.set_ylim(0.8, 7.0)
    axes[0].set_ylabel("sequence-normalized AL")
    legend_below(fig, axes[0], 4, -0.2)
    fig.tight_layout(w_pad=0.6)
    savefig(fig, "edit_norm")


def hybrid_wins(by: dict) -> str:
    """"W of N": the (bin, hybrid) cells, both prefer-ngram hybrids in every bin, where the hybrid's 95% CI reaches
    the better of its parts' ALs (``by``: variant -> bin -> a bin_table row)."""
    wins = total = 0
    for b in by["ngram"]:
        for hyb, head in (("ngram-eagle", "eagle"), ("ngram-eagle3", "eagle3")):
            total += 1
            wins += by[hyb][b]["seq_al_ci"][1] >= max(by["ngram"][b]["seq_al"], by[head][b]["seq_al"])
    return of_n(wins, total)


def binned_hybrid_wins(df, binning: str) -> str:
    """:func:`hybrid_wins` over the bins of ``binning`` (a column of edit norms) of ``df``'s speculative rows."""
    by: dict = {}
    for r in results.bin_table(df[df.variant != "none"], EDGES, binning, n_boot=1000):
        by.setdefault(r["variant"], {})[r["bin"]] = r
    return hybrid_wins(by)


def sweep_summary(folder) -> dict:
    """A sweep folder's plain outputs (count, count ending before the cap, Spearman of the reference's against the
    output's edit norm) and, by either binning, the corpus seq-AL fall (percent) from the lowest bin to the top bins
    and the hybrid cells reaching their better part: the form in which zoo/margin_recipe_h200/runs.json records
    sweeps (the dynamic trees left out)."""
    df = results.load_runs(folder)
    df = df[~df.variant.isin([EAGLE_TREE, HYBRID_TREE])]
    plain = df[df.variant == "none"]
    out = {"prompts": len(plain), "ended_before_cap": int((plain.tokens < plain.output_len).sum()),
           "spearman_ref_out": round(float(spearmanr(plain.ref_edit_norm, plain.output_edit_norm).statistic), 4)}
    for binning in BINNINGS:
        low, high = lowest_and_top_bins(df, binning)
        out[binning] = {"top_bins_prompts": int(high.loc["ngram"].n),
                        "fall_to_top_bins_percent": {v: round(100 * (1 - high.loc[v].seq_al / low[v]), 1)
                                                     for v in ("ngram", "eagle", "eagle3", "ngram-eagle",
                                                               "ngram-eagle3")},
                        "hybrid_cells_reaching_better_part": binned_hybrid_wins(df, binning)}
    return out


def all_held_out() -> None:
    """The same configurations on every held-out edit in the bins (ALL_HELD_OUT; every figure but the dynamic trees'
    corpus AL without them): its prompts per bin of the reference's norm, the plain outputs' Spearman and EOS share,
    the outputs' match with plain decoding, the fall to the top bins and the hybrids against their parts (macros
    ``enAll...``)."""
    df = results.load_runs(ALL_HELD_OUT)
    dynamic = results.corpus_al(df[df.variant.isin([EAGLE_TREE, HYBRID_TREE])], by=["variant"]).set_index("variant")
    for var in (EAGLE_TREE, HYBRID_TREE):  # the dynamic trees: their corpus AL only
        num(f"enAllAL{TAG[var]}", dynamic.loc[var].seq_al)
    df = df[~df.variant.isin([EAGLE_TREE, HYBRID_TREE])]
    calls = json.loads((ALL_HELD_OUT / "sweep.json").read_text())["calls"]
    num("enAllProv", provenance(calls[-1]["run_info"]), "{}")
    num("enAllSeconds", sum(c["seconds"] for c in calls) / 60, "{:.0f}")
    plain = df[df.variant == "none"]
    num("enAllN", len(plain), "{:d}")
    counts = np.bincount(np.digitize(plain.ref_edit_norm, EDGES[1:-1]), minlength=len(EDGES) - 1)
    num("enAllBinCounts", ", ".join(str(c) for c in counts), "{}")
    num("enAllRho", spearmanr(plain.ref_edit_norm, plain.output_edit_norm).statistic)
    num("enAllStopped", of_n(int((plain.tokens < plain.output_len).sum()), len(plain)), "{}")
    failures(spearmanr(plain.ref_edit_norm, plain.output_edit_norm).statistic, len(plain))
    mr = results.match_rate(df, by=["variant"]).set_index("variant")
    chains = mr.drop(index="ngram-eagle tree")
    num("enAllSameChains", of_n(int(chains.n_same.min()), int(chains.n.max())), "{}")
    num("enAllSameTree", of_n(int(mr.loc["ngram-eagle tree"].n_same), int(mr.loc["ngram-eagle tree"].n)), "{}")
    high_bins(df, prefix="enAll", drop_fmt="{:.1f}")
    for binning, tag in (("ref_edit_norm", "Ref"), ("output_edit_norm", "Out")):
        num(f"enAll{tag}HybWins", binned_hybrid_wins(df, binning), "{}")


def failures(rho: float, n: int) -> None:
    """The plain outputs' misses over every held-out edit (FAILURES, made from ALL_HELD_OUT's rows, whose prompt
    count ``n`` and Spearman ``rho`` it must repeat): over- and under-edits, the correlation without them, and the
    over-edits by the kind of their largest departure from the input and whether it starts at a requested place or
    just below a twin of a quoted anchor, and the over-edits among requests with and without such a twin by
    quarter of the input's length (macros ``enFail...``)."""
    doc = json.loads((FAILURES / "all_heldout_bf16.json").read_text())
    record = doc["all"]
    if record["n"] != n or abs(record["rho"] - rho) > 1e-9:
        raise ValueError(f"{FAILURES} is not of {ALL_HELD_OUT}'s plain rows ({record['n']} answers, Spearman "
                         f"{record['rho']:.4f}, against {n} and {rho:.4f}): rerun experiments.edit_failures")
    fp32 = json.loads((FAILURES / "all_heldout_fp32.json").read_text())
    num("enFailFpRho", fp32["all"]["rho"])
    num("enFailFpOver", fp32["all"]["over"], "{:d}")
    over16 = {s["id"] for s in doc["samples"] if s["miss"] == "over"}
    num("enFailFpOverAgain", sum(s["miss"] == "over" and s["id"] in over16 for s in fp32["samples"]), "{:d}")
    plain16 = results.load_runs(ALL_HELD_OUT / "code-edits__none.jsonl.gz").set_index("example_id").output_tokens
    plain32 = results.load_runs(ALL_HELD_OUT_FP32).set_index("example_id").output_tokens
    num("enFailFpSame", of_n(sum(plain16[i] == plain32.get(i) for i in plain16.index), len(plain16)), "{}")
    num("enFailFpProv", provenance(json.loads((ALL_HELD_OUT_FP32 / "sweep.json").read_text())["calls"][-1]["run_info"]),
        "{}")
    for key, tag in (("over", "Over"), ("under", "Under")):
        num(f"enFail{tag}", record[key], "{:d}")
    num("enFailRhoNoOver", record["rho_without_over"])
    num("enFailRhoNoBoth", record["rho_without_both"])
    kinds = record["over_kinds"]
    for kind, tag in FAILURE_TAGS.items():
        num(f"enFail{tag}", kinds[kind]["n"], "{:d}")
    num("enFailElsewhere", sum(k["elsewhere"] for k in kinds.values()), "{:d}")
    quarters = doc["by_input_quarter"]
    for q, tag in ((quarters[0], "Short"), (quarters[-1], "Long")):
        num(f"enFail{tag}Lines", "--".join(map(str, q["input_lines"])), "{}")
        num(f"enFail{tag}Over", 100 * q["over_share"], "{:.0f}")
        num(f"enFail{tag}Else", 100 * q["over_elsewhere_share"], "{:.0f}")
    num("enFailQuarterRho", "--".join(f"{f(q['rho'] for q in quarters):.2f}" for f in (min, max)), "{}")
    num("enFailTwin", record["over_at_twin"], "{:d}")
    num("enFailRhoNoTwin", record["rho_without_at_twin"])
    num("enFailTwinned", record["twinned"], "{:d}")
    shares = {k: [100 * q[f"over_share_{k}"] for q in quarters] for k in ("twinned", "untwinned")}
    if not all(a > b for a, b in zip(shares["twinned"], shares["untwinned"])):  # the text says "in every quarter"
        raise ValueError(f"{FAILURES}: requests with an anchor's twin are not over-edited more often in every "
                         f"quarter of the input's length ({shares})")
    for k, tag in (("twinned", "Twinned"), ("untwinned", "Untwinned")):
        num(f"enFail{tag}OverRange", "--".join(f"{f(shares[k]):.0f}" for f in (min, max)), "{}")
    num("enFailRhoNoKind", "--".join(f"{f(k['rho_without'] for k in kinds.values()):.2f}" for f in (min, max)), "{}")


def findings(cells) -> None:
    """n-gram's and EAGLE-1's change from the lowest bin to their lowest point, and the hybrids against their parts."""
    for binning, tag in (("ref_edit_norm", "Ref"), ("output_edit_norm", "Out")):
        by = {}
        for r in cells[binning]:
            by.setdefault(r["variant"], {})[r["bin"]] = r
        bins = list(by["ngram"])
        ng = [by["ngram"][b]["seq_al"] for b in bins]
        low = int(np.argmin(ng))
        num(f"en{tag}NgramFirst", ng[0])
        num(f"en{tag}NgramMin", ng[low])
        num(f"en{tag}NgramMinBin", bins[low], "{}")
        num(f"en{tag}NgramDrop", 100 * (1 - ng[low] / ng[0]), "{:.0f}")
        e1 = [by["eagle"][b]["seq_al"] for b in bins]
        num(f"en{tag}EagleOneDrop", 100 * (1 - e1[low] / e1[0]), "{:.0f}")
        num(f"en{tag}NgramRange", f"{min(ng):.2f}--{max(ng):.2f}", "{}")
        num(f"en{tag}HybWins", hybrid_wins(by), "{}")
        num(f"en{tag}NLow", by["ngram"][bins[0]]["n"], "{:d}")
        num(f"en{tag}NMin", min(by["ngram"][b]["n"] for b in bins), "{:d}")
        num(f"en{tag}NMax", max(by["ngram"][b]["n"] for b in bins), "{:d}")
