"""Bad input gets one clear error naming the problem, before any work: ``generate``'s arguments, drafters made
for another model, and EAGLE checkpoints (bad config, shards outside the folder, truncated weights, another
model's embedding). The accepted forms (tokenizer output, lists, arrays) give the same tokens as a tensor."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BatchEncoding

from conftest import VOCAB, tiny_target
from hybridsd.drafters.base import Draft, Drafter
from hybridsd.drafters.eagle import EagleDrafter
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramDrafter
from hybridsd.drafters.replay import ReplayDrafter
from hybridsd.drafters.tree import DraftTree
from hybridsd.eagle.model import EagleHead
from hybridsd.generate import generate

GEN = sys.modules["hybridsd.generate"]  # the module (``hybridsd.generate`` is the function)
IDS = torch.tensor([5, 9, 12, 7, 30, 5, 9])


@pytest.fixture(scope="module")
def model():
    return tiny_target("llama")


@pytest.fixture(scope="module")
def other():
    """A model of the same shapes with other weights, and one with another vocabulary."""
    return {"weights": tiny_target("llama", seed=1), "vocab": tiny_target("llama", vocab=VOCAB + 5, seed=2)}


@pytest.fixture
def no_work(model, monkeypatch):
    """Counts what would be work: target construction, the model's forward, the embedding, drafter calls."""
    calls = []

    def refuse(*a, **k):
        calls.append("target_for")
        raise AssertionError("work began before the input was checked")

    monkeypatch.setattr(GEN, "target_for", refuse)
    hook = model.get_input_embeddings().register_forward_hook(lambda *a: calls.append("embedding"))
    fwd = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **k: calls.append("forward") or fwd(*a, **k))
    for cls in (NgramDrafter, EagleDrafter, HybridDrafter):
        for name in ("reset", "observe", "propose"):
            monkeypatch.setattr(cls, name, lambda *a, _n=name, **k: calls.append(_n))
    yield calls
    hook.remove()


def _eagle(target, kind="eagle1", k=3):
    torch.manual_seed(0)
    return EagleDrafter(EagleHead.from_target(target, kind), k=k)


# (case, generate kwargs beyond the model, exception, words the message must hold)
GENERATE_CASES = [
    ("temperature nan", dict(temperature=math.nan), ValueError, ["temperature", "nan"]),
    ("temperature inf", dict(temperature=math.inf), ValueError, ["temperature", "inf"]),
    ("temperature negative", dict(temperature=-1.0), ValueError, ["temperature", "-1"]),
    ("temperature string", dict(temperature="0.5"), TypeError, ["temperature"]),
    ("temperature numpy nan", dict(temperature=np.float32("nan")), ValueError, ["temperature", "nan"]),
    ("float input_ids", dict(input_ids=IDS.float()), TypeError, ["input_ids", "integer", "float"]),
    ("bool input_ids", dict(input_ids=IDS > 8), TypeError, ["input_ids", "integer", "bool"]),
    ("list of floats", dict(input_ids=[1.0, 2.5]), TypeError, ["input_ids", "integer"]),
    ("string input_ids", dict(input_ids="hello"), TypeError, ["input_ids"]),
    ("id = vocab", dict(input_ids=[5, VOCAB, 6]), ValueError, ["input_ids", str(VOCAB), f"[0, {VOCAB})"]),
    ("negative id", dict(input_ids=[5, -3]), ValueError, ["input_ids", "-3", f"[0, {VOCAB})"]),
    ("huge id", dict(input_ids=np.array([2**40])), ValueError, ["input_ids", str(2**40)]),
    ("eos = vocab", dict(eos_token_id=VOCAB), ValueError, ["eos_token_id", str(VOCAB)]),
    ("eos list with -1", dict(eos_token_id=[2, -1]), ValueError, ["eos_token_id", "-1"]),
    ("eos string", dict(eos_token_id="</s>"), TypeError, ["eos_token_id"]),
    ("eos float", dict(eos_token_id=2.0), TypeError, ["eos_token_id"]),
    ("max_new_tokens 0", dict(max_new_tokens=0), ValueError, ["max_new_tokens"]),
    ("max_new_tokens negative", dict(max_new_tokens=-5), ValueError, ["max_new_tokens"]),
    ("max_new_tokens float", dict(max_new_tokens=2.5), TypeError, ["max_new_tokens"]),
    ("max_new_tokens bool", dict(max_new_tokens=True), TypeError, ["max_new_tokens"]),
    ("max_new_tokens over context", dict(max_new_tokens=10_000), ValueError, ["context length"]),
    ("seed float", dict(seed=1.5, temperature=1.0), TypeError, ["seed"]),
    ("drafter string", dict(drafter="ngram"), TypeError, ["drafter", "str"]),
    ("empty prompt", dict(input_ids=[]), ValueError, ["empty prompt"]),
    ("batch of two", dict(input_ids=torch.stack([IDS, IDS])), ValueError, ["batch of 2"]),
    ("3-D ids", dict(input_ids=IDS[None, None]), ValueError, ["input_ids", "shape"]),
    ("dict without input_ids", dict(input_ids={"ids": IDS}), ValueError, ["input_ids", "'ids'"]),
    ("on_double_bos", dict(on_double_bos="maybe"), ValueError, ["on_double_bos"]),
    ("seed past 64 bits", dict(seed=2**70, temperature=1.0), ValueError, ["seed", str(2**70)]),
    ("attention unknown", dict(attention="flash"), ValueError, ["attention", "flash"]),
    ("attention split on the CPU", dict(attention="split"), ValueError, ["attention='split'", "CUDA"]),
    ("compile mode unknown", dict(compile="bogus"), ValueError, ["compile", "bogus"]),
    ("compile a number", dict(compile=1.5), ValueError, ["compile", "1.5"]),
    ("compile with graphs", dict(compile="reduce-overhead"), ValueError, ["reduce-overhead", "no-cudagraphs"]),
    ("cuda_graphs a string", dict(cuda_graphs="no"), TypeError, ["cuda_graphs", "'no'"]),
    ("cuda_graphs on the CPU", dict(cuda_graphs=True), ValueError, ["cuda_graphs=True", "CUDA", "cpu"]),
    ("eos float tensor", dict(eos_token_id=torch.tensor([2.0])), TypeError, ["eos_token_id", "float"]),
    ("uint64 id past int64", dict(input_ids=np.array([5, 2**63 + 5], dtype=np.uint64)), ValueError,
     ["input_ids", str(2**63 + 5), f"[0, {VOCAB})"]),  # as given, not wrapped to a negative int64
]


