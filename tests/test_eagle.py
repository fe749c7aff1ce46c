"""EAGLE heads, checkpoint loading and the EAGLE drafter against slow, plainly written references."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from hybridsd.drafters.base import ProposeRequest
from hybridsd.drafters.eagle import EagleDrafter
from hybridsd.eagle import loader
from hybridsd.eagle.config import EagleConfig, rope_inv_freq
from hybridsd.eagle.model import EagleHead

V, H, I, NH, NKV, L = 97, 64, 128, 4, 2, 4
HD = H // NH
VD = 40
ATOL = 1e-5
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}


def make_target(seed: int = 0, **kw) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
               num_key_value_heads=NKV, max_position_embeddings=256)
    cfg.update(kw)
    return LlamaForCausalLM(LlamaConfig(**cfg)).eval()


@pytest.fixture(scope="module")
def target():
    return make_target()


def features(target, ids: torch.Tensor, layers) -> torch.Tensor:
    """Target hidden states at ``layers`` for ``ids [T]``, concatenated: ``[T, len(layers) * H]``."""
    with torch.no_grad():
        hs = target(ids[None], output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in layers], dim=-1)


def random_head(target, kind, seed=1, **kw) -> EagleHead:
    torch.manual_seed(seed)
    if kind == "eagle3":
        kw.setdefault("draft_vocab_size", VD)
    head = EagleHead.from_target(target, kind, **kw).eval()
    with torch.no_grad():  # non-trivial norm weights and biases, so that every weight matters
        for name, p in head.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
        if kind == "eagle3":
            head.set_draft_vocab(*spread_vocab())
    return head


def spread_vocab():
    """A draft vocabulary of every other target id from 5 (d2t non-trivial)."""
    ids = torch.arange(5, 5 + 2 * VD, 2)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(VD), t2d


# ---- independent references ------------------------------------------------------

def causal_additive(T: int) -> torch.Tensor:
    return torch.full((T, T), float("-inf")).triu(1)[None, None]  # [1, 1, T, T]


def ref_eagle1(sd: dict, target, feats: torch.Tensor, tokens: torch.Tensor, rope_theta=10000.0,
               rope_scaling=None) -> torch.Tensor:
    """transformers' LlamaDecoderLayer without input norm, on fc(cat(embed, f)); pairs at positions 0..T-1."""
    rope = {"rope_type": "default", "rope_theta": rope_theta} if rope_scaling is None else (
        dict(rope_scaling, rope_theta=rope_theta))
    cfg = LlamaConfig(hidden_size=H, intermediate_size=I, num_attention_heads=NH, num_key_value_heads=NKV,
                      rms_norm_eps=1e-6, max_position_embeddings=256, rope_parameters=rope,
                      attn_implementation="eager")
    layer = LlamaDecoderLayer(cfg, layer_idx=0)
    layer.input_layernorm = nn.Identity()
    layer.load_state_dict({k.removeprefix("layers.0."): v.float() for k, v in sd.items()
                           if k.startswith("layers.0.")}, strict=True)
    layer.eval()
    T = tokens.shape[0]
    emb = sd["embed_tokens.weight"].float()[tokens] if "embed_tokens.weight" in sd else \
        target.get_input_embeddings()(tokens)
    x = nn.functional.linear(torch.cat([emb, feats], -1), sd["fc.weight"].float(),
                             sd["fc.bias"].float() if "fc.bias" in sd else None)[None]
    pos = torch.arange(T)[None]
    cos_sin = LlamaRotaryEmbedding(cfg)(x, pos)
    with torch.no_grad():
        out = layer(x, attention_mask=causal_additive(T), position_ids=pos, position_embeddings=cos_sin)
    return (out[0] if isinstance(out, tuple) else out)[0]  # [T, H]


