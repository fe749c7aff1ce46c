"""The GPU path (CUDA graphs, device-side verification): lossless in fp32, same as the eager path.

Skipped without CUDA; run on the GPU machine with ``python -m pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import OracleDrafter, hf_greedy, prompts, tiny_target, train_heads
from hybridsd.drafters.eagle import EagleDrafter
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramDrafter
from hybridsd.eagle.model import EagleHead
from hybridsd.generate import _tree_layout, generate
from hybridsd.target import EXACT_ROWS, Target

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
PROMPTS = prompts(6, seed=5)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def gpu_target(request):
    torch.backends.cuda.matmul.allow_tf32 = False
    return tiny_target(request.param).cuda()


def test_graph_replay_equals_eager(gpu_target):
    ids = PROMPTS[1].cuda()
    n = ids.numel()
    eager, graphed = Target(gpu_target, 96), Target(gpu_target, 96, cuda_graphs=True)
    for t in (eager, graphed):
        t.forward(ids[:-1], 0, last_logits_only=True)
    positions, visible, _ = _tree_layout([3, 2], n - 1)
    block = torch.cat([ids[-1:], torch.tensor([5, 6, 7, 9, 10], device="cuda")])
    for kw in ({}, {"positions": positions, "visible": visible}):
        a, ha = eager.forward(block, n - 1, hidden_layers=(-1,), **kw)
        b, hb = graphed.forward(block, n - 1, hidden_layers=(-1,), **kw)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ha, hb, atol=1e-5, rtol=1e-5)
    for t in (eager, graphed):
        torch.testing.assert_close(t.kv.keys[0][:, :, : n + 5], eager.kv.keys[0][:, :, : n + 5])


@pytest.fixture(scope="module")
def gpu_heads(gpu_target):
    """EAGLE-1 and EAGLE-3 heads trained on ``gpu_target``'s continuations of the test prompts (60 steps on the
    GPU): they are right often and wrong often, so the graphed paths accept and roll back EAGLE drafts."""
    return train_heads(gpu_target, [p.cuda() for p in prompts(8)], 48, steps=60)


@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_is_lossless_on_gpu(gpu_target, gpu_heads, graphs, k):
    """Every drafter kind and both hybrid policies give plain greedy's tokens, eager and from CUDA graphs, and every
    drafter and hybrid child gets draft tokens accepted over the prompts."""
    by_source = collections.Counter()  # (drafter, step source) -> tokens accepted
    for ids in PROMPTS:
        ids = ids.cuda()
        ref = hf_greedy(gpu_target, ids, 32)
        drafters = {
            "ngram": NgramDrafter(k=k, min_n=1, max_n=3),
            "eagle1": EagleDrafter(gpu_heads["eagle1"], k=k),
            "oracle": OracleDrafter(ref, k, err=0.2),
            "ngram-eagle3": HybridDrafter(NgramDrafter(k=k, min_n=2, max_n=3), EagleDrafter(gpu_heads["eagle3"], k=k)),
            "tree": HybridDrafter(NgramDrafter(k=k, min_n=1, max_n=3), OracleDrafter(ref, k, 0.4), "tree"),
        }
        for name, d in drafters.items():
            res = generate(gpu_target, ids, drafter=d, max_new_tokens=32, eos_token_id=[], cuda_graphs=graphs)
            assert res.tokens == ref, (name, k, graphs)
            res.stats.check()
            for source, n in res.stats.accepted_by_drafter.items():
                by_source[name, source] += n
    sources = {"ngram": ["ngram"], "eagle1": ["eagle1"], "oracle": ["oracle"], "ngram-eagle3": ["ngram", "eagle3"],
               "tree": ["ngram", "oracle"]}
    assert {(n, s) for n, srcs in sources.items() for s in srcs if by_source[n, s] == 0} == set(), (k, by_source)


def test_bf16_match_rate_is_recorded(gpu_target, record_property):
    """In bf16 the batched verify pass may round differently from one-token decoding: the rate at which n-gram
    speculative tokens equal plain decoding's is measured and recorded (``record_property``) with its config;
    in fp32 it is exactly 1 (the lossless contract)."""
    config = {"drafter": "NgramDrafter(k=5, min_n=1, max_n=3)", "model": "tiny llama seed 2", "max_new_tokens": 32,
              "prompts": len(PROMPTS)}
    rates = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = tiny_target("llama", seed=2).cuda().to(dtype)
        same = []
        for ids in PROMPTS:
            ids = ids.cuda()
            plain = generate(model, ids, max_new_tokens=32, eos_token_id=[]).tokens
            spec = generate(model, ids, drafter=NgramDrafter(k=5, min_n=1, max_n=3), max_new_tokens=32,
                            eos_token_id=[]).tokens
            assert len(plain) == len(spec) == 32
            same += [a == b for a, b in zip(plain, spec)]
        rates[str(dtype).removeprefix("torch.")] = {**config, "tokens": len(same), "match_rate": float(np.mean(same))}
    record_property("spec_vs_plain_token_match", rates)
    print(f"token match rate, n-gram vs plain: {rates}")
    assert rates["float32"]["match_rate"] == 1.0
    assert rates["bfloat16"]["tokens"] == 32 * len(PROMPTS)


@pytest.mark.parametrize("compile", [True, "auto"])
def test_compiled_graphs_are_lossless(gpu_target, compile):
    """Compiled steps give plain greedy's tokens, and compiling them traces no cached function (which Dynamo warns
    of): the custom ops are registered with their modules."""
    import warnings

    torch._dynamo.reset()
    getattr(torch._dynamo.utils, "warn_once_cache", set()).clear()  # Dynamo warns once per process
    ids = PROMPTS[3].cuda()
    ref = hf_greedy(gpu_target, ids, 24)
    drafter = HybridDrafter(NgramDrafter(k=3, min_n=1, max_n=3), OracleDrafter(ref, 3, 0.4), "tree")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = generate(gpu_target, ids, drafter=drafter, max_new_tokens=24, eos_token_id=[], compile=compile)
        plain = generate(gpu_target, ids, max_new_tokens=24, eos_token_id=[], compile=compile)  # 1-token steps
    assert res.tokens == ref
    assert plain.tokens == ref
    assert not [str(w.message)[:120] for w in caught if "lru_cache" in str(w.message)]


@pytest.mark.parametrize("change", ["assign", "in place"])
def test_graphed_generate_follows_replaced_weights(change):
    """CUDA graphs read the weights they were captured with: after a state dict is assigned (new tensors) or
    loaded in place, graphed (and compiled) decoding equals HF's greedy output of the model as it now is."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model, other = tiny_target("llama", seed=0).cuda(), tiny_target("llama", seed=3).cuda()
    ids = PROMPTS[2].cuda()
    for compile in (False, "auto"):
        drafter = NgramDrafter(k=3, min_n=1, max_n=3)
        got = generate(model, ids, drafter, max_new_tokens=24, eos_token_id=[], cuda_graphs=True, compile=compile)
        assert got.tokens == hf_greedy(model, ids, 24), compile
    model.load_state_dict(other.state_dict(), assign=change == "assign")
    want = hf_greedy(model, ids, 24)
    for compile in (False, "auto"):
        got = generate(model, ids, NgramDrafter(k=3, min_n=1, max_n=3), max_new_tokens=24, eos_token_id=[],
                       cuda_graphs=True, compile=compile)
        assert got.tokens == want, compile


