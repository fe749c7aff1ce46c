"""EAGLE-1 and EAGLE-3 draft heads in plain PyTorch.

A head reads pairs ``(f_i, t_{i+1})``: the target's state at position ``i`` and the
token that followed it; the pair sits at rotary position ``i``. Its output at pair
``i`` predicts token ``t_{i+2}`` and is fed back (as the feature of the next pair)
when the head drafts several tokens ahead.

- EAGLE-1: ``x = fc(cat(embed(t), f))`` (embedding first) -> one Llama decoder layer
  without input norm -> the target's ``lm_head`` (logits over the full vocabulary).
  ``f`` is the target's final-normed state (HF ``hidden_states[-1]``) or, when
  drafting, the head's own output.
- EAGLE-3: ``g = fc(cat(h_low, h_mid, h_high))`` from three target layers (or, when
  drafting, the head's own pre-norm output); attention reads
  ``cat(input_layernorm(embed(t)), hidden_norm(g))`` with the residual from ``g``;
  logits ``lm_head(norm(out))`` over a draft vocabulary mapped to target ids by
  ``draft id + d2t[draft id]``.

The target's embedding (and, for EAGLE-1, its ``lm_head``) are borrowed, not owned:
they are not parameters of the head and never appear in its ``state_dict``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from hybridsd.attention import grouped_attention
from hybridsd.eagle import loader
from hybridsd.eagle.config import EagleConfig, config_from_target, rope_inv_freq
from hybridsd.kv_cache import StaticKVCache
from hybridsd.target import default_attention


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class KVList:
    """Keys/values of successive calls concatenated along the sequence (autograd-safe).

    Used for training-time test, where step ``j`` attends to the keys of steps ``0..j``.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None  # [B, Hkv, S, D]
        self.v: torch.Tensor | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
        return self.k, self.v


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class MLP(nn.Module):
    def __init__(self, cfg: EagleConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    def __init__(self, cfg: EagleConfig, in_features: int) -> None:
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(in_features, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(in_features, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(in_features, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, cache, slots, attn_mask, kv_len):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)  # [B, nh, T, D]
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)  # [B, nkv, T, D]
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)  # [B, nkv, T, D]
        q, k = _rotate(q, cos.to(q.dtype), sin.to(q.dtype)), _rotate(k, cos.to(k.dtype), sin.to(k.dtype))
        if isinstance(cache, StaticKVCache):
            k, v = cache.write(0, slots, k, v)  # [B, nkv, S, D]
            if kv_len is not None:
                k, v = k[:, :, :kv_len], v[:, :, :kv_len]
            k, v = k.to(q.dtype), v.to(q.dtype)
        elif cache is not None:
            k, v = cache.update(k, v)  # [B, nkv, S, D]
        one = B == 1 and not q.requires_grad and attn_mask is not None and attn_mask.dtype == torch.bool
        if one and attn_mask.shape == (T, k.shape[2]):
            # drafting one sequence: each KV head read once for its query group, by the target's attention kernel
            # (SDPA with a mask and GQA falls back to its fp32 math kernel on CUDA, repeating the keys)
            qg = q[0].reshape(self.nkv, self.nh // self.nkv * T, self.hd)  # [nkv, g*T, D], row j*T + t
            kernel = default_attention(q.device)
            o = grouped_attention(qg, k[0], v[0], attn_mask, self.hd ** -0.5, kernel)  # [T, nh*D]
            return self.o_proj(o[None])
        causal = attn_mask is None
        if causal and k.shape[2] != T:
            raise ValueError("attn_mask is required when queries and keys differ in length")
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal,
                                           enable_gqa=self.nkv != self.nh)  # [B, nh, T, D]
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class DecoderLayer(nn.Module):
    """Llama decoder layer as EAGLE uses it (EAGLE-1: no input norm; EAGLE-3: two-stream input)."""

    def __init__(self, cfg: EagleConfig) -> None:
        super().__init__()
        self.eagle3 = cfg.kind == "eagle3"
        h = cfg.hidden_size
        if self.eagle3:
            self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)
            self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, 2 * h if self.eagle3 else h)
        self.mlp = MLP(cfg)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)

    def forward(self, x, emb, cos, sin, cache, slots, attn_mask, kv_len):
        a = torch.cat((self.input_layernorm(emb), self.hidden_norm(x)), dim=-1) if self.eagle3 else x
        x = x + self.self_attn(a, cos, sin, cache, slots, attn_mask, kv_len)
        return x + self.mlp(self.post_attention_layernorm(x))