def ref_eagle3(sd: dict, target, g: torch.Tensor, tokens: torch.Tensor, theta=10000.0) -> torch.Tensor:
    """EAGLE-3 written out plainly over already fused inputs ``g [T, H]``; returns pre-norm outputs."""
    w = {k: v.float() for k, v in sd.items()}

    def rms(x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    T = tokens.shape[0]
    emb = w["embed_tokens.weight"][tokens] if "embed_tokens.weight" in w else target.get_input_embeddings()(tokens)
    a = torch.cat([rms(emb, w["midlayer.input_layernorm.weight"]), rms(g, w["midlayer.hidden_norm.weight"])], -1)
    q = (a @ w["midlayer.self_attn.q_proj.weight"].T).view(T, NH, HD)
    k = (a @ w["midlayer.self_attn.k_proj.weight"].T).view(T, NKV, HD)
    v = (a @ w["midlayer.self_attn.v_proj.weight"].T).view(T, NKV, HD)

    def rotate(x):  # pair (i, i + D/2) rotated by pos * theta^(-2i/D)
        out = x.clone()
        for t in range(T):
            for i in range(HD // 2):
                ang = t * theta ** (-2 * i / HD)
                c, s = math.cos(ang), math.sin(ang)
                x1, x2 = x[t, :, i], x[t, :, i + HD // 2]
                out[t, :, i], out[t, :, i + HD // 2] = x1 * c - x2 * s, x2 * c + x1 * s
        return out

    q, k = rotate(q), rotate(k)
    att = torch.zeros(T, NH, HD)
    for hh in range(NH):
        kv = hh // (NH // NKV)
        scores = q[:, hh] @ k[:, kv].T / math.sqrt(HD) + torch.full((T, T), float("-inf")).triu(1)
        att[:, hh] = scores.softmax(-1) @ v[:, kv]
    x = g + att.reshape(T, NH * HD) @ w["midlayer.self_attn.o_proj.weight"].T
    m = rms(x, w["midlayer.post_attention_layernorm.weight"])
    mlp = (nn.functional.silu(m @ w["midlayer.mlp.gate_proj.weight"].T) * (m @ w["midlayer.mlp.up_proj.weight"].T))
    return x + mlp @ w["midlayer.mlp.down_proj.weight"].T


def ref_logits3(sd, out):
    w = {k: v.float() for k, v in sd.items()}
    n = w["norm.weight"] * (out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + 1e-6))
    return n @ w["lm_head.weight"].T


def ref_outputs(head_or_sd, target, kind, feats, tokens, **rope):
    """Reference outputs ``[T, H]`` of a head (or raw state dict) on target features."""
    sd = head_or_sd.state_dict() if isinstance(head_or_sd, nn.Module) else head_or_sd
    if kind == "eagle1":
        return ref_eagle1(sd, target, feats, tokens, **rope)
    return ref_eagle3(sd, target, feats @ sd["fc.weight"].float().T, tokens)


def ref_greedy_chain(head, target, feats, tokens, k):
    """Slow drafting: recompute the whole chain (committed pairs + own outputs) for every draft token."""
    sd = head.state_dict()
    kind = head.config.kind
    rows = feats if kind == "eagle1" else feats @ sd["fc.weight"].T  # eagle3: fused rows
    toks = tokens.clone()
    drafts, logits_rows = [], []
    for _ in range(k):
        if kind == "eagle1":
            out = ref_eagle1(sd, target, rows, toks, head.config.rope_theta, head.config.rope_scaling)
            logits = target.lm_head(out[-1])
            d = int(logits.argmax())
        else:
            out = ref_eagle3(sd, target, rows, toks)
            logits = ref_logits3(sd, out[-1])
            d = int(logits.argmax()) + int(sd["d2t"][int(logits.argmax())])
        drafts.append(d)
        logits_rows.append(logits)
        rows = torch.cat([rows, out[-1:]])
        toks = torch.cat([toks, torch.tensor([d])])
    return drafts, logits_rows


# ---- config -------------------------------------------------------------------------

def test_config_validation():
    base = dict(kind="eagle1", hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=97, target_layers=(-1,))
    cfg = EagleConfig(**base)
    assert cfg.head_dim == 16 and cfg.out_vocab_size == 97
    bad = [dict(kind="medusa"), dict(hidden_size=0), dict(num_key_value_heads=3), dict(target_layers=(1, 2)),
           dict(draft_vocab_size=10), dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}),
           dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), dict(head_dim=7), dict(rope_theta=0.0),
           dict(rope_theta="1e4"), dict(rms_norm_eps=None), dict(rms_norm_eps=float("nan")),
           dict(kind="eagle3", target_layers=(1, 2, 3)), dict(kind="eagle3", target_layers=(1, 2, 3),
                                                               draft_vocab_size=98)]
    for b in bad:
        with pytest.raises(ValueError):
            EagleConfig(**(base | b))
    c3 = EagleConfig(**(base | dict(kind="eagle3", target_layers=[2, 2, 1], draft_vocab_size=40,
                                    rope_scaling={"type": "linear", "factor": 2.0, "rope_theta": 5.0})))
    assert c3.target_layers == (2, 2, 1) and c3.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert EagleConfig(**(base | dict(rope_scaling={"rope_type": "default"}))).rope_scaling is None


CONFIG_TYPES = [  # (case, fields beyond a valid eagle1 config, exception, words)
    ("target_layers an int", dict(target_layers=-1), TypeError, ["target_layers", "tuple of ints", "-1"]),
    ("target_layers None", dict(target_layers=None), TypeError, ["target_layers", "None"]),
    ("target_layers a string", dict(target_layers="-1"), TypeError, ["target_layers", "'-1'"]),
    ("bias a string", dict(bias="no"), TypeError, ["bias", "'no'"]),
    ("bias an int", dict(bias=1), TypeError, ["bias", "1"]),
    ("bias None", dict(bias=None), TypeError, ["bias", "None"]),
    ("draft_vocab_size True", dict(kind="eagle3", target_layers=(1, 2, 3), draft_vocab_size=True), ValueError,
     ["draft_vocab_size", "int", "True"]),
]


@pytest.mark.parametrize("case,fields,exc,words", CONFIG_TYPES, ids=[c[0] for c in CONFIG_TYPES])
def test_config_fields_of_the_wrong_type(case, fields, exc, words):
    """One error naming the field, not "'int' object is not iterable", and no truthy string taken as a bias."""
    base = dict(kind="eagle1", hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=97, target_layers=(-1,))
    with pytest.raises(exc) as e:
        EagleConfig(**(base | fields))
    assert all(w in str(e.value) for w in words), str(e.value)


def test_from_target_takes_bool_bias_only(target):
    with pytest.raises(TypeError, match="bias must be True or False, got 'no'"):
        EagleHead.from_target(target, "eagle1", bias="no")
    assert EagleHead.from_target(target, "eagle1", bias=True).fc.bias is not None


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=2)).eval()


BAD_TARGETS = [  # (case, call, exception, words)
    ("from_target without a model", lambda t: EagleHead.from_target(None), TypeError,
     ["EagleHead.from_target", "model", "NoneType"]),
    ("from_target on a path", lambda t: EagleHead.from_target("some/model"), TypeError, ["model", "str"]),
    ("from_target on gpt2", lambda t: EagleHead.from_target(_gpt2()), ValueError,
     ["Llama-like", "GPT2Config", "'gpt2'", "intermediate_size"]),
    ("from_target eagle3 on gpt2", lambda t: EagleHead.from_target(_gpt2(), "eagle3"), ValueError,
     ["Llama-like", "'gpt2'", "intermediate_size"]),
    ("from_pretrained without a target", lambda t: EagleHead.from_pretrained(t, target=None), TypeError,
     ["EagleHead.from_pretrained", "target", "NoneType"]),
    ("from_pretrained with a config as target", lambda t: EagleHead.from_pretrained(t, target=make_target().config),
     TypeError, ["target", "LlamaConfig"]),
]


