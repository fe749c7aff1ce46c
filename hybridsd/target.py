"""The target adapter: any HF causal LM run over a slot-addressed static KV cache.

Every step gets explicit position ids and an attention mask that we build (causal for
chains, ancestor-only for draft trees), and writes keys/values at the slots we choose.
``model(...)`` sees the mask as a 4-D additive one and a cache object whose ``update``
writes at those slots; nothing depends on the transformers cache API beyond
``Cache.update(k, v, layer_idx, ...)``, which is the same in transformers 5.17 and 5.2x.

For the Llama family (``DECODER_TYPES``) the step is our own :class:`~hybridsd.decoder.Decoder`
on the model's weights (fused projections, grouped attention, one compiled function per
layer shape); any other causal LM runs as ``model(...)``.
"""

from __future__ import annotations

import inspect
import weakref

import numpy as np
import torch
from transformers.cache_utils import Cache

from hybridsd.attention import KERNELS
from hybridsd.cuda_graph import capture
from hybridsd.decoder import Decoder, compile_by_block, weights_signature
from hybridsd.kv_cache import StaticKVCache, bucket

EXACT_ROWS = 16  # exact=True: the rows of every step after the prefill
EXACT_BRANCHES = 2  # draft branches an exact-mode step verifies at most (the attention's key views)


class _SlotCache(Cache):
    """HF-facing view of a :class:`StaticKVCache`: ``update`` writes at ``self.slots`` and returns the
    first ``self.kv_len`` slots (what the step attends over)."""

    def __init__(self, kv: StaticKVCache) -> None:
        super().__init__(layers=[])
        self.kv = kv
        self.slots: torch.Tensor | None = None  # [q] slots the current forward writes
        self.kv_len = kv.capacity

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):  # noqa: D401 - HF signature
        k, v = self.kv.write(layer_idx, self.slots, key_states, value_states)  # [1, Hkv, S, D]
        return k[:, :, : self.kv_len], v[:, :, : self.kv_len]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.kv.length

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:
        return self.kv.capacity

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.kv_len, 0  # a causal mask HF builds from a 2-D one spans the slots update returns

    def get_query_offset(self, layer_idx: int = 0) -> torch.Tensor:
        return self.slots[0]  # ... and counts the block's tokens from its first slot (a device scalar: no sync)

    def __len__(self) -> int:
        return self.kv.num_layers


def cache_kwarg(model: torch.nn.Module) -> str:
    """Name of the forward argument that takes the cache (``cache`` from transformers 5.2x on)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


DECODER_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def _has_decoder_layout(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a family :class:`~hybridsd.decoder.Decoder` runs (see ``DECODER_TYPES``)."""
    base = getattr(model, "model", None)
    return (getattr(model.config, "model_type", None) in DECODER_TYPES and getattr(model, "lm_head", None) is not None
            and all(hasattr(base, a) for a in ("embed_tokens", "rotary_emb", "layers", "norm")))


def sliding_window(model: torch.nn.Module) -> int | None:
    """The attention window of the model's sliding-window layers, if it has any."""
    cfg = model.config
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if window is None or (types is not None and "sliding_attention" not in types):
        return None
    if types is None and getattr(cfg, "use_sliding_window", True) is False:
        return None
    return int(window)


def alibi(cfg) -> str | None:
    """How a model of config ``cfg`` adds ALiBi biases in attention, None when it has none. Its biases follow the
    keys' cache slots rather than the positions the target passes, so chains are exact and draft trees are not:
    ``"slots"`` when the model scores keys by slot itself (MPT), ``"mask"`` when HF builds the biases and the causal
    mask from a 2-D attention mask (BLOOM, Falcon with ``alibi``), which the target gives over the cache's slots."""
    kind = getattr(cfg, "model_type", None)
    if kind == "bloom" or (kind == "falcon" and getattr(cfg, "alibi", False)):
        return "mask"
    return "slots" if kind == "mpt" else None


