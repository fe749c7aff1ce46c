"""Trace simulation: exact hand-computed cases, the counters' identities, and agreement with the re-sync model."""

import collections
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsd.analytic import al_from_rates, normalized_al_exact, resync_passes
from hybridsd.data import blazedit_prompt
from hybridsd.metrics import SpecStats
from hybridsd.simulate import POLICIES, SimConfig, iter_simulate, simulate, simulate_batch

HYP = settings(max_examples=40, deadline=None)


def _trace(stats: SpecStats) -> list[tuple[int, int, int]]:
    return [(t.drafted, t.accepted, t.emitted) for t in stats.trace]


def test_ngram_hand_computed_copy():
    prompt = np.arange(1, 13)  # 1..12, no repeated n-gram
    stats = simulate(prompt, prompt, SimConfig(policy="ngram", k_ngram=3))
    stats.check()
    # prefill emits 1; [12, 1] never occurred, so no draft: emit 2; [1, 2] matches: draft 3 4 5, all accepted
    # + 6; [2..6] matches: 7 8 9 + 10; two tokens are left, so the draft is cut to one (11), accepted, + 12.
    assert _trace(stats) == [(0, 0, 1), (3, 3, 4), (3, 3, 4), (1, 1, 2)]
    assert (stats.num_tokens, stats.num_target_steps) == (12, 5)
    assert [t.source for t in stats.trace] == [None, "ngram", "ngram", "ngram"]


def test_ngram_hand_computed_edit():
    prompt = np.arange(100)
    ref = np.r_[prompt[0:40], [1000, 1001, 1002], prompt[50:90], [1003]]
    stats = simulate(prompt, ref, SimConfig(policy="ngram", k_ngram=5, min_n=2, max_n=5))
    stats.check()
    # run 1: prefill + 1 undrafted pass + 6 full passes + 1 pass (2 accepted, bonus 1000);
    # 1001, 1002: one pass each; run 2: 2 undrafted passes + 6 full + 1 (2 accepted, bonus 1003)
    assert stats.num_target_steps == 1 + 1 + 6 + 1 + 2 + 2 + 6 + 1
    assert stats.num_tokens == ref.size


@st.composite
def _edited(draw):
    """A prompt of distinct tokens and an output of copied runs, each followed by new tokens."""
    n_prompt = 120
    pieces, runs, fresh = [], [], 1000
    for _ in range(draw(st.integers(1, 5))):
        r = draw(st.integers(1, 40))
        s = draw(st.integers(0, n_prompt - r))
        pieces.append(np.arange(s, s + r))
        runs.append(r)
        n_new = draw(st.integers(1, 6))
        pieces.append(np.arange(fresh, fresh + n_new))
        fresh += n_new
    return np.arange(n_prompt), np.concatenate(pieces), runs


@HYP
@given(case=_edited(), k=st.integers(1, 7), max_n=st.integers(2, 5))
def test_ngram_matches_resync_model_exactly(case, k, max_n):
    prompt, ref, runs = case
    stats = simulate(prompt, ref, SimConfig(policy="ngram", k_ngram=k, min_n=2, max_n=max_n))
    stats.check()
    expected = resync_passes([runs], [ref.size], k=k, resync=2, novel_rate=1.0)[0]
    assert stats.num_target_steps == expected


def _words(text: str, vocab: dict) -> np.ndarray:
    return np.array([vocab.setdefault(w, len(vocab)) for w in re.findall(r"\w+|[^\w\s]|\s+", text)])


def test_copying_the_prompt_file_gives_high_ngram_al():
    code = Path(__file__).read_text()
    vocab: dict = {}
    prompt = _words(blazedit_prompt(code, "Keep the file as it is."), vocab)
    ref = _words(code, vocab)
    stats = simulate(prompt, ref, SimConfig(policy="ngram", k_ngram=5))
    stats.check()
    assert stats.seq_normalized_al > 4.5  # at most k + 1 = 6
    assert stats.draft_share > 0.9