@pytest.mark.parametrize("case,call,exc,words", BAD_TARGETS, ids=[c[0] for c in BAD_TARGETS])
def test_heads_name_a_target_they_cannot_be_built_for(tmp_path, target, case, call, exc, words):
    """Not an AttributeError from transformers: one error naming the call, the argument or the target's type."""
    random_head(target, "eagle1").save_pretrained(tmp_path)
    with pytest.raises(exc) as e:
        call(tmp_path)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_from_target_on_gpt2_with_the_missing_size_given():
    head = EagleHead.from_target(_gpt2(), "eagle1", intermediate_size=64)
    assert (head.config.hidden_size, head.config.intermediate_size, head.config.vocab_size) == (32, 64, V)


def _inv_freq_formula(cfg: EagleConfig) -> torch.Tensor:
    """Rotary inverse frequencies written out from the Llama 3.1 paper's scaling rule (fp32)."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2).float() / d))
    rs = cfg.rope_scaling
    if rs is None:
        return inv
    if rs["rope_type"] == "linear":
        return inv / rs["factor"]
    out = []
    for f in inv.tolist():
        wavelen, old = 2 * math.pi / f, rs["original_max_position_embeddings"]
        if wavelen < old / rs["high_freq_factor"]:
            out.append(f)
        elif wavelen > old / rs["low_freq_factor"]:
            out.append(f / rs["factor"])
        else:
            smooth = (old / wavelen - rs["low_freq_factor"]) / (rs["high_freq_factor"] - rs["low_freq_factor"])
            out.append((1 - smooth) * f / rs["factor"] + smooth * f)
    return torch.tensor(out)


@pytest.mark.parametrize("scaling", [None, {"rope_type": "linear", "factor": 4.0}, LLAMA3_ROPE,
                                     dict(LLAMA3_ROPE, factor=32.0, original_max_position_embeddings=8192)])
@pytest.mark.parametrize("head_dim,theta", [(16, 10000.0), (40, 500000.0)])
def test_rope_inv_freq_matches_the_formula_and_the_target(scaling, head_dim, theta):
    """The head rotates by the frequencies the rule gives and its HF Llama target uses, on the CPU even when the
    head is built under a meta device context."""
    cfg = EagleConfig(kind="eagle1", hidden_size=4 * head_dim, intermediate_size=8, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=11, target_layers=(-1,), rope_theta=theta,
                      rope_scaling=scaling, max_position_embeddings=131072)
    with torch.device("meta"):
        got = rope_inv_freq(cfg)
    assert got.device.type == "cpu" and got.dtype == torch.float32 and got.shape == (head_dim // 2,)
    torch.testing.assert_close(got, _inv_freq_formula(cfg), rtol=1e-6, atol=0)
    hf = LlamaRotaryEmbedding(LlamaConfig(hidden_size=cfg.hidden_size, num_attention_heads=4, head_dim=head_dim,
                                          max_position_embeddings=131072,
                                          rope_parameters=dict(scaling or {"rope_type": "default"}, rope_theta=theta)))
    torch.testing.assert_close(got, hf.inv_freq.float(), rtol=1e-6, atol=0)


def test_from_target_reads_config():
    t = make_target(num_hidden_layers=8, rope_theta=500000.0, max_position_embeddings=4096,
                    rope_scaling=dict(LLAMA3_ROPE))
    h1 = EagleHead.from_target(t, "eagle1")
    c = h1.config
    assert (c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (
        H, I, NH, NKV, HD)
    assert c.rope_theta == 500000.0 and c.rope_scaling["rope_type"] == "llama3"
    assert c.target_layers == (-1,) and c.vocab_size == V and c.max_position_embeddings == 4096
    h3 = EagleHead.from_target(t, "eagle3")
    assert h3.config.target_layers == (2, 4, 5) and h3.config.draft_vocab_size == V
    assert torch.equal(h3.d2t, torch.zeros(V, dtype=torch.int64)) and bool(h3.t2d.all())
    # the target's modules are borrowed, not saved
    keys1, keys3 = set(h1.state_dict()), set(h3.state_dict())
    assert not any("embed" in k for k in keys1 | keys3) and "lm_head.weight" not in keys1
    assert sum(p.numel() for p in h1.parameters()) == 2 * H * H + 2 * H * HD * (NH + NKV) + 3 * H * I + H


# ---- forward against references ----------------------------------------------------

@pytest.mark.parametrize("kind,bias,rope", [("eagle1", True, None), ("eagle1", False, LLAMA3_ROPE),
                                            ("eagle3", False, None)])
def test_forward_matches_reference_whole_and_incremental(target, kind, bias, rope):
    kw = {"bias": bias} if kind == "eagle1" else {}
    if rope:
        kw.update(rope_scaling=rope, rope_theta=10000.0)
    head = random_head(target, kind, **kw)
    torch.manual_seed(2)
    T = 13
    ids = torch.randint(0, V, (T + 1,))
    feats = features(target, ids[:-1], head.config.target_layers)  # f_0..f_{T-1}
    toks = ids[1:]  # t_1..t_T
    ref = ref_outputs(head, target, kind, feats, toks, **({"rope_scaling": head.config.rope_scaling}
                                                          if kind == "eagle1" else {}))
    with torch.no_grad():
        whole = head(feats[None], toks[None], torch.arange(T))[0]
        torch.testing.assert_close(whole, ref, atol=ATOL, rtol=0)
        # batched positions [B, T] give the same
        whole_b = head(feats[None].repeat(2, 1, 1), toks[None].repeat(2, 1), torch.arange(T)[None].repeat(2, 1))
        torch.testing.assert_close(whole_b[1], ref, atol=ATOL, rtol=0)
        # incremental through the cache, with stale garbage in the slots ahead
        cache = head.alloc_cache(32)
        for kk in cache.keys + cache.values:
            kk.normal_()
        outs, p = [], 0
        for n in (4, 1, 1, 5, 2):
            pos = torch.arange(p, p + n)
            outs.append(head(feats[None, p:p + n], toks[None, p:p + n], pos, cache, kv_len=p + n)[0])
            p += n
            cache.rewind(p)
        torch.testing.assert_close(torch.cat(outs), ref, atol=ATOL, rtol=0)
        # without kv_len (the whole capacity, masked by position) as well
        cache.rewind(0)
        torch.testing.assert_close(head(feats[None], toks[None], torch.arange(T), cache)[0], ref, atol=ATOL, rtol=0)
        logits = head.logits(whole[None])[0]
    if kind == "eagle1":
        torch.testing.assert_close(logits, target.lm_head(ref), atol=ATOL, rtol=0)
    else:
        torch.testing.assert_close(logits, ref_logits3(head.state_dict(), ref), atol=ATOL, rtol=0)
        assert logits.shape[-1] == VD


def test_eagle3_feedback_skips_fc(target):
    """Own outputs (width H) enter the layer directly; target features (3H) go through fc."""
    head = random_head(target, "eagle3")
    torch.manual_seed(3)
    g = torch.randn(6, H)
    toks = torch.randint(0, V, (6,))
    with torch.no_grad():
        out = head(g[None], toks[None], torch.arange(6))[0]
    torch.testing.assert_close(out, ref_eagle3(head.state_dict(), target, g, toks), atol=ATOL, rtol=0)


def test_eagle3_vocab_mapping(target):
    head = random_head(target, "eagle3")
    d2t, t2d = spread_vocab()
    ids = torch.tensor([0, 3, VD - 1])
    assert torch.equal(head.to_target(ids), ids + d2t[ids])
    assert torch.equal(head.draft_ids(), torch.nonzero(t2d)[:, 0])
    p = torch.softmax(torch.randn(2, VD), -1)
    pt = head.target_probs(p)
    assert pt.shape == (2, V) and torch.allclose(pt.sum(-1), torch.ones(2))
    assert torch.equal(pt[:, head.draft_ids()], p) and float(pt[:, ~t2d].abs().sum()) == 0.0


# ---- checkpoints ------------------------------------------------------------------

EAGLE1_KEYS = ["fc.weight", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
               "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
               "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
               "layers.0.post_attention_layernorm.weight"]
EAGLE3_KEYS = ["d2t", "t2d", "fc.weight", "midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight",
               "midlayer.post_attention_layernorm.weight", "midlayer.self_attn.q_proj.weight",
               "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight",
               "midlayer.self_attn.o_proj.weight", "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight",
               "midlayer.mlp.down_proj.weight", "norm.weight", "lm_head.weight"]


def public_state_dict(kind, *, bias=False, embed=None, dtype=torch.float16, seed=5, h=H, v=V):
    """A state dict built key by key in the public layout (not via EagleHead)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.05):
        return (scale * torch.randn(*shape, generator=g)).to(dtype)

    def norm():
        return (1 + 0.2 * torch.randn(h, generator=g)).to(dtype)

    kv, q = NKV * HD, NH * HD
    if kind == "eagle1":
        sd = {"fc.weight": r(h, 2 * h), "layers.0.self_attn.q_proj.weight": r(q, h),
              "layers.0.self_attn.k_proj.weight": r(kv, h), "layers.0.self_attn.v_proj.weight": r(kv, h),
              "layers.0.self_attn.o_proj.weight": r(h, q), "layers.0.mlp.gate_proj.weight": r(I, h),
              "layers.0.mlp.up_proj.weight": r(I, h), "layers.0.mlp.down_proj.weight": r(h, I),
              "layers.0.post_attention_layernorm.weight": norm()}
        if bias:
            sd["fc.bias"] = r(h)
    else:
        d2t, t2d = spread_vocab()
        sd = {"d2t": d2t, "t2d": t2d if v == V else torch.zeros(v, dtype=torch.bool), "fc.weight": r(h, 3 * h),
              "midlayer.hidden_norm.weight": norm(), "midlayer.input_layernorm.weight": norm(),
              "midlayer.post_attention_layernorm.weight": norm(), "midlayer.self_attn.q_proj.weight": r(q, 2 * h),
              "midlayer.self_attn.k_proj.weight": r(kv, 2 * h), "midlayer.self_attn.v_proj.weight": r(kv, 2 * h),
              "midlayer.self_attn.o_proj.weight": r(h, q), "midlayer.mlp.gate_proj.weight": r(I, h),
              "midlayer.mlp.up_proj.weight": r(I, h), "midlayer.mlp.down_proj.weight": r(h, I),
              "norm.weight": norm(), "lm_head.weight": r(VD, h, scale=0.5)}
    if embed is not None:
        sd["embed_tokens.weight"] = embed.to(dtype)
    return sd


