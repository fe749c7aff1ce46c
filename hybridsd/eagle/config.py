"""The shape and hyper-parameters of an EAGLE head: :class:`EagleConfig`, read from a target's HF config
(:func:`config_from_target`), and its rotary inverse frequencies (:func:`rope_inv_freq`, computed by
transformers' rope functions, so that a head's positions rotate exactly as its target's do)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

KINDS = ("eagle1", "eagle3")
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class EagleConfig:
    """Shape and hyper-parameters of an EAGLE head (one decoder layer).

    ``target_layers``: indices into the target's HF ``hidden_states`` that the head
    reads, concatenated in this order (EAGLE-1: ``(-1,)``, the final-normed output;
    EAGLE-3: ``(2, L // 2, L - 3)`` for a target of ``L`` layers).
    ``rope_scaling``: ``None`` or a dict with ``rope_type`` in ``linear``/``llama3``
    and that type's fields (``factor``; for llama3 also ``low_freq_factor``,
    ``high_freq_factor``, ``original_max_position_embeddings``).
    ``draft_vocab_size``: EAGLE-3 only (``None`` for EAGLE-1).
    ``bias``: EAGLE-1 only, whether ``fc`` has a bias.
    """

    kind: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    target_layers: tuple[int, ...]
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = field(default=None, hash=False)
    draft_vocab_size: int | None = None
    bias: bool = False
    max_position_embeddings: int = 2048

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                     "vocab_size", "max_position_embeddings"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"hidden_size={self.hidden_size} is not divisible by "
                                 f"num_attention_heads={self.num_attention_heads}; give head_dim")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if not isinstance(self.head_dim, int) or self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"head_dim must be a positive even int, got {self.head_dim!r}")
        for name in ("rms_norm_eps", "rope_theta"):
            v = getattr(self, name)
            if not _positive_number(v):
                raise ValueError(f"{name} must be a positive finite number, got {v!r}")
            object.__setattr__(self, name, float(v))
        if isinstance(self.target_layers, (str, bytes)) or not isinstance(self.target_layers, Iterable):
            raise TypeError(f"target_layers must be a tuple of ints (indices into the target's hidden_states), "
                            f"got {self.target_layers!r}")
        layers = tuple(self.target_layers)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
            raise ValueError(f"target_layers must be ints, got {self.target_layers!r}")
        object.__setattr__(self, "target_layers", layers)
        if not isinstance(self.bias, bool):
            raise TypeError(f"bias must be True or False, got {self.bias!r}")
        want = 1 if self.kind == "eagle1" else 3
        if len(layers) != want:
            raise ValueError(f"{self.kind} reads {want} target layer(s), got target_layers={layers}")
        if self.kind == "eagle1":
            if self.draft_vocab_size is not None:
                raise ValueError("draft_vocab_size is for eagle3 only; EAGLE-1 drafts over the target vocabulary")
        else:
            if self.bias:
                raise ValueError("bias is for eagle1 only (the EAGLE-3 fc has no bias)")
            vd = self.draft_vocab_size
            if not isinstance(vd, int) or isinstance(vd, bool) or not 1 <= vd <= self.vocab_size:
                raise ValueError(f"eagle3 needs an int 1 <= draft_vocab_size <= vocab_size={self.vocab_size}, "
                                 f"got {vd!r}")
        object.__setattr__(self, "rope_scaling", _normalize_rope_scaling(self.rope_scaling))

    @property
    def out_vocab_size(self) -> int:
        """Width of the head's logits: the draft vocabulary (EAGLE-3) or the target's (EAGLE-1)."""
        return self.draft_vocab_size if self.kind == "eagle3" else self.vocab_size

    @property
    def feature_size(self) -> int:
        """Width of the target features ``observe`` receives (``len(target_layers) * hidden_size``)."""
        return len(self.target_layers) * self.hidden_size


def _normalize_rope_scaling(rs: Any) -> dict | None:
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise ValueError(f"rope_scaling must be a dict or None, got {type(rs).__name__}")
    rs = {k: v for k, v in rs.items() if k not in ("rope_theta", "type")} | {
        "rope_type": rs.get("rope_type", rs.get("type", "default"))}
    kind = rs["rope_type"]
    if rs.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"partial rotary embeddings are not supported, got {rs}")
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope_scaling type {kind!r} is not supported (supported: {ROPE_TYPES})")
    if kind == "default":
        return None
    need = ("factor",) if kind == "linear" else (
        "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    for key in need:
        if key not in rs:
            raise ValueError(f"rope_scaling of type {kind!r} needs {key!r}, got {rs}")
        if not _positive_number(rs[key]):
            raise ValueError(f"rope_scaling {key} must be a positive finite number, got {rs[key]!r}")
    if kind == "llama3" and not rs["high_freq_factor"] > rs["low_freq_factor"]:
        raise ValueError(f"llama3 rope_scaling needs high_freq_factor > low_freq_factor, got {rs}")
    return rs


def _positive_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < v < math.inf


def rope_inv_freq(cfg: EagleConfig) -> torch.Tensor:
    """Rotary inverse frequencies ``[head_dim // 2]`` (fp32, on the CPU even under a meta device context),
    with the config's linear or llama3 scaling applied by transformers' ``ROPE_INIT_FUNCTIONS``."""
    with torch.device("cpu"):
        d = cfg.head_dim
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))  # [d/2] default
        if cfg.rope_scaling is None:
            return inv
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        like = LlamaConfig(hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_attention_heads,
                           head_dim=d, max_position_embeddings=cfg.max_position_embeddings,
                           rope_parameters=dict(cfg.rope_scaling, rope_theta=cfg.rope_theta))
        inv, _ = ROPE_INIT_FUNCTIONS[cfg.rope_scaling["rope_type"]](like, "cpu")  # [d/2]
        return inv.float()


def config_from_target(tc: Any, kind: str = "eagle1", **overrides) -> EagleConfig:
    """An :class:`EagleConfig` matching an HF (Llama-like) target config ``tc``; ``ValueError`` naming the target's
    model type when ``tc`` lacks a size a head needs (and ``overrides`` do not give it)."""
    sizes = {k: getattr(tc, k, None) for k in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")}
    sizes |= {k: overrides[k] for k, v in sizes.items() if v is None and k in overrides}  # what the config lacks
    L = getattr(tc, "num_hidden_layers", None)
    missing = [k for k, v in sizes.items() if v is None]
    if L is None and kind == "eagle3" and "target_layers" not in overrides:
        missing.append("num_hidden_layers")
    if missing:
        hint = ", ".join("target_layers=..." if k == "num_hidden_layers" else f"{k}=..." for k in missing)
        raise ValueError(f"EAGLE heads are built for Llama-like targets; this target's config "
                         f"({type(tc).__name__}, model_type {getattr(tc, 'model_type', None)!r}) has no "
                         f"{', '.join(missing)} (pass {hint} to set it)")
    heads = sizes["num_attention_heads"]
    rp = getattr(tc, "rope_parameters", None) or getattr(tc, "rope_scaling", None) or {}
    if rp and not isinstance(rp, dict):
        rp = dict(rp)
    theta = rp.get("rope_theta", getattr(tc, "rope_theta", None)) or 10000.0
    scaling = rp if rp.get("rope_type", rp.get("type", "default")) != "default" else None
    vocab = sizes["vocab_size"]
    kw = dict(
        kind=kind,
        hidden_size=sizes["hidden_size"],
        intermediate_size=sizes["intermediate_size"],
        num_attention_heads=heads,
        num_key_value_heads=getattr(tc, "num_key_value_heads", None) or heads,
        head_dim=getattr(tc, "head_dim", None) or sizes["hidden_size"] // heads,
        vocab_size=vocab,
        target_layers=(-1,) if kind == "eagle1" else None if L is None else (2, L // 2, L - 3),
        rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6),
        rope_theta=float(theta),
        rope_scaling=dict(scaling) if scaling else None,
        draft_vocab_size=min(vocab, 32000) if kind == "eagle3" else None,
        bias=False,
        max_position_embeddings=getattr(tc, "max_position_embeddings", 2048),
    )
    kw.update(overrides)
    return EagleConfig(**kw)
