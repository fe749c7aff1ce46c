"""Families outside the fused decoder run as ``model(...)`` over the slot cache: lossless against HF ``generate``
for chains and draft trees; the ALiBi families (MPT, BLOOM, Falcon with ``alibi``) lossless for chains, and a tree
refused before any work."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from conftest import VOCAB, OracleDrafter, hf_greedy, prompts
from hybridsd import HybridDrafter, NgramDrafter, generate
from hybridsd.target import Target, _has_decoder_layout, alibi

N_NEW = 32
SIZE = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)
FAMILIES = {  # model type -> (class prefix, its config's size arguments)
    "gpt2": ("GPT2", dict(n_embd=32, n_layer=2, n_head=4, n_positions=128)),
    "gpt_neox": ("GPTNeoX", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                 max_position_embeddings=128, rotary_pct=0.5)),
    "phi": ("Phi", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=128, partial_rotary_factor=0.5)),
    "gemma": ("Gemma", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                            head_dim=8, intermediate_size=64, max_position_embeddings=128)),
    "opt": ("OPT", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                        word_embed_proj_dim=32, max_position_embeddings=128)),
    "falcon": ("Falcon", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, new_decoder_architecture=True,
                              num_kv_heads=2)),
    "gpt_bigcode": ("GPTBigCode", dict(n_embd=32, n_layer=2, n_head=4, n_positions=128)),
}
# weights larger than the default and an output head of its own: greedy text that depends on attention (with the
# defaults, these tiny models repeat the prompt's last token whatever they attend to)
VARIED = dict(initializer_range=0.3, tie_word_embeddings=False)
ALIBI = {  # the ALiBi families, as FAMILIES
    "mpt": ("Mpt", dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=128)),
    "bloom": ("Bloom", dict(hidden_size=32, n_layer=2, n_head=4)),
    "falcon-alibi": ("Falcon", dict(FAMILIES["falcon"][1], alibi=True)),
}


def family(kind: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """A tiny random ``kind`` model (a key of ``FAMILIES`` or ``ALIBI``) in eval mode (fp32, CPU), with ``VARIED``
    weights."""
    prefix, size = {**FAMILIES, **ALIBI}[kind]
    torch.manual_seed(seed)
    cfg = getattr(tf, f"{prefix}Config")(**{**SIZE, **VARIED, **size, **overrides})
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def _drafters(reference: list[int]) -> dict:
    """A chain drafter that is right often and wrong often, n-gram, and a tree of two such chains."""
    return {
        "oracle": OracleDrafter(reference, 4, err=0.3),
        "ngram": NgramDrafter(k=3, min_n=1, max_n=3),
        "tree": HybridDrafter(OracleDrafter(reference, 3, err=0.4, seed=1),
                              OracleDrafter(reference, 4, err=0.4, seed=2, name="other"), policy="tree"),
    }


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_generic_families_are_lossless(kind):
    model = family(kind)
    assert not _has_decoder_layout(model)  # the model(...) path, not the fused decoder
    accepted = 0
    for ids in prompts(3, seed=5):
        ref = hf_greedy(model, ids, N_NEW, eos_token_id=None)
        assert len(set(ref)) >= 5, (kind, ref)  # text that depends on what the model attends to
        for name, drafter in _drafters(ref).items():
            res = generate(model, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[])
            assert res.tokens == ref, (kind, name)
            accepted += res.stats.num_tokens - res.stats.num_target_steps
    assert accepted > 0  # the drafts were used, not only rejected


@pytest.mark.parametrize("kind", sorted(ALIBI))
def test_alibi_families_are_lossless_with_chains(kind):
    """ALiBi biases that follow the cache slots (MPT's own; BLOOM's and Falcon's from the 2-D mask the target gives
    over the slots): chains are lossless, whether the drafts are all accepted or partly rejected (rolled back)."""
    model = family(kind)
    assert not _has_decoder_layout(model) and alibi(model.config) is not None
    for ids in prompts(4, seed=5):
        ref = hf_greedy(model, ids, N_NEW, eos_token_id=None)
        drafters = {"right": OracleDrafter(ref, 4, err=0.0), "partly wrong": OracleDrafter(ref, 4, err=0.3, seed=2),
                    "ngram": NgramDrafter(k=3, min_n=1, max_n=3)}
        for name, drafter in drafters.items():
            res = generate(model, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[])
            assert res.tokens == ref, (kind, ids.numel(), name)
            s = res.stats
            if name != "ngram":  # the drafts were used: accepted length > 1
                assert s.num_tokens / s.num_target_steps > 1.5, (kind, ids.numel(), name, s)
            if name == "partly wrong":  # and rejected, so later blocks ran over rolled-back slots
                assert s.num_draft_tokens > s.num_accepted > 0, (kind, ids.numel(), s)


@pytest.mark.parametrize("kind", sorted(ALIBI))
def test_alibi_keys_past_the_block_are_not_attended(kind):
    """A step over a key span longer than the sequence (a compiled or graphed step's bucket) holding a rejected
    draft's keys past the block gives the logits of the sequence without them."""
    model = family(kind)
    ids = prompts(4, seed=5)[0]
    n = ids.numel()
    target = Target(model, 64, compile=True)  # its steps attend over the capacity's span ...
    target._hf_steps = {True: target._hf_forward, False: target._hf_forward}  # ... run uncompiled here
    target.forward(ids, 0, last_logits_only=True)
    target.forward(torch.arange(10, 16), n)  # a rejected draft: keys at slots n .. n+5
    block = torch.tensor([20, 21])
    assert target.kv.span(n + 2) >= n + 6
    logits, _ = target.forward(block, n)
    want = model(torch.cat([ids, block])[None]).logits[0, n:]
    torch.testing.assert_close(logits, want, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind", sorted(ALIBI))
def test_alibi_families_are_lossless_with_cuda_graphs(kind):
    """On CUDA each step after the prefill replays a graph over a bucketed key span, its masks made inside the graph
    from the step's start slot: still lossless, drafts accepted and rejected. Skipped where the installed
    transformers' own code for the model copies a host value to the GPU, which a graph cannot capture (5.17's
    eager mask and Falcon's ALiBi slopes and head split)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = family(kind).cuda()
    for ids in prompts(4, seed=5):
        ref = hf_greedy(model, ids.cuda(), N_NEW, eos_token_id=None)
        for drafter in OracleDrafter(ref, 4, err=0.3, seed=2), NgramDrafter(k=3, min_n=1, max_n=3):
            try:
                res = generate(model, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[])  # graphs: CUDA
            except RuntimeError as e:
                if "during CUDA graph capture" not in str(e):
                    raise
                assert "cuda_graphs=False" in str(e)  # the refusal names the way out
                pytest.skip(f"transformers {tf.__version__}'s {kind} forward cannot be captured: {e}")
            assert res.tokens == ref, (kind, ids.numel(), type(drafter).__name__)


@pytest.mark.parametrize("kind", sorted(ALIBI))
def test_alibi_families_refuse_trees_before_any_work(kind, monkeypatch):
    """Slot-following biases would score a tree's siblings (one position, two slots) at the wrong distances."""
    model = family(kind)
    ids = prompts(1, seed=3)[0]
    tree = _drafters(list(range(3, 3 + N_NEW)))["tree"]
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("a forward pass ran"))
    with pytest.raises(ValueError, match=f"HybridDrafter proposes draft trees.*'{model.config.model_type}' adds "
                                         "ALiBi biases by cache slot"):
        generate(model, ids, drafter=tree, max_new_tokens=N_NEW)


@pytest.mark.parametrize("kind", sorted(ALIBI))
def test_alibi_target_refuses_a_tree_block(kind):
    """Called directly, the target refuses a block that is not a chain at its slots (a tree's siblings)."""
    import numpy as np

    model = family(kind)
    target = Target(model, 32)
    target.forward(torch.arange(3, 9), 0)
    target.forward(torch.tensor([9, 10]), 6, positions=np.array([6, 7]))  # a chain, positions given
    target.forward(torch.tensor([9, 10]), 6, visible=np.array([[1, 0], [1, 1]], dtype=bool))  # ... or its mask
    for positions, visible in ((np.array([8, 9, 9]), np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool)),
                               (None, np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))):
        with pytest.raises(ValueError, match=f"'{model.config.model_type}' adds ALiBi biases by cache slot"):
            target.forward(torch.tensor([9, 10, 11]), 8, positions=positions, visible=visible)


