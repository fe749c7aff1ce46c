"""Exact mode: a position's logits and hidden states are bit-identical however it is verified (decoded alone,
inside a chain, in either branch of a tree), so greedy speculative output equals plain output in bf16 too."""

from __future__ import annotations

import collections
import copy
import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from conftest import VOCAB, OracleDrafter, interpreter_env, prompts, tiny_target, train_heads
from hybridsd.drafters.eagle import EagleDrafter
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramDrafter
from hybridsd.eagle.model import EagleHead
from hybridsd.generate import _tree_layout, generate
from hybridsd.target import EXACT_ROWS, Target, exact_layout, view_region

LAYERS = (-1, 0, 1)  # logits plus the final, embedding and a middle hidden state


@pytest.fixture(scope="module", params=[("llama", torch.float32), ("llama", torch.bfloat16),
                                        ("qwen2", torch.bfloat16)], ids=lambda p: f"{p[0]}-{str(p[1])[6:]}")
def model(request):
    family, dtype = request.param
    return tiny_target(family, seed=3, layers=2).to(dtype)


def _decoded(target: Target, seq: torch.Tensor, n: int) -> tuple[list, list, list]:
    """Logits and hidden states of positions ``n ..`` of ``seq``, each computed as a one-token step, and the
    KV cache after them (each step's padding rows overwrite the slots after it: a verify step is checked from
    that cache, as ``generate`` would have it)."""
    target.forward(seq[:n], 0, last_logits_only=True)
    logits, hidden, caches = [], [], []
    for i in range(n, seq.numel()):
        caches.append([c.clone() for c in (*target.kv.keys, *target.kv.values)])
        lg, h = target.forward(seq[i : i + 1], i, hidden_layers=LAYERS)
        logits.append(lg[0].clone())
        hidden.append(h[0].clone())
    return logits, hidden, caches


def _restore(target: Target, cache: list) -> None:
    for c, saved in zip((*target.kv.keys, *target.kv.values), cache):
        c.copy_(saved)


def _same(got_logits, got_hidden, logits, hidden, rows, where):
    for r, i in enumerate(rows):
        assert torch.equal(got_logits[r], logits[i]), (where, r)
        assert torch.equal(got_hidden[r], hidden[i]), (where, r)


@pytest.mark.parametrize("rows", [EXACT_ROWS, 23])
def test_position_is_bit_identical_in_any_block(model, rows):
    """Decode every position alone, then verify the same tokens in chains of every size and in trees whose
    true branch comes first or second (its slots then shifted): every row equals its decode step bit for bit."""
    rng = np.random.default_rng(0)
    n, extra = 21, 14
    seq = torch.as_tensor(rng.integers(3, VOCAB, n + extra), dtype=torch.long)
    target = Target(model, n + extra + rows, exact=rows)
    logits, hidden, caches = _decoded(target, seq, n)
    for q in (1, 2, 5, 9, min(rows, extra)):
        for start in (n, n + 3):
            if start + q > seq.numel():
                continue
            _restore(target, caches[start - n])
            lg, h = target.forward(seq[start : start + q], start, hidden_layers=LAYERS)
            _same(lg, h, logits, hidden, range(start - n, start - n + q), ("chain", q, start))
    for wrong, right in ((3, 4), (1, 6), (6, 2), (7, 7)):
        if 1 + wrong + right > rows:
            continue
        start = n + 2
        bad = torch.as_tensor(rng.integers(3, VOCAB, wrong), dtype=torch.long)
        good = seq[start + 1 : start + 1 + right]
        for order in ((bad, good), (good, bad)):
            positions, visible, offsets = _tree_layout([len(b) for b in order], start)
            block = torch.cat([seq[start : start + 1], *order])
            _restore(target, caches[start - n])
            lg, h = target.forward(block, start, positions=positions, visible=visible, hidden_layers=LAYERS)
            o = offsets[0] if order[0] is good else offsets[1]
            rows_of_good = [0] + list(range(o, o + right))
            _same(lg[rows_of_good], h[rows_of_good], logits, hidden, range(start - n, start - n + 1 + right),
                  ("tree", wrong, right, o))


