"""Analytic models of acceptance length (AL): closed forms, conversions, and models fitted to measurements.

Functions broadcast over numpy arrays and use numpy/scipy only.

- :func:`harmonic_al`: the PR's model, ``1 / (e/AL_eagle + (1-e)/AL_ngram)``.
- :func:`chain_al`, :func:`al_from_rates`: AL of one chain draft from i.i.d. or per-position acceptance;
  :func:`tree_al`: AL of one draft tree from per-node acceptance.
- :func:`normalized_al_from_precision` and friends: precision AL (vLLM's) <-> sequence-normalized AL.
- :func:`resync_al` (from the edit norm) and :func:`resync_passes` (from measured copied runs): the
  re-sync model below.
- :func:`fit_harmonic`, :func:`fit_resync`, :func:`fit_resync_runs`: least-squares fits
  (``scipy.optimize.least_squares``) to measured per-bin ALs with bootstrap confidence intervals, returning a
  :class:`ModelFit` / :class:`RunsFit` with ``predict``; :func:`fit_edit_structure` measures the edit
  structure :func:`resync_al` needs from reference diffs.
- :func:`model_error`: MAE, RMSE, max abs and mean relative error of predictions.
- :func:`harmonic_calibrate_ngram`: the AL_ngram that puts the harmonic model through a measured point.
- :func:`fit_new_share`, :func:`new_share`: the dataset constants that turn the character edit norm into the
  share of output tokens not copied from the input, which :func:`resync_al` takes.

Predictive or diagnostic. A *predictive* model needs only the edit norm of a prompt's change (and its output
length) plus constants measured once per dataset or method; it can say what AL to expect before decoding:
:func:`harmonic_al`, :func:`resync_al` (with :func:`new_share` for a character edit norm) and their fits
:func:`fit_harmonic`, :func:`fit_resync`. A *diagnostic* model needs the reference output itself (its copied
runs): :func:`resync_passes` and :func:`fit_resync_runs` explain a measured AL, they cannot forecast one.

The re-sync model assumes:

- the output alternates between runs copied from the input and new text;
- after every edit (and at the start) the first ``resync`` tokens of a run are produced without the n-gram
  drafter (it needs ``min_n`` matching tokens, and more when its first match points to the wrong place), as
  is all new text: ``novel_rate`` tokens per pass. ``novel_rate`` is an *effective* rate over everything
  outside synced copying, not EAGLE's AL: held at 1 for n-gram alone and at AL_eagle for a hybrid it has
  that meaning (one parameter less); fitted freely it is a curve parameter that also absorbs n-gram hits
  inside new text (moved or repeated code), which raise it above AL_eagle, and spurious n-gram drafts that
  block EAGLE, which lower it;
- the rest of a run, ``R`` tokens, takes ``floor(R / (k+1)) + 1`` passes: n-gram drafts of ``k`` tokens are
  accepted until the run ends, and the last, partial pass also emits the token after the run (new text, or
  the next run's first token after a deletion), which therefore costs nothing more;
- ``resync`` may be fractional (an average; passes are interpolated linearly in it); the prefill is one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, nnls
from scipy.signal import lfilter

# ----------------------------------------------------------------------------- closed forms


def harmonic_al(edit_norm, al_eagle, al_ngram):
    """Hybrid AL of the PR's model: ``1 / (e / al_eagle + (1 - e) / al_ngram)``.

    Assumes a share ``e`` of the output is new text, produced at ``al_eagle`` tokens per step, and the
    rest is copied at ``al_ngram`` tokens per step, with no cost to switch between them. For n-gram
    alone pass ``al_eagle=1``. ``al_ngram`` is the rate on copied text (``e = 0``), at most ``k + 1`` for
    drafts of ``k`` tokens; a measured n-gram AL at ``e > 0`` is not it (see
    :func:`harmonic_calibrate_ngram`). Predictive: the edit norm and two constants. Broadcasts; ``e`` in
    [0, 1], ALs >= 1.
    """
    e, ae, an = (np.asarray(x, dtype=float) for x in (edit_norm, al_eagle, al_ngram))
    if np.any((e < 0) | (e > 1)):
        raise ValueError("edit_norm must lie in [0, 1]")
    if np.any(ae < 1) or np.any(an < 1):
        raise ValueError("al_eagle and al_ngram must be >= 1")
    return 1.0 / (e / ae + (1.0 - e) / an)


def harmonic_calibrate_ngram(al, edit_norm, al_eagle=1.0, k=None):
    """The ``al_ngram`` for which :func:`harmonic_al` ``(edit_norm, al_eagle, al_ngram)`` equals ``al``:
    ``(1 - e) / (1 / al - e / al_eagle)``.

    The PR calibrates AL_ngram on its lowest edit-norm data; using that measured AL directly as the rate on
    copied text discounts the calibration data's own new text a second time, so the model then misses the
    point it was calibrated on. This inverts the model instead. With ``k`` (the n-gram draft length) the
    result is capped at ``k + 1``, the most one pass can emit; it is at least 1. Without ``k``, ValueError
    when no rate reproduces ``al`` (``al`` at or above what infinitely fast copying would give). Broadcasts.
    """
    a, e, ae = (np.asarray(x, dtype=float) for x in (al, edit_norm, al_eagle))
    if np.any((e < 0) | (e >= 1)):
        raise ValueError("edit_norm must lie in [0, 1)")
    if np.any(a < 1) or np.any(ae < 1):
        raise ValueError("al and al_eagle must be >= 1")
    slack = 1.0 / a - e / ae
    if k is not None:
        rate = np.where(slack > 0, (1.0 - e) / np.where(slack > 0, slack, 1.0), k + 1.0)
        return np.clip(rate, 1.0, k + 1.0)
    if np.any(slack <= 0):
        raise ValueError("al is too high for this edit norm and al_eagle: no copy rate reproduces it")
    return np.maximum((1.0 - e) / slack, 1.0)  # below 1 only by rounding (or for an al no rate >= 1 gives)


def chain_al(alpha, k):
    """AL of a ``k``-token chain draft whose tokens are each accepted with i.i.d. probability ``alpha``.

    ``(1 - alpha^(k+1)) / (1 - alpha)``, i.e. ``sum_{j=0..k} alpha^j``; ``k + 1`` at ``alpha = 1``.
    Assumes acceptance of each token is independent of the others given that the previous ones were
    accepted. Broadcasts; ``alpha`` in [0, 1], integer ``k >= 0``.
    """
    a = np.asarray(alpha, dtype=float)
    k = np.asarray(k)
    if np.any((a < 0) | (a > 1)):
        raise ValueError("alpha must lie in [0, 1]")
    if np.any(k < 0) or np.any(k != np.floor(k)):
        raise ValueError("k must be a non-negative integer")
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.log(a)
        # expm1 keeps full precision as alpha -> 1, where 1 - alpha^(k+1) and 1 - alpha both vanish
        out = np.expm1((k + 1) * log_a) / np.expm1(log_a)
    out = np.where(a == 0, 1.0, out)
    return np.where(a == 1, k + 1.0, out)


def al_from_rates(rates) -> float:
    """AL ``1 + sum_i r_i`` from per-position acceptance rates ``r_i`` (share of drafts whose (i+1)-th
    token was accepted); the rates must lie in [0, 1] and not increase with position."""
    r = np.asarray(rates, dtype=float)
    if r.ndim != 1:
        raise ValueError(f"rates must be 1-D, got shape {r.shape}")
    if np.any((r < 0) | (r > 1)):
        raise ValueError("rates must lie in [0, 1]")
    if np.any(np.diff(r) > 1e-12):
        raise ValueError("rates must not increase with position")
    return float(1.0 + r.sum())


# ----------------------------------------------------------------------------- precision vs normalized AL


def tree_al(parents, accept, *, sequential: bool = False) -> float:
    """AL (tokens per target pass) of one draft tree from per-node acceptance probabilities.

    ``parents[i]``: node i's parent (-1 for the root, parents before children); ``accept[i]``: the
    probability that node i is accepted given that its parent was, siblings being exclusive (one
    child at most is accepted, as in greedy verification of distinct tokens), so the siblings'
    probabilities sum to at most 1. With ``sequential``, ``accept[i]`` is instead the probability that
    node i passes when tried after its earlier siblings failed (recursive rejection sampling); it is
    converted by ``accept[i] * prod(1 - accept[s])`` over the earlier siblings ``s``.
    Returns ``1 + sum_i prod_{j on the path to i} accept[j]``: the target's token plus the expected
    accepted path length; a chain with ``accept = alpha`` gives :func:`chain_al`.
    """
    parents = [int(p) for p in parents]
    a = np.asarray(accept, dtype=float)
    if a.shape != (len(parents),):
        raise ValueError(f"accept must have one probability per node, got shape {a.shape} for {len(parents)} nodes")
    if np.any((a < 0) | (a > 1)) or not np.all(np.isfinite(a)):
        raise ValueError("accept must lie in [0, 1]")
    if any(not -1 <= p < i for i, p in enumerate(parents)):
        raise ValueError("parents must satisfy -1 <= parents[i] < i")
    if sequential:
        left: dict[int, float] = {}  # parent -> probability that all children tried so far failed
        a = a.copy()
        for i, p in enumerate(parents):
            fail = left.get(p, 1.0)
            left[p] = fail * (1.0 - a[i])
            a[i] *= fail
    sums = np.zeros(len(parents) + 1)
    np.add.at(sums, np.asarray(parents, dtype=int) + 1, a)
    if np.any(sums > 1 + 1e-9):
        raise ValueError("the acceptance probabilities of a node's children sum to more than 1")
    reach = np.zeros(len(parents))  # probability that node i is on the accepted path
    for i, p in enumerate(parents):
        reach[i] = a[i] * (1.0 if p < 0 else reach[p])
    return float(1.0 + reach.sum())


def normalized_al_from_precision(precision_al, draft_share):
    """Sequence-normalized AL ``1 + s (precision_al - 1)`` from precision AL and the share ``s`` of
    verification steps that had a draft.

    Every step emits ``1 + accepted`` tokens and only steps with a draft accept any, so
    ``tokens / steps = 1 + s * accepted / drafts``. Ignores the prefill pass and sequence ends
    (see :func:`normalized_al_exact`). Broadcasts.
    """
    p, s = np.asarray(precision_al, dtype=float), np.asarray(draft_share, dtype=float)
    _check_share(s)
    return 1.0 + s * (p - 1.0)


def precision_al_from_normalized(seq_al, draft_share):
    """Inverse of :func:`normalized_al_from_precision`: ``1 + (seq_al - 1) / s`` (NaN where ``s == 0``)."""
    q, s = np.asarray(seq_al, dtype=float), np.asarray(draft_share, dtype=float)
    _check_share(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(s > 0, 1.0 + (q - 1.0) / np.where(s > 0, s, 1.0), np.nan)


def normalized_al_exact(precision_al, *, num_steps, num_drafts, num_sequences=1, prefill_tokens=None,
                        truncated=0):
    """Exact sequence-normalized AL (tokens / target passes, prefill included) from precision AL.

    ``num_steps``: verification passes; ``num_drafts``: those with a draft; ``num_sequences``: prefill
    passes; ``prefill_tokens``: tokens the prefills emitted (default one per sequence); ``truncated``:
    steps that emitted only their accepted tokens (EOS or the end of the output among them).
    Tokens are ``prefill + steps + accepted - truncated`` with ``accepted = (precision_al - 1) drafts``
    (zero when there were no drafts, whatever ``precision_al`` is).
    """
    n, d, q = (np.asarray(x, dtype=float) for x in (num_steps, num_drafts, num_sequences))
    pre = q if prefill_tokens is None else np.asarray(prefill_tokens, dtype=float)
    accepted = np.where(d > 0, (np.asarray(precision_al, dtype=float) - 1.0) * d, 0.0)
    return (pre + n + accepted - truncated) / (q + n)


def precision_al_exact(seq_al, *, num_steps, num_drafts, num_sequences=1, prefill_tokens=None, truncated=0):
    """Inverse of :func:`normalized_al_exact`: ``1 + accepted / drafts`` (NaN when ``num_drafts == 0``)."""
    n, d, q = (np.asarray(x, dtype=float) for x in (num_steps, num_drafts, num_sequences))
    pre = q if prefill_tokens is None else np.asarray(prefill_tokens, dtype=float)
    accepted = np.asarray(seq_al, dtype=float) * (q + n) - pre - n + truncated
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, 1.0 + accepted / np.where(d > 0, d, 1.0), np.nan)


def _check_share(s: np.ndarray) -> None:
    if np.any((s < 0) | (s > 1)):
        raise ValueError("draft_share must lie in [0, 1]")


# ----------------------------------------------------------------------------- the re-sync model


def _pass_cover_probs(alpha: float, k: int) -> np.ndarray:
    """``P(T = t)``, ``t = 1..k+1``: tokens a synced n-gram pass covers inside a long run when each draft token
    is accepted with probability ``alpha`` given the ones before it were (the pass ends at the first miss,
    with the target's own token, or after ``k`` accepted and the target's token)."""
    t = np.arange(1, k + 1)
    return np.append(alpha ** (t - 1) * (1.0 - alpha), alpha**k)


def _synced_passes(max_r: int, alpha: float, k: int) -> np.ndarray:
    """``g[R]``, ``R = 0..max_r``: expected n-gram passes over the last ``R`` tokens of a run and the new token
    after it, starting synced; ``g[R] = 1 + sum_t P(T=t) g[R-t]`` (terms with ``t <= R``), an IIR filter."""
    return lfilter([1.0], np.append(1.0, -_pass_cover_probs(alpha, k)), np.ones(max_r + 1))


def _run_passes(r: np.ndarray, d: float, a: float, k: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(passes, whether the last pass also emitted the token after the run) for runs of ``r`` tokens (integers);
    linear interpolation between ``floor(d)`` and ``floor(d) + 1`` makes it continuous in ``d``."""
    d0 = np.floor(d)
    w = d - d0
    g = _synced_passes(int(r.max(initial=0)), alpha, k)
    out_p, out_f = 0.0, 0.0
    for dd, wt in ((d0, 1.0 - w), (d0 + 1.0, w)):
        rest = np.maximum(r - dd, 0.0)
        drafted = rest >= 1
        out_p = out_p + wt * (np.minimum(r, dd) / a + np.where(drafted, g[rest.astype(int)], 0.0))
        out_f = out_f + wt * drafted
    return out_p, out_f