TREE = ["--method", "ngram-eagle", "--hybrid-policy", "tree", "--eagle-dir", "HEAD"]


def _bench_argv(kind: str, method: list[str], tmp_path) -> list[str]:
    """spec_bench's arguments for a tiny random ``kind`` target saved under ``tmp_path`` (the tiny-coder tokenizer),
    ``method`` and one prompt; ``HEAD`` in ``method``: the tiny-coder EAGLE-1 head."""
    import hybridsd as hsd

    folder = tmp_path / kind
    family(kind, vocab_size=10240).save_pretrained(folder)
    tf.AutoTokenizer.from_pretrained(hsd.zoo.path("tiny-coder")).save_pretrained(folder)
    data = tmp_path / "mt_bench.jsonl"
    data.write_text('{"question_id": 1, "turns": ["Write a haiku."]}\n')
    argv = ["--model-dir", str(folder), *method, "--dataset-name", "hf", "--dataset-path", str(data),
            "--device", "cpu", "--output", str(tmp_path / "out" / "rows.jsonl")]
    return [str(hsd.zoo.path("tiny-coder") / "eagle1") if a == "HEAD" else a for a in argv]


@pytest.mark.parametrize("kind", sorted(ALIBI))
def test_spec_bench_refuses_an_alibi_target_with_a_tree_in_one_line(kind, tmp_path, capsys):
    """From the target's config, before its weights load: one line and exit code 2."""
    from experiments import spec_bench

    argv = _bench_argv(kind, TREE, tmp_path)
    capsys.readouterr()  # the save's progress
    with pytest.raises(SystemExit) as e:
        spec_bench.main(argv)
    err = [x for x in capsys.readouterr().err.strip().splitlines() if x]
    want = f"'{family(kind).config.model_type}' adds ALiBi biases by cache slot, so --method ngram-eagle (a draft tree)"
    assert e.value.code == 2 and len(err) == 1 and want in err[0], err
    assert not (tmp_path / "out").exists()


def test_spec_bench_runs_bloom_with_a_chain(tmp_path):
    """A chain drafter on a BLOOM target passes the preflight and runs lossless."""
    import json

    from experiments import spec_bench

    spec_bench.main(_bench_argv("bloom", ["--method", "ngram", "--output-len", "8", "--check-lossless"], tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "out" / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["lossless"] and len(rows[0]["tokens"]) == 8, rows