@HYP
@given(
    prompt=st.lists(st.integers(0, 6), max_size=40),
    ref=st.lists(st.integers(0, 6), max_size=60),
    policy=st.sampled_from(POLICIES),
    k_ngram=st.integers(1, 6),
    k_eagle=st.integers(1, 4),
    min_n=st.integers(1, 3),
    extra_n=st.integers(0, 2),
    seed=st.integers(0, 3),
)
def test_counters_hold_for_any_trace(prompt, ref, policy, k_ngram, k_eagle, min_n, extra_n, seed):
    cfg = SimConfig(policy=policy, k_ngram=k_ngram, k_eagle=k_eagle, min_n=min_n, max_n=min_n + extra_n,
                    eagle_rates=(0.8, 0.5, 0.3, 0.1), seed=seed)
    stats = simulate(prompt, ref, cfg)
    stats.check()
    assert stats.num_tokens == len(ref)
    assert stats.num_sequences == 1
    for i, t in enumerate(stats.trace):
        last = i == len(stats.trace) - 1
        assert t.emitted == t.accepted + 1  # drafts never run past the reference's end (as in the engine)
        assert set(t.proposed) <= {"ngram", "eagle"}
        assert policy != "ngram" or t.drafted <= k_ngram
        assert policy != "eagle" or t.proposed == ("eagle",) or (last and t.emitted == 1)
    truncated = sum(1 for t in stats.trace if t.emitted == t.accepted)
    if stats.trace:
        assert normalized_al_exact(stats.precision_al, num_steps=len(stats.trace), num_drafts=stats.num_drafts,
                                   truncated=truncated) == pytest.approx(stats.seq_normalized_al)


def test_eagle_alone_matches_its_rates():
    rates = (0.7, 0.45, 0.2)
    ref = np.arange(30_000)
    stats = simulate(np.zeros(0, dtype=np.int64), ref, SimConfig(policy="eagle", eagle_rates=rates, seed=1))
    stats.check()
    assert stats.acceptance_rates == pytest.approx(rates, abs=0.015)
    assert stats.seq_normalized_al == pytest.approx(al_from_rates(rates), abs=0.03)


def test_policies_with_extreme_eagle():
    prompt = np.arange(60)
    ref = np.r_[prompt[:30], np.arange(500, 520), prompt[35:60]]
    ngram = simulate(prompt, ref, SimConfig(policy="ngram"))
    never = simulate(prompt, ref, SimConfig(policy="prefer-ngram", eagle_rates=(0.0, 0.0, 0.0)))
    assert never.num_target_steps == ngram.num_target_steps  # EAGLE adds nothing when it is always wrong
    always = SimConfig(eagle_rates=(1.0, 1.0, 1.0))
    prefer = simulate(prompt, ref, always)
    tree = simulate(prompt, ref, SimConfig(policy="tree", eagle_rates=(1.0, 1.0, 1.0)))
    for s in (prefer, tree):
        s.check()
    assert tree.num_target_steps <= prefer.num_target_steps
    assert all(t.accepted >= 3 for t in tree.trace[:-1])  # only the last step can be cut by the end
    assert all(t.tree_tokens == t.drafted or t.proposed == ("ngram", "eagle") for t in tree.trace)


def test_seeds_and_batches():
    prompt, ref = np.arange(30), np.arange(100, 400)
    cfg = SimConfig(policy="eagle", seed=5)
    assert _trace(simulate(prompt, ref, cfg)) == _trace(simulate(prompt, ref, cfg))
    assert _trace(simulate(prompt, ref, cfg)) != _trace(simulate(prompt, ref, SimConfig(policy="eagle", seed=6)))
    pairs = [(prompt, ref), (prompt, ref[:50]), ([], [])]
    batch = simulate_batch(pairs, cfg)
    for i, (s, (p, r)) in enumerate(zip(batch, pairs)):
        assert _trace(s) == _trace(simulate(p, r, cfg, np.random.default_rng((cfg.seed, i))))
    assert [s.num_tokens for s in iter_simulate(pairs, cfg)] == [300, 50, 0]
    total = SpecStats.combine(batch)
    total.check()
    assert total.num_tokens == 350