@pytest.mark.parametrize("case,kw,exc,words", GENERATE_CASES, ids=[c[0] for c in GENERATE_CASES])
def test_generate_rejects_before_any_work(model, no_work, case, kw, exc, words):
    kw = {"input_ids": IDS, "max_new_tokens": 8, **kw}
    with pytest.raises(exc) as e:
        generate(model, **kw)
    msg = str(e.value)
    assert all(w in msg for w in words), msg
    assert no_work == []


DRAFTER_CASES = [  # (case, drafter builder from the fixtures, words)
    ("eagle1 head of another vocabulary", lambda o: _eagle(o["vocab"]), ["vocabulary", str(VOCAB + 5)]),
    ("eagle3 head of another vocabulary", lambda o: _eagle(o["vocab"], "eagle3"), ["vocabulary"]),
    ("hybrid with another vocabulary's head",
     lambda o: HybridDrafter(NgramDrafter(k=3), _eagle(o["vocab"])), ["vocabulary"]),
    ("head on another model's embedding", lambda o: _eagle(o["weights"]), ["another model's embedding"]),
    ("eagle3 head reading layers the target lacks",
     lambda o: EagleDrafter(EagleHead.from_target(o["weights"], "eagle3", target_layers=(1, 2, 9))),
     ["target layers"]),
    ("eagle3 head reading a layer before the first",
     lambda o: EagleDrafter(EagleHead.from_target(o["weights"], "eagle3", target_layers=(-10, 1, 2))),
     ["target layers"]),
]


@pytest.mark.parametrize("case,build,words", DRAFTER_CASES, ids=[c[0] for c in DRAFTER_CASES])
def test_drafter_for_another_model_is_rejected_before_any_work(model, other, no_work, case, build, words):
    drafter = build(other)
    with pytest.raises(ValueError) as e:
        generate(model, IDS, drafter=drafter, max_new_tokens=8)
    assert all(w in str(e.value) for w in words), str(e.value)
    assert no_work == []


class _Declared(Drafter):
    """Declares ``attrs`` (hidden_layers, max_tokens, max_branches); proposes nothing; keeps what it observes."""

    def __init__(self, **attrs) -> None:
        self.attrs, self.seen = {"max_tokens": 1, "max_branches": 1, **attrs}, []
        self.hidden_layers = attrs.get("hidden_layers", ())

    max_tokens = property(lambda self: self.attrs["max_tokens"])
    max_branches = property(lambda self: self.attrs["max_branches"])

    def observe(self, hidden, next_tokens) -> None:
        self.seen.append(hidden)

    def propose(self, request):
        return []


