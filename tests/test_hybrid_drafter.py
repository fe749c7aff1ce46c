"""The hybrid ngram-eagle drafter: children's hidden layers, EAGLE's state through n-gram steps, attribution."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from conftest import OracleDrafter, hf_greedy, prompts, tiny_target, train_heads
from hybridsd.drafters.base import Drafter, ProposeRequest
from hybridsd.drafters.eagle import EagleDrafter
from hybridsd.drafters.eagle_tree import EagleTreeDrafter
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramDrafter
from hybridsd.drafters.replay import ReplayDrafter
from hybridsd.drafters.tree import DraftTree
from hybridsd.eagle.model import EagleHead
from hybridsd.generate import generate

V = 11  # small: repeats in random prompts, so the n-gram hits
N_NEW = 30


class Recorder(Drafter):
    """Proposes nothing; keeps what it observes."""

    def __init__(self, name: str, layers: tuple[int, ...]) -> None:
        self.name, self.hidden_layers, self.seen = name, layers, []

    @property
    def max_tokens(self) -> int:
        return 1

    def observe(self, hidden, next_tokens) -> None:
        self.seen.append(hidden)

    def propose(self, request: ProposeRequest) -> list:
        return []


def test_children_get_their_layers_in_their_order():
    a, b, c = Recorder("a", (1, 2)), Recorder("b", (2, 1)), Recorder("c", (2,))
    hidden = torch.cat([torch.full((3, 4), 1.0), torch.full((3, 4), 2.0)], -1)  # [3, 2*H]: layer 1, then layer 2
    for x, y in ((a, b), (b, a)):
        hyb = HybridDrafter(x, y)
        assert hyb.hidden_layers == x.hidden_layers
        hyb.observe(hidden if x is a else hidden.roll(4, -1), torch.zeros(3, dtype=torch.long))
    for child in (a, b):
        want = [float(layer) for layer in child.hidden_layers for _ in range(4)]
        assert all(h[0].tolist() == want for h in child.seen), child.name
    HybridDrafter(a, c).observe(hidden, torch.zeros(3, dtype=torch.long))
    assert c.seen[-1].tolist() == [[2.0] * 4] * 3


def test_one_drafter_twice_is_refused():
    d = NgramDrafter()
    with pytest.raises(ValueError, match="same one twice"):
        HybridDrafter(d, d)


class Shadowed(Drafter):
    """A drafter checked against a twin that is asked to draft at every step: their proposals must agree."""

    def __init__(self, make) -> None:
        self.real, self.twin = make(), make()
        self.name, self.hidden_layers = self.real.name, self.real.hidden_layers
        self.calls = self.diffs = 0

    @property
    def max_tokens(self) -> int:
        return self.real.max_tokens

    @property
    def max_branches(self) -> int:
        return self.real.max_branches

    def reset(self, prompt_len: int) -> None:
        self.real.reset(prompt_len)
        self.twin.reset(prompt_len)

    def observe(self, hidden, next_tokens) -> None:
        self.real.observe(hidden, next_tokens)
        self.twin.observe(hidden, next_tokens)

    def propose(self, request: ProposeRequest):
        got = self.real.propose(request)
        a, b = DraftTree.join(got), DraftTree.join(self.twin.propose(request))
        self.calls += 1
        self.diffs += (a.tokens.tolist(), a.parents) != (b.tokens.tolist(), b.parents)
        return got


class TwinFirst(NgramDrafter):
    """An n-gram drafter that first has the shadowed drafter's twin draft (every step, hit or miss)."""

    def __init__(self, shadowed: Shadowed, **kw) -> None:
        super().__init__(**kw)
        self.shadowed = shadowed

    def propose(self, request: ProposeRequest):
        self.shadowed.twin.propose(request)
        return super().propose(request)


def _trained_head(model, kind: str, prompts: list[torch.Tensor]) -> EagleHead:
    """A head trained (30 CPU steps) on the model's greedy continuations of ``prompts``: right often, wrong often."""
    return train_heads(model, prompts, N_NEW, steps=30, batch_size=4, seq_len=64, kinds=(kind,))[kind]


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_eagle_state_stays_exact_through_ngram_steps(kind):
    """With prefer-ngram, EAGLE skips the steps the n-gram drafts; its drafts on the other steps are those of an
    EAGLE drafter that drafted every step, and the output is plain greedy's. Both drafters win steps (the head is
    trained on these prompts), so EAGLE's state is checked after its own accepted drafts and after the n-gram's."""
    model = tiny_target("llama", vocab=V, seed=5, initializer_range=0.2)
    ids_list = prompts(4, vocab=V, seed=7)
    head = _trained_head(model, kind, ids_list)
    for make in (lambda: EagleDrafter(head, k=3), lambda: EagleTreeDrafter(head, depth=3, top_k=2, nodes=6)):
        hits, won = 0, {}
        for ids in ids_list:
            eagle = Shadowed(make)
            hyb = HybridDrafter(TwinFirst(eagle, k=4, min_n=1, max_n=3), eagle)
            res = generate(model, ids, hyb, max_new_tokens=N_NEW, eos_token_id=[])
            assert res.tokens == hf_greedy(model, ids, N_NEW)
            assert eagle.diffs == 0 and eagle.calls > 0
            hits += res.stats.steps_by_drafter["ngram"]
            for src in ("ngram", kind):
                won[src] = won.get(src, 0) + res.stats.accepted_by_drafter[src]
        assert hits > 0  # the n-gram drafted some steps, which EAGLE skipped
        assert won["ngram"] > 0 and won[kind] > 0, won


@pytest.mark.parametrize("policy", ["prefer-ngram", "tree"])
def test_steps_are_won_by_the_branch_that_was_accepted(policy):
    model = tiny_target("llama", vocab=V, seed=5)
    winners = Counter()
    for ids in prompts(4, vocab=V, seed=3):
        ref = hf_greedy(model, ids, N_NEW)
        hyb = HybridDrafter(NgramDrafter(k=5, min_n=1, max_n=3), OracleDrafter(ref, 2, 0.3, vocab=V), policy)
        res = generate(model, ids, hyb, max_new_tokens=N_NEW, eos_token_id=[])
        assert res.tokens == ref
        s = res.stats
        s.check()
        for step in s.trace:
            if policy == "prefer-ngram":  # one drafter per step, and it wins what is accepted
                assert len(step.proposed) <= 1
                assert step.source in (None, *step.proposed)
            else:
                assert step.source is None or step.source in step.proposed
        won = sum(1 for step in s.trace if step.accepted)
        assert sum(s.steps_won_by.values()) == won
        if policy == "tree":  # both drafts verified in one pass on some steps
            assert any(step.proposed == ("ngram", "oracle") for step in s.trace)
        winners.update(s.steps_won_by)
    assert winners["ngram"] > 0 and winners["oracle"] > 0, winners  # each drafter wins steps


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_replay_of_the_output_is_always_accepted(k):
    model = tiny_target("llama", vocab=V, seed=5)
    ids = prompts(2, vocab=V, seed=1)[1]
    ref = hf_greedy(model, ids, N_NEW)
    res = generate(model, ids, ReplayDrafter(ref, k), max_new_tokens=N_NEW, eos_token_id=[])
    assert res.tokens == ref
    assert all(step.accepted == step.drafted for step in res.stats.trace)
    assert res.stats.num_target_steps == 1 + -(-(N_NEW - 1) // (k + 1))  # prefill, then k + 1 tokens a pass
