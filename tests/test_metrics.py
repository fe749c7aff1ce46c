"""SpecStats: the ALs and rates against their definitions, corpus aggregation, and StepRecord's checks."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsd.metrics import SpecStats, StepRecord


@st.composite
def _step(draw):
    drafted = draw(st.integers(0, 6))
    accepted = draw(st.integers(0, drafted))
    emitted = accepted + (0 if accepted and draw(st.booleans()) else 1)  # EOS among the accepted tokens
    proposed = draw(st.sampled_from([("ngram",), ("eagle",), ("ngram", "eagle")])) if drafted else ()
    source = draw(st.sampled_from(proposed)) if accepted else None
    return StepRecord(proposed=proposed, drafted=drafted, accepted=accepted, emitted=emitted, source=source)


@st.composite
def _generation(draw):
    stats = SpecStats()
    stats.record_prefill(draw(st.integers(0, 1)))
    for step in draw(st.lists(_step(), max_size=15)):
        stats.record_step(step)
    return stats


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(_generation(), max_size=5))
def test_corpus_counters_are_sums_not_means_of_ratios(parts):
    total = SpecStats.combine(parts)
    total.check()
    steps = [t for p in parts for t in p.trace]
    tokens = sum(p.prefill_tokens for p in parts) + sum(t.emitted for t in steps)
    passes = len(parts) + len(steps)  # one prefill per generation
    assert (total.num_tokens, total.num_target_steps) == (tokens, passes)
    assert math.isnan(total.seq_normalized_al) if not passes else total.seq_normalized_al == tokens / passes
    drafts = sum(1 for t in steps if t.drafted)
    accepted = sum(t.accepted for t in steps)
    if drafts:
        assert total.precision_al == pytest.approx(1 + accepted / drafts)
        depth = max(t.drafted for t in steps)
        rates = [sum(1 for t in steps if t.accepted > i) / drafts for i in range(depth)]
        assert total.acceptance_rates == pytest.approx(rates)
        assert 1 + sum(total.acceptance_rates) == pytest.approx(total.precision_al)
        assert total.draft_share == drafts / len(steps)
    else:
        assert math.isnan(total.precision_al) and total.acceptance_rates == []


def test_empty_stats():
    s = SpecStats()
    assert math.isnan(s.seq_normalized_al) and math.isnan(s.precision_al) and math.isnan(s.draft_share)
    assert s.acceptance_rates == [] and s.summary()["num_tokens"] == 0
    assert SpecStats.combine([]).num_target_steps == 0


@pytest.mark.parametrize("kwargs, match", [
    ({"drafted": 0, "accepted": 0, "emitted": 0}, "emitted=0"),  # every pass emits a token
    ({"drafted": 2, "accepted": 1, "emitted": 3}, "emitted=3"),
    ({"drafted": 1, "accepted": 2, "emitted": 3}, "accepted=2"),
    ({"drafted": 2, "accepted": 0, "emitted": 1, "proposed": ()}, "no drafter proposed"),
    ({"drafted": 2, "accepted": 1, "emitted": 2, "source": None}, "source=None"),
    ({"drafted": 2, "accepted": 0, "emitted": 1, "source": "ngram"}, "source='ngram'"),
    ({"drafted": 2, "accepted": 1, "emitted": 2, "source": "eagle"}, "source='eagle'"),
])
def test_step_record_refuses_impossible_steps(kwargs, match):
    full = {"proposed": ("ngram",), "source": "ngram" if kwargs["accepted"] else None, **kwargs}
    with pytest.raises(ValueError, match=match):
        StepRecord(**full)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"proposed": "ngram", "source": "n"}, TypeError, "proposed must be a tuple of drafter names"),  # "n" in "ngram"
    ({"proposed": ["ngram"]}, TypeError, "proposed must be a tuple"),
    ({"proposed": ("ngram", 3)}, TypeError, "proposed must be a tuple"),
    ({"accepted": 1.5, "emitted": 2.5}, TypeError, "accepted must be an int, got 1.5"),
    ({"accepted": True}, TypeError, "accepted must be an int, got True"),
    ({"drafted": 3.0}, TypeError, "drafted must be an int"),
    ({"emitted": "2"}, TypeError, "emitted must be an int"),
    ({"tree_tokens": 4.0}, TypeError, "tree_tokens must be an int"),
    ({"tree_tokens": -5}, ValueError, "tree_tokens must be >= 0, got -5"),
    ({"drafted": -1, "accepted": 0, "emitted": 1, "source": None}, ValueError, "drafted must be >= 0"),
])
def test_step_record_refuses_bad_types(kwargs, error, match):
    """A string of drafter names used to pass the source check by a substring match ('n' in 'ngram')."""
    full = {"proposed": ("ngram",), "drafted": 3, "accepted": 1, "emitted": 2, "source": "ngram", **kwargs}
    with pytest.raises(error, match=match):
        StepRecord(**full)


def test_step_record_counts_keep_their_values():
    import numpy as np

    step = StepRecord(("ngram", "eagle"), np.int64(3), 2, 3, "eagle", tree_tokens=5)
    s = SpecStats()
    s.record_step(step)
    assert s.summary()["steps_by_drafter"] == {"ngram+eagle": 1} and s.num_accepted == 2


@pytest.mark.parametrize("step", [None, {"drafted": 3, "accepted": 1, "emitted": 2}, ("ngram",)])
def test_record_step_refuses_what_is_not_a_step_record(step):
    s = SpecStats()
    s.record_prefill(1)
    with pytest.raises(TypeError, match="record_step takes a StepRecord"):
        s.record_step(step)
    assert s.trace == [] and s.num_target_steps == 1 and s.num_tokens == 1  # the prefill alone