def resync_passes(runs, length, *, k, resync, novel_rate, copy_accept=1.0) -> np.ndarray:
    """Expected target passes (prefill included) of the re-sync model for outputs whose copied runs are known.

    ``runs``: per output, the lengths of its runs copied from the input (e.g.
    :func:`hybridsd.edit_distance.copied_runs` over tokens); ``length``: per output, its tokens. The tokens
    outside runs are new text. Assumptions: the module docstring's; besides, the prefill's token saves one
    pass at the novel rate, and every run is followed by a token (a run that ends the output is off by up
    to a pass). Diagnostic: it needs each output's copied runs, i.e. the output itself.
    """
    _check_resync(k, resync, novel_rate, copy_accept)
    length = np.asarray(length, dtype=float).ravel()
    if len(runs) != length.size:
        raise ValueError(f"runs has {len(runs)} outputs, length {length.size}")
    counts = np.array([len(r) for r in runs], dtype=int)
    flat = np.concatenate([np.asarray(r, dtype=float).ravel() for r in runs]) if counts.sum() else np.zeros(0)
    owner = np.repeat(np.arange(length.size), counts)
    copied = np.bincount(owner, weights=flat, minlength=length.size)
    if np.any(flat < 0) or np.any(flat != np.floor(flat)) or np.any(copied > length):
        raise ValueError("runs must be non-negative integers and not longer than their output")
    passes, free = _run_passes(flat, float(resync), float(novel_rate), k, float(copy_accept))
    novel = length - copied - np.bincount(owner, weights=free, minlength=length.size)
    body = np.bincount(owner, weights=passes, minlength=length.size) + novel / novel_rate
    # the prefill emits the first token, which would otherwise take a pass at the novel rate; a run's last pass
    # is credited the next token even when that is the next run's first (adjacent runs), and a pass emits at
    # most k + 1 tokens (novel_rate for new text), which bounds the passes from below
    floor = np.maximum(length - 1.0, 0.0) / max(k + 1.0, float(novel_rate))
    return 1.0 + np.maximum(body - np.minimum(length, 1.0) / novel_rate, floor)