KS = [1, 2, 3, 5, 8]
N_NEW = 24
PROMPTS = prompts(2, seed=4)


@functools.cache
def _trained_heads(family: str) -> dict[str, EagleHead]:
    """EAGLE-1 and EAGLE-3 heads trained (30 CPU steps) on the fp32 target's greedy continuations of ``PROMPTS``."""
    return train_heads(tiny_target(family, seed=3, layers=2), PROMPTS, N_NEW, steps=30)


def _drafters(k: int, reference: list[int], heads: dict) -> dict:
    """Every drafter kind and policy at draft length k."""
    eagle = {f"ngram-{kind}-{policy}": HybridDrafter(NgramDrafter(k=k, min_n=1, max_n=3), EagleDrafter(head, k=k),
                                                     policy)
             for kind, head in heads.items() for policy in ("prefer-ngram", "tree")}
    return {
        **eagle,
        "eagle1": EagleDrafter(heads["eagle1"], k=k),
        "eagle3": EagleDrafter(heads["eagle3"], k=k),
        "ngram": NgramDrafter(k=k, min_n=1, max_n=4),
        "oracle": OracleDrafter(reference, k, err=0.25),
        "tree-oracles": HybridDrafter(OracleDrafter(reference, k, 0.5, "a", 1),
                                      OracleDrafter(reference, k, 0.5, "b", 2), "tree"),
    }


def test_greedy_equals_plain_in_exact_mode(model):
    """bf16 included: every drafter, policy and k gives plain decoding's tokens (same ``exact`` rows); the whole
    k grid on llama in bf16, its ends on the others. Every drafter, and each child of a hybrid, gets tokens
    accepted (the EAGLE heads are trained on these prompts), so accepted blocks of every kind are checked."""
    heads = {kind: copy.deepcopy(head).to(model.dtype)
             for kind, head in _trained_heads(model.config.model_type).items()}
    full = model.config.model_type == "llama" and model.dtype == torch.bfloat16
    accepted = collections.Counter()  # (drafter, step source) -> tokens accepted
    for ids in PROMPTS if full else PROMPTS[1:]:
        plain = {}
        for k in KS if full else (KS[0], KS[-1]):
            rows = max(EXACT_ROWS, 2 * k + 1)  # a two-branch tree of k tokens each, plus the newest token
            if rows not in plain:
                plain[rows] = generate(model, ids, max_new_tokens=N_NEW, eos_token_id=[], exact=rows).tokens
            for name, drafter in _drafters(k, plain[rows], heads).items():
                res = generate(model, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[], exact=rows)
                assert res.tokens == plain[rows], (name, k, rows)
                res.stats.check()
                for step in res.stats.trace:
                    accepted[name, step.source] += step.accepted
    sources = {"oracle": ["oracle"], "tree-oracles": ["a", "b"], "eagle1": ["eagle1"], "eagle3": ["eagle3"],
               "ngram": ["ngram"], **{f"ngram-{kind}-{policy}": ["ngram", kind] for kind in heads
                                      for policy in ("prefer-ngram", "tree")}}
    assert {(name, src): accepted[name, src] for name, srcs in sources.items() for src in srcs
            if accepted[name, src] == 0} == {}, accepted


