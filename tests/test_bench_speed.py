"""The speed benchmark's CPU-runnable parts on a tiny model (the GPU figures come from the device): its loop
timing (speed_loop), diagnostics (speed_diagnostics) and closing table (bench_speed)."""

from __future__ import annotations

import functools
import gzip
import json

from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_target

import hybridsd as hsd
from experiments import bandwidth_floor, bench_speed, speed_diagnostics, speed_loop, speed_steps
from hybridsd.drafters.replay import ReplayDrafter
from hybridsd.kv_cache import bucket
from hybridsd.target import Target, cache_kwarg


def test_accepted_continuation_is_a_fixed_point_in_bf16():
    """In bf16 the plain output need not survive verify passes; the fixed point does, every draft accepted."""
    model = tiny_target("llama", vocab=500, seed=1, layers=2).to(torch.bfloat16)
    ids = torch.randint(3, 500, (40,), generator=torch.Generator().manual_seed(0))
    cont = speed_loop.accepted_continuation(model, ids, 8, max_new_tokens=48, eos_token_id=[], compile=False)
    res = hsd.generate(model, ids, drafter=ReplayDrafter(cont, 8), max_new_tokens=48, eos_token_id=[])
    assert res.tokens == cont
    assert sum(s.accepted for s in res.stats.trace) == sum(s.drafted for s in res.stats.trace) == 48 - 1 - len(
        res.stats.trace)


def test_profiles_run_on_the_cpu():
    model = tiny_target("llama", vocab=300, seed=2, layers=2)
    step = speed_diagnostics.profile_step(Target(model, 64), 20, 3, steps=2)
    assert step["q"] == 3 and step["top"] and sum(step["ms_per_step_by_kind"].values()) > 0
    assert step["calls_per_step"] >= len(step["top"]) / 2
    exact = Target(model, 64, exact=16)  # a 3-token step runs as the padded 16-row block
    exact.exact_span = 256
    step = speed_diagnostics.profile_step(exact, 20, 3, steps=2)
    assert step["q"] == 3 and step["calls_per_step"] > 0
    loop = speed_diagnostics.profile_loop(model, 24, k=4, new_tokens=20)
    assert loop["accepted"] == loop["drafted"] > 0
    assert loop["steps"] == 5  # the prefill (1 token) and 4 passes of up to 4 + 1 tokens: 1 + 5 + 5 + 5 + 4
    assert loop["wall_ms_per_step"] > 0 and loop["top_host"]
    assert loop["timeline"]["device_busy_ms_per_step"] == 0  # no device on the CPU


def test_the_loop_trace_is_written_atomically(tmp_path, monkeypatch):
    real, written = speed_diagnostics.write_atomic, []
    monkeypatch.setattr(speed_diagnostics, "write_atomic", lambda path, data: (written.append(path), real(path, data)))
    out = tmp_path / "res" / "speed_loop_trace.json.gz"
    speed_diagnostics.profile_loop(tiny_target("llama", vocab=300, seed=2, layers=2), 24, k=4, new_tokens=8,
                                   trace_out=out)
    assert written == [out] and "traceEvents" in json.loads(gzip.decompress(out.read_bytes()))
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_device_gaps_on_a_synthetic_trace():
    """Busy = union of overlapping device intervals; gaps are attributed to the host calls that overlap them."""
    k = lambda ts, dur: {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": dur}  # noqa: E731
    trace = {"traceEvents": [
        k(0, 10), k(5, 10), k(115, 5), {"ph": "X", "cat": "gpu_memcpy", "name": "m", "ts": 120, "dur": 30},
        {"ph": "X", "cat": "cpu_op", "name": "aten::argmax", "ts": 20, "dur": 60},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 90, "dur": 40},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 0},
    ]}
    g = speed_diagnostics.device_gaps(trace, steps=2)
    assert g["device_busy_ms_per_step"] == (15 + 35) / 1e3 / 2
    assert g["device_idle_ms_per_step"] == 100 / 1e3 / 2
    assert g["gaps_over_50us"] == 1
    (gap,) = g["longest_gaps"]
    assert gap["us"] == 100
    assert gap["host_calls"] == [{"name": "aten::argmax", "overlap_us": 60},
                                 {"name": "cudaMemcpyAsync", "overlap_us": 25}]