L_TINY = 4  # layers of tiny_target("llama"): hidden_states are indexed -5..4
DECLARED = [  # (case, declared attributes, exception, words the message must hold)
    ("hidden layer past the last", dict(hidden_layers=(L_TINY + 1,)), ValueError,
     ["_Declared.hidden_layers", str(L_TINY + 1), "-5..4"]),
    ("hidden layer far past the last", dict(hidden_layers=(0, 10)), ValueError, ["_Declared.hidden_layers", "10"]),
    ("hidden layer before the first", dict(hidden_layers=(-L_TINY - 2,)), ValueError,
     ["_Declared.hidden_layers", str(-L_TINY - 2), "-5..4"]),
    ("hidden layer a float", dict(hidden_layers=(1.5,)), TypeError, ["_Declared.hidden_layers", "ints", "1.5"]),
    ("hidden layer a string", dict(hidden_layers=("a",)), TypeError, ["_Declared.hidden_layers", "ints"]),
    ("hidden layer a bool", dict(hidden_layers=(True,)), TypeError, ["_Declared.hidden_layers", "ints"]),
    ("hidden layers an int", dict(hidden_layers=-1), TypeError, ["_Declared.hidden_layers", "tuple"]),
    ("max_tokens negative", dict(max_tokens=-5), ValueError, ["_Declared.max_tokens", "-5"]),
    ("max_tokens zero", dict(max_tokens=0), ValueError, ["_Declared.max_tokens", ">= 1"]),
    ("max_tokens a float", dict(max_tokens=2.5), TypeError, ["_Declared.max_tokens", "int", "2.5"]),
    ("max_branches a string", dict(max_branches="2"), TypeError, ["_Declared.max_branches", "int"]),
]


@pytest.mark.parametrize("case,attrs,exc,words", DECLARED, ids=[c[0] for c in DECLARED])
def test_drafter_declarations_are_checked_before_any_work(model, no_work, case, attrs, exc, words):
    """A drafter's hidden_layers (indices into HF hidden_states: -(L + 1) .. L), max_tokens and max_branches are
    checked once, naming the drafter: not wrapped around to another layer, not failing deep in the model."""
    with pytest.raises(exc) as e:
        generate(model, IDS, drafter=_Declared(**attrs), max_new_tokens=4)
    assert all(w in str(e.value) for w in words), str(e.value)
    assert no_work == []


def test_hidden_layers_at_the_ends_of_the_range_are_the_right_states(model):
    """-(L + 1) is the embeddings and L the final-normed output (HF hidden_states), as 0 and -1 are."""
    with torch.no_grad():
        hs = model(IDS[None], output_hidden_states=True).hidden_states  # L + 1 entries
    for layers in ((-L_TINY - 1, L_TINY), (0, -1), [2]):
        d = _Declared(hidden_layers=layers)
        generate(model, IDS, drafter=d, max_new_tokens=2)
        want = torch.cat([hs[i][0] for i in layers], -1)
        torch.testing.assert_close(d.seen[0], want, atol=1e-4, rtol=1e-4)


class _TypedDrafter(Drafter):
    """Proposes ``make()``: drafts whose token ids have some dtype."""

    max_tokens = 4

    def __init__(self, make) -> None:
        self.make = make

    def propose(self, request):
        return self.make()


def _ids(dtype):
    return torch.tensor([5, 9], dtype=dtype)


PROPOSALS = [  # (case, proposal builder, dtype it holds)
    ("float Draft", lambda: [Draft(_ids(torch.float32), "f")], "torch.float32"),
    ("float Draft after an int one", lambda: [Draft(_ids(torch.long), "i"), Draft(_ids(torch.float64), "f")],
     "torch.float64"),
    ("bool Draft", lambda: [Draft(_ids(torch.bool), "f")], "torch.bool"),
    ("float DraftTree", lambda: DraftTree(_ids(torch.float16), (-1, -1), ("f", "f")), "torch.float16"),
    ("uint32 Draft", lambda: [Draft(_ids(torch.uint32), "u")], "torch.uint32"),
]


@pytest.mark.parametrize("case,make,dtype", PROPOSALS, ids=[c[0] for c in PROPOSALS])
def test_non_integer_draft_tokens_name_the_drafter(model, case, make, dtype):
    """One TypeError naming the drafter class and the dtype, before the drafts reach the model."""
    fed = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0].numel()))
    try:
        with pytest.raises(TypeError, match=rf"_TypedDrafter\.propose .* dtype {dtype}"):
            generate(model, IDS, drafter=_TypedDrafter(make), max_new_tokens=8)
    finally:
        hook.remove()
    assert fed == [len(IDS)]  # the prefill only


