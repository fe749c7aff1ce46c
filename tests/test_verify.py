"""Acceptance math: greedy prefix rule, and rejection sampling that keeps the target distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from hybridsd.drafters.tree import DraftTree
from hybridsd.verify import greedy_chain, sample_chain, verify_tree

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


def _sequential_chain(draft, q, logits, temp, g) -> tuple[int, int]:
    """Rejection sampling token by token (the slow reference), drawing as sample_chain does: one uniform per
    draft token, then the next token from the first rejection's normalized residual, or from p_k."""
    p = torch.softmax(logits / temp, -1)
    u = torch.rand(len(draft), generator=g)
    for i, tok in enumerate(draft.tolist()):
        qi = q[i] if q is not None else torch.nn.functional.one_hot(torch.tensor(tok), p.shape[-1]).float()
        if u[i] * qi[tok] < p[i, tok]:  # accepted with probability min(1, p / q)
            continue
        rest = (p[i] - qi).clamp_min(0)
        return i, int(torch.multinomial(rest if rest.sum() > 0 else p[i], 1, generator=g))
    return len(draft), int(torch.multinomial(p[-1], 1, generator=g))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**31 - 1), st.booleans(), st.floats(0.2, 2.0))
def test_sample_chain_matches_sequential_reference(k, seed, with_q, temp):
    """The accepted prefix and the next token are the token-by-token walk's on the same draws; drafts of the
    target's likeliest tokens are accepted often, so long prefixes are checked too."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, V, generator=g) * 3
    q = torch.softmax(torch.randn(k, V, generator=g), -1) if with_q else None
    draft = torch.where(torch.rand(k, generator=g) < 0.7, logits[:k].argmax(-1), torch.randint(0, V, (k,), generator=g))
    n, toks = sample_chain(draft, q, logits, temp, torch.Generator().manual_seed(seed))
    want_n, want_next = _sequential_chain(draft, q, logits, temp, torch.Generator().manual_seed(seed))
    assert (int(n), int(toks[int(n)])) == (want_n, want_next)
    assert toks[: int(n)].tolist() == draft[: int(n)].tolist()


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


def _judge(tree: DraftTree, logits, temp, g):
    """verify_tree on a DraftTree: (last accepted node, next token)."""
    res = verify_tree(tree.tokens, tree.parents, torch.as_tensor(tree.ancestors), torch.as_tensor(tree.depths),
                      tree.probs, tree.sampled, logits, temp, g)
    return int(res[0]), int(res[1])


def test_tree_sampling_is_distributed_as_target():
    """Two branches (one-hot n-gram first, sampled EAGLE second): the first token is still ~ p_0."""
    temp = 1.0
    root = _rows(3, 0)[0]
    p = torch.softmax(root / temp, -1).numpy()
    q = torch.softmax(_rows(4, 1) * 2, -1)  # [2, V]
    logits = torch.cat([root[None], _rows(5, 1)[:2], _rows(6, 1)[:2]])  # [5, V] root, n-gram rows, EAGLE rows
    g = torch.Generator().manual_seed(1)
    counts = np.zeros(V)
    src = np.zeros(2)
    ngram = torch.tensor([int(np.argmax(p)), 4])  # the likeliest token first: a large residual correction after it
    for _ in range(N):
        eagle = torch.multinomial(q, 1, generator=g)[:, 0]
        tree = DraftTree(torch.cat([ngram, eagle]), (-1, 0, -1, 2), ("ngram",) * 2 + ("eagle",) * 2,
                         torch.cat([q, q]), (False, False, True, True))
        node, nxt = _judge(tree, logits, temp, g)
        first = nxt if node < 0 else int(tree.tokens[tree.path(node)[0]])
        counts[first] += 1
        if node >= 0:
            src[int(node >= 2)] += 1
    assert _chi2_ok(counts, p)
    assert src.min() > 0  # both branches win sometimes


def test_tree_greedy_keeps_longest_branch():
    logits = torch.nn.functional.one_hot(torch.tensor([1, 2, 3, 4, 2, 3, 4]), V).float()  # target chain 1, 2, 3, 4
    a, b = [1, 2, 0], [1, 2, 3]
    tree = DraftTree(torch.tensor(a + b), (-1, 0, 1, -1, 3, 4), ("a",) * 3 + ("b",) * 3)
    assert _judge(tree, logits[[0, 1, 2, 3, 1, 2, 3]], 0.0, None) == (5, 4)
    tree = DraftTree(torch.tensor(b + a), (-1, 0, 1, -1, 3, 4), ("b",) * 3 + ("a",) * 3)
    assert _judge(tree, logits[[0, 1, 2, 3, 1, 2, 3]], 0.0, None) == (2, 4)
    tree = DraftTree(torch.tensor(a[:2] + b[:2]), (-1, 0, -1, 2), ("a",) * 2 + ("b",) * 2)
    assert _judge(tree, logits[[0, 1, 2, 1, 2]], 0.0, None) == (1, 3)  # ties go to the first branch
    tree = DraftTree(torch.tensor([0, 3]), (-1, -1), ("a", "b"))
    assert _judge(tree, logits[[0, 1, 1]], 0.0, None) == (-1, 1)  # nothing accepted: the target's token
