"""Families outside the fused decoder run as ``model(...)`` over the slot cache: lossless against HF ``generate``
for chains and draft trees, and the ALiBi families refused (or held to chains) before any work."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from conftest import VOCAB, OracleDrafter, hf_greedy, prompts
from hybridsd import HybridDrafter, NgramDrafter, generate
from hybridsd.target import Target, _has_decoder_layout

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


def family(kind: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """A tiny random ``kind`` model in eval mode (fp32, CPU)."""
    prefix, size = FAMILIES.get(kind, (kind, {}))
    torch.manual_seed(seed)
    cfg = getattr(tf, f"{prefix}Config")(**{**SIZE, **size, **overrides})
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
        for name, drafter in _drafters(ref).items():
            res = generate(model, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[])
            assert res.tokens == ref, (kind, name)
            accepted += res.stats.num_tokens - res.stats.num_target_steps
    assert accepted > 0  # the drafts were used, not only rejected


def test_mpt_runs_chains_and_refuses_trees_before_any_work(monkeypatch):
    """MPT's ALiBi biases follow the cache slots: chains are exact, a tree's siblings would not be."""
    model = family("Mpt", d_model=32, n_layers=2, n_heads=4, max_seq_len=128)
    ids = prompts(1, seed=3)[0]
    ref = hf_greedy(model, ids, N_NEW, eos_token_id=None)
    drafters = _drafters(ref)
    for name in ("oracle", "ngram"):
        assert generate(model, ids, drafter=drafters[name], max_new_tokens=N_NEW, eos_token_id=[]).tokens == ref
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("a forward pass ran"))
    with pytest.raises(ValueError, match="HybridDrafter proposes draft trees.*'mpt' adds ALiBi biases by cache slot"):
        generate(model, ids, drafter=drafters["tree"], max_new_tokens=N_NEW)


def test_mpt_target_refuses_a_tree_block():
    """Called directly, the target refuses a block whose positions are not its slots (a tree's siblings)."""
    import numpy as np

    model = family("Mpt", d_model=32, n_layers=2, n_heads=4, max_seq_len=128)
    target = Target(model, 32)
    target.forward(torch.arange(3, 9), 0)
    target.forward(torch.tensor([9, 10]), 6, positions=np.array([6, 7]))  # a chain, positions given
    with pytest.raises(ValueError, match="'mpt' adds ALiBi biases by cache slot"):
        target.forward(torch.tensor([9, 10, 11]), 8, positions=np.array([8, 9, 9]),
                       visible=np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))


@pytest.mark.parametrize("kind, overrides", [("Bloom", dict(hidden_size=32, n_layer=2, n_head=4)),
                                             ("Falcon", dict(hidden_size=32, num_hidden_layers=2,
                                                             num_attention_heads=4, alibi=True))])
def test_alibi_from_a_padding_mask_is_refused_before_any_work(kind, overrides, monkeypatch):
    model = family(kind, **overrides)
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("a forward pass ran"))
    with pytest.raises(ValueError, match="builds its ALiBi attention biases from a 2-D padding mask"):
        generate(model, prompts(1)[0], drafter=NgramDrafter(k=3), max_new_tokens=8)


@pytest.mark.parametrize("kind, method, want", [
    ("Mpt", ["--method", "ngram-eagle", "--hybrid-policy", "tree", "--eagle-dir", "HEAD"],
     "'mpt' adds ALiBi biases by cache slot, so --method ngram-eagle (a draft tree)"),
    ("Bloom", ["--method", "ngram"], "'bloom' builds its ALiBi biases from a 2-D padding mask")])
def test_spec_bench_refuses_an_alibi_target_in_one_line(kind, method, want, tmp_path, capsys):
    """From the target's config, before its weights load: one line and exit code 2."""
    import hybridsd as hsd
    from experiments import spec_bench

    size = dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=128) if kind == "Mpt" else \
        dict(hidden_size=32, n_layer=2, n_head=4)
    folder = tmp_path / kind
    family(kind, **{**size, "vocab_size": 10240}).save_pretrained(folder)
    tf.AutoTokenizer.from_pretrained(hsd.zoo.path("tiny-coder")).save_pretrained(folder)
    data = tmp_path / "mt_bench.jsonl"
    data.write_text('{"question_id": 1, "turns": ["Write a haiku."]}\n')
    argv = ["--model-dir", str(folder), *method, "--dataset-name", "hf", "--dataset-path", str(data),
            "--device", "cpu", "--output", str(tmp_path / "out" / "rows.jsonl")]
    argv = [str(hsd.zoo.path("tiny-coder") / "eagle1") if a == "HEAD" else a for a in argv]
    capsys.readouterr()  # the save's progress
    with pytest.raises(SystemExit) as e:
        spec_bench.main(argv)
    err = [x for x in capsys.readouterr().err.strip().splitlines() if x]
    assert e.value.code == 2 and len(err) == 1 and want in err[0], err
    assert not (tmp_path / "out").exists()