def test_exact_mode_errors():
    model = tiny_target("llama", layers=1)
    ids = torch.tensor([5, 6, 7])
    with pytest.raises(ValueError, match="exact=4"):
        generate(model, ids, drafter=NgramDrafter(k=5), max_new_tokens=8, exact=4)
    with pytest.raises(ValueError, match="exact"):
        generate(model, ids, max_new_tokens=8, exact=0)
    with pytest.raises(TypeError, match="exact"):
        generate(model, ids, max_new_tokens=8, exact="yes")
    with pytest.raises(ValueError, match="fused decoder"):
        Target(model, 32, decoder=False, exact=16)
    visible = np.eye(3, dtype=bool)  # three roots at one position: not one token per position
    with pytest.raises(ValueError, match="one token at each position"):
        exact_layout(10, np.array([10, 11, 11]), visible, 3, 16)
    positions, visible, _ = _tree_layout([2, 2, 2], 10)
    with pytest.raises(ValueError, match="at most 2 draft branches"):
        exact_layout(10, positions, visible, 7, 16)


def test_exact_layout_of_a_tree():
    positions, visible, _ = _tree_layout([2, 3], 10)  # root at slot 10, branches at 11-12 and 13-15
    pos, branch, window = exact_layout(10, positions, visible, 6, 8)
    assert pos.tolist() == [10, 11, 12, 11, 12, 13, 10, 10]
    assert window[branch[1], :3].tolist() == [10, 11, 12] and window[branch[3], :4].tolist() == [10, 13, 14, 15]
    assert branch[1] == branch[2] != branch[3] == branch[4] == branch[5]
    assert view_region(10, window).tolist() == [11, 14]  # branch 1 reads positions 11-13 from slots 13-15


@pytest.mark.parametrize("q", [2, 5, 16])
def test_a_chain_has_no_view_region(q):
    """A decode step or a chain reads every key in slot order: the split kernel gathers no key tile."""
    _, _, window = exact_layout(37, None, None, 1, 16)
    assert view_region(37, window).tolist() == [0, 0]
    _, _, window = exact_layout(37, None, None, q, 16)
    assert view_region(37, window).tolist() == [0, 0]
    positions, visible, _ = _tree_layout([q - 1], 37)  # the same chain given as a root and one branch
    _, _, window = exact_layout(37, positions, visible, q, 16)
    assert view_region(37, window).tolist() == [0, 0]


def test_only_trees_read_keys_through_views(monkeypatch):
    """Exact mode's steps: a decode step and a chain (no view region) attend with no key views, so the split
    kernel runs without its gathering path; a tree whose second branch sits at shifted slots attends through them."""
    model = tiny_target("llama", layers=1)
    target = Target(model, 64, exact=EXACT_ROWS)
    views = []
    run = Target._run

    def spy(self, *args, gather=None, **kwargs):
        if gather is not None:
            views.append(gather[0] is not None and gather[1] is not None)
        return run(self, *args, gather=gather, **kwargs)

    monkeypatch.setattr(Target, "_run", spy)
    seq = torch.arange(3, 30)
    target.forward(seq[:8], 0, last_logits_only=True)
    target.forward(seq[8:9], 8)  # decode
    target.forward(seq[9:13], 9)  # chain
    positions, visible, _ = _tree_layout([2, 2], 13)
    target.forward(seq[13:18], 13, positions=positions, visible=visible)  # tree
    assert views == [False, False, True]