def _check_resync(k, resync, novel_rate, copy_accept) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if resync < 0 or novel_rate < 1 or not 0 <= copy_accept <= 1:
        raise ValueError(f"need resync >= 0, novel_rate >= 1 and copy_accept in [0, 1], "
                         f"got {resync}, {novel_rate} and {copy_accept}")


def resync_al(edit_norm, length=None, *, k, segment_len, resync, novel_rate, copy_accept=1.0, base_edits=0.0):
    """Expected sequence-normalized AL (prefill included) of n-gram or hybrid decoding under the re-sync
    model, from the new-token share ``e`` and the output ``length`` in tokens (``None``: the long-output limit).

    ``e`` (the ``edit_norm`` argument) is the share of output tokens that are not copied from the input, not
    the character edit norm of the data sets: convert that with :func:`new_share` (constants from
    :func:`fit_new_share`). Predictive: ``e``, the length and dataset constants (``segment_len``,
    ``base_edits``, see :func:`fit_edit_structure`; ``resync``, ``novel_rate``, ``copy_accept``).

    Assumptions, besides the module docstring's: an output of ``L`` tokens has
    ``base_edits + e L / segment_len`` edits (a commit touches a few places however small it is), holding
    ``e L`` new tokens between them; the edits split the copied text into one more run than there are edits,
    each of geometric length (on 0, 1, ...) with the mean ``mu`` that makes the copied share ``1 - e``.

    With ``p = mu / (1 + mu)``, ``d = resync``, ``a = novel_rate`` and ``T`` the tokens one synced pass
    covers inside a long run (``P(T=t) = alpha^(t-1) (1-alpha)`` for ``t <= k``, ``alpha^k`` for ``k+1``),
    the expected passes per run are ``mu (1 - p^d) / a + p^(d+1) (1 + E[p^T] / p / (1 - E[p^T]))``:
    re-sync tokens ``E[min(run, d)]`` at rate ``a``; then, when tokens remain (``p^(d+1)``), passes until the
    run ends inside one (memorylessness makes their number geometric). New text costs
    ``(e L - edits p^(d+1)) / a`` passes. At ``alpha = 1``, ``E[p^T] = p^(k+1)``. Broadcasts over ``edit_norm``
    and ``length``.
    """
    e = np.asarray(edit_norm, dtype=float)
    if np.any((e < 0) | (e > 1)):
        raise ValueError("edit_norm must lie in [0, 1]")
    _check_resync(k, resync, novel_rate, copy_accept)
    if segment_len <= 0 or base_edits < 0:
        raise ValueError(f"need segment_len > 0 and base_edits >= 0, got {segment_len} and {base_edits}")
    body = 1e12 if length is None else np.asarray(length, dtype=float) - 1.0  # tokens after the prefill
    if np.any(body < 0):
        raise ValueError("length must be >= 1")
    d, a = float(resync), float(novel_rate)
    cover = _pass_cover_probs(float(copy_accept), k)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        body = np.maximum(body, 1e-9)
        edit_rate = base_edits / body + e / segment_len  # edits per token
        run_rate = edit_rate + 1.0 / body
        mu = (1.0 - e) / run_rate
        log_p = np.log1p(-np.minimum(run_rate / (run_rate + (1.0 - e)), 1.0))  # p = mu / (1 + mu), accurate near 1
        ep = sum(c * np.exp((t + 1) * log_p) for t, c in enumerate(cover))  # E[p^T]
        one_minus_ep = sum(c * -np.expm1((t + 1) * log_p) for t, c in enumerate(cover))
        synced = np.where(ep > 0, 1.0 + ep / np.exp(log_p) / one_minus_ep, 1.0)
        tail = np.exp((d + 1) * log_p)  # P(tokens remain after the re-sync)
        resync_tokens = mu * -np.expm1(d * log_p) if d > 0 else 0.0  # E[min(run, d)]
        per_run = resync_tokens / a + tail * synced
        per_token = run_rate * per_run + (e - edit_rate * tail) / a  # a run's last pass emits the next token
        # edits without new text (deletions) credit that token all the same; a pass emits at most k + 1 tokens
        # (a at the novel rate), which caps what that over-credit can give for short, nearly unchanged outputs
        return np.minimum((body + 1.0) / (1.0 + body * per_token), max(k + 1.0, a))


