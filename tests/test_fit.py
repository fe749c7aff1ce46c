"""Fitting the analytic AL models: parameters recovered from synthetic measurements, bootstrap intervals, bounds
and errors, and the error summary."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hybridsd.fit as fit_module
from hybridsd.analytic import harmonic_al, new_share, resync_al, resync_passes
from hybridsd.fit import (ModelFit, RunsFit, fit_edit_structure, fit_harmonic, fit_new_share, fit_resync,
                          fit_resync_runs, model_error)

HYP = settings(max_examples=60, deadline=None)


def test_fit_harmonic_recovers_parameters():
    e = np.linspace(0.02, 0.6, 12)
    rng = np.random.default_rng(0)
    y = harmonic_al(e, 2.4, 5.5) + rng.normal(0, 0.01, e.size)
    fit = fit_harmonic(e, y, n_boot=100)
    assert fit.params == pytest.approx({"al_eagle": 2.4, "al_ngram": 5.5}, rel=0.03)
    assert fit.fitted == ("al_eagle", "al_ngram")
    for name, true in (("al_eagle", 2.4), ("al_ngram", 5.5)):
        lo, hi = fit.ci[name]
        assert lo <= fit.params[name] <= hi and hi - lo < 0.5
    assert fit.predict(e) == pytest.approx(harmonic_al(e, **fit.params))
    fixed = fit_harmonic(e, y, al_eagle=1.0, n_boot=0)
    assert fixed.params["al_eagle"] == 1.0 and fixed.fitted == ("al_ngram",) and fixed.ci == {}
    assert fixed.as_dict()["params"]["al_eagle"] == 1.0


def test_fit_harmonic_with_bootstrap_replicates_and_errors():
    e = np.linspace(0.0, 0.6, 10)
    y = harmonic_al(e, 2.0, 5.0)
    reps = y + np.random.default_rng(1).normal(0, 0.02, (30, e.size))
    fit = fit_harmonic(e, y, boot=reps)
    assert fit.n_boot == 30
    assert fit.ci["al_ngram"][0] < 5.0 < fit.ci["al_ngram"][1]
    with pytest.raises(ValueError):
        fit_harmonic(e, y, boot=reps[:, :3])
    with pytest.raises(ValueError):
        fit_harmonic(e, y[:3])
    with pytest.raises(ValueError):
        fit_harmonic(e[:1], y[:1])  # two parameters, one point
    with pytest.raises(ValueError):
        ModelFit(model="nope", params={}, ci={}, fitted=())


def test_fit_resync_recovers_parameters():
    e = np.tile(np.linspace(0.02, 0.6, 10), 2)
    length = np.repeat([300.0, 900.0], 10)
    truth = {"resync": 6.0, "novel_rate": 2.2}
    structure = {"segment_len": 30.0, "base_edits": 3.0}
    y = resync_al(e, length, k=5, **structure, **truth)
    fit = fit_resync(e, y, length, k=5, n_boot=20, **structure)
    assert {n: fit.params[n] for n in truth} == pytest.approx(truth, rel=1e-3)
    assert fit.rmse < 1e-6
    assert fit.predict(e, length) == pytest.approx(y)
    assert set(fit.ci) == set(truth)
    with pytest.raises(ValueError):
        fit_resync(e, y, length, k=5, weights=-1.0, **structure)


def test_fit_edit_structure_recovers_parameters():
    rng = np.random.default_rng(2)
    e, length = rng.uniform(0, 0.6, 200), rng.uniform(100, 1000, 200)
    assert fit_edit_structure(e, length, 3 + e * length / 25) == pytest.approx(
        {"base_edits": 3.0, "segment_len": 25.0})
    with pytest.raises(ValueError):
        fit_edit_structure(e, length, np.full(200, 3.0))


def test_fit_resync_runs_recovers_parameters():
    rng = np.random.default_rng(3)
    runs, length, groups = [], [], []
    for g in range(8):
        for _ in range(25):
            r = rng.geometric(1 / (150 - 15 * g), size=rng.integers(2, 8))
            new = rng.integers(1, 10 + 10 * g, size=r.size).sum()
            runs.append(r.tolist())
            length.append(r.sum() + new)
            groups.append(g)
    length, groups = np.array(length), np.array(groups)
    truth = {"resync": 4.0, "novel_rate": 2.0}
    passes = resync_passes(runs, length, k=5, **truth)
    y = np.bincount(groups, weights=length) / np.bincount(groups, weights=passes)
    fit = fit_resync_runs(runs, length, groups, y, k=5, n_boot=10)
    assert isinstance(fit, RunsFit)
    assert {n: fit.params[n] for n in truth} == pytest.approx(truth, abs=0.05)
    assert fit.predict(runs, length, groups) == pytest.approx(y, rel=1e-3)
    assert fit.predict(runs, length) == pytest.approx(length / passes, rel=1e-2)
    skip = groups.copy()
    skip[:25] = -1
    assert np.isnan(fit.predict(runs, length, skip)[0])
    with pytest.raises(ValueError):
        fit_resync_runs(runs, length, groups, y[:3], k=5)
    with pytest.raises(ValueError, match="novel_rate=100.0 lies outside its range"):
        fit_resync_runs(runs, length, groups, y, k=5, novel_rate=100.0)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 5.5"):
        fit_resync_runs(runs, length, groups, y, k=5.5)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 5.5"):
        fit_resync([0.1, 0.2], [3.0, 2.5], k=5.5)


def test_model_error():
    err = model_error([1.0, 2.0, 4.0, np.nan], [1.0, 3.0, 2.0, 5.0])
    assert err == pytest.approx({"mae": 1.0, "rmse": np.sqrt(5 / 3), "max_abs": 2.0, "mean_rel": (1 / 3 + 1) / 3,
                                 "n": 3})
    assert model_error([np.nan], [1.0])["n"] == 0
    with pytest.raises(ValueError):
        model_error([1.0], [1.0, 2.0])


@HYP
@given(x=st.lists(st.floats(1.0, 10.0), min_size=1, max_size=20))
def test_model_error_of_exact_predictions_is_zero(x):
    err = model_error(x, x)
    assert err["mae"] == err["rmse"] == err["max_abs"] == err["mean_rel"] == 0.0


# ---- review fixes: bounds, calibration point, new-token share ------------------------------------------


def test_harmonic_fit_keeps_each_al_within_k_plus_one():
    e = np.linspace(0.0, 0.3, 8)
    y = 1.0 / (e + (1 - e) / 9.0)  # n-gram alone with a copy rate no k=5 pass can reach
    unbounded = fit_harmonic(e, y, al_eagle=1.0, n_boot=0)
    assert unbounded.params["al_ngram"] > 6.0  # what the bare fit does
    bounded = fit_harmonic(e, y, al_eagle=1.0, k_ngram=5, n_boot=20)
    assert bounded.params["al_ngram"] <= 6.0 + 1e-9 and bounded.ci["al_ngram"][1] <= 6.0 + 1e-9
    both = fit_harmonic(e, 1.0 / (e / 5.0 + (1 - e) / 9.0), k_ngram=5, k_eagle=3, n_boot=0)
    assert both.params["al_ngram"] <= 6.0 + 1e-9 and both.params["al_eagle"] <= 4.0 + 1e-9
    assert both.settings == {"k_ngram": 5.0, "k_eagle": 3.0}
    with pytest.raises(ValueError, match="al_ngram=7.0 lies outside"):
        fit_harmonic(e, y, al_eagle=1.0, al_ngram=7.0, k_ngram=5)
    with pytest.raises(ValueError, match="k_ngram"):
        fit_harmonic(e, y, k_ngram=0)


def test_new_share_constants_are_recovered_and_clipped():
    rng = np.random.default_rng(0)
    e = rng.uniform(0, 0.6, 300)
    y = np.clip(0.02 + 1.7 * e + rng.normal(0, 0.01, e.size), 0, 1)
    c = fit_new_share(e, y)
    assert c["share_intercept"] == pytest.approx(0.02, abs=0.01) and c["share_slope"] == pytest.approx(1.7, abs=0.05)
    assert new_share(np.array([0.0, 0.9]), **c) == pytest.approx([c["share_intercept"], 1.0])
    with pytest.raises(ValueError, match="new_share"):
        fit_new_share(e, y + 1)
    with pytest.raises(ValueError, match="share_slope"):
        new_share(0.1, share_intercept=0.0, share_slope=-1.0)


def test_fit_resync_converts_a_character_edit_norm_to_the_new_token_share():
    share = {"share_intercept": 0.01, "share_slope": 1.6}
    structure = {"segment_len": 25.0, "base_edits": 1.5}
    e_char = np.linspace(0.02, 0.35, 10)
    length = np.full(e_char.size, 600.0)
    y = resync_al(new_share(e_char, **share), length, k=5, resync=6.0, novel_rate=1.0, **structure)
    fit = fit_resync(e_char, y, length, k=5, novel_rate=1.0, share=share, n_boot=0, **structure)
    assert fit.params["resync"] == pytest.approx(6.0, abs=0.05)
    assert fit.predict(e_char, length) == pytest.approx(y, rel=1e-4)
    naive = fit_resync(e_char, y, length, k=5, resync=6.0, novel_rate=1.0, n_boot=0, **structure)
    assert np.max(np.abs(naive.predict(e_char, length) - y)) > 0.1  # feeding the char norm as the share misleads
    with pytest.raises(ValueError, match="share must hold"):
        fit_resync(e_char, y, length, k=5, share={"slope": 1.0}, **structure)


# ---- audit: bad input gets one clear error naming it -----------------------------------------------------


def test_fits_name_non_finite_and_out_of_range_input():
    e = np.linspace(0.02, 0.5, 8)
    y = harmonic_al(e, 2.0, 5.0)
    hole = np.arange(8) == 3
    for bad_al in (np.where(hole, np.nan, y), np.where(hole, np.inf, y), np.where(hole, 0.5, y)):  # an empty bin
        with pytest.raises(ValueError, match="al must be finite and >= 1"):
            fit_harmonic(e, bad_al, n_boot=0)
        with pytest.raises(ValueError, match="al must be finite and >= 1"):
            fit_resync(e, bad_al, 500.0, k=5, segment_len=30.0, n_boot=0)
    with pytest.raises(ValueError, match="edit_norm must lie in"):
        fit_harmonic(np.where(hole, np.nan, e), y, n_boot=0)
    with pytest.raises(ValueError, match="length must be finite"):
        fit_resync(e, y, np.where(hole, np.nan, 500.0), k=5, segment_len=30.0, n_boot=0)
    for w, msg in ((np.where(hole, np.nan, 1.0), "weights must be finite"), ([1.0, 2.0], "weights must be one")):
        with pytest.raises(ValueError, match=msg):
            fit_harmonic(e, y, weights=w, n_boot=0)
    with pytest.raises(ValueError, match="n_boot"):
        fit_harmonic(e, y, n_boot=-1)
    for kw in ({"k_ngram": 5.5}, {"k_eagle": 2.5}, {"k_ngram": np.nan}):
        with pytest.raises(ValueError, match="must be an integer >= 1"):
            fit_harmonic(e, y, n_boot=0, **kw)


def test_fit_resync_runs_names_a_group_without_outputs():
    runs, length = [[50, 20], [30], [10, 10, 10], [80]], np.array([100, 60, 50, 90])
    passes = resync_passes(runs, length, k=5, resync=3, novel_rate=1.5)
    al = np.array([length[:2].sum() / passes[:2].sum(), 2.0, length[2:].sum() / passes[2:].sum()])
    with pytest.raises(ValueError, match=r"groups \[1\] of al have no outputs"):
        fit_resync_runs(runs, length, [0, 0, 2, 2], al, k=5, n_boot=0)
    fit = fit_resync_runs(runs, length, [0, 0, 1, 1], al[[0, 2]], k=5, novel_rate=1.5, n_boot=0)
    assert fit.params["resync"] == pytest.approx(3.0, abs=0.5)


# ---- review: bad input gets one error naming the argument, before any fit --------------------------------

E8 = np.linspace(0.02, 0.5, 8)
RUNS = [[50, 20], [30], [10, 10, 10], [80]]
LENGTH = np.array([100, 60, 50, 90])


def _runs_al(groups=(0, 0, 1, 1)):
    passes = resync_passes(RUNS, LENGTH, k=5, resync=3, novel_rate=1.5)
    g = np.asarray(groups)
    return np.array([LENGTH[g == i].sum() / passes[g == i].sum() for i in range(g.max() + 1)])


@pytest.fixture
def no_fit(monkeypatch):
    """Fails a test whose call reaches the least-squares fit: bad input must be refused before it."""
    monkeypatch.setattr(fit_module, "least_squares", lambda *a, **k: pytest.fail("fitted before refusing"))


FITS = {  # fit: a function of keyword arguments overriding valid ones
    "fit_harmonic": lambda **kw: fit_harmonic(E8, harmonic_al(E8, 2.0, 5.0), **{"n_boot": 0, **kw}),
    "fit_resync": lambda **kw: fit_resync(E8, harmonic_al(E8, 2.0, 5.0), 500.0,
                                          **{"k": 5, "segment_len": 30.0, "n_boot": 0, **kw}),
    "fit_resync_runs": lambda **kw: fit_resync_runs(RUNS, LENGTH, [0, 0, 1, 1], _runs_al(),
                                                    **{"k": 5, "n_boot": 0, **kw}),
}
K_NAME = {"fit_harmonic": "k_ngram", "fit_resync": "k", "fit_resync_runs": "k"}


@pytest.mark.parametrize("f", FITS)
@pytest.mark.parametrize("k,err", [(np.inf, ValueError), (np.nan, ValueError), (0, ValueError), (2.5, ValueError),
                                   ("5", TypeError), ([3, 5], TypeError), (True, TypeError)], ids=repr)
def test_fits_name_a_bad_draft_length(f, k, err, no_fit):
    """k = inf used to raise OverflowError; a string or an array a raw comparison error."""
    with pytest.raises(err, match=f"{K_NAME[f]} must be an integer >= 1"):
        FITS[f](**{K_NAME[f]: k})


@pytest.mark.parametrize("f", FITS)
@pytest.mark.parametrize("kw,err,msg", [
    ({"n_boot": 2.5}, ValueError, "n_boot must be an integer >= 0"),
    ({"n_boot": np.inf}, ValueError, "n_boot must be an integer >= 0"),
    ({"n_boot": "5"}, TypeError, "n_boot must be an integer >= 0"),
    ({"ci": "0.9"}, TypeError, "ci must be a real number"),
    ({"seed": "x"}, TypeError, "seed must be"),
    ({"seed": -1}, ValueError, "seed must be"),
], ids=repr)
def test_fit_settings_are_checked_before_the_fit(f, kw, err, msg, no_fit):
    """n_boot = 2.5 used to fail only after the main fit, at the bootstrap."""
    with pytest.raises(err, match=msg):
        FITS[f](**kw)


@pytest.mark.parametrize("f,name", [("fit_harmonic", "al_eagle"), ("fit_resync", "resync"),
                                    ("fit_resync_runs", "novel_rate")])
def test_a_fixed_parameter_that_is_not_a_number_is_named(f, name, no_fit):
    with pytest.raises(TypeError, match=f"{name} must be a real number"):
        FITS[f](**{name: "2"})


def test_float_n_boot_and_whole_float_groups_give_the_same_fit():
    al = _runs_al()
    want = fit_resync_runs(RUNS, LENGTH, [0, 0, 1, 1], al, k=5, n_boot=3)
    got = fit_resync_runs(RUNS, LENGTH, np.array([0.0, 0.0, 1.0, 1.0]), al, k=5.0, n_boot=3.0)
    assert (got.params, got.ci, got.rmse) == (want.params, want.ci, want.rmse)
    np.testing.assert_array_equal(got.predict(RUNS, LENGTH, [0.0, 0.0, 1.0, 1.0]),
                                  want.predict(RUNS, LENGTH, [0, 0, 1, 1]))


@pytest.mark.parametrize("groups,err,msg", [
    ([0, 0.5, 1, 1], ValueError, "groups must be whole numbers >= -1"),
    ([0, -2, 1, 1], ValueError, "groups must be whole numbers >= -1"),
    ([0, np.nan, 1, 1], ValueError, "groups must be whole numbers >= -1"),
    ([0, 0, 1], ValueError, "groups has 3 entries for 4 outputs"),
    (["a", "a", "b", "b"], TypeError, "groups must be integers"),
], ids=repr)
def test_bad_groups_are_named(groups, err, msg, no_fit):
    """Float groups used to fail with a numpy cast error, groups of the wrong length in predict with IndexError, and a
    group -2 was skipped like -1."""
    with pytest.raises(err, match=msg):
        fit_resync_runs(RUNS, LENGTH, groups, _runs_al(), k=5, n_boot=0)
    runs_fit = RunsFit(params={"resync": 3.0, "novel_rate": 1.5, "copy_accept": 1.0}, ci={}, fitted=(),
                       settings={"k": 5})
    with pytest.raises(err, match=msg):
        runs_fit.predict(RUNS, LENGTH, groups)


@pytest.mark.parametrize("runs", [np.array([3, 4, 5, 6]), [1, 2, 3, 4], None], ids=repr)
def test_malformed_runs_are_named(runs, no_fit):
    with pytest.raises(TypeError, match="runs must hold one sequence of run lengths per output"):
        fit_resync_runs(runs, LENGTH, [0, 0, 1, 1], _runs_al(), k=5, n_boot=0)


def test_a_length_of_the_wrong_size_is_named(no_fit):
    """It used to fail with numpy's broadcast error."""
    with pytest.raises(ValueError, match=r"length must be one number or one per point \(8\), got shape \(3,\)"):
        fit_resync(E8, harmonic_al(E8, 2.0, 5.0), [500.0] * 3, k=5, segment_len=30.0, n_boot=0)