@pytest.mark.parametrize("policy", POLICIES[1:])
def test_eagle_rates_by_ngram_state(policy):
    """With ``eagle_rates_novel``, EAGLE draws from those rates exactly where n-gram drafting would have no draft
    or a wrong first token (found here by a replay of the trace with ``ngram_propose``), from ``eagle_rates``
    elsewhere: with all-or-nothing rates every EAGLE step's acceptance is that state's."""
    from hybridsd.drafters.ngram import ngram_propose

    prompt = np.arange(80)
    ref = np.r_[prompt[:30], np.arange(500, 540), prompt[35:80], np.arange(600, 620), prompt[10:40]]
    cfg = SimConfig(policy=policy, eagle_rates=(1.0, 1.0, 1.0), eagle_rates_novel=(0.0, 0.0, 0.0))
    stats = simulate(prompt, ref, cfg)
    stats.check()
    full, pos, seen = np.r_[prompt, ref], 1, {True: 0, False: 0}
    for t in stats.trace:
        budget = ref.size - pos - 1
        draft = ngram_propose(full[: prompt.size + pos], cfg.min_n, cfg.max_n, min(cfg.k_ngram, budget))
        novel = draft.size == 0 or draft[0] != ref[pos]
        if "eagle" in t.proposed and t.source != "ngram":  # EAGLE's own acceptance decided the step
            assert t.accepted == (0 if novel else min(3, budget)), (pos, novel)
            seen[novel] += 1
        pos += t.emitted
    assert pos == ref.size and seen[True] and (seen[False] or policy == "prefer-ngram")


@pytest.mark.parametrize("kwargs", [
    {"policy": "draft"}, {"k_ngram": 0}, {"k_eagle": 0}, {"min_n": 3, "max_n": 2}, {"min_n": 0},
    {"k_eagle": 4}, {"eagle_rates": (0.2, 0.5, 0.1)}, {"eagle_rates": (1.2, 0.5, 0.1)},
    {"eagle_rates_novel": (0.2, 0.5, 0.1)}, {"eagle_rates_novel": (0.5,)}, {"seed": -1},
])
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        SimConfig(**kwargs)


@pytest.mark.parametrize("name", ["k_ngram", "k_eagle", "min_n", "max_n", "seed"])
@pytest.mark.parametrize("value", [2.5, True, "3"])
def test_config_counts_must_be_ints(name, value):
    """A non-integer draft or n-gram length is refused when the config is made, naming the field."""
    with pytest.raises(TypeError, match=f"{name} must be an int"):
        SimConfig(**{name: value})


def test_token_ids_must_be_one_sequence_of_ints():
    prompt, ref = np.arange(30), np.r_[np.arange(10), 99, np.arange(11, 30)]
    base = simulate(prompt, ref, SimConfig(policy="ngram"))
    one_row = simulate(prompt[None], ref[None], SimConfig(policy="ngram"))  # [1, T], as tokenizers return
    assert _trace(one_row) == _trace(base)
    with pytest.raises(ValueError, match=r"prompt_ids must be 1-D or \[1, T\]"):
        simulate(np.stack([prompt, prompt]), ref, SimConfig(policy="ngram"))  # not two prompts run together
    with pytest.raises(ValueError, match="reference_ids must be 1-D"):
        simulate(prompt, np.stack([ref, ref]), SimConfig(policy="ngram"))
    with pytest.raises(TypeError, match="reference_ids must be integer token ids"):
        simulate(prompt, ref + 0.5, SimConfig(policy="ngram"))
    assert simulate([], [], SimConfig()).num_target_steps == 1


def test_config_extras():
    assert SimConfig(policy="ngram", eagle_rates=(0.1, 0.9)).k_eagle == 3  # rates unused by n-gram alone
    cfg = SimConfig(eagle_rates=[0.6, 0.3, 0.1])
    assert cfg.eagle_rates == (0.6, 0.3, 0.1)
    assert cfg.eagle_accept_probs() == pytest.approx([0.4, 0.3, 0.2, 0.1])


def test_simulation_reproduces_the_engine_exactly():
    """n-gram alone: replaying the engine's own greedy output gives the engine's exact counters, step by step."""
    from conftest import prompts, tiny_target
    from hybridsd.drafters.ngram import NgramDrafter
    from hybridsd.generate import generate
    from hybridsd.simulate import SimConfig, simulate

    model = tiny_target("llama", seed=4)
    accepted, missed = {}, {}  # per config: tokens accepted, steps with a draft not wholly accepted
    for ids in prompts(6, seed=9):
        for k, lo, hi in ((5, 2, 5), (3, 1, 3), (1, 1, 1)):
            res = generate(model, ids, drafter=NgramDrafter(k=k, min_n=lo, max_n=hi), max_new_tokens=48,
                           eos_token_id=[])
            sim = simulate(ids.tolist(), res.tokens, SimConfig(policy="ngram", k_ngram=k, min_n=lo, max_n=hi))
            assert sim.num_target_steps == res.stats.num_target_steps
            assert [(s.drafted, s.accepted, s.emitted) for s in sim.trace] == \
                   [(s.drafted, s.accepted, s.emitted) for s in res.stats.trace]
            assert sim.accepted_per_position == res.stats.accepted_per_position
            accepted[k] = accepted.get(k, 0) + res.stats.num_accepted
            missed[k] = missed.get(k, 0) + sum(s.accepted < s.drafted for s in res.stats.trace)
    assert min(accepted.values()) > 0 and min(missed.values()) > 0, (accepted, missed)  # hits and misses to match