def default_attention(device: torch.device) -> str:
    """``"split"`` on CUDA when Triton is installed, else ``"sdpa"``."""
    if device.type != "cuda":
        return "sdpa"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "sdpa"
    return "split"


def context_length(model: torch.nn.Module) -> int | None:
    """The longest sequence the model's config allows (``None`` when it does not say)."""
    cfg = model.config
    return getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)


COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "auto")  # the compile modes besides True and False
GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that capture CUDA graphs themselves


def check_options(device: torch.device, cuda_graphs, compile, attention) -> None:
    """``TypeError`` / ``ValueError`` naming the first of a target's options that is not one: ``cuda_graphs``
    (None or a bool; True on CUDA only), ``compile`` (a bool or one of :data:`COMPILE_MODES`), ``attention`` (None
    or one of :data:`~hybridsd.attention.KERNELS`; ``"split"`` on CUDA only)."""
    if cuda_graphs is not None and not isinstance(cuda_graphs, bool):
        raise TypeError(f"cuda_graphs must be None, True or False, got {cuda_graphs!r}")
    if compile in GRAPH_MODES:
        raise ValueError(f"compile mode {compile!r} captures its own CUDA graphs; use a no-cudagraphs mode")
    if not isinstance(compile, bool) and compile not in COMPILE_MODES:
        raise ValueError(f"compile must be True, False or one of {COMPILE_MODES}, got {compile!r}")
    if attention is not None and attention not in KERNELS:
        raise ValueError(f"attention must be one of {KERNELS}, got {attention!r}")
    if cuda_graphs and torch.device(device).type != "cuda":
        raise ValueError(f"cuda_graphs=True needs a CUDA model, but the model is on {torch.device(device).type}; pass "
                         "None (graphs on CUDA only) or False")
    if attention == "split" and torch.device(device).type != "cuda":
        raise ValueError("attention='split' is a CUDA kernel; use 'sdpa' on other devices")


def exact_rows(exact: bool | int, draft_rows: int = 0, branches: int = 1) -> int:
    """The rows of every exact-mode step for ``exact`` (True: :data:`EXACT_ROWS`; an int: that many; False: 0,
    exact mode off), checked against ``draft_rows``, the most draft tokens a step verifies (plus the newest), and
    ``branches``, the most root-to-leaf paths of a draft (at most :data:`EXACT_BRANCHES`)."""
    if isinstance(exact, bool):
        rows = EXACT_ROWS if exact else 0
    elif isinstance(exact, (int, np.integer)):
        if exact < 1:
            raise ValueError(f"exact must be True, False or a number of rows >= 1, got {exact}")
        rows = int(exact)
    else:
        raise TypeError(f"exact must be True, False or a number of rows, got {type(exact).__name__}")
    if rows and 1 + draft_rows > rows:
        raise ValueError(f"exact={exact!r} runs every step as a block of {rows} rows, but the drafter verifies up "
                         f"to {draft_rows} draft tokens plus the newest one; pass exact={1 + draft_rows} or more")
    if rows and branches > EXACT_BRANCHES:
        raise ValueError(f"exact mode verifies at most {EXACT_BRANCHES} draft branches per step, but the drafter "
                         f"proposes up to {branches}: use a chain drafter, a hybrid tree of two chains, or a static "
                         f"tree of at most {EXACT_BRANCHES} leaves")
    return rows