GOOD_STRUCTURE = {"edit_norm": [0.05, 0.1, 0.2, 0.3], "length": [100.0, 200.0, 150.0, 120.0],
                  "n_edits": [2.0, 4.0, 6.0, 7.0]}


@pytest.mark.parametrize("name", GOOD_STRUCTURE)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0], ids=repr)
def test_fit_edit_structure_names_a_bad_value(name, bad):
    """NaN and inf used to reach scipy ('array must not contain infs or NaNs'); negative lengths were fitted."""
    args = {**GOOD_STRUCTURE, name: [bad, *GOOD_STRUCTURE[name][1:]]}
    with pytest.raises(ValueError, match=f"{name} must"):
        fit_edit_structure(**args)


def test_fit_edit_structure_refuses_a_share_above_one():
    with pytest.raises(ValueError, match="edit_norm must lie in"):
        fit_edit_structure([0.5, 1.5, 2.0], [100.0, 200.0, 300.0], [2.0, 4.0, 6.0])


@pytest.mark.parametrize("name", ["edit_norm", "new_share"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -0.1, 1.1], ids=repr)
def test_fit_new_share_names_a_bad_value(name, bad):
    args = {"edit_norm": [0.1, 0.2, 0.3], "new_share": [0.2, 0.3, 0.5]}
    args[name] = [bad, *args[name][1:]]
    with pytest.raises(ValueError, match=f"{name} must lie in"):
        fit_new_share(**args)


