"""Verification: which draft tokens the target accepts, and the token it adds.

Greedy acceptance keeps the longest draft prefix equal to the target's argmax chain,
so the output is exactly plain greedy decoding. For temperature > 0, rejection
sampling (Leviathan et al. 2023; Chen et al. 2023) keeps the output distributed
exactly as plain sampling; a deterministic draft (n-gram) has one-hot proposal
probabilities. In a draft tree the siblings of a node are tried in turn against the
running residual distribution (recursive rejection sampling, as in SpecInfer and EAGLE-2).
With ``top_k`` / ``top_p`` the target distribution is the warped one (:func:`hybridsd.sampling.warp`),
so the output is distributed as plain sampling with those settings.

All functions stay on the device: they return tensors, and the caller reads them
with a single host sync per step (index tensors made on the host are copied without
one). Tree verification at temperature > 0 judges every parent's children at once, one
sibling rank at a time (a loop over ranks, not nodes), or in closed form when every node
is deterministic (EAGLE trees).
"""

from __future__ import annotations

import numpy as np
import torch

from hybridsd.sampling import warp


def _normalised(q: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Draft probabilities ``[k, V]`` in ``dtype``, each row scaled to sum to 1: the distribution ``torch.multinomial``
    draws from (a drafter's rows rounded to bf16 sum to 1 only within about 1e-2)."""
    q = q.to(dtype)
    return q / q.sum(-1, keepdim=True)


def _one_hot_or(q: torch.Tensor | None, draft: torch.Tensor, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    """Proposal probabilities ``[k, V]``: ``q`` normalised, or one-hot rows at ``draft``."""
    if q is not None:
        return _normalised(q, dtype)
    return torch.nn.functional.one_hot(draft, vocab).to(dtype)


def greedy_chain(draft: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept the longest prefix of ``draft`` (``[k]``) matching argmax of ``logits`` (``[k+1, V]``).

    Returns ``(n, tokens)``: ``n`` (0-d) accepted tokens; ``tokens[:n+1]`` (``[k+1]``) are
    the ``n`` accepted draft tokens followed by the target's own next token.
    """
    target = logits.argmax(-1)  # [k+1]
    k = draft.shape[0]
    n = (draft == target[:k]).cumprod(0).sum()  # 0-d (cumprod of bool is int64)
    return n, target


def sample_chain(
    draft: torch.Tensor,
    q: torch.Tensor | None,
    logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
    top_k: int | None = None,
    top_p: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection-sample ``draft`` (``[k]``, drawn from ``q`` ``[k, V]`` or one-hot) against ``logits`` ``[k+1, V]``
    warped by ``temperature``, ``top_k`` and ``top_p``.

    Returns ``(n, tokens)`` as :func:`greedy_chain`: ``tokens[n]`` is drawn from the
    residual ``max(p_n - q_n, 0)`` after a rejection, or from ``p_k`` when all k passed.
    """
    k, vocab = draft.shape[0], logits.shape[-1]
    p = warp(logits, temperature, top_k, top_p)  # [k+1, V]
    qd = _one_hot_or(q, draft, vocab, p.dtype)  # [k, V]
    px = p[:k].gather(1, draft[:, None])[:, 0]  # [k]
    qx = qd.gather(1, draft[:, None])[:, 0]  # [k]
    u = torch.rand(k, device=p.device, generator=generator)  # [k]
    n = (u * qx < px).long().cumprod(0).sum()  # 0-d: accept w.p. min(1, p/q)
    resid = torch.cat([(p[:k] - qd).clamp_min_(0), p[k:]])  # [k+1, V]; row k is the bonus distribution
    row = resid.index_select(0, n.view(1))[0]  # [V]
    fallback = p.index_select(0, n.view(1))[0]  # guards a residual that rounds to all-zero
    row = torch.where(row.sum() > 0, row, fallback)
    nxt = torch.multinomial(row, 1, generator=generator)  # [1]
    tokens = torch.cat([draft, draft.new_zeros(1)]).scatter(0, n.view(1), nxt)  # [k+1]
    return n, tokens


def verify_chain(
    draft: torch.Tensor,
    q: torch.Tensor | None,
    logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
    top_k: int | None = None,
    top_p: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One branch: :func:`greedy_chain` at temperature 0, else :func:`sample_chain`; ``logits`` ``[k+1, V]``
    are the target's at the root and at each draft token."""
    if temperature == 0:
        return greedy_chain(draft, logits)
    return sample_chain(draft, q, logits, temperature, generator, top_k, top_p)


def sample_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None,
                 top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """One token (``[1]``) from ``logits`` (``[V]``): argmax at temperature 0, else a sample of the warped
    distribution (:func:`~hybridsd.sampling.warp`)."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    return torch.multinomial(warp(logits, temperature, top_k, top_p), 1, generator=generator)


def verify_tree(
    tokens: torch.Tensor,
    parents: tuple[int, ...],
    ancestors: torch.Tensor,
    depths: torch.Tensor,
    probs: torch.Tensor | None,
    sampled: tuple[bool, ...],
    logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """Judge a draft tree (see :class:`~hybridsd.drafters.tree.DraftTree`) from one target pass.

    ``tokens`` ``[n]``; ``parents``: parent node per node (-1 = root, parents first); ``ancestors``
    ``[n, n]`` bool (``[i, j]``: j is i or an ancestor of i) and ``depths`` ``[n]`` on the device;
    ``probs`` ``[n, V]`` the proposals of the nodes flagged in ``sampled`` (others are one-hot);
    ``logits`` ``[1 + n, V]``: the target's at the root and at each node.
    Returns ``[2]``: the last accepted node (-1 when none) and the target's token after it.
    Greedy: the deepest node whose path equals the target's argmax at each parent (the first on
    ties). Temperature > 0: from the root, each node's children are tried in order against the running
    residual (accept w.p. ``min(1, p(x) / q(x))``, else ``p <- norm(max(p - q, 0))``), descending into the
    first accepted one; the token after the last accepted node is drawn from the residual there. The target's
    distributions ``p`` are warped by ``temperature``, ``top_k`` and ``top_p``.
    """
    if temperature == 0:
        target = logits.argmax(-1)  # [1+n]
        rows = torch.tensor(parents).to(tokens.device, non_blocking=True) + 1  # [n] row of each node's parent
        match = tokens == target.index_select(0, rows)  # [n]
        ok = ~(ancestors & ~match[None, :]).any(1)  # [n] the whole path matches
        score = ok * depths  # [n]
        best = score.argmax()  # first maximum
        node = torch.where(score[best] > 0, best, torch.full_like(best, -1))
        return torch.stack([node, target[node + 1]])
    p = warp(logits, temperature, top_k, top_p)  # [1+n, V]
    n, dev = len(parents), p.device
    u = torch.rand(n, device=dev, generator=generator)  # [n]
    if not any(sampled):
        return _one_hot_tree(tokens, parents, ancestors, depths, p, u, generator)
    q = torch.nn.functional.one_hot(tokens, p.shape[-1]).to(p.dtype)  # [n, V] deterministic nodes: one-hot
    if any(sampled):
        rows = torch.tensor([i for i in range(n) if sampled[i]]).to(dev, non_blocking=True)
        q[rows] = _normalised(probs.index_select(0, rows), p.dtype)
    uq = u * q.gather(1, tokens[:, None])[:, 0]  # [n] u * q(x): accept when below the residual at x
    # Whether a node passes, once its parent is reached, depends only on the parent's distribution and the
    # earlier siblings: all parents' children are judged at once, one sibling rank at a time.
    groups, order, ends = _sibling_ranks(parents)
    where = {par: j for j, par in enumerate(groups)}
    plan = torch.tensor([g + 1 for g in groups] + order + [where[parents[i]] for i in order]).to(dev, non_blocking=True)
    G = len(groups)
    gmap = torch.full((1 + n,), -1, dtype=torch.long, device=dev)  # [1+n] row -> its group (-1: a leaf)
    gmap[plan[:G]] = torch.arange(G, device=dev)
    nodes, grp = plan[G : G + n], plan[G + n :]  # [n] nodes by (sibling rank, index) and their groups
    resid = p.index_select(0, plan[:G])  # [G, V] each parent's residual after its children tried so far
    done = torch.zeros(G, dtype=torch.bool, device=dev)  # a child of the group passed
    first = torch.zeros(n, dtype=torch.bool, device=dev)  # [n] node i is its parent's accepted child
    begin = 0
    for end in ends:  # the nodes of one sibling rank: distinct parents
        idx, g = nodes[begin:end], grp[begin:end]  # [m], [m]
        r = resid.index_select(0, g)  # [m, V]
        qi = q.index_select(0, idx)  # [m, V]
        acc = uq.index_select(0, idx) < r.gather(1, tokens.index_select(0, idx)[:, None])[:, 0]  # [m]
        first.index_copy_(0, idx, acc & ~done.index_select(0, g))
        done.index_copy_(0, g, done.index_select(0, g) | acc)
        rest = (r - qi).clamp_min(0)
        mass = rest.sum(-1, keepdim=True)
        rest = torch.where(mass > 0, rest / mass.clamp_min(1e-30), r)  # zero mass: rejection had prob. 0
        resid.index_copy_(0, g, rest)
        begin = end
    on_path = ~(ancestors & ~first[None, :]).any(1)  # [n] every node of the path was its parent's first pass
    score = on_path * depths  # [n]
    best = score.argmax()
    cur = torch.where(score[best] > 0, best, torch.full_like(best, -1))  # the last accepted node
    g = gmap[cur + 1]  # cur's group: all its children failed; a leaf: its own distribution
    row = torch.where(g >= 0, resid.index_select(0, g.clamp_min(0).view(1))[0],
                      p.index_select(0, (cur + 1).view(1))[0])  # [V]
    nxt = torch.multinomial(row, 1, generator=generator)[0]
    return torch.stack([cur, nxt])


def _one_hot_tree(tokens, parents, ancestors, depths, p, u, generator) -> torch.Tensor:
    """:func:`verify_tree` at temperature > 0 for a tree of deterministic nodes only, in closed form: after its earlier
    siblings' tokens were rejected, the residual is ``p`` without those tokens, renormalized, so a node passes
    iff ``u < p(x) / (1 - p(earlier siblings' tokens))`` (0 for a token an earlier sibling carries)."""
    n, dev = tokens.shape[0], p.device
    par = torch.tensor(parents).to(dev, non_blocking=True)  # [n]
    order = torch.arange(n, device=dev)
    earlier = (par[:, None] == par[None, :]) & (order[None, :] < order[:, None])  # [n, n] [j, i]: i a sibling before j
    repeat = (earlier & (tokens[:, None] == tokens[None, :])).any(1)  # [n] an earlier sibling has the token
    px = p.index_select(0, par + 1).gather(1, tokens[:, None])[:, 0]  # [n] p(x) at the parent
    px = torch.where(repeat, torch.zeros_like(px), px)
    taken = (earlier.to(p.dtype) * px[None, :]).sum(1)  # [n] mass of the earlier siblings' tokens
    acc = u * (1 - taken) < px  # [n]
    first = acc & ~(earlier & acc[None, :]).any(1)  # [n] its parent's first passing child
    on_path = ~(ancestors & ~first[None, :]).any(1)  # [n]
    score = on_path * depths
    best = score.argmax()
    cur = torch.where(score[best] > 0, best, torch.full_like(best, -1))  # the last accepted node
    row = p.index_select(0, (cur + 1).view(1))[0]  # [V] its distribution, without its children's tokens
    tried = torch.zeros_like(row).index_add_(0, tokens, (par == cur).to(row.dtype))  # [V]
    rest = torch.where(tried > 0, torch.zeros_like(row), row)
    rest = torch.where(rest.sum() > 0, rest, row)  # zero mass: a child passed for sure, cur is not last
    nxt = torch.multinomial(rest, 1, generator=generator)[0]
    return torch.stack([cur, nxt])


def _sibling_ranks(parents: tuple[int, ...]) -> tuple[list[int], list[int], list[int]]:
    """The nodes with children (``-1`` = the root, in order of first child), all nodes ordered by (rank among
    their siblings, index), and where each rank ends in that order."""
    rank, count = [], {}
    for par in parents:
        rank.append(count.get(par, 0))
        count[par] = rank[-1] + 1
    order = sorted(range(len(parents)), key=lambda i: (rank[i], i))
    ends = np.cumsum(np.bincount(rank)).tolist()
    return list(count), order, ends
