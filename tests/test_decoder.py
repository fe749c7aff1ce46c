"""Our Llama-family decoder against the HF modules it replaces, on awkward shapes and every family."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import prompts, tiny_target
from hybridsd.decoder import Decoder, LayerWeights, make_layer, rms_norm
from hybridsd.generate import _tree_layout
from hybridsd.target import Target

SHAPES = {  # name: (family, overrides)
    "llama-gqa3": ("llama", dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2)),
    "llama-mha-bias": ("llama", dict(num_key_value_heads=4, attention_bias=True, mlp_bias=True)),
    "llama-mqa-headdim": ("llama", dict(num_key_value_heads=1, head_dim=24)),
    "llama3-rope": ("llama", dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 64})),
    "qwen2-bias": ("qwen2", {}),
    "qwen3-qknorm": ("qwen3", dict(head_dim=16)),
    "mistral": ("mistral", dict(sliding_window=None)),
}


def _model(name: str, layers: int = 3):
    family, kw = SHAPES[name]
    try:
        return tiny_target(family, seed=5, layers=layers, **kw)
    except (TypeError, ValueError) as e:  # a config key this transformers version spells differently
        pytest.skip(f"{name}: {e}")


@pytest.mark.parametrize("name", list(SHAPES))
def test_decoder_matches_hf_step_by_step(name):
    """Prefill, a tree block and single steps: the same logits and hidden states as ``model(...)``."""
    model = _model(name)
    L = model.config.num_hidden_layers
    ids = prompts(5, seed=2)[4]
    n = ids.numel()
    outs = []
    for fused in (True, False):
        t = Target(model, 96, decoder=fused)
        assert (t.decoder is not None) == fused
        got = [t.forward(ids, 0, hidden_layers=(0, L, -1), last_logits_only=True)]
        positions, visible, _ = _tree_layout([3, 2], n)
        got.append(t.forward(torch.tensor([4, 5, 6, 7, 8, 9]), n, positions=positions, visible=visible,
                             hidden_layers=(1, L - 1)))
        for j in range(5):  # awkward, unaligned lengths
            got.append(t.forward(torch.tensor([10 + j]), n + j, hidden_layers=(L,)))
        outs.append(got)
    for (la, ha), (lb, hb) in zip(*outs):
        torch.testing.assert_close(la, lb, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ha, hb, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("layers", [(4,), (0, -5), (1, 9)])
def test_hidden_layers_outside_the_model_are_refused(fused, layers):
    """Three layers: hidden states 0..3 (or -4..-1); 4 or -5 is none of them (modulo 4 it would name another)."""
    t = Target(_model("llama-gqa3"), 32, decoder=fused)
    with pytest.raises(ValueError, match=r"outside the model's -4..3 \(3 layers"):
        t.forward(torch.tensor([1, 2, 3]), 0, hidden_layers=layers)
    logits, hidden = t.forward(torch.tensor([1, 2, 3]), 0, hidden_layers=(-4, 3))
    assert hidden.shape == (3, 2 * 48)


def test_fusing_keeps_the_model_and_its_memory(tmp_path):
    """After fusing, ``model(...)`` gives the same output, and q/k/v, gate/up live inside the fused tensors."""
    model = _model("qwen2-bias", layers=2)
    ids = prompts(3)[2][None]
    with torch.no_grad():
        before = model(ids).logits
    with torch.inference_mode():  # as inside generate(): the fused tensors must still be plain tensors
        dec = Decoder(model)
    with torch.no_grad():
        after = model(ids).logits
    torch.testing.assert_close(before, after, atol=0, rtol=0)
    a, w = model.model.layers[1].self_attn, dec.weights[1]
    for m in (a.q_proj, a.k_proj, a.v_proj):
        assert m.weight.untyped_storage().data_ptr() == w.wqkv.untyped_storage().data_ptr()
        assert m.bias.untyped_storage().data_ptr() == w.bqkv.untyped_storage().data_ptr()
    assert Decoder(model).weights[1].wqkv is w.wqkv  # fused once per model
    model(ids).logits.sum().backward()  # the model still trains
    assert a.k_proj.weight.grad is not None and a.k_proj.weight.grad.shape == a.k_proj.weight.shape
    model.zero_grad()
    model.save_pretrained(tmp_path)  # and saves and loads as before
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(tmp_path)(ids).logits, before)


def test_fused_weights_follow_the_model_to_a_new_dtype():
    """``model.to(...)`` replaces the modules' weights; the next decoder fuses the new ones."""
    model = _model("llama-gqa3", layers=2)
    ids = prompts(3)[2]
    Target(model, 64).forward(ids, 0, last_logits_only=True)
    model.to(torch.float64)
    logits, _ = Target(model, 64).forward(ids, 0, last_logits_only=True)
    with torch.no_grad():
        ref = model(ids[None]).logits[0, -1:]
    assert logits.dtype == torch.float32 and model.model.layers[0].self_attn.q_proj.weight.dtype == torch.float64
    torch.testing.assert_close(logits, ref.float(), atol=1e-6, rtol=1e-6)


