"""Verification: which draft tokens the target accepts, and the token it adds.

Greedy acceptance keeps the longest draft prefix equal to the target's argmax chain,
so the output is exactly plain greedy decoding. For temperature > 0, rejection
sampling (Leviathan et al. 2023; Chen et al. 2023) keeps the output distributed
exactly as plain sampling; a deterministic draft (n-gram) has one-hot proposal
probabilities. Several branches from the same root are tried in turn against the
running residual distribution (recursive rejection sampling, as in SpecInfer), each
branch's first token drawn independently of the others.

All functions stay on the device: they return tensors, and the caller reads them
with a single host sync per step.
"""

from __future__ import annotations

import torch


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection-sample ``draft`` (``[k]``, drawn from ``q`` ``[k, V]`` or one-hot) against ``logits`` ``[k+1, V]``.

    Returns ``(n, tokens)`` as :func:`greedy_chain`: ``tokens[n]`` is drawn from the
    residual ``max(p_n - q_n, 0)`` after a rejection, or from ``p_k`` when all k passed.
    """
    k, vocab = draft.shape[0], logits.shape[-1]
    p = torch.softmax(logits / temperature, dim=-1)  # [k+1, V]
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """One branch: :func:`greedy_chain` at temperature 0, else :func:`sample_chain`; ``logits`` ``[k+1, V]``
    are the target's at the root and at each draft token."""
    if temperature == 0:
        return greedy_chain(draft, logits)
    return sample_chain(draft, q, logits, temperature, generator)


def sample_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token (``[1]``) from ``logits`` (``[V]``): argmax at temperature 0, else a sample of softmax(logits/T)."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)


def verify_branches(
    drafts: list[torch.Tensor],
    probs: list[torch.Tensor | None],
    root_logits: torch.Tensor,
    branch_logits: list[torch.Tensor],
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Judge several draft branches that share a root.

    ``drafts[j]``: ``[k_j]`` tokens (``k_j >= 1``); ``probs[j]``: their proposal
    distributions or None (one-hot); ``root_logits``: ``[V]`` at the root;
    ``branch_logits[j]``: ``[k_j, V]`` at branch j's tokens. Returns ``(j, n, tokens)``:
    the chosen branch (0-d), its accepted length (0-d) and ``tokens`` (``[max k + 1]``)
    whose first ``n + 1`` entries are the accepted tokens and the target's next token.
    Greedy keeps the branch with the longest accepted prefix (the first on ties).
    """
    if len(drafts) == 1:
        logits = torch.cat([root_logits[None], branch_logits[0]])  # [k+1, V]
        n, tok = verify_chain(drafts[0], probs[0], logits, temperature, generator)
        return torch.zeros_like(n), n, tok
    kmax = max(int(d.shape[0]) for d in drafts)
    results = []
    for j, d in enumerate(drafts):
        logits = torch.cat([root_logits[None], branch_logits[j]])  # [k_j+1, V]
        if temperature == 0:
            n, tok = greedy_chain(d, logits)
        else:
            # the branch's tail, judged as a chain once its first token is in
            n_tail, tok_tail = sample_chain(d[1:], None if probs[j] is None else probs[j][1:],
                                            logits[1:], temperature, generator)
            n, tok = n_tail + 1, torch.cat([d[:1], tok_tail])
        results.append((n, torch.nn.functional.pad(tok, (0, kmax + 1 - tok.shape[0]))))
    ns = torch.stack([n for n, _ in results])  # [m]
    toks = torch.stack([t for _, t in results])  # [m, kmax+1]
    if temperature == 0:
        j = ns.argmax()  # first maximum
        return j, ns[j], toks[j]
    return _recursive_root(drafts, probs, root_logits, ns, toks, temperature, generator)


def _recursive_root(drafts, probs, root_logits, ns, toks, temperature, generator):
    """Recursive rejection at the shared root: try each branch's first token against the residual."""
    vocab = root_logits.shape[-1]
    resid = torch.softmax(root_logits / temperature, dim=-1)  # [V]
    chosen = torch.full((), -1, dtype=torch.long, device=resid.device)
    for j, d in enumerate(drafts):
        qj = _one_hot_or(None if probs[j] is None else probs[j][:1], d[:1], vocab, resid.dtype)[0]  # [V]
        x = d[0]
        u = torch.rand((), device=resid.device, generator=generator)
        ok = (chosen < 0) & (u * qj[x] < resid[x])
        chosen = torch.where(ok, torch.full_like(chosen, j), chosen)
        new_resid = (resid - qj).clamp_min(0)
        mass = new_resid.sum()
        new_resid = torch.where(mass > 0, new_resid / mass.clamp_min(1e-30), resid)  # normalized residual
        resid = torch.where(chosen < 0, new_resid, resid)
    fallback = torch.multinomial(resid, 1, generator=generator)  # [1] used when no branch's first token passed
    none = chosen < 0
    j = chosen.clamp_min(0)
    n = torch.where(none, torch.zeros_like(ns[0]), ns[j])
    fallback_tokens = torch.cat([fallback, toks.new_zeros(toks.shape[1] - 1)])  # [kmax+1]
    tokens = torch.where(none, fallback_tokens, toks[j])
    return j, n, tokens
