"""The zoo target's quality gate (experiments.zoo_gate): its rank correlation against the textbook definition,
the spread of its prompts over edit-norm bins, the loop measure, the score against the pass line, the early
stopping of a loop repair by it, and the paired comparison of two gates."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import train_zoo as tz
from experiments import zoo_gate as zg


def _slow_spearman(x, y):
    """Pearson correlation of average ranks, ranks by counting (the textbook definition)."""
    def ranks(v):
        return [sum(w < a for w in v) + (sum(w == a for w in v) + 1) / 2 for a in v]
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=3, max_size=20))
def test_spearman_matches_the_textbook_definition(pairs):
    x, y = [float(a) for a, _ in pairs], [float(b) for _, b in pairs]
    got = zg.spearman(x, y)
    if len(set(x)) < 2 or len(set(y)) < 2:
        assert np.isnan(got)
    else:
        assert got == pytest.approx(_slow_spearman(x, y), abs=1e-12)


def test_spearman_interval_holds_the_estimate_and_narrows_with_more_prompts():
    rng = np.random.default_rng(3)

    def draw(n):
        x = rng.uniform(0, 0.6, n)
        return list(x), list(x + rng.normal(0, 0.2, n))

    x, y = draw(32)
    lo, hi = zg.spearman_ci(x, y)
    assert lo <= zg.spearman(x, y) <= hi and -1 <= lo < hi <= 1
    assert zg.spearman_ci(x, y) == (lo, hi)  # a fixed seed
    x4, y4 = (a * 4 for a in (x, y))  # the same pairs four times: a quarter of the variance, about half the width
    lo4, hi4 = zg.spearman_ci(x4, y4)
    assert 0.35 < (hi4 - lo4) / (hi - lo) < 0.65
    assert zg.spearman_ci(list(range(10)), list(range(10))) == pytest.approx((1.0, 1.0))
    assert all(np.isnan(zg.spearman_ci([0.1] * 5, [0.1, 0.2, 0.3, 0.4, 0.5])))  # undefined: a constant side


def test_gate_rows_spread_over_bins_and_respect_the_size_limit():
    rows = [{"id": f"r{i}", "before": "x" * (100 if i % 7 else 5000), "char_edit_norm": (i % 60) / 100}
            for i in range(600)]
    chosen = zg.gate_rows(rows, 16, 8, 1000)
    assert len(chosen) == 16 and len({r["id"] for r in chosen}) == 16
    assert all(len(r["before"]) <= 1000 for r in chosen)
    bins = [min(int(r["char_edit_norm"] / 0.6 * 8), 7) for r in chosen]
    assert sorted(bins) == sorted(list(range(8)) * 2)  # two from each bin
    assert zg.gate_rows(rows, 16, 8, 1000) == chosen  # deterministic
    few = zg.gate_rows(rows[:3], 16, 8, 1000)  # fewer rows than asked: all that qualify
    assert {r["id"] for r in few} == {"r1", "r2"}  # r0 is too long


@given(st.lists(st.integers(0, 5), max_size=40), st.integers(1, 5))
@settings(max_examples=60, deadline=None)
def test_distinct_share_counts_distinct_ngrams(tokens, n):
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    want = len(set(grams)) / len(grams) if grams else 1.0
    assert zg.distinct_share(tokens, n) == want
    assert zg.distinct_share([7, 8] * 50, 4) == 2 / 97  # a two-token loop: two distinct 4-grams
    assert zg.distinct_share(list(range(50)), 4) == 1.0


def test_gate_score_is_the_margin_over_the_pass_line():
    assert zg.gate_score({"eos_share": 0.9, "spearman_ref_out": 0.6}) == pytest.approx(1.0)
    assert zg.gate_score({"eos_share": 1.0, "spearman_ref_out": 0.3}) == pytest.approx(0.5)
    assert zg.gate_score({"eos_share": 0.45, "spearman_ref_out": 0.9}) == pytest.approx(0.5)
    assert zg.gate_score({"eos_share": 1.0, "spearman_ref_out": None}) == 0.0
    assert zg.gate_score({"eos_share": 1.0, "spearman_ref_out": float("nan")}) == 0.0


def test_checkpoint_selection_keeps_the_best_gated_weights(monkeypatch):
    """Gated at steps 2, 5, 8 and the last (9): the weights kept are those of the best score (the earliest of
    equals), as saved (bf16), and steps off the schedule are not gated."""
    # step -> (EOS share, Spearman, length share); step 8 fails on length alone
    scores = {2: (0.5, 0.7, 1.0), 5: (0.95, 0.65, 1.0), 8: (1.0, 0.9, 0.4), 9: (0.95, 0.65, 0.9)}
    gated = []

    def fake_gate(model, tokenizer, rows, cfg, stops):
        step = int(model.weight[0, 0].round())
        gated.append(step)
        eos, rho, length = scores[step]
        return {"n": 4, "eos_share": eos, "spearman_ref_out": rho, "spearman_ci95": None, "length_share": length,
                "loops": 0, "median_out_norm": 0.2}

    monkeypatch.setattr(zg, "quality_gate", fake_gate)
    model = torch.nn.Linear(3, 2, bias=False)
    select = zg.CheckpointSelection(None, [], tz.TargetConfig(), {"eot": 3, "eos": 1}, torch.device("cpu"), every=3,
                                    after=2)
    with torch.no_grad():
        for step in range(10):
            model.weight.fill_(step).add_(torch.arange(6.0).view(2, 3) / 1000)  # step in the first weight
            select(model, step, last=step == 9)
    assert gated == [2, 5, 8, 9]
    record = select.record()
    assert record["chosen_step"] == 5 and [g["step"] for g in record["gates"]] == [2, 5, 8, 9]
    assert [g["score"] for g in record["gates"]] == pytest.approx([0.5556, 1.0556, 0.5, 1.0556], abs=1e-4)
    want = (torch.full((2, 3), 5.0) + torch.arange(6.0).view(2, 3) / 1000).bfloat16().float()
    assert torch.equal(select.best_state["weight"], want)


def test_length_share_enters_the_score_where_a_gate_has_it():
    base = {"eos_share": 1.0, "spearman_ref_out": 0.9}
    assert zg.gate_score(base) == pytest.approx(1 / 0.9)  # a record made before the length share: two terms
    assert zg.gate_score(base | {"length_share": 0.4}) == pytest.approx(0.5)
    assert zg.gate_score(base | {"length_share": 0.84}) == pytest.approx(1.05)
    lo, hi = zg.GATE_LENGTH_RANGE
    assert zg.length_ok(True, 100, 100) and zg.length_ok(True, int(hi * 100), 100)
    assert not zg.length_ok(True, int(lo * 100) - 1, 100)  # truncated
    assert not zg.length_ok(True, int(hi * 100) + 1, 100)  # rambling
    assert not zg.length_ok(False, 100, 100)  # did not stop


def test_spearman_difference_is_paired_and_its_interval_excludes_zero_only_for_a_real_gain():
    rng = np.random.default_rng(1)
    x = rng.random(80)
    noisy, sharp = x + rng.normal(0, 0.4, 80), x + rng.normal(0, 0.02, 80)
    d, lo, hi, share = zg.spearman_diff_ci(x, noisy, sharp)
    assert d == pytest.approx(zg.spearman(x, sharp) - zg.spearman(x, noisy))
    assert 0 < lo <= d <= hi and share == 0.0  # B tracks x far better: every resample says so
    assert zg.spearman_diff_ci(x, noisy, sharp) == (d, lo, hi, share)  # a fixed seed
    d, lo, hi, share = zg.spearman_diff_ci(x, noisy, noisy)  # the same outputs: no difference, in every resample
    assert (d, lo, hi, share) == (0.0, 0.0, 0.0, 1.0)
    other = x + rng.normal(0, 0.4, 80)  # as noisy as A: the interval holds 0
    d, lo, hi, share = zg.spearman_diff_ci(x, noisy, other)
    assert lo < 0 < hi and 0 < share < 1
    with pytest.raises(ValueError, match="paired"):
        zg.spearman_diff_ci(x, noisy, sharp[:-1])


def _gate_record(ids, ref, out, stopped):
    return {"quality_gate": {"samples": [{"id": i, "ref_norm": r, "out_norm": o, "stopped": s}
                                         for i, r, o, s in zip(ids, ref, out, stopped)]}}


def test_compare_gates_uses_the_shared_prompts(tmp_path, capsys):
    a = _gate_record("pqrstu", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.3, 0.1, 0.2, 0.6, 0.4, 0.5], [1, 1, 0, 1, 1, 1])
    b = _gate_record("qrstuvw", [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [0.2, 0.3, 0.4, 0.5, 0.6, 0.1, 0.1],
                     [1, 1, 1, 1, 1, 0, 0])
    got = zg.compare_gates(a, b)  # shared: q r s t u (v, w and p are each in one record only)
    assert got["n"] == 5 and got["b"]["spearman"] == pytest.approx(1.0) and got["b"]["eos_share"] == 1.0
    assert got["a"]["eos_share"] == 0.8
    assert got["spearman_b_minus_a"] == pytest.approx(1.0 - zg.spearman([.2, .3, .4, .5, .6], [.1, .2, .6, .4, .5]))
    with pytest.raises(ValueError, match="share 1 prompts"):
        zg.compare_gates(a, _gate_record("pxy", [0.1, 0.2, 0.3], [0.1, 0.2, 0.3], [1, 1, 1]))
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(json.dumps(a)), fb.write_text(json.dumps(b))
    tz.main(["compare-gates", str(fa), str(fb)])
    plain = json.loads(capsys.readouterr().out)
    assert plain["n"] == 5
    fz = tmp_path / "b.json.gz"  # a gzipped record reads as the same record
    fz.write_bytes(gzip.compress(fb.read_bytes()))
    assert zg.read_gate(fz) == zg.read_gate(fb) == b
    tz.main(["compare-gates", str(fa), str(fz)])
    assert json.loads(capsys.readouterr().out) == plain
    fb.unlink()  # stored only gzipped: the .json name still reads it
    assert zg.read_gate(fb) == b
    tz.main(["compare-gates", str(fa), str(fb)])
    assert json.loads(capsys.readouterr().out) == plain
    with pytest.raises(SystemExit) as e:
        tz.main(["compare-gates", str(fa), str(tmp_path / "missing.json")])
    assert e.value.code == 2 and "missing.json" in capsys.readouterr().err


def test_compare_gates_refuses_prompts_of_other_references():
    """Gates whose shared prompt ids carry other reference edit norms answered other references: not paired."""
    a = _gate_record("pqrs", [0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], [1, 1, 1, 1])
    b = _gate_record("pqrs", [0.1, 0.2, 0.35, 0.4], [0.1, 0.2, 0.3, 0.4], [1, 1, 1, 1])
    with pytest.raises(ValueError, match="1 shared prompts \\(r, ...\\) have other reference edit norms"):
        zg.compare_gates(a, b)


def test_misses_count_each_kind_and_what_it_costs():
    """Hand-made answers: every output edits as much as asked but one that edits nothing (short), one that edits
    far more (long) and one below the size floor; replacing a kind's norms by the references' is what its
    ``rho_without`` reads, and replacing both restores a perfect ranking."""
    ref = [0.02, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    out = [0.0, 0.1, 0.9, 0.3, 0.0, 0.5, 0.6]  # 0.02 -> 0.0: below MISS_MIN_REF, not short
    gate = {"quality_gate": {"samples": [{"ref_norm": r, "out_norm": o} for r, o in zip(ref, out)]}}
    m = zg.misses(gate)
    assert (m["n"], m["short"], m["long"], m["short_unedited"]) == (7, 1, 1, 1)
    assert m["rho"] == pytest.approx(zg.spearman(ref, out))
    assert m["rho_without_short"] == pytest.approx(zg.spearman(ref, [0.0, 0.1, 0.9, 0.3, 0.4, 0.5, 0.6]))
    assert m["rho_without_long"] == pytest.approx(zg.spearman(ref, [0.0, 0.1, 0.2, 0.3, 0.0, 0.5, 0.6]))
    assert m["rho_without_both"] == pytest.approx(1.0)
    assert zg.misses(gate["quality_gate"]) == m