def test_draft_tokens_on_another_device_name_the_drafter(model):
    """Ids on another device than the model's (here the meta device; on a CUDA model, host ids) are one ValueError
    naming the drafter and both devices, before the drafts reach the model."""
    with pytest.raises(ValueError, match=r"_TypedDrafter\.propose returned draft tokens on meta; the model is on cpu"):
        generate(model, IDS, drafter=_TypedDrafter(lambda: [Draft(torch.tensor([5, 9], device="meta"), "a")]),
                 max_new_tokens=8)


OUT_OF_VOCAB = [  # (case, proposal builder, the bad id, the source named)
    ("id past the vocabulary", lambda: [Draft(torch.tensor([5, VOCAB + 3]), "a")], VOCAB + 3, "a"),
    ("negative id", lambda: [Draft(torch.tensor([-1, 5]), "a")], -1, "a"),
    ("uint8 id past the vocabulary", lambda: [Draft(torch.tensor([5, 200], dtype=torch.uint8), "a")], 200, "a"),
    ("bad second chain", lambda: [Draft(torch.tensor([5, VOCAB - 1]), "a"), Draft(torch.tensor([VOCAB]), "b")],
     VOCAB, "b"),
    ("bad tree node", lambda: DraftTree(torch.tensor([5, 9, VOCAB + 1]), (-1, -1, 0), ("a", "b", "c")), VOCAB + 1, "c"),
]


@pytest.mark.parametrize("case,make,bad,source", OUT_OF_VOCAB, ids=[c[0] for c in OUT_OF_VOCAB])
def test_out_of_vocabulary_draft_tokens_name_the_drafter(model, case, make, bad, source):
    """One ValueError naming the drafter class, the id and the draft's source, before the drafts reach the model
    (not the embedding's bare IndexError); the last id of the vocabulary is taken."""
    fed = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0].numel()))
    try:
        with pytest.raises(ValueError, match=rf"_TypedDrafter\.propose .* id {bad} \(source '{source}'\), outside "
                                             rf"the model's vocabulary \[0, {VOCAB}\)"):
            generate(model, IDS, drafter=_TypedDrafter(make), max_new_tokens=8)
    finally:
        hook.remove()
    assert fed == [len(IDS)]  # the prefill only
    res = generate(model, IDS, drafter=_TypedDrafter(lambda: [Draft(torch.tensor([VOCAB - 1]), "a")]),
                   max_new_tokens=3)
    assert res.stats.num_drafts > 0


BAD_RETURNS = [  # (case, proposal builder, exception, words); _TypedDrafter declares max_tokens = 4
    ("a tensor", lambda: torch.tensor([5, 9]), TypeError, ["must return a list of Draft chains", "Tensor"]),
    ("a list of lists", lambda: [[5, 9]], TypeError, ["must return a list of Draft chains", "list holding a list"]),
    ("a list of tensors", lambda: [torch.tensor([5, 9])], TypeError, ["holding a Tensor"]),
    ("a Draft and a string", lambda: [Draft(_ids(torch.long), "a"), "b"], TypeError, ["holding a str"]),
    ("a dict", lambda: {"tokens": _ids(torch.long)}, TypeError, ["got a dict"]),
    ("a chain longer than max_tokens", lambda: [Draft(torch.full((50,), 5), "a")], ValueError,
     ["50 draft tokens", "max_tokens (4)"]),
    ("chains of more nodes than max_tokens", lambda: [Draft(torch.tensor([5, 6, 7]), "a"),
                                                      Draft(torch.tensor([8, 9]), "b")], ValueError,
     ["5 draft tokens", "max_tokens (4)"]),
    ("a 200-node tree", lambda: DraftTree(torch.arange(200) % VOCAB, (-1,) * 200, ("w",) * 200), ValueError,
     ["200 draft tokens", "max_tokens (4)"]),
]


@pytest.mark.parametrize("case,make,exc,words", BAD_RETURNS, ids=[c[0] for c in BAD_RETURNS])
def test_bad_proposals_name_the_drafter(model, case, make, exc, words):
    """What propose returns must be a list of Drafts or a DraftTree of at most max_tokens nodes (which sized the KV
    cache): one error naming the drafter, before the drafts reach the model (not an AttributeError, a tensor's
    truth value or a KV cache overflow mid-run)."""
    fed = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0].numel()))
    try:
        with pytest.raises(exc) as e:
            generate(model, IDS, drafter=_TypedDrafter(make), max_new_tokens=300, eos_token_id=[])
    finally:
        hook.remove()
    assert "_TypedDrafter.propose" in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
    assert fed == [len(IDS)]  # the prefill only
    merged = [Draft(torch.tensor([5, 6, 7]), "a"), Draft(torch.tensor([5, 6, 8]), "b")]  # 4 nodes once joined
    assert generate(model, IDS, drafter=_TypedDrafter(lambda: merged), max_new_tokens=4).stats.num_drafts > 0