def test_loop_overhead_times_steps_from_inside_on_the_cpu():
    model = tiny_target("llama", vocab=300, seed=3, layers=2)
    fwd = {f"chain_q{q}": 0.01 for q in range(1, 10)}
    out = speed_loop.loop_overhead(model, 24, fwd, new_tokens=30)
    plain, replay = out["plain"], out["replay_k8"]
    assert plain["steps"] == 29 and plain["drafted"] == 0
    assert replay["accepted"] == replay["drafted"] == 30 - 1 - replay["steps"]
    for r in (plain, replay):
        loop = r["in_loop"]
        assert loop["steps"] == r["steps"]
        assert 0 < loop["forward_ms"] <= loop["wall_ms"] and loop["outside_forward"] > 0
        assert abs(r["forward_ms_per_step"] - 0.01) < 1e-12
    partial = speed_loop.loop_overhead(model, 24, {"chain_q1": 0.01}, new_tokens=30)
    assert abs(partial["plain"]["forward_ms_per_step"] - 0.01) < 1e-12 and \
        partial["replay_k8"]["outside_forward"] is None


def test_step_conditions_run_on_the_cpu():
    model = tiny_target("llama", vocab=300, seed=4, layers=2)
    out = speed_diagnostics.step_conditions(model, 30, q=3, iters=4)
    assert out["q"] == 3 and out["compile"] is False
    assert out["capacity"] >= 30 + 3 * (4 + 6) + 1 and out["capacity"] % 64 == 0  # the advancing starts fit
    assert all(out[k] > 0 for k in ("fixed", "advancing", "host_gap", "fresh_tokens", "verify_after"))


@pytest.mark.parametrize("ctx, q, base", [(960, 9, 799), (2048, 9, 2048), (1030, 9, 1030), (500, 1, 487), (30, 3, 30)])
def test_advancing_steps_attend_over_the_span_of_a_step_at_the_context(ctx, q, base):
    calls = 25
    assert speed_diagnostics.advancing_start(ctx, q, calls, bucket) == base
    spans = {bucket(base + q * (i + 1)) for i in range(calls)}
    assert spans == {bucket(ctx + q)}  # at 960 the steps from 960 would cross from 1024 slots to 1280


def test_advancing_steps_that_fit_no_span_are_refused():
    with pytest.raises(ValueError, match="25 steps of 64 tokens do not fit in one attention span at context 500"):
        speed_diagnostics.advancing_start(500, 64, 25, bucket)


def test_summary_table_relates_each_step_to_the_floor_and_the_baselines():
    # 2 layers: 2.10 GB of the 2.97 GB of weights are the embedding and LM head; 512 tokens of KV: 2 MiB
    read = bandwidth_floor.weight_bytes(2) - bandwidth_floor.embedding_bytes() + 2 * 2 * 512 * 8 * 128 * 2
    res = {"weight_GB": bandwidth_floor.weight_bytes(2) / 1e9, "layers": 2, "copy_bandwidth_TBps": read / 2e-3 / 1e12,
           "contexts": {"512": {"hf_eager_decode": 20.0, "hf_static_compiled_q1": 5.0, "graph_chain_q1": 4.0,
                                "graph_compiled_chain_q1": "failed: RuntimeError: x"}}}
    lines = bench_speed.summary_table(res).splitlines()
    assert lines[0] == "floor at context 512: 2.00 ms"
    assert lines[1].startswith("(2.97 GB of weights, 1.05 of them the input embedding, at ")
    step = next(x for x in lines if "graph_chain_q1" in x).split()
    assert step[2:] == ["4.00", "2.00", "0.20", "0.80"]  # ms, x floor, x HF eager, x HF compiled
    assert next(x for x in lines if "graph_compiled_chain_q1" in x).endswith("failed: RuntimeError: x")


