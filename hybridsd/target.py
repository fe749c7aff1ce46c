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
from hybridsd.decoder import Decoder, compile_by_block, compile_modes
from hybridsd.kv_cache import StaticKVCache


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

    def __len__(self) -> int:
        return self.kv.num_layers


def _cache_kwarg(model: torch.nn.Module) -> str:
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
    """

    def __init__(self, model: torch.nn.Module, capacity: int, *, cuda_graphs: bool = False,
                 compile: bool | str = False, decoder: bool | None = None, attention: str | None = None) -> None:
        cfg = model.config
        window = sliding_window(model)
        if window is not None and capacity > window:
            raise ValueError(f"the model uses sliding-window attention (window {window}); a cache of {capacity} "
                             f"tokens would need it, which the target adapter does not implement")
        p = next(model.parameters())
        self.model = model
        self.device, self.dtype = p.device, p.dtype
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.kv = StaticKVCache(cfg.num_hidden_layers, kv_heads, head_dim, capacity, dtype=self.dtype,
                                device=self.device)
        if decoder and not _has_decoder_layout(model):
            raise ValueError(f"decoder=True needs a model of type {DECODER_TYPES} with model.model."
                             f"{{embed_tokens, rotary_emb, layers, norm}} and lm_head")
        modes = compile_modes(compile)
        for mode in modes:
            if mode in ("reduce-overhead", "max-autotune"):  # the modes that capture CUDA graphs themselves
                raise ValueError(f"compile mode {mode!r} captures its own CUDA graphs; use a no-cudagraphs mode")
        if compile:
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)  # q x buckets
        self._slot_ids = torch.arange(self.kv.capacity, device=self.device)  # [S]
        self._neg = torch.finfo(self.dtype).min
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"
        self.compiled = compile
        use_decoder = decoder if decoder is not None else _has_decoder_layout(model)
        if attention is not None and attention not in KERNELS:
            raise ValueError(f"attention must be one of {KERNELS}, got {attention!r}")
        self.attention = attention or default_attention(self.device)
        self.decoder = Decoder(model, compile=compile, attention=self.attention) if use_decoder else None
        if self.decoder is None:  # model(...) with an HF-facing view of our cache
            self._cache, self._cache_kwarg = _SlotCache(self.kv), _cache_kwarg(model)
            self._hf_steps = {one: f for one, (f,) in compile_by_block((self._hf_forward,), compile).items()}
        self._graphs: dict[tuple, _GraphedStep] = {}

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
        hidden states named by ``hidden_layers`` concatenated, ``[q, len * H]``, or None.
        """
        q = int(tokens.shape[0])
        if start + q > self.capacity:
            raise ValueError(f"KV cache overflow: {start} + {q} tokens > capacity {self.capacity}")
        # keys the step attends over: a bucket for graphs and compiled code (static shapes), else exact
        static = (self.cuda_graphs or self.compiled) and not last_logits_only
        kv_len = self.kv.span(start + q) if static else start + q
        if self.cuda_graphs and not last_logits_only:
            key = (q, hidden_layers, kv_len)
            if key not in self._graphs:
                self._graphs[key] = _GraphedStep(self, q, hidden_layers, kv_len, self._graphs)
            return self._graphs[key](tokens, start, positions, visible)
        if positions is None:
            pos = torch.arange(start, start + q, device=self.device)
        else:
            pos = torch.as_tensor(positions, device=self.device) + 0
        allowed = self._allowed(start, q, visible, kv_len)
        return self._run(tokens, pos, self._slot_ids[start : start + q], allowed, kv_len, hidden_layers,
                         last_logits_only)

    def _run(self, tokens, pos, slots, allowed, kv_len, hidden_layers, last_logits_only=False):
        """The forward on prepared tensors: ``[q]`` tokens, positions and slots; ``allowed`` ``[q, kv_len]``
        (which of the first ``kv_len`` slots each token attends to)."""
        step = not last_logits_only  # prefill stays uncompiled (its length varies)
        if self.decoder is not None:
            L = len(self.decoder.weights)
            want = [i % (L + 1) for i in hidden_layers]
            return self.decoder(tokens, pos, slots, allowed, self.kv, kv_len, want, last_logits_only, compiled=step)
        self._cache.slots = slots
        self._cache.kv_len = kv_len
        fwd = self._hf_steps[tokens.shape[0] == 1] if step else self._hf_forward
        return fwd(tokens, pos, allowed, hidden_layers, last_logits_only)

    def _hf_forward(self, tokens, pos, allowed, hidden_layers, last_logits_only):
        """``model(...)`` with our cache: logits ``[q or 1, V]`` fp32 and hidden states ``[q, len*H]`` or None."""
        q = tokens.shape[0]
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed, self._neg)  # [q, kv_len] additive
        out = self.model(
            input_ids=tokens.view(1, q),
            position_ids=pos.view(1, q),
            attention_mask=mask.view(1, 1, *allowed.shape),
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


class _GraphedStep:
    """A CUDA graph of ``Target._run`` for one block size; inputs go through static buffers.

    The attention mask and slots are computed inside the graph from the start slot, so a replay needs
    the tokens' device-to-device copy and one host-to-device copy from a pinned buffer that packs the start
    slot, the positions and the block's visibility (no host sync). The pinned buffer is rewritten by the next
    call, so calls must be ordered by a host sync in between (``generate`` reads every step's result).
    """

    def __init__(self, target: Target, q: int, hidden_layers: tuple[int, ...], kv_len: int, siblings: dict) -> None:
        dev = target.device
        self.q = q
        self.tokens = torch.zeros(q, dtype=torch.long, device=dev)  # [q]
        self.host = torch.zeros(1 + q + q * q, dtype=torch.long).pin_memory()  # [start | positions | visible]
        self.packed = torch.zeros(1 + q + q * q, dtype=torch.long, device=dev)
        self.host_view = self.host.numpy()
        self.tril = np.tril(np.ones((q, q), dtype=np.int64)).ravel()
        arange = torch.arange(q, device=dev)

        def step():
            start, pos = self.packed[:1], self.packed[1 : 1 + q]  # [1], [q]
            block = self.packed[1 + q :].view(q, q) != 0  # [q, q]
            slots = start + arange  # [q]
            allowed = (target._slot_ids[None, :kv_len] < start).expand(q, -1).clone()  # [q, kv_len]
            allowed.scatter_(1, slots[None, :].expand(q, q), block)
            return target._run(self.tokens, pos, slots, allowed, kv_len, hidden_layers)

        self.step = step
        self.graph: torch.cuda.CUDAGraph | None = None
        self.siblings = siblings  # the target's graphs: they share one memory pool

    def __call__(self, tokens, start, positions, visible):
        """Replay with new inputs; the returned tensors are overwritten by the next replay."""
        q, h = self.q, self.host_view
        h[0] = start
        h[1 : 1 + q] = np.arange(start, start + q) if positions is None else positions
        h[1 + q :] = self.tril if visible is None else np.asarray(visible).ravel()
        self.tokens.copy_(tokens)
        self.packed.copy_(self.host, non_blocking=True)
        if self.graph is None:
            share = next((g.graph for g in self.siblings.values() if g.graph is not None), None)
            self.graph, self.out = capture(self.step, self.tokens.device, share)
        self.graph.replay()
        return self.out


_TARGETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def target_for(model: torch.nn.Module, capacity: int, *, cuda_graphs: bool = False,
               compile: bool | str = False, attention: str | None = None) -> Target:
    """The model's :class:`Target`, reused across calls while its cache is large enough."""
    p = next(model.parameters())
    t = _TARGETS.get(model)
    if (t is None or t.capacity < capacity or t.device != p.device or t.dtype != p.dtype
            or t.cuda_graphs != (cuda_graphs and p.device.type == "cuda") or t.compiled != compile
            or t.attention != (attention or default_attention(p.device))):
        t = Target(model, capacity, cuda_graphs=cuda_graphs, compile=compile, attention=attention)
        _TARGETS[model] = t
    t.kv.rewind(0)
    return t