class _TypedReplay(ReplayDrafter):
    """Replays the target's own output as ``dtype`` ids, its third token wrong: two accepted, then a rejection."""

    def __init__(self, continuation: list[int], dtype: torch.dtype, tree: bool) -> None:
        super().__init__(continuation, 4)
        self.dtype, self.tree = dtype, tree

    @property
    def max_tokens(self) -> int:
        return self.k + self.tree  # the tree: the chain and one more node

    def propose(self, request):
        pos = self.position(request)
        d = self.continuation[pos : pos + min(self.k, request.budget)]
        d = [(t + 1) % VOCAB if i == 2 else t for i, t in enumerate(d)]
        tokens = torch.tensor(d, dtype=self.dtype)
        if not d:
            return []
        if self.tree:  # the chain and a one-token branch beside it
            return DraftTree(torch.cat([tokens, tokens[:1]]), (*range(-1, len(d) - 1), -1), ("i",) * (len(d) + 1))
        return [Draft(tokens, "i")]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_draft_tokens_of_any_width_are_taken(model, dtype):
    """Drafts of any integer dtype, chains and trees, are verified by value: accepted where right."""
    want = generate(model, IDS, max_new_tokens=12).tokens
    for tree in (False, True):
        res = generate(model, IDS, drafter=_TypedReplay(want, dtype, tree), max_new_tokens=12)
        assert res.tokens == want
        res.stats.check()
        assert [s.accepted for s in res.stats.trace if s.drafted > 2] == [2] * sum(s.drafted > 2 for s in
                                                                                     res.stats.trace), res.stats.trace
        assert res.stats.num_accepted > 0


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_narrow_integer_draft_tokens_are_sampled_like_int64_ones(model, dtype):
    """Sampling (temperature > 0) takes narrow ids too, chains and trees: the same tokens as int64 ids at a seed."""
    want = generate(model, IDS, max_new_tokens=12).tokens
    for tree in (False, True):
        runs = [generate(model, IDS, drafter=_TypedReplay(want, d, tree), max_new_tokens=12, temperature=1.0, seed=3)
                for d in (dtype, torch.int64)]
        assert runs[0].tokens == runs[1].tokens and runs[0].stats.num_accepted == runs[1].stats.num_accepted


def _probs_drafter(rows, sampled=None):
    """A drafter proposing ids 5, 9, 12 with the draft probabilities ``rows()`` (a chain, or a tree with ``sampled``
    flags)."""
    tokens = torch.tensor([5, 9, 12])
    if sampled is None:
        return _TypedDrafter(lambda: [Draft(tokens, "p", rows())])
    return _TypedDrafter(lambda: DraftTree(tokens, (-1, 0, 1), ("p",) * 3, rows(), sampled))


def _uniform(n=3, width=VOCAB):
    return torch.full((n, width), 1.0 / width)


BAD_PROBS = [  # (case, drafter, exception, words of its message)
    ("negative rows", lambda: _probs_drafter(lambda: -_uniform()), ValueError, "not distributions"),
    ("logits", lambda: _probs_drafter(lambda: torch.randn(3, VOCAB)), ValueError, "not distributions"),
    ("rows not summing to 1", lambda: _probs_drafter(lambda: 2 * _uniform()), ValueError, "not distributions"),
    ("NaN", lambda: _probs_drafter(lambda: _uniform().index_fill(1, torch.tensor([0]), float("nan"))), ValueError,
     "not distributions"),
    ("too wide", lambda: _probs_drafter(lambda: _uniform(width=VOCAB + 3)), ValueError,
     f"shape (3, {VOCAB + 3}); they must be [3, {VOCAB}]"),
    ("integer", lambda: _probs_drafter(lambda: torch.ones(3, VOCAB, dtype=torch.long)), TypeError, "torch.int64"),
    ("a sampled tree node's row", lambda: _probs_drafter(lambda: torch.cat([_uniform(2), -_uniform(1)]),
                                                         (True, True, True)), ValueError, "not distributions"),
]


@pytest.mark.parametrize("case,make,exc,words", BAD_PROBS, ids=[c[0] for c in BAD_PROBS])
def test_bad_draft_probabilities_name_the_drafter(model, case, make, exc, words):
    """Draft probabilities the verifier cannot sample against (on a CPU model) are one error naming the drafter,
    before the drafts reach the model; at temperature 0, where they are unused, only their dtype and shape count."""
    fed = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0].numel()))
    try:
        with pytest.raises(exc, match=r"_TypedDrafter\.propose returned draft probabilities") as e:
            generate(model, IDS, drafter=make(), max_new_tokens=8, temperature=1.0, seed=0)
    finally:
        hook.remove()
    assert words in str(e.value) and fed == [len(IDS)]
    if "not distributions" in words:
        generate(model, IDS, drafter=make(), max_new_tokens=8)  # greedy: unused values pass