def test_a_step_a_graph_cannot_hold_is_refused_naming_cuda_graphs_false():
    """A step that copies a host value to the GPU (as some transformers versions' model code does) fails at
    capture with one RuntimeError naming the way out, not CUDA's own message alone. In a subprocess: a failed
    capture must not touch this process's CUDA state."""
    import subprocess
    import sys

    code = ("import torch\nfrom hybridsd.cuda_graph import capture\nx = torch.ones(4, device='cuda')\n"
            "try:\n    capture(lambda: x + torch.tensor([1.0, 2.0, 3.0, 4.0], device='cuda'), x.device)\n"
            "except RuntimeError as e:\n    print('REFUSED:', e)\n")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "REFUSED: a step could not be captured as a CUDA graph" in out.stdout, out.stdout
    assert "cuda_graphs=False (spec_bench: --enforce-eager)" in out.stdout


def test_observed_hidden_states_survive_graph_replays(gpu_target):
    """Hidden states handed to a drafter stay valid after later graph replays (no aliasing of graph outputs)."""
    from test_generate import Recorder

    ids = PROMPTS[2].cuda()
    ref = hf_greedy(gpu_target, ids, 24)
    rec = Recorder(ref, 3, err=0.5)
    res = generate(gpu_target, ids, drafter=rec, max_new_tokens=24, eos_token_id=[], cuda_graphs=True)
    seq = torch.cat([ids, torch.tensor(res.tokens, device="cuda")])
    with torch.no_grad():
        hs = gpu_target(seq[None], output_hidden_states=True).hidden_states
    want = torch.cat([hs[i][0] for i in Recorder.hidden_layers], -1)[:-1]
    torch.testing.assert_close(torch.cat(rec.hidden), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
@pytest.mark.parametrize("k", [1, 4])
def test_graphed_eagle_drafts_equal_eager(gpu_target, kind, k):
    """One graph per catch-up size gives the eager drafter's tokens and head cache, step after step."""
    from hybridsd.drafters.base import ProposeRequest

    torch.manual_seed(0)
    head = EagleHead.from_target(gpu_target, kind=kind)
    head.reset_parameters(std=0.2)  # confident, varied drafts
    F = head.config.feature_size
    drafters = [EagleDrafter(head, k=k, cuda_graphs=g) for g in (True, False)]
    for d in drafters:
        d.reset(8)
    tokens = np.zeros(256, dtype=np.int64)
    for m in (8, 1, 3, 1, 7, 2, 3, 9, 1):
        hidden = torch.randn(m, F, device="cuda")
        nxt = torch.randint(0, gpu_target.config.vocab_size, (m,), device="cuda")
        drafts = []
        for d in drafters:
            d.observe(hidden.clone(), nxt.clone())
            drafts.append(d.propose(ProposeRequest(tokens, k, torch.device("cuda")))[0].tokens)
        assert drafts[0].tolist() == drafts[1].tolist()
        assert drafters[0].committed == drafters[1].committed
    n = drafters[1].committed
    torch.testing.assert_close(drafters[0].cache.keys[0][:, :, :n], drafters[1].cache.keys[0][:, :, :n])
    assert len(drafters[0]._graphs) == 6  # one per catch-up size (all in one KV bucket)


@pytest.mark.parametrize("attention", ["sdpa", "split"])
def test_compiled_decoder_equals_hf_forward(gpu_target, attention):
    """The compiled, graphed decoder (each attention kernel) gives ``model(...)``'s logits and hidden states."""
    ids = PROMPTS[1].cuda()
    n = ids.numel()
    ref, ours = Target(gpu_target, 96, decoder=False), Target(gpu_target, 96, cuda_graphs=True, compile=True,
                                                               attention=attention)
    for t in (ref, ours):
        t.forward(ids[:-1], 0, last_logits_only=True)
    positions, visible, _ = _tree_layout([3, 2], n - 1)
    block = torch.cat([ids[-1:], torch.tensor([5, 6, 7, 9, 10], device="cuda")])
    for kw in ({}, {"positions": positions, "visible": visible}):
        a, ha = ref.forward(block, n - 1, hidden_layers=(1, -1), **kw)
        b, hb = ours.forward(block, n - 1, hidden_layers=(1, -1), **kw)
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ha, hb, atol=1e-4, rtol=1e-4)
    for j in range(3):  # single steps after the block
        a, _ = ref.forward(torch.tensor([11 + j], device="cuda"), n + 5 + j)
        b, _ = ours.forward(torch.tensor([11 + j], device="cuda"), n + 5 + j)
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t,s,g,hkv,d", [(1, 2560, 4, 8, 128), (9, 768, 4, 8, 128), (3, 37, 3, 2, 24),
                                         (5, 300, 1, 4, 64)])