HARMONIC = {"al_eagle": 2.0, "al_ngram": 5.0}
RESYNC = {"segment_len": 30.0, "resync": 3.0, "novel_rate": 1.5, "copy_accept": 1.0, "base_edits": 1.0}


@pytest.mark.parametrize("model,params,settings_,err,msg", [
    ("harmonic", {}, {}, ValueError, "params of a 'harmonic' fit must be"),
    ("harmonic", {"al_eagle": 2.0}, {}, ValueError, "params of a 'harmonic' fit must be"),
    ("harmonic", {**HARMONIC, "resync": 3.0}, {}, ValueError, "params of a 'harmonic' fit must be"),
    ("harmonic", {**HARMONIC, "al_ngram": "5"}, {}, TypeError, r"params\['al_ngram'\] must be a real number"),
    ("harmonic", [2.0, 5.0], {}, TypeError, "params and settings must be mappings"),
    ("resync", HARMONIC, {"k": 5}, ValueError, "params of a 'resync' fit must be"),
    ("resync", RESYNC, {}, ValueError, "settings of a 'resync' fit need k"),
    ("resync", RESYNC, {"k": 5.5}, ValueError, r"settings\['k'\] must be an integer >= 1"),
    ("resync", RESYNC, {"k": 5, "share_slope": 1.2}, ValueError, "both share_intercept and share_slope"),
], ids=repr)
def test_a_model_fit_that_cannot_predict_is_refused(model, params, settings_, err, msg):
    """ModelFit("harmonic", params={}) used to be built, and its predict then raised KeyError."""
    with pytest.raises(err, match=msg):
        ModelFit(model=model, params=params, ci={}, fitted=(), settings=settings_)


