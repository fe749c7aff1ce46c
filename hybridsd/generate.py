"""The speculative decoding loop: draft, verify in one target pass, commit, repeat (batch 1)."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from hybridsd.drafters.base import Draft, Drafter, ProposeRequest, check_count
from hybridsd.drafters.tree import DraftTree, layout
from hybridsd.metrics import SpecStats, StepRecord
from hybridsd.sampling import sampling_params
from hybridsd.target import (Target, alibi, check_options, context_length, exact_rows, sliding_window,
                             target_for)
from hybridsd.verify import sample_token, verify_chain, verify_tree


@dataclass
class GenerateResult:
    """New tokens (EOS included when it stopped the sequence) and exact counters."""

    tokens: list[int]
    stats: SpecStats

    def __repr__(self) -> str:
        head = ", ".join(map(str, self.tokens[:8])) + (", ..." if len(self.tokens) > 8 else "")
        return f"GenerateResult(tokens=[{head}] ({len(self.tokens)} tokens), stats={self.stats!r})"


def _vocab_size(model: torch.nn.Module) -> int:
    """Rows of the model's input embedding: the token ids it can take."""
    return int(model.get_input_embeddings().weight.shape[0])


def _prompt_ids(input_ids, vocab: int) -> torch.Tensor:
    """The prompt as a 1-D int64 CPU tensor; rejects batches, empty prompts, non-integer and out-of-vocabulary ids.

    ``input_ids`` may also be what a tokenizer returns (a ``BatchEncoding`` or dict with ``"input_ids"``); the
    padding its ``"attention_mask"`` marks with 0 (left or right of the tokens) is dropped.
    """
    mask = None
    if isinstance(input_ids, Mapping):  # BatchEncoding is a Mapping (UserDict)
        if "input_ids" not in input_ids:
            raise ValueError(f"input_ids is a mapping without an 'input_ids' entry (keys: {sorted(input_ids)})")
        input_ids, mask = input_ids["input_ids"], input_ids.get("attention_mask")
    try:
        ids = torch.as_tensor(input_ids)
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError(f"input_ids must be token ids (a tensor, array or list of ints), got "
                        f"{type(input_ids).__name__}: {e}") from None
    if ids.numel() == 0:
        raise ValueError("empty prompt: input_ids has no tokens")
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"input_ids must be integer token ids, got dtype {ids.dtype}")
    if ids.dtype == torch.uint64:  # ids >= 2**63 would wrap to negative int64 ones: report them as given
        big = next((i for i in ids.to("cpu").reshape(-1).tolist() if i >= vocab), None)
        if big is not None and big >= 2**63:
            raise ValueError(f"input_ids holds token id {big}, outside the model's vocabulary [0, {vocab})")
    ids = ids.to("cpu", torch.long)  # host copy: checked here, moved to the model's device by the caller
    if ids.ndim == 2:
        if ids.shape[0] != 1:
            raise ValueError(f"generate runs one sequence at a time; got a batch of {ids.shape[0]}")
        ids = ids[0]
    if ids.ndim != 1:
        raise ValueError(f"input_ids must be 1-D or [1, T], got shape {tuple(ids.shape)}")
    if mask is not None:
        ids = ids[_unpadded(mask, ids.numel())]
    bad = ids[(ids < 0) | (ids >= vocab)]
    if bad.numel():
        raise ValueError(f"input_ids holds token id {int(bad[0])}, outside the model's vocabulary [0, {vocab})")
    return ids


