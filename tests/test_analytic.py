"""Closed forms, AL conversions and the re-sync model (their fits: test_fit.py)."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hybridsd.analytic import (
    al_from_rates,
    chain_al,
    check_k,
    harmonic_al,
    harmonic_calibrate_ngram,
    new_share,
    normalized_al_exact,
    normalized_al_from_precision,
    precision_al_exact,
    precision_al_from_normalized,
    resync_al,
    resync_passes,
    tree_al,
)

HYP = settings(max_examples=60, deadline=None)
unit = st.floats(0.0, 1.0)
al = st.floats(1.0, 20.0)


@HYP
@given(e=unit, ae=al, an=al)
def test_harmonic_between_inputs(e, ae, an):
    h = harmonic_al(e, ae, an)
    assert min(ae, an) - 1e-9 <= h <= max(ae, an) + 1e-9


@HYP
@given(e1=unit, e2=unit, ae=al, an=al)
def test_harmonic_monotone_in_e(e1, e2, ae, an):
    lo, hi = sorted((e1, e2))
    # more new text moves AL toward al_eagle
    if ae <= an:
        assert harmonic_al(hi, ae, an) <= harmonic_al(lo, ae, an) + 1e-9
    else:
        assert harmonic_al(hi, ae, an) >= harmonic_al(lo, ae, an) - 1e-9


def test_harmonic_values_and_broadcasting():
    assert harmonic_al(0.0, 2.0, 5.0) == pytest.approx(5.0)
    assert harmonic_al(1.0, 2.0, 5.0) == pytest.approx(2.0)
    assert harmonic_al(0.5, 1.0, 3.0) == pytest.approx(1.5)  # n-gram alone: al_eagle = 1
    assert harmonic_al(np.array([0.1, 0.2]), 2.0, np.array([[4.0], [5.0]])).shape == (2, 2)
    with pytest.raises(ValueError):
        harmonic_al(1.5, 2.0, 3.0)
    with pytest.raises(ValueError):
        harmonic_al(0.5, 0.5, 3.0)


@HYP
@given(alpha=unit, k=st.integers(0, 12))
def test_chain_al_bounds_and_sum(alpha, k):
    a = chain_al(alpha, k)
    assert 1.0 - 1e-12 <= a <= k + 1 + 1e-9
    assert a == pytest.approx(sum(alpha**j for j in range(k + 1)), rel=1e-9)
    assert a == pytest.approx(al_from_rates([alpha ** (i + 1) for i in range(k)]), rel=1e-9)


@HYP
@given(a1=unit, a2=unit, k=st.integers(1, 10))
def test_chain_al_increases_with_alpha(a1, a2, k):
    lo, hi = sorted((a1, a2))
    assert chain_al(lo, k) <= chain_al(hi, k) + 1e-9


def test_chain_al_limits():
    assert chain_al(1.0, 3) == 4.0
    assert chain_al(1 - 1e-12, 3) == pytest.approx(4.0)
    assert chain_al(0.0, 5) == 1.0
    assert chain_al(0.5, 3) == pytest.approx(1.875)
    assert np.allclose(chain_al([0.0, 0.5, 1.0], 2), [1.0, 1.75, 3.0])
    for bad in ((1.1, 3), (-0.1, 3), (0.5, -1), (0.5, 1.5)):
        with pytest.raises(ValueError):
            chain_al(*bad)


def test_al_from_rates():
    assert al_from_rates([0.65, 0.42, 0.25]) == pytest.approx(2.32)
    assert al_from_rates([]) == 1.0
    for bad in ([0.2, 0.5], [1.5], [[0.5]]):
        with pytest.raises(ValueError):
            al_from_rates(bad)


@HYP
@given(p=st.floats(1.0, 10.0), s=st.floats(0.01, 1.0))
def test_precision_normalized_round_trip(p, s):
    q = normalized_al_from_precision(p, s)
    assert 1.0 <= q <= p + 1e-9
    assert precision_al_from_normalized(q, s) == pytest.approx(p)


@pytest.mark.filterwarnings("error")
def test_precision_normalized_edges():
    assert normalized_al_from_precision(3.63, 0.0) == 1.0
    assert np.isnan(precision_al_from_normalized(1.0, 0.0))
    with pytest.raises(ValueError):
        normalized_al_from_precision(2.0, 1.5)
    # a subnormal share: the quotient overflows to its rounded value, without a RuntimeWarning
    tiny = np.nextafter(0.0, 1.0)
    out = precision_al_from_normalized([2.0, 1.0, np.nan], tiny)
    np.testing.assert_array_equal(out, [np.inf, 1.0, np.nan])
    assert precision_al_exact(2.0, num_steps=1, num_drafts=tiny) == np.inf


@HYP
@given(n=st.integers(1, 500), data=st.data())
def test_exact_conversion_round_trip(n, data):
    d = data.draw(st.integers(0, n))
    q = data.draw(st.integers(1, 4))
    acc = data.draw(st.integers(0, 5 * d))
    trunc = data.draw(st.integers(0, min(q, n)))
    p = 1 + acc / d if d else np.nan
    seq = normalized_al_exact(p, num_steps=n, num_drafts=d, num_sequences=q, truncated=trunc)
    assert seq == pytest.approx((q + n + acc - trunc) / (q + n))
    back = precision_al_exact(seq, num_steps=n, num_drafts=d, num_sequences=q, truncated=trunc)
    assert np.isnan(back) if d == 0 else back == pytest.approx(p)


def test_exact_matches_approximation_for_long_runs():
    # without prefill and truncation effects the two conversions agree
    p, n, d = 3.0, 10**7, 4 * 10**6
    assert normalized_al_exact(p, num_steps=n, num_drafts=d) == pytest.approx(
        normalized_al_from_precision(p, d / n), rel=1e-6)


# ----------------------------------------------------------------------------- re-sync model

@HYP
@given(alpha=st.floats(0.5, 1.0), k=st.integers(1, 8))
def test_resync_copy_limit_is_chain_al(alpha, k):
    al_ = resync_al(0.0, None, k=k, segment_len=30, resync=3, novel_rate=2, copy_accept=alpha)
    assert al_ == pytest.approx(chain_al(alpha, k), rel=1e-6)


@HYP
@given(e=unit, length=st.one_of(st.none(), st.integers(1, 5000)), k=st.integers(1, 8),
       lam=st.floats(1.0, 200.0), d=st.floats(0.0, 30.0), a=st.floats(1.0, 4.0), base=st.floats(0.0, 10.0))
def test_resync_bounds(e, length, k, lam, d, a, base):
    v = resync_al(e, length, k=k, segment_len=lam, resync=d, novel_rate=a, base_edits=base)
    assert 1.0 - 1e-9 <= v <= max(k + 1.0, a) + 1e-9


def test_resync_edits_without_new_text_stay_within_the_bound():
    """No new text (e = 0) but edits (deletions): their runs' last passes have no new token to emit."""
    assert resync_al(0.0, 8, k=1, segment_len=1.0, resync=0.0, novel_rate=1.0, base_edits=5.0) <= 2.0
    passes = resync_passes([[3, 4]], [7], k=1, resync=0, novel_rate=1.0)  # two adjacent runs, nothing new
    assert 7 / passes[0] <= 2.0