def test_a_runs_fit_that_cannot_predict_is_refused():
    with pytest.raises(ValueError, match="params of a 'resync_runs' fit must be"):
        RunsFit(params={"resync": 3.0}, ci={}, fitted=(), settings={"k": 5})
    with pytest.raises(ValueError, match="settings of a 'resync_runs' fit need k"):
        RunsFit(params={"resync": 3.0, "novel_rate": 1.5, "copy_accept": 1.0}, ci={}, fitted=())


SIMULATION = Path(__file__).resolve().parents[1] / "experiments" / "results" / "simulation"
SAVED = sorted(SIMULATION.glob("simulate_al*.json"))


@pytest.mark.parametrize("path", SAVED, ids=lambda p: p.name)
def test_recorded_fits_still_build_and_predict(path):
    """Every fit in the recorded simulate_al results builds (as al_by_edit_norm.saved_fit does) and predicts."""
    fits = json.loads(path.read_text())["fits"]
    for named in fits.values():
        for fit in named.values():
            common = {"params": fit["params"], "fitted": tuple(fit["fitted"]), "settings": fit["settings"],
                      "ci": {k: tuple(v) for k, v in fit["ci"].items()}}
            if fit["model"] == "resync_runs":
                pred = RunsFit(**common).predict(RUNS, LENGTH, [0, 0, 1, 1])
            else:
                pred = ModelFit(model=fit["model"], **common).predict(E8, np.full(E8.size, 300.0))
            assert np.all(np.isfinite(pred) & (np.asarray(pred) >= 1))


