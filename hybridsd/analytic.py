"""Analytic models of acceptance length (AL): closed forms and conversions (fitting them: :mod:`hybridsd.fit`).

Functions broadcast over numpy arrays and use numpy/scipy only. NaN in a broadcast argument (a missing
measurement, e.g. in a DataFrame column) gives NaN in the outputs it reaches, not an error, unless a docstring
says otherwise; a value outside an argument's range raises ValueError naming it. The model constants (scalar
keyword arguments such as ``k`` or ``resync``) must each be one finite real number (TypeError for a string, a
bool or an array) and refuse NaN, as do :func:`al_from_rates`, :func:`tree_al` and :func:`resync_passes`, which
take one draft's or output's measurements as sequences.

- :func:`harmonic_al`: the PR's model, ``1 / (e/AL_eagle + (1-e)/AL_ngram)``.
- :func:`chain_al`, :func:`al_from_rates`: AL of one chain draft from i.i.d. or per-position acceptance;
  :func:`tree_al`: AL of one draft tree from per-node acceptance.
- :func:`normalized_al_from_precision` and friends: precision AL (vLLM's) <-> sequence-normalized AL.
- :func:`resync_al` (from the edit norm) and :func:`resync_passes` (from measured copied runs): the
  re-sync model below.
- :func:`harmonic_calibrate_ngram`: the AL_ngram that puts the harmonic model through a measured point.
- :func:`new_share`: the character edit norm turned into the share of output tokens not copied from the input,
  which :func:`resync_al` takes (its dataset constants: :func:`hybridsd.fit.fit_new_share`).

Predictive or diagnostic. A *predictive* model needs only the edit norm of a prompt's change (and its output
length) plus constants measured once per dataset or method; it can say what AL to expect before decoding:
:func:`harmonic_al`, :func:`resync_al` (with :func:`new_share` for a character edit norm) and their fits
:func:`~hybridsd.fit.fit_harmonic`, :func:`~hybridsd.fit.fit_resync`. A *diagnostic* model needs the reference
output itself (its copied runs): :func:`resync_passes` and :func:`~hybridsd.fit.fit_resync_runs` explain a
measured AL, they cannot forecast one.

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
  the next run's first token after a deletion), which therefore costs nothing more. With ``copy_accept < 1``
  each draft token inside the run is instead accepted with that probability given the ones before it were
  (a pass then covers ``T`` tokens, ``P(T=t) = copy_accept^(t-1) (1 - copy_accept)`` for ``t <= k`` and
  ``copy_accept^k`` for ``k+1``, until the run ends inside one);
- ``resync`` may be fractional (an average): :func:`resync_passes` interpolates passes linearly in it,
  :func:`resync_al`'s closed form extends ``p^d`` to real ``d`` (the two agree at whole ``d``); the prefill
  is one pass.
"""

from __future__ import annotations

import numpy as np

# ----------------------------------------------------------------------------- closed forms


def harmonic_al(edit_norm, al_eagle, al_ngram):
    """Hybrid AL of the PR's model: ``1 / (e / al_eagle + (1 - e) / al_ngram)``.

    Assumes a share ``e`` of the output is new text, produced at ``al_eagle`` tokens per step, and the
    rest is copied at ``al_ngram`` tokens per step, with no cost to switch between them. For n-gram
    alone pass ``al_eagle=1``. ``al_ngram`` is the rate on copied text (``e = 0``), at most ``k + 1`` for
    drafts of ``k`` tokens; a measured n-gram AL at ``e > 0`` is not it (see
    :func:`harmonic_calibrate_ngram`). Predictive: the edit norm and two constants. Broadcasts; ``e`` in
    [0, 1], ALs finite and >= 1.
    """
    e, ae, an = (np.asarray(x, dtype=float) for x in (edit_norm, al_eagle, al_ngram))
    if np.any((e < 0) | (e > 1)):
        raise ValueError("edit_norm must lie in [0, 1]")
    _check_al(ae, "al_eagle")
    _check_al(an, "al_ngram")
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
    _check_al(a, "al")
    _check_al(ae, "al_eagle")
    slack = 1.0 / a - e / ae
    if k is not None:
        check_k(k)
        rate = np.where(slack > 0, (1.0 - e) / np.where(slack > 0, slack, 1.0), k + 1.0)
        return np.where(np.isnan(slack), np.nan, np.clip(rate, 1.0, k + 1.0))  # NaN in: NaN, not the cap
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
    given, k = k, np.asarray(k)
    if k.dtype.kind not in "iuf":
        raise TypeError(f"k must be a non-negative integer (or an array of them), got {given!r:.60}")
    if np.any((a < 0) | (a > 1)):
        raise ValueError("alpha must lie in [0, 1]")
    if np.any(k < 0) or np.any(np.isinf(k)) or np.any((k != np.floor(k)) & ~np.isnan(k)):
        raise ValueError("k must be a non-negative integer")
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.log(a)
        # expm1 keeps full precision as alpha -> 1, where 1 - alpha^(k+1) and 1 - alpha both vanish
        out = np.expm1((k + 1) * log_a) / np.expm1(log_a)
    out = np.where(a == 0, 1.0, out)
    return np.where(np.isnan(k), np.nan, np.where(a == 1, k + 1.0, out))  # a NaN k gives NaN at alpha = 0 too


