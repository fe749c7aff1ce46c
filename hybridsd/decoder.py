"""The Llama-family decoder (llama, mistral, qwen2, qwen3) as our own step over fused projections.

The step reads the HF model's weights and computes what its modules compute, with three
differences that matter on a GPU at batch 1:

- q/k/v and gate/up are each one matmul: their weights are concatenated once, and the HF
  modules' own ``weight``/``bias`` become views of the fused tensors (same values, no second copy);
- attention reads each key/value head once for its whole query group (the ``[Hkv, g*q, D]``
  layout, :mod:`hybridsd.attention`), instead of repeating the cache ``g`` times as HF's masked
  SDPA path does;
- a layer is one function of tensors, so ``torch.compile`` compiles it once per (block size,
  KV bucket) and every layer reuses it.
"""

from __future__ import annotations

import math
import weakref
from typing import NamedTuple

import torch
import torch.nn.functional as F

from hybridsd.attention import KERNELS, grouped_attention, grouped_rows, rope
from hybridsd.linear import ROW_MAX_M, row_linear_norm_op, row_linear_op



AUTO_MODES = ("max-autotune-no-cudagraphs", None)  # compile="auto": (1-token steps, blocks); None = default mode
DEFAULT_MODE_OPTIONS = {"pattern_matcher": False}  # the default mode without inductor's rewrite of a residual add
# after a matmul into cuBLAS addmm, which copies the residual into its output first (a device copy per residual,
# two a layer) and rounds product and sum once, where the model rounds the product to the dtype before adding


def compile_modes(compile: bool | str) -> tuple[str | None, str | None]:
    """``torch.compile`` modes of 1-token steps and of blocks: a mode name (or True: torch's default) for both,
    or ``"auto"``: :data:`AUTO_MODES`, the fastest of each on an H200 (max-autotune's fused GEMVs for decoding,
    cuBLAS for verify blocks: ``experiments/results/speed/steps_and_baselines.json``)."""
    if compile == "auto":
        return AUTO_MODES
    mode = compile if isinstance(compile, str) else None
    return mode, mode


def compile_by_block(fns: tuple, compile: bool | str) -> dict[bool, tuple]:
    """``fns`` for 1-token steps (key True) and for blocks (key False): compiled in their
    :func:`compile_modes` (one compilation per distinct mode; the default mode with
    :data:`DEFAULT_MODE_OPTIONS`), or as they are when ``compile`` is false."""
    if not compile:
        return {True: fns, False: fns}
    one, block = compile_modes(compile)

    def compiled(f, mode):
        if mode in (None, "default"):
            return torch.compile(f, dynamic=False, options=DEFAULT_MODE_OPTIONS)
        return torch.compile(f, mode=mode, dynamic=False)

    by_mode = {m: tuple(compiled(f, m) for f in fns) for m in {one, block}}
    return {True: by_mode[one], False: by_mode[block]}


class LayerWeights(NamedTuple):
    """One decoder layer's tensors (``H`` hidden, ``D`` head dim, ``I`` MLP width)."""

    attn_norm: torch.Tensor  # [H]
    wqkv: torch.Tensor  # [(Hq + 2 Hkv) D, H]
    bqkv: torch.Tensor | None  # [(Hq + 2 Hkv) D]
    wo: torch.Tensor  # [H, Hq D]
    bo: torch.Tensor | None  # [H]
    q_norm: torch.Tensor | None  # [D] (qwen3)
    k_norm: torch.Tensor | None  # [D]
    mlp_norm: torch.Tensor  # [H]
    w13: torch.Tensor  # [2 I, H] gate then up
    b13: torch.Tensor | None  # [2 I]
    w2: torch.Tensor  # [H, I]
    b2: torch.Tensor | None  # [H]