# ---- review C: physical ranges, infinite errors, interval coverage ---------------------------------------


@pytest.mark.parametrize("pred,measured,name", [([np.inf, 2.0], [2.0, 2.0], "pred"), ([2.0, 2.0], [2.0, -np.inf],
                                                                                           "measured")])
def test_model_error_names_an_infinite_value(pred, measured, name):
    """An infinite prediction used to be dropped like a missing bin: model_error([inf, 2], [2, 2]) scored 0 on n=1."""
    with pytest.raises(ValueError, match=f"{name} must not be infinite"):
        model_error(pred, measured)
    assert model_error([np.nan, 2.0], [2.0, 2.0])["n"] == 1  # NaN: a missing bin, dropped


E_HI = np.linspace(0.05, 0.95, 10)
L_HI = np.full(E_HI.size, 400.0)
# a hybrid with k_ngram = 1 and a longer EAGLE draft: new text at 3.5 tokens per pass, above k_ngram + 1
HYBRID_K1 = resync_al(E_HI, L_HI, k=1, segment_len=30.0, resync=2.0, novel_rate=3.5)


def test_fit_resync_keeps_the_novel_rate_within_what_a_pass_can_emit():
    """A pass emits at most max(k, k_eagle) + 1 tokens; the novel rate used to be free up to 64, so fitted to the
    ALs above k + 1 of a hybrid whose EAGLE drafts more it gave n-gram alone (no k_eagle) 3.5 tokens per pass
    with k = 1, and predicted an AL of 3.5 at e = 1."""
    bounded = fit_resync(E_HI, HYBRID_K1, L_HI, k=1, segment_len=30.0, n_boot=10)
    assert bounded.params["novel_rate"] <= 2.0 and bounded.ci["novel_rate"][1] <= 2.0
    assert np.all(bounded.predict(np.linspace(0, 1, 21), 400.0) <= 2.0 + 1e-9)
    hybrid = fit_resync(E_HI, HYBRID_K1, L_HI, k=1, k_eagle=3, segment_len=30.0, n_boot=0)
    assert hybrid.params["novel_rate"] == pytest.approx(3.5, rel=1e-4) and hybrid.settings["k_eagle"] == 3
    with pytest.raises(ValueError, match="novel_rate=3.0 lies outside its range"):
        fit_resync(E_HI, HYBRID_K1, L_HI, k=1, novel_rate=3.0, segment_len=30.0, n_boot=0)
    with pytest.raises(ValueError, match="k_eagle must be an integer >= 1"):
        fit_resync(E_HI, HYBRID_K1, L_HI, k=1, k_eagle=0, segment_len=30.0, n_boot=0)