def test_split_kv_attention_equals_sdpa(dtype, t, s, g, hkv, d):
    """The split-KV kernel against SDPA on the same grouped rows, with tree-like masks and an unused tail."""
    from hybridsd.attention import grouped_attention

    torch.manual_seed(t * s)
    q = torch.randn(hkv, g * t, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(hkv, s, d, device="cuda", dtype=dtype) for _ in range(2))
    allowed = torch.zeros(t, s, dtype=torch.bool, device="cuda")
    used = max(t, s - 200)  # slots past `used` are stale, as in a KV bucket
    allowed[:, : used - t] = True
    allowed[:, used - t : used] = torch.rand(t, t, device="cuda") < 0.5
    allowed[:, used - t : used].diagonal().fill_(True)
    ref = grouped_attention(q.float(), k.float(), v.float(), allowed, d**-0.5, "sdpa")
    got = grouped_attention(q, k, v, allowed, d**-0.5, "split")
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), ref, atol=tol, rtol=tol)


# Exact mode in bf16: every drafter and k gives plain decoding's tokens (asserted); without exact mode the share of
# prompts whose output equals plain decoding's is measured and recorded. One JSON line per configuration and mode
# (exact_same or nonexact_same), appended to the file named by $HYBRIDSD_EXACT_JSON when set, and printed.
EXACT_KS = [int(k) for k in os.environ.get("HYBRIDSD_EXACT_KS", "1,2,3,5,8").split(",")]
EXACT_MODES = os.environ.get("HYBRIDSD_EXACT_MODES", "exact,nonexact").split(",")  # the modes the grid runs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,g,hkv,d,s", [(16, 4, 8, 128, 2560), (4, 4, 8, 128, 768), (9, 3, 2, 64, 300)])
def test_exact_split_kernel_rows_equal_their_decode_step(dtype, rows, g, hkv, d, s):
    """The split kernel in exact mode on the GPU: a tree's rows (their branch read through moved slots, the
    tiles holding them on the gathering path) equal, bit for bit, the rows of the same tokens laid out as a chain
    (every tile read in place) and each token's own one-row decode step; and so do they when the kernel is told the
    block (``block``: views gathered only in the key tiles around it, row tiles of padding tokens skipped)."""
    from hybridsd.attention import split_kv_attention

    torch.manual_seed(rows)
    start = s // 128 * 64 - rows // 2  # a block across a tile boundary (64 keys): two tiles on the gathering path
    right = (rows - 1) // 2  # the tree: newest token, branch 0 of `wrong` tokens, branch 1 of `right` tokens
    wrong = rows - 1 - right
    q = torch.randn(hkv, g * rows, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(hkv, s, d, device="cuda", dtype=dtype) for _ in range(2))
    moved = torch.arange(start + 1 + wrong, start + rows, device="cuda")  # branch 1's slots
    key_slots = torch.arange(s, device="cuda").repeat(2, 1)
    key_slots[1, start + 1 : start + 1 + right] = moved
    branch = torch.tensor([0] * (1 + wrong) + [1] * right, device="cuda")
    depth = torch.tensor([0, *range(1, wrong + 1), *range(1, right + 1)], device="cuda")
    allowed = torch.arange(s, device="cuda")[None] <= (start + depth)[:, None]  # [rows, s] in virtual order
    tree = split_kv_attention(q, k, v, allowed, d**-0.5, key_slots=key_slots, branch=branch).view(rows, -1)
    told = split_kv_attention(q, k, v, allowed, d**-0.5, key_slots=key_slots, branch=branch,
                              block=torch.tensor([start, start + rows, rows], device="cuda")).view(rows, -1)
    assert torch.equal(told, tree)
    k2, v2 = k.clone(), v.clone()  # branch 1 as a chain at its own positions' slots
    k2[:, start + 1 : start + 1 + right], v2[:, start + 1 : start + 1 + right] = k[:, moved], v[:, moved]
    identity = torch.arange(s, device="cuda").repeat(2, 1)
    chain = split_kv_attention(q, k2, v2, allowed, d**-0.5, key_slots=identity,
                               branch=torch.zeros(rows, dtype=torch.long, device="cuda")).view(rows, -1)
    ones = torch.ones(hkv, g, 1, d, device="cuda", dtype=dtype)
    for r in range(1 + wrong, rows):
        assert torch.equal(tree[r], chain[r]), r
        # the token alone: its query rows in a block of `rows` rows (the others padding), keys by position
        alone = q.view(hkv, g, rows, d)[:, :, r : r + 1] * ones
        alone = torch.cat([alone, ones.expand(-1, -1, rows - 1, -1)], dim=2).reshape(hkv, g * rows, d)
        seen = torch.arange(s, device="cuda")[None] <= (start + depth[r]).expand(rows, 1)
        one = split_kv_attention(alone, k2, v2, seen, d**-0.5, key_slots=identity,
                                 branch=torch.zeros(rows, dtype=torch.long, device="cuda")).view(rows, -1)
        assert torch.equal(one[0], tree[r]), r
        # as a decode step runs it: the block at the token's own slot, one real token, the other rows padding
        own = start + int(depth[r])
        step = split_kv_attention(alone, k2, v2, seen, d**-0.5, key_slots=identity,
                                  branch=torch.zeros(rows, dtype=torch.long, device="cuda"),
                                  block=torch.tensor([own, own + rows, 1], device="cuda")).view(rows, -1)
        assert torch.equal(step[0], tree[r]) and not step[1:].any(), r
        # ... and as exact mode runs it: no key views (the kernel without the gathering path)
        bare = split_kv_attention(alone, k2, v2, seen, d**-0.5,
                                  block=torch.tensor([0, 0, 1], device="cuda")).view(rows, -1)
        assert torch.equal(bare[0], tree[r]) and not bare[1:].any(), r
        # ... told that no key from its own slot + 1 on is seen: the key tiles past it skipped (NaN there), same bits
        bounded = split_kv_attention(alone, past_nan(k2, own + 1), past_nan(v2, own + 1), seen, d**-0.5,
                                     block=torch.tensor([0, 0, 1, own + 1], device="cuda")).view(rows, -1)
        assert torch.equal(bounded[0], tree[r]), r
    bare_chain = split_kv_attention(q, k2, v2, allowed, d**-0.5,
                                    block=torch.tensor([0, 0, rows], device="cuda")).view(rows, -1)
    assert torch.equal(bare_chain[1 + wrong :], chain[1 + wrong :])
    end = start + rows  # the block's slots end here: the tree's key tiles past it skipped, the same bits
    bounded = split_kv_attention(q, past_nan(k, end), past_nan(v, end), allowed, d**-0.5, key_slots=key_slots,
                                 branch=branch, block=torch.tensor([start, end, rows, end], device="cuda"))
    assert torch.equal(bounded.view(rows, -1), tree)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("g,hkv,d,s,t", [(4, 8, 128, 2560, 16), (3, 2, 64, 700, 9)])