def _fuse(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One ``[sum out, in]`` weight (and bias) for ``linears``; their own parameters become views of it."""
    w = torch.cat([m.weight.detach() for m in linears])
    has_bias = [m.bias is not None for m in linears]
    if any(has_bias) and not all(has_bias):
        raise ValueError("cannot fuse projections where only some have a bias")
    b = torch.cat([m.bias.detach() for m in linears]) if all(has_bias) else None
    row = 0
    for m in linears:  # the HF modules keep working, on the fused storage
        n = m.weight.shape[0]
        m.weight.data = w[row : row + n]
        if b is not None:
            m.bias.data = b[row : row + n]
        row += n
    return w, b


def _norm_weight(module) -> torch.Tensor | None:
    return None if module is None else module.weight.detach()


_FUSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def weights_signature(module: torch.nn.Module) -> tuple:
    """Where every parameter of ``module`` is stored (data pointer, dtype, device): it changes when a parameter
    is replaced (``load_state_dict(..., assign=True)``, ``model.to(...)``), not when one is written in place."""
    return tuple((p.data_ptr(), p.dtype, p.device) for p in module.parameters())


def fused_layers(base: torch.nn.Module) -> list[LayerWeights]:
    """The fused weights of every layer of ``base`` (``model.model``), made once per model and made again when
    any of its layers' parameters has been replaced since (:func:`weights_signature`)."""
    entry = _FUSED.get(base)
    if entry is None or entry[0] != weights_signature(base.layers):
        with torch.inference_mode(False), torch.no_grad():  # plain tensors: the HF modules may train later
            layers = [_fuse_layer(layer) for layer in base.layers]
        entry = _FUSED[base] = (weights_signature(base.layers), layers)  # the q/k/v, gate/up are views now
    return entry[1]


def _fuse_layer(layer: torch.nn.Module) -> LayerWeights:
    a, mlp = layer.self_attn, layer.mlp
    wqkv, bqkv = _fuse([a.q_proj, a.k_proj, a.v_proj])
    w13, b13 = _fuse([mlp.gate_proj, mlp.up_proj])
    return LayerWeights(
        layer.input_layernorm.weight.detach(), wqkv, bqkv, a.o_proj.weight.detach(),
        None if a.o_proj.bias is None else a.o_proj.bias.detach(),
        _norm_weight(getattr(a, "q_norm", None)), _norm_weight(getattr(a, "k_norm", None)),
        layer.post_attention_layernorm.weight.detach(), w13, b13, mlp.down_proj.weight.detach(),
        None if mlp.down_proj.bias is None else mlp.down_proj.bias.detach())


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm: normalize in fp32, cast back, then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def make_attend(n_heads: int, n_kv_heads: int, head_dim: int, eps: float, attention: str = "sdpa",
                rotate_q_in_attention: bool = False):
    """``attend(qkv, w, k_cache, v_cache, slots, cos, sin, allowed, kv_len, key_slots, branch, block) -> [T, Hq D]``:
    a layer's attention from its q/k/v projection ``qkv`` ``[T, (Hq + 2 Hkv) D]`` (see :func:`make_layer`): the
    q/k norms (qwen3) and rotary embedding, the new keys and values written to the caches, the grouped attention.
    ``rotate_q_in_attention``: the queries go to :func:`~hybridsd.attention.grouped_attention` token-major and not
    yet rotated (exact mode's split kernel rotates them as it loads them)."""
    if attention not in KERNELS:
        raise ValueError(f"attention must be one of {KERNELS}, got {attention!r}")
    g, dq, dkv = n_heads // n_kv_heads, n_heads * head_dim, n_kv_heads * head_dim
    scale = 1 / math.sqrt(head_dim)

    def attend(qkv, w: LayerWeights, k_cache, v_cache, slots, cos, sin, allowed, kv_len, key_slots, branch, block):
        t = qkv.shape[0]  # qkv: [T, (Hq + 2 Hkv) D] -> [T, Hq D]
        q, k, v = qkv.split([dq, dkv, dkv], dim=-1)
        q, k, v = q.view(t, n_heads, head_dim), k.view(t, n_kv_heads, head_dim), v.view(t, n_kv_heads, head_dim)
        if w.q_norm is not None:
            q, k = rms_norm(q, w.q_norm, eps), rms_norm(k, w.k_norm, eps)
        k = rope(k, cos[:, None], sin[:, None])
        k_cache.index_copy_(2, slots, k.transpose(0, 1)[None])  # [1, Hkv, S, D]
        v_cache.index_copy_(2, slots, v.transpose(0, 1)[None])
        q = q.view(t, n_kv_heads, g, head_dim)  # [T, Hkv, g, D] token-major, each KV head with its g query heads
        if rotate_q_in_attention:
            return grouped_attention(q, k_cache[0, :, :kv_len], v_cache[0, :, :kv_len], allowed, scale, attention,
                                     key_slots, branch, block, rotary=(cos, sin))  # [T, Hq D]
        qg = grouped_rows(q, (cos, sin))  # [Hkv, g*T, D], row j*T + t
        return grouped_attention(qg, k_cache[0, :, :kv_len], v_cache[0, :, :kv_len], allowed, scale,
                                 attention, key_slots, branch, block)  # [T, Hq D]

    return attend


def make_layer(n_heads: int, n_kv_heads: int, head_dim: int, eps: float, act, attention: str = "sdpa"):
    """``layer(x, w, k_cache, v_cache, slots, cos, sin, allowed, kv_len, key_slots, branch, block) -> x``: one
    decoder layer.

    ``x`` ``[T, H]``; ``w`` a :class:`LayerWeights`; caches ``[1, Hkv, S, D]`` (written at ``slots``, ``[T]``);
    ``cos, sin`` ``[T, D]``; ``allowed`` ``[T, kv_len]`` bool; the layer attends over the first ``kv_len`` slots,
    in the virtual key order ``key_slots, branch`` (or slot order: None) of the block ``block`` when given (exact
    mode, see :func:`~hybridsd.attention.grouped_attention`; on CUDA with the split kernel exact mode runs
    :func:`make_row_layer`'s layer instead).
    """
    attend = make_attend(n_heads, n_kv_heads, head_dim, eps, attention)

    def layer(x, w: LayerWeights, k_cache, v_cache, slots, cos, sin, allowed, kv_len: int, key_slots=None,
              branch=None, block=None):
        cache = (k_cache, v_cache, slots, cos, sin, allowed, kv_len, key_slots, branch, block)
        o = attend(F.linear(rms_norm(x, w.attn_norm, eps), w.wqkv, w.bqkv), w, *cache)  # [T, Hq D]
        x = x + F.linear(o, w.wo, w.bo)
        gate, up = F.linear(rms_norm(x, w.mlp_norm, eps), w.w13, w.b13).chunk(2, dim=-1)  # [T, I] each
        return x + F.linear(act(gate) * up, w.w2, w.b2)  # [T, H]

    return layer


def make_row_layer(n_heads: int, n_kv_heads: int, head_dim: int, eps: float, act, silu: bool = False):
    """``row_layer(x, normed, w, next_norm, k_cache, ..., block) -> (x, normed)``: one decoder layer of exact mode
    on CUDA (the split kernel), its matmuls :func:`~hybridsd.linear.row_linear`'s (blocks of up to ``ROW_MAX_M``
    rows), each row computed alone, with the residuals, (``silu``: ``act`` is SiLU) the gated activation and the
    RMS norms folded in: ``normed`` is ``(x * attn_norm, sums of squares of x [T, P])`` from the layer before (None:
    the layer normalizes ``x`` itself), and the layer returns the same for ``next_norm`` (the next layer's
    ``attn_norm``; None: ``normed`` None). Other arguments as :func:`make_layer`'s."""
    attend = make_attend(n_heads, n_kv_heads, head_dim, eps, "split", rotate_q_in_attention=True)

    def row_layer(x, normed, w: LayerWeights, next_norm, k_cache, v_cache, slots, cos, sin, allowed, kv_len: int,
                  key_slots, branch, block):
        lin, lin_norm = row_linear_op(), row_linear_norm_op()
        if normed is None:
            qkv = lin(rms_norm(x, w.attn_norm, eps), w.wqkv, w.bqkv, False, None, None, 0.0)
        else:
            qkv = lin(normed[0], w.wqkv, w.bqkv, False, None, normed[1], eps)
        o = attend(qkv, w, k_cache, v_cache, slots, cos, sin, allowed, kv_len, key_slots, branch, block)
        x, hg, sums = lin_norm(o, w.wo, w.bo, x, w.mlp_norm)  # x [T, H], x * mlp_norm [T, H], sums [T, P]
        if silu:
            a = lin(hg, w.w13, w.b13, True, None, sums, eps)  # [T, I]
        else:
            gate, up = lin(hg, w.w13, w.b13, False, None, sums, eps).chunk(2, dim=-1)  # [T, I] each
            a = act(gate) * up
        if next_norm is None:
            return lin(a, w.w2, w.b2, False, x, None, 0.0), None
        x, xg, sums = lin_norm(a, w.w2, w.b2, x, next_norm)
        return x, (xg, sums)

    return row_layer


def make_head(eps: float):
    """``head(x, norm, lm_head, last_only) -> (normed [T, H], logits [T or 1, V] fp32)``."""

    def head(x, norm_weight, lm_head_weight, last_only: bool):
        x = rms_norm(x, norm_weight, eps)
        return x, F.linear(x[-1:] if last_only else x, lm_head_weight).float()

    return head


class Decoder:
    """A Llama-family causal LM's forward over our KV cache; hidden states indexed as HF's ``hidden_states``
    (``0`` the embeddings, ``i`` the output of layer ``i-1``, ``L`` the final-normed output)."""

    def __init__(self, model: torch.nn.Module, *, compile: bool | str = False, attention: str = "sdpa") -> None:
        cfg, base = model.config, model.model
        self.base, self.lm_head = base, model.lm_head
        if getattr(model.lm_head, "bias", None) is not None:
            raise ValueError("an lm_head with a bias is not supported by the fused decoder")
        if attention == "split" and next(model.parameters()).device.type != "cuda":
            raise ValueError("attention='split' is a CUDA kernel; use 'sdpa' on other devices")
        self.weights = fused_layers(base)
        n_heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
        eps = base.norm.variance_epsilon if hasattr(base.norm, "variance_epsilon") else cfg.rms_norm_eps
        n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
        act = base.layers[0].mlp.act_fn
        # exact mode on row kernels: the split kernel (CUDA), 16-row blocks
        row_layer = make_row_layer(n_heads, n_kv, head_dim, eps, act,
                                   silu=getattr(cfg, "hidden_act", None) in ("silu", "swish"))
        self.row_kernels = attention == "split"
        self.eager = (make_layer(n_heads, n_kv, head_dim, eps, act, attention), make_head(eps), row_layer)
        self.compiled = compile_by_block(self.eager, compile)  # by "a 1-token step"

    def __call__(self, tokens, pos, slots, allowed, kv, kv_len: int, want: list[int], last_only: bool,
                 compiled: bool = True, gather: tuple[torch.Tensor, ...] | None = None):
        """Logits ``[T or 1, V]`` fp32 and the ``want`` hidden states concatenated ``[T, len*H]`` (or None) for
        ``tokens`` ``[T]`` at ``pos`` ``[T]`` written at ``slots`` ``[T]``; ``allowed`` ``[T, kv_len]`` bool.
        ``compiled=False`` runs the uncompiled functions (prefill: its length varies). ``gather``: the virtual
        key order ``(key_slots [NB, kv_len] or None, branch [T] or None, block [4])`` of exact mode (None: slot
        order)."""
        layer, head, row_layer = self.compiled[tokens.shape[0] == 1] if compiled else self.eager
        rows = gather is not None and self.row_kernels and tokens.shape[0] <= ROW_MAX_M
        n = len(self.weights)
        x = self.base.embed_tokens(tokens)  # [T, H]
        cos, sin = self.base.rotary_emb(x[None], pos[None])  # [1, T, D] each
        cos, sin = cos[0], sin[0]
        kept = {0: x} if 0 in want else {}
        normed = None  # exact mode on row kernels: (x * attn_norm, sums of squares) for the next layer
        for i, w in enumerate(self.weights):
            cache = (kv.keys[i], kv.values[i], slots, cos, sin, allowed, kv_len, *(gather or ()))
            if rows:
                x, normed = row_layer(x, normed, w, self.weights[i + 1].attn_norm if i + 1 < n else None, *cache)
            else:
                x = layer(x, w, *cache)
            if i + 1 in want and i + 1 < n:
                kept[i + 1] = x
        kept[n], logits = head(x, self.base.norm.weight, self.lm_head.weight, last_only)
        hidden = torch.cat([kept[i] for i in want], dim=-1) if want else None  # [T, len*H]
        return logits, hidden
