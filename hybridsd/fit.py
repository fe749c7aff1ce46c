"""Fitting the analytic AL models of :mod:`hybridsd.analytic` to measurements.

- :func:`fit_harmonic`, :func:`fit_resync`, :func:`fit_resync_runs`: weighted least squares
  (``scipy.optimize.least_squares``) to measured per-bin ALs with bootstrap percentile confidence intervals,
  returning a :class:`ModelFit` / :class:`RunsFit` with ``predict``.
- :func:`fit_edit_structure` and :func:`fit_new_share`: the edit structure and dataset constants
  :func:`resync_al` and :func:`new_share` take, by non-negative least squares on reference outputs.
- :func:`model_error`: MAE, RMSE, max abs and mean relative error of predictions.

numpy/scipy only; the model functions (:func:`resync_al` and others) are those of :mod:`hybridsd.analytic`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, nnls

from hybridsd.analytic import (check_k, harmonic_al, new_share, real_number, resync_al, resync_passes,
                               run_lengths)


def fit_edit_structure(edit_norm, length, n_edits) -> dict[str, float]:
    """``base_edits`` and ``segment_len`` of :func:`resync_al` from the edits counted in reference outputs
    (e.g. copied runs minus one), by non-negative least squares of ``n_edits ~ base_edits + e L / segment_len``;
    ``e`` is the new-token share, as :func:`resync_al` takes it."""
    e, ln, n = (np.asarray(x, dtype=float).ravel() for x in (edit_norm, length, n_edits))
    if not e.size == ln.size == n.size or e.size < 2:
        raise ValueError("edit_norm, length and n_edits need one value per output, at least two outputs")
    if not np.all((e >= 0) & (e <= 1)):  # NaN fails too
        raise ValueError("edit_norm must lie in [0, 1] (the new-token share)")
    for name, x in (("length", ln), ("n_edits", n)):
        if not np.all((x >= 0) & (x < np.inf)):
            raise ValueError(f"{name} must be finite and >= 0")
    coef, _ = nnls(np.column_stack([np.ones_like(e), e * ln]), n)
    if coef[1] <= 0:
        raise ValueError("edit counts do not grow with e * length: no segment length to fit")
    return {"base_edits": float(coef[0]), "segment_len": float(1.0 / coef[1])}


def fit_new_share(edit_norm, new_share) -> dict[str, float]:
    """Dataset constants ``{"share_intercept", "share_slope"}`` of :func:`new_share`: non-negative least
    squares of each reference's new-token share (e.g. ``1 - sum(copied runs) / tokens``) on its character
    edit norm."""
    e, y = (np.asarray(x, dtype=float).ravel() for x in (edit_norm, new_share))
    if e.size != y.size or e.size < 2:
        raise ValueError("edit_norm and new_share need one value per output, at least two outputs")
    for name, x in (("edit_norm", e), ("new_share", y)):
        if not np.all((x >= 0) & (x <= 1)):  # NaN fails too
            raise ValueError(f"{name} must lie in [0, 1]")
    coef, _ = nnls(np.column_stack([np.ones_like(e), e]), y)
    return {"share_intercept": float(coef[0]), "share_slope": float(coef[1])}


_STARTS = ({}, {"resync": 0.0}, {"resync": 8.0}, {"resync": 20.0, "novel_rate": 3.0}, {"resync": 50.0})


def _unique(xs: list[np.ndarray]) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for x in xs:
        if not any(np.array_equal(x, y) for y in out):
            out.append(x)
    return out


def _fit_params(names, bounds, start, fixed: Mapping, predict: Callable, al: np.ndarray, weights, boot,
                n_boot: int, ci: float, seed: int):
    """Weighted least squares of ``predict(params, idx) ~ al[idx]`` over the free parameters, with bootstrap
    percentile intervals; returns ``(params, intervals, free, rmse, n_boot_used)``."""
    n = al.size
    if not np.all((al >= 1) & (al < np.inf)):  # NaN fails too (an empty bin, say)
        raise ValueError(f"al must be finite and >= 1 (tokens per pass), got {al[~((al >= 1) & (al < np.inf))]}")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if w.ndim > 1 or w.size not in (1, n):
        raise ValueError(f"weights must be one number or one per point ({n}), got shape {w.shape}")
    w = np.broadcast_to(w.ravel(), (n,))
    if not np.all((w >= 0) & (w < np.inf)):
        raise ValueError("weights must be finite and >= 0")
    if not 0 < real_number(ci, "ci") < 1:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    nb = real_number(n_boot, "n_boot", "an integer >= 0")
    if not (np.isfinite(nb) and nb >= 0 and nb == int(nb)):
        raise ValueError(f"n_boot must be an integer >= 0, got {n_boot}")
    try:
        rng = np.random.default_rng(seed)
    except (TypeError, ValueError) as err:  # e.g. a string or a negative number
        raise type(err)(f"seed must be what numpy.random.default_rng takes (an integer >= 0), got {seed!r:.60}: "
                        f"{err}") from None
    unknown = set(fixed) - set(names)
    if unknown:
        raise ValueError(f"unknown parameters {sorted(unknown)}; expected some of {list(names)}")
    for p, v in fixed.items():
        if p in bounds and not bounds[p][0] <= real_number(v, p) <= bounds[p][1]:
            raise ValueError(f"{p}={v} lies outside its range [{bounds[p][0]}, {bounds[p][1]}]")
    free = tuple(p for p in names if p not in fixed)
    if len(free) > n:
        raise ValueError(f"{len(free)} parameters cannot be fitted to {n} points")
    lo = np.array([bounds[p][0] for p in free])
    hi = np.array([bounds[p][1] for p in free])
    # several starts for the main fit (the re-sync objectives have local minima); refits start from its optimum
    x0s = [np.clip([s.get(p, start[p]) for p in free], lo, hi) for s in _STARTS]

    def solve(idx: np.ndarray, target: np.ndarray, starts) -> np.ndarray:
        sw = np.sqrt(w[idx])
        fun = lambda x: sw * (predict({**fixed, **dict(zip(free, x))}, idx) - target[idx])  # noqa: E731
        fits = [least_squares(fun, x0, bounds=(lo, hi), method="trf") for x0 in starts]
        return min(fits, key=lambda r: r.cost).x

    every = np.arange(n)
    x = solve(every, al, _unique(x0s)) if free else np.empty(0)
    params = {**{p: float(v) for p, v in fixed.items()}, **dict(zip(free, map(float, x)))}
    params = {p: params[p] for p in names}
    rmse = float(np.sqrt(np.mean((predict(params, every) - al) ** 2)))
    intervals: dict[str, tuple[float, float]] = {}
    draws = []
    if free and boot is not None:
        reps = np.asarray(boot, dtype=float)
        if reps.ndim != 2 or reps.shape[1] != n:
            raise ValueError(f"boot must have shape [n_boot, {n}], got {reps.shape}")
        draws = [solve(every, rep, [x]) for rep in reps if np.all(np.isfinite(rep))]
    elif free and n_boot > 0:
        draws = [solve(idx, al, [x]) for idx in (rng.integers(0, n, n) for _ in range(int(n_boot)))]
    if draws:
        q = [(1 - ci) / 2 * 100, (1 + ci) / 2 * 100]
        arr = np.array(draws)
        intervals = {p: tuple(map(float, np.percentile(arr[:, i], q))) for i, p in enumerate(free)}
    return params, intervals, free, rmse, len(draws)


@dataclass(frozen=True)
class ModelFit:
    """An AL model of the edit norm, fitted: ``params`` (fitted and fixed), bootstrap ``ci`` of the fitted
    ones (``fitted``), ``settings`` that are not parameters (draft lengths, edit-norm conversion), and
    :meth:`predict`. Predictive: it needs only the edit norm (and output length)."""

    model: str  # "harmonic" or "resync"
    params: dict[str, float]
    ci: dict[str, tuple[float, float]]
    fitted: tuple[str, ...]
    settings: dict[str, float] = field(default_factory=dict)
    n_points: int = 0
    rmse: float = float("nan")
    n_boot: int = 0

    def __post_init__(self) -> None:
        if self.model not in _MODELS:
            raise ValueError(f"unknown model {self.model!r}; expected one of {sorted(_MODELS)}")
        _check_fit(self, _MODELS[self.model][1])

    def predict(self, edit_norm, length=None):
        """Predicted sequence-normalized AL at ``edit_norm`` (with output ``length``, used by "resync")."""
        return _MODELS[self.model][0](np.asarray(edit_norm, dtype=float), length, self.params, self.settings)

    def as_dict(self) -> dict:
        """Plain-dict view for results files."""
        return _as_dict(self)


@dataclass(frozen=True)
class RunsFit:
    """The re-sync model over measured copied runs (:func:`resync_passes`), fitted; see :class:`ModelFit`.
    Diagnostic: it needs each output's copied runs."""

    params: dict[str, float]
    ci: dict[str, tuple[float, float]]
    fitted: tuple[str, ...]
    settings: dict[str, float] = field(default_factory=dict)
    n_points: int = 0
    rmse: float = float("nan")
    n_boot: int = 0
    model: str = "resync_runs"

    def __post_init__(self) -> None:
        _check_fit(self, _RUNS_PARAMS)

    def predict(self, runs, length, groups=None) -> np.ndarray:
        """Predicted AL per output, or with ``groups`` (a group index per output, -1 to skip) the corpus AL
        (total tokens / total passes) of each group ``0..max(groups)`` (NaN for an empty group)."""
        length = np.asarray(length, dtype=float)
        groups = None if groups is None else _groups(groups, length.size)
        passes = resync_passes(runs, length, k=int(self.settings["k"]), **self.params)
        if groups is None:
            return length / passes
        return _group_al(length, passes, groups, int(groups.max(initial=-1)) + 1)

    def as_dict(self) -> dict:
        """Plain-dict view for results files."""
        return _as_dict(self)