def _replace_out_projections(model):
    for layer in model.model.layers:  # new o_proj / down_proj parameters, q/k/v and gate/up untouched
        layer.self_attn.o_proj.weight = torch.nn.Parameter(torch.randn_like(layer.self_attn.o_proj.weight) * 0.2)
        layer.mlp.down_proj.weight = torch.nn.Parameter(torch.randn_like(layer.mlp.down_proj.weight) * 0.2)


@pytest.mark.parametrize("change", ["assign another model's weights", "replace output projections",
                                    "load in place"])
@pytest.mark.parametrize("drafter", [None, "ngram"])
def test_generate_follows_weights_replaced_between_calls(change, drafter):
    """The model's target (cache, fused layers, graphs) is reused across calls, but not over replaced weights:
    after each change, output equals HF's greedy output of the model as it now is."""
    from conftest import hf_greedy
    from hybridsd.drafters.ngram import NgramDrafter
    from hybridsd.generate import generate

    model, other = tiny_target("llama", seed=0), tiny_target("llama", seed=3)
    ids = prompts(1)[0]
    make = (lambda: NgramDrafter(k=3, min_n=1, max_n=3)) if drafter else (lambda: None)
    assert generate(model, ids, make(), max_new_tokens=24, eos_token_id=[]).tokens == hf_greedy(model, ids, 24)
    torch.manual_seed(5)
    if change == "assign another model's weights":
        model.load_state_dict(other.state_dict(), assign=True)
    elif change == "replace output projections":
        _replace_out_projections(model)
    else:
        model.load_state_dict(other.state_dict())
    want = hf_greedy(model, ids, 24)
    assert want != hf_greedy(tiny_target("llama", seed=0), ids, 24)
    assert generate(model, ids, make(), max_new_tokens=24, eos_token_id=[]).tokens == want


def _reference_attention(q, k, v, allowed, scale):
    """Attention per query head with its KV head repeated: ``q`` ``[T, Hq, D]``, ``k, v`` ``[S, Hkv, D]``."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = torch.einsum("thd,shd->hts", q, k) * scale
    s = s.masked_fill(~allowed, float("-inf")).softmax(-1)
    return torch.einsum("hts,shd->thd", s, v)


@pytest.mark.parametrize("t,s,hq,hkv", [(1, 7, 4, 2), (5, 13, 6, 3), (9, 33, 8, 1), (3, 3, 2, 2)])
def test_grouped_attention_against_repeated_heads(t, s, hq, hkv):
    """A layer with identity projections isolates attention: grouped layout == repeated KV heads."""
    torch.manual_seed(t * 100 + s)
    d = 4
    h = hq * d
    layer = make_layer(hq, hkv, d, 1e-6, torch.nn.functional.silu)
    # weights: q/k/v read the normed input directly; o and the MLP are zero, so x_out = x + attention
    wq = torch.eye(h)
    wk, wv = torch.randn(hkv * d, h), torch.randn(hkv * d, h)
    w = LayerWeights(torch.ones(h), torch.cat([wq, wk, wv]), None, torch.eye(h), None, None, None,
                     torch.ones(h), torch.zeros(2 * 8, h), None, torch.zeros(h, 8), None)
    kc, vc = torch.randn(1, hkv, s, d), torch.randn(1, hkv, s, d)
    x = torch.randn(t, h)
    allowed = torch.rand(t, s) < 0.6
    allowed[:, 0] = True
    slots = torch.arange(s - t, s)
    cos, sin = torch.ones(t, d), torch.zeros(t, d)
    out = layer(x, w, kc, vc, slots, cos, sin, allowed, s)
    xn = rms_norm(x, torch.ones(h), 1e-6)
    q = xn.view(t, hq, d)
    ref = _reference_attention(q, kc[0].transpose(0, 1), vc[0].transpose(0, 1), allowed, d**-0.5)
    torch.testing.assert_close(out - x, ref.reshape(t, h), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(kc[0, :, slots].transpose(0, 1).numpy(), (xn @ wk.T).view(t, hkv, d).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_split_kernel_needs_cuda():
    with pytest.raises(ValueError, match="split"):
        Decoder(_model("llama-gqa3", layers=1), attention="split")
    with pytest.raises(ValueError, match="attention"):
        make_layer(4, 2, 8, 1e-6, torch.nn.functional.silu, attention="paged")