def al_from_rates(rates) -> float:
    """AL ``1 + sum_i r_i`` from per-position acceptance rates ``r_i`` (share of drafts whose (i+1)-th
    token was accepted); the rates must lie in [0, 1] and not increase with position."""
    r = np.asarray(rates, dtype=float)
    if r.ndim != 1:
        raise ValueError(f"rates must be 1-D, got shape {r.shape}")
    if not np.all((r >= 0) & (r <= 1)):  # NaN fails too
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
    parents = _whole_numbers(parents, "parents")
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
    _check_al(p, "precision_al")
    return 1.0 + s * (p - 1.0)


def precision_al_from_normalized(seq_al, draft_share):
    """Inverse of :func:`normalized_al_from_precision`: ``1 + (seq_al - 1) / s`` (NaN where ``s == 0``: no drafts).

    A share so small that the quotient overflows (a subnormal ``s``) gives ``+-inf``, the quotient rounded, without a
    warning (``1`` where ``seq_al == 1``)."""
    q, s = np.asarray(seq_al, dtype=float), np.asarray(draft_share, dtype=float)
    _check_share(s)
    _check_al(q, "seq_al")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(s > 0, 1.0 + (q - 1.0) / np.where(s > 0, s, 1.0), np.nan)


def normalized_al_exact(precision_al, *, num_steps, num_drafts, num_sequences=1, prefill_tokens=None,
                        truncated=0):
    """Exact sequence-normalized AL (tokens / target passes, prefill included) from precision AL.

    ``num_steps``: verification passes; ``num_drafts``: those with a draft; ``num_sequences``: prefill
    passes; ``prefill_tokens``: tokens the prefills emitted (default one per sequence); ``truncated``:
    steps that emitted only their accepted tokens (EOS or the end of the output among them).
    Tokens are ``prefill + steps + accepted - truncated`` with ``accepted = (precision_al - 1) drafts``
    (zero when there were no drafts, whatever ``precision_al`` >= 1 is). The counts must be finite and >= 0, with
    at least one pass (``num_sequences + num_steps > 0``) and ``num_drafts`` and ``truncated`` at most ``num_steps``;
    NaN in a count gives NaN, and so does a NaN ``precision_al`` where there were drafts.
    """
    _check_al(np.asarray(precision_al, dtype=float), "precision_al")
    n, d, q, pre = _check_counts(num_steps, num_drafts, num_sequences, prefill_tokens, truncated)
    accepted = np.where(d > 0, (np.asarray(precision_al, dtype=float) - 1.0) * d, 0.0 * d)  # NaN d: NaN
    return (pre + n + accepted - truncated) / (q + n)


def precision_al_exact(seq_al, *, num_steps, num_drafts, num_sequences=1, prefill_tokens=None, truncated=0):
    """Inverse of :func:`normalized_al_exact`: ``1 + accepted / drafts`` (NaN when ``num_drafts == 0``); the counts
    as there. ``seq_al`` must be finite and at least what the counts give with nothing accepted,
    ``(prefill_tokens + num_steps - truncated) / (num_sequences + num_steps)`` (ValueError: no precision AL >= 1 gives
    it); NaN gives NaN."""
    n, d, q, pre = _check_counts(num_steps, num_drafts, num_sequences, prefill_tokens, truncated)
    seq = np.asarray(seq_al, dtype=float)
    if np.any(np.isinf(seq)):
        raise ValueError(f"seq_al must be finite (tokens per pass), got {seq[np.isinf(seq)].ravel()[0]}")
    accepted = seq * (q + n) - pre - n + truncated
    short = accepted < -1e-9 * (q + n) * np.maximum(seq, 1.0)  # beyond rounding
    if np.any(short):
        got = np.broadcast_to(seq, short.shape)[short][0]
        raise ValueError("seq_al must be >= (prefill_tokens + num_steps - truncated) / (num_sequences + num_steps), "
                         f"the AL of these counts with nothing accepted, got {got}")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(d > 0, 1.0 + accepted / np.where(d > 0, d, 1.0), np.nan)