def public_config(kind, *, bias=None, h=H, v=V, **extra):
    """config.json as the public checkpoints write it (EAGLE-3: no rope_theta)."""
    c = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
         "hidden_size": h, "initializer_range": 0.02, "intermediate_size": I, "max_position_embeddings": 2048,
         "model_type": "llama", "num_attention_heads": NH, "num_key_value_heads": NKV, "num_hidden_layers": 1,
         "pad_token_id": 0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": "float16",
         "transformers_version": "4.28.1", "use_cache": True, "vocab_size": v}
    if kind == "eagle1":
        c.update(rope_theta=10000.0, rope_scaling=None)
        if bias is not None:
            c["bias"] = bias
    else:
        c["draft_vocab_size"] = VD
    return c | extra


def write_checkpoint(path, sd, cfg, fmt="safetensors"):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    if fmt == "safetensors":
        from safetensors.torch import save_file
        save_file(sd, str(path / "model.safetensors"))
    elif fmt == "sharded":
        from safetensors.torch import save_file
        keys = sorted(sd)
        parts = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
        for name, ks in parts.items():
            save_file({k: sd[k] for k in ks}, str(path / name))
        (path / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {k: n for n, ks in parts.items() for k in ks}}))
    else:
        torch.save(sd, path / "pytorch_model.bin")
    return path