@HYP
@given(e1=unit, e2=unit, k=st.integers(1, 8), d=st.floats(0.0, 20.0), length=st.integers(50, 3000))
def test_resync_ngram_alone_decreases_with_e(e1, e2, k, d, length):
    lo, hi = sorted((e1, e2))
    f = lambda e: resync_al(e, length, k=k, segment_len=20, resync=d, novel_rate=1.0, base_edits=2)  # noqa: E731
    assert f(hi) <= f(lo) + 1e-9


def test_resync_values():
    assert resync_al(1.0, None, k=5, segment_len=10, resync=2, novel_rate=2.5) == pytest.approx(2.5)
    assert resync_al(0.0, None, k=5, segment_len=10, resync=2, novel_rate=2.5) == pytest.approx(6.0)
    assert resync_al(0.3, np.array([100, 1000]), k=5, segment_len=10, resync=2, novel_rate=1).shape == (2,)
    with pytest.raises(ValueError):
        resync_al(0.3, 100, k=5, segment_len=10, resync=-1, novel_rate=1)
    with pytest.raises(ValueError):
        resync_al(0.3, 100, k=5, segment_len=0, resync=1, novel_rate=1)
    for k in (0, 5.5):  # one pass emits at most k + 1 tokens, k a whole draft length
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            resync_al(0.0, None, k=k, segment_len=10, resync=2, novel_rate=2.5)
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            resync_passes([[10]], [20], k=k, resync=2, novel_rate=1)


