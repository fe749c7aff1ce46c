"""End to end: speculative sampling on a tiny model draws sequences with plain sampling's distribution, also
with HF's top-k / top-p warping; and the warping itself against a slow reference and HF's ``generate``."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

from conftest import OracleDrafter, tiny_target
from hybridsd.drafters.eagle import EagleDrafter
from hybridsd.drafters.eagle_tree import EagleTreeDrafter
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramDrafter
from hybridsd.eagle.model import EagleHead
from hybridsd.generate import generate
from hybridsd.sampling import SAMPLING_EPS, sampling_params, warp
from test_verify import _chi2_ok

V = 6
RUNS = 700  # enough to fail verification against the unwarped or half-warped target in every case
IDS = torch.tensor([3, 4, 5, 3, 4, 5, 3, 4])  # repetitive: the n-gram drafts often


@pytest.fixture(scope="module")
def small():
    # vocabulary of 6 and a few large weights, so distributions are far from uniform; one layer keeps it fast
    return tiny_target("llama", vocab=V, seed=11, layers=1, initializer_range=0.15)


def _warp_reference(logits: torch.Tensor, temperature: float, top_k, top_p) -> torch.Tensor:
    """Warped probabilities of one row ``[V]``, written out: keep the top_k largest logits (ties at the k-th
    kept), then the most likely tokens until their mass reaches top_p (cumulative mass of the tokens
    before one < top_p, i.e. HF's rule: drop a token whose cumulative mass from the least likely is <= 1 -
    top_p, keeping at least one)."""
    x = logits.double() / temperature
    keep = torch.ones_like(x, dtype=torch.bool)
    if top_k:
        kth = sorted(x.tolist(), reverse=True)[min(top_k, x.numel()) - 1]
        keep &= x >= kth
    if top_p is not None:
        p = torch.softmax(torch.where(keep, x, -torch.inf), -1)
        order = sorted(range(x.numel()), key=lambda i: (p[i].item(), i))  # ascending; ties in index order
        below = 0.0
        for rank, i in enumerate(order):
            below += p[i].item()
            if below <= 1 - top_p and rank < x.numel() - 1:
                keep[i] = False
    return torch.softmax(torch.where(keep, x, -torch.inf), -1)


@pytest.mark.parametrize("top_k,top_p", [(None, None), (1, None), (3, None), (9, None), (None, 0.5), (None, 0.95),
                                         (2, 0.9), (4, 0.3)])
def test_warp_matches_the_written_out_rule(top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 9, generator=g) * 2
    logits[3, :4] = 1.0  # ties
    got = warp(logits, 0.7, top_k, top_p)
    want = torch.stack([_warp_reference(row, 0.7, top_k, top_p) for row in logits]).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert warp(logits[0], 0.7, top_k, top_p).shape == (9,)  # one row as well as a batch


def test_sampling_params_read_as_hf_users_write_them():
    assert sampling_params(None, None, None, None) == (0.0, None, None)  # greedy by default
    assert sampling_params(True, None, 0, 1.0) == (1.0, None, None)  # HF's "off" values
    assert sampling_params(None, 0.7, 5, 0.9) == (0.7, 5, 0.9)
    assert sampling_params(False, 0.7, None, None) == (0.0, None, None)  # do_sample=False: greedy whatever T
    with pytest.warns(UserWarning, match="only when sampling"):
        assert sampling_params(False, None, 5, None) == (0.0, None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampling_params(None, None, 0, 1.0)  # off values: nothing to warn about
    for args, err, word in [((True, 0.0, None, None), ValueError, "temperature=0"),
                            ((None, -1.0, None, None), ValueError, "temperature"),
                            ((None, float("nan"), None, None), ValueError, "temperature"),
                            ((None, 1.0, -1, None), ValueError, "top_k"), ((None, 1.0, 2.5, None), TypeError, "top_k"),
                            ((None, 1.0, None, 0.0), ValueError, "top_p"),
                            ((None, 1.0, None, 1.5), ValueError, "top_p"),
                            ((None, 1.0, None, "0.9"), TypeError, "top_p"),
                            (("yes", 1.0, None, None), TypeError, "do_sample")]:
        with pytest.raises(err, match=word):
            sampling_params(*args)


def test_generate_names_bad_sampling_arguments(small):
    with pytest.raises(ValueError, match="temperature=0"):
        generate(small, IDS, max_new_tokens=2, do_sample=True, temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        generate(small, IDS, max_new_tokens=2, do_sample=True, top_p=0.0)
    greedy = generate(small, IDS, max_new_tokens=5, eos_token_id=[]).tokens
    assert generate(small, IDS, max_new_tokens=5, eos_token_id=[], do_sample=False, temperature=0.9).tokens == greedy
    assert generate(small, IDS, max_new_tokens=5, eos_token_id=[], do_sample=True, top_k=1, seed=3).tokens == greedy


@pytest.mark.parametrize("do_sample", [None, True])
def test_temperatures_below_the_epsilon_decode_greedily(small, do_sample):
    assert sampling_params(do_sample, 0.99 * SAMPLING_EPS, 5, 0.5) == (0.0, None, None)
    assert sampling_params(do_sample, SAMPLING_EPS, None, None) == (SAMPLING_EPS, None, None)  # the epsilon samples
    greedy = generate(small, IDS, max_new_tokens=6, eos_token_id=[]).tokens
    for t in (1e-40, 1e-8):  # 1e-40 overflowed logits / T to inf and sampling failed mid-run
        out = generate(small, IDS, drafter=NgramDrafter(k=3, min_n=1, max_n=3), max_new_tokens=6, eos_token_id=[],
                       do_sample=do_sample, temperature=t, seed=1)
        assert out.tokens == greedy


def test_first_token_is_distributed_as_hf_generate(small):
    """The first token's distribution, by enumeration, equals what HF ``generate`` samples with the same
    settings (its own warpers), and our sampler draws from it."""
    settings = dict(temperature=0.8, top_k=4, top_p=0.7)
    with torch.no_grad():
        p = warp(small(IDS[None]).logits[0, -1], **settings).numpy()
    hf, ours = np.zeros(V), np.zeros(V)
    torch.manual_seed(0)
    for seed in range(400):
        out = small.generate(IDS[None], attention_mask=torch.ones_like(IDS[None]), do_sample=True, max_new_tokens=1,
                             pad_token_id=0, **settings)
        hf[int(out[0, -1])] += 1
        ours[generate(small, IDS, max_new_tokens=1, do_sample=True, seed=seed, **settings).tokens[0]] += 1
    assert (hf[p == 0] == 0).all() and (ours[p == 0] == 0).all()
    assert _chi2_ok(hf, p) and _chi2_ok(ours, p)


def _exact(model, ids: torch.Tensor, steps: int, temperature: float = 1.0, top_k=None,
           top_p=None) -> dict[tuple, float]:
    """P(first `steps` new tokens after `ids`) by enumeration with full forwards and the written-out warping."""
    probs = {}
    with torch.no_grad():
        for seq in itertools.product(range(V), repeat=steps):
            full = torch.cat([ids, torch.tensor(seq)])[None]
            logits = model(full).logits[0]
            n = ids.numel()
            probs[seq] = float(np.prod([_warp_reference(logits[n - 1 + i], temperature, top_k, top_p)[seq[i]]
                                        for i in range(steps)]))
    return probs


def _drafter(kind: str, head: EagleHead | None):
    ngram = NgramDrafter(k=2, min_n=1, max_n=2)
    make = {"plain": lambda: None, "ngram": lambda: ngram, "eagle": lambda: EagleDrafter(head, k=2),
            "tree": lambda: HybridDrafter(ngram, OracleDrafter([], 2, sample=True, vocab=V), "tree"),
            "eagle-tree": lambda: HybridDrafter(ngram, EagleDrafter(head, k=2), "tree"),
            "eagle2-tree": lambda: EagleTreeDrafter(head, depth=2, top_k=2, nodes=5)}  # deterministic nodes
    return make[kind]()


CASES = [  # (temperature, top_k, top_p, drafter): chains (one-hot, sampled from an unwarped q, from a warped q)
    (1.0, None, None, "plain"),  # and trees, each warping at least once
    (1.0, None, None, "ngram"),
    (1.0, None, None, "tree"),
    (1.0, 3, None, "ngram"),
    (0.7, 3, None, "eagle"),
    (1.0, None, 0.8, "tree"),
    (1.2, None, 0.6, "eagle"),
    (0.9, 4, 0.75, "eagle-tree"),
    (1.0, 3, 0.9, "eagle2-tree"),  # a tree of deterministic nodes only: the verifier's closed form
]


@pytest.mark.parametrize("temperature,top_k,top_p,kind", CASES)
def test_sequence_distribution_matches_plain_sampling(small, temperature, top_k, top_p, kind):
    """The first two new tokens (the second from verifying a draft) follow the warped target distribution,
    and no sequence outside its support ever appears."""
    exact = _exact(small, IDS, 2, temperature, top_k, top_p)
    keys = sorted(exact)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    torch.manual_seed(0)
    head = EagleHead.from_target(small, "eagle1") if "eagle" in kind else None
    drafted = accepted = 0
    for seed in range(RUNS):
        drafter = _drafter(kind, head)
        res = generate(small, IDS, drafter=drafter, max_new_tokens=3, temperature=temperature, top_k=top_k,
                       top_p=top_p, seed=seed, eos_token_id=[])
        counts[index[tuple(res.tokens[:2])]] += 1
        drafted += res.stats.num_draft_tokens
        accepted += res.stats.num_accepted
        res.stats.check()
    probs = np.array([exact[k] for k in keys])
    assert counts[probs == 0].sum() == 0
    assert _chi2_ok(counts, probs)
    assert kind == "plain" or drafted > RUNS / 2  # the drafts were verified, not skipped
    assert kind == "plain" or 0 < accepted < drafted  # and the accept and the reject branches both ran
