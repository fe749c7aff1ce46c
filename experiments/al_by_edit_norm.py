"""AL against the edit norm: measured runs per bin with bootstrap CIs, the trace simulation of the same prompts on
the target's own outputs beside them, and the analytic models over both.

    python -m experiments.al_by_edit_norm RUNS.jsonl... [--theory experiments/results/simulation/simulate_al.json]
        [--theory-by-state SIM.json] [--splits N] [--exclude-prompts OTHER_RUNS.jsonl...]
        [--fit-runs OTHER_PROMPTS_RUNS.jsonl...]

``RUNS``: spec_bench JSONL files of several methods on the same code-edit prompts (greedy, so every method's
output is the target's one output). For each binning (the reference's edit norm, as the PR bins, and the
realised edit norm of each output against its input) and each variant: per bin the corpus sequence-normalized
AL (sum tokens / sum passes) and precision AL, with percentile CIs from resampling the bin's prompts. The
simulation replays each prompt's output (``output_tokens`` of the rows) after its prompt, rebuilt from
code_edits_dev.jsonl with ``--change-request`` (rows whose rebuilt prompt has another token count are left
out and counted), with EAGLE's per-position rates measured in the EAGLE-1 run; and again with two sets of rates
from that run, split by what n-gram drafting would propose at each step (no draft or a wrong first token: new
text; a right one: copied text), with EAGLE's acceptance per such state. Models per bin: the PR's
harmonic model (AL_ngram calibrated on the lowest bin of the n-gram run, AL_eagle the EAGLE-1 run's AL) and,
with ``--theory``, the predictive models fitted by simulate_al.py on other prompts (``sim_*``), and with
``--theory-by-state`` those of a simulate_al.py run whose EAGLE rates depend on the n-gram state (``state_*``);
each model's mean relative error over bins against the measurement and against the simulation.
``--splits N`` adds ``held_out``: the predictive models fitted to a random half of the prompts and scored on the
other half, over N splits (:func:`held_out_fits`). ``--fit-runs`` adds the predictive models fitted to runs of
the same configurations on other prompts (e.g. another repository's edits), ``other_*``, scored beside the rest.
``sampling_floor`` gives, per variant and binning, the error that a model knowing every bin's true AL would show
against a measurement of this size, and ``in_sample`` the error of each predictive model fitted to the scored bins
themselves (the closest its shape comes to them). ``--exclude-prompts`` leaves out the prompts of other runs (to
measure EAGLE's rates on prompts that the runs being predicted do not hold).
Each variant's rows must be one config, one row per prompt, drafting ``--k-ngram`` and ``--k-eagle`` tokens.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import numpy as np

from experiments import results
from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info
from experiments.results import bin_table  # noqa: F401  (the per-bin table with bootstrap CIs)
from experiments.simulate_al import json_safe, k_rates
from hybridsd.analytic import harmonic_al, harmonic_calibrate_ngram
from hybridsd.fit import ModelFit, fit_harmonic, fit_resync, model_error

REPO = Path(__file__).resolve().parents[1]
# spec_bench variant -> trace-simulation policy (and the simulate_al.json fits of it)
SIM_POLICY = {"ngram": "ngram", "eagle": "eagle", "ngram-eagle": "prefer-ngram", "ngram-eagle tree": "tree"}
BINNINGS = ("ref_edit_norm", "output_edit_norm")


def eagle_rates(df, variant: str = "eagle") -> tuple[float, ...] | None:
    """Per-position acceptance rates of a run (accepted at position i / drafts), or None without it."""
    part = df[df["variant"] == variant]
    if part.empty or part["drafts"].sum() == 0:
        return None
    width = max(len(a) for a in part["accepted_per_position"])
    acc = np.zeros(width)
    for a in part["accepted_per_position"]:
        acc[: len(a)] += a
    return tuple(float(min(1.0, r)) for r in np.minimum.accumulate(acc / part["drafts"].sum()))


def rebuilt_prompts(df, change_request: str) -> tuple[dict, int]:
    """Each prompt of ``df``'s rows with stored outputs, rebuilt from code_edits_dev.jsonl as spec_bench built it
    (``change_request`` as its --change-request): example id -> token ids (int64); and the number of prompts left
    out (not in the data, or rebuilt to another token count)."""
    from hybridsd import data, prompts, zoo
    from hybridsd.edit_requests import located_request
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(zoo.path(df["model"].dropna().iloc[0] if "model" in df else None),
                                        local_files_only=True)
    by_id = {e.id: e for e in data.load_code_edits()}
    first = df.dropna(subset=["output_tokens"]).drop_duplicates("example_id")
    out, skipped = {}, 0
    for _, r in first.iterrows():
        ex = by_id.get(r["example_id"])
        if ex is None:
            skipped += 1
            continue
        request = located_request(ex.input_text, ex.reference, ex.meta["instruction"]) \
            if change_request == "located" else ex.meta["instruction"]
        ids = prompts.build_prompt_ids(tok, data.blazedit_prompt(ex.input_text, request))
        if len(ids) != r["prompt_tokens"]:
            skipped += 1
            continue
        out[r["example_id"]] = np.asarray(ids, dtype=np.int64)
    return out, skipped


NGRAM_STATES = ("no draft", "first wrong", "first right")


def eagle_by_ngram_state(df, prompt_ids: dict, k_ngram: int, min_n: int = 2, max_n: int = 5,
                         variant: str = "eagle") -> dict:
    """EAGLE's acceptance in the ``variant`` run (rows with a per-step ``trace`` and ``output_tokens``) split by
    what n-gram drafting (``k_ngram``, ``min_n..max_n``, as the engine runs it) would propose at the same step:
    no draft, a draft whose first token is wrong, or right. Per state: ``steps``, ``drafts`` (steps with an EAGLE
    draft), ``mean_accepted`` (per draft) and ``rates`` (accepted at position ``i`` / drafts, as
    :func:`eagle_rates`); ``novel`` pools the first two states (new text)."""
    from hybridsd.drafters.ngram import ngram_propose

    counts: dict = {}
    part = df[(df["variant"] == variant) & df["example_id"].isin(list(prompt_ids))]
    for _, r in part.iterrows():
        ids, out = prompt_ids[r["example_id"]], np.asarray(r["output_tokens"], dtype=np.int64)
        full, pos = np.concatenate([ids, out]), 1  # the prefill emitted the first output token
        for _src, drafted, accepted, *_ in r["trace"]:
            budget = out.size - pos - 1
            draft = ngram_propose(full[: ids.size + pos], min_n, max_n, min(k_ngram, budget)) if budget > 0 else []
            state = NGRAM_STATES[0 if len(draft) == 0 else 1 + int(draft[0] == out[pos])]
            c = counts.setdefault(state, {"steps": 0, "drafts": 0, "accepted": []})
            c["steps"] += 1
            if drafted:
                c["drafts"] += 1
                c["accepted"].append(int(accepted))
            pos += int(accepted) + 1
    pooled = {"novel": [s for s in NGRAM_STATES[:2] if s in counts]}
    out_table = {}
    for state, members in [*((s, [s]) for s in NGRAM_STATES if s in counts), *pooled.items()]:
        acc = np.array([a for m in members for a in counts[m]["accepted"]], dtype=int)
        drafts = sum(counts[m]["drafts"] for m in members)
        if drafts == 0:
            continue
        width = int(acc.max()) if acc.size else 0
        rates = [float((acc >= i).sum() / drafts) for i in range(1, max(width, 1) + 1)]
        out_table[state] = {"steps": sum(counts[m]["steps"] for m in members), "drafts": drafts,
                            "mean_accepted": float(acc.mean()) if acc.size else 0.0, "rates": rates}
    return out_table


def simulate_outputs(df, prompt_ids: dict, k: dict, rates, novel_rates=None) -> object:
    """Rows like ``df``'s, one per (prompt of ``prompt_ids``, simulated variant), from replaying each prompt's
    output with EAGLE's per-position ``rates`` (with ``novel_rates``: those where n-gram would have no draft or a
    wrong first token, ``rates`` elsewhere; see :class:`~hybridsd.simulate.SimConfig`)."""
    import pandas as pd

    from hybridsd.simulate import SimConfig, simulate

    first = df.dropna(subset=["output_tokens"]).drop_duplicates("example_id")
    rows = []
    for i, (_, r) in enumerate(first.iterrows()):
        ids = prompt_ids.get(r["example_id"])
        if ids is None:
            continue
        for variant, policy in SIM_POLICY.items():
            if policy != "ngram" and rates is None:
                continue
            cfg = SimConfig(policy=policy, k_ngram=k["ngram"], k_eagle=k["eagle"],
                            eagle_rates=k_rates(rates, k["eagle"]),
                            eagle_rates_novel=None if novel_rates is None else k_rates(novel_rates, k["eagle"]))
            # EAGLE's draws seeded per prompt (as simulate_al's iter_simulate does), the same for every variant
            st = simulate(ids, r["output_tokens"], cfg, np.random.default_rng((cfg.seed, i)))
            rows.append({"variant": variant, "example_id": r["example_id"], "ref_edit_norm": r["ref_edit_norm"],
                         "output_edit_norm": r["output_edit_norm"], "tokens": st.num_tokens,
                         "passes": st.num_target_steps, "drafts": st.num_drafts, "accepted": st.num_accepted})
    return pd.DataFrame(rows)


def predictive(name: str, fit: dict) -> bool:
    """Whether a simulate_al.json fit needs only the edit norm and output length (the diagnostic ``resync_runs``
    needs each output's copied runs)."""
    return name != "resync_runs" and fit["model"] in ("harmonic", "resync")


def saved_fit(fit: dict) -> ModelFit:
    """A :class:`~hybridsd.fit.ModelFit` from its simulate_al.json record."""
    return ModelFit(model=fit["model"], params=fit["params"], fitted=tuple(fit["fitted"]),
                    ci={k: tuple(v) for k, v in fit["ci"].items()}, settings=fit["settings"])


FIT_KEYS = ("model", "params", "fitted", "ci", "settings")


def theory_fits(doc) -> dict:
    """The ``fits`` of a simulate_al.json (policy -> model name -> fit record); KeyError or TypeError when it holds
    no such table, or a predictive fit whose model cannot be built or predict."""
    fits = doc["fits"]
    if not isinstance(fits, dict) or not all(isinstance(f, dict) for f in fits.values()):
        raise TypeError("'fits' is not a table of fits per policy")
    for policy, named in fits.items():
        for name, fit in named.items():
            where = f"fits[{policy!r}][{name!r}]"
            if not isinstance(fit, dict) or any(key not in fit for key in FIT_KEYS):
                raise TypeError(f"{where} is not a fit record ({', '.join(FIT_KEYS)})")
            if not predictive(name, fit):
                continue
            if not isinstance(fit["params"], dict):
                raise TypeError(f"{where}: params is not a table of parameters")
            try:  # built and tried once here, so that a bad record is found before the binning
                saved_fit(fit).predict(np.zeros(1), np.ones(1))
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                raise TypeError(f"{where}: not a usable fit ({type(e).__name__}: {e})") from None
    return fits


def model_predictions(table: list[dict], theories: dict | None, al_eagle: float | None, k: dict) -> dict:
    """Per (binning, variant): model -> per-bin predictions, from the measured table's bins: the PR's harmonic
    model from the parts, and each of ``theories``' fits (prefix -> a simulate_al.json's ``fits``) named
    ``prefix + model``."""
    out: dict = {}
    for binning in BINNINGS:
        rows = [t for t in table if t["binning"] == binning]
        ngram = sorted((t for t in rows if t["variant"] == "ngram"), key=lambda t: t["bin_lo"])
        if not ngram:
            continue
        low = ngram[0]
        al_copy = float(harmonic_calibrate_ngram(low["seq_al"], low["mean_e"], 1.0, k=k["ngram"]))
        for variant, policy in SIM_POLICY.items():
            if variant == "eagle":
                continue
            mine = sorted((t for t in rows if t["variant"] == variant), key=lambda t: t["bin_lo"])
            if not mine:
                continue
            e = np.array([t["mean_e"] for t in mine])
            length = np.array([t["mean_tokens"] for t in mine])
            preds = {}
            ae = 1.0 if variant == "ngram" else al_eagle
            if ae is not None:
                preds["harmonic_pr"] = harmonic_al(np.clip(e, 0, 1), ae, al_copy).tolist()
            for prefix, fits in (theories or {}).items():
                for name, fit in (fits.get(policy) or {}).items():
                    if not predictive(name, fit):
                        continue
                    mf = saved_fit(fit)
                    preds[f"{prefix}{name}"] = np.asarray(mf.predict(np.clip(e, 0, 1), length), dtype=float).tolist()
            out[(binning, variant)] = {"bins": [t["bin"] for t in mine], "predictions": preds}
    return out


def errors(preds: dict, table: list[dict]) -> list[dict]:
    """Each model's error over bins against the rows of ``table`` (measured or simulated)."""
    out = []
    for (binning, variant), p in preds.items():
        by_bin = {t["bin"]: t["seq_al"] for t in table if t["binning"] == binning and t["variant"] == variant}
        ref = np.array([by_bin.get(b, np.nan) for b in p["bins"]], dtype=float)
        for model, values in p["predictions"].items():
            out.append({"binning": binning, "variant": variant, "model": model,
                        **model_error(np.array(values, dtype=float), ref)})
    return out


HELD_OUT_VARIANTS = ("ngram", "ngram-eagle", "ngram-eagle tree")


def fit_models(fit_t, al_eagle: float, k: dict, sim_doc: dict | None, hybrid: bool = True) -> dict[str, ModelFit]:
    """The predictive models fitted to one variant's per-bin measurement ``fit_t`` (a DataFrame of
    :func:`bin_table` rows): ``harmonic_fit`` (AL_eagle held at ``al_eagle``: 1 for n-gram alone, else the fitted
    prompts' EAGLE-1 AL), ``harmonic_free`` and, with ``sim_doc`` (a simulate_al.json), ``resync`` with its edit
    structure and new-share constants (its novel rate bounded by the longest draft of the variant, ``hybrid``
    or n-gram alone)."""
    models = {"harmonic_fit": fit_harmonic(fit_t["mean_e"], fit_t["seq_al"], al_eagle=al_eagle, k_ngram=k["ngram"],
                                           k_eagle=k["eagle"], n_boot=0),
              "harmonic_free": fit_harmonic(fit_t["mean_e"], fit_t["seq_al"], k_ngram=k["ngram"], k_eagle=k["eagle"],
                                            n_boot=0)}
    if sim_doc and "edit_structure" in sim_doc:
        models["resync"] = fit_resync(fit_t["mean_e"], fit_t["seq_al"], fit_t["mean_tokens"], k=k["ngram"],
                                      k_eagle=k["eagle"] if hybrid else None, share=sim_doc.get("new_share_constants"),
                                      n_boot=0, **sim_doc["edit_structure"])
    return models


def variant_fits(table, variant: str, eagle, k: dict, sim_doc: dict | None):
    """(``table``'s bins of ``variant``, :func:`fit_models` of them) with AL_eagle 1 for n-gram alone, else the
    pooled AL of the EAGLE-1 rows ``eagle``; None with fewer than 3 bins, or for a hybrid without EAGLE-1 rows."""
    part = table[table["variant"] == variant] if len(table) else table
    if len(part) < 3 or (variant != "ngram" and eagle.empty):
        return None
    return part, fit_models(part, 1.0 if variant == "ngram" else pooled_al(eagle), k, sim_doc, variant != "ngram")


# what every variant of one table shares: the config without the drafter's settings (the seed draws only sampled
# tokens and oversampled prompts, which the prompts' ids already tell)
SHARED_SETTINGS = tuple(key for key in results.MATCH_KEYS if key not in ("example_id", "seed"))


def mixed_configs(df, k: dict) -> str | None:
    """What keeps ``df``'s rows from one table per variant, in words: a variant whose rows hold more than one
    config or a prompt twice, variants run under other settings than each other (a config field outside the
    drafter's, as :data:`results.MATCH_KEYS` lists them, the seed aside), or draft lengths other than ``k``'s; None
    when there is nothing."""
    for variant, part in df.groupby("variant", sort=True):
        keys = sorted(part["config_key"].unique())
        if len(keys) > 1:
            return (f"variant {variant!r} holds rows of {len(keys)} configs (config keys {', '.join(keys)}; "
                    f"files {', '.join(sorted(set(part['file'])))}); give one config per method")
        if (twice := results.repeated_prompt(part)) is not None:
            return twice
    for key in SHARED_SETTINGS:
        if key in df and (values := sorted(set(df[key].astype(str)))) and len(values) > 1:
            return (f"the variants' rows differ in {key} ({', '.join(values)}); the table compares methods under one "
                    f"setting: give runs of one {key}")
    for drafter in ("ngram", "eagle"):
        drafted = sorted({int(v) for v in df[f"k_{drafter}"].dropna()})
        if drafted and drafted != [k[drafter]]:
            return f"the rows' {drafter} k is {drafted}, not --k-{drafter} {k[drafter]}"
    return None


def pooled_al(part) -> float:
    """Sequence-normalized AL of a set of rows: all their tokens over all their target passes."""
    return float(part["tokens"].sum() / part["passes"].sum())


def other_prompt_predictions(fit_df, table: list[dict], edges, k: dict, sim_doc: dict | None) -> dict:
    """Per (binning, variant) of ``HELD_OUT_VARIANTS``: the predictive models fitted to the runs of other prompts
    ``fit_df`` (:func:`fit_models`, AL_eagle their EAGLE-1 AL; binned by ``edges``) evaluated on the bins of
    ``table`` (the measured table of the runs scored), named ``other_<model>``, and ``other_bins``: each bin's AL in
    ``fit_df`` (NaN where it has none), the error left by the other prompts' bins themselves. Same layout as
    :func:`model_predictions`, with each fit's ``params``."""
    import pandas as pd

    eagle = fit_df[fit_df["variant"] == "eagle"]
    out = {}
    for binning in BINNINGS:
        fit_t = pd.DataFrame(bin_table(fit_df, edges, binning, n_boot=0))
        for variant in HELD_OUT_VARIANTS:
            mine = sorted((t for t in table if t["binning"] == binning and t["variant"] == variant),
                          key=lambda t: t["bin_lo"])
            fitted = variant_fits(fit_t, variant, eagle, k, sim_doc) if mine else None
            if fitted is None:
                continue
            a, models = fitted
            e = np.clip([t["mean_e"] for t in mine], 0, 1)
            length = np.array([t["mean_tokens"] for t in mine])
            preds = {f"other_{n}": np.asarray(m.predict(e, length), dtype=float).tolist() for n, m in models.items()}
            own = dict(zip(a["bin"], a["seq_al"]))
            preds["other_bins"] = [float(own.get(t["bin"], np.nan)) for t in mine]
            out[(binning, variant)] = {"bins": [t["bin"] for t in mine], "predictions": preds,
                                       "params": {n: m.params for n, m in models.items()}}
    return out


def in_sample_fits(df, edges, k: dict, sim_doc: dict | None) -> list[dict]:
    """Per (binning, variant) of ``HELD_OUT_VARIANTS``: the predictive models of :func:`fit_models` fitted (least
    squares) to the very bins they are then scored on, with their mean relative error over those bins and their
    parameters. Not predictions, since each fit sees the answer: how close a curve of each model's shape comes to
    this measurement at all. The same model fitted on other prompts has no smaller squared error over these bins
    (its mean relative error may come out smaller by chance; ``harmonic_fit`` elsewhere holds another AL_eagle)."""
    import pandas as pd

    eagle = df[df["variant"] == "eagle"]
    out = []
    for binning in BINNINGS:
        table = pd.DataFrame(bin_table(df, edges, binning, n_boot=0))
        for variant in HELD_OUT_VARIANTS:
            if (fitted := variant_fits(table, variant, eagle, k, sim_doc)) is None:
                continue
            part, models = fitted
            e, length, al = part["mean_e"].clip(0, 1), part["mean_tokens"], part["seq_al"].to_numpy()
            for name, m in models.items():
                out.append({"binning": binning, "variant": variant, "model": name, "params": m.params,
                            **model_error(np.asarray(m.predict(e, length), dtype=float), al)})
    return out


def sampling_floor(df, edges, n_boot: int, seed: int = 0) -> list[dict]:
    """Per (binning, variant): the mean relative error over bins that a model knowing each bin's true AL would
    show against a measurement of this many prompts, estimated by resampling each bin's prompts (as
    :func:`bin_table` does) and scoring the measured bins against every resample: the median, 2.5% and 97.5%
    quantiles over ``n_boot`` resamples (none: an empty list). A predictive model's error against the measurement
    cannot be expected below it."""
    rng = np.random.default_rng(seed)
    out = []
    if n_boot < 1:
        return out
    for binning in BINNINGS:
        binned = results.bin_edit_norm(df, edges, binning).dropna(subset=["bin"])
        for variant in (*HELD_OUT_VARIANTS, "eagle"):
            part = binned[binned["variant"] == variant]
            if part.empty:
                continue
            rel = np.zeros(n_boot)
            groups = [g for _, g in part.groupby("bin", observed=True)]
            for g in groups:
                tok, pas = g["tokens"].to_numpy(float), g["passes"].to_numpy(float)
                draw = rng.integers(0, len(g), size=(n_boot, len(g)))
                resampled = tok[draw].sum(1) / pas[draw].sum(1)
                rel += np.abs(tok.sum() / pas.sum() - resampled) / resampled
            rel /= len(groups)
            lo, med, hi = np.quantile(rel, [0.025, 0.5, 0.975])
            out.append({"binning": binning, "variant": variant, "bins": len(groups), "median": float(med),
                        "lo": float(lo), "hi": float(hi), "mean": float(rel.mean())})
    return out


def held_out_fits(df, edges, k: dict, sim_doc: dict | None, splits: int, seed: int = 0) -> dict:
    """The predictive models fitted to the runs' own prompts and scored on other prompts: over ``splits`` seeded
    random halves of the prompts, each of ``HELD_OUT_VARIANTS`` is fitted to the first half's per-bin corpus ALs
    (``harmonic_fit``: AL_eagle held at that half's EAGLE-1 AL, 1 for n-gram alone; ``harmonic_free``; with
    ``sim_doc``, a simulate_al.json, ``resync`` with its edit structure and new-share constants) and scored by
    the mean relative error over the second half's bins, beside ``sim_doc``'s own fits (``sim_*``, fitted on the
    real edits), a constant (the first half's corpus AL) and ``fit_half_bins`` (each bin's AL in the first half,
    where it has the bin: how far two halves' bins differ, the error that sampling alone leaves a model of the
    bins). One split is a noisy estimate (a half holds a few prompts per bin), so per (binning, variant, model)
    the result gives the median, 2.5% and 97.5% quantiles and mean of the splits' errors, the median number of
    bins scored and each parameter's median: ``{"splits", "seed", "prompts", "summary": [...]}``."""
    import pandas as pd

    ids = np.sort(df["example_id"].unique())
    sim_fits = {policy: {name: saved_fit(f) for name, f in fits.items() if predictive(name, f)}
                for policy, fits in ((sim_doc or {}).get("fits") or {}).items()}
    rows = []
    for split in range(splits):
        first = set(np.random.default_rng((seed, split)).permutation(ids)[: len(ids) // 2])
        halves = df[df["example_id"].isin(first)], df[~df["example_id"].isin(first)]
        eagle = halves[0][halves[0]["variant"] == "eagle"]
        for binning in BINNINGS:
            fit_t, test_t = (pd.DataFrame(bin_table(h, edges, binning, n_boot=0)) for h in halves)
            if fit_t.empty or test_t.empty:
                continue
            for variant in HELD_OUT_VARIANTS:
                b = test_t[test_t["variant"] == variant]
                fitted = variant_fits(fit_t, variant, eagle, k, sim_doc) if len(b) else None
                if fitted is None:
                    continue
                a, models = fitted
                models.update({f"sim_{n}": f for n, f in sim_fits.get(SIM_POLICY[variant], {}).items()})
                e, length, al = b["mean_e"].clip(0, 1), b["mean_tokens"], b["seq_al"].to_numpy()
                for name, mf in models.items():
                    pred = np.asarray(mf.predict(e, length), dtype=float)
                    own = {} if name.startswith("sim_") else {f"param_{p}": v for p, v in mf.params.items()}
                    rows.append({"binning": binning, "variant": variant, "model": name, "bins": len(b),
                                 "mean_rel": model_error(pred, al)["mean_rel"], **own})
                same_bin = b["bin"].map(dict(zip(a["bin"], a["seq_al"]))).to_numpy(dtype=float)
                for name, pred in (("constant", np.full(len(b), pooled_al(halves[0][halves[0]["variant"] == variant]))),
                                   ("fit_half_bins", same_bin)):
                    rows.append({"binning": binning, "variant": variant, "model": name, "bins": len(b),
                                 "mean_rel": model_error(pred, al)["mean_rel"]})
    summary = []
    if rows:
        table = pd.DataFrame(rows)
        for (binning, variant, model), g in table.groupby(["binning", "variant", "model"], sort=False):
            lo, med, hi = np.quantile(g["mean_rel"], [0.025, 0.5, 0.975])
            params = {c[len("param_"):]: float(g[c].median()) for c in g.columns
                      if c.startswith("param_") and g[c].notna().any()}
            summary.append({"binning": binning, "variant": variant, "model": model, "splits": len(g),
                            "median": float(med), "lo": float(lo), "hi": float(hi), "mean": float(g["mean_rel"].mean()),
                            "bins_median": float(g["bins"].median()), "params_median": params})
    return {"splits": splits, "seed": seed, "prompts": len(ids), "summary": summary}


def load_rows(paths, flag: str = "", **kw):
    """:func:`results.load_runs` of ``paths`` (given after ``flag``); ``ValueError`` naming them when they hold no
    row (a spec_bench run killed before its first row leaves an empty file), ``FileNotFoundError`` naming the flag
    and the path that names no file."""
    try:
        df = results.load_runs(paths, **kw)
    except FileNotFoundError as e:  # a path of the flag's that names no file
        raise FileNotFoundError(f"{flag}{e}") from None
    if df.empty:
        raise ValueError(f"{flag}{' '.join(map(str, paths))}: no results rows")
    return df


def main(argv=None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="spec_bench JSONL files (paths, folders or globs)")
    ap.add_argument("--bins", type=int, default=12, help="equal bins over [0, --max-e] (at least 8)")
    ap.add_argument("--max-e", type=float, default=0.6)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--k-ngram", type=int, default=5)
    ap.add_argument("--k-eagle", type=int, default=3)
    ap.add_argument("--theory", type=Path, default=None, help="simulate_al.json with models fitted on other prompts")
    ap.add_argument("--theory-by-state", type=Path, default=None,
                    help="a second simulate_al.json (run with --eagle-rates-by-state), its models named state_*")
    ap.add_argument("--exclude-prompts", nargs="+", default=(),
                    help="spec_bench JSONL files (paths, folders or globs) whose prompts are left out of the analysis")
    ap.add_argument("--change-request", choices=("located", "subject"), default="located",
                    help="how the runs' prompts were built, as spec_bench's --change-request (to rebuild them for "
                    "the simulation)")
    ap.add_argument("--no-sim", action="store_true", help="skip the trace simulation")
    ap.add_argument("--splits", type=int, default=0,
                    help="random halves of the prompts on which the models are fitted and the other half scored "
                    "(held_out; 0: none)")
    ap.add_argument("--fit-runs", nargs="+", default=(),
                    help="spec_bench JSONL files (paths, folders or globs) of the same configurations on other "
                    "prompts: the predictive models fitted to them (other_*) are scored on the runs (prompts that "
                    "the runs hold are left out of the fit)")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "zoo" / "al_by_edit_norm.json")
    a = ap.parse_args(argv)
    ap.check_output(a.out)
    if a.bins < 8:
        ap.error("--bins must be >= 8")
    if not 0 < a.max_e < float("inf"):
        ap.error(f"--max-e must be > 0, got {a.max_e}")
    if a.k_ngram < 1 or a.k_eagle < 1:
        ap.error(f"--k-ngram and --k-eagle must be >= 1, got {a.k_ngram} and {a.k_eagle}")
    if a.splits < 0:
        ap.error("--splits must be >= 0")
    if a.n_boot < 0:
        ap.error(f"--n-boot must be >= 0, got {a.n_boot}")
    theories, sim_docs = {}, {}  # prefix -> the simulate_al.json's fits, and the whole file (read once)
    for prefix, flag, path in (("sim_", "--theory", a.theory), ("state_", "--theory-by-state", a.theory_by_state)):
        if path is None:
            continue
        try:
            sim_docs[prefix] = json.loads(path.read_text())
            theories[prefix] = theory_fits(sim_docs[prefix])
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"{flag} {path}: not a simulate_al.json with fits ({type(e).__name__}: {e})")
    sim_doc = sim_docs.get("sim_")
    try:  # every results file read before any work: a missing one, or a line that is not a row, is one error line
        df = load_rows(a.runs, trace=True)  # the traces: EAGLE's acceptance by n-gram state
        left_out = set(load_rows(a.exclude_prompts, "--exclude-prompts ")["example_id"] if a.exclude_prompts else ())
        fit_df = load_rows(a.fit_runs, "--fit-runs ") if a.fit_runs else None
    except (FileNotFoundError, ValueError) as e:
        ap.error(str(e))
    excluded = set(df["example_id"]) & left_out
    df = df[~df["example_id"].isin(excluded)]
    if df.empty:
        ap.error("no rows in the given files" + (" outside --exclude-prompts" if left_out else ""))
    k = {"ngram": a.k_ngram, "eagle": a.k_eagle}
    if (problem := mixed_configs(df, k)) is not None:
        ap.error(problem)
    if fit_df is not None:  # the fits use only prompts that the runs do not hold
        shared = set(fit_df["example_id"]) & set(df["example_id"])
        fit_df = fit_df[~fit_df["example_id"].isin(shared)]
        if fit_df.empty:
            ap.error("--fit-runs: no rows on prompts other than the runs'")
        if (problem := mixed_configs(fit_df, k)) is not None:
            ap.error(f"--fit-runs: {problem}")
    if not a.no_sim:
        try:  # the simulation's prompts need the code edits and the runs' tokenizer: read before any work
            prompt_ids, skipped = rebuilt_prompts(df, a.change_request)
        except (OSError, ValueError) as e:
            ap.error(f"the simulation (--no-sim leaves it out): {e}")
    edges = np.linspace(0.0, a.max_e, a.bins + 1)
    measured = [t for c in BINNINGS for t in bin_table(df, edges, c, a.n_boot)]
    rates = eagle_rates(df)
    eagle_rows = df[df["variant"] == "eagle"]
    al_eagle = pooled_al(eagle_rows) if len(eagle_rows) else None
    preds = model_predictions(measured, theories, al_eagle, k)
    other = None
    if fit_df is not None:
        fitted = other_prompt_predictions(fit_df, measured, edges, k, sim_doc)
        for key, p in fitted.items():
            preds.setdefault(key, {"bins": p["bins"], "predictions": {}})["predictions"].update(p["predictions"])
        fit_eagle = fit_df[fit_df["variant"] == "eagle"]
        other = {"runs": list(a.fit_runs), "prompts": int(fit_df["example_id"].nunique()),
                 "shared_prompts_left_out": len(shared), "al_eagle": pooled_al(fit_eagle) if len(fit_eagle) else None,
                 "params": {f"{b}|{v}": p["params"] for (b, v), p in fitted.items()},
                 "measured": [t for c in BINNINGS for t in bin_table(fit_df, edges, c, a.n_boot)]}
    command = "python -m experiments.al_by_edit_norm " + shlex.join(sys.argv[1:] if argv is None else argv)
    doc = {"command": command, "run_info": run_info("cpu"), "runs": a.runs, "excluded_prompts": len(excluded),
           "bins": edges.tolist(), "k": k, "eagle_rates": rates,
           "al_eagle": al_eagle, "measured": measured, "predictions": {f"{b}|{v}": p for (b, v), p in preds.items()},
           "errors_vs_measured": errors(preds, measured), "sampling_floor": sampling_floor(df, edges, a.n_boot),
           "in_sample": in_sample_fits(df, edges, k, sim_doc)}
    if other:
        doc["other_prompts"] = other
    if not a.no_sim:
        sim_df = simulate_outputs(df, prompt_ids, k, rates)
        simulated = [t for c in BINNINGS for t in bin_table(sim_df, edges, c, a.n_boot)] if len(sim_df) else []
        doc.update(simulated=simulated, sim_skipped_prompts=skipped, errors_vs_simulated=errors(preds, simulated))
        # EAGLE's acceptance by what n-gram would do at the same step, and the simulation with those two rates
        by_state = eagle_by_ngram_state(df, prompt_ids, k["ngram"]) if "trace" in df else {}
        if {"first right", "novel"} <= set(by_state):
            state_df = simulate_outputs(df, prompt_ids, k, by_state["first right"]["rates"],
                                        by_state["novel"]["rates"])
            doc.update(eagle_by_ngram_state=by_state,
                       simulated_by_state=[t for c in BINNINGS for t in bin_table(state_df, edges, c, a.n_boot)])
    if a.splits:
        doc["held_out"] = held_out_fits(df, edges, k, sim_doc, a.splits)
    write_atomic(a.out, json.dumps(json_safe(doc), indent=1) + "\n")
    for t in measured:
        print(f"{t['binning']:16s} {t['variant']:18s} {t['bin']:14s} n={t['n']:3d} seq AL {t['seq_al']:.2f} "
              f"prec AL {t['precision_al']:.2f}")
    for e in doc["errors_vs_measured"]:
        print(f"{e['binning']:16s} {e['variant']:18s} {e['model']:22s} mean rel error {e['mean_rel']:.3f}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