def _unpadded(mask, length: int) -> torch.Tensor:
    """``[length]`` bool: the tokens a tokenizer's ``attention_mask`` (``[length]`` or ``[1, length]`` of 0/1) keeps,
    one run of them; a ValueError naming ``attention_mask`` otherwise."""
    try:
        keep = torch.as_tensor(mask).to("cpu")
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError(f"attention_mask must be a tensor, array or list of 0/1, got {type(mask).__name__}: {e}") \
            from None
    if keep.ndim == 2 and keep.shape[0] == 1:
        keep = keep[0]
    if keep.shape != (length,):
        raise ValueError(f"attention_mask must have the shape of input_ids ({length} tokens), got {tuple(keep.shape)}")
    if not ((keep == 0) | (keep == 1)).all():
        raise ValueError(f"attention_mask must hold 0 (padding) and 1 (token) only, got {keep.unique().tolist()}")
    keep = keep != 0  # [length]
    where = keep.nonzero()[:, 0]  # [kept]
    if where.numel() == 0:
        raise ValueError("empty prompt: attention_mask masks every token of input_ids")
    if int(where[-1] - where[0]) + 1 != where.numel():
        raise ValueError(f"attention_mask must mark one run of tokens, padding only before or after it; it masks "
                         f"tokens between positions {int(where[0])} and {int(where[-1])}")
    return keep


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
    warnings.warn(msg, stacklevel=4)  # generate's caller (generate is wrapped by inference_mode)


def _eos_set(model: torch.nn.Module, eos_token_id, vocab: int) -> frozenset[int]:
    name = "eos_token_id"
    if eos_token_id is None:
        gen_cfg = getattr(model, "generation_config", None)
        eos_token_id = getattr(gen_cfg, "eos_token_id", None)
        name = "the model's generation_config.eos_token_id (pass eos_token_id to override)"
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if isinstance(eos_token_id, numbers.Integral) else eos_token_id
    if isinstance(ids, torch.Tensor | np.ndarray):  # any shape, integer dtype
        integer = not ids.dtype.is_floating_point and not ids.dtype.is_complex and ids.dtype != torch.bool \
            if isinstance(ids, torch.Tensor) else np.issubdtype(ids.dtype, np.integer)
        if not integer:
            raise TypeError(f"{name} must be a token id or a sequence of them, got a {ids.dtype} array")
        ids = [int(e) for e in ids.reshape(-1).tolist()]
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence | torch.Tensor | np.ndarray) or any(
            isinstance(e, bool) or not isinstance(e, numbers.Integral | torch.Tensor | np.integer)
            or isinstance(e, torch.Tensor) and (e.numel() != 1 or e.dtype.is_floating_point or e.dtype.is_complex
                                                or e.dtype == torch.bool) for e in ids):
        raise TypeError(f"{name} must be a token id or a sequence of them, got {eos_token_id!r}")
    for e in ids:
        if not 0 <= int(e) < vocab:
            raise ValueError(f"{name}: token id {int(e)} is outside the model's vocabulary [0, {vocab})")
    return frozenset(int(e) for e in ids)