def test_resync_passes_hand_computed():
    # run 10: 2 re-sync passes + floor(8/6) + 1; run 0: nothing; run 5: 2 + 1; new text 5 - 2 emitted by the
    # runs' last passes; the prefill's token saves one pass. A run ending the output is credited a token anyway.
    got = resync_passes([[10, 0, 5], [], [100]], [20, 5, 100], k=5, resync=2, novel_rate=1)
    assert got == pytest.approx([1 + 4 + 3 + 3 - 1, 1 + 5 - 1, 1 + 2 + 17 - 1 - 1])
    half = resync_passes([[10, 0, 5]], [20], k=5, resync=2.5, novel_rate=1)
    assert half[0] == pytest.approx((10 + resync_passes([[10, 0, 5]], [20], k=5, resync=3, novel_rate=1)[0]) / 2)
    with pytest.raises(ValueError):
        resync_passes([[30]], [20], k=5, resync=2, novel_rate=1)
    with pytest.raises(ValueError):
        resync_passes([[3]], [20, 30], k=5, resync=2, novel_rate=1)


def test_resync_passes_misdirected_drafts():
    # a long run with per-token acceptance alpha approaches length / chain_al(alpha, k)
    n = 200_000
    got = resync_passes([[n]], [n], k=4, resync=0, novel_rate=1, copy_accept=0.9)[0]
    assert n / got == pytest.approx(chain_al(0.9, 4), rel=1e-3)


# ----------------------------------------------------------------------------- fits

@HYP
@given(e=st.floats(0.0, 0.9), ae=al, an=al)
def test_harmonic_calibration_reproduces_its_point(e, ae, an):
    measured = float(harmonic_al(e, ae, an))
    rate = harmonic_calibrate_ngram(measured, e, ae)
    assert rate == pytest.approx(an, rel=1e-6)
    assert harmonic_al(e, ae, rate) == pytest.approx(measured, rel=1e-9)  # through the calibration point
    if e > 0.01 and ae < an * 0.99:  # the measured AL discounts new text: using it directly misses the point
        assert harmonic_al(e, ae, measured) < measured


def test_harmonic_calibration_cap_and_errors():
    assert harmonic_calibrate_ngram(4.0, 0.2, 1.0, k=5) == pytest.approx(6.0)  # uncapped: 0.8 / 0.05 = 16
    assert harmonic_calibrate_ngram(4.0, 0.2, 1.0) == pytest.approx(16.0)
    with pytest.raises(ValueError, match="too high"):
        harmonic_calibrate_ngram(5.0, 0.2, 1.0)  # 1/5 - 0.2 = 0: infinitely fast copying
    assert harmonic_calibrate_ngram(5.0, 0.2, 1.0, k=5) == 6.0  # with k: the cap
    with pytest.raises(ValueError, match="edit_norm"):
        harmonic_calibrate_ngram(2.0, 1.0)
    for k in (0, 5.5, np.nan):  # the cap is k + 1 for a whole draft length k
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            harmonic_calibrate_ngram(4.0, 0.2, 1.0, k=k)


# ---- audit: NaN and non-finite inputs, imports ----------------------------------------------------------