@pytest.mark.parametrize("kind,fmt,bias,with_embed", [
    ("eagle1", "safetensors", True, False), ("eagle1", "bin", False, True), ("eagle1", "bin", True, True),
    ("eagle1", "sharded", False, False), ("eagle3", "safetensors", False, False), ("eagle3", "bin", False, True)])
def test_public_checkpoints_load_and_reproduce(tmp_path, target, kind, fmt, bias, with_embed):
    embed = target.get_input_embeddings().weight.detach().clone() if with_embed else None
    sd = public_state_dict(kind, bias=bias, embed=embed)
    write_checkpoint(tmp_path, sd, public_config(kind, bias=bias if fmt != "sharded" else None), fmt)
    head = EagleHead.from_pretrained(str(tmp_path), target=target).eval()
    assert head.config.kind == kind and head.fc.weight.dtype == torch.float32  # the target's dtype
    assert head.config.rope_theta == 10000.0 and (kind == "eagle3" or head.config.bias == bias)
    torch.manual_seed(4)
    ids = torch.randint(0, V, (10,))
    feats = features(target, ids[:-1], head.config.target_layers)
    with torch.no_grad():
        out = head(feats[None], ids[None, 1:], torch.arange(9))[0]
    ref_sd = {k: v for k, v in sd.items() if k != "embed_tokens.weight"}
    torch.testing.assert_close(out, ref_outputs(ref_sd, target, kind, feats, ids[1:]), atol=ATOL, rtol=0)
    if kind == "eagle3":
        assert torch.equal(head.d2t, sd["d2t"]) and torch.equal(head.t2d, sd["t2d"])
    if with_embed:  # the checkpoint's embedding copy can be used instead of the target's
        h2 = EagleHead.from_pretrained(str(tmp_path), target=target, use_checkpoint_embeddings=True).eval()
        assert "embed_tokens.weight" in h2.state_dict()
        with torch.no_grad():
            out2 = h2(feats[None], ids[None, 1:], torch.arange(9))[0]
        torch.testing.assert_close(out2, ref_outputs(sd, target, kind, feats, ids[1:]), atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_save_load_round_trip(tmp_path, target, kind, dtype):
    head = random_head(target, kind, **({"bias": True} if kind == "eagle1" else {})).to(dtype)
    head.save_pretrained(tmp_path)
    from safetensors import safe_open
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("fc.weight").dtype == dtype
    assert keys == set(EAGLE1_KEYS + ["fc.bias"] if kind == "eagle1" else EAGLE3_KEYS)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["hidden_size"] == H and cfg["vocab_size"] == V
    assert cfg["torch_dtype"] == str(dtype).removeprefix("torch.")
    assert (cfg["draft_vocab_size"] == VD) if kind == "eagle3" else cfg["bias"] is True
    back = EagleHead.from_pretrained(tmp_path, target=target, dtype=dtype)
    assert back.config == head.config
    for (k1, a), (k2, b) in zip(head.state_dict().items(), back.state_dict().items()):
        assert k1 == k2 and a.dtype == b.dtype and torch.equal(a, b)


def test_llama3_rope_round_trip(tmp_path):
    t = make_target(rope_theta=500000.0, rope_scaling=dict(LLAMA3_ROPE))
    head = EagleHead.from_target(t, "eagle1")
    head.save_pretrained(tmp_path)
    back = EagleHead.from_pretrained(tmp_path, target=t)
    assert back.config.rope_scaling == head.config.rope_scaling and back.config.rope_theta == 500000.0
    assert torch.equal(back._inv_freq, head._inv_freq)


@pytest.mark.parametrize("kill_at", range(4))
def test_a_killed_save_leaves_one_whole_checkpoint(tmp_path, target, monkeypatch, kill_at):
    """A save killed at any step (syncing either file, renaming either) loads as the old head or the new one, never
    the new weights under the old config; killed before its marker, it leaves the old pair, after it the new."""
    old = random_head(target, "eagle1", seed=1)
    new = random_head(target, "eagle1", seed=2, rope_theta=500000.0)  # same shapes: a mixed pair would load
    old.save_pretrained(tmp_path)
    steps = []

    def step(real):
        def run(*args):
            if len(steps) == kill_at:
                raise KeyboardInterrupt("killed")
            steps.append(real.__name__)
            return real(*args)
        return run

    with monkeypatch.context() as m:
        m.setattr(loader, "_sync", step(loader._sync))
        m.setattr(loader.os, "replace", step(os.replace))
        with pytest.raises(KeyboardInterrupt):
            new.save_pretrained(tmp_path)
    back = EagleHead.from_pretrained(tmp_path, target=target)
    want = old if kill_at < 2 else new  # the two syncs come before the marker, the two renames after
    assert back.config == want.config
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), want.state_dict().values()))
    assert any(tmp_path.glob(".model.safetensors.*.tmp")) == (kill_at < 2)  # a load leaves a writer's files be
    new.save_pretrained(tmp_path)  # the next save cleans up whatever is left
    assert sorted(f.name for f in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    assert EagleHead.from_pretrained(tmp_path, target=target).config == new.config


def test_a_late_finisher_of_an_old_save_leaves_the_next_save_alone(tmp_path, target, monkeypatch):
    """A load that found an old save's marker and finishes it late, while the next save is writing its files,
    touches only the old save's files: the next save completes, whole."""
    old = random_head(target, "eagle1", seed=1)
    new = random_head(target, "eagle1", seed=2, rope_theta=500000.0)
    old.save_pretrained(tmp_path)
    stale = tmp_path / ".save.0123456789ab.pending"  # the marker of a save that another writer since finished
    sync = loader._sync

    def sync_beside_a_late_load(file):
        if not stale.exists() and not any(tmp_path.glob(".save.*.pending")):
            stale.touch()
            loader._finish_save(tmp_path)  # the late load, between the next save's writes and its marker
        return sync(file)

    monkeypatch.setattr(loader, "_sync", sync_beside_a_late_load)
    new.save_pretrained(tmp_path)
    back = EagleHead.from_pretrained(tmp_path, target=target)
    assert back.config == new.config
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), new.state_dict().values()))
    assert sorted(f.name for f in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


def test_a_cut_save_in_a_folder_that_cannot_be_finished_is_named(tmp_path, target, monkeypatch):
    """A marker whose renames fail (a read-only folder) is an OSError naming the folder, not a mixed pair."""
    random_head(target, "eagle1", seed=1).save_pretrained(tmp_path)
    (tmp_path / ".model.safetensors.0123456789ab.tmp").write_bytes(b"x")
    (tmp_path / ".save.0123456789ab.pending").touch()

    def read_only(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(loader.os, "replace", read_only)
    with pytest.raises(OSError, match="a save of this EAGLE head was cut short .*Permission denied"):
        EagleHead.from_pretrained(tmp_path, target=target)


def _load_error(tmp_path, target, kind, sd, cfg) -> str:
    write_checkpoint(tmp_path, sd, cfg)
    with pytest.raises(ValueError) as e:
        EagleHead.from_pretrained(tmp_path, target=target)
    return str(e.value)


def test_bad_checkpoints_raise_naming_the_key(tmp_path, target):
    # a head for a target of another hidden size
    small = public_state_dict("eagle1", h=32)
    msg = _load_error(tmp_path / "a", target, "eagle1", small, public_config("eagle1", h=32))
    assert "fc.weight" in msg and "[32, 64]" in msg and "[64, 128]" in msg
    # another vocabulary (embedding copy / t2d)
    sd = public_state_dict("eagle1", embed=torch.zeros(V + 3, H))
    msg = _load_error(tmp_path / "b", target, "eagle1", sd, public_config("eagle1"))
    assert "embed_tokens.weight" in msg and str([V + 3, H]) in msg and str([V, H]) in msg
    msg = _load_error(tmp_path / "c", target, "eagle3", public_state_dict("eagle3", v=V + 1),
                      public_config("eagle3", v=V + 1))
    assert "vocab_size" in msg and str(V + 1) in msg
    msg = _load_error(tmp_path / "c2", target, "eagle3", public_state_dict("eagle3", v=V + 1), public_config("eagle3"))
    assert "'t2d'" in msg and str([V + 1]) in msg
    # missing, unexpected, wrongly shaped keys
    sd = public_state_dict("eagle1")
    del sd["layers.0.mlp.up_proj.weight"]
    assert "layers.0.mlp.up_proj.weight" in _load_error(tmp_path / "d", target, "eagle1", sd, public_config("eagle1"))
    sd = public_state_dict("eagle1") | {"layers.0.input_layernorm.weight": torch.ones(H, dtype=torch.float16)}
    assert "layers.0.input_layernorm.weight" in _load_error(tmp_path / "e", target, "eagle1", sd,
                                                            public_config("eagle1"))
    sd = public_state_dict("eagle3")
    sd["midlayer.self_attn.k_proj.weight"] = sd["midlayer.self_attn.k_proj.weight"][:, :H].contiguous()
    msg = _load_error(tmp_path / "f", target, "eagle3", sd, public_config("eagle3"))
    assert "midlayer.self_attn.k_proj.weight" in msg and str([NKV * HD, H]) in msg and str([NKV * HD, 2 * H]) in msg
    # config says there is an fc bias, the weights have none
    msg = _load_error(tmp_path / "g", target, "eagle1", public_state_dict("eagle1"), public_config("eagle1", bias=True))
    assert "fc.bias" in msg
    # d2t pointing outside the vocabulary
    sd = public_state_dict("eagle3")
    sd["d2t"] = sd["d2t"] + V
    assert "d2t" in _load_error(tmp_path / "h", target, "eagle3", sd, public_config("eagle3"))
    # t2d marking other ids than d2t maps to, and d2t not increasing
    sd = public_state_dict("eagle3")
    sd["t2d"] = torch.zeros_like(sd["t2d"])
    assert "t2d" in _load_error(tmp_path / "h2", target, "eagle3", sd, public_config("eagle3"))
    sd = public_state_dict("eagle3")
    sd["d2t"] = sd["d2t"].flip(0) + torch.arange(VD).flip(0) - torch.arange(VD)  # the same ids, decreasing
    assert "increasing" in _load_error(tmp_path / "h3", target, "eagle3", sd, public_config("eagle3"))
    # EAGLE-3 layer ids beyond the target's hidden states
    L = target.config.num_hidden_layers
    cfg = public_config("eagle3", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, L + 1]})
    msg = _load_error(tmp_path / "h4", target, "eagle3", public_state_dict("eagle3"), cfg)
    assert "eagle_aux_hidden_state_layer_ids" in msg and str(L + 1) in msg
    # not an EAGLE checkpoint at all
    assert "EAGLE" in _load_error(tmp_path / "i", target, "eagle1", {"w": torch.zeros(2)}, public_config("eagle1"))


