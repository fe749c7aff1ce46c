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


def _stepwise_tree(tree: DraftTree, p: torch.Tensor, g: torch.Generator) -> tuple[int, int]:
    """Textbook recursive rejection over a tree, one node at a time: ``p`` ``[1 + n, V]`` the warped target at the
    root and at each node; one uniform per node drawn first (as :func:`verify_tree` does), then the next token."""
    n = len(tree)
    u = torch.rand(n, generator=g)
    cur, r = -1, p[0].clone()
    while True:
        for c in (i for i in range(n) if tree.parents[i] == cur):
            x = int(tree.tokens[c])
            q = tree.probs[c] if tree.sampled[c] else torch.nn.functional.one_hot(tree.tokens[c], p.shape[-1]).to(p)
            if u[c] * q[x] < r[x]:
                cur, r = c, p[c + 1].clone()
                break
            rest = (r - q).clamp_min(0)
            r = rest / rest.sum() if rest.sum() > 0 else r
        else:
            return cur, int(torch.multinomial(r, 1, generator=g))


@pytest.mark.parametrize("mode", ["one-hot", "mixed", "sampled"])
@pytest.mark.parametrize("temp, top_k, top_p", [(1.0, None, None), (0.7, 3, None), (1.3, None, 0.8), (0.9, 4, 0.8)])
def test_tree_sampling_equals_a_stepwise_reference_draw_for_draw(mode, temp, top_k, top_p):
    """Random trees of 1-8 nodes (one-hot tokens from {0, 1, 2}: many duplicate siblings), float64: the node kept and
    the next token equal the step-by-step reference's on the same seed."""
    from hybridsd.sampling import warp

    gen = torch.Generator().manual_seed(7)
    vocab = 7
    for _ in range(150):
        n = int(torch.randint(1, 9, (), generator=gen))
        parents = tuple(-1 if i == 0 or torch.rand((), generator=gen) < 0.35 else
                        int(torch.randint(0, i, (), generator=gen)) for i in range(n))
        sampled = tuple(mode == "sampled" or (mode == "mixed" and bool(torch.rand((), generator=gen) < 0.5))
                        for _ in range(n))
        probs = torch.softmax(torch.randn(n, vocab, generator=gen, dtype=torch.float64) * 1.5, -1)  # [n, V]
        tokens = [int(torch.multinomial(probs[i], 1, generator=gen)) if sampled[i] else
                  int(torch.randint(0, 3, (), generator=gen)) for i in range(n)]
        tree = DraftTree(torch.tensor(tokens), parents, ("d",) * n, probs if any(sampled) else None, sampled)
        logits = torch.randn(n + 1, vocab, generator=gen, dtype=torch.float64) * 2  # [1 + n, V]
        seed = int(torch.randint(0, 2**31, (), generator=gen))
        got = verify_tree(tree.tokens, tree.parents, torch.as_tensor(tree.ancestors), torch.as_tensor(tree.depths),
                          tree.probs, tree.sampled, logits, temp, torch.Generator().manual_seed(seed), top_k, top_p)
        want = _stepwise_tree(tree, warp(logits, temp, top_k, top_p), torch.Generator().manual_seed(seed))
        assert (int(got[0]), int(got[1])) == want, (parents, tokens, sampled)


def _exact_first_two(p0, p1, nodes) -> torch.Tensor:
    """The exact distribution ``[V, V]`` of the first two tokens the stepwise rejection emits for a depth-2 tree drawn
    at random: ``nodes``, in order, each ``(parent, q_root [V] or None, q_child [V, V] or None, token)``; a node with
    ``q`` is drawn from it (its row for the parent's token), one without is the fixed ``token`` (one-hot). ``p0``
    ``[V]`` and ``p1`` ``[V, V]`` (``p1[x]``: after ``x``) are the target's."""
    vocab = p0.shape[0]
    out = torch.zeros(vocab, vocab, dtype=torch.float64)

    def children(parent, r, weight, first):
        # r: the running residual at ``parent``; weight: the probability of this path of draws and decisions
        walk([i for i, node in enumerate(nodes) if node[0] == parent], parent, r, weight, first)

    def walk(kids, parent, r, weight, first):
        if not kids:  # every child rejected (or none): the next token ~ r
            if parent < 0:
                out.add_(weight * r[:, None] * p1)
            else:
                out[first] += weight * r
            return
        c, rest = kids[0], kids[1:]
        _, q_root, q_child, token = nodes[c]
        q = q_root if nodes[c][0] < 0 else (None if q_child is None else q_child[first])
        options = [(token, 1.0)] if q is None else [(x, float(q[x])) for x in range(vocab) if q[x] > 0]
        for x, px in options:
            qd = torch.nn.functional.one_hot(torch.tensor(x), vocab).double() if q is None else q
            accept = min(1.0, float(r[x] / qd[x]))
            if accept > 0:
                if parent < 0:
                    children(c, p1[x].clone(), weight * px * accept, x)
                else:
                    out[first, x] += weight * px * accept
            if accept < 1:
                resid = (r - qd).clamp_min(0)
                walk(rest, parent, resid / resid.sum(), weight * px * (1 - accept), first)

    children(-1, p0.clone(), 1.0, None)
    return out


