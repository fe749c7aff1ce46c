"""The engine's contract: greedy speculative output == plain greedy output, exact stats, clear errors."""

from __future__ import annotations

import collections

import pytest
import torch

from conftest import VOCAB, OracleDrafter, hf_greedy, prompts, tiny_target
from hybridsd.drafters.base import Draft, Drafter
from hybridsd.drafters.eagle import EagleDrafter
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramDrafter
from hybridsd.drafters.replay import ReplayDrafter
from hybridsd.generate import generate
from hybridsd.kv_cache import StaticKVCache

KS = [1, 2, 3, 5, 8]
N_NEW = 40
PROMPTS = prompts(8)


@pytest.fixture(scope="module")
def references(target):
    return [hf_greedy(target, p, N_NEW) for p in PROMPTS]


def _drafters(k: int, reference: list[int], heads: dict) -> dict[str, Drafter]:
    """Every drafter kind and policy at draft length k."""
    oracle = OracleDrafter(reference, k, err=0.25)
    eagle = {f"{kind}-{policy}": HybridDrafter(NgramDrafter(k=k, min_n=2, max_n=3), EagleDrafter(head, k=k), policy)
             for kind, head in heads.items() for policy in ("prefer-ngram", "tree")}
    return {
        **eagle,
        "eagle1": EagleDrafter(heads["eagle1"], k=k),
        "eagle3": EagleDrafter(heads["eagle3"], k=k),
        "ngram": NgramDrafter(k=k, min_n=1, max_n=4),
        "ngram-2-5": NgramDrafter(k=k, min_n=2, max_n=5),
        "oracle": oracle,
        "prefer-ngram": HybridDrafter(NgramDrafter(k=k, min_n=2, max_n=3), OracleDrafter(reference, k, 0.4)),
        "tree": HybridDrafter(NgramDrafter(k=k, min_n=2, max_n=3), OracleDrafter(reference, k, 0.4), "tree"),
        "tree-oracles": HybridDrafter(OracleDrafter(reference, k, 0.5, "a", 1),
                                      OracleDrafter(reference, k, 0.5, "b", 2), "tree"),
    }


EAGLE = ("eagle1", "eagle3")


