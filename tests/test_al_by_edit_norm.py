"""The AL-by-edit-norm analysis (experiments/al_by_edit_norm.py) on hand-made spec_bench rows: per-bin corpus
ALs and CIs against a loop over the rows, the harmonic model's calibration, errors, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pandas")
from experiments import al_by_edit_norm as ab  # noqa: E402

from experiments import results  # noqa: E402


def _row(method, i, ref_e, out_e, tokens, passes, drafts, accepted, per_pos):
    k = {"ngram": 5, "eagle": 3}
    return {"config_key": method, "example_id": f"ex{i}", "dataset": "code-edits", "ref_edit_norm": ref_e,
            "prompt_tokens": 10, "output_edit_norm": out_e,
            "stats": {"num_tokens": tokens, "num_target_steps": passes, "num_drafts": drafts,
                      "num_draft_tokens": 3 * drafts, "num_accepted": accepted, "accepted_per_position": per_pos,
                      "steps_by_drafter": {}},
            "tokens": list(range(tokens)), "config": {"method": method, "k": k, "model": "tiny-coder",
                                                      "device": "cpu", "output_len": 64}, "run_info": {}}


@pytest.fixture()
def runs(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for method in ("ngram", "eagle", "ngram-eagle"):
        rows = []
        for i in range(40):
            e = float(rng.uniform(0, 0.6))
            tokens = int(rng.integers(20, 200))
            drafts = int(rng.integers(1, 20))
            pos = sorted(rng.integers(0, drafts + 1, size=3).tolist(), reverse=True)
            passes = max(1, tokens - sum(pos))
            rows.append(_row(method, i, e, min(1.0, e * 1.1), tokens, passes, drafts, sum(pos), pos))
        p = tmp_path / f"{method}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(str(p))
    return paths


def test_bin_table_matches_a_loop_over_rows(runs):
    df = results.load_runs(runs)
    edges = np.linspace(0, 0.6, 9)
    table = ab.bin_table(df, edges, "ref_edit_norm", n_boot=200)
    rows = [json.loads(line) for p in runs for line in open(p)]
    for t in table:
        mine = [r for r in rows if r["config"]["method"] == t["variant"]
                and t["bin_lo"] <= r["ref_edit_norm"] < t["bin_hi"] + (1e-12 if t["bin_hi"] == 0.6 else 0)]
        assert t["n"] == len(mine)
        tok = sum(r["stats"]["num_tokens"] for r in mine)
        assert t["seq_al"] == pytest.approx(tok / sum(r["stats"]["num_target_steps"] for r in mine))
        assert t["precision_al"] == pytest.approx(1 + sum(r["stats"]["num_accepted"] for r in mine)
                                                  / sum(r["stats"]["num_drafts"] for r in mine))
        lo, hi = t["seq_al_ci"]
        assert lo <= t["seq_al"] <= hi or t["n"] == 1
    assert sum(t["n"] for t in table) == len(rows)


def test_rates_and_harmonic_predictions_pass_through_the_calibration_bin(runs):
    df = results.load_runs(runs)
    rates = ab.eagle_rates(df)
    assert len(rates) == 3 and all(a >= b for a, b in zip(rates, rates[1:]))
    table = ab.bin_table(df, np.linspace(0, 0.6, 9), "ref_edit_norm", n_boot=0)
    preds = ab.model_predictions(table, None, 2.0, {"ngram": 5, "eagle": 3})
    ngram = preds[("ref_edit_norm", "ngram")]["predictions"]["harmonic_pr"]
    lowest = min((t for t in table if t["variant"] == "ngram"), key=lambda t: t["bin_lo"])
    if lowest["seq_al"] < 6:  # not capped at k + 1
        assert ngram[0] == pytest.approx(lowest["seq_al"])
    hybrid = preds[("ref_edit_norm", "ngram-eagle")]
    assert len(hybrid["predictions"]["harmonic_pr"]) == len(hybrid["bins"])
    errs = ab.errors(preds, table)
    assert {e["model"] for e in errs} == {"harmonic_pr"} and all(e["n"] > 0 for e in errs)


def test_cli_writes_the_tables(runs, tmp_path):
    out = tmp_path / "fig.json"
    assert ab.main([*runs, "--no-sim", "--n-boot", "20", "--bins", "8", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["command"].startswith("python -m experiments.al_by_edit_norm ") and "--n-boot 20" in doc["command"]
    assert {"commit", "device", "torch"} <= set(doc["run_info"])
    assert {t["binning"] for t in doc["measured"]} == {"ref_edit_norm", "output_edit_norm"}
    eagle = [json.loads(line) for line in open(runs[1])]
    assert doc["al_eagle"] == pytest.approx(sum(r["stats"]["num_tokens"] for r in eagle)
                                            / sum(r["stats"]["num_target_steps"] for r in eagle))
    assert len(doc["bins"]) == 9 and doc["errors_vs_measured"]
    for bad in (["--bins", "4"], ["--splits", "-1"]):
        with pytest.raises(SystemExit):
            ab.main([*runs, *bad, "--out", str(out)])


def test_cli_leaves_out_prompts_and_adds_the_by_state_models(runs, tmp_path):
    """``--exclude-prompts`` drops the prompts of other runs before any table; ``--theory-by-state`` adds a second
    simulate_al file's models as ``state_*`` beside ``--theory``'s ``sim_*``; ``--splits`` adds the held-out fits,
    ``--theory``'s among them."""
    fit = {"model": "harmonic", "params": {"al_eagle": 2.0, "al_ngram": 5.0}, "ci": {}, "fitted": [],
           "settings": {"k_ngram": 5, "k_eagle": 3}}
    theory = tmp_path / "sim.json"
    theory.write_text(json.dumps({"fits": {p: {"harmonic_fit": fit} for p in ("ngram", "prefer-ngram", "tree")}}))
    other = tmp_path / "other.jsonl"
    other.write_text("".join(line for line in open(runs[0]) if json.loads(line)["example_id"] in ("ex0", "ex1")))
    out = tmp_path / "fig.json"
    assert ab.main([*runs, "--no-sim", "--n-boot", "0", "--bins", "8", "--theory", str(theory), "--theory-by-state",
                    str(theory), "--exclude-prompts", str(other), "--splits", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["excluded_prompts"] == 2
    held = {s["model"] for s in doc["held_out"]["summary"]}
    assert doc["held_out"]["prompts"] == 38 and {"sim_harmonic_fit", "harmonic_free", "constant"} <= held
    assert sum(t["n"] for t in doc["measured"] if (t["binning"], t["variant"]) == ("ref_edit_norm", "ngram")) == 38
    models = {e["model"] for e in doc["errors_vs_measured"]}
    assert models == {"harmonic_pr", "sim_harmonic_fit", "state_harmonic_fit"}
    pred = doc["predictions"]["ref_edit_norm|ngram-eagle"]["predictions"]
    assert pred["sim_harmonic_fit"] == pred["state_harmonic_fit"]  # the same fits, under both names


def test_held_out_constant_and_bins_match_a_loop_over_the_other_half(runs):
    """One split: the constant (the fit half's corpus AL) and ``fit_half_bins`` scored by a loop over the other
    half's rows; the fitted models are there, ``resync`` only with a simulation file; the same seed, the same
    result."""
    df = results.load_runs(runs)
    edges, k = np.linspace(0, 0.6, 9), {"ngram": 5, "eagle": 3}
    out = ab.held_out_fits(df, edges, k, None, splits=1)
    assert out == ab.held_out_fits(df, edges, k, None, splits=1) and out["prompts"] == 40
    rows = [json.loads(line) for path in runs for line in open(path)]
    ids = np.sort(np.unique([r["example_id"] for r in rows]))
    first = set(np.random.default_rng((0, 0)).permutation(ids)[:20])
    summary = {(s["binning"], s["variant"], s["model"]): s for s in out["summary"]}
    for variant in ("ngram", "ngram-eagle"):
        mine = [r for r in rows if r["config"]["method"] == variant]
        fit_rows = [r for r in mine if r["example_id"] in first]
        const = sum(r["stats"]["num_tokens"] for r in fit_rows) / sum(r["stats"]["num_target_steps"] for r in fit_rows)

        def bin_al(members, b):
            inside = [r for r in members if edges[b] <= r["ref_edit_norm"] < edges[b + 1]]
            return (sum(r["stats"]["num_tokens"] for r in inside) / sum(r["stats"]["num_target_steps"] for r in inside)
                    if inside else None)

        test_al = {b: bin_al([r for r in mine if r["example_id"] not in first], b) for b in range(8)}
        fit_al = {b: bin_al(fit_rows, b) for b in range(8)}
        scored = [b for b in range(8) if test_al[b] is not None]
        s = summary[("ref_edit_norm", variant, "constant")]
        assert s["splits"] == 1 and s["bins_median"] == len(scored)
        assert s["median"] == pytest.approx(np.mean([abs(const - test_al[b]) / test_al[b] for b in scored]))
        both = [b for b in scored if fit_al[b] is not None]
        assert summary[("ref_edit_norm", variant, "fit_half_bins")]["median"] == pytest.approx(
            np.mean([abs(fit_al[b] - test_al[b]) / test_al[b] for b in both]))
    models = {m for (_, _, m) in summary}
    assert {"harmonic_fit", "harmonic_free", "constant", "fit_half_bins"} <= models and "resync" not in models


def test_held_out_harmonic_fit_predicts_other_prompts_of_a_harmonic_corpus():
    """Rows whose AL follows the harmonic model exactly (equal tokens, so a bin's corpus AL is the model at its mean
    edit norm): the two-parameter fit on one half predicts the other half's bins to within fitting tolerance, over
    several splits, and recovers the parameters; the constant does not."""
    import pandas as pd

    from hybridsd.analytic import harmonic_al

    rng = np.random.default_rng(3)
    rows = []
    for i in range(64):
        e = float(rng.uniform(0, 0.6))
        for variant, (ae, an) in (("ngram", (1.6, 5.4)), ("ngram-eagle", (2.4, 5.2)), ("eagle", (2.4, 2.4))):
            al = float(harmonic_al(e, ae, an))
            rows.append({"variant": variant, "example_id": f"ex{i}", "ref_edit_norm": e, "output_edit_norm": e,
                         "tokens": 1000.0, "passes": 1000.0 / al, "drafts": 1, "accepted": 1,
                         "precision_al": al, "seq_al": al})
    out = ab.held_out_fits(pd.DataFrame(rows), np.linspace(0, 0.6, 9), {"ngram": 5, "eagle": 3}, None, splits=4)
    summary = {(s["binning"], s["variant"], s["model"]): s for s in out["summary"]}
    free = summary[("ref_edit_norm", "ngram", "harmonic_free")]
    assert free["hi"] < 1e-4 and free["params_median"]["al_eagle"] == pytest.approx(1.6, rel=1e-3)
    assert summary[("ref_edit_norm", "ngram", "constant")]["median"] > 0.05


def _harmonic_rows(ids, rng, spread=0.0):
    """Rows of n-gram, EAGLE-1 and the hybrid on prompts ``ids`` whose AL follows the harmonic model (times a
    random factor within ``spread``), with equal token counts so that a bin's corpus AL is the model at its mean e."""
    from hybridsd.analytic import harmonic_al

    rows = []
    for i in ids:
        e = float(rng.uniform(0, 0.6))
        for variant, (ae, an) in (("ngram", (1.6, 5.4)), ("ngram-eagle", (2.4, 5.2)), ("eagle", (2.4, 2.4))):
            al = float(harmonic_al(e, ae, an)) * (1 + spread * rng.uniform(-1, 1))
            rows.append({"variant": variant, "example_id": f"ex{i}", "ref_edit_norm": e, "output_edit_norm": e,
                         "tokens": 1000.0, "passes": 1000.0 / al, "drafts": 1, "accepted": 1,
                         "precision_al": al, "seq_al": al})
    return rows


def test_models_fitted_on_other_prompts_predict_a_harmonic_corpus():
    """The models fitted to other prompts of the same harmonic corpus predict the scored prompts' bins to fitting
    tolerance (the free fit recovers both constants); ``other_bins`` are the other prompts' own bin ALs, compared
    with a loop over their rows."""
    import pandas as pd

    rng = np.random.default_rng(5)
    edges, k = np.linspace(0, 0.6, 9), {"ngram": 5, "eagle": 3}
    fit_rows, scored = _harmonic_rows(range(64), rng), pd.DataFrame(_harmonic_rows(range(100, 148), rng))
    table = ab.bin_table(scored, edges, "ref_edit_norm", n_boot=0) + ab.bin_table(scored, edges, "output_edit_norm",
                                                                                   n_boot=0)
    preds = ab.other_prompt_predictions(pd.DataFrame(fit_rows), table, edges, k, None)
    for variant, ae in (("ngram", 1.6), ("ngram-eagle", 2.4)):
        p = preds[("ref_edit_norm", variant)]
        measured = {t["bin"]: t["seq_al"] for t in table if (t["binning"], t["variant"]) == ("ref_edit_norm", variant)}
        got = np.array(p["predictions"]["other_harmonic_free"])
        assert got == pytest.approx([measured[b] for b in p["bins"]], rel=1e-4)
        assert p["params"]["harmonic_free"]["al_eagle"] == pytest.approx(ae, rel=1e-3)
        for b, al in zip(p["bins"], p["predictions"]["other_bins"]):
            lo = next(t["bin_lo"] for t in table if t["bin"] == b)
            hi = next(t["bin_hi"] for t in table if t["bin"] == b)
            inside = [r for r in fit_rows if r["variant"] == variant and lo <= r["ref_edit_norm"] < hi]
            want = sum(r["tokens"] for r in inside) / sum(r["passes"] for r in inside) if inside else np.nan
            assert al == pytest.approx(want, nan_ok=True)
    assert set(preds[("ref_edit_norm", "ngram")]["predictions"]) == {"other_harmonic_fit", "other_harmonic_free",
                                                                      "other_bins"}


def test_in_sample_fits_match_a_harmonic_corpus_and_no_fit_on_other_prompts_beats_them():
    """Fitted to the bins they are scored on, the harmonic models meet a corpus that follows them exactly; on a noisy
    corpus the free harmonic curve fitted elsewhere has no smaller squared error over these bins than its in-sample
    fit (least squares), while the in-sample records keep their parameters."""
    import pandas as pd

    rng = np.random.default_rng(7)
    edges, k = np.linspace(0, 0.6, 9), {"ngram": 5, "eagle": 3}
    exact = ab.in_sample_fits(pd.DataFrame(_harmonic_rows(range(60), rng)), edges, k, None)
    assert {(f["binning"], f["variant"], f["model"]) for f in exact} == {
        (b, v, m) for b in ab.BINNINGS for v in ("ngram", "ngram-eagle") for m in ("harmonic_fit", "harmonic_free")}
    free = {(f["binning"], f["variant"]): f for f in exact if f["model"] == "harmonic_free"}
    assert all(f["mean_rel"] < 1e-4 for f in free.values())
    assert free["ref_edit_norm", "ngram"]["params"]["al_ngram"] == pytest.approx(5.4, rel=1e-3)

    noisy = pd.DataFrame(_harmonic_rows(range(60), rng, spread=0.3))
    table = ab.bin_table(noisy, edges, "ref_edit_norm", n_boot=0)
    other = ab.other_prompt_predictions(pd.DataFrame(_harmonic_rows(range(100, 160), rng, spread=0.3)), table, edges,
                                        k, None)
    inside = {f["variant"]: f for f in ab.in_sample_fits(noisy, edges, k, None)
              if f["binning"] == "ref_edit_norm" and f["model"] == "harmonic_free"}
    for variant in ("ngram", "ngram-eagle"):
        measured = np.array([t["seq_al"] for t in table if t["variant"] == variant])
        elsewhere = np.array(other[("ref_edit_norm", variant)]["predictions"]["other_harmonic_free"])
        assert inside[variant]["rmse"] <= np.sqrt(np.mean((elsewhere - measured) ** 2)) + 1e-9


def test_sampling_floor_is_zero_without_spread_and_the_exact_expectation_for_two_prompts():
    """Prompts of a bin with one AL leave no sampling error; a bin of two prompts has four equally likely
    resamples, whose mean error the estimate approaches."""
    import pandas as pd

    edges = np.linspace(0, 0.6, 9)
    same = pd.DataFrame([{"variant": v, "example_id": f"ex{i}", "ref_edit_norm": i / 70, "output_edit_norm": i / 70,
                          "tokens": 100.0 * (1 + i % 3), "passes": 25.0 * (1 + i % 3) * (1 + int(i / 70 / 0.075)),
                          "drafts": 1, "accepted": 1} for i in range(40) for v in ("ngram", "eagle")])
    floor = ab.sampling_floor(same, edges, n_boot=50)
    assert len(floor) == 4 and all(f["hi"] == pytest.approx(0, abs=1e-12) for f in floor)
    two = pd.DataFrame([{"variant": "ngram", "example_id": f"ex{i}", "ref_edit_norm": 0.01, "output_edit_norm": 0.01,
                         "tokens": t, "passes": p, "drafts": 1, "accepted": 1} for i, (t, p) in
                        enumerate(((100.0, 25.0), (300.0, 150.0)))])
    measured = 400 / 175
    outcomes = [100 / 25, 400 / 175, 400 / 175, 300 / 150]  # {a,a}, {a,b}, {b,a}, {b,b}
    want = np.mean([abs(measured - al) / al for al in outcomes])
    (got,) = [f for f in ab.sampling_floor(two, edges, n_boot=20000) if f["binning"] == "ref_edit_norm"]
    assert got["bins"] == 1 and got["mean"] == pytest.approx(want, rel=0.03)


def test_cli_scores_models_fitted_on_other_prompts(runs, tmp_path, capsys):
    """``--fit-runs``: the prompts that the scored runs hold are left out of the fit and counted; the other_* models
    are scored beside the PR's; the sampling floor is written; a missing results or theory file is one error line
    and exit code 2, nothing written; no other prompt left is one error line too."""
    other = tmp_path / "other.jsonl"
    rows = [json.loads(line) for path in runs for line in open(path)]
    moved = [dict(r, example_id=r["example_id"].replace("ex", "other")) for r in rows]
    other.write_text("".join(json.dumps(r) + "\n" for r in moved + rows[:3]))
    out = tmp_path / "fig.json"
    assert ab.main([*runs, "--no-sim", "--n-boot", "10", "--bins", "8", "--fit-runs", str(other),
                    "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["other_prompts"]["prompts"] == 40 and doc["other_prompts"]["shared_prompts_left_out"] == 3
    models = {e["model"] for e in doc["errors_vs_measured"]}
    assert {"harmonic_pr", "other_harmonic_fit", "other_harmonic_free", "other_bins"} <= models
    bins = [e for e in doc["errors_vs_measured"] if e["model"] == "other_bins"]
    assert all(e["mean_rel"] == 0 for e in bins)  # the same rows under other ids: the same bins
    assert {(f["binning"], f["variant"]) for f in doc["sampling_floor"]} >= {("ref_edit_norm", "ngram")}
    assert {(f["binning"], f["variant"], f["model"]) for f in doc["in_sample"]} >= {
        ("ref_edit_norm", "ngram", "harmonic_free"), ("output_edit_norm", "ngram-eagle", "harmonic_fit")}
    for bad, name in ((["--fit-runs", str(tmp_path / "nothing*.jsonl")], "nothing"),
                      (["--theory", str(tmp_path / "no_sim.json")], "no_sim.json"),
                      ([str(tmp_path / "none.jsonl")], "none")):
        with pytest.raises(SystemExit) as exit_:
            ab.main([*runs, "--no-sim", *bad, "--out", str(tmp_path / "bad.json")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and name in err[0] and not (tmp_path / "bad.json").exists()
    only_shared = tmp_path / "shared.jsonl"
    only_shared.write_text(open(runs[0]).read())
    with pytest.raises(SystemExit) as exit_:
        ab.main([*runs, "--no-sim", "--n-boot", "0", "--fit-runs", str(only_shared), "--out", str(tmp_path / "s.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and not (tmp_path / "s.json").exists()
    assert "error: --fit-runs: no rows on prompts other than the runs'" in err[0]


def test_simulated_prompts_draw_eagle_apart(monkeypatch):
    """The trace simulation of the measured outputs draws EAGLE's acceptances per prompt: two prompts with the same
    text and output get different draws (one shared seed gave every prompt the same first draws), and each prompt
    the same draws in every variant."""
    pd = pytest.importorskip("pandas")
    from hybridsd import data
    from hybridsd.data import Example

    before, after = "def f(x):\n    return x\n" * 20, "def f(x):\n    return x + 1\n" * 20
    exs = [Example(id=f"ex{i}", source="code-edits", prompt="", reference=after, edit_norm=0.1, input_text=before,
                   meta={"instruction": "Add one"}) for i in range(2)]
    monkeypatch.setattr(data, "load_code_edits", lambda *a, **k: exs)
    from hybridsd import prompts, zoo
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(zoo.path(), local_files_only=True)
    ids = prompts.build_prompt_ids(tok, data.blazedit_prompt(before, "Add one"))
    out = tok(after, add_special_tokens=False)["input_ids"]
    df = pd.DataFrame([{"example_id": e.id, "output_tokens": out, "prompt_tokens": len(ids), "ref_edit_norm": 0.1,
                        "output_edit_norm": 0.1} for e in exs])
    prompt_ids, skipped = ab.rebuilt_prompts(df, "subject")
    assert skipped == 0 and sorted(prompt_ids) == ["ex0", "ex1"]
    sim = ab.simulate_outputs(df, prompt_ids, {"ngram": 5, "eagle": 3}, (0.6, 0.4, 0.2))
    eagle = sim[sim["variant"] == "eagle"].set_index("example_id")
    assert eagle.loc["ex0", "accepted"] != eagle.loc["ex1", "accepted"]
    assert ab.simulate_outputs(df, prompt_ids, {"ngram": 5, "eagle": 3}, (0.6, 0.4, 0.2)).equals(sim)


def test_eagle_acceptance_by_ngram_state_on_a_hand_traced_run():
    """A hand-made EAGLE run: at each step the n-gram state worked out by hand (no draft, first token wrong or
    right against the output), EAGLE's accepted counts pooled per state into per-position rates."""
    pd = pytest.importorskip("pandas")
    prompt = np.arange(10, 20)
    out = [10, 11, 12, 13, 14, 15, 16, 17, 40, 41, 42, 43, 44]
    # steps at output positions 1 (no earlier [19, 10]: no draft), 3 ([10, 11, 12] in the prompt: 13, right),
    # 7 ([12..16]: 17, right), 8 ([13..17]: 18 against 40, wrong) and 11 (no draft)
    trace = [["eagle1", 3, 1], ["eagle1", 3, 3], ["eagle1", 3, 0], ["eagle1", 3, 2], ["eagle1", 1, 1]]
    df = pd.DataFrame([{"variant": "eagle", "example_id": "ex0", "output_tokens": out, "trace": trace},
                       {"variant": "ngram", "example_id": "ex0", "output_tokens": out, "trace": [["ngram", 5, 5]]}])
    got = ab.eagle_by_ngram_state(df, {"ex0": prompt}, k_ngram=5)
    assert {s: (v["steps"], v["drafts"]) for s, v in got.items()} == {
        "no draft": (2, 2), "first wrong": (1, 1), "first right": (2, 2), "novel": (3, 3)}
    assert got["first right"]["rates"] == pytest.approx([0.5, 0.5, 0.5])
    assert got["novel"]["rates"] == pytest.approx([1.0, 1 / 3])
    assert got["novel"]["mean_accepted"] == pytest.approx(4 / 3)
    assert ab.k_rates(got["novel"]["rates"], 3) == pytest.approx([1.0, 1 / 3, 0.0])  # as the simulation takes them
    assert ab.k_rates(None, 2) == [0.0, 0.0]


def _refused(capsys, exit_) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _changed(path, out, **config):
    """``path``'s rows with ``config`` in their config (and config key), prompts renamed with ``-other`` when
    ``other`` is given, written to ``out``."""
    rows = [json.loads(line) for line in open(path)]
    other = config.pop("other", False)
    for r in rows:
        r["config"].update(config)
        r["config_key"] += "".join(f"-{v}" for v in config.values())
        r["example_id"] += "-other" if other else ""
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(out)


@pytest.mark.parametrize("case, words", [
    ("two configs", "variant 'eagle' holds rows of 2 configs"),
    ("a prompt twice", "variant 'eagle' holds prompt 'ex0' more than once"),
    ("another k", "the rows' ngram k is [4], not --k-ngram 5"),
    ("two configs to fit", "--fit-runs: variant 'eagle' holds rows of 2 configs"),
    ("another output length", "the variants' rows differ in output_len (64, 999); the table compares methods"),
    ("negative n-boot", "--n-boot must be >= 0"),
    ("no data to simulate", "data directory /nonexistent not found")])
def test_runs_that_are_not_one_table_per_variant_are_refused_before_any_work(case, words, runs, tmp_path, capsys,
                                                                            monkeypatch):
    """Runs whose variant holds two configs (single and doubled BOS) or a prompt twice, a draft length other than
    --k-ngram, variants of two output lengths, a negative --n-boot, and the simulation's data missing: one line,
    exit code 2, before any table."""
    monkeypatch.setattr(ab, "bin_table", lambda *a, **k: pytest.fail("made a table"))
    monkeypatch.setenv("HYBRIDSD_DATA", "/nonexistent")
    argv = {
        "two configs": [*runs, _changed(runs[1], tmp_path / "doubled.jsonl", bos_mode="doubled")],
        "a prompt twice": [*runs, str(tmp_path / "again.jsonl")],
        "another k": [_changed(runs[0], tmp_path / "k4.jsonl", k={"ngram": 4}), runs[1]],
        "two configs to fit": [*runs, "--fit-runs", _changed(runs[1], tmp_path / "o1.jsonl", other=True),
                               _changed(runs[1], tmp_path / "o2.jsonl", bos_mode="doubled", other=True)],
        "another output length": [runs[0], _changed(runs[1], tmp_path / "long.jsonl", output_len=999)],
        "negative n-boot": [*runs, "--n-boot", "-1"],
        "no data to simulate": runs}[case]
    (tmp_path / "again.jsonl").write_text(open(runs[1]).readline())
    out = tmp_path / "al.json"
    with pytest.raises(SystemExit) as exit_:
        ab.main([*argv, *([] if case == "no data to simulate" else ["--no-sim"]), "--out", str(out)])
    assert words in _refused(capsys, exit_)
    assert not out.exists()


@pytest.mark.parametrize("flag", [None, "--exclude-prompts", "--fit-runs"])
def test_a_missing_results_path_is_named_with_its_flag(flag, runs, tmp_path, capsys):
    """A path that names no file, as the runs, --exclude-prompts or --fit-runs: one line naming the flag and the
    path, exit code 2."""
    missing = tmp_path / "nowhere.jsonl"
    argv = [str(missing)] if flag is None else [*runs, flag, str(missing)]
    with pytest.raises(SystemExit) as exit_:
        ab.main([*argv, "--no-sim", "--out", str(tmp_path / "al.json")])
    assert f"error: {'' if flag is None else flag + ' '}results file {missing} not found" in _refused(capsys, exit_)


def test_the_cpu_analysis_records_the_cpu(runs, tmp_path, monkeypatch):
    """On a machine with a GPU, the analysis (numpy, on the CPU) records the CPU as its device."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "FakeGPU")
    out = tmp_path / "al.json"
    assert ab.main([*runs, "--no-sim", "--n-boot", "0", "--bins", "8", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["run_info"]["device"].startswith("cpu (")


@pytest.mark.parametrize("flag", [None, "--exclude-prompts", "--fit-runs"])
def test_an_empty_results_file_is_refused_before_any_work(flag, runs, tmp_path, capsys, monkeypatch):
    """An empty results file (a spec_bench run killed before its first row), as the runs, --exclude-prompts or
    --fit-runs: one line naming it, exit code 2, before any table."""
    monkeypatch.setattr(ab, "bin_table", lambda *a, **k: pytest.fail("made a table"))
    empty = tmp_path / "killed.jsonl"
    empty.write_text("")
    argv = [str(empty)] if flag is None else [*runs, flag, str(empty)]
    out = tmp_path / "al.json"
    with pytest.raises(SystemExit) as exit_:
        ab.main([*argv, "--no-sim", "--out", str(out)])
    assert f"{'' if flag is None else flag + ' '}{empty}: no results rows" in _refused(capsys, exit_)
    assert not out.exists()


@pytest.mark.parametrize("params", [[1, 2], {"al_eagle": 2.0}])
def test_a_theory_whose_params_are_not_a_fit_is_refused_before_any_work(params, runs, tmp_path, capsys,
                                                                         monkeypatch):
    """A simulate_al.json (the stored one) whose predictive fits' params are a list, or lack a parameter: one line
    naming the file and the fit, exit code 2, before any table."""
    monkeypatch.setattr(ab, "bin_table", lambda *a, **k: pytest.fail("made a table"))
    doc = json.loads((ab.REPO / "experiments" / "results" / "simulation" / "simulate_al.json").read_text())
    for fit in doc["fits"]["ngram"].values():
        fit["params"] = params
    theory = tmp_path / "sim.json"
    theory.write_text(json.dumps(doc))
    out = tmp_path / "al.json"
    with pytest.raises(SystemExit) as exit_:
        ab.main([*runs, "--no-sim", "--theory", str(theory), "--out", str(out)])
    err = _refused(capsys, exit_)
    assert f"--theory {theory}" in err and "fits['ngram']" in err
    assert not out.exists()


def test_the_resync_fit_bounds_its_novel_rate_by_the_variants_longest_draft():
    """The re-sync fit's novel rate is tokens per pass: at most k_ngram + 1 for n-gram alone and
    max(k_ngram, k_eagle) + 1 for a hybrid (it used to be free up to 64 for both)."""
    import pandas as pd

    from hybridsd.analytic import resync_al

    e = np.linspace(0.05, 0.55, 8)
    sim_doc = {"edit_structure": {"segment_len": 30.0, "base_edits": 1.0}}
    table = pd.DataFrame({"mean_e": e, "mean_tokens": 400.0,
                          "seq_al": resync_al(e, 400.0, k=1, segment_len=30.0, base_edits=1.0, resync=2.0,
                                              novel_rate=3.5)})
    k = {"ngram": 1, "eagle": 3}
    alone = ab.fit_models(table, 1.0, k, sim_doc, hybrid=False)["resync"]
    hybrid = ab.fit_models(table, 2.0, k, sim_doc, hybrid=True)["resync"]
    assert alone.params["novel_rate"] <= 2.0 and "k_eagle" not in alone.settings
    assert hybrid.params["novel_rate"] == pytest.approx(3.5, rel=1e-4) and hybrid.settings["k_eagle"] == 3


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n_bins=st.integers(1, 9), top=st.sampled_from([0.6, 0.25, 1.0]))
def test_bin_table_bins_like_a_loop_over_half_open_edges(data, n_bins, top):
    """Each row lands in the bin ``[lo, hi)`` holding its edit norm, the last bin closed (e exactly on an edge goes
    up, e = top into the last bin, e above the top or NaN nowhere); empty bins are left out, and a bin of one prompt
    has that prompt's AL and a CI of one point."""
    import pandas as pd

    edges = np.linspace(0.0, top, n_bins + 1)
    values = data.draw(st.lists(st.one_of(st.sampled_from(list(edges)), st.floats(0.0, 1.0), st.just(float("nan"))),
                                min_size=1, max_size=12))
    rows = [{"variant": "ngram", "example_id": f"ex{i}", "ref_edit_norm": e, "tokens": 10.0 + i, "passes": 5.0,
             "drafts": 1.0, "accepted": 1.0} for i, e in enumerate(values)]
    table = results.bin_table(pd.DataFrame(rows), edges, "ref_edit_norm", n_boot=5)

    def slow_bin(e):
        for i in range(n_bins):
            if edges[i] <= e < edges[i + 1] or (i == n_bins - 1 and e == edges[-1]):
                return i
        return None

    want: dict[int, list[int]] = {}
    for i, e in enumerate(values):
        if (b := slow_bin(e)) is not None:
            want.setdefault(b, []).append(i)
    got = {int(np.searchsorted(edges, t["bin_lo"])): t for t in table}
    assert sorted(got) == sorted(want)
    for b, members in want.items():
        t = got[b]
        assert t["n"] == len(members) and (t["bin_lo"], t["bin_hi"]) == (edges[b], edges[b + 1])
        assert t["seq_al"] == pytest.approx(sum(10.0 + i for i in members) / (5.0 * len(members)))
        assert t["bin"].endswith("]" if b == n_bins - 1 else ")")
        if len(members) == 1:
            assert t["seq_al_ci"] == pytest.approx([t["seq_al"]] * 2)