def exact_layout(start: int, positions: np.ndarray | None, visible: np.ndarray | None, q: int, rows: int,
                 branches: int = EXACT_BRANCHES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A block of ``q`` tokens at slots ``start ..`` laid out for exact mode: ``(positions [rows], branch [rows],
    window [branches, rows])``. Rows past ``q`` are padding (position ``start``, branch 0). Token ``t`` of branch
    ``b`` reads the key of position ``start + i`` from slot ``window[b, i]`` (its ancestor at that position; the
    slot itself where it has none), so it sees its keys where a plain decode step sees them. Each token's
    visible block tokens must hold one token per position ``start .. its own`` (a chain or a tree of chains)."""
    pos = np.full(rows, start, dtype=np.int64)
    branch = np.zeros(rows, dtype=np.int64)
    window = start + np.tile(np.arange(rows, dtype=np.int64), (branches, 1))  # [NB, rows]
    if visible is None and positions is None:  # a chain at its own slots
        pos[:q] = start + np.arange(q)
        return pos, branch, window
    pos[:q] = start + np.arange(q) if positions is None else positions
    vis = np.tril(np.ones((q, q), dtype=bool)) if visible is None else np.asarray(visible, dtype=bool)
    paths: list[np.ndarray] = []  # slots by position offset, one per branch
    for t in sorted(range(q), key=lambda t: -pos[t]):  # deepest first: each branch's path comes from its leaf
        seen = np.flatnonzero(vis[t])
        offset = pos[seen] - start
        if not vis[t, t] or sorted(offset.tolist()) != list(range(pos[t] - start + 1)):
            raise ValueError(f"exact mode: block token {t} must see exactly one token at each position "
                             f"{start}..{pos[t]}, itself included")
        path = start + seen[np.argsort(offset)]
        b = next((i for i, p in enumerate(paths) if np.array_equal(p[: len(path)], path)), len(paths))
        if b == len(paths):
            if b == branches:
                raise ValueError(f"exact mode verifies at most {branches} draft branches per step")
            paths.append(path)
        branch[t] = b
    for b, path in enumerate(paths):
        window[b, : len(path)] = path
    return pos, branch, window


def view_region(start: int, window: np.ndarray) -> np.ndarray:
    """The slots ``[lo, hi)`` where an exact-mode block's key views (``window`` ``[NB, rows]`` of
    :func:`exact_layout`, the block at slots ``start ..``) leave slot order; ``[0, 0]`` where none does (a decode
    step, a chain), so that the split kernel reads every key tile in place."""
    differ = np.flatnonzero((window != start + np.arange(window.shape[1])).any(0))  # block columns
    return np.array([start + differ[0], start + differ[-1] + 1] if differ.size else [0, 0], dtype=np.int64)


def _chain(start: int, q: int, positions: np.ndarray | None, visible: np.ndarray | None) -> bool:
    """Whether a block of ``q`` tokens at slots ``start ..`` is a chain there: each token at its slot's position,
    seeing the block's tokens up to itself (``Target.forward``'s ``positions`` and ``visible``, None: the default)."""
    return ((positions is None or np.array_equal(positions, np.arange(start, start + q)))
            and (visible is None or np.array_equal(visible, np.tril(np.ones((q, q), dtype=bool)))))


class Target:
    """One HF causal LM with its KV cache; ``forward`` runs a block of tokens at consecutive slots.

    With ``cuda_graphs`` (CUDA only), each block size after prefill is captured once as a
    CUDA graph and replayed: the step then costs one graph launch plus small input copies.
    With ``compile`` (True, or a ``torch.compile`` mode such as ``"max-autotune-no-cudagraphs"``, or ``"auto"``:
    that mode for 1-token steps and the default mode for blocks, see :func:`~hybridsd.decoder.compile_modes`),
    the forward for blocks after prefill goes through ``torch.compile`` (static shapes: per block size and KV
    bucket; default mode unless named; never a mode with CUDA graphs: the CUDA graphs are ours).
    ``decoder`` (default: when the family allows) runs our :class:`~hybridsd.decoder.Decoder` instead of
    ``model(...)``; it makes the model's q/k/v and gate/up weights views of fused tensors.
    ``attention``: the decoder's attention kernel (:mod:`hybridsd.attention`), ``"split"`` (CUDA, needs
    Triton) or ``"sdpa"``; default ``"split"`` where it can run.

    ``exact`` (rows, 0 = off; the fused decoder only): every step after the prefill is a block of exactly
    ``exact`` rows (padded) over the same key span (the capacity rounded up to an attention bucket), with every
    token's keys read in the order of a plain decode step (:func:`exact_layout`); so the same compiled code and
    kernels run every step, and each position's logits and hidden states are bit-identical whether it is decoded
    alone or verified in any chain or tree (of up to :data:`EXACT_BRANCHES` branches) that fits in ``exact`` rows.
    """

    def __init__(self, model: torch.nn.Module, capacity: int, *, cuda_graphs: bool = False,
                 compile: bool | str = False, decoder: bool | None = None, attention: str | None = None,
                 exact: int = 0) -> None:
        cfg = model.config
        self.slot_biases = alibi(cfg) is not None  # keys are scored by their slots: blocks must be chains
        self.slot_mask = alibi(cfg) == "mask"  # model(...) gets a 2-D mask over the slots (see _hf_forward)
        self.window = sliding_window(model)  # positions must stay below it: sliding attention is not implemented
        p = next(model.parameters())
        check_options(p.device, cuda_graphs, compile, attention)
        self.model = model
        self.device, self.dtype = p.device, p.dtype
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.exact = exact
        self.exact_span = bucket(capacity)  # the key span of every exact-mode step
        self.kv = StaticKVCache(cfg.num_hidden_layers, kv_heads, head_dim, self.exact_span if exact else capacity,
                                dtype=self.dtype, device=self.device)
        if decoder and not _has_decoder_layout(model):
            raise ValueError(f"decoder=True needs a model of type {DECODER_TYPES} with model.model."
                             f"{{embed_tokens, rotary_emb, layers, norm}} and lm_head")
        if compile:
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)  # q x buckets
        self._slot_ids = torch.arange(self.kv.capacity, device=self.device)  # [S]
        self._neg = torch.finfo(self.dtype).min
        self.cuda_graphs = bool(cuda_graphs)
        self.compiled = compile
        use_decoder = decoder if decoder is not None else _has_decoder_layout(model)
        self.attention = attention or default_attention(self.device)
        if exact and not use_decoder:
            raise ValueError(f"exact mode needs the fused decoder: a model of type {DECODER_TYPES}")
        self.decoder = Decoder(model, compile=compile, attention=self.attention) if use_decoder else None
        if self.decoder is None:  # model(...) with an HF-facing view of our cache
            self._cache, self._cache_kwarg = _SlotCache(self.kv), cache_kwarg(model)
            self._hf_steps = {one: f for one, (f,) in compile_by_block((self._hf_forward,), compile).items()}
        self._graphs: dict[tuple, _GraphedStep] = {}
        self.signature = weights_signature(model)  # the weights its graphs and fused layers read

    @property
    def capacity(self) -> int:
        return self.kv.capacity

    @torch.no_grad()
    def forward(
        self,
        tokens: torch.Tensor,
        start: int,
        *,
        positions: np.ndarray | None = None,
        visible: np.ndarray | None = None,
        hidden_layers: tuple[int, ...] = (),
        last_logits_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run ``tokens`` (``[q]``) written at slots ``start .. start+q-1``.

        ``positions`` (``[q]``, default ``start + arange(q)``) are the RoPE positions;
        ``visible`` (``[q, q]`` bool, default lower-triangular) says which tokens of the
        block each token attends to, besides all committed slots ``< start``.
        Returns logits ``[q, V]`` (``[1, V]`` with ``last_logits_only``) in fp32 and the
        hidden states named by ``hidden_layers`` concatenated, ``[q, len * H]``, or None; each index names one of the
        model's ``L + 1`` HF hidden states (``-(L + 1) .. L``), any other raises ``ValueError``.
        """
        L = self.kv.num_layers
        if any(not -(L + 1) <= i <= L for i in hidden_layers):
            raise ValueError(f"hidden_layers {hidden_layers} names a hidden state outside the model's "
                             f"{-(L + 1)}..{L} ({L} layers; 0: the embeddings, {L} or -1: the final-normed output)")
        q = int(tokens.shape[0])
        if start + q > self.capacity:
            raise ValueError(f"KV cache overflow: {start} + {q} tokens > capacity {self.capacity}")
        if self.window is not None and (start + q if positions is None else int(np.max(positions)) + 1) > self.window:
            raise ValueError(f"the model uses sliding-window attention (window {self.window}), which the target "
                             f"adapter does not implement; a token at position {self.window} or later would need it")
        if self.slot_biases and not _chain(start, q, positions, visible):
            raise ValueError(f"model type {self.model.config.model_type!r} adds ALiBi biases by cache slot, so a "
                             "draft tree (tokens at positions other than their slots, or seeing other tokens of the "
                             "block than those before them) would not be verified exactly")
        self.kv.length = start  # the committed sequence this block follows (what the HF view reports)
        if self.exact and not last_logits_only:
            return self._exact_forward(tokens, start, positions, visible, hidden_layers)
        # keys the step attends over: a bucket for graphs and compiled code (static shapes), else exact
        static = (self.cuda_graphs or self.compiled) and not last_logits_only
        kv_len = self.kv.span(start + q) if static else start + q
        if self.cuda_graphs and not last_logits_only:
            key = (q, hidden_layers, kv_len)
            if key not in self._graphs:
                run = lambda toks, packed: self._run_packed(toks, packed, kv_len, hidden_layers)  # noqa: E731
                self._graphs[key] = _GraphedStep(self, q, 1 + q + q * q, run, self._graphs)
            tril = np.tril(np.ones((q, q), dtype=np.int64)) if visible is None else visible
            pos = np.arange(start, start + q) if positions is None else positions
            return self._graphs[key](tokens, np.concatenate([[start], pos, np.ravel(tril)]))
        if positions is None:
            pos = torch.arange(start, start + q, device=self.device)
        else:
            pos = torch.as_tensor(positions, device=self.device) + 0
        allowed = self._allowed(start, q, visible, kv_len)
        return self._run(tokens, pos, self._slot_ids[start : start + q], allowed, kv_len, hidden_layers,
                         last_logits_only)

    def _run(self, tokens, pos, slots, allowed, kv_len, hidden_layers, last_logits_only=False, gather=None):
        """The forward on prepared tensors: ``[q]`` tokens, positions and slots; ``allowed`` ``[q, kv_len]``
        (which of the first ``kv_len`` slots each token attends to); ``gather``: exact mode's key order."""
        step = not last_logits_only  # prefill stays uncompiled (its length varies)
        if self.decoder is not None:
            L = len(self.decoder.weights)
            want = [i % (L + 1) for i in hidden_layers]
            return self.decoder(tokens, pos, slots, allowed, self.kv, kv_len, want, last_logits_only, compiled=step,
                                gather=gather)
        self._cache.slots = slots
        self._cache.kv_len = kv_len
        fwd = self._hf_steps[tokens.shape[0] == 1] if step else self._hf_forward
        return fwd(tokens, pos, allowed, hidden_layers, last_logits_only)

    def _hf_forward(self, tokens, pos, allowed, hidden_layers, last_logits_only):
        """``model(...)`` with our cache: logits ``[q or 1, V]`` fp32 and hidden states ``[q, len*H]`` or None."""
        q = tokens.shape[0]
        if self.slot_mask:
            # [1, kv_len] the slots the chain's last token attends to: the committed prefix and the block. HF builds
            # the ALiBi biases from it (by slot) and the causal mask (keys up to each token's slot, counted from the
            # block's first slot: _SlotCache.get_query_offset). A rejected draft's keys past the block are masked
            # (zeros here, and past every token's slot); those in the block are overwritten before attention reads them.
            mask = allowed[-1:].long()
        else:
            mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
            mask.masked_fill_(~allowed, self._neg)  # [q, kv_len] additive
            mask = mask.view(1, 1, *allowed.shape)
        out = self.model(
            input_ids=tokens.view(1, q),
            position_ids=pos.view(1, q),
            attention_mask=mask,
            use_cache=True,
            output_hidden_states=bool(hidden_layers),
            logits_to_keep=1 if last_logits_only else 0,
            **{self._cache_kwarg: self._cache},
        )
        logits = out.logits[0].float()  # [q, V]
        hidden = None
        if hidden_layers:
            hidden = torch.cat([out.hidden_states[i][0] for i in hidden_layers], dim=-1)  # [q, len*H]
        return logits, hidden

    def _allowed(self, start: int, q: int, visible: np.ndarray | None, kv_len: int) -> torch.Tensor:
        """``[q, kv_len]`` bool: which slots each token of the block attends to."""
        allowed = (self._slot_ids[:kv_len] < start).expand(q, -1).clone()  # [q, kv_len] committed prefix
        if visible is None:
            block = torch.ones(q, q, dtype=torch.bool, device=self.device).tril_()
        else:
            block = torch.as_tensor(visible, dtype=torch.bool).to(self.device, non_blocking=True)
        allowed[:, start : start + q] = block
        return allowed

    def _run_packed(self, tokens, packed, kv_len, hidden_layers):
        """``_run`` on ``packed`` = ``[start | positions [q] | visible [q*q]]`` (device), the mask made here."""
        q = tokens.shape[0]
        start, pos = packed[:1], packed[1 : 1 + q]  # [1], [q]
        block = packed[1 + q :].view(q, q) != 0  # [q, q]
        slots = start + self._slot_ids[:q]  # [q]
        allowed = (self._slot_ids[None, :kv_len] < start).expand(q, -1).clone()  # [q, kv_len]
        allowed.scatter_(1, slots[None, :].expand(q, q), block)
        return self._run(tokens, pos, slots, allowed, kv_len, hidden_layers)

    def _exact_forward(self, tokens, start, positions, visible, hidden_layers):
        """``forward`` in exact mode: the block padded to ``exact`` rows, over the span ``exact_span``."""
        q, rows, kv_len = int(tokens.shape[0]), self.exact, self.exact_span
        if q > rows:
            raise ValueError(f"exact mode runs blocks of {rows} rows; this step has {q} tokens")
        if start + rows > kv_len:
            raise ValueError(f"exact mode: a block of {rows} rows at slot {start} overflows the key span {kv_len}")
        pos, branch, window = exact_layout(start, positions, visible, q, rows)
        region = view_region(start, window)
        in_place = bool(region[0] == region[1])  # a decode step or a chain: every key in slot order (host numpy)
        values = np.concatenate([[start, q], region, pos, branch, window.ravel()])
        if self.cuda_graphs:
            key = ("exact", hidden_layers, kv_len, in_place)
            if key not in self._graphs:
                def run(toks, packed):
                    return self._run_exact(toks, packed, kv_len, hidden_layers, in_place)

                self._graphs[key] = _GraphedStep(self, rows, values.size, run, self._graphs)
            logits, hidden = self._graphs[key](tokens, values)
        else:
            padded = torch.cat([tokens, tokens[:1].expand(rows - q)])  # [rows]: padding repeats the first token
            logits, hidden = self._run_exact(padded, torch.as_tensor(values).to(self.device), kv_len, hidden_layers,
                                             in_place)
        return logits[:q], None if hidden is None else hidden[:q]

    def _run_exact(self, tokens, packed, kv_len, hidden_layers, in_place: bool):
        """``_run`` on ``rows`` tokens and ``packed`` = ``[start, live, region | positions | branch | window]``
        (device; :func:`exact_layout`, :func:`view_region`; ``live``: the real tokens): every row sees the keys of
        positions up to its own, in plain decoding's places. ``in_place``: the region is empty (a decode step, a
        chain), so the attention reads every key in slot order, with no key views."""
        rows = tokens.shape[0]
        start, live, region = packed[:1], packed[1:2], packed[2:4]  # [1], [1], [2]
        pos, branch = packed[4 : 4 + rows], packed[4 + rows : 4 + 2 * rows]  # [R], [R]
        window = packed[4 + 2 * rows :].view(-1, rows)  # [NB, R]
        slots = start + self._slot_ids[:rows]  # [R] padding rows write past the block; no real row reads them
        allowed = self._slot_ids[None, :kv_len] <= pos[:, None]  # [R, kv_len] by position (virtual order)
        # [4] views differ at slots block[0]..block[1]-1; real tokens; no real token sees slot start + live on
        block = torch.cat([region, live, start + live])
        if in_place:
            return self._run(tokens, pos, slots, allowed, kv_len, hidden_layers, gather=(None, None, block))
        key_slots = self._slot_ids[:kv_len].expand(window.shape[0], -1).clone()  # [NB, kv_len]
        key_slots.scatter_(1, slots[None, :].expand_as(window), window)
        return self._run(tokens, pos, slots, allowed, kv_len, hidden_layers, gather=(key_slots, branch, block))