@pytest.mark.parametrize("extra,words", [
    ({"num_attention_heads": 0}, ["num_attention_heads", "0"]), ({"num_attention_heads": "4"}, ["num_attention_heads"]),
    ({"rms_norm_eps": None}, ["rms_norm_eps", "None"]), ({"rms_norm_eps": "1e-6"}, ["rms_norm_eps"]),
    ({"rope_theta": "abc"}, ["rope_theta", "abc"]), ({"rope_theta": float("inf")}, ["rope_theta"]),
    ({"rope_scaling": dict(LLAMA3_ROPE, low_freq_factor=0)}, ["low_freq_factor"]),
    ({"rope_scaling": dict(LLAMA3_ROPE, factor="8")}, ["factor"]), ({"bias": "false"}, ["bias", "false"])])
def test_bad_config_values_raise_naming_the_key(tmp_path, target, extra, words):
    """A config.json value of the wrong type or range is named (no ZeroDivisionError or TypeError)."""
    msg = _load_error(tmp_path, target, "eagle1", public_state_dict("eagle1"), public_config("eagle1") | extra)
    assert all(w in msg for w in words), msg


@pytest.mark.parametrize("content", [[torch.zeros(2)], torch.zeros(3), {"fc.weight": 3}, {0: torch.zeros(2)}])
def test_weights_file_that_is_not_a_state_dict_is_named(tmp_path, target, content):
    (tmp_path / "config.json").write_text(json.dumps(public_config("eagle1")))
    torch.save(content, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pytorch_model.bin holds a .*, not a state dict"):
        EagleHead.from_pretrained(tmp_path, target=target)


def test_every_missing_and_unexpected_key_in_one_error(tmp_path, target):
    sd = public_state_dict("eagle1")
    del sd["layers.0.mlp.up_proj.weight"], sd["layers.0.mlp.down_proj.weight"]
    sd["model.norm.weight"] = torch.ones(H, dtype=torch.float16)
    sd["layers.0.mlp.gate_proj.weight"] = sd["layers.0.mlp.gate_proj.weight"][:, :3].contiguous()
    msg = _load_error(tmp_path, target, "eagle1", sd, public_config("eagle1"))
    for key in ("layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight", "model.norm.weight",
                "layers.0.mlp.gate_proj.weight"):
        assert key in msg, msg


def test_draft_vocab_dtypes_are_normalised_or_refused(tmp_path, target):
    """int32/uint8 d2t/t2d load as int64/bool (a float d2t would round to other ids in bf16: refused), and
    set_draft_vocab checks as the loader does."""
    sd = public_state_dict("eagle3")
    sd["d2t"], sd["t2d"] = sd["d2t"].to(torch.int32), sd["t2d"].to(torch.uint8)
    write_checkpoint(tmp_path / "a", sd, public_config("eagle3"))
    head = EagleHead.from_pretrained(tmp_path / "a", target=target, dtype=torch.bfloat16)
    assert head.d2t.dtype == torch.int64 and head.t2d.dtype == torch.bool
    assert torch.equal(head.draft_ids(), spread_vocab()[1].nonzero().flatten())
    sd["d2t"] = sd["d2t"].float()
    assert "'d2t' must be a 1-D integer tensor" in _load_error(tmp_path / "b", target, "eagle3", sd,
                                                               public_config("eagle3"))
    d2t, t2d = spread_vocab()
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        head.set_draft_vocab(d2t + V, t2d)
    with pytest.raises(ValueError, match="integer"):
        head.set_draft_vocab(d2t.float(), t2d)
    with pytest.raises(ValueError, match="'t2d' marks"):
        head.set_draft_vocab(d2t, torch.zeros_like(t2d))


def test_hub_failure_is_wrapped(monkeypatch, tmp_path):
    import huggingface_hub

    def offline(*a, **k):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(OSError, match="someone/some-eagle-head"):
        loader.resolve("someone/some-eagle-head")
    with pytest.raises(FileNotFoundError):
        loader.resolve(str(tmp_path / "missing" / "dir" / "x"))


# ---- drafter ------------------------------------------------------------------------

def sequence(target, T, seed=6):
    torch.manual_seed(seed)
    return torch.randint(0, V, (T,))


def observe_all(drafter, target, ids, chunks):
    """reset + observe ``ids`` (the last one not fed to the target) in chunks of the given sizes."""
    feats = features(target, ids[:-1], drafter.hidden_layers)
    drafter.reset(int(chunks[0]))
    p = 0
    for n in chunks:
        drafter.observe(feats[p:p + n], ids[p + 1:p + 1 + n])
        p += n
    assert p == len(ids) - 1
    return feats


def req(ids, budget=8, temperature=0.0, generator=None):
    return ProposeRequest(tokens=ids.numpy().astype(np.int64), budget=budget, temperature=temperature,
                          generator=generator)


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_drafter_greedy_matches_slow_reference(target, kind):
    head = random_head(target, kind)
    d = EagleDrafter(head, k=4)
    assert d.name == kind and d.max_tokens == 4
    assert d.hidden_layers == head.config.target_layers
    ids = sequence(target, 12)
    feats = observe_all(d, target, ids, [11])
    drafts = d.propose(req(ids))
    assert len(drafts) == 1 and drafts[0].source == d.name and drafts[0].probs is None
    tokens = drafts[0].tokens
    assert tokens.dtype == torch.int64 and tokens.shape == (4,)
    ref, _ = ref_greedy_chain(head, target, feats, ids[1:], 4)
    assert tokens.tolist() == ref
    if kind == "eagle3":
        assert bool(head.t2d[tokens].all())  # drafted ids come from the draft vocabulary, mapped by d2t


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_drafter_chunked_observe_equals_all_at_once(target, kind):
    head = random_head(target, kind)
    ids = sequence(target, 20, seed=7)
    a, b = EagleDrafter(head, k=3), EagleDrafter(head, k=3)
    # a: prefill, propose, two verification steps without EAGLE proposals, one more chunk
    feats = features(target, ids[:-1], a.hidden_layers)
    a.reset(8)
    a.observe(feats[:8], ids[1:9])
    a.propose(req(ids[:9]))
    a.observe(feats[8:11], ids[9:12])  # no propose: the hybrid used another draft
    a.observe(feats[11:12], ids[12:13])
    a.propose(req(ids[:13], budget=0))  # a zero budget drafts nothing and computes nothing
    a.observe(feats[12:19], ids[13:20])
    da = a.propose(req(ids))
    # b: everything at once
    observe_all(b, target, ids, [19])
    db = b.propose(req(ids))
    assert da[0].tokens.tolist() == db[0].tokens.tolist()
    assert a.committed == b.committed == 19
    torch.testing.assert_close(a.cache.keys[0][:, :, :19], b.cache.keys[0][:, :, :19], atol=ATOL, rtol=0)
    torch.testing.assert_close(a.cache.values[0][:, :, :19], b.cache.values[0][:, :, :19], atol=ATOL, rtol=0)
    ref, _ = ref_greedy_chain(head, target, feats, ids[1:], 3)
    assert da[0].tokens.tolist() == ref
    # reset starts a new sequence from scratch
    observe_all(a, target, ids[:10], [9])
    assert a.propose(req(ids[:10]))[0].tokens.tolist() == ref_greedy_chain(head, target, feats[:9], ids[1:10], 3)[0]


def test_drafter_budget_and_edge_cases(target):
    head = random_head(target, "eagle1")
    d = EagleDrafter(head, k=3)
    with pytest.raises(ValueError):
        EagleDrafter(head, k=0)
    ids = sequence(target, 9)
    d.reset(8)
    assert d.propose(req(ids)) == []  # nothing observed yet
    observe_all(d, target, ids, [8])
    assert d.propose(req(ids, budget=0)) == []
    assert len(d.propose(req(ids, budget=2))[0]) == 2
    assert len(d.propose(req(ids, budget=1))[0]) == 1
    full = d.propose(req(ids, budget=50))[0]
    assert len(full) == 3
    assert d.propose(req(ids, budget=2))[0].tokens.tolist() == full.tokens[:2].tolist()
    with pytest.raises(ValueError):
        d.observe(None, ids[:1])
    with pytest.raises(ValueError):  # EAGLE-1 reads one layer: [m, H]
        d.observe(torch.zeros(1, 3 * H), ids[:1])


def test_drafter_grows_cache(target):
    head = random_head(target, "eagle1")
    d = EagleDrafter(head, k=2)
    d.reset(4)
    d.cache = head.alloc_cache(8)  # force a tiny cache; propose must grow it, keeping committed entries
    ids = sequence(target, 30, seed=9)
    feats = features(target, ids[:-1], d.hidden_layers)
    d.observe(feats[:5], ids[1:6])
    d.propose(req(ids[:6]))
    d.observe(feats[5:], ids[6:])
    out = d.propose(req(ids))[0].tokens.tolist()
    assert d.cache.capacity >= 31
    assert out == ref_greedy_chain(head, target, feats, ids[1:], 2)[0]


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_drafter_sampling(target, kind):
    head = random_head(target, kind)
    ids = sequence(target, 10, seed=8)
    temp = 1.5

    def draw(seed):
        d = EagleDrafter(head, k=3)
        feats = observe_all(d, target, ids, [9])
        g = torch.Generator().manual_seed(seed)
        return d.propose(req(ids, temperature=temp, generator=g))[0], feats

    a, feats = draw(0)
    b, _ = draw(0)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.probs, b.probs)
    assert a.probs.shape == (3, V) and a.probs.dtype == torch.float32
    torch.testing.assert_close(a.probs.sum(-1), torch.ones(3), atol=1e-5, rtol=0)
    assert bool((a.probs[torch.arange(3), a.tokens] > 0).all())
    if kind == "eagle3":
        assert float(a.probs[:, ~head.t2d].abs().sum()) == 0.0
    # the first row is the tempered head distribution at the last committed pair
    sd = head.state_dict()
    out = ref_outputs(head, target, kind, feats, ids[1:])[-1]
    logits = target.lm_head(out) if kind == "eagle1" else ref_logits3(sd, out)
    p0 = torch.softmax(logits / temp, -1)
    torch.testing.assert_close(a.probs[0], head.target_probs(p0), atol=1e-5, rtol=0)
    # different seeds eventually draw differently; draws follow the distribution
    draws = torch.stack([draw(s)[0].tokens[0] for s in range(40)])
    assert len(set(draws.tolist())) > 1
    assert bool((head.target_probs(p0)[draws] > 0).all())
