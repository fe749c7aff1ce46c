"""Shared fixtures: tiny random fp32 targets of two families, test-only drafters, and a recorder of stderr writes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hybridsd.drafters.base import Draft, ProposeRequest
from hybridsd.drafters.replay import ReplayDrafter

torch.set_num_threads(1)  # tiny models: threads only add overhead

# The slowest files, slowest first, run before the others: under `--dist loadfile` each file runs whole on one
# worker, so starting the long ones first lets the workers finish together (longest-first scheduling).
SLOW_FIRST = ("test_compile.py", "test_generate.py", "test_notebooks.py", "test_sampling.py", "test_trees.py",
              "test_distributed.py", "test_exact.py", "test_real_models.py", "test_attention.py", "test_faults.py",
              "test_eagle_train.py", "test_verify.py", "test_package.py", "test_paper.py", "test_spec_bench_cli.py",
              "test_ngram.py", "test_edit_requests.py")


def pytest_configure(config):
    """Keep the collection's file order under xdist (its default reorders files by their number of tests)."""
    if getattr(config.option, "loadscopereorder", False):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: order within a file kept


def pytest_runtest_logreport(report):
    """With ``HYBRIDSD_INSTAFAIL=1`` (device runs), print a failure when it happens: a later crash of the
    process (a CUDA abort) must not take the tracebacks with it."""
    if report.failed and os.environ.get("HYBRIDSD_INSTAFAIL"):
        print(f"\n!! {report.nodeid}\n{report.longreprtext[-4000:]}", flush=True)

VOCAB = 67
# the data folder as hybridsd.data finds it: $HYBRIDSD_DATA, else shared/data beside the repository
DATA_DIR = Path(os.environ.get("HYBRIDSD_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def tiny_target(family: str = "llama", vocab: int = VOCAB, seed: int = 0, layers: int = 4, **overrides):
    """A tiny random causal LM in eval mode (fp32, CPU)."""
    import transformers as tf

    kw = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=384,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)
    kw.update(overrides)
    torch.manual_seed(seed)
    classes = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}
    name = classes[family]
    model = getattr(tf, f"{name}ForCausalLM")(getattr(tf, f"{name}Config")(**kw))
    return model.eval()


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def target(request):
    return tiny_target(request.param)


def train_heads(model, prompts: list[torch.Tensor], new_tokens: int, steps: int, *, batch_size: int = 8,
                seq_len: int = 96, kinds=("eagle1", "eagle3")) -> dict:
    """EAGLE heads of ``kinds`` for ``model``, trained (``steps`` steps from seed 0, on the model's device) on its
    greedy continuations of ``prompts`` (``new_tokens`` each): drafting those prompts they are right often and wrong
    often (a random head is never right), so generation exercises acceptance and rollback."""

    from hybridsd.eagle import train
    from hybridsd.eagle.model import EagleHead

    seqs = train.generate_sequences(model, prompts, new_tokens, eos_token_id=None, batch_size=len(prompts))
    heads = {}
    for kind in kinds:
        torch.manual_seed(0)
        head = EagleHead.from_target(model, kind)
        if kind == "eagle3":
            train.init_eagle3_output(head, model)
        train.train_head(head, model, seqs, steps=steps, batch_size=batch_size, lr=1e-2, seq_len=seq_len,
                         log_every=steps, ttt_steps=2, noise=0.0)
        heads[kind] = head.eval().requires_grad_(False)
    return heads


@pytest.fixture(scope="session")
def trained_heads(target):
    """EAGLE-1 and EAGLE-3 heads for ``target`` that accept often (:func:`train_heads`, 60 steps, ~2 s each, on
    ``prompts(8)``)."""
    return train_heads(target, prompts(8), 48, steps=60)


@pytest.fixture
def record_stderr(monkeypatch):
    """Called inside a test: from then on every ``sys.stderr.write`` call's text goes, in order, into the list it
    returns (capsys joins them; this tells one write from two). Installed in the test's call phase, since pytest's
    capture sets ``sys.stderr`` again between a fixture's setup and the call."""
    def record() -> list[str]:
        writes = []

        class Recorder:
            def write(self, text):
                writes.append(text)

            def flush(self):
                pass

        monkeypatch.setattr(sys, "stderr", Recorder())
        return writes

    return record