def _check_share(s: np.ndarray) -> None:
    if np.any((s < 0) | (s > 1)):
        raise ValueError("draft_share must lie in [0, 1]")


def _check_al(x: np.ndarray, name: str) -> None:
    """ValueError naming ``name`` where an AL (tokens per pass or per draft) is below 1 or infinite; NaN passes."""
    bad = (x < 1) | np.isinf(x)
    if np.any(bad):
        raise ValueError(f"{name} must be >= 1 and finite (tokens per pass), got {x[bad].ravel()[0]}")


def _check_counts(num_steps, num_drafts, num_sequences, prefill_tokens, truncated):
    """``(num_steps, num_drafts, num_sequences, prefill tokens)`` as float arrays; ValueError naming a count that is
    negative or infinite (NaN passes) or, for ``num_drafts`` and ``truncated``, above ``num_steps``, and when there
    are no passes at all."""
    named = {"num_steps": num_steps, "num_drafts": num_drafts, "num_sequences": num_sequences,
             "prefill_tokens": num_sequences if prefill_tokens is None else prefill_tokens, "truncated": truncated}
    arrays = {name: np.asarray(x, dtype=float) for name, x in named.items()}
    for name, x in arrays.items():
        if np.any((x < 0) | np.isinf(x)):
            raise ValueError(f"{name} must be finite and >= 0 (a count), got {x[(x < 0) | np.isinf(x)].ravel()[0]}")
    if np.any(arrays["num_sequences"] + arrays["num_steps"] == 0):
        raise ValueError("num_sequences + num_steps must be > 0 (no target pass)")
    for name in ("num_drafts", "truncated"):  # both count verification steps of some kind
        if np.any(arrays[name] > arrays["num_steps"]):
            raise ValueError(f"{name} must be <= num_steps (it counts verification steps), got "
                             f"{arrays[name][arrays[name] > arrays['num_steps']].ravel()[0]}")
    return arrays["num_steps"], arrays["num_drafts"], arrays["num_sequences"], arrays["prefill_tokens"]


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
    from scipy.signal import lfilter  # imported here: the closed forms load without scipy

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
    if not np.all((length >= 0) & (length < np.inf)):
        raise ValueError("length must be finite and >= 0")
    per = run_lengths(runs)
    if len(per) != length.size:
        raise ValueError(f"runs has {len(per)} outputs, length {length.size}")
    counts = np.array([r.size for r in per], dtype=int)
    flat = np.concatenate(per) if counts.sum() else np.zeros(0)
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


def run_lengths(runs) -> list[np.ndarray]:
    """Each output's copied runs as a 1-D float array; TypeError naming ``runs`` unless it is a sequence (one entry
    per output) of sequences of numbers."""
    try:
        per = [np.asarray(r) for r in runs]
    except (TypeError, ValueError):  # not iterable, or a ragged entry
        per = None
    if per is None or isinstance(runs, (str, bytes)) or any(r.ndim != 1 or r.dtype.kind not in "iuf" for r in per):
        raise TypeError(f"runs must hold one sequence of run lengths per output, got {runs!r:.60}")
    return [r.astype(float) for r in per]


def _whole_numbers(xs, name: str) -> list[int]:
    """``xs`` as a list of ints; TypeError naming ``name`` unless it is a 1-D sequence of numbers, ValueError unless
    they are whole numbers."""
    try:
        a = np.asarray(xs)
    except (TypeError, ValueError):  # a ragged sequence
        a = np.asarray(None)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iuf"):
        raise TypeError(f"{name} must be a 1-D sequence of integers, got {xs!r:.60}")
    if not np.all(np.isfinite(a) & (a == np.round(a))):
        raise ValueError(f"{name} must be integers, got {a[~(np.isfinite(a) & (a == np.round(a)))][0]}")
    return [int(x) for x in a]


def real_number(x, name: str, what: str = "a real number") -> float:
    """``x`` as a float; TypeError naming ``name`` unless it is one real number (not a bool, a string or an array)."""
    try:
        ok = np.ndim(x) == 0 and np.asarray(x).dtype.kind in "iuf"
    except (TypeError, ValueError):  # a ragged sequence
        ok = False
    if not ok:
        raise TypeError(f"{name} must be {what}, got {x!r:.60}")
    return float(x)


