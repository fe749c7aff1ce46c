"""AL against the edit norm: measured runs per bin with bootstrap CIs, the trace simulation of the same prompts on
the target's own outputs beside them, and the analytic models over both.

    python -m experiments.al_by_edit_norm RUNS.jsonl... [--theory experiments/results/simulation/simulate_al.json]

``RUNS``: spec_bench JSONL files of several methods on the same code-edit prompts (greedy, so every method's
output is the target's one output). For each binning (the reference's edit norm, as the PR bins, and the
realised edit norm of each output against its input) and each variant: per bin the corpus sequence-normalized
AL (sum tokens / sum passes) and precision AL, with percentile CIs from resampling the bin's prompts. The
simulation replays each prompt's output (``output_tokens`` of the rows) after its prompt, rebuilt from
code_edits_dev.jsonl with ``--change-request`` (rows whose rebuilt prompt has another token count are left
out and counted), with EAGLE's per-position rates measured in the EAGLE-1 run. Models per bin: the PR's
harmonic model (AL_ngram calibrated on the lowest bin of the n-gram run, AL_eagle the EAGLE-1 run's AL) and,
with ``--theory``, the predictive models fitted by simulate_al.py on other prompts; each model's mean relative
error over bins against the measurement and against the simulation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from experiments import results
from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.results import bin_table  # noqa: F401  (the per-bin table with bootstrap CIs)
from experiments.simulate_al import json_safe
from hybridsd.analytic import harmonic_al, harmonic_calibrate_ngram
from hybridsd.fit import ModelFit, model_error

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


def simulate_outputs(df, change_request: str, k: dict, rates) -> tuple[object, int]:
    """Rows like ``df``'s, one per (prompt, simulated variant), from replaying each prompt's output; and the
    number of prompts left out because their rebuilt prompt has another token count."""
    import pandas as pd

    from hybridsd import data, prompts, zoo
    from hybridsd.edit_requests import located_request
    from hybridsd.simulate import SimConfig, simulate
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(zoo.path(df["model"].dropna().iloc[0] if "model" in df else None),
                                        local_files_only=True)
    by_id = {e.id: e for e in data.load_code_edits()}
    first = df.dropna(subset=["output_tokens"]).drop_duplicates("example_id")
    rows, skipped = [], 0
    for i, (_, r) in enumerate(first.iterrows()):
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
        for variant, policy in SIM_POLICY.items():
            if policy != "ngram" and rates is None:
                continue
            cfg = SimConfig(policy=policy, k_ngram=k["ngram"], k_eagle=k["eagle"],
                            eagle_rates=rates if rates else (0.0,) * k["eagle"])
            # EAGLE's draws seeded per prompt (as simulate_al's iter_simulate does), the same for every variant
            st = simulate(ids, r["output_tokens"], cfg, np.random.default_rng((cfg.seed, i)))
            rows.append({"variant": variant, "example_id": r["example_id"], "ref_edit_norm": r["ref_edit_norm"],
                         "output_edit_norm": r["output_edit_norm"], "tokens": st.num_tokens,
                         "passes": st.num_target_steps, "drafts": st.num_drafts, "accepted": st.num_accepted})
    return pd.DataFrame(rows), skipped


def model_predictions(table: list[dict], theory: dict | None, al_eagle: float | None, k: dict) -> dict:
    """Per (binning, variant): model -> per-bin predictions, from the measured table's bins."""
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
            for name, fit in ((theory or {}).get(policy) or {}).items():
                if name == "resync_runs" or fit["model"] not in ("harmonic", "resync"):
                    continue  # diagnostic models need each output's copied runs
                mf = ModelFit(model=fit["model"], params=fit["params"], ci={k_: tuple(v) for k_, v in fit["ci"].items()},
                              fitted=tuple(fit["fitted"]), settings=fit["settings"])
                preds[f"sim_{name}"] = np.asarray(mf.predict(np.clip(e, 0, 1), length), dtype=float).tolist()
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


def main(argv=None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="spec_bench JSONL files (paths or globs)")
    ap.add_argument("--bins", type=int, default=12, help="equal bins over [0, --max-e] (at least 8)")
    ap.add_argument("--max-e", type=float, default=0.6)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--k-ngram", type=int, default=5)
    ap.add_argument("--k-eagle", type=int, default=3)
    ap.add_argument("--theory", type=Path, default=None, help="simulate_al.json with models fitted on other prompts")
    ap.add_argument("--change-request", choices=("located", "subject"), default="located",
                    help="how the runs' prompts were built, as spec_bench's --change-request (to rebuild them for "
                    "the simulation)")
    ap.add_argument("--no-sim", action="store_true", help="skip the trace simulation")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "zoo" / "al_by_edit_norm.json")
    a = ap.parse_args(argv)
    if a.bins < 8:
        ap.error("--bins must be >= 8")
    df = results.load_runs(a.runs)
    if df.empty:
        print("no rows in the given files", file=sys.stderr)
        return 2
    edges = np.linspace(0.0, a.max_e, a.bins + 1)
    k = {"ngram": a.k_ngram, "eagle": a.k_eagle}
    measured = [t for c in BINNINGS for t in bin_table(df, edges, c, a.n_boot)]
    rates = eagle_rates(df)
    eagle_rows = df[df["variant"] == "eagle"]
    al_eagle = float(eagle_rows["tokens"].sum() / eagle_rows["passes"].sum()) if len(eagle_rows) else None
    theory = json.loads(a.theory.read_text())["fits"] if a.theory else None
    preds = model_predictions(measured, theory, al_eagle, k)
    doc = {"runs": a.runs, "bins": edges.tolist(), "k": k, "eagle_rates": rates, "al_eagle": al_eagle,
           "measured": measured, "predictions": {f"{b}|{v}": p for (b, v), p in preds.items()},
           "errors_vs_measured": errors(preds, measured)}
    if not a.no_sim:
        sim_df, skipped = simulate_outputs(df, a.change_request, k, rates)
        simulated = [t for c in BINNINGS for t in bin_table(sim_df, edges, c, a.n_boot)] if len(sim_df) else []
        doc.update(simulated=simulated, sim_skipped_prompts=skipped, errors_vs_simulated=errors(preds, simulated))
    a.out.parent.mkdir(parents=True, exist_ok=True)
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