def test_nan_and_infinite_inputs_are_named():
    with pytest.raises(ValueError, match="rates must lie in"):
        al_from_rates([0.5, np.nan])
    base = {"k": 5, "segment_len": 30.0, "resync": 2.0, "novel_rate": 1.0}
    for bad in ({"resync": np.nan}, {"novel_rate": np.nan}, {"copy_accept": np.nan}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be finite"):
            resync_al(0.2, 500, **{**base, **bad})
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be finite"):
            resync_passes([[10]], [20], **{**{k: v for k, v in base.items() if k != "segment_len"}, **bad})
    for bad in ({"segment_len": np.nan}, {"base_edits": np.nan}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be finite"):
            resync_al(0.2, 500, **{**base, **bad})
    for length in (np.inf, 0):
        with pytest.raises(ValueError, match="length must be finite"):
            resync_al(0.2, length, **base)
    for bad, name in (({"share_intercept": np.nan, "share_slope": 1.0}, "share_intercept"),
                      ({"share_intercept": 0.0, "share_slope": np.nan}, "share_slope")):
        with pytest.raises(ValueError, match=f"{name} must be finite"):
            new_share(0.3, **bad)
    for length in (np.nan, np.inf, -1):
        with pytest.raises(ValueError, match="length must be finite"):
            resync_passes([[]], [length], k=5, resync=2, novel_rate=1)
    assert resync_passes([[]], [0], k=5, resync=2, novel_rate=1)[0] == 1.0  # an empty output: the prefill only


RESYNC = {"k": 4, "segment_len": 30.0, "resync": 2.0, "novel_rate": 1.5, "copy_accept": 0.9, "base_edits": 1.0}
counts = st.integers(1, 500).map(float)
BROADCAST = {  # name: (function of the broadcast arguments, a strategy of valid values for each)
    "harmonic_al": (harmonic_al, (unit, al, al)),
    "harmonic_calibrate_ngram": (harmonic_calibrate_ngram, (st.floats(1.0, 1.5), st.floats(0.0, 0.5), al)),
    "harmonic_calibrate_ngram k=5": (lambda a, e, ae: harmonic_calibrate_ngram(a, e, ae, k=5),
                                     (al, st.floats(0.0, 0.99), al)),
    "chain_al": (chain_al, (unit, st.integers(0, 12).map(float))),
    "normalized_al_from_precision": (normalized_al_from_precision, (al, unit)),
    "precision_al_from_normalized": (precision_al_from_normalized, (al, unit)),
    # num_steps = n + d: a step holds at most one draft
    "normalized_al_exact": (lambda p, n, d: normalized_al_exact(p, num_steps=n + d, num_drafts=d),
                            (al, counts, counts)),
    "precision_al_exact": (lambda q, n, d: precision_al_exact(q, num_steps=n + d, num_drafts=d), (al, counts, counts)),
    "resync_al": (lambda e, n: resync_al(e, n, **RESYNC), (unit, st.integers(1, 5000).map(float))),
    "new_share": (lambda e: new_share(e, share_intercept=0.1, share_slope=1.2), (unit,)),
}


@pytest.mark.parametrize("name", BROADCAST)
@HYP
@given(data=st.data())
def test_nan_in_gives_nan_out(name, data):
    """A NaN in any broadcast argument (a missing measurement) gives NaN in that output only, the module's rule."""
    f, values = BROADCAST[name]
    clean = [np.array(data.draw(st.lists(v, min_size=4, max_size=4))) for v in values]
    holes = [np.array(data.draw(st.lists(st.booleans(), min_size=4, max_size=4))) for _ in values]
    out = f(*(np.where(h, np.nan, c) for c, h in zip(clean, holes)))
    missing = np.logical_or.reduce(holes)
    assert np.isnan(out[missing]).all()
    np.testing.assert_array_equal(out[~missing], f(*clean)[~missing])


def test_nan_rule_edges():
    assert np.isnan(chain_al(0.0, np.nan)) and np.isnan(chain_al(1.0, np.nan))  # alpha alone does not decide
    assert normalized_al_exact(np.nan, num_steps=10, num_drafts=0) == 1.0  # no drafts: precision AL unused
    assert np.isnan(resync_al(np.nan, None, **RESYNC))


def test_closed_forms_load_without_torch():
    import subprocess
    import sys

    code = ("import sys, hybridsd.analytic as a, hybridsd.edit_distance as d; a.harmonic_al(0.1, 2, 4); "
            "a.resync_passes([[10]], [20], k=5, resync=2, novel_rate=1); d.edit_norm('ab', 'b'); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- review: bad input gets one error naming the argument, before any work -------------------------------

K_USERS = {  # a function of k alone, the other arguments valid
    "check_k": check_k,
    "harmonic_calibrate_ngram": lambda k: harmonic_calibrate_ngram(4.0, 0.2, 1.0, k=k),
    "resync_al": lambda k: resync_al(0.2, 500, k=k, segment_len=30, resync=2, novel_rate=1),
    "resync_passes": lambda k: resync_passes([[10]], [20], k=k, resync=2, novel_rate=1),
}
NOT_NUMBERS = ["5", b"5", [3, 5], np.array([3, 5]), True, None, {"k": 5}, 2 + 0j]


@pytest.mark.parametrize("user", K_USERS)
@pytest.mark.parametrize("k", [np.inf, -np.inf, np.nan, 0, -1, 2.5, 1e-300])
def test_k_out_of_range_is_a_value_error_naming_it(user, k):
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        K_USERS[user](k)


@pytest.mark.parametrize("user,k", [(u, k) for u in K_USERS for k in NOT_NUMBERS
                                    if not (k is None and u == "harmonic_calibrate_ngram")],  # None: no cap
                         ids=lambda x: x if isinstance(x, str) else repr(x))
def test_k_not_one_number_is_a_type_error_naming_it(user, k):
    with pytest.raises(TypeError, match="k must be an integer >= 1"):
        K_USERS[user](k)


@HYP
@given(k=st.one_of(st.floats(), st.integers(-10**6, 10**6)))
def test_check_k_accepts_exactly_the_whole_numbers_from_one(k):
    if math.isfinite(k) and k >= 1 and k == int(k):
        check_k(k)
        check_k(np.float64(k), "k_ngram")
    else:
        with pytest.raises(ValueError, match="k_ngram must be an integer >= 1"):
            check_k(k, "k_ngram")


def test_k_of_any_numeric_type_gives_the_same_result():
    want = resync_passes([[10, 3]], [20], k=5, resync=2, novel_rate=1.5)
    for k in (5.0, np.int64(5), np.float32(5), np.array(5)):
        np.testing.assert_array_equal(resync_passes([[10, 3]], [20], k=k, resync=2, novel_rate=1.5), want)


RESYNC_AL_KW = {"k": 4, "segment_len": 30.0, "resync": 2.0, "novel_rate": 1.5, "copy_accept": 0.9, "base_edits": 1.0}
def _resync_passes(**kw):
    keep = {n: v for n, v in {**RESYNC_AL_KW, **kw}.items() if n not in ("segment_len", "base_edits")}
    return resync_passes([[10]], [20], **keep)


CONSTANT_USERS = [
    *[(name, lambda **kw: resync_al(0.2, 500, **{**RESYNC_AL_KW, **kw}))
      for name in ("resync", "novel_rate", "copy_accept", "segment_len", "base_edits")],
    *[(name, _resync_passes) for name in ("resync", "novel_rate", "copy_accept")],
    *[(name, lambda **kw: new_share(0.3, **{"share_intercept": 0.01, "share_slope": 1.5, **kw}))
      for name in ("share_intercept", "share_slope")],
]


@pytest.mark.parametrize("name,user", CONSTANT_USERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONSTANT_USERS)])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, -1.0])
def test_a_model_constant_out_of_range_is_a_value_error_naming_it(name, user, bad):
    """Infinite constants used to give NaN (resync, base_edits) or a silently wrong AL (segment_len, novel_rate)."""
    with pytest.raises(ValueError, match=f"{name} must be finite"):
        user(**{name: bad})