def fit_edit_structure(edit_norm, length, n_edits) -> dict[str, float]:
    """``base_edits`` and ``segment_len`` of :func:`resync_al` from the edits counted in reference outputs
    (e.g. copied runs minus one), by non-negative least squares of ``n_edits ~ base_edits + e L / segment_len``;
    ``e`` is the new-token share, as :func:`resync_al` takes it."""
    e, ln, n = (np.asarray(x, dtype=float).ravel() for x in (edit_norm, length, n_edits))
    if not e.size == ln.size == n.size or e.size < 2:
        raise ValueError("edit_norm, length and n_edits need one value per output, at least two outputs")
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
    if np.any((e < 0) | (e > 1)) or np.any((y < 0) | (y > 1)):
        raise ValueError("edit_norm and new_share must lie in [0, 1]")
    coef, _ = nnls(np.column_stack([np.ones_like(e), e]), y)
    return {"share_intercept": float(coef[0]), "share_slope": float(coef[1])}


def new_share(edit_norm, *, share_intercept, share_slope):
    """The new-token share :func:`resync_al` takes, from a character edit norm: ``intercept + slope * e``
    clipped to [0, 1] (constants from :func:`fit_new_share`). Broadcasts."""
    e = np.asarray(edit_norm, dtype=float)
    if np.any((e < 0) | (e > 1)):
        raise ValueError("edit_norm must lie in [0, 1]")
    if share_intercept < 0 or share_slope < 0:
        raise ValueError(f"share_intercept and share_slope must be >= 0, got {share_intercept}, {share_slope}")
    return np.clip(share_intercept + share_slope * e, 0.0, 1.0)


