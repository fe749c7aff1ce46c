"""The slot-addressed KV cache and the target adapter's tree pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import prompts
from hybridsd.generate import _tree_layout
from hybridsd.kv_cache import SLOT_ALIGN, StaticKVCache
from hybridsd.target import Target


def test_write_rewind_move():
    kv = StaticKVCache(2, 3, 4, 10)
    assert kv.capacity == SLOT_ALIGN  # rounded up
    k = torch.randn(1, 3, 5, 4)
    v = torch.randn(1, 3, 5, 4)
    keys, values = kv.write(1, torch.arange(2, 7), k, v)
    assert keys.shape == (1, 3, SLOT_ALIGN, 4)
    torch.testing.assert_close(keys[:, :, 2:7], k)
    kv.move(torch.tensor([5, 6]), torch.tensor([3, 4]))  # overlapping ranges are safe
    torch.testing.assert_close(kv.keys[1][:, :, 3:5], k[:, :, 3:5])
    torch.testing.assert_close(kv.values[1][:, :, 3:5], v[:, :, 3:5])
    kv.rewind(4)
    assert kv.length == 4
    with pytest.raises(ValueError, match="rewind"):
        kv.rewind(SLOT_ALIGN + 1)
    with pytest.raises(ValueError, match="capacity"):
        StaticKVCache(1, 1, 1, 0)


def test_tree_pass_equals_separate_chains(target):
    """Two branches in one pass give the logits each branch gets alone."""
    ids = prompts(2)[1]
    n = ids.numel()
    a, b = torch.tensor([5, 6, 7]), torch.tensor([9, 10])
    t = Target(target, 64)
    t.forward(ids[:-1], 0)
    positions, visible, offsets = _tree_layout([3, 2], n - 1)
    tree, _ = t.forward(torch.cat([ids[-1:], a, b]), n - 1, positions=positions, visible=visible)
    for branch, o in zip((a, b), offsets):
        with torch.no_grad():
            full = target(torch.cat([ids, branch])[None]).logits[0, n - 1 :]
        rows = np.r_[0, o : o + len(branch)]
        torch.testing.assert_close(tree[rows], full, atol=1e-4, rtol=1e-4)


def test_overflow_is_an_error(target):
    t = Target(target, 8)
    assert t.capacity == SLOT_ALIGN
    with pytest.raises(ValueError, match="overflow"):
        t.forward(torch.arange(SLOT_ALIGN + 1) % 50, 0)


@pytest.mark.parametrize("capacity", [1, 63, 64, 65, 1000, 2283, 5000])
def test_spans_are_aligned_and_cover(capacity):
    kv = StaticKVCache(1, 1, 1, capacity)
    assert kv.capacity % SLOT_ALIGN == 0 and capacity <= kv.capacity < capacity + SLOT_ALIGN
    for n in range(1, capacity + 1, 7):
        s = kv.span(n)
        assert n <= s <= kv.capacity and s % SLOT_ALIGN == 0


@pytest.mark.parametrize("q", [1, 4, 9])
def test_decoder_equals_hf_forward(target, q):
    """Our decoder gives HF's logits and every ``hidden_states`` index, for prefill, chains and trees."""
    ids = prompts(3)[2]
    n = ids.numel()
    L = target.config.num_hidden_layers
    layers = (0, 1, L // 2, L - 1, L, -1)
    block = torch.arange(3, 3 + q)
    positions, visible, _ = _tree_layout([q - 1], n) if q > 1 else (None, None, None)
    outs = []
    for fused in (True, False):
        t = Target(target, 64, decoder=fused)
        assert (t.decoder is not None) == fused
        last, h0 = t.forward(ids, 0, hidden_layers=layers, last_logits_only=True)
        outs.append((last, h0, *t.forward(block, n, positions=positions, visible=visible, hidden_layers=layers)))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert outs[0][1].shape == (n, len(layers) * target.config.hidden_size)


def test_decoder_needs_a_known_family(target):
    target.config.model_type, old = "gemma", target.config.model_type
    try:
        assert Target(target, 8).decoder is None  # falls back to model(...)
        with pytest.raises(ValueError, match="decoder=True"):
            Target(target, 8, decoder=True)
    finally:
        target.config.model_type = old


@pytest.mark.parametrize("drafter", [None, "oracle"])
def test_sliding_window_models_run_up_to_their_window(drafter):
    """Sliding attention is not implemented: a sequence whose fed positions stay inside the window decodes as HF
    does (whatever the cache's headroom for drafts; drafts accepted up to the last step), a longer one is refused
    before any work, and the target refuses a block past the window."""
    from transformers import MistralConfig, MistralForCausalLM

    from conftest import OracleDrafter, hf_greedy
    from hybridsd.generate import generate

    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, sliding_window=16)
    model = MistralForCausalLM(cfg).eval()
    ids = torch.tensor([3, 9, 3, 9, 3, 9])
    want = hf_greedy(model, ids, 11)
    make = (lambda: OracleDrafter(want, 5, err=0.2, vocab=64)) if drafter else (lambda: None)
    res = generate(model, ids, make(), max_new_tokens=11, eos_token_id=[])  # positions 0..15 fed
    assert res.tokens == want
    if drafter:  # the model's output never repeats, so an n-gram drafter would not draft at all
        assert res.stats.num_accepted > 0 and res.stats.trace[-1].drafted > 0, res.stats.trace
    with pytest.raises(ValueError, match="sliding attention window"):
        generate(model, ids, make(), max_new_tokens=12, eos_token_id=[])
    t = Target(model, 32)
    t.forward(torch.arange(16), 0)
    with pytest.raises(ValueError, match="sliding-window"):
        t.forward(torch.tensor([1]), 16)


def test_the_hf_view_reports_the_committed_length(target):
    t = Target(target, 32, decoder=False)
    t.forward(torch.arange(5), 0)
    t.forward(torch.tensor([7, 8]), 5)
    assert t._cache.get_seq_length() == 5 and t.kv.length == 5


def test_unknown_attention_kernel_is_refused(target):
    with pytest.raises(ValueError, match="attention must be one of"):
        Target(target, 8, decoder=False, attention="flash")


def test_compile_modes_with_their_own_graphs_are_refused(target):
    with pytest.raises(ValueError, match="no-cudagraphs"):
        Target(target, 8, compile="reduce-overhead")


def test_cuda_graphs_on_the_cpu_are_refused(target):
    """A CPU target asked for CUDA graphs says so instead of running without them."""
    with pytest.raises(ValueError, match="cuda_graphs=True needs a CUDA model, but the model is on cpu"):
        Target(target, 8, cuda_graphs=True)
    assert not Target(target, 8, cuda_graphs=False).cuda_graphs