@pytest.mark.parametrize("k", KS)
def test_greedy_is_lossless(target, references, trained_heads, k, monkeypatch):
    """Every drafter and policy gives plain greedy's tokens, on half of the prompts per k (both kinds of prompt,
    every prompt over the grid). The EAGLE heads (trained on the target's outputs) accept often and miss often,
    and tree steps accept branches whose cache rows must move, so acceptance, rollback and compaction all
    happen at every k."""
    moves = []
    real_move = StaticKVCache.move
    monkeypatch.setattr(StaticKVCache, "move", lambda self, src, dst: moves.append(1) or real_move(self, src, dst))
    accepted, drafted, steps, moved = {}, {}, {}, {}
    by_source = collections.Counter()  # (drafter, step source) -> tokens accepted
    for i, (ids, ref) in enumerate(zip(PROMPTS, references)):
        if (i // 2 + k) % 2:
            continue
        for name, drafter in _drafters(k, ref, trained_heads).items():
            before = len(moves)
            res = generate(target, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[])
            assert res.tokens == ref, (name, k)
            res.stats.check()
            assert res.stats.num_tokens == N_NEW
            trace = res.stats.trace
            accepted[name] = accepted.get(name, 0) + sum(s.accepted for s in trace if s.source in EAGLE)
            for s in trace:
                by_source[name, s.source] += s.accepted
            drafted[name] = drafted.get(name, 0) + sum(s.drafted for s in trace)
            steps[name] = steps.get(name, 0) + sum(s.drafted > 0 for s in trace)
            moved[name] = moved.get(name, 0) + len(moves) - before
    for kind in EAGLE:  # random heads accept about 0.02 tokens per step
        assert accepted[kind] > 0.3 * steps[kind] and accepted[kind] < drafted[kind], (kind, k, accepted, drafted)
        assert accepted[f"{kind}-prefer-ngram"] > 0 and accepted[f"{kind}-tree"] > 0, (kind, k, accepted)
    assert all(moved[name] > 0 for name in ("tree", "tree-oracles")), (k, moved)
    sources = {"eagle1": ["eagle1"], "eagle3": ["eagle3"], "ngram": ["ngram"], "ngram-2-5": ["ngram"],
               "oracle": ["oracle"], "prefer-ngram": ["ngram", "oracle"], "tree": ["ngram", "oracle"],
               "tree-oracles": ["a", "b"], **{f"{kind}-{policy}": ["ngram", kind] for kind in EAGLE
                                              for policy in ("prefer-ngram", "tree")}}
    assert {(name, src) for name, srcs in sources.items() for src in srcs if by_source[name, src] == 0} == set(), \
        (k, by_source)  # every drafter, and each child of a hybrid, gets tokens accepted
    assert sum(moved[f"{kind}-tree"] for kind in EAGLE) > 0, (k, moved)


def test_plain_engine_matches_hf(target, references):
    for ids, ref in zip(PROMPTS, references):
        res = generate(target, ids, max_new_tokens=N_NEW, eos_token_id=[])
        assert res.tokens == ref
        assert res.stats.num_target_steps == N_NEW and res.stats.seq_normalized_al == 1.0


def test_drafts_are_used(target, references):
    """A good drafter cuts target passes; the counters say by how much, exactly."""
    ids, ref = PROMPTS[1], references[1]
    res = generate(target, ids, drafter=OracleDrafter(ref, 4, err=0.0), max_new_tokens=N_NEW, eos_token_id=[])
    st = res.stats
    assert res.tokens == ref
    # a perfect 4-token draft gives 5 tokens per verification pass; the last steps are cut by the budget
    assert st.num_target_steps == 1 + len(st.trace) and st.num_target_steps <= 1 + -(-(N_NEW - 1) // 5)
    assert st.num_accepted == st.num_draft_tokens
    assert st.seq_normalized_al == N_NEW / st.num_target_steps
    assert st.precision_al == 1 + st.num_accepted / st.num_drafts


@pytest.mark.parametrize("policy", ["prefer-ngram", "tree"])
def test_eos_stops_where_plain_greedy_stops(target, references, policy):
    for ids, ref in zip(PROMPTS[:4], references[:4]):
        eos = ref[len(ref) // 2]  # a token that greedy decoding emits mid-way
        expected = hf_greedy(target, ids, N_NEW, eos_token_id=eos)
        assert expected[-1] == eos and len(expected) <= len(ref) // 2 + 1
        drafter = HybridDrafter(NgramDrafter(k=5, min_n=1, max_n=3), OracleDrafter(ref, 5, 0.2), policy)
        res = generate(target, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=eos)
        assert res.tokens == expected
        res.stats.check()


@pytest.mark.parametrize("max_new", [1, 2, 3, 7])
def test_max_new_tokens_is_exact(target, max_new):
    ids = PROMPTS[3]
    ref = hf_greedy(target, ids, max_new)
    for k in (1, 5):
        res = generate(target, ids, drafter=OracleDrafter(ref + [0] * 8, k, err=0.0), max_new_tokens=max_new,
                       eos_token_id=[])
        assert res.tokens == ref
        res.stats.check()


class Recorder(OracleDrafter):
    """Oracle drafter that keeps every observed hidden row and next token."""

    hidden_layers = (0, 2, -1)

    def reset(self, prompt_len):
        super().reset(prompt_len)
        self.hidden, self.next = [], []

    def observe(self, hidden, next_tokens):
        self.hidden.append(hidden)
        self.next.append(next_tokens)


@pytest.mark.parametrize("policy", ["chain", "tree"])
def test_observe_sees_every_committed_position_once(target, policy):
    """The drafter protocol carries the target's hidden states of exactly the committed positions."""
    ids = PROMPTS[5]
    ref = hf_greedy(target, ids, 24)
    rec = Recorder(ref, 4, err=0.3)
    drafter = rec if policy == "chain" else HybridDrafter(OracleDrafter(ref, 3, 0.6, "a", 3), rec, "tree")
    res = generate(target, ids, drafter=drafter, max_new_tokens=24, eos_token_id=[])
    seq = torch.cat([ids, torch.tensor(res.tokens)])
    with torch.no_grad():
        hs = target(seq[None], output_hidden_states=True).hidden_states
    want = torch.cat([hs[i][0] for i in Recorder.hidden_layers], -1)[:-1]  # positions whose successor is known
    got = torch.cat(rec.hidden)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert torch.cat(rec.next).tolist() == seq[1:].tolist()


def test_final_hidden_state_is_normed(target):
    """HF ``hidden_states[-1]`` is the final-normed output that EAGLE-1 reads."""
    ids = PROMPTS[0][None]
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
    torch.testing.assert_close(target.lm_head(out.hidden_states[-1]), out.logits)


def test_bad_input_is_rejected(target):
    ids = PROMPTS[0]
    with pytest.raises(ValueError, match="empty prompt"):
        generate(target, [], max_new_tokens=4)
    with pytest.raises(ValueError, match="context length"):
        generate(target, ids, max_new_tokens=target.config.max_position_embeddings)
    with pytest.raises(ValueError, match="batch"):
        generate(target, torch.stack([ids, ids]), max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(target, ids, max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        generate(target, ids, max_new_tokens=4, temperature=-1.0)
    with pytest.raises(ValueError, match="k must be"):
        NgramDrafter(k=0)
    with pytest.raises(ValueError, match="min_n"):
        NgramDrafter(min_n=4, max_n=2)
    with pytest.raises(ValueError, match="min_n"):
        NgramDrafter(min_n=0)
    with pytest.raises(ValueError, match="policy"):
        HybridDrafter(NgramDrafter(), NgramDrafter(), policy="both")


# The tiny random targets' logits lie within ~0.2 of each other, so at usual temperatures every draft is rejected;
# at this one the greedy token is likely but not certain, and replayed greedy drafts are both accepted and rejected.
SHARP_T = 0.05


def _sampled_run(target, ids: torch.Tensor, drafter: Drafter, max_new_tokens: int, seed):
    """A sampled run (``SHARP_T``), checked to have accepted some draft tokens and rejected others: the seeded
    accept test and the residual draw both ran."""
    res = generate(target, ids, drafter=drafter, max_new_tokens=max_new_tokens, temperature=SHARP_T, seed=seed,
                   eos_token_id=[])
    assert res.stats.num_accepted > 0
    assert any(step.accepted < step.drafted for step in res.stats.trace)
    return res


def _sample_replaying_greedy(target, ids: torch.Tensor, max_new_tokens: int, seed):
    """:func:`_sampled_run` drafting the target's greedy continuation."""
    drafter = ReplayDrafter(hf_greedy(target, ids, max_new_tokens, eos_token_id=[]), 3)
    return _sampled_run(target, ids, drafter, max_new_tokens, seed)


def _assert_seed_decides(a, b, c) -> None:
    """``a`` and ``b`` ran with one seed, ``c`` with another."""
    assert a.tokens == b.tokens and a.stats.trace == b.stats.trace
    assert a.tokens != c.tokens


def test_seed_reproduces_sampling(target):
    """The seed fixes every draw of speculative sampling: the first token, the accept tests, the residual draws."""
    ids = PROMPTS[1]
    _assert_seed_decides(*(_sample_replaying_greedy(target, ids, 20, seed) for seed in (7, 7, 8)))


def test_seed_reproduces_tree_sampling(target):
    """The seed fixes tree verification's draws too: two branches (the greedy continuation and a noisy copy of it)
    side by side, some steps verifying more nodes than their accepted path reaches."""
    ids = PROMPTS[1]
    ref = hf_greedy(target, ids, 20, eos_token_id=[])
    runs = [_sampled_run(target, ids, HybridDrafter(ReplayDrafter(ref, 3), OracleDrafter(ref, 3, err=0.5), "tree"),
                         20, seed) for seed in (7, 7, 8)]
    assert any(step.tree_tokens > step.drafted for step in runs[0].stats.trace)  # a tree of two branches
    _assert_seed_decides(*runs)


def test_seed_reproduces_sampled_drafts(target, trained_heads):
    """The seed fixes the draws of a drafter that samples its own tokens (EAGLE at a temperature) from the run's
    generator, as well as the verifier's."""
    ids = PROMPTS[1]
    _assert_seed_decides(*(_sampled_run(target, ids, EagleDrafter(trained_heads["eagle1"], k=3), 20, seed)
                           for seed in (7, 7, 8)))


def test_cache_is_reused_and_grown():
    model = tiny_target("llama", seed=3)
    ids = PROMPTS[2]
    short = generate(model, ids, max_new_tokens=5, eos_token_id=[]).tokens
    long = generate(model, ids, max_new_tokens=60, eos_token_id=[]).tokens
    assert generate(model, ids, max_new_tokens=5, eos_token_id=[]).tokens == short == long[:5]


def test_doubled_bos_warns_or_raises(target):
    bos = target.config.bos_token_id
    ids = torch.tensor([bos, bos, 5, 6, 7])
    with pytest.warns(UserWarning, match="two BOS") as caught:
        generate(target, ids, max_new_tokens=2)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    with pytest.raises(ValueError, match="two BOS"):
        generate(target, ids, max_new_tokens=2, on_double_bos="raise")
    generate(target, ids[1:], max_new_tokens=2, on_double_bos="raise")  # one BOS is fine


def test_replay_drafter_drafts_what_the_target_accepts(target):
    """Fed the target's own greedy continuation, every draft is accepted: (k + 1) tokens per pass."""
    ids = PROMPTS[1]
    ref = hf_greedy(target, ids, 30)
    res = generate(target, ids, drafter=ReplayDrafter(ref, 4), max_new_tokens=30, eos_token_id=[])
    assert res.tokens == ref
    trace = res.stats.trace
    assert sum(s.accepted for s in trace) == sum(s.drafted for s in trace) == 30 - 1 - len(trace)
    assert all(s.drafted == 4 for s in trace[:-1])
    with pytest.raises(ValueError, match="k must be"):
        ReplayDrafter(ref, 0)


def test_tokenizer_padding_is_dropped(target):
    """An encoding padded before or after the prompt (``attention_mask`` 0 there) generates what the prompt alone
    does, as HF ``generate`` does with left padding; a mask that is not one run of tokens is named in the error."""
    from transformers import BatchEncoding

    ids = PROMPTS[2]
    want = generate(target, ids, max_new_tokens=6, eos_token_id=[]).tokens
    pad, ones = torch.zeros(3, dtype=torch.long), torch.ones_like(ids)
    for before in (True, False):
        toks, mask = (torch.cat([pad, ids]), torch.cat([pad, ones])) if before else (torch.cat([ids, pad]),
                                                                                     torch.cat([ones, pad]))
        enc = BatchEncoding({"input_ids": toks[None], "attention_mask": mask[None]})
        assert generate(target, enc, max_new_tokens=6, eos_token_id=[]).tokens == want
    assert generate(target, {"input_ids": ids.tolist(), "attention_mask": [1] * len(ids)}, max_new_tokens=6,
                    eos_token_id=[]).tokens == want
    holes = torch.cat([ids[:1], pad, ids[1:]])
    for mask, word in [(torch.cat([ones[:1], pad, ones[1:]]), "one run"), (torch.zeros_like(holes), "empty prompt"),
                       (torch.ones(3), "shape"), (torch.full_like(holes, 2), "0 \\(padding\\) and 1")]:
        with pytest.raises(ValueError, match=word):
            generate(target, {"input_ids": holes, "attention_mask": mask}, max_new_tokens=2)


def test_numpy_seed_is_a_seed(target):
    """A numpy integer seed (e.g. drawn with numpy) seeds the run as the same Python int does."""
    import numpy as np

    assert (_sample_replaying_greedy(target, PROMPTS[1], 12, np.int64(5)).tokens
            == _sample_replaying_greedy(target, PROMPTS[1], 12, 5).tokens)


def test_bad_eos_from_generation_config_says_where_it_came_from():
    """An EOS id of the model's generation config outside the vocabulary is reported as the config's, with the
    way around it."""
    model = tiny_target("llama", layers=1)
    model.generation_config.eos_token_id = [2, VOCAB + 5]
    with pytest.raises(ValueError, match=f"generation_config.eos_token_id .*{VOCAB + 5}"):
        generate(model, PROMPTS[0], max_new_tokens=2)
    generate(model, PROMPTS[0], max_new_tokens=2, eos_token_id=[2])


def test_eos_in_a_shared_prefix_credits_its_drafter(target):
    """Two branches share their first token (merged: the first branch's node) and the second branch wins; when EOS
    is that shared token the kept path is the shared node alone, so the step is the first branch's."""

    class TwoBranches(OracleDrafter):
        max_tokens = property(lambda self: 2 * self.k)  # two chains of k

        def propose(self, request):
            r, pos = self.continuation, self.position(request)
            wrong = (r[pos + 1] + 1) % VOCAB
            return [Draft(torch.tensor([r[pos], wrong]), "a"), Draft(torch.tensor([r[pos], r[pos + 1]]), "b")]

    for ids in PROMPTS:
        ref = hf_greedy(target, ids, 8, eos_token_id=[])
        if ref[1] not in ref[:1]:
            break
    res = generate(target, ids, drafter=TwoBranches(ref, 2), max_new_tokens=8, eos_token_id=ref[1])
    assert res.tokens == ref[:2]
    step = res.stats.trace[0]
    assert (step.accepted, step.source) == (1, "a") and dict(res.stats.steps_won_by) == {"a": 1}
    res = generate(target, ids, drafter=TwoBranches(ref, 2), max_new_tokens=8, eos_token_id=[])
    assert (res.stats.trace[0].accepted, res.stats.trace[0].source) == (2, "b")  # without EOS: the deeper branch