# ----------------------------------------------------------------------------- fitting


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
    w = np.ones(n) if weights is None else np.broadcast_to(np.asarray(weights, dtype=float), (n,))
    if np.any(w < 0):
        raise ValueError("weights must be >= 0")
    if not 0 < ci < 1:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    unknown = set(fixed) - set(names)
    if unknown:
        raise ValueError(f"unknown parameters {sorted(unknown)}; expected some of {list(names)}")
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
        rng = np.random.default_rng(seed)
        draws = [solve(idx, al, [x]) for idx in (rng.integers(0, n, n) for _ in range(n_boot))]
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

    def predict(self, runs, length, groups=None) -> np.ndarray:
        """Predicted AL per output, or with ``groups`` (a group index per output, -1 to skip) the corpus AL
        (total tokens / total passes) of each group ``0..max(groups)`` (NaN for an empty group)."""
        length = np.asarray(length, dtype=float)
        passes = resync_passes(runs, length, k=int(self.settings["k"]), **self.params)
        if groups is None:
            return length / passes
        return _group_al(length, passes, np.asarray(groups), int(np.max(groups)) + 1)

    def as_dict(self) -> dict:
        """Plain-dict view for results files."""
        return _as_dict(self)


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


def _points(edit_norm, al, length):
    e, y = np.asarray(edit_norm, dtype=float).ravel(), np.asarray(al, dtype=float).ravel()
    if e.shape != y.shape or e.size == 0:
        raise ValueError(f"edit_norm and al must be non-empty and of one shape, got {e.shape} and {y.shape}")
    ln = None if length is None else np.broadcast_to(np.asarray(length, dtype=float), e.shape)
    return e, y, ln