def test_split_kernel_virtual_order_in_the_triton_interpreter():
    """The Triton kernel in exact mode: a row reads its keys through its branch's slots, giving what a plain
    decode step (keys at their own slots) gives, bit for bit, whether or not the other rows of its tile read other
    views; and SDPA's result within rounding. A key bound (``block[3]``) skips the key tiles past it with the same
    bits."""
    pytest.importorskip("triton")
    code = textwrap.dedent("""
        import torch
        from hybridsd.attention import grouped_attention, split_kv_attention
        torch.manual_seed(0)
        for hkv, g, d, s in ((2, 2, 16, 200), (1, 4, 32, 130)):
            start, t = 97, 6  # a tree: root, branch 0 of 2 tokens at 98-99, branch 1 of 3 at 100-102
            q = torch.randn(hkv, g * t, d)
            k, v = torch.randn(hkv, s, d), torch.randn(hkv, s, d)
            key_slots = torch.arange(s).repeat(2, 1)
            key_slots[1, start + 1 : start + 4] = torch.tensor([100, 101, 102])
            branch = torch.tensor([0, 0, 0, 1, 1, 1])
            pos = torch.tensor([0, 1, 2, 1, 2, 3]) + start
            allowed = torch.arange(s)[None] <= pos[:, None]
            tree = split_kv_attention(q, k, v, allowed, d ** -0.5, key_slots=key_slots, branch=branch)
            ref = grouped_attention(q, k, v, allowed, d ** -0.5, key_slots=key_slots, branch=branch)
            assert (tree - ref).abs().max() < 1e-5
            # the same tokens as a chain: branch 1's keys copied to the slots its positions have
            k2, v2 = k.clone(), v.clone()
            k2[:, start + 1 : start + 4], v2[:, start + 1 : start + 4] = k[:, 100:103], v[:, 100:103]
            chain = split_kv_attention(q, k2, v2, allowed, d ** -0.5, key_slots=torch.arange(s).repeat(2, 1),
                                       branch=torch.zeros(t, dtype=torch.long))
            rows = torch.arange(t) >= 3
            assert torch.equal(tree.view(t, -1)[rows], chain.view(t, -1)[rows])
            # the chain with no view region (every key tile read in place, as exact mode runs a chain): same bits
            in_place = split_kv_attention(q, k2, v2, allowed, d ** -0.5, key_slots=torch.arange(s).repeat(2, 1),
                                          branch=torch.zeros(t, dtype=torch.long), block=torch.tensor([0, 0, t]))
            assert torch.equal(in_place, chain)
            # and with no key views at all (the kernel without the gathering path, as exact mode runs a decode step
            # or a chain), the first 4 tokens real: the same bits, zeros for the padding
            no_views = split_kv_attention(q, k2, v2, allowed, d ** -0.5, block=torch.tensor([0, 0, 4]))
            assert torch.equal(no_views.view(t, -1)[:4], chain.view(t, -1)[:4])
            assert not no_views.view(t, -1)[4:].any()
            # branch 0's rows: the same bits in a tile where every row reads view 0 (the other views skipped)
            alone = split_kv_attention(q, k, v, allowed, d ** -0.5, key_slots=key_slots,
                                       branch=torch.zeros(t, dtype=torch.long))
            assert torch.equal(tree.view(t, -1)[~rows], alone.view(t, -1)[~rows])
            # told where the views differ (slots 97-102: the tiles around them gathered, the rest read in place)
            # and that only the first 4 tokens are real: the same bits for those, zeros for the padding
            told = split_kv_attention(q, k, v, allowed, d ** -0.5, key_slots=key_slots, branch=branch,
                                      block=torch.tensor([start, start + t, 4]))
            assert torch.equal(told.view(t, -1)[:4], tree.view(t, -1)[:4])
            assert not told.view(t, -1)[4:].any()
            # told also that no real token sees a key from slot start + 4 on (block[3]): the key tiles (64 keys)
            # wholly past it are not read (NaN there changes nothing) and the real tokens' bits are the same
            kn, vn, k2n, v2n = k.clone(), v.clone(), k2.clone(), v2.clone()
            for x in (kn, vn, k2n, v2n):
                x[:, 128:] = float("nan")
            bound = torch.tensor([start, start + t, 4, start + 4])
            bounded = split_kv_attention(q, kn, vn, allowed, d ** -0.5, key_slots=key_slots, branch=branch,
                                         block=bound)
            assert torch.equal(bounded.view(t, -1)[:4], tree.view(t, -1)[:4])
            bounded = split_kv_attention(q, k2n, v2n, allowed, d ** -0.5, block=torch.tensor([0, 0, 4, start + 4]))
            assert torch.equal(bounded.view(t, -1)[:4], chain.view(t, -1)[:4])
            decode = split_kv_attention(q[:, :: t], k2n, v2n, allowed[:1], d ** -0.5,  # token 0 alone, one row a head
                                        block=torch.tensor([0, 0, 1, start + 1]))
            assert torch.equal(decode.view(1, -1)[0], chain.view(t, -1)[0])
        print("ok")
    """)
    env = interpreter_env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-3000:]