@pytest.mark.parametrize("name,user", CONSTANT_USERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONSTANT_USERS)])
@pytest.mark.parametrize("bad", NOT_NUMBERS, ids=repr)
def test_a_model_constant_not_one_number_is_a_type_error_naming_it(name, user, bad):
    with pytest.raises(TypeError, match=f"{name} must be a real number"):
        user(**{name: bad})


COUNTS = ("num_steps", "num_drafts", "num_sequences", "prefill_tokens", "truncated")
EXACT = {"normalized_al_exact": normalized_al_exact, "precision_al_exact": precision_al_exact}


@pytest.mark.parametrize("f", EXACT)
@pytest.mark.parametrize("name", COUNTS)
@pytest.mark.parametrize("bad", [-5, -0.5, np.inf, -np.inf, [3.0, -1.0]], ids=repr)
def test_a_negative_or_infinite_count_is_named(f, name, bad):
    """num_steps=-5 used to give an AL of 0.25 (and a precision AL of -0.33)."""
    counts = {"num_steps": 10, "num_drafts": 3, "num_sequences": 1, "prefill_tokens": 1, "truncated": 0}
    with pytest.raises(ValueError, match=f"{name} must be finite and >= 0"):
        EXACT[f](2.0, **{**counts, name: bad})


@pytest.mark.parametrize("f", EXACT)
def test_no_target_pass_is_refused(f):
    with pytest.raises(ValueError, match=r"num_sequences \+ num_steps must be > 0"):
        EXACT[f](2.0, num_steps=[5, 0], num_drafts=0, num_sequences=0)