def _check_number(name: str, value, *, integer: bool = False, low: float = 0.0) -> None:
    """``value`` must be a finite real (an int with ``integer``) >= ``low``: TypeError / ValueError naming it."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(value) or value < low:
        raise ValueError(f"{name} must be a finite number >= {low:g}, got {value!r}")


def _check_drafter(drafter: Drafter, model: torch.nn.Module) -> tuple[int, ...]:
    """The drafter's declared ``max_tokens`` and ``max_branches`` (ints >= 1) and ``hidden_layers`` checked, each error
    naming the drafter; returns ``hidden_layers`` as a tuple of ints, each an index into the model's HF
    ``hidden_states`` (``-(L + 1) .. L`` for a model of L layers: 0 the embeddings, L or -1 the final-normed output)."""
    name = type(drafter).__name__
    check_count(f"{name}.max_tokens", drafter.max_tokens)
    check_count(f"{name}.max_branches", drafter.max_branches)
    layers = drafter.hidden_layers
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence) or any(
            isinstance(i, bool) or not isinstance(i, numbers.Integral) for i in layers):
        raise TypeError(f"{name}.hidden_layers must be a tuple of ints (indices into the model's hidden_states), "
                        f"got {layers!r}")
    L = getattr(model.config, "num_hidden_layers", None)
    bad = [i for i in layers if L is not None and not -(L + 1) <= i <= L]
    if bad:
        raise ValueError(f"{name}.hidden_layers holds {bad[0]}, but the model has {L} layers: its hidden_states are "
                         f"indexed {-(L + 1)}..{L} (0: the embeddings, {L} or -1: the final-normed output)")
    return tuple(int(i) for i in layers)


def _tree_layout(lengths: Sequence[int], start: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Positions ``[q]``, visibility ``[q, q]`` and row offsets of chains laid side by side after one root token."""
    parents, offsets = [], []
    for k in lengths:
        offsets.append(1 + len(parents))
        parents += [-1] + list(range(len(parents), len(parents) + k - 1))
    positions, visible = layout(parents, start)
    return positions, visible, offsets


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    input_ids,
    drafter: Drafter | None = None,
    max_new_tokens: int = 256,
    temperature: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    seed: int | None = None,
    cuda_graphs: bool | None = None,
    compile: bool | str = False,
    attention: str | None = None,
    on_double_bos: str = "warn",
    exact: bool | int = False,
    do_sample: bool | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
) -> GenerateResult:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids`` with speculative decoding.

    Greedy output equals plain greedy decoding token for token; sampled output is distributed as plain
    sampling with the same settings, and ``seed`` makes a run reproducible. Sampling is on with
    ``do_sample=True`` (``temperature`` defaults to 1; 0 is an error), or with ``do_sample`` left None and
    ``temperature > 0`` (vLLM's rule; HF's ``generate`` samples only with ``do_sample=True``);
    ``do_sample=False`` is greedy whatever the temperature, and so is a temperature below 1e-5 (as vLLM).
    ``top_k`` (0: off)
    and ``top_p`` (1: off) restrict each sampled token as HF's logits warpers do (temperature, then top-k,
    then top-p), and drafts are verified against that warped distribution. ``eos_token_id`` (default: the model's
    generation config) stops the sequence after that token. ``drafter=None`` decodes
    one token per target pass with the same engine (the baseline). ``cuda_graphs``
    (default None: on for CUDA models; True on another device is an error) replays each verification block size
    as a CUDA graph;
    ``compile`` runs those steps through ``torch.compile`` (slow to start, for long runs; a string names
    the mode, e.g. ``"max-autotune-no-cudagraphs"``, or ``"auto"``: that mode for 1-token steps, the default
    mode for verify blocks). ``attention`` names the Llama-family decoder's
    attention kernel (``"split"`` or ``"sdpa"``, see :mod:`hybridsd.attention`; default: the fastest available).
    A prompt that starts with two BOS tokens (the model config's ``bos_token_id``) is
    reported by ``on_double_bos``: ``"warn"``, ``"raise"`` (ValueError) or ``"ignore"``.

    ``input_ids`` is a 1-D or ``[1, T]`` integer tensor, array or list, or what a tokenizer returns (a
    ``BatchEncoding`` or dict with ``"input_ids"``, e.g. from ``apply_chat_template(..., return_tensors="pt")``;
    padding its ``"attention_mask"`` marks with 0, before or after the tokens, is dropped); on any device: it is
    copied to the model's device. Every argument is checked before any work: a wrong type
    raises ``TypeError``, a wrong value (a token id outside the vocabulary, a negative or non-finite
    temperature, a drafter made for another model) ``ValueError``, each naming the argument.

    ``exact`` (Llama-family decoder only): every target pass after the prefill runs as a block of one fixed
    size (True: 16 rows, or that many rows; it must hold the drafter's tokens plus one) with the same kernels,
    so every position's logits are bit-identical however it is verified, and greedy output equals plain
    greedy output in any dtype (bf16 too) for runs with the same ``exact``, prompt length and
    ``max_new_tokens``. It costs a 16-row step for every decode step.
    """
    vocab = _vocab_size(model)
    ids = _prompt_ids(input_ids, vocab)
    _check_number("max_new_tokens", max_new_tokens, integer=True, low=1)
    temperature, top_k, top_p = sampling_params(do_sample, temperature, top_k, top_p)  # temperature 0: greedy
    if seed is not None:
        _check_number("seed", seed, integer=True, low=-(2**63))
        if seed >= 2**64:
            raise ValueError(f"seed must lie in [-2**63, 2**64), got {seed}")
    layers = ()  # the hidden states the drafter observes
    if drafter is not None:
        if not isinstance(drafter, Drafter):
            raise TypeError(f"drafter must be a hybridsd Drafter or None, got {type(drafter).__name__}")
        drafter.check_target(model)
        layers = _check_drafter(drafter, model)
    limit = context_length(model)
    if limit is not None and ids.numel() + max_new_tokens > limit:
        raise ValueError(
            f"prompt ({ids.numel()} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
            f"context length ({limit})"
        )
    window = sliding_window(model)
    if window is not None and ids.numel() + max_new_tokens - 1 > window:  # the last token is never fed
        raise ValueError(
            f"prompt ({ids.numel()} tokens) + max_new_tokens ({max_new_tokens}) would feed the model positions past "
            f"its sliding attention window ({window}), which hybridsd does not implement"
        )
    _check_bos(model, ids, on_double_bos)
    eos = _eos_set(model, eos_token_id, vocab)
    device = next(model.parameters()).device
    check_options(device, cuda_graphs, compile, attention)
    draft_rows = drafter.max_tokens if drafter is not None else 0
    headroom = draft_rows + TREE_SIZES if drafter is not None else 0  # tree blocks may be padded
    graphs = device.type == "cuda" if cuda_graphs is None else cuda_graphs
    branches = drafter.max_branches if drafter is not None else 1
    rows = exact_rows(exact, draft_rows, branches)  # exact mode: the span may not depend on the drafter
    if branches > 1 and alibi(model.config) is not None:
        raise ValueError(f"{type(drafter).__name__} proposes draft trees (max_branches {branches}), but model type "
                         f"{model.config.model_type!r} adds ALiBi biases by cache slot, so tree tokens would be "
                         "verified at the wrong distances; use a chain drafter")
    target = target_for(model, ids.numel() + max_new_tokens + (rows or headroom + 1), cuda_graphs=graphs,
                        compile=compile, attention=attention, exact=rows)
    generator = None
    if temperature > 0:
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed) if seed is not None else int(torch.randint(2**62, ()).item()))

    stats = SpecStats()
    prompt = ids.to(device)
    logits, hidden = target.forward(prompt, 0, hidden_layers=layers, last_logits_only=True)
    first = sample_token(logits[-1], temperature, generator, top_k, top_p)  # [1]
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
        tree = None
        if drafter is not None and budget > 0:
            request = ProposeRequest(context[: start + 1], budget, device, temperature, generator, top_k, top_p)
            tree = _proposal(drafter, request, vocab, draft_rows)
            tree = tree.clip(budget) if tree is not None else None
        node, new, new_dev, committed = _verify_step(target, last, start, tree, layers, temperature, generator,
                                                     top_k, top_p)
        n = len(new) - 1
        last = new_dev[-1:]  # [1] on device
        kept = next((i + 1 for i, t in enumerate(new) if t in eos), len(new))  # EOS ends the sequence
        out.extend(new[:kept])
        context[start + 1 : start + 1 + kept] = new[:kept]
        accepted = min(n, kept)
        stats.record_step(StepRecord(
            proposed=tuple(dict.fromkeys(tree.sources)) if tree is not None else (),
            drafted=tree.reach(node) if tree is not None else 0,
            accepted=accepted,
            emitted=kept,
            source=tree.sources[tree.path(node)[accepted - 1]] if accepted else None,  # EOS may cut the path
            tree_tokens=len(tree) if tree is not None else 0,
        ))
        if drafter is not None:
            drafter.observe(committed, new_dev)
        start += n + 1
    return GenerateResult(out, stats)


TOKEN_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)  # what the embedding takes as ids


def _proposal(drafter: Drafter, request: ProposeRequest, vocab: int, max_tokens: int) -> DraftTree | None:
    """``drafter``'s proposal as one tree (None: no draft), its ids int64. Errors name the drafter: a TypeError if
    it is not a list of :class:`Draft` chains or a :class:`DraftTree`, if its token ids are not integers or its draft
    probabilities not floats (dtype checks), a ValueError if it has more nodes than the drafter's ``max_tokens`` (which
    sized the KV cache), if ids or probabilities are not on the model's device, if the probabilities are not
    ``[n, vocab]``, or, for host tensors (every drafter's on a CPU model), if an id lies outside the vocabulary
    ``[0, vocab)`` or a row of probabilities the verifier samples against is not a distribution (finite, >= 0,
    summing to 1). No check syncs with an accelerator: ids and
    probabilities on one (every drafter's on a CUDA model) are not value-checked, as that would read them back every
    step; an id out of range fails in the target's embedding (a device-side assert on CUDA)."""
    parts = drafter.propose(request)
    name = type(drafter).__name__
    if isinstance(parts, Draft | DraftTree):
        parts = [parts]
    elif parts is not None and (not isinstance(parts, list | tuple)
                                or not all(isinstance(p, Draft | DraftTree) for p in parts)):
        what = type(parts).__name__
        if isinstance(parts, list | tuple):
            what += " holding a " + type(next(p for p in parts if not isinstance(p, Draft | DraftTree))).__name__
        raise TypeError(f"{name}.propose must return a list of Draft chains or one DraftTree, got a {what}")
    for part in parts or ():
        tokens = part.tokens  # [n]
        dtype = tokens.dtype
        if dtype not in TOKEN_DTYPES:
            raise TypeError(f"{name}.propose returned draft tokens of dtype {dtype}; "
                            "token ids must be an integer tensor (int64)")
        if tokens.device != request.device:
            raise ValueError(f"{name}.propose returned draft tokens on {tokens.device}; the model "
                             f"is on {request.device} (ProposeRequest.device)")
        if part.probs is not None:
            _check_probs(name, part, vocab, request.device, values=request.temperature > 0)
        if tokens.device.type == "cpu" and tokens.numel():  # host ids: checked without a device sync
            low, high = torch.aminmax(tokens)  # compared as Python ints: uint8 ids would wrap a bound >= 256
            if int(low) < 0 or int(high) >= vocab:
                ids = tokens.long()  # [n]
                i = int(((ids < 0) | (ids >= vocab)).nonzero()[0, 0])
                source = part.source if isinstance(part, Draft) else part.sources[i]
                raise ValueError(f"{name}.propose returned draft token id {int(tokens[i])} "
                                 f"(source {source!r}), outside the model's vocabulary [0, {vocab})")
    tree = DraftTree.join(parts)
    if tree is not None and len(tree) > max_tokens:
        raise ValueError(f"{name}.propose returned {len(tree)} draft tokens, more than its max_tokens ({max_tokens}), "
                         "which sized the KV cache")
    if tree is not None and tree.tokens.dtype != torch.int64:  # narrower ids: the verifier indexes with them
        tree = replace(tree, tokens=tree.tokens.long())
    return tree


def _check_probs(name: str, part: Draft | DraftTree, vocab: int, device: torch.device, values: bool) -> None:
    """A proposal's draft probabilities (see :func:`_proposal`): one float row of ``vocab`` per node, on ``device``,
    and, with ``values`` (sampling, where the verifier reads them) on the host, a distribution in every row the
    verifier samples against (a sum within 1e-2 of 1: rows rounded to bf16 pass, and the verifier normalises them;
    logits do not)."""
    probs = part.probs  # [n, V]
    if not probs.dtype.is_floating_point:
        raise TypeError(f"{name}.propose returned draft probabilities of dtype {probs.dtype}; they must be floats")
    if probs.ndim != 2 or probs.shape[1] != vocab:
        raise ValueError(f"{name}.propose returned draft probabilities of shape {tuple(probs.shape)}; they must be "
                         f"[{len(part)}, {vocab}]: one row over the model's vocabulary per draft token")
    if probs.device != device:
        raise ValueError(f"{name}.propose returned draft probabilities on {probs.device}; the model is on {device}")
    if values and device.type == "cpu":  # host rows: checked without a device sync
        rows = probs if isinstance(part, Draft) else probs[torch.tensor(part.sampled, dtype=torch.bool)]  # [m, V]
        sums = rows.sum(-1, dtype=torch.float64)  # [m]
        if not (bool(torch.isfinite(rows).all()) and bool((rows >= 0).all())
                and bool(((sums - 1).abs() <= 1e-2).all())):
            raise ValueError(f"{name}.propose returned draft probabilities that are not distributions (each row "
                             "must be finite, >= 0 and sum to 1)")


TREE_SIZES = 16  # with CUDA graphs or compile, a tree block of more rows is padded to a multiple of this (few graphs)


def _pad_block(feed, positions, visible, start):
    """A tree block padded to a multiple of ``TREE_SIZES`` rows; a padding row sees the committed prefix and
    itself only, so the real rows' outputs are unchanged (its cache slot lies past the block, free)."""
    q = feed.shape[0]
    pad = -q % TREE_SIZES
    feed = torch.cat([feed, feed.new_zeros(pad)])  # [q + pad]
    positions = np.concatenate([positions, np.full(pad, start)])
    visible = np.pad(visible, (0, pad)) | np.eye(q + pad, dtype=bool)
    return feed, positions, visible


def _tree_block(target: Target, feed, tree: DraftTree, start: int):
    """The target's block for ``feed`` = ``[root, tree tokens]`` at ``start``: ``(tokens, positions, visible)``,
    padded (:func:`_pad_block`) when the target runs graphs or compiled steps (few graphs and compilations)."""
    positions, visible = tree.layout(start)
    if (target.cuda_graphs or target.compiled) and feed.shape[0] > TREE_SIZES and not target.exact:
        return _pad_block(feed, positions, visible, start)
    return feed, positions, visible


def _verify_step(target: Target, last, start, tree: DraftTree | None, layers, temperature, generator, top_k=None,
                 top_p=None):
    """One target pass over the newest token and the draft tree; commits the accepted path's cache.

    Returns ``(node, new_tokens, new_tokens_on_device, committed_hidden)``: ``node`` is the last accepted
    node (-1 when none); ``new_tokens`` (host list and ``[n + 1]`` device tensor) are the n accepted draft
    tokens and the target's own token; ``committed_hidden`` (``[n + 1, ...]`` or None) are the target
    states at the committed positions (a copy: graph outputs are reused).
    """
    if tree is None:
        logits, hidden = target.forward(last, start, hidden_layers=layers)
        tok = sample_token(logits[0], temperature, generator, top_k, top_p)  # [1]
        committed = None if hidden is None else hidden.clone()
        return -1, [int(tok.item())], tok, committed  # host sync: the step's token
    dev = target.device
    feed = torch.cat([last, tree.tokens])  # [1 + n]
    if tree.is_chain() and len(set(tree.sampled)) == 1:  # a chain: its rows are already [root, draft...]
        logits, hidden = target.forward(feed, start, hidden_layers=layers)
        n, toks = verify_chain(tree.tokens, tree.probs if tree.sampled[0] else None, logits, temperature, generator,
                               top_k, top_p)
        packed = torch.cat([n.view(1), toks]).tolist()  # host sync: the step's one read
        n = packed[0]
        return n - 1, packed[1 : n + 2], toks[: n + 1], None if hidden is None else hidden[: n + 1].clone()
    q = 1 + len(tree)
    feed, positions, visible = _tree_block(target, feed, tree, start)
    logits, hidden = target.forward(feed, start, positions=positions, visible=visible, hidden_layers=layers)
    res = verify_tree(tree.tokens, tree.parents, torch.as_tensor(tree.ancestors).to(dev, non_blocking=True),
                      torch.as_tensor(tree.depths).to(dev, non_blocking=True), tree.probs, tree.sampled,
                      logits[:q], temperature, generator, top_k, top_p)  # [2]
    node, nxt, *tokens = torch.cat([res, tree.tokens]).tolist()  # host sync: the step's one read
    path = tree.path(node)
    new = [tokens[i] for i in path] + [nxt]
    rows = [1 + i for i in path]
    index = torch.tensor([0] + rows + new).to(dev, non_blocking=True)  # [1 + 2n + 1]: one copy for what follows
    n = len(rows)
    if rows != list(range(1, n + 1)):  # bring the accepted path's cache entries next to the root
        target.kv.move(index[1 : 1 + n] + start, torch.arange(start + 1, start + 1 + n, device=dev))
    committed = None
    if hidden is not None:
        committed = hidden.index_select(0, index[: 1 + n])  # [n+1, len*H]
    return node, new, index[1 + n :], committed
