"""Acceptance math: greedy prefix rule, and rejection sampling that keeps the target distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from hybridsd.verify import greedy_chain, sample_chain, verify_branches

V = 5
N = 5000


def _chi2_ok(counts: np.ndarray, probs: np.ndarray, alpha: float = 1e-4) -> bool:
    """Chi-square goodness of fit (cells with tiny expectation pooled)."""
    exp = probs * counts.sum()
    big = exp >= 5
    obs = np.append(counts[big], counts[~big].sum())
    ex = np.append(exp[big], exp[~big].sum())
    if ex[-1] == 0:
        obs, ex = obs[:-1], ex[:-1]
    return chisquare(obs, ex * obs.sum() / ex.sum()).pvalue > alpha


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=8), st.data())
def test_greedy_chain_matches_reference(draft, data):
    k = len(draft)
    target = data.draw(st.lists(st.integers(0, 3), min_size=k + 1, max_size=k + 1))
    logits = torch.nn.functional.one_hot(torch.tensor(target), 4).float()
    n, toks = greedy_chain(torch.tensor(draft, dtype=torch.long), logits)
    want = 0
    while want < k and draft[want] == target[want]:
        want += 1
    assert int(n) == want
    assert toks[: want + 1].tolist() == target[: want + 1]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**31 - 1), st.booleans())
def test_sample_chain_keeps_accepted_prefix(k, seed, with_q):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, V, generator=g)
    q = torch.softmax(torch.randn(k, V, generator=g), -1) if with_q else None
    draft = torch.randint(0, V, (k,), generator=g)
    n, toks = sample_chain(draft, q, logits, 0.7, g)
    assert 0 <= int(n) <= k
    assert toks[: int(n)].tolist() == draft[: int(n)].tolist()
    assert 0 <= int(toks[int(n)]) < V


def _rows(seed: int, k: int) -> torch.Tensor:
    return torch.randn(k + 1, V, generator=torch.Generator().manual_seed(seed)) * 1.5


@pytest.mark.parametrize("with_q", [False, True])
def test_sample_chain_is_distributed_as_target(with_q):
    """First emitted token ~ p_0; second, given the first equals the draft's, ~ p_1."""
    k, temp = 2, 0.9
    logits = _rows(1, k)
    p = torch.softmax(logits / temp, -1).numpy()
    q = torch.softmax(_rows(2, k - 1) * 2, -1) if with_q else None
    g = torch.Generator().manual_seed(0)
    first, second = np.zeros(V), np.zeros(V)
    fixed = torch.tensor([3, 1])  # the one-hot draft
    for _ in range(N):
        draft = torch.multinomial(q, 1, generator=g)[:, 0] if with_q else fixed
        n, toks = sample_chain(draft, q, logits, temp, g)
        first[int(toks[0])] += 1
        if int(n) >= 1:
            second[int(toks[1])] += 1
    assert _chi2_ok(first, p[0])
    if not with_q:  # conditional on the first token being the (fixed) draft token
        assert _chi2_ok(second, p[1])


def test_tree_sampling_is_distributed_as_target():
    """Two branches (one-hot n-gram first, sampled EAGLE second): the first token is still ~ p_0."""
    temp = 1.0
    root = _rows(3, 0)[0]
    p = torch.softmax(root / temp, -1).numpy()
    q = torch.softmax(_rows(4, 1) * 2, -1)  # [2, V]
    branch_logits = [_rows(5, 1)[:2], _rows(6, 1)[:2]]
    g = torch.Generator().manual_seed(1)
    counts = np.zeros(V)
    src = np.zeros(2)
    ngram = torch.tensor([int(np.argmax(p)), 4])  # the likeliest token first: a large residual correction after it
    for _ in range(N):
        eagle = torch.multinomial(q, 1, generator=g)[:, 0]
        j, n, toks = verify_branches([ngram, eagle], [None, q], root, branch_logits, temp, g)
        counts[int(toks[0])] += 1
        if int(n) > 0:
            src[int(j)] += 1
    assert _chi2_ok(counts, p)
    assert src.min() > 0  # both branches win sometimes


def test_tree_greedy_keeps_longest_branch():
    root = torch.nn.functional.one_hot(torch.tensor(1), V).float()
    rows = torch.nn.functional.one_hot(torch.tensor([2, 3, 4]), V).float()  # target chain 1, 2, 3, 4
    a, b = torch.tensor([1, 2, 0]), torch.tensor([1, 2, 3])
    j, n, toks = verify_branches([a, b], [None, None], root, [rows, rows], 0.0, None)
    assert (int(j), int(n)) == (1, 3) and toks.tolist() == [1, 2, 3, 4]
    j, n, toks = verify_branches([b, a], [None, None], root, [rows, rows], 0.0, None)
    assert (int(j), int(n)) == (0, 3)
    j, n, toks = verify_branches([a[:2], b[:2]], [None, None], root, [rows[:2], rows[:2]], 0.0, None)
    assert (int(j), int(n)) == (0, 2)  # ties go to the first branch