def test_good_draft_probabilities_are_taken(model):
    """Distributions pass, bf16-rounded ones too, and a tree's rows of unsampled nodes are not read."""
    for drafter in (_probs_drafter(_uniform), _probs_drafter(lambda: _uniform().bfloat16().float()),
                    _probs_drafter(lambda: torch.cat([_uniform(1), -_uniform(2)]), (True, False, False))):
        res = generate(model, IDS, drafter=drafter, max_new_tokens=8, temperature=1.0, seed=0)
        res.stats.check()
        assert res.stats.num_drafts > 0


@pytest.mark.parametrize("k", [0, -1])
def test_draft_length_must_be_positive(model, k):
    for build in (lambda: NgramDrafter(k=k), lambda: _eagle(model, k=k)):
        with pytest.raises(ValueError, match="k must be"):
            build()


def test_accepted_forms_give_the_same_tokens(model):
    """A tokenizer's BatchEncoding, a dict, a list, a NumPy array, int32 and [1, T] all decode like the tensor;
    ids on another device than the model are copied to it (CPU here; the CUDA test does cross-device)."""
    want = generate(model, IDS, max_new_tokens=6).tokens
    forms = [BatchEncoding({"input_ids": IDS[None], "attention_mask": torch.ones(1, len(IDS))}),
             {"input_ids": IDS.tolist()}, IDS.tolist(), IDS.numpy(), IDS.to(torch.int32), IDS[None]]
    for ids in forms:
        assert generate(model, ids, max_new_tokens=6).tokens == want, type(ids)
    assert generate(model, IDS, max_new_tokens=6, eos_token_id=np.int64(want[2])).tokens == want[:3]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_ids_on_another_device_are_moved_to_the_model():
    model = tiny_target("llama")
    want = generate(model, IDS, max_new_tokens=6).tokens
    gpu = tiny_target("llama").cuda()
    assert generate(gpu, IDS, max_new_tokens=6, cuda_graphs=False).tokens == want
    assert generate(gpu, IDS.cuda(), max_new_tokens=6, cuda_graphs=False).tokens == want
    assert generate(model, IDS.cuda(), max_new_tokens=6).tokens == want


def test_result_repr_is_short(model):
    res = generate(model, IDS, drafter=NgramDrafter(k=3, min_n=1), max_new_tokens=200)
    r = repr(res)
    assert len(r) < 300 and "AL" not in r and "seq_normalized_al=" in r and "StepRecord" not in r, r


# ---- EAGLE checkpoints ------------------------------------------------------------------------------------


@pytest.fixture
def ckpt(tmp_path, model):
    """A valid EAGLE-1 checkpoint folder for ``model``."""
    torch.manual_seed(0)
    folder = tmp_path / "head"
    EagleHead.from_target(model, "eagle1").save_pretrained(folder)
    return folder


def _edit_config(folder, fn):
    cfg = json.loads((folder / "config.json").read_text())
    fn(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))