def test_step_times_and_matmul_rows_run_on_the_cpu():
    """ours_ms times chains and trees (a random tree of n - 1 nodes for n != 9; none in exact mode), and gemm_rows
    every matmul kind at every block size (host times on the CPU)."""
    model = tiny_target("llama", vocab=300, seed=5, layers=2)
    steps = speed_steps.ours_ms(Target(model, 128), 20, [1, 3], trees=(9, 17))
    assert set(steps) == {"chain_q1", "chain_q3", "tree_q9", "tree_q17"} and min(steps.values()) > 0
    exact = speed_steps.ours_ms(Target(model, 20 + speed_steps.EXACT_NEW_TOKENS + 16, exact=16), 20, [1], (9, 17))
    assert set(exact) == {"chain_q1", "tree_q9"}
    rows = speed_diagnostics.gemm_rows(model, rows=(1, 4), iters=2)
    assert [(r["rows"], r["kind"]) for r in rows] == [(m, k) for m in (1, 4)
                                                      for k in ("qkv", "o", "gate_up", "down", "lm_head")]
    assert min(r["ms_per_step"] for r in rows) > 0


def _refused_before_work(argv, tmp_path, capsys, monkeypatch) -> str:
    """bench_speed's one error line for ``argv`` (exit 2), with no model built, no bandwidth timed and no file
    written; on a machine that looks like it has CUDA, so that only the arguments can stop it."""
    def refuse(*a, **k):
        raise AssertionError("work began before the arguments were checked")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in ("llama8b", "copy_bandwidth", "zoo_speed"):
        monkeypatch.setattr(bench_speed, name, refuse)
    out = tmp_path / "speed.json"
    with pytest.raises(SystemExit) as e:
        bench_speed.main(["--out", str(out), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and not out.exists(), err
    return err[0]


@pytest.mark.parametrize("argv, flag", [
    (["--layers", "0"], "--layers"), (["--contexts", "512", "0"], "--contexts"), (["--contexts", "-5"], "--contexts"),
    (["--chains", "1", "0"], "--chains"), (["--trees", "1"], "--trees"), (["--compile-mode", "foo"], "--compile-mode"),
    (["--compile-mode", "reduce-overhead"], "--compile-mode"),
])
def test_bad_sizes_and_modes_are_refused_before_any_work(argv, flag, tmp_path, capsys, monkeypatch):
    assert flag in _refused_before_work(argv, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("argv, says", [
    (["--zoo-only", "--skip", "zoo"], "--zoo-only with --skip zoo: nothing left to run"),
    (["--zoo-only", "--configs", "graph_auto", "--kernels", "--profile"],
     "--zoo-only runs the zoo alone (no 8B-shape model), so --configs, --kernels, --profile would be ignored"),
    (["--skip", "overhead", "--conditions"], "--skip overhead drops --conditions ("),
    (["--skip", "hf-compile", "overhead", "--overhead-configs", "graph_auto"],
     "--skip overhead drops --overhead-configs ("),
    (["--configs", "graph_autotune=tree_q64", "eager", "graph_autotune=chain_q1"],
     "--configs: graph_autotune given with different steps (graph_autotune=chain_q1, graph_autotune=tree_q64)"),
    (["--configs", "graph=chain_q1", "graph"], "--configs: graph given with different steps"),
])
def test_contradicting_flags_are_refused_before_any_work(argv, says, tmp_path, capsys, monkeypatch):
    assert says in _refused_before_work(argv, tmp_path, capsys, monkeypatch)


def test_zoo_only_times_the_zoo_alone(tmp_path, monkeypatch):
    """``--zoo-only`` writes the run's provenance, its arguments and the zoo section, building no 8B-shape model."""
    def refuse(*a, **k):
        raise AssertionError("the 8B-shape model was built")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench_speed, "llama8b", refuse)
    monkeypatch.setattr(bench_speed, "copy_bandwidth", refuse)
    monkeypatch.setattr(bench_speed.provenance, "run_info", lambda device: {"device": device})
    monkeypatch.setattr(bench_speed, "zoo_speed", lambda: {"plain": {"tokens_per_s": 1.0}})
    out = tmp_path / "zoo.json"
    bench_speed.main(["--zoo-only", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["zoo"] == {"plain": {"tokens_per_s": 1.0}} and doc["run_info"] == {"device": "cuda"}
    assert doc["args"]["zoo_only"] is True and set(doc) == {"run_info", "args", "zoo"}


def test_loop_overhead_takes_a_failed_forward_as_missing():
    """A configuration whose step failed holds the failure's text: its forward fields are None, the walls kept."""
    model = tiny_target("llama", vocab=300, seed=3, layers=2)
    fwd = {"chain_q1": "failed: RuntimeError: x"} | {f"chain_q{q}": 0.01 for q in range(2, 10)}
    out = speed_loop.loop_overhead(model, 24, fwd, new_tokens=12)
    assert out["plain"]["forward_ms_per_step"] is None and out["plain"]["wall_ms_per_step"] > 0
    assert out["replay_k8"]["forward_ms_per_step"] is not None


def test_hf_generate_time_is_a_median_of_runs_after_a_warm_up(monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).eval()
    calls, generate = [], model.generate
    monkeypatch.setattr(model, "generate", lambda *a, **k: calls.append(k["max_new_tokens"]) or generate(*a, **k))
    clock = iter([0.0, 1.0, 10.0, 10.4, 20.0, 20.1])  # the three timed runs: 1.0, 0.4 and 0.1 s
    monkeypatch.setattr(speed_loop, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    ms = speed_loop.hf_generate_ms_per_token(model, torch.randint(3, 300, (10,)), 4, min_new_tokens=4)
    assert calls == [4, 4, 4, 4]  # a warm-up run, then the timed ones
    assert ms == pytest.approx(400 / 4)


def test_zoo_speed_keeps_the_methods_when_plain_fails(monkeypatch):
    """A failed plain run is recorded as such; the other methods keep their numbers, their speedups None."""
    fwd = {f"chain_q{q}": 1.0 for q in range(1, 10)}
    monkeypatch.setattr(speed_loop, "ours_ms", lambda *a, **k: fwd)

    def method(model, tok, exs, eos, make, fwd, max_new, sync):
        if make() is None:
            raise RuntimeError("plain broke")
        return {"tokens_per_s": 100.0, "seq_normalized_al": 2.0, "tokens": 10, "step_ms": 2.0,
                "forward_ms_per_step": 1.0}

    monkeypatch.setattr(speed_loop, "zoo_method", method)
    out = speed_loop.zoo_speed(n_prompts=1, device="cpu")
    assert out["plain"].startswith("failed: RuntimeError: plain broke")
    assert out["ngram"]["speedup"] is None and out["ngram"]["forward_only_speedup"] == 2.0


def test_hf_eager_decode_times_only_key_lengths_met_before(monkeypatch):
    """The timed steps run on a second cache, over key lengths a throwaway cache went through first (the attention's
    per-shape setup is not timed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).eval()
    lengths, forward = [], model.forward  # per prefilled cache, the cache's length at each decode step

    @functools.wraps(forward)  # the signature names the cache argument of this transformers version
    def recorded(*a, **k):
        if k["input_ids"].shape[1] > 1:
            lengths.append([])
        else:
            lengths[-1].append(k[cache_kwarg(model)].get_seq_length())
        return forward(*a, **k)

    monkeypatch.setattr(model, "forward", recorded)
    assert speed_steps.hf_eager_decode_ms(model, 30, iters=4, warmup=2) > 0
    assert len(lengths) == 2 and lengths[1] == list(range(30, 36)) and set(lengths[1]) <= set(lengths[0])