@HYP
@given(p=st.floats(max_value=1.0, exclude_max=True, allow_nan=False), s=unit, n=counts, d=counts)
def test_a_precision_al_below_one_is_refused(p, s, n, d):
    """Precision AL is 1 + accepted / drafts >= 1 (and so is the normalized AL it converts to)."""
    with pytest.raises(ValueError, match="precision_al must be >= 1"):
        normalized_al_from_precision(p, s)
    with pytest.raises(ValueError, match="precision_al must be >= 1"):
        normalized_al_exact([2.0, p], num_steps=n, num_drafts=d)
    with pytest.raises(ValueError, match="seq_al must be >= 1"):
        precision_al_from_normalized(p, s)


@pytest.mark.parametrize("parents,err", [([-1, 0.5], ValueError), ([-1, np.nan], ValueError),
                                         (["a"], TypeError), (None, TypeError), ([[-1], [0]], TypeError),
                                         ([-1, [0]], TypeError), ([True, False], TypeError)], ids=repr)
def test_tree_parents_must_be_whole_numbers(parents, err):
    """A parent 0.5 used to be truncated to 0 without a word."""
    with pytest.raises(err, match="parents must be"):
        tree_al(parents, [0.5] * (1 if parents is None else len(parents)))


def test_tree_parents_of_any_numeric_type_give_the_same_result():
    want = tree_al((-1, -1, 0, 0, 2), [0.3, 0.5, 0.2, 0.4, 0.9])
    for parents in ([-1.0, -1.0, 0.0, 0.0, 2.0], np.array([-1, -1, 0, 0, 2], dtype=np.int32)):
        assert tree_al(parents, [0.3, 0.5, 0.2, 0.4, 0.9]) == want


@pytest.mark.parametrize("runs", [np.array([3]), [3], [[3], 4], ["ab"], None, [[[3]]], [[3, [4]]], [[True]]],
                         ids=repr)
def test_runs_must_be_one_sequence_per_output(runs):
    """A 1-D array of runs used to fail with 'no len()'."""
    with pytest.raises(TypeError, match="runs must hold one sequence of run lengths per output"):
        resync_passes(runs, [20], k=5, resync=2, novel_rate=1)


def test_runs_as_arrays_give_the_same_result():
    want = resync_passes([[10, 0, 5], [], [100]], [20, 5, 100], k=5, resync=2, novel_rate=1)
    got = resync_passes([np.array([10.0, 0.0, 5.0]), np.array([], dtype=int), (100,)], np.array([20, 5, 100]), k=5,
                        resync=2, novel_rate=1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(resync_passes(np.array([[10, 5]]), [20], k=5, resync=2, novel_rate=1),
                                  resync_passes([[10, 5]], [20], k=5, resync=2, novel_rate=1))


# ---- review C: slow references, and inputs out of range ---------------------------------------------------


def _chain_monte_carlo(rates, n, seed):
    """Mean tokens per pass of ``n`` chain drafts, token i accepted w.p. ``r_i / r_{i-1}`` once the ones before were
    (a walk that stops at the first miss), plus the target's own token."""
    rng = np.random.default_rng(seed)
    cond = np.divide(rates, np.concatenate([[1.0], rates[:-1]]), out=np.zeros(len(rates)),
                     where=np.concatenate([[1.0], rates[:-1]]) > 0)
    alive = np.ones(n, dtype=bool)
    tokens = np.ones(n)
    for c in cond:
        alive &= rng.random(n) < c
        tokens += alive
    return tokens.mean(), tokens.std() / np.sqrt(n)


@settings(max_examples=25, deadline=None)
@given(rates=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=7).map(lambda r: sorted(r, reverse=True)),
       seed=st.integers(0, 2**32 - 1))
