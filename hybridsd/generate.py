"""The speculative decoding loop: draft, verify in one target pass, commit, repeat (batch 1)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hybridsd.drafters.base import Draft, Drafter, ProposeRequest
from hybridsd.metrics import SpecStats, StepRecord
from hybridsd.target import Target, context_length, exact_rows, target_for
from hybridsd.verify import sample_token, verify_branches, verify_chain


@dataclass
class GenerateResult:
    """New tokens (EOS included when it stopped the sequence) and exact counters."""

    tokens: list[int]
    stats: SpecStats


def _prompt_ids(input_ids) -> torch.Tensor:
    """The prompt as a 1-D int64 CPU tensor; rejects batches and empty prompts."""
    ids = torch.as_tensor(input_ids, dtype=torch.long).cpu()
    if ids.ndim == 2:
        if ids.shape[0] != 1:
            raise ValueError(f"generate runs one sequence at a time; got a batch of {ids.shape[0]}")
        ids = ids[0]
    if ids.ndim != 1:
        raise ValueError(f"input_ids must be 1-D or [1, T], got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("empty prompt: input_ids has no tokens")
    return ids


def _check_bos(model: torch.nn.Module, ids: torch.Tensor, on_double_bos: str) -> None:
    if on_double_bos not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_double_bos must be 'warn', 'raise' or 'ignore', got {on_double_bos!r}")
    bos = getattr(model.config, "bos_token_id", None)
    if on_double_bos == "ignore" or bos is None or ids.numel() < 2 or ids[:2].tolist() != [bos, bos]:
        return
    msg = (f"prompt starts with two BOS tokens ({bos}): the chat template already wrote one and tokenizing "
           "added another; tokenize templated text with add_special_tokens=False")
    if on_double_bos == "raise":
        raise ValueError(msg)
    warnings.warn(msg, stacklevel=3)


def _eos_set(model: torch.nn.Module, eos_token_id) -> frozenset[int]:
    if eos_token_id is None:
        gen_cfg = getattr(model, "generation_config", None)
        eos_token_id = getattr(gen_cfg, "eos_token_id", None)
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int):
        return frozenset([eos_token_id])
    return frozenset(int(e) for e in eos_token_id)


def _tree_layout(lengths: Sequence[int], start: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Positions ``[q]``, visibility ``[q, q]`` and row offsets of branches laid after one root token."""
    q = 1 + sum(lengths)
    positions = np.full(q, start, dtype=np.int64)
    visible = np.zeros((q, q), dtype=bool)
    visible[:, 0] = True
    offsets, o = [], 1
    for k in lengths:
        offsets.append(o)
        positions[o : o + k] = start + 1 + np.arange(k)
        visible[o : o + k, o : o + k] = np.tril(np.ones((k, k), dtype=bool))
        o += k
    return positions, visible, offsets


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    input_ids,
    drafter: Drafter | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    eos_token_id: int | Sequence[int] | None = None,
    seed: int | None = None,
    cuda_graphs: bool | None = None,
    compile: bool | str = False,
    attention: str | None = None,
    on_double_bos: str = "warn",
    exact: bool | int = False,
) -> GenerateResult:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids`` with speculative decoding.

    Greedy (``temperature == 0``) output equals plain greedy decoding token for token;
    with ``temperature > 0`` it is distributed as plain sampling at that temperature,
    and ``seed`` makes a run reproducible. ``eos_token_id`` (default: the model's
    generation config) stops the sequence after that token. ``drafter=None`` decodes
    one token per target pass with the same engine (the baseline). ``cuda_graphs``
    (default: on for CUDA models) replays each verification block size as a CUDA graph;
    ``compile`` runs those steps through ``torch.compile`` (slow to start, for long runs; a string names
    the mode, e.g. ``"max-autotune-no-cudagraphs"``, or ``"auto"``: that mode for 1-token steps, the default
    mode for verify blocks). ``attention`` names the Llama-family decoder's
    attention kernel (``"split"`` or ``"sdpa"``, see :mod:`hybridsd.attention`; default: the fastest available).
    A prompt that starts with two BOS tokens (the model config's ``bos_token_id``) is
    reported by ``on_double_bos``: ``"warn"``, ``"raise"`` (ValueError) or ``"ignore"``.
    ``exact`` (Llama-family decoder only): every target pass after the prefill runs as a block of one fixed
    size (True: 16 rows, or that many rows; it must hold the drafter's tokens plus one) with the same kernels,
    so every position's logits are bit-identical however it is verified, and greedy output equals plain
    greedy output in any dtype (bf16 too) for runs with the same ``exact``, prompt length and
    ``max_new_tokens``. It costs a 16-row step for every decode step.
    """
    ids = _prompt_ids(input_ids)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    limit = context_length(model)
    if limit is not None and ids.numel() + max_new_tokens > limit:
        raise ValueError(
            f"prompt ({ids.numel()} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
            f"context length ({limit})"
        )
    _check_bos(model, ids, on_double_bos)
    eos = _eos_set(model, eos_token_id)
    layers = drafter.hidden_layers if drafter is not None else ()
    headroom = drafter.max_tokens if drafter is not None else 0
    device = next(model.parameters()).device
    graphs = device.type == "cuda" if cuda_graphs is None else cuda_graphs
    rows = exact_rows(exact, headroom)  # exact mode: the span may not depend on the drafter
    target = target_for(model, ids.numel() + max_new_tokens + (rows or headroom + 1), cuda_graphs=graphs,
                        compile=compile, attention=attention, exact=rows)
    generator = None
    if temperature > 0:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))

    stats = SpecStats()
    prompt = ids.to(device)
    logits, hidden = target.forward(prompt, 0, hidden_layers=layers, last_logits_only=True)
    first = sample_token(logits[-1], temperature, generator)  # [1]
    out = [int(first.item())]  # host sync: the first token
    stats.record_prefill(1)
    if drafter is not None:
        drafter.reset(ids.numel())
        drafter.observe(hidden, torch.cat([prompt[1:], first]))

    context = np.empty(ids.numel() + max_new_tokens, dtype=np.int64)  # host copy of the sequence
    context[: ids.numel()] = ids.numpy()
    context[ids.numel()] = out[0]
    start = ids.numel()  # slot and position of the newest token, not yet fed to the target
    last = first  # [1] on device
    while out[-1] not in eos and len(out) < max_new_tokens:
        budget = max_new_tokens - len(out) - 1  # leave room for the target's own token
        branches: list[Draft] = []
        if drafter is not None and budget > 0:
            request = ProposeRequest(context[: start + 1], budget, device, temperature, generator)
            branches = [_clip(d, budget) for d in drafter.propose(request) if len(d) > 0]
        j, n, new, new_dev, committed = _verify_step(target, last, start, branches, layers, temperature, generator)
        last = new_dev[-1:]  # [1] on device
        kept = next((i + 1 for i, t in enumerate(new) if t in eos), len(new))  # EOS ends the sequence
        out.extend(new[:kept])
        context[start + 1 : start + 1 + kept] = new[:kept]
        accepted = min(n, kept)
        judged = branches[j] if branches and n > 0 else max(branches, key=len, default=None)
        stats.record_step(StepRecord(
            proposed=tuple(b.source for b in branches),
            drafted=len(judged) if judged is not None else 0,
            accepted=accepted,
            emitted=kept,
            source=branches[j].source if accepted else None,
            tree_tokens=sum(len(b) for b in branches),
        ))
        if drafter is not None:
            drafter.observe(committed, new_dev)
        start += n + 1
    return GenerateResult(out, stats)


def _clip(draft: Draft, budget: int) -> Draft:
    """The draft cut to at most ``budget`` tokens."""
    if len(draft) <= budget:
        return draft
    probs = None if draft.probs is None else draft.probs[:budget]
    return Draft(draft.tokens[:budget], draft.source, probs)


def _verify_step(target: Target, last, start, branches, layers, temperature, generator):
    """One target pass over the newest token and the draft branches; commits the accepted branch's cache.

    Returns ``(branch, n_accepted, new_tokens, new_tokens_on_device, committed_hidden)``: ``new_tokens``
    (host list and ``[n + 1]`` device tensor) are the accepted draft tokens and the target's own token;
    ``committed_hidden`` (``[n + 1, ...]`` or None) are the target states at the committed positions.
    """
    if not branches:
        logits, hidden = target.forward(last, start, hidden_layers=layers)
        tok = sample_token(logits[0], temperature, generator)  # [1]
        committed = None if hidden is None else hidden.clone()  # a graph's output buffer is reused next step
        return 0, 0, [int(tok.item())], tok, committed  # host sync: the step's token
    lengths = [len(b) for b in branches]
    positions = visible = None
    offsets = [1]
    if len(branches) > 1:
        positions, visible, offsets = _tree_layout(lengths, start)
    feed = torch.cat([last] + [b.tokens for b in branches])  # [1 + sum k]
    logits, hidden = target.forward(feed, start, positions=positions, visible=visible, hidden_layers=layers)
    if len(branches) == 1:  # a chain: its rows are already [root, draft...]
        n, toks = verify_chain(branches[0].tokens, branches[0].probs, logits, temperature, generator)
        packed = [0] + torch.cat([n.view(1), toks]).tolist()  # host sync: the step's one read
    else:
        j, n, toks = verify_branches(
            [b.tokens for b in branches], [b.probs for b in branches], logits[0],
            [logits[o : o + k] for o, k in zip(offsets, lengths)], temperature, generator,
        )
        packed = torch.cat([j.view(1), n.view(1), toks]).tolist()  # host sync: the step's one read
    j, n = packed[0], packed[1]
    o = offsets[j]
    if n > 0 and o != 1:  # bring the accepted branch's cache entries next to the root
        dev = target.device
        target.kv.move(torch.arange(start + o, start + o + n, device=dev),
                       torch.arange(start + 1, start + 1 + n, device=dev))
    committed = None
    if hidden is not None:  # the root and the accepted branch's rows; a copy, as graph outputs are reused
        committed = torch.cat([hidden[:1], hidden[o : o + n]])  # [n+1, len*H]
    return j, n, packed[2 : 3 + n], toks[: n + 1], committed