class _GraphedStep:
    """A CUDA graph of a step on ``q`` tokens; inputs go through static buffers.

    ``run(tokens, packed)`` makes the attention mask and slots inside the graph from ``packed``, a few integers
    (start slot, positions, the block's layout), so a replay needs the tokens' device-to-device copy and one
    host-to-device copy from a pinned buffer (no host sync). The pinned buffer is rewritten by the next
    call, so calls must be ordered by a host sync in between (``generate`` reads every step's result).
    """

    def __init__(self, target: Target, q: int, size: int, run, siblings: dict) -> None:
        dev = target.device
        self.tokens = torch.zeros(q, dtype=torch.long, device=dev)  # [q] (past a shorter block: padding)
        self.host = torch.zeros(size, dtype=torch.long).pin_memory()
        self.packed = torch.zeros(size, dtype=torch.long, device=dev)
        self.host_view = self.host.numpy()
        self.step = lambda: run(self.tokens, self.packed)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.siblings = siblings  # the target's graphs: they share one memory pool

    def __call__(self, tokens, values: np.ndarray):
        """Replay on ``tokens`` (``[q]`` or fewer) and the packed host ``values``; the returned tensors are
        overwritten by the next replay."""
        self.host_view[:] = values
        self.tokens[: tokens.shape[0]].copy_(tokens)
        self.packed.copy_(self.host, non_blocking=True)
        if self.graph is None:
            share = next((g.graph for g in self.siblings.values() if g.graph is not None), None)
            self.graph, self.out = capture(self.step, self.tokens.device, share)
        self.graph.replay()
        return self.out


_TARGETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def target_for(model: torch.nn.Module, capacity: int, *, cuda_graphs: bool = False,
               compile: bool | str = False, attention: str | None = None, exact: int = 0) -> Target:
    """The model's :class:`Target`, reused across calls while its cache is large enough, its options are the same
    and none of the model's parameters has been replaced (:func:`~hybridsd.decoder.weights_signature`: its graphs
    and fused layers read them). In exact mode (``exact`` rows) its key span becomes ``capacity`` rounded up to an
    attention bucket, whatever the cache."""
    p = next(model.parameters())
    t = _TARGETS.get(model)
    need = bucket(capacity) if exact else capacity
    if (t is None or t.capacity < need or t.device != p.device or t.dtype != p.dtype
            or t.cuda_graphs != bool(cuda_graphs) or t.compiled != compile
            or t.attention != (attention or default_attention(p.device)) or t.exact != exact
            or t.signature != weights_signature(model)):
        t = Target(model, capacity, cuda_graphs=cuda_graphs, compile=compile, attention=attention, exact=exact)
        _TARGETS[model] = t
    t.exact_span = need
    t.kv.rewind(0)
    return t