def _check_fit(fit, names: tuple[str, ...]) -> None:
    """ValueError or TypeError unless ``fit.params`` holds exactly the model's parameters ``names``, each a real
    number, and a model that needs it has ``settings["k"]`` (the n-gram draft length)."""
    if not isinstance(fit.params, Mapping) or not isinstance(fit.settings, Mapping):
        raise TypeError(f"params and settings must be mappings, got {type(fit.params).__name__} and "
                        f"{type(fit.settings).__name__}")
    if set(fit.params) != set(names):
        raise ValueError(f"params of a {fit.model!r} fit must be {list(names)}, got {sorted(fit.params)}")
    for name in names:
        real_number(fit.params[name], f"params[{name!r}]")
    if fit.model != "harmonic":
        if "k" not in fit.settings:
            raise ValueError(f"settings of a {fit.model!r} fit need k (the n-gram draft length)")
        check_k(fit.settings["k"], "settings['k']")
    if len({"share_intercept", "share_slope"} & set(fit.settings)) == 1:
        raise ValueError("settings must hold both share_intercept and share_slope, or neither")


def _groups(groups, n: int) -> np.ndarray:
    """``groups`` (a group index per output, -1: unused) as integers; TypeError or ValueError naming it unless it
    holds ``n`` whole numbers >= -1."""
    g = np.asarray(groups)
    if g.size and g.dtype.kind not in "iuf":
        raise TypeError(f"groups must be integers (a group index per output, -1: unused), got dtype {g.dtype}")
    g = g.ravel()
    if g.size != n:
        raise ValueError(f"groups has {g.size} entries for {n} outputs")
    if not np.all(np.isfinite(g) & (g >= -1) & (g == np.round(g))):
        raise ValueError("groups must be whole numbers >= -1 (a group index per output, -1: unused)")
    return g.astype(int)


