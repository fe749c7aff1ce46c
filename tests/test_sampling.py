"""End to end: speculative sampling on a tiny model draws sequences with plain sampling's distribution."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from conftest import OracleDrafter, tiny_target
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramDrafter
from hybridsd.generate import generate
from test_verify import _chi2_ok

V = 6
TEMP = 1.0
RUNS = 1200


@pytest.fixture(scope="module")
def small():
    # vocabulary of 6 and a few large weights, so distributions are far from uniform
    return tiny_target("llama", vocab=V, seed=11, initializer_range=0.3)


def _exact(model, ids: torch.Tensor, steps: int) -> dict[tuple, float]:
    """P(first `steps` new tokens) by enumeration with full forwards."""
    probs = {}
    with torch.no_grad():
        for seq in itertools.product(range(V), repeat=steps):
            full = torch.cat([ids, torch.tensor(seq)])[None]
            logp = torch.log_softmax(model(full).logits[0].float() / TEMP, -1)
            n = ids.numel()
            probs[seq] = float(sum(logp[n - 1 + i, seq[i]] for i in range(steps)).exp())
    return probs


@pytest.mark.parametrize("kind", ["plain", "ngram", "tree"])
def test_sequence_distribution_matches_plain_sampling(small, kind):
    ids = torch.tensor([3, 4, 5, 3, 4, 5, 3, 4])  # repetitive: the n-gram drafts often
    exact = _exact(small, ids, 2)  # the second token comes from verifying a 1-token draft
    keys = sorted(exact)
    counts = np.zeros(len(keys))
    index = {k: i for i, k in enumerate(keys)}
    for seed in range(RUNS):
        if kind == "plain":
            drafter = None
        elif kind == "ngram":
            drafter = NgramDrafter(k=2, min_n=1, max_n=2)
        else:
            drafter = HybridDrafter(NgramDrafter(k=2, min_n=1, max_n=2),
                                    OracleDrafter([], 2, sample=True, vocab=V), "tree")
        res = generate(small, ids, drafter=drafter, max_new_tokens=3, temperature=TEMP, seed=seed, eos_token_id=[])
        counts[index[tuple(res.tokens[:2])]] += 1
        res.stats.check()
    assert _chi2_ok(counts, np.array([exact[k] for k in keys]))