def test_chain_formula_matches_a_simulated_chain(rates, seed):
    """``1 + sum_i prod_{j<=i} r_j`` (here the r_i are the per-position rates, already products) is the mean of a
    simulated chain walk; with i.i.d. acceptance it is chain_al, and a one-child-per-node tree gives the same."""
    mean, se = _chain_monte_carlo(np.array(rates), 40_000, seed)
    assert al_from_rates(rates) == pytest.approx(mean, abs=6 * se + 1e-3)
    alpha = rates[0]
    iid = [alpha ** (i + 1) for i in range(len(rates))]
    mean, se = _chain_monte_carlo(np.array(iid), 40_000, seed)
    assert chain_al(alpha, len(rates)) == pytest.approx(mean, abs=6 * se + 1e-3)
    assert tree_al(list(range(-1, len(rates) - 1)), [alpha] * len(rates)) == pytest.approx(chain_al(alpha, len(rates)))


@HYP
@given(ae=al, an=al, tokens=st.integers(1, 10_000), e=unit)
def test_harmonic_is_tokens_over_the_steps_of_its_two_parts(ae, an, tokens, e):
    """The PR's count: ``e T / AL_eagle + (1 - e) T / AL_ngram`` steps for ``T`` tokens; limits at e = 0 and 1."""
    assert harmonic_al(e, ae, an) == pytest.approx(tokens / (e * tokens / ae + (1 - e) * tokens / an))
    assert harmonic_al(0.0, ae, an) == pytest.approx(an) and harmonic_al(1.0, ae, an) == pytest.approx(ae)
    assert harmonic_al(e, 1.0, an) <= an + 1e-9  # n-gram alone: new text at one token per step


@settings(max_examples=40, deadline=None)
@given(mu=st.floats(0.5, 80.0), d=st.integers(0, 12), a=st.floats(1.0, 3.0), k=st.integers(1, 7),
       alpha=st.floats(0.5, 1.0), e=st.floats(0.02, 0.6), base=st.floats(0.0, 4.0))
def test_resync_al_is_the_expectation_over_geometric_runs(mu, d, a, k, alpha, e, base):
    """At whole ``d``, resync_al's closed form is the exact expectation, over geometric runs of mean ``mu``, of the
    per-run passes of resync_passes (the recursion over synced passes), plus the new text's passes and the prefill
    as its docstring counts them."""
    from hybridsd.analytic import _run_passes

    segment_len = 25.0
    slack = (1.0 - e) / mu - e / segment_len  # runs per token after the prefill, less the edits that grow with e
    assume(slack > 1e-3)
    body = (base + 1.0) / slack  # the length after the prefill whose base + 1 + e body / segment_len runs average mu
    edits = base + e * body / segment_len
    p = mu / (1.0 + mu)
    r = np.arange(0, int(60 * (mu + 1)) + 200)
    w = (1.0 - p) * p**r  # P(run = r), geometric on 0, 1, ...
    passes, free = _run_passes(r.astype(float), float(d), a, k, alpha)
    expected_passes = 1.0 + (edits + 1.0) * (w * passes).sum() + (e * body - edits * (w * free).sum()) / a
    want = min((body + 1.0) / expected_passes, max(k + 1.0, a))
    got = resync_al(e, body + 1.0, k=k, segment_len=segment_len, resync=d, novel_rate=a, copy_accept=alpha,
                    base_edits=base)
    assert got == pytest.approx(want, rel=1e-7)


@pytest.mark.parametrize("call,name", [
    (lambda v: harmonic_al(0.3, v, 4.0), "al_eagle"),
    (lambda v: harmonic_al(0.3, 2.0, v), "al_ngram"),
    (lambda v: harmonic_calibrate_ngram(v, 0.2, 1.0, k=5), "al"),
    (lambda v: harmonic_calibrate_ngram(3.0, 0.2, v, k=5), "al_eagle"),
    (lambda v: normalized_al_from_precision(v, 0.5), "precision_al"),
    (lambda v: precision_al_from_normalized(v, 0.5), "seq_al"),
    (lambda v: normalized_al_exact(v, num_steps=10, num_drafts=4), "precision_al"),
    (lambda v: precision_al_exact(v, num_steps=10, num_drafts=4), "seq_al"),
], ids=["harmonic-al_eagle", "harmonic-al_ngram", "calibrate-al", "calibrate-al_eagle", "from_precision",
        "from_normalized", "exact", "exact_inverse"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, 0.5], ids=repr)