def test_fit_resync_runs_keeps_the_novel_rate_within_what_a_pass_can_emit():
    runs = [[40, 10], [5, 8], [20, 30, 3], [12, 2], [60], [9, 30]]
    length = np.array([100, 60, 90, 50, 90, 80])
    groups = np.arange(6)
    al = length / resync_passes(runs, length, k=1, resync=1.0, novel_rate=3.5)
    bounded = fit_resync_runs(runs, length, groups, al, k=1, n_boot=0)
    assert bounded.params["novel_rate"] <= 2.0
    hybrid = fit_resync_runs(runs, length, groups, al, k=1, k_eagle=3, resync=1.0, n_boot=0)
    assert hybrid.params["novel_rate"] == pytest.approx(3.5, rel=1e-6) and hybrid.settings["k_eagle"] == 3


def test_bootstrap_intervals_cover_the_truth_at_about_their_rate():
    """Per-bin ALs averaged over noisy prompts, intervals from refits to prompts resampled within bins: the 90%
    interval of AL_ngram holds the true value in about 90% of repeated experiments."""
    rng = np.random.default_rng(7)
    e = np.linspace(0.02, 0.55, 8)
    truth = harmonic_al(e, 2.3, 5.4)
    hits, reps, prompts = 0, 60, 25
    for _ in range(reps):
        sample = truth + rng.normal(0, 0.5, (prompts, e.size))
        boot = np.stack([sample[rng.integers(0, prompts, prompts)].mean(0) for _ in range(80)])
        f = fit_harmonic(e, sample.mean(0), al_eagle=2.3, boot=boot, ci=0.9)
        hits += f.ci["al_ngram"][0] <= 5.4 <= f.ci["al_ngram"][1]
    assert 0.75 <= hits / reps <= 0.99