def _check_constant(x, name: str, lo: float, hi: float = np.inf, *, above: bool = False) -> None:
    """TypeError naming ``name`` unless ``x`` (a model constant) is one real number, ValueError unless it is finite
    and in ``[lo, hi]`` (``(lo, hi]`` with ``above``); NaN fails."""
    v = real_number(x, name)
    if not (np.isfinite(v) and (v > lo if above else v >= lo) and v <= hi):
        want = f"in [{lo:g}, {hi:g}]" if hi < np.inf else f"{'>' if above else '>='} {lo:g}"
        raise ValueError(f"{name} must be finite and {want}, got {x}")


def check_k(k, name: str = "k") -> None:
    """TypeError naming ``name`` unless ``k`` (a draft length) is one real number, ValueError unless it is an
    integer >= 1 (NaN and infinity fail)."""
    v = real_number(k, name, "an integer >= 1")
    if not (np.isfinite(v) and v >= 1 and int(v) == v):
        raise ValueError(f"{name} must be an integer >= 1, got {k}")


def _check_resync(k, resync, novel_rate, copy_accept) -> None:
    check_k(k)
    _check_constant(resync, "resync", 0.0)
    _check_constant(novel_rate, "novel_rate", 1.0)
    _check_constant(copy_accept, "copy_accept", 0.0, 1.0)


def resync_al(edit_norm, length=None, *, k, segment_len, resync, novel_rate, copy_accept=1.0, base_edits=0.0):
    """Expected sequence-normalized AL (prefill included) of n-gram or hybrid decoding under the re-sync
    model, from the new-token share ``e`` and the output ``length`` in tokens (``None``: the long-output limit).

    ``e`` (the ``edit_norm`` argument) is the share of output tokens that are not copied from the input, not
    the character edit norm of the data sets: convert that with :func:`new_share` (constants from
    :func:`~hybridsd.fit.fit_new_share`). Predictive: ``e``, the length and dataset constants (``segment_len``,
    ``base_edits``, see :func:`~hybridsd.fit.fit_edit_structure`; ``resync``, ``novel_rate``, ``copy_accept``).

    Assumptions, besides the module docstring's: the prefill emits an output's first token, and its other
    ``n = L - 1`` tokens hold ``base_edits + e n / segment_len`` edits (a commit touches a few places however
    small it is) and ``e n`` new tokens between them; the edits split the copied text into one more run than
    there are edits, each of geometric length (on 0, 1, ...) with the mean ``mu`` that makes the copied share
    ``1 - e``.

    With ``p = mu / (1 + mu)``, ``d = resync``, ``a = novel_rate``, ``alpha = copy_accept`` and ``T`` the
    tokens one synced pass covers inside a long run (``P(T=t) = alpha^(t-1) (1-alpha)`` for ``t <= k``,
    ``alpha^k`` for ``k+1``), the expected passes per run are
    ``mu (1 - p^d) / a + p^(d+1) (1 + E[p^T] / p / (1 - E[p^T]))``: re-sync tokens ``E[min(run, d)]`` at rate
    ``a``; then, when tokens remain (``p^(d+1)``), passes until the run ends inside one (memorylessness makes
    their number geometric). New text costs ``(e n - edits p^(d+1)) / a`` passes. The result is ``L`` over one
    pass plus these, capped at ``max(k + 1, a)``. At ``alpha = 1``, ``E[p^T] = p^(k+1)``. Broadcasts over
    ``edit_norm`` and ``length``.
    """
    e = np.asarray(edit_norm, dtype=float)
    if np.any((e < 0) | (e > 1)):
        raise ValueError("edit_norm must lie in [0, 1]")
    _check_resync(k, resync, novel_rate, copy_accept)
    _check_constant(segment_len, "segment_len", 0.0, above=True)
    _check_constant(base_edits, "base_edits", 0.0)
    body = 1e12 if length is None else np.asarray(length, dtype=float) - 1.0  # tokens after the prefill
    if np.any((body < 0) | np.isinf(body)):  # NaN passes: a missing length gives NaN
        raise ValueError("length must be finite and >= 1 (None: the long-output limit)")
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


def new_share(edit_norm, *, share_intercept, share_slope):
    """The new-token share :func:`resync_al` takes, from a character edit norm: ``intercept + slope * e``
    clipped to [0, 1] (constants from :func:`~hybridsd.fit.fit_new_share`). Broadcasts."""
    e = np.asarray(edit_norm, dtype=float)
    if np.any((e < 0) | (e > 1)):
        raise ValueError("edit_norm must lie in [0, 1]")
    _check_constant(share_intercept, "share_intercept", 0.0)
    _check_constant(share_slope, "share_slope", 0.0)
    return np.clip(share_intercept + share_slope * e, 0.0, 1.0)