def test_split_kernel_partials_and_rotation_in_the_triton_interpreter():
    """Exact mode's split kernel reduces a row's keys in partials of ``EXACT_CHUNK`` keys merged in key order: its
    bits do not depend on the span past the keys it sees (NaN there, past the key bound, changes nothing). Queries
    given token-major and not yet rotated are rotated as they are loaded: the result is rotating first within
    rounding, and a tree's rows still equal their chain's and their own decode step's bits."""
    pytest.importorskip("triton")
    code = textwrap.dedent("""
        import torch
        from hybridsd.attention import EXACT_CHUNK, grouped_attention, grouped_rows, split_kv_attention
        torch.manual_seed(1)
        hkv, g, d, s, t, start = 2, 2, 16, 3 * EXACT_CHUNK + 7, 5, 2 * EXACT_CHUNK - 2
        q = torch.randn(t, hkv, g, d)  # token-major, not yet rotated
        cos, sin = torch.randn(t, d), torch.randn(t, d)
        k, v = torch.randn(hkv, s, d), torch.randn(hkv, s, d)
        pos = start + torch.arange(t)
        allowed = torch.arange(s)[None] <= pos[:, None]  # a chain of 5 at start (across a chunk boundary)
        block = torch.tensor([0, 0, t, start + t])
        chain = split_kv_attention(q, k, v, allowed, d ** -0.5, block=block, rotary=(cos, sin))
        ref = grouped_attention(grouped_rows(q, (cos, sin)), k, v, allowed, d ** -0.5)
        assert (chain - ref).abs().max() < 1e-5
        # a longer span, NaN from the first key chunk past the bound on: the same bits
        big = 2 * s
        kb, vb = torch.full((hkv, big, d), float("nan")), torch.full((hkv, big, d), float("nan"))
        live = -(-(start + t) // EXACT_CHUNK) * EXACT_CHUNK
        kb[:, :live], vb[:, :live] = k[:, :live], v[:, :live]
        wide = torch.arange(big)[None] <= pos[:, None]
        got = split_kv_attention(q, kb, vb, wide, d ** -0.5, block=block, rotary=(cos, sin))
        assert torch.equal(got, chain)
        # each token as a decode step (one real token among padding, its own key bound), rotation in the kernel
        for i in range(t):
            alone = torch.cat([q[i : i + 1], q[:1].expand(t - 1, -1, -1, -1)])
            rot = tuple(torch.cat([x[i : i + 1], x[:1].expand(t - 1, -1)]) for x in (cos, sin))
            seen = torch.arange(s)[None] <= pos[i].expand(t, 1)
            one = split_kv_attention(alone, k, v, seen, d ** -0.5, block=torch.tensor([0, 0, 1, start + i + 1]),
                                     rotary=rot)
            assert torch.equal(one[0], chain[i]), i
        # a tree over the same keys: token 3 read through view 1 (its key moved to slot start + 4), token 4 padding
        k2, v2 = k.clone(), v.clone()
        k2[:, start + 4], v2[:, start + 4] = k[:, start + 3], v[:, start + 3]
        key_slots = torch.arange(s).repeat(2, 1)
        key_slots[1, start + 3] = start + 4
        branch = torch.tensor([0, 0, 0, 1, 0])
        tree = split_kv_attention(q, k2, v2, allowed, d ** -0.5, key_slots=key_slots, branch=branch, rotary=(cos, sin),
                                  block=torch.tensor([start, start + t, 4, start + 4]))
        assert torch.equal(tree[:4], chain[:4]) and not tree[4].any()
        print("ok")
    """)
    env = interpreter_env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-3000:]