def _as_dict(fit) -> dict:
    return {"model": fit.model, "params": dict(fit.params), "ci": {k: list(v) for k, v in fit.ci.items()},
            "fitted": list(fit.fitted), "settings": dict(fit.settings), "n_points": fit.n_points,
            "rmse": fit.rmse, "n_boot": fit.n_boot}


def _group_al(length: np.ndarray, passes: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    ok = groups >= 0
    tok = np.bincount(groups[ok], weights=length[ok], minlength=n)
    steps = np.bincount(groups[ok], weights=passes[ok], minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(steps > 0, tok / steps, np.nan)


def _harmonic(e, length, params, settings):
    return harmonic_al(e, params["al_eagle"], params["al_ngram"])


def _resync(e, length, params, settings):
    if "share_slope" in settings:  # a character edit norm: the model takes the new-token share
        e = new_share(e, share_intercept=settings["share_intercept"], share_slope=settings["share_slope"])
    return resync_al(e, length, k=int(settings["k"]), **params)


# novel_rate's upper bound here is a placeholder: the fits put max(k, k_eagle) + 1 in its place (_novel_rate_bound)
_RESYNC_BOUNDS = {"segment_len": (0.5, 1e4), "resync": (0.0, 500.0), "novel_rate": (1.0, 64.0),
                  "copy_accept": (0.5, 1.0), "base_edits": (0.0, 1e3)}
_RESYNC_START = {"segment_len": 30.0, "resync": 3.0, "novel_rate": 1.5, "copy_accept": 0.97, "base_edits": 1.0}
# name -> (predict(e, length, params, settings), parameter names, bounds, start values)
_MODELS: dict[str, tuple[Callable, tuple[str, ...], dict, dict]] = {
    "harmonic": (_harmonic, ("al_eagle", "al_ngram"),
                 {"al_eagle": (1.0, 64.0), "al_ngram": (1.0, 64.0)}, {"al_eagle": 2.0, "al_ngram": 3.0}),
    "resync": (_resync, ("segment_len", "resync", "novel_rate", "copy_accept", "base_edits"), _RESYNC_BOUNDS,
               _RESYNC_START),
}
_RUNS_PARAMS = ("resync", "novel_rate", "copy_accept")  # those of resync_passes, fitted by fit_resync_runs


def _points(edit_norm, al, length):
    e, y = np.asarray(edit_norm, dtype=float).ravel(), np.asarray(al, dtype=float).ravel()
    if e.shape != y.shape or e.size == 0:
        raise ValueError(f"edit_norm and al must be non-empty and of one shape, got {e.shape} and {y.shape}")
    if not np.all((e >= 0) & (e <= 1)):  # NaN fails too
        raise ValueError("edit_norm must lie in [0, 1]")
    ln = None if length is None else np.asarray(length, dtype=float)
    if ln is not None and ln.size not in (1, e.size):
        raise ValueError(f"length must be one number or one per point ({e.size}), got shape {ln.shape}")
    ln = None if ln is None else np.broadcast_to(ln.ravel(), e.shape)
    if ln is not None and not np.all((ln >= 1) & (ln < np.inf)):
        raise ValueError("length must be finite and >= 1")
    return e, y, ln


def _fit_e_model(model, edit_norm, al, length, fixed, settings, weights, boot, n_boot, ci, seed,
                 bounds=None) -> ModelFit:
    fn, names, default_bounds, start = _MODELS[model]
    bounds = {**default_bounds, **(bounds or {})}
    start = {p: min(max(v, bounds[p][0]), bounds[p][1]) for p, v in start.items()}
    e, y, ln = _points(edit_norm, al, length)
    predict = lambda params, idx: fn(e[idx], None if ln is None else ln[idx], params, settings)  # noqa: E731
    params, intervals, free, rmse, used = _fit_params(names, bounds, start, fixed, predict, y, weights, boot,
                                                      n_boot, ci, seed)
    return ModelFit(model=model, params=params, ci=intervals, fitted=free, settings=dict(settings),
                    n_points=int(e.size), rmse=rmse, n_boot=used)


def fit_harmonic(edit_norm, al, *, al_eagle=None, al_ngram=None, k_ngram=None, k_eagle=None, weights=None,
                 boot=None, n_boot=200, ci=0.95, seed=0) -> ModelFit:
    """Fit :func:`harmonic_al` to measured ALs at ``edit_norm`` (e.g. per bin); parameters given are held
    fixed, the others fitted by weighted least squares (``scipy.optimize.least_squares``).

    ``k_ngram`` / ``k_eagle``: the draft lengths; each AL is then bounded by its ``k + 1`` (one pass emits
    at most ``k + 1`` tokens), fixed values included (ValueError beyond it). Without them the bound is 64.

    ``boot``: optional ``[n_boot, n_points]`` bootstrap replicates of ``al`` (e.g. examples resampled within
    bins) to refit for the intervals (replicates holding a NaN are skipped; the fit's ``n_boot`` counts those used);
    without it the points themselves are resampled ``n_boot`` times (0: no intervals). ``ci``: the intervals'
    coverage. Measured ALs must be finite and >= 1: drop empty bins first.
    """
    fixed = {k: v for k, v in {"al_eagle": al_eagle, "al_ngram": al_ngram}.items() if v is not None}
    for name, kk in (("k_ngram", k_ngram), ("k_eagle", k_eagle)):
        if kk is not None:
            check_k(kk, name)
    bounds = {name: (1.0, kk + 1.0) for name, kk in (("al_ngram", k_ngram), ("al_eagle", k_eagle)) if kk is not None}
    settings = {name: float(kk) for name, kk in (("k_ngram", k_ngram), ("k_eagle", k_eagle)) if kk is not None}
    return _fit_e_model("harmonic", edit_norm, al, None, fixed, settings, weights, boot, n_boot, ci, seed, bounds)


def fit_resync(edit_norm, al, length=None, *, k, segment_len=None, resync=None, novel_rate=None, copy_accept=1.0,
               base_edits=0.0, share=None, k_eagle=None, weights=None, boot=None, n_boot=200, ci=0.95,
               seed=0) -> ModelFit:
    """Fit :func:`resync_al` (n-gram draft length ``k``) to measured ALs at ``edit_norm`` with output
    ``length`` per point. Parameters given are held fixed: by default ``copy_accept`` at 1 and ``base_edits``
    at 0 (``None`` fits them; per-bin ALs hardly tell ``copy_accept`` from ``resync``, which then also
    absorbs misdirected drafts inside runs). The edit structure (``segment_len``, ``base_edits``) is best
    measured from the reference diffs with :func:`fit_edit_structure`. ``edit_norm`` is the new-token share,
    or with ``share`` (the constants of :func:`fit_new_share`) a character edit norm, converted by
    :func:`new_share` here and in ``predict``. ``novel_rate`` (tokens per pass outside synced copying) is bounded
    by ``max(k, k_eagle) + 1``, the most one pass can emit (``k + 1`` without ``k_eagle``, EAGLE's draft length
    in a hybrid), a fixed value included (ValueError beyond it). Bootstrap as in :func:`fit_harmonic`."""
    check_k(k)
    bounds = _novel_rate_bound(k, k_eagle)
    given = {"segment_len": segment_len, "resync": resync, "novel_rate": novel_rate, "copy_accept": copy_accept,
             "base_edits": base_edits}
    fixed = {n: v for n, v in given.items() if v is not None}
    settings = {"k": int(k), **({} if k_eagle is None else {"k_eagle": int(k_eagle)})}
    if share is not None:
        if set(share) != {"share_intercept", "share_slope"}:
            raise ValueError(f"share must hold share_intercept and share_slope, got {sorted(share)}")
        new_share(0.0, **share)  # validates the constants
        settings.update({n: float(v) for n, v in share.items()})
    return _fit_e_model("resync", edit_norm, al, length, fixed, settings, weights, boot, n_boot, ci, seed, bounds)


def _novel_rate_bound(k, k_eagle) -> dict[str, tuple[float, float]]:
    """The bounds of ``novel_rate``: a pass emits at most ``max(k, k_eagle) + 1`` tokens."""
    if k_eagle is not None:
        check_k(k_eagle, "k_eagle")
    return {"novel_rate": (1.0, max(float(k), float(k if k_eagle is None else k_eagle)) + 1.0)}


def fit_resync_runs(runs, length, groups, al, *, k, resync=None, novel_rate=None, copy_accept=1.0, k_eagle=None,
                    weights=None, boot=None, n_boot=200, ci=0.95, seed=0) -> RunsFit:
    """Fit :func:`resync_passes` to measured corpus ALs of groups of outputs (e.g. edit-norm bins).

    ``runs``/``length``: per output, its copied runs and tokens; ``groups``: per output, the index of its
    group in ``al`` (-1: unused); ``al``: the measured AL (total tokens / total passes) of each group.
    Parameters given are held fixed (``copy_accept`` at 1 by default; ``None`` fits it); ``novel_rate`` is bounded
    as in :func:`fit_resync` (``k_eagle``). Bootstrap as in :func:`fit_harmonic`, over groups. Diagnostic: it needs
    each output's copied runs.
    """
    check_k(k)
    bounds = {**_RESYNC_BOUNDS, **_novel_rate_bound(k, k_eagle)}
    y = np.asarray(al, dtype=float).ravel()
    length = np.asarray(length, dtype=float).ravel()
    runs = run_lengths(runs)
    if len(runs) != length.size:
        raise ValueError(f"runs and length need one entry per output, got {len(runs)} and {length.size}")
    groups = _groups(groups, length.size)
    if groups.max(initial=-1) >= y.size:
        raise ValueError(f"groups index past al ({y.size} groups)")
    empty = np.setdiff1d(np.arange(y.size), groups)
    if empty.size:
        raise ValueError(f"groups {empty.tolist()} of al have no outputs: drop those entries of al")
    keep = groups >= 0
    runs = [r for r, k_ in zip(runs, keep) if k_]
    length, groups = length[keep], groups[keep]
    settings = {"k": int(k), **({} if k_eagle is None else {"k_eagle": int(k_eagle)})}

    def predict(params, idx):
        passes = resync_passes(runs, length, k=int(k), **params)
        return _group_al(length, passes, groups, y.size)[idx]

    given = dict(zip(_RUNS_PARAMS, (resync, novel_rate, copy_accept)))
    fixed = {n: v for n, v in given.items() if v is not None}
    params, intervals, free, rmse, used = _fit_params(
        tuple(given), bounds, _RESYNC_START, fixed, predict, y, weights, boot, n_boot, ci, seed)
    return RunsFit(params=params, ci=intervals, fitted=free, settings=settings, n_points=int(y.size), rmse=rmse,
                   n_boot=used)


# ----------------------------------------------------------------------------- errors


def model_error(pred, measured) -> dict[str, float]:
    """Error summary of predictions against measurements (pairs with a NaN dropped: a missing bin): ``mae``,
    ``rmse``, ``max_abs``, ``mean_rel`` (mean of ``|pred - measured| / measured``) and ``n``. ValueError naming
    ``pred`` or ``measured`` where it is infinite."""
    p, m = np.asarray(pred, dtype=float).ravel(), np.asarray(measured, dtype=float).ravel()
    if p.shape != m.shape:
        raise ValueError(f"pred and measured differ in size: {p.shape} vs {m.shape}")
    for name, x in (("pred", p), ("measured", m)):
        if np.any(np.isinf(x)):
            raise ValueError(f"{name} must not be infinite (NaN: missing), got {x[np.isinf(x)][0]}")
    ok = ~np.isnan(p) & ~np.isnan(m)
    err = p[ok] - m[ok]
    if not err.size:
        return {"mae": np.nan, "rmse": np.nan, "max_abs": np.nan, "mean_rel": np.nan, "n": 0}
    return {"mae": float(np.mean(np.abs(err))), "rmse": float(np.sqrt(np.mean(err**2))),
            "max_abs": float(np.max(np.abs(err))), "mean_rel": float(np.mean(np.abs(err) / np.abs(m[ok]))),
            "n": int(err.size)}