def test_an_infinite_or_too_small_al_is_a_value_error_naming_it(call, name, bad):
    """harmonic_al(0, 2, inf) used to return inf (with a RuntimeWarning), harmonic_al(0.5, inf, 3) 6.0,
    harmonic_calibrate_ngram(inf, 0.2, k=5) the cap 6.0 and precision_al_exact(inf, ...) inf: no pass emits
    infinitely many tokens."""
    with pytest.raises(ValueError, match=f"^{name} must be "):
        call(bad)


def test_harmonic_names_the_al_below_one():
    with pytest.raises(ValueError, match="al_ngram must be >= 1"):
        harmonic_al(0.3, 2.0, 0.9)
    with pytest.raises(ValueError, match="al_eagle must be >= 1"):
        harmonic_al(0.3, 0.9, 2.0)


@pytest.mark.parametrize("k", [np.inf, [3, np.inf]], ids=repr)
def test_chain_al_refuses_an_infinite_draft_length(k):
    """chain_al(0.5, inf) used to give 2.0 (the geometric series' limit) and chain_al(1, inf) inf."""
    with pytest.raises(ValueError, match="k must be a non-negative integer"):
        chain_al(0.5, k)
    with pytest.raises(ValueError, match="k must be a non-negative integer"):
        chain_al(1.0, k)


@pytest.mark.parametrize("k", ["3", True, None, [1, "a"]], ids=repr)
def test_chain_al_k_not_a_number_is_a_type_error_naming_it(k):
    """A string k used to fail inside numpy ('ufunc less did not contain a loop ...')."""
    with pytest.raises(TypeError, match="k must be a non-negative integer"):
        chain_al(0.5, k)


@pytest.mark.parametrize("f", EXACT)
@pytest.mark.parametrize("name", ["num_drafts", "truncated"])
def test_more_drafts_or_truncated_steps_than_steps_is_refused(f, name):
    """normalized_al_exact(1.0, num_steps=1, num_drafts=0, truncated=5) used to return an AL of -1.5."""
    counts = {"num_steps": 4, "num_drafts": 2, "truncated": 0, name: [3, 5]}
    with pytest.raises(ValueError, match=f"{name} must be <= num_steps"):
        EXACT[f](2.0, **counts)


@HYP
@given(n=st.integers(0, 200), q=st.integers(1, 3), data=st.data())
def test_exact_conversions_stay_physical_for_consistent_counts(n, q, data):
    """Counts that a decoder can produce give an AL >= 0 and, back, a precision AL >= 1 (or NaN without drafts);
    a seq_al below what those counts give with nothing accepted is refused instead of a precision AL below 1."""
    d, trunc = data.draw(st.integers(0, n)), data.draw(st.integers(0, n))
    pre = data.draw(st.integers(0, q))
    p = data.draw(st.floats(1.0, 8.0))
    counts = {"num_steps": n, "num_drafts": d, "num_sequences": q, "prefill_tokens": pre, "truncated": trunc}
    seq = normalized_al_exact(p, **counts)
    assert seq >= 0
    back = precision_al_exact(seq, **counts)
    assert np.isnan(back) if d == 0 else back == pytest.approx(p, rel=1e-9, abs=1e-9)
    floor = (pre + n - trunc) / (q + n)
    if d and floor > 0:
        with pytest.raises(ValueError, match="seq_al must be >="):
            precision_al_exact(floor * (1 - 1e-6) - 1e-6, **counts)


def test_a_precision_al_from_a_seq_al_too_low_for_the_counts_is_refused():
    """precision_al_exact(0.5, num_steps=10, num_drafts=5) used to return a precision AL of -0.1."""
    with pytest.raises(ValueError, match="seq_al must be >="):
        precision_al_exact(0.5, num_steps=10, num_drafts=5)
    # truncation can put a legitimate seq_al below 1: one step, its draft rejected, cut at the end
    assert precision_al_exact(0.5, num_steps=1, num_drafts=1, truncated=1) == pytest.approx(1.0)