def _fit_e_model(model, edit_norm, al, length, fixed, settings, weights, boot, n_boot, ci, seed,
                 bounds=None) -> ModelFit:
    fn, names, default_bounds, start = _MODELS[model]
    bounds = {**default_bounds, **(bounds or {})}
    for p, v in fixed.items():
        if p in bounds and not bounds[p][0] <= v <= bounds[p][1]:
            raise ValueError(f"{p}={v} lies outside its range [{bounds[p][0]}, {bounds[p][1]}]")
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
    bins) to refit for the intervals; without it the points themselves are resampled ``n_boot`` times
    (0: no intervals). ``ci``: the intervals' coverage.
    """
    fixed = {k: v for k, v in {"al_eagle": al_eagle, "al_ngram": al_ngram}.items() if v is not None}
    bounds = {name: (1.0, kk + 1.0) for name, kk in (("al_ngram", k_ngram), ("al_eagle", k_eagle)) if kk is not None}
    if any(kk < 1 for kk in (k_ngram, k_eagle) if kk is not None):
        raise ValueError(f"k_ngram and k_eagle must be >= 1, got {k_ngram} and {k_eagle}")
    settings = {name: float(kk) for name, kk in (("k_ngram", k_ngram), ("k_eagle", k_eagle)) if kk is not None}
    return _fit_e_model("harmonic", edit_norm, al, None, fixed, settings, weights, boot, n_boot, ci, seed, bounds)


def fit_resync(edit_norm, al, length=None, *, k, segment_len=None, resync=None, novel_rate=None, copy_accept=1.0,
               base_edits=0.0, share=None, weights=None, boot=None, n_boot=200, ci=0.95, seed=0) -> ModelFit:
    """Fit :func:`resync_al` (n-gram draft length ``k``) to measured ALs at ``edit_norm`` with output
    ``length`` per point. Parameters given are held fixed: by default ``copy_accept`` at 1 and ``base_edits``
    at 0 (``None`` fits them; per-bin ALs hardly tell ``copy_accept`` from ``resync``, which then also
    absorbs misdirected drafts inside runs). The edit structure (``segment_len``, ``base_edits``) is best
    measured from the reference diffs with :func:`fit_edit_structure`. ``edit_norm`` is the new-token share,
    or with ``share`` (the constants of :func:`fit_new_share`) a character edit norm, converted by
    :func:`new_share` here and in ``predict``. Bootstrap as in :func:`fit_harmonic`."""
    given = {"segment_len": segment_len, "resync": resync, "novel_rate": novel_rate, "copy_accept": copy_accept,
             "base_edits": base_edits}
    fixed = {n: v for n, v in given.items() if v is not None}
    settings = {"k": int(k)}
    if share is not None:
        if set(share) != {"share_intercept", "share_slope"}:
            raise ValueError(f"share must hold share_intercept and share_slope, got {sorted(share)}")
        new_share(0.0, **share)  # validates the constants
        settings.update({n: float(v) for n, v in share.items()})
    return _fit_e_model("resync", edit_norm, al, length, fixed, settings, weights, boot, n_boot, ci, seed)


def fit_resync_runs(runs, length, groups, al, *, k, resync=None, novel_rate=None, copy_accept=1.0, weights=None,
                    boot=None, n_boot=200, ci=0.95, seed=0) -> RunsFit:
    """Fit :func:`resync_passes` to measured corpus ALs of groups of outputs (e.g. edit-norm bins).

    ``runs``/``length``: per output, its copied runs and tokens; ``groups``: per output, the index of its
    group in ``al`` (-1: unused); ``al``: the measured AL (total tokens / total passes) of each group.
    Parameters given are held fixed (``copy_accept`` at 1 by default; ``None`` fits it). Bootstrap as in
    :func:`fit_harmonic`, over groups. Diagnostic: it needs each output's copied runs.
    """
    y = np.asarray(al, dtype=float).ravel()
    groups = np.asarray(groups).ravel()
    length = np.asarray(length, dtype=float).ravel()
    if groups.size != length.size or len(runs) != length.size:
        raise ValueError("runs, length and groups need one entry per output")
    if groups.max(initial=-1) >= y.size:
        raise ValueError(f"groups index past al ({y.size} groups)")
    keep = groups >= 0
    runs = [r for r, k_ in zip(runs, keep) if k_]
    length, groups = length[keep], groups[keep]
    settings = {"k": int(k)}

    def predict(params, idx):
        passes = resync_passes(runs, length, k=int(k), **params)
        return _group_al(length, passes, groups, y.size)[idx]

    given = {"resync": resync, "novel_rate": novel_rate, "copy_accept": copy_accept}
    fixed = {n: v for n, v in given.items() if v is not None}
    params, intervals, free, rmse, used = _fit_params(
        tuple(given), _RESYNC_BOUNDS, _RESYNC_START, fixed, predict, y, weights, boot, n_boot, ci,
        seed)
    return RunsFit(params=params, ci=intervals, fitted=free, settings=settings, n_points=int(y.size), rmse=rmse,
                   n_boot=used)


# ----------------------------------------------------------------------------- errors


def model_error(pred, measured) -> dict[str, float]:
    """Error summary of predictions against measurements (NaN pairs dropped): ``mae``, ``rmse``,
    ``max_abs``, ``mean_rel`` (mean of ``|pred - measured| / measured``) and ``n``."""
    p, m = np.asarray(pred, dtype=float).ravel(), np.asarray(measured, dtype=float).ravel()
    if p.shape != m.shape:
        raise ValueError(f"pred and measured differ in size: {p.shape} vs {m.shape}")
    ok = np.isfinite(p) & np.isfinite(m)
    err = p[ok] - m[ok]
    if not err.size:
        return {"mae": np.nan, "rmse": np.nan, "max_abs": np.nan, "mean_rel": np.nan, "n": 0}
    return {"mae": float(np.mean(np.abs(err))), "rmse": float(np.sqrt(np.mean(err**2))),
            "max_abs": float(np.max(np.abs(err))), "mean_rel": float(np.mean(np.abs(err) / np.abs(m[ok]))),
            "n": int(err.size)}
