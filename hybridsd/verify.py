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
with a single host sync per step.
"""

from __future__ import annotations

import torch

from hybridsd.sampling import warp


def _one_hot_or(q: torch.Tensor | None, draft: torch.Tensor, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    """Proposal probabilities ``[k, V]``: ``q`` itself, or one-hot rows at ``draft``."""
    if q is not None:
        return q.to(dtype)
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
        rows = torch.tensor(parents, device=tokens.device) + 1  # [n] row of each node's parent
        match = tokens == target.index_select(0, rows)  # [n]
        ok = ~(ancestors & ~match[None, :]).any(1)  # [n] the whole path matches
        score = ok * depths  # [n]
        best = score.argmax()  # first maximum
        node = torch.where(score[best] > 0, best, torch.full_like(best, -1))
        return torch.stack([node, target[node + 1]])
    p = warp(logits, temperature, top_k, top_p)  # [1+n, V]
    n = len(parents)
    u = torch.rand(n, device=p.device, generator=generator)  # [n]
    q = torch.nn.functional.one_hot(tokens, p.shape[-1]).to(p.dtype)  # [n, V] deterministic nodes: one-hot
    if any(sampled):
        rows = torch.tensor([i for i in range(n) if sampled[i]], device=p.device)
        q[rows] = probs.index_select(0, rows).to(p.dtype)
    uq = u * q.gather(1, tokens[:, None])[:, 0]  # [n] u * q(x): accept when below the residual at x
    cur = torch.full((), -1, dtype=torch.long, device=p.device)  # the last accepted node
    resid = p[0]  # [V] residual of cur's children tried so far
    for i, par in enumerate(parents):
        live = cur == par  # node i is a candidate now
        acc = live & (uq[i] < resid[tokens[i]])
        rest = (resid - q[i]).clamp_min(0)
        mass = rest.sum()
        rest = torch.where(mass > 0, rest / mass.clamp_min(1e-30), resid)  # zero mass: rejection had prob. 0
        resid = torch.where(acc, p[i + 1], torch.where(live, rest, resid))
        cur = torch.where(acc, torch.full_like(cur, i), cur)
    nxt = torch.multinomial(resid, 1, generator=generator)[0]
    return torch.stack([cur, nxt])
