"""Theory against the GPU sweep's measured ALs: per bin of the outputs' new-token share (code edits, single BOS),
each analytic model with its parameters from the parts and the trace simulation."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np

from experiments import results
from paper.sections.simulation import SIMULATION
from paper.sections.style import MODEL_STYLE, VARIANT_LABEL, legend_below, savefig
from paper.sections.sweep import VARIANT_TAG
from paper.sections.tex import MODEL_DIR, NUMBERS, RESULTS, mae_cell, num, table


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
            piece = out[pos:pos + m]
            if piece in src or piece in out[:pos + m - 1]:
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
    wanted = set(rows.example_id)
    inputs = {e.id: e.input_text for e in data.load_code_edits() if e.id in wanted}
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


def make(df) -> None:
    """Measured AL per bin of the outputs' new-token share against each model, parameters from the parts."""
    from hybridsd.analytic import harmonic_al, resync_al, resync_passes
    from hybridsd.fit import fit_harmonic, model_error

    rows = theory_inputs(df)
    edges = list(results.COARSE_BINS)
    sim = json.loads(SIMULATION.read_text())
    sfit, struct, k_sim = sim["fits"]["ngram"], sim["edit_structure"], sim["config"]["k_ngram"]
    alone = results.corpus_al(rows, by=["variant", "k"]).set_index(["variant", "k"]).seq_al
    ng = rows[(rows.variant == "ngram") & (rows.k == "5")]
    idx, present = _bin_groups(ng, edges)
    al_n = float(ng.tokens[idx == present[0]].sum() / ng.passes[idx == present[0]].sum())
    plain = rows[rows.variant == "none"]
    num("thN", len(plain), "{:d}")
    num("thNlow", int((_bin_groups(plain, edges)[0] == 0).sum()), "{:d}")
    num("thLowBin", results.bin_labels(list(zip(edges[:-1], edges[1:])))[0], "{}")
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
    num("thHighBin", results.bin_labels(list(zip(edges[:-1], edges[1:])))[present[-1]], "{}")
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
        source = "n-gram alone" if head == "1" else "measured"
        params = {"harmonic_pr": f"$AL_E={head}$ ({source}), $AL_N={NUMBERS['thALN']}$ (lowest bin)",
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
    table("gpu_theory", lines)


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
    legend_below(fig, axes[0], 3, -0.16)
    fig.tight_layout(w_pad=0.5)
    savefig(fig, "gpu_theory")


def eagle_by_state() -> None:
    """zoo/al_by_edit_norm.json: EAGLE-1's accepted tokens per draft on new and on copied text (by what n-gram would
    propose at the same step), and the simulation of the sweep's own outputs with one set of EAGLE rates and with
    the two, scored against the measured hybrids (mean relative error over the bins, both binnings)."""
    from hybridsd.fit import model_error

    doc = json.loads((RESULTS / "zoo" / "al_by_edit_norm.json").read_text())
    states = doc["eagle_by_ngram_state"]
    num("thEagleNovelAcc", states["novel"]["mean_accepted"])
    num("thEagleCopyAcc", states["first right"]["mean_accepted"])
    measured = {(t["binning"], t["variant"], t["bin"]): t["seq_al"] for t in doc["measured"]}
    for key, tag in (("simulated", "OneSet"), ("simulated_by_state", "ByState")):
        errs = []
        for variant in ("ngram-eagle", "ngram-eagle tree"):
            for binning in ("ref_edit_norm", "output_edit_norm"):
                rows = [t for t in doc[key] if (t["binning"], t["variant"]) == (binning, variant)
                        and (binning, variant, t["bin"]) in measured]
                errs.append(model_error(np.array([t["seq_al"] for t in rows]),
                                        np.array([measured[binning, variant, t["bin"]] for t in rows]))["mean_rel"])
        num(f"thSim{tag}Low", 100 * min(errs), "{:.1f}")
        num(f"thSim{tag}High", 100 * max(errs), "{:.1f}")
    # the re-sync model for the tree hybrid, fitted with one assumed set of EAGLE rates and with the rates by state
    # measured on other prompts (simulate_al --eagle-rates-by-state; the state_* models)
    err = {(e["binning"], e["variant"], e["model"]): e["mean_rel"] for e in doc["errors_vs_measured"]}
    other = json.loads((RESULTS / "zoo" / "eagle1_by_ngram_state_other_prompts.json").read_text())
    num("thOtherPrompts", sum(t["n"] for t in other["measured"] if t["binning"] == "ref_edit_norm"), "{:d}")
    num("thOtherNovelAcc", other["eagle_by_ngram_state"]["novel"]["mean_accepted"])
    num("thOtherCopyAcc", other["eagle_by_ngram_state"]["first right"]["mean_accepted"])
    for model, tag in (("sim_resync", "One"), ("state_resync", "State")):
        for binning, b in (("ref_edit_norm", "Ref"), ("output_edit_norm", "Out")):
            num(f"thTreeResync{tag}{b}", 100 * err[binning, "ngram-eagle tree", model], "{:.1f}")


def held_out() -> None:
    """zoo/al_by_edit_norm.json ``held_out``: the predictive models fitted on random halves of the sweep's prompts
    and scored on the other halves (median mean relative error over the splits, %), beside the two halves' own
    bins (sampling alone) and the fits on the real edits."""
    doc = json.loads((RESULTS / "zoo" / "al_by_edit_norm.json").read_text())["held_out"]
    med = {(s["binning"], s["variant"], s["model"]): s for s in doc["summary"]}
    num("thHeldSplits", doc["splits"], "{:d}")
    num("thHeldHalf", doc["prompts"] // 2, "{:d}")
    pct = lambda x: f"{100 * x:.0f}"  # noqa: E731
    for binning, b in (("ref_edit_norm", "Ref"), ("output_edit_norm", "Out")):
        s = med[binning, "ngram", "fit_half_bins"]
        num(f"thHeldBins{b}", pct(s["median"]), "{}")
        for model, tag in (("resync", "Resync"), ("harmonic_free", "Free"), ("sim_resync", "SimResync")):
            s = med[binning, "ngram", model]
            num(f"thHeldNgram{tag}{b}", f"{pct(s['median'])} [{pct(s['lo'])}, {pct(s['hi'])}]", "{}")
        hyb = [s["median"] for (bn, v, m), s in med.items() if bn == binning and v != "ngram"
               and m not in ("constant", "fit_half_bins")]
        num(f"thHeldHyb{b}", f"{pct(min(hyb))}--{pct(max(hyb))}", "{}")


def other_repository() -> None:
    """zoo/al_by_edit_norm.json ``other_prompts``: the predictive models fitted to the GPU runs on the validation
    repository and scored on the sweep's bins (mean relative error, %), that repository's own bins against the
    sweep's, its EAGLE-1 AL; and ``sampling_floor``: the error a model of the true bins would show against the sweep."""
    doc = json.loads((RESULTS / "zoo" / "al_by_edit_norm.json").read_text())
    other = doc["other_prompts"]
    num("thOtherRepoN", other["prompts"], "{:d}")
    num("thOtherRepoEagle", other["al_eagle"])
    num("thEvalEagle", doc["al_eagle"])
    err = {(e["binning"], e["variant"], e["model"]): e["mean_rel"] for e in doc["errors_vs_measured"]}
    floor = {(f["binning"], f["variant"]): f for f in doc["sampling_floor"]}
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    span = lambda xs: pct(min(xs)) if pct(min(xs)) == pct(max(xs)) else f"{pct(min(xs))}--{pct(max(xs))}"  # noqa: E731
    hybrids = ("ngram-eagle", "ngram-eagle tree")
    for binning, b in (("ref_edit_norm", "Ref"), ("output_edit_norm", "Out")):
        num(f"thOtherNgramResync{b}", pct(err[binning, "ngram", "other_resync"]), "{}")
        num(f"thOtherNgramFree{b}", pct(err[binning, "ngram", "other_harmonic_free"]), "{}")
        num(f"thOtherHyb{b}", span([err[binning, v, m] for v in hybrids
                                    for m in ("other_harmonic_fit", "other_harmonic_free", "other_resync")]), "{}")
        num(f"thOtherBinsNgram{b}", pct(err[binning, "ngram", "other_bins"]), "{}")
        num(f"thOtherBinsHyb{b}", span([err[binning, v, "other_bins"] for v in hybrids]), "{}")
        f = floor[binning, "ngram"]
        num(f"thFloorNgram{b}", f"{pct(f['median'])}\\% [{pct(f['lo'])}, {pct(f['hi'])}]", "{}")
        num(f"thFloorHyb{b}", span([floor[binning, v]["median"] for v in hybrids]), "{}")


def all_held_out() -> None:
    """zoo/al_by_edit_norm_all_heldout.json, the models against the sweep of every held-out edit: the sampling floor,
    the fits on the validation repository (``other_*``), on random halves of these prompts (``held_out``), on the real
    edits' simulation (``sim_*``), on these bins themselves (``in_sample``) and the PR's harmonic model, as mean
    relative errors over the bins (%)."""
    doc = json.loads((RESULTS / "zoo" / "al_by_edit_norm_all_heldout.json").read_text())
    err = {(e["binning"], e["variant"], e["model"]): e["mean_rel"] for e in doc["errors_vs_measured"]}
    floor = {(f["binning"], f["variant"]): f for f in doc["sampling_floor"]}
    half = {(s["binning"], s["variant"], s["model"]): s for s in doc["held_out"]["summary"]}
    own = {(f["binning"], f["variant"], f["model"]): f["mean_rel"] for f in doc["in_sample"]}
    num("thAllHalf", doc["held_out"]["prompts"] // 2, "{:d}")
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    span = lambda xs: pct(min(xs)) if pct(min(xs)) == pct(max(xs)) else f"{pct(min(xs))}--{pct(max(xs))}"  # noqa: E731
    ci = lambda s: f"{pct(s['median'])}\\% [{pct(s['lo'])}, {pct(s['hi'])}]"  # noqa: E731
    hybrids = ("ngram-eagle", "ngram-eagle tree")
    fits = ("harmonic_fit", "harmonic_free", "resync")
    for binning, b in (("ref_edit_norm", "Ref"), ("output_edit_norm", "Out")):
        num(f"thAllFloorNgram{b}", ci(floor[binning, "ngram"]), "{}")
        num(f"thAllFloorHyb{b}", span([floor[binning, v]["median"] for v in hybrids]), "{}")
        num(f"thAllOtherNgram{b}", span([err[binning, "ngram", f"other_{m}"] for m in fits[1:]]), "{}")
        num(f"thAllOtherHyb{b}", span([err[binning, v, f"other_{m}"] for v in hybrids for m in fits]), "{}")
        num(f"thAllHalfNgram{b}", ci(min((half[binning, "ngram", m] for m in fits[1:]), key=lambda s: s["median"])),
            "{}")
        num(f"thAllHalfHyb{b}", span([half[binning, v, m]["median"] for v in hybrids for m in fits]), "{}")
        num(f"thAllSimNgram{b}", span([err[binning, "ngram", f"sim_{m}"] for m in fits[1:]]), "{}")
        num(f"thAllSimHyb{b}", span([err[binning, v, f"sim_{m}"] for v in hybrids for m in fits]), "{}")
        num(f"thAllSelfNgram{b}", span([own[binning, "ngram", m] for m in fits[1:]]), "{}")
        num(f"thAllSelfHyb{b}", span([own[binning, v, m] for v in hybrids for m in fits[1:]]), "{}")
        num(f"thAllPrNgram{b}", pct(err[binning, "ngram", "harmonic_pr"]), "{}")
        num(f"thAllPrHyb{b}", span([err[binning, v, "harmonic_pr"] for v in hybrids]), "{}")