def test_exact_split_kernel_partials_and_rotation(dtype, g, hkv, d, s, t):
    """Exact mode's split kernel on the GPU, queries token-major and rotated as they are loaded: a chain's rows have
    the same bits over a longer span with NaN past the key bound (the key chunks are fixed, not planned over the
    span) and as each token's own decode step (one real token, its own bound); close to rotating first and attending
    with SDPA."""
    from hybridsd.attention import EXACT_CHUNK, grouped_attention, grouped_rows, split_kv_attention

    torch.manual_seed(t)
    dev = "cuda"
    start = s // EXACT_CHUNK // 2 * EXACT_CHUNK + EXACT_CHUNK - t // 2  # the chain crosses a chunk boundary
    q = torch.randn(t, hkv, g, d, device=dev, dtype=dtype)
    cos, sin = (torch.randn(t, d, device=dev, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(hkv, s, d, device=dev, dtype=dtype) for _ in range(2))
    pos = start + torch.arange(t, device=dev)
    allowed = torch.arange(s, device=dev)[None] <= pos[:, None]
    block = torch.tensor([0, 0, t, start + t], device=dev)
    chain = split_kv_attention(q, k, v, allowed, d**-0.5, block=block, rotary=(cos, sin))
    ref = grouped_attention(grouped_rows(q.float(), (cos.float(), sin.float())), k.float(), v.float(), allowed,
                            d**-0.5, "sdpa")
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(chain.float(), ref, atol=tol, rtol=tol)
    big = 2 * s  # a longer span, NaN from the first chunk past the bound on
    live = min(s, -(-(start + t) // EXACT_CHUNK) * EXACT_CHUNK)
    kb, vb = (torch.full((hkv, big, d), float("nan"), device=dev, dtype=dtype) for _ in range(2))
    kb[:, :live], vb[:, :live] = k[:, :live], v[:, :live]
    wide = torch.arange(big, device=dev)[None] <= pos[:, None]
    assert torch.equal(split_kv_attention(q, kb, vb, wide, d**-0.5, block=block, rotary=(cos, sin)), chain)
    for i in range(t):  # each token as its decode step: one real token among padding rows
        alone = torch.cat([q[i : i + 1], q[:1].expand(t - 1, -1, -1, -1)])
        rot = tuple(torch.cat([x[i : i + 1], x[:1].expand(t - 1, -1)]) for x in (cos, sin))
        seen = torch.arange(s, device=dev)[None] <= pos[i].expand(t, 1)
        one = split_kv_attention(alone, k, v, seen, d**-0.5, rotary=rot,
                                 block=torch.tensor([0, 0, 1, start + i + 1], device=dev))
        assert torch.equal(one[0], chain[i]) and not one[1:].any(), i


def past_nan(x: torch.Tensor, end: int, tile: int = 64) -> torch.Tensor:
    """``x`` (``[Hkv, S, D]``) with NaN in the key tiles (of ``tile`` slots) wholly from slot ``end`` on."""
    x = x.clone()
    x[:, -(-end // tile) * tile :] = float("nan")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k,glu,bias,residual", [(6144, 4096, False, False, False), (4096, 4096, False, True, True),
                                                    (1000, 3000, True, False, False), (333, 100, True, True, True)])
def test_row_linear_rows_are_computed_alone(dtype, n, k, glu, bias, residual):
    """Exact mode's matmul kernel on the GPU (PDL launches on Hopper): a row's bits are the same alone, in a block
    of 9 and in a block of 16 rows whatever the other rows hold, eager and captured in a CUDA graph; and the
    result is F.linear's (with SiLU gate and residual) to the dtype's precision."""
    import torch.nn.functional as F

    from hybridsd.linear import row_linear

    torch.manual_seed(n + k)
    w = torch.randn(2 * n if glu else n, k, device="cuda", dtype=dtype) / k**0.5
    b = torch.randn(w.shape[0], device="cuda", dtype=dtype) if bias else None
    x = torch.randn(16, k, device="cuda", dtype=dtype)
    r = torch.randn(16, n, device="cuda", dtype=dtype) if residual else None

    def run(xs, rs, rows=slice(0, 16)):
        return row_linear(xs[rows], w, b, glu=glu, residual=None if rs is None else rs[rows])

    block = run(x, r)
    other, other_r = torch.randn_like(x), None if r is None else torch.randn_like(r)  # row 0 among other rows
    other[0] = x[0]
    if r is not None:
        other_r[0] = r[0]
    assert torch.equal(run(other, other_r)[0], block[0])
    assert torch.equal(run(x, r, slice(0, 9)), block[:9])
    for i in (0, 5, 15):
        assert torch.equal(run(x, r, slice(i, i + 1))[0], block[i]), i
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run(x, r)
    graph.replay()
    assert torch.equal(out, block)
    y = F.linear(x.double(), w.double(), None if b is None else b.double())
    if glu:
        y = F.silu(y[:, :n]) * y[:, n:]
    if r is not None:
        y = y + r.double()
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(block.double(), y, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h,n,glu", [(4096, 6144, False), (4096, 14336, True), (896, 1000, True)])
def test_row_linear_folded_norm_rows_are_computed_alone(dtype, h, n, glu):
    """The RMS norm folded into exact mode's matmuls on the GPU: the producer (residual stream, ``out * g`` and sums
    of squares) and the consumer (scaled by each row's rsqrt) give a row the same bits alone, in a block of 9 and
    among other rows, eager and from a CUDA graph; and the pair is ``F.linear(rms_norm(out, g), w)`` to the dtype's
    precision."""
    import torch.nn.functional as F

    from hybridsd.linear import row_linear

    torch.manual_seed(h + n)
    w1, w2 = (torch.randn(h, h, device="cuda", dtype=dtype) / h**0.5,
              torch.randn(2 * n if glu else n, h, device="cuda", dtype=dtype) / h**0.5)
    g = torch.rand(h, device="cuda", dtype=dtype) + 0.5
    a, res = torch.randn(16, h, device="cuda", dtype=dtype), torch.randn(16, h, device="cuda", dtype=dtype)

    def run(xs, rs, rows=slice(0, 16)):
        out, xg, sums = row_linear(xs[rows], w1, residual=rs[rows], norm=g)
        return out, xg, sums, row_linear(xg, w2, glu=glu, scale=sums, eps=1e-5)

    block = run(a, res)
    other, other_r = torch.randn_like(a), torch.randn_like(res)
    other[0], other_r[0] = a[0], res[0]
    assert all(torch.equal(p[0], q[0]) for p, q in zip(run(other, other_r), block))
    assert all(torch.equal(p, q[:9]) for p, q in zip(run(a, res, slice(0, 9)), block))
    for i in (0, 5, 15):
        assert all(torch.equal(p[0], q[i]) for p, q in zip(run(a, res, slice(i, i + 1)), block)), i
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = run(a, res)
    graph.replay()
    assert all(torch.equal(p, q) for p, q in zip(replayed, block))
    x = block[0].double()
    y = F.linear(x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-5) * g.double(), w2.double())
    if glu:
        y = F.silu(y[:, :n]) * y[:, n:]
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(block[3].double(), y, atol=tol, rtol=tol)


def _exact_drafters(k: int, heads: dict) -> dict:
    """n-gram, EAGLE-1, EAGLE-3, both hybrids (prefer-ngram) and the tree, at draft length k."""
    ngram = lambda: NgramDrafter(k=k, min_n=2, max_n=5)  # noqa: E731
    return {"ngram": ngram(), "eagle1": EagleDrafter(heads["eagle1"], k=k),
            "eagle3": EagleDrafter(heads["eagle3"], k=k),
            "ngram-eagle1": HybridDrafter(ngram(), EagleDrafter(heads["eagle1"], k=k)),
            "ngram-eagle3": HybridDrafter(ngram(), EagleDrafter(heads["eagle3"], k=k)),
            "ngram-eagle1-tree": HybridDrafter(ngram(), EagleDrafter(heads["eagle1"], k=k), "tree")}


def _record(row: dict) -> None:
    print("exact-mode match:", json.dumps(row))
    path = os.environ.get("HYBRIDSD_EXACT_JSON")
    if path:
        with open(path, "a") as f:  # whole lines
            f.write(json.dumps(row) + "\n")


def _match_grid(model, heads, prompts_, new_tokens: int, compile, name: str) -> list[str]:
    """Runs the grid, exact mode first, then without it (each mode's runs together: one target, one set of
    compilations; ``$HYBRIDSD_EXACT_MODES``: the modes to run, default both); returns the exact-mode configurations
    whose output differed from plain (to assert empty)."""
    common = dict(max_new_tokens=new_tokens, eos_token_id=[], compile=compile)
    rows_of = {k: max(EXACT_ROWS, 2 * k + 1) for k in EXACT_KS}  # the tree: two branches of k tokens and the newest
    failures = []
    for mode in EXACT_MODES:
        plain = {}
        for k in EXACT_KS:
            exact = rows_of[k] if mode == "exact" else False
            if exact not in plain:
                plain[exact] = [generate(model, ids, exact=exact, **common).tokens for ids in prompts_]
            for dname, drafter in _exact_drafters(k, heads).items():
                runs = [generate(model, ids, drafter=drafter, exact=exact, **common) for ids in prompts_]
                same = [r.tokens == ref for r, ref in zip(runs, plain[exact])]
                by_source = sum((r.stats.accepted_by_drafter for r in runs), collections.Counter())
                _record({"model": name, "dtype": str(model.dtype), "compile": compile, "drafter": dname, "k": k,
                         "exact_rows": rows_of[k], "prompts": len(prompts_), "new_tokens": new_tokens,
                         "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                         f"{mode}_same": f"{sum(same)}/{len(same)}",
                         f"{mode}_accepted": dict(sorted(by_source.items())),
                         f"{mode}_drafted": sum(r.stats.num_draft_tokens for r in runs)})
                if exact and not all(same):
                    failures.append(f"{dname} k={k} compile={compile}: {sum(same)}/{len(same)}")
                children = dname.removesuffix("-tree").split("-")
                if {c: by_source[c] for c in children if by_source[c] == 0}:  # every drafter and child drafts right
                    failures.append(f"{dname} k={k} compile={compile} {mode}: none accepted from {children} "
                                    f"({dict(by_source)})")
    return failures


@pytest.mark.parametrize("compile", [False, "auto"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_exact_mode_bf16_equals_plain_on_tiny_models(family, compile):
    """Tiny random Llama and Qwen2 in bf16, 6 prompts x 48 tokens, every drafter and k: exact mode equals plain
    decoding on every prompt, and every drafter (each hybrid's children too) gets draft tokens accepted (EAGLE heads
    trained 60 steps on the model's own continuations)."""
    model = tiny_target(family, seed=6).cuda().to(torch.bfloat16)
    prompts_ = [p.cuda() for p in PROMPTS]
    heads = train_heads(model, prompts_, 48, steps=60)
    failures = _match_grid(model, heads, prompts_, 48, compile, f"tiny-{family}")
    assert not failures, failures


@pytest.mark.parametrize("compile", [False, "auto"])
def test_exact_mode_bf16_equals_plain_on_the_zoo(compile):
    """tiny-coder in bf16, 16 held-out code edits (prompts of 257-495 tokens: one key span in exact mode, two
    without) x 256 tokens, every drafter and k: exact mode equals plain decoding on every prompt."""
    import hybridsd as hsd
    from conftest import DATA_DIR

    data_dir = Path(os.environ.get("HYBRIDSD_DATA", DATA_DIR))
    if not (data_dir / "code_edits_dev.jsonl").is_file():
        pytest.skip("code_edits_dev.jsonl not available")
    model, tok, heads = hsd.zoo.load(device="cuda")
    keep = set(json.loads((hsd.zoo.path() / "eval_split.json").read_text())["ids"])
    exs = [e for e in hsd.data.load_code_edits(data_dir / "code_edits_dev.jsonl") if e.id in keep]
    ids = [torch.tensor(hsd.prompts.build_prompt_ids(tok, e.prompt), device="cuda") for e in exs]
    prompts_ = [p for p in ids if 257 <= p.numel() <= 495][:16]
    assert len(prompts_) == 16
    failures = _match_grid(model, heads, prompts_, 256, compile, "tiny-coder")
    assert not failures, failures


@pytest.mark.parametrize("mode", ["layers", "layers-graphs", "model", "model-graphs"])
def test_compiled_training_steps_follow_eager_ones(mode):
    """The zoo's training steps with the decoder compiled by inductor (``train_zoo.compile_layers``; ``-graphs``:
    replayed as CUDA graphs, one recording per batch shape) follow the eager steps' losses and weights over batches
    of three shapes, the first shape again after the others (a replay, whose gradients the optimizer reads)."""
    from experiments import train_zoo as tz

    special = {"bos": 0, "eos": 1, "pad": 2, "eot": 3}
    cfg = tz.TargetConfig(**{**tz.SMOKE, "log_every": 1})
    device = torch.device("cuda")
    torch.manual_seed(0)
    plain = tz.build_model(cfg, 40, special).to(device)
    compiled = tz.build_model(cfg, 40, special).to(device)
    compiled.load_state_dict(plain.state_dict())
    torch._dynamo.reset()
    tz.compile_layers(compiled, mode=mode)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(4, 40, (b, n), generator=g), torch.randint(4, 40, (b, n), generator=g))
               for b, n in ((2, 64), (2, 64), (3, 128), (1, 192), (2, 64), (2, 64), (3, 128))]
    losses = {}
    for name, model in (("plain", plain), ("compiled", compiled)):
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
        log = []
        tz.train_phase(model, opt, iter(batches), tz.Phase(name, len(batches), 600.0, 3e-3, 1, 0.1), cfg, device, log)
        losses[name] = [(e["loss"], e["grad_norm"]) for e in log]
    assert len(losses["plain"]) == len(batches)
    for (loss, norm), (want_loss, want_norm) in zip(losses["compiled"], losses["plain"]):  # bf16 autocast in both
        assert loss == pytest.approx(want_loss, rel=2e-2) and norm == pytest.approx(want_norm, rel=5e-2)
    for (k, a), (k2, b) in zip(plain.state_dict().items(), compiled.state_dict().items()):
        assert k == k2 and torch.allclose(a, b, atol=5e-2), k  # Adam moves each weight at most 2 x lr a step