def _check_target(where: str, model, arg: str = "model") -> None:
    """``TypeError`` naming ``where`` and ``arg`` unless ``model`` is an HF model (a module with a ``config`` and an
    input embedding) a head can draft for."""
    if not (isinstance(model, nn.Module) and hasattr(model, "config") and hasattr(model, "get_input_embeddings")):
        raise TypeError(f"{where}: {arg} must be the HF causal LM the head drafts for (e.g. from "
                        f"AutoModelForCausalLM.from_pretrained), got {type(model).__name__}")


class EagleHead(nn.Module):
    """An EAGLE-1 or EAGLE-3 draft head; see the module docstring for the computation.

    ``embed_tokens`` (and for EAGLE-1 ``lm_head``) are the target's modules, borrowed
    rather than registered; a head may instead own an embedding copy (``embed_tokens``
    submodule, saved with it), as some public EAGLE-1 checkpoints carry one.
    """

    def __init__(self, config: EagleConfig, embed_tokens: nn.Module, lm_head: nn.Module | None = None) -> None:
        super().__init__()
        if config.kind == "eagle1" and lm_head is None:
            raise ValueError("an EAGLE-1 head needs the target's lm_head")
        self.config = config
        h = config.hidden_size
        fc_in = 2 * h if config.kind == "eagle1" else config.feature_size
        self.fc = nn.Linear(fc_in, h, bias=config.bias)
        if config.kind == "eagle1":
            self.layers = nn.ModuleList([DecoderLayer(config)])
        else:
            self.midlayer = DecoderLayer(config)
            self.norm = RMSNorm(h, config.rms_norm_eps)
            self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
            vd, v = config.draft_vocab_size, config.vocab_size
            self.register_buffer("d2t", torch.zeros(vd, dtype=torch.int64))  # target id = draft id + d2t
            self.register_buffer("t2d", torch.arange(v) < vd)  # target ids in the draft vocabulary
        self._target = (embed_tokens, lm_head)  # plain tuple: borrowed, not registered
        self._inv_freq = rope_inv_freq(config)  # [D/2] fp32, kept out of .to(dtype)
        self.embed_tokens: nn.Embedding | None = None

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_target(cls, model: nn.Module, kind: str = "eagle1", *, device=None, dtype=torch.float32,
                    **overrides) -> EagleHead:
        """A randomly initialised head shaped for the HF causal LM ``model``.

        ``overrides`` replace :class:`EagleConfig` fields. EAGLE-3 defaults to
        ``draft_vocab_size = min(vocab, 32000)`` with the identity map over the first
        ids (set a frequency-based one with :meth:`set_draft_vocab`). The head is
        created on the target embedding's device (or ``device``) in ``dtype``.
        """
        _check_target("EagleHead.from_target", model)
        cfg = config_from_target(model.config, kind, **overrides)
        emb = model.get_input_embeddings()
        if emb.weight.shape != (cfg.vocab_size, cfg.hidden_size):
            raise ValueError(f"target embedding has shape {tuple(emb.weight.shape)}, "
                             f"expected {(cfg.vocab_size, cfg.hidden_size)}")
        head = cls(cfg, emb, model.get_output_embeddings() if kind == "eagle1" else None)
        head.reset_parameters()
        return head.to(device=device or emb.weight.device, dtype=dtype)

    @classmethod
    def from_pretrained(cls, path_or_hub_id: str | Path, *, target: nn.Module, device=None,
                        dtype: torch.dtype | None = None, use_checkpoint_embeddings: bool = False,
                        revision: str | None = None) -> EagleHead:
        """Load an EAGLE-1/EAGLE-3 head saved in the public layouts (see :mod:`hybridsd.eagle.loader`) for the
        HF causal LM ``target``, from a folder or a Hub id.

        The kind is detected from the keys. The head lands on the target embedding's device and dtype unless
        ``device``/``dtype`` say otherwise. An ``embed_tokens.weight`` in the checkpoint is shape-checked and,
        with ``use_checkpoint_embeddings``, used (and kept) instead of the target's embedding; without it, it
        must equal the target's (up to dtype rounding), or the head was made for another model and loading
        fails. Every error names the file or key: a non-JSON ``config.json`` or one without a required key, a
        shard index entry outside the folder, a truncated weights file, a tensor of the wrong shape.
        """
        _check_target("EagleHead.from_pretrained", target, "target")
        folder, cfg, sd = loader.read_checkpoint(path_or_hub_id, target, revision)
        emb = target.get_input_embeddings()
        with torch.device("meta"):
            head = cls(cfg, emb, target.get_output_embeddings() if cfg.kind == "eagle1" else None)
        expected = {k: v.shape for k, v in head.state_dict().items()}
        own = loader.check_weights(folder, sd, expected, emb.weight, use_checkpoint_embeddings)
        head.load_state_dict(sd, strict=True, assign=True)
        if own is not None:
            head.own_embeddings(own)
        return head.to(device=device or emb.weight.device, dtype=dtype or emb.weight.dtype)

    def save_pretrained(self, path: str | Path) -> None:
        """Write ``config.json`` + ``model.safetensors`` in the public layout."""
        loader.write_checkpoint(path, loader.config_json(self.config, self.fc.weight.dtype), self.state_dict())

    def reset_parameters(self, std: float = 0.02) -> None:
        """Llama-style init: normal(0, std) linear weights, zero biases, unit norms."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, RMSNorm):
                nn.init.ones_(m.weight)

    def check_fits(self, target: nn.Module) -> None:
        """``ValueError`` unless the head reads ``target``'s vocabulary, hidden size and hidden states."""
        cfg, shape = self.config, tuple(target.get_input_embeddings().weight.shape)
        if (cfg.vocab_size, cfg.hidden_size) != shape:
            raise ValueError(f"the EAGLE head is made for a vocabulary of {cfg.vocab_size} tokens and hidden size "
                             f"{cfg.hidden_size}; the target's embedding is {list(shape)}")
        L = getattr(getattr(target, "config", None), "num_hidden_layers", None)
        if L is not None and not all(-(L + 1) <= i <= L for i in cfg.target_layers):  # hidden_states: L + 1 entries
            raise ValueError(f"the EAGLE head reads target layers {list(cfg.target_layers)}; the target's hidden "
                             f"states are indexed 0..{L} (it has {L} layers)")

    def set_draft_vocab(self, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
        """Install an EAGLE-3 draft vocabulary (``d2t [Vd]`` int64, ``t2d [V]`` bool), checked as a loaded one
        (:func:`hybridsd.eagle.loader.check_draft_vocab`)."""
        if self.config.kind != "eagle3":
            raise ValueError("only EAGLE-3 heads have a draft vocabulary")
        if d2t.shape != self.d2t.shape or t2d.shape != self.t2d.shape:
            raise ValueError(f"d2t/t2d shapes {tuple(d2t.shape)}/{tuple(t2d.shape)} do not match "
                             f"{tuple(self.d2t.shape)}/{tuple(self.t2d.shape)}")
        d2t, t2d = loader.check_draft_vocab(d2t, t2d, self.config.vocab_size)
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)

    def own_embeddings(self, weight: torch.Tensor) -> None:
        """Use (and save) a copy of the embedding ``weight [V, h]`` instead of the target's."""
        cfg = self.config
        if weight.shape != (cfg.vocab_size, cfg.hidden_size):
            raise ValueError(f"embed_tokens.weight has shape {tuple(weight.shape)}, "
                             f"expected {(cfg.vocab_size, cfg.hidden_size)}")
        self.embed_tokens = nn.Embedding.from_pretrained(weight, freeze=True)

    def alloc_cache(self, capacity: int, device=None, dtype=None) -> StaticKVCache:
        """A KV cache for this head's one layer, on the head's device/dtype unless given."""
        p = self.fc.weight
        return StaticKVCache(1, self.config.num_key_value_heads, self.config.head_dim, capacity,
                             dtype=dtype or p.dtype, device=device or p.device)

    # ---- computation --------------------------------------------------------------
    @property
    def layer(self) -> DecoderLayer:
        return self.layers[0] if self.config.kind == "eagle1" else self.midlayer

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings ``[..., h]`` (the target's unless the head owns a copy)."""
        emb = self.embed_tokens if self.embed_tokens is not None else self._target[0]
        return emb(tokens)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` (fp32) for ``positions`` ``[T]`` -> ``[T, D]`` or ``[B, T]`` -> ``[B, 1, T, D]``."""
        if self._inv_freq.device != positions.device:
            self._inv_freq = self._inv_freq.to(positions.device)
        freqs = positions.float()[..., None] * self._inv_freq  # [..., T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [..., T, D]
        if positions.ndim == 2:
            emb = emb[:, None]  # [B, 1, T, D]
        return emb.cos(), emb.sin()

    def forward(self, hidden: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                cache: StaticKVCache | KVList | None = None, *, slots: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, kv_len: int | None = None) -> torch.Tensor:
        """Run the head on pairs ``(hidden[:, t], tokens[:, t])`` at ``positions``; return outputs ``[B, T, h]``.

        ``hidden [B, T, F]``: target features (``F = feature_size``) or the head's own
        outputs (``F = h``; EAGLE-3 then skips ``fc``). ``positions``: ``[T]`` or ``[B, T]``.
        Attention: without a cache, causal within the chunk; with a ``StaticKVCache``
        (``positions [T]``), keys/values are written at ``slots`` (default: the
        positions, slot ``s`` holding position ``s``) and a query at position ``p``
        sees slots ``<= p`` among the first ``kv_len`` (default: all); with a
        :class:`KVList`, causal on the first call, ``attn_mask`` required later.
        ``attn_mask`` (bool, True = attend, broadcastable to ``[B, nh, T, S]``)
        overrides the default mask.
        """
        h = self.config.hidden_size
        w = self.fc.weight
        emb = self.embed(tokens).to(w.dtype)  # [B, T, h]
        hidden = hidden.to(w.dtype)
        if self.config.kind == "eagle1":
            x = self.fc(torch.cat((emb, hidden), dim=-1))  # [B, T, h]
        elif hidden.shape[-1] == h:
            x = hidden  # the head's own output, fed back
        else:
            x = self.fc(hidden)  # [B, T, h]
        cos, sin = self.rope(positions)
        if isinstance(cache, StaticKVCache):
            if slots is None:
                slots = positions
            if attn_mask is None:
                S = cache.capacity if kv_len is None else kv_len
                attn_mask = torch.arange(S, device=positions.device) <= positions[:, None]  # [T, S]
        return self.layer(x, emb, cos, sin, cache, slots, attn_mask, kv_len)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., V]`` (EAGLE-1, target vocabulary) or ``[..., Vd]`` (EAGLE-3, draft vocabulary)."""
        if self.config.kind == "eagle1":
            lm_head = self._target[1]
            return lm_head(out.to(lm_head.weight.dtype))
        return self.lm_head(self.norm(out))

    def to_target(self, ids: torch.Tensor) -> torch.Tensor:
        """Target token ids of logits indices (EAGLE-3: ``id + d2t[id]``; EAGLE-1: unchanged)."""
        return ids + self.d2t[ids] if self.config.kind == "eagle3" else ids

    def draft_ids(self) -> torch.Tensor:
        """Target ids of the draft vocabulary ``[Vd]`` (sorted; EAGLE-3 only)."""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def target_probs(self, probs: torch.Tensor) -> torch.Tensor:
        """Spread probabilities over logits indices ``[..., Vout]`` onto target ids ``[..., V]``."""
        if self.config.kind == "eagle1":
            return probs
        out = probs.new_zeros(*probs.shape[:-1], self.config.vocab_size)
        return out.index_copy_(probs.ndim - 1, self.draft_ids(), probs)