def _shard(folder, names):
    """Split the weights over the named shard files with an index pointing at them."""
    sd = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    weight_map = {}
    keys = sorted(sd)
    for i, name in enumerate(names):
        part = {k: sd[k] for k in keys[i::len(names)]}
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(part, str(path))
        weight_map |= {k: name for k in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _truncate(path, keep=0.6):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _to_bin(folder, cut: bool):
    sd = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save(sd, folder / "pytorch_model.bin")
    if cut:
        _truncate(folder / "pytorch_model.bin")


def _with_embedding(folder, weight):
    sd = load_file(str(folder / "model.safetensors"))
    save_file(sd | {"embed_tokens.weight": weight.detach().clone().contiguous()}, str(folder / "model.safetensors"))


LOADER_CASES = [  # (case, damage(folder, model), words the message must hold)
    ("config without num_attention_heads", lambda f, m: _edit_config(f, lambda c: c.pop("num_attention_heads")),
     ["num_attention_heads", "config.json"]),
    ("config without intermediate_size", lambda f, m: _edit_config(f, lambda c: c.pop("intermediate_size")),
     ["intermediate_size", "config.json"]),
    ("config not JSON", lambda f, m: (f / "config.json").write_text('{"hidden_size": 64,'),
     ["config.json", "not valid JSON"]),
    ("config not UTF-8", lambda f, m: (f / "config.json").write_bytes(b"\xff\xfe{"), ["config.json"]),
    ("config a list", lambda f, m: (f / "config.json").write_text("[1, 2]"), ["config.json", "JSON object"]),
    ("config of another vocabulary", lambda f, m: _edit_config(f, lambda c: c.update(vocab_size=VOCAB + 1)),
     ["vocab_size", str(VOCAB + 1)]),
    ("shard outside the folder", lambda f, m: _shard(f, ["model-1.safetensors", "../other/model.safetensors"]),
     ["../other/model.safetensors", "outside"]),
    ("shard by absolute path", lambda f, m: _shard(f, ["model-1.safetensors", str(f.parent / "abs.safetensors")]),
     ["abs.safetensors", "outside"]),
    ("shard index not JSON", lambda f, m: (_shard(f, ["a.safetensors"]),
                                           (f / "model.safetensors.index.json").write_text("{")),
     ["model.safetensors.index.json", "JSON"]),
    ("shard index without weight_map", lambda f, m: (_shard(f, ["a.safetensors"]),
                                                     (f / "model.safetensors.index.json").write_text("{}")),
     ["model.safetensors.index.json", "weight_map"]),
    ("missing shard", lambda f, m: (_shard(f, ["a.safetensors", "b.safetensors"]), (f / "b.safetensors").unlink()),
     ["b.safetensors"]),
    ("truncated safetensors", lambda f, m: _truncate(f / "model.safetensors"), ["model.safetensors", "truncated"]),
    ("truncated shard", lambda f, m: (_shard(f, ["a.safetensors", "b.safetensors"]), _truncate(f / "b.safetensors")),
     ["b.safetensors"]),
    ("truncated pytorch_model.bin", lambda f, m: _to_bin(f, cut=True), ["pytorch_model.bin"]),
    ("embedding of another model", lambda f, m: _with_embedding(f, torch.randn_like(m.get_input_embeddings().weight)),
     ["embed_tokens.weight", "another model", "use_checkpoint_embeddings"]),
]


@pytest.mark.parametrize("case,damage,words", LOADER_CASES, ids=[c[0] for c in LOADER_CASES])
def test_loader_names_the_problem(ckpt, model, case, damage, words):
    damage(ckpt, model)
    with pytest.raises((ValueError, FileNotFoundError)) as e:
        EagleHead.from_pretrained(ckpt, target=model)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_exact_mode_with_a_many_branch_tree_is_rejected_before_any_work(model, no_work):
    from hybridsd.drafters.eagle_tree import EagleTreeDrafter

    tree = EagleTreeDrafter(EagleHead.from_target(model, "eagle3"), depth=2, top_k=2, nodes=4)
    with pytest.raises(ValueError, match="exact mode verifies at most 2 draft branches per step"):
        generate(model, IDS, drafter=tree, max_new_tokens=8, exact=16)
    assert no_work == []


def test_drafter_constructors_check_their_counts_and_children(model):
    head = EagleHead.from_target(model, "eagle1")
    with pytest.raises(TypeError, match="k must be an int, got 2.0"):
        EagleDrafter(head, k=2.0)
    with pytest.raises(TypeError, match="HybridDrafter's eagle must be a hybridsd Drafter, got str"):
        HybridDrafter(NgramDrafter(), "x")
    with pytest.raises(TypeError, match="k must be an int"):
        ReplayDrafter([1, 2, 3], k=1.5)
    with pytest.raises(TypeError, match="continuation must hold integer token ids"):
        ReplayDrafter([1.7, 2.9], k=2)  # not truncated to the ids 1 and 2
    assert ReplayDrafter(np.array([3, 4], dtype=np.int16), k=2).continuation == [3, 4]


@pytest.mark.parametrize("head", [None, "path/to/head", 3, {"eagle1": None}], ids=repr)
@pytest.mark.parametrize("cls", ["EagleDrafter", "EagleTreeDrafter"])
def test_eagle_drafters_take_a_head(cls, head):
    """Not an AttributeError on head.config: one TypeError naming the drafter and how to load a head."""
    from hybridsd.drafters.eagle_tree import EagleTreeDrafter

    build = {"EagleDrafter": EagleDrafter, "EagleTreeDrafter": EagleTreeDrafter}[cls]
    with pytest.raises(TypeError, match=rf"{cls} takes an EagleHead, got {type(head).__name__}; .*from_pretrained"):
        build(head)


def test_eos_ids_as_tensors_and_arrays():
    model = tiny_target("llama")
    want = generate(model, IDS, max_new_tokens=12, eos_token_id=[7]).tokens
    for eos in (torch.tensor(7), torch.tensor([7]), np.int64(7), np.array([7]), [torch.tensor(7)]):
        assert generate(model, IDS, max_new_tokens=12, eos_token_id=eos).tokens == want
    for bad in ([torch.tensor(7.9)], [torch.tensor([7, 8])], [torch.tensor(True)]):  # not truncated to 7: refused
        with pytest.raises(TypeError, match="eos_token_id must be a token id or a sequence of them"):
            generate(model, IDS, max_new_tokens=12, eos_token_id=bad)


def _link_out(folder, name):
    """``folder / name`` made a link to a copy of the file in a folder beside ``folder``."""
    outside = folder.parent / "elsewhere"
    outside.mkdir(exist_ok=True)
    (folder / name).rename(outside / name)
    (folder / name).symlink_to(outside / name)


def _index_through_linked_folder(folder):
    """The weights in ``elsewhere/``, beside ``folder``, named by an index entry through ``folder/sub``, a link."""
    _shard(folder, ["sub/model.safetensors"])
    (folder / "sub").rename(folder.parent / "elsewhere")
    (folder / "sub").symlink_to(folder.parent / "elsewhere")


@pytest.mark.parametrize("case,damage", [
    ("shard index entry out", lambda f: _shard(f, ["model-1.safetensors", "../other/model.safetensors"])),
    ("weights file a link out", lambda f: _link_out(f, "model.safetensors")),
    ("config.json a link out", lambda f: _link_out(f, "config.json")),
    ("index entry through a linked folder", _index_through_linked_folder),
], ids=lambda c: c if isinstance(c, str) else "")
def test_loader_never_reads_outside_the_folder(ckpt, model, monkeypatch, case, damage):
    damage(ckpt)
    read = []
    loader = sys.modules["hybridsd.eagle.loader"]
    real = loader._read_file
    monkeypatch.setattr(loader, "_read_file", lambda f: read.append(f) or real(f))
    with pytest.raises(ValueError, match="outside the checkpoint folder"):
        EagleHead.from_pretrained(ckpt, target=model)
    assert read == []


def test_loader_refuses_a_shard_out_of_the_current_folder(ckpt, model, monkeypatch):
    """An index's ``../`` is outside the folder also when the folder is given as ``.``."""
    _shard(ckpt, ["model-1.safetensors", "../other/model.safetensors"])
    monkeypatch.chdir(ckpt)
    with pytest.raises(ValueError, match="outside"):
        EagleHead.from_pretrained(".", target=model)


def test_loader_reads_a_hub_snapshots_links_into_its_blob_store(tmp_path, ckpt, model):
    """A Hub cache's snapshot holds links into the repository's ``blobs/``: they are read."""
    repo = tmp_path / "models--owner--head"
    snap, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for f in ckpt.iterdir():
        f.rename(blobs / f.name)
        (snap / f.name).symlink_to(Path("../../blobs") / f.name)
    head = EagleHead.from_pretrained(snap, target=model)
    want = load_file(str(blobs / "model.safetensors"))
    assert torch.equal(head.state_dict()["fc.weight"], want["fc.weight"])


def test_load_target_refuses_a_shard_outside_the_folder(tmp_path):
    """The target loader checks its index before transformers reads it."""
    from hybridsd import checkpoint

    folder = tmp_path / "target"
    tiny_target("llama").save_pretrained(folder)
    _shard(folder, ["model-1.safetensors", "../other/model.safetensors"])
    with pytest.raises(ValueError, match="outside the checkpoint folder"):
        checkpoint.load_target(folder)


def test_load_target_refuses_a_checkpoint_that_lacks_weights(tmp_path):
    """Weights the config describes but the file lacks (here the final norm and an untied LM head) would be random
    (transformers only logs them): the loader names them."""
    from hybridsd import checkpoint

    folder = tmp_path / "target"
    tiny_target("llama").save_pretrained(folder)
    sd = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in sd.items() if k not in ("model.norm.weight", "lm_head.weight")},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lacks 2 of the weights its config.json describes \(lm_head.weight, "
                                         r"model.norm.weight\); they would be random"):
        checkpoint.load_target(folder, dtype="fp32")


def test_loader_accepts_the_targets_embedding_and_an_explicit_own_one(ckpt, model):
    _with_embedding(ckpt, model.get_input_embeddings().weight.to(torch.bfloat16).float())  # a rounded copy
    assert EagleHead.from_pretrained(ckpt, target=model).embed_tokens is None
    own = torch.randn_like(model.get_input_embeddings().weight)
    _with_embedding(ckpt, own)
    head = EagleHead.from_pretrained(ckpt, target=model, use_checkpoint_embeddings=True)
    assert torch.equal(head.embed_tokens.weight, own)  # the checkpoint's own embedding, not the target's
    _to_bin(ckpt, cut=False)
    head = EagleHead.from_pretrained(ckpt, target=model, use_checkpoint_embeddings=True)
    assert torch.equal(head.embed_tokens.weight, own)