def test_tree_policy_counters_match_the_engine():
    """The tree of n-gram and EAGLE: the engine merges the branches' common accepted tokens into one set of nodes,
    so the simulation's tree sizes and draft depths must too. EAGLE is stood in for by a drafter right on its first
    two tokens and wrong on its third, i.e. ``eagle_rates=(1, 1, 0)``."""
    import torch

    from conftest import VOCAB, hf_greedy, prompts, tiny_target
    from hybridsd.drafters.base import Draft
    from hybridsd.drafters.hybrid import HybridDrafter
    from hybridsd.drafters.ngram import NgramDrafter
    from hybridsd.drafters.replay import ReplayDrafter
    from hybridsd.generate import generate

    class TwoRight(ReplayDrafter):
        def propose(self, request):
            pos = self.position(request)
            d = list(self.continuation[pos : pos + min(self.k, request.budget)])
            d[2:3] = [(t + 1) % VOCAB for t in d[2:3]]
            return [Draft(torch.tensor(d, dtype=torch.long), "eagle")] if d else []

    model = tiny_target("llama", seed=4)
    cfg = SimConfig(policy="tree", k_ngram=2, k_eagle=3, min_n=1, max_n=3, eagle_rates=(1.0, 1.0, 0.0))
    won = collections.Counter()
    for ids in prompts(4, seed=9):
        ref = hf_greedy(model, ids, 40)
        drafter = HybridDrafter(NgramDrafter(k=2, min_n=1, max_n=3), TwoRight(ref, 3), policy="tree")
        res = generate(model, ids, drafter=drafter, max_new_tokens=40, eos_token_id=[])
        sim = simulate(ids.tolist(), res.tokens, cfg)
        fields = lambda s: [(t.drafted, t.accepted, t.emitted, t.source, t.tree_tokens) for t in s.trace]  # noqa: E731
        assert fields(sim) == fields(res.stats)
        assert sim.num_draft_tokens == res.stats.num_draft_tokens and sim.num_tree_tokens == res.stats.num_tree_tokens
        won.update(res.stats.accepted_by_drafter)
    assert won["ngram"] > 0 and won["eagle"] > 0, won  # both branches win steps


@pytest.mark.parametrize("name", ["eagle_rates", "eagle_rates_novel"])
@pytest.mark.parametrize("value", [0.5, "0.5", b"ab", (0.6, "0.4", 0.2), (0.6, True, 0.2), (0.6, None, 0.2)])
def test_rates_must_be_a_sequence_of_numbers(name, value):
    """A bare number used to fail as "'float' object is not iterable", naming no field."""
    with pytest.raises(TypeError, match=f"{name} must be a sequence of rates"):
        SimConfig(**{name: value})


@HYP
@given(rates=st.lists(st.floats(0, 1), min_size=3, max_size=5).map(lambda r: sorted(r, reverse=True)),
       kind=st.sampled_from([tuple, list, np.array, iter]))
def test_rates_in_any_sequence_read_the_same(rates, kind):
    assert SimConfig(eagle_rates=kind(rates)).eagle_rates == tuple(rates)


@pytest.mark.parametrize("config", [None, {"policy": "ngram"}, "ngram"])
def test_simulate_takes_a_sim_config(config):
    with pytest.raises(TypeError, match="config must be a SimConfig"):
        simulate([1, 2], [3, 4], config)
    with pytest.raises(TypeError, match="config must be a SimConfig"):
        iter_simulate([([1, 2], [3, 4])], config)  # when called, not at the first pair
    with pytest.raises(TypeError, match="config must be a SimConfig"):
        simulate_batch([], config)


@pytest.mark.parametrize("rng", [5, "seed", np.random.RandomState(0)])
def test_rng_must_be_a_generator(rng):
    with pytest.raises(TypeError, match="rng must be None or a numpy Generator"):
        simulate([1, 2], [3, 4], SimConfig(), rng=rng)
    assert simulate([1, 2], [3, 4], SimConfig(), rng=np.random.default_rng(0)).num_tokens == 2