@pytest.mark.parametrize("temp, top_k, top_p", [(1.0, None, None), (0.8, 3, None), (1.2, None, 0.7), (0.9, 4, 0.8)])
def test_the_stepwise_tree_reference_is_exactly_lossless(temp, top_k, top_p):
    """Its two-token output distribution, summed exactly over every draft the drafters could draw, equals the warped
    target's, for trees of two sampled drafters, a one-hot (n-gram) branch beside a sampled one in either order, and
    one-hot siblings that repeat a token; with the draw-for-draw test above, :func:`verify_tree` is lossless."""
    from hybridsd.sampling import warp

    g = torch.Generator().manual_seed(123)
    vocab = 6
    p0 = warp(torch.randn(vocab, generator=g, dtype=torch.float64) * 1.5, temp, top_k, top_p)  # [V]
    p1 = warp(torch.randn(vocab, vocab, generator=g, dtype=torch.float64) * 1.5, temp, top_k, top_p)  # [V, V]
    qa, qb = (torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64) * 1.2, -1) for _ in range(2))
    qa2, qb2 = (torch.softmax(torch.randn(vocab, vocab, generator=g, dtype=torch.float64) * 1.2, -1) for _ in range(2))
    top, second = (int(i) for i in torch.argsort(p0, descending=True)[:2])
    trees = {
        "two sampled drafters": [(-1, qa, None, None), (0, None, qa2, None), (-1, qb, None, None),
                                 (2, None, qb2, None)],
        "one-hot, then sampled": [(-1, None, None, top), (0, None, None, second), (-1, qa, None, None),
                                  (2, None, qa2, None)],
        "sampled, then one-hot": [(-1, qa, None, None), (-1, None, None, second), (1, None, None, top)],
        "one-hot duplicates": [(-1, None, None, second), (-1, None, None, second), (-1, None, None, top)],
    }
    want = p0[:, None] * p1  # [V, V]
    for name, nodes in trees.items():
        got = _exact_first_two(p0, p1, nodes)
        assert torch.allclose(got, want, atol=1e-12), (name, float((got - want).abs().max()))


def test_draft_rows_that_do_not_sum_to_one_are_normalised():
    """Rows scaled by 1.008 (as bf16 rounding leaves them) are what ``torch.multinomial`` draws from once normalised:
    chains and trees decide as with the exact rows, draw for draw (unnormalised, u * q(x) would be 0.8% too high)."""
    g = torch.Generator().manual_seed(3)
    vocab, k = 7, 4
    for seed in range(200):
        q = torch.softmax(torch.randn(k, vocab, generator=g, dtype=torch.float64), -1)  # [k, V]
        draft = torch.multinomial(q, 1, generator=g)[:, 0]  # [k]
        logits = torch.randn(k + 1, vocab, generator=g, dtype=torch.float64)  # [k+1, V]
        (n0, t0), (n1, t1) = (sample_chain(draft, rows, logits, 1.0, torch.Generator().manual_seed(seed))
                              for rows in (q, q * 1.008))
        assert int(n0) == int(n1) and t0[: int(n0) + 1].tolist() == t1[: int(n1) + 1].tolist()
        tree = DraftTree(draft, (-1, 0, -1, 2), ("a", "a", "b", "b"), q)
        judged = [verify_tree(tree.tokens, tree.parents, torch.as_tensor(tree.ancestors), torch.as_tensor(tree.depths),
                              rows, tree.sampled, logits, 1.0, torch.Generator().manual_seed(seed))
                  for rows in (q, q * 1.008)]
        assert judged[0].tolist() == judged[1].tolist()