def prompts(n: int, vocab: int = VOCAB, seed: int = 0) -> list[torch.Tensor]:
    """Random prompts, half of them repetitive (a motif repeated), of awkward lengths."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(1, 40))
        if i % 2:
            motif = rng.integers(3, vocab, size=int(rng.integers(2, 7)))
            seq = np.tile(motif, length // len(motif) + 2)[: max(length, 2)]
        else:
            seq = rng.integers(3, vocab, size=length)
        out.append(torch.as_tensor(seq, dtype=torch.long))
    return out


def hf_greedy(model, ids: torch.Tensor, max_new_tokens: int, eos_token_id=None) -> list[int]:
    """Plain greedy decoding with HF ``generate`` (the reference)."""
    out = model.generate(ids[None], attention_mask=torch.ones_like(ids[None]), do_sample=False,
                         max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=0,
                         top_k=None, top_p=None)
    return out[0, ids.numel():].tolist()


class OracleDrafter(ReplayDrafter):
    """Test drafter: the known continuation, each token replaced by a random one with prob ``err``.

    With ``sample=True`` tokens are drawn from a random proposal distribution and ``Draft.probs`` is set.
    """

    def __init__(self, reference: list[int], k: int, err: float = 0.3, name: str = "oracle",
                 seed: int = 0, sample: bool = False, vocab: int = VOCAB):
        super().__init__(reference, k)
        self.err, self.name = err, name
        self.rng = np.random.default_rng(seed)
        self.sample, self.vocab = sample, vocab

    def propose(self, request: ProposeRequest) -> list[Draft]:
        pos = self.position(request)
        k = min(self.k, request.budget)
        if self.sample:
            g = request.generator
            q = torch.distributions.Dirichlet(torch.ones(self.vocab) * 0.3).sample((k,))  # [k, V]
            toks = torch.multinomial(q, 1, generator=g)[:, 0]
            return [Draft(toks.to(request.device), self.name, q.to(request.device))]
        d = list(self.continuation[pos : pos + k])
        d += [int(self.rng.integers(self.vocab))] * (k - len(d))
        for i in range(len(d)):
            if self.rng.random() < self.err:
                d[i] = int(self.rng.integers(self.vocab))
        return [Draft(torch.tensor(d, dtype=torch.long, device=request.device), self.name)] if d else []


def interpreter_env() -> dict[str, str]:
    """The environment of a script run under Triton's CPU interpreter: ``TRITON_INTERPRET=1`` and, first on the
    path, ``tests/interpreter`` (its ``sitecustomize`` makes the interpreter's dot compute each row alone)."""
    here = Path(__file__).resolve().parent
    path = os.pathsep.join(p for p in (str(here / "interpreter"), str(here.parent), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=path)


def run_interpreted(scripts: dict[str, str]) -> dict[str, str | None]:
    """Each script (name -> code) run under Triton's CPU interpreter, all in one process (one import of torch and
    triton; TRITON_INTERPRET=1 is read when triton is imported, so not in the test process), each in a fresh
    namespace: name -> None, or the traceback it raised."""
    import json
    import subprocess
    import sys
    import textwrap

    pytest.importorskip("triton")
    driver = textwrap.dedent(f"""
        import json, traceback
        failed = {{}}
        for name, code in {scripts!r}.items():
            try:
                exec(compile(code, name, "exec"), {{"__name__": "__main__"}})
                failed[name] = None
            except BaseException:
                failed[name] = traceback.format_exc()
        print("RESULTS", json.dumps(failed))
    """)
    env = interpreter_env()
    out = subprocess.run([sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0 and "RESULTS " in out.stdout, out.stderr[-3000:]
    return json.loads(out.stdout.rsplit("RESULTS ", 1)[1])


def compile_sm90(fn, pointers: dict[str, str], consts: dict, aligned: tuple[str, ...] = (), stage: str = "ptx") -> str:
    """``fn`` (a Triton kernel) compiled for an H100/H200 (sm_90; no GPU needed): the ``stage`` text (``ttir``,
    ``ptx``). ``pointers``: name -> Triton type (``*bf16``, ...); ``consts``: the constexprs; every other argument an
    int32; ``aligned``: arguments specialized as multiples of 16, as Triton's launcher does for aligned pointers and
    strides."""
    import triton
    from triton.backends.compiler import GPUTarget

    signature = {a: pointers.get(a, "constexpr" if a in consts else "i32") for a in fn.arg_names}
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, attrs=attrs,
                                    constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm[stage]
