"""``torch.compile`` on the CPU (inductor): compiled steps give plain greedy's tokens and the uncompiled logits.

Apart from test_generate so that its compilations (tens of seconds on a cold inductor cache) and the engine's
greedy grid can run on different workers."""

from __future__ import annotations

import torch

from conftest import OracleDrafter, hf_greedy, prompts, tiny_target
from hybridsd.generate import generate
from test_generate import PROMPTS, Recorder


def test_compiled_steps_are_lossless_on_cpu():
    """``compile=True`` (off by default) gives plain greedy's tokens and the same observed hidden states."""
    torch._dynamo.reset()
    model = tiny_target("llama", seed=3, layers=2)
    ids = PROMPTS[3]
    ref = hf_greedy(model, ids, 12)
    rec = Recorder(ref, 2, err=0.4)
    res = generate(model, ids, drafter=rec, max_new_tokens=12, eos_token_id=[], compile=True)
    assert res.tokens == ref
    assert 0 < res.stats.num_accepted < res.stats.num_draft_tokens  # compiled blocks accepted and rolled back
    seq = torch.cat([ids, torch.tensor(res.tokens)])
    with torch.no_grad():
        hs = model(seq[None], output_hidden_states=True).hidden_states
    want = torch.cat([hs[i][0] for i in Recorder.hidden_layers], -1)[:-1]
    torch.testing.assert_close(torch.cat(rec.hidden), want, atol=1e-4, rtol=1e-4)


def test_compile_auto_is_lossless_on_cpu():
    """``compile="auto"``: 1-token steps and verify blocks compiled in their own modes, same tokens as plain."""
    from hybridsd.decoder import AUTO_MODES, compile_modes
    from hybridsd.target import target_for

    assert compile_modes("auto") == AUTO_MODES and AUTO_MODES[0] != AUTO_MODES[1]
    assert compile_modes(True) == (None, None) and compile_modes("default") == ("default", "default")
    torch._dynamo.reset()
    model = tiny_target("llama", seed=3, layers=2)
    ids = prompts(4)[3]
    ref = hf_greedy(model, ids, 12)
    plain = generate(model, ids, max_new_tokens=12, eos_token_id=[], compile="auto")  # 1-token steps
    res = generate(model, ids, drafter=OracleDrafter(ref, 3, err=0.3), max_new_tokens=12, eos_token_id=[],
                   compile="auto")  # blocks
    assert plain.tokens == res.tokens == ref
    assert all(s.tree_tokens > 0 for s in res.stats.trace)
    assert 0 < res.stats.num_accepted < res.stats.num_draft_tokens
    decoder = target_for(model, 64, compile="auto").decoder
    assert decoder.compiled[True] is not decoder.compiled[False]


def test_compile_auto_on_the_hf_path_equals_eager():
    """``model(...)`` (no fused decoder) compiled per block kind gives the uncompiled logits, 1 token and blocks."""
    from hybridsd.target import Target

    torch._dynamo.reset()
    model = tiny_target("llama", seed=4, layers=1)
    ids = prompts(3)[2]
    n = ids.numel()
    eager, compiled = Target(model, 64, decoder=False), Target(model, 64, decoder=False, compile="auto")
    assert compiled._hf_steps[True] is not compiled._hf_steps[False]
    for t in (eager, compiled):
        t.forward(ids, 0, last_logits_only=True)
    for block, start in ((torch.tensor([5]), n), (torch.tensor([6, 7, 8]), n + 1)):
        a, _ = eager.forward(block, start)
        b, _ = compiled.forward(block, start)
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_default_mode_compiles_without_the_addmm_rewrite(monkeypatch):
    """``compile_by_block``: the default mode gets ``DEFAULT_MODE_OPTIONS`` (inductor's pattern matcher off: no
    residual add rewritten into a copying cuBLAS addmm), a named mode is passed as it is; one compilation per mode."""
    from hybridsd.decoder import AUTO_MODES, DEFAULT_MODE_OPTIONS, compile_by_block

    calls = []
    monkeypatch.setattr(torch, "compile", lambda f, **kw: calls.append(kw) or f)
    assert DEFAULT_MODE_OPTIONS == {"pattern_matcher": False}
    compile_by_block((abs,), "auto")
    assert sorted(calls, key=str) == sorted([{"mode": AUTO_MODES[0], "dynamic": False},
                                             {"dynamic": False, "options": DEFAULT_MODE_OPTIONS}], key=str)
    calls.clear()
    by_block = compile_by_block((abs,), True)
    assert calls == [{"dynamic": False, "options": DEFAULT_MODE_OPTIONS}]
    assert by_block[True] is by_block[False]
    calls.clear()
    compile_by_block((abs,), "default")  # the default mode named: the same options
    assert calls == [{"dynamic": False, "options": DEFAULT_MODE_OPTIONS}]
