"""EAGLE training: data helpers, training-time test semantics, and that training works on a tiny target."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hybridsd.eagle import train as tr
from hybridsd.eagle.model import EagleHead

V, H, L = 97, 64, 4


def make_target(seed=0, sharpen=25.0):
    """Tiny random Llama; ``sharpen`` scales lm_head so its next-token distributions are peaked, as a trained LM's."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=128, num_hidden_layers=L, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(sharpen)
    return m


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def data(target):
    """Greedy continuations of random prompts: the random target falls into loops, so the text is repetitive."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, V, (8,), generator=g) for _ in range(96)]
    seqs = tr.generate_sequences(target, prompts, 56, eos_token_id=None)
    return seqs[:80], seqs[80:]


def test_hidden_states_semantics(target):
    """HF hidden_states[i] is the residual entering layer i; [-1] the final-normed output that lm_head reads."""
    ids = torch.randint(0, V, (2, 9))
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
        hs = out.hidden_states
        assert len(hs) == L + 1
        x = target.model.embed_tokens(ids)
        pos = torch.arange(9)[None].expand(2, -1)
        rope = target.model.rotary_emb(x, pos)
        torch.testing.assert_close(hs[0], x)
        for i, layer in enumerate(target.model.layers[:-1]):
            y = layer(x, attention_mask=None, position_ids=pos, position_embeddings=rope)
            x = y[0] if isinstance(y, tuple) else y
            torch.testing.assert_close(hs[i + 1], x, atol=1e-5, rtol=0)
        y = target.model.layers[-1](x, attention_mask=None, position_ids=pos, position_embeddings=rope)
        last = y[0] if isinstance(y, tuple) else y
        torch.testing.assert_close(hs[-1], target.model.norm(last), atol=1e-5, rtol=0)
        torch.testing.assert_close(out.logits, target.lm_head(hs[-1]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("bad,word", [(dict(steps=-1), "steps"), (dict(batch_size=0), "batch_size"),
                                      (dict(seq_len=1), "seq_len"), (dict(log_every=0), "log_every"),
                                      (dict(ttt_steps=0), "ttt_steps"), (dict(warmup_steps=-1), "warmup_steps"),
                                      (dict(lr=0.0), "lr > 0")])
def test_train_head_refuses_bad_arguments_before_any_work(target, bad, word, monkeypatch):
    head = EagleHead.from_target(target, "eagle1")
    monkeypatch.setattr(tr, "_target_pass", lambda *a, **k: pytest.fail("a target pass ran"))
    with pytest.raises(ValueError, match=word):
        tr.train_head(head, target, [torch.arange(80)], **bad)


def test_train_and_evaluate_refuse_a_head_for_another_target_before_any_work(monkeypatch):
    """A head reading hidden states the target lacks, or another vocabulary, is named before any target pass."""
    monkeypatch.setattr(tr, "_target_pass", lambda *a, **k: pytest.fail("a target pass ran"))
    torch.manual_seed(0)
    one = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=128, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2)).eval()
    head = EagleHead.from_target(one, "eagle3", draft_vocab_size=40)  # layers (2, 0, -2): 2 is past the last
    for run in (tr.train_head, tr.evaluate_head):
        with pytest.raises(ValueError, match=r"target layers \[2, 0, -2\].*0\.\.1"):
            run(head, one, [torch.arange(20)], steps=1)
    other = LlamaForCausalLM(LlamaConfig(vocab_size=V + 3, hidden_size=H, intermediate_size=128,
                                         num_hidden_layers=L, num_attention_heads=4, num_key_value_heads=2)).eval()
    with pytest.raises(ValueError, match=f"vocabulary of {V} tokens.*{V + 3}"):
        tr.train_head(EagleHead.from_target(make_target(), "eagle1"), other, [torch.arange(20)], steps=1)


def test_train_head_names_batches_that_run_out(target):
    """A list of batches shorter than ``steps`` is refused up front; an iterator that runs out is named, not a
    bare StopIteration."""
    head = EagleHead.from_target(target, "eagle1")
    ids = torch.randint(0, V, (2, 8))
    with pytest.raises(ValueError, match="steps=5 needs as many batches; sequences holds 2"):
        tr.train_head(head, target, [ids, ids], steps=5)
    with pytest.raises(ValueError, match="ran out after 2 of steps=5"):
        tr.train_head(head, target, iter([ids, ids]), steps=5, log_every=1)


@pytest.mark.parametrize("bad,word", [(dict(batch_size=0), "batch_size"), (dict(max_new_tokens=-1), "max_new_tokens"),
                                      (dict(temperature=-1.0), "temperature"),
                                      (dict(prompts=[torch.zeros(0, dtype=torch.int64)]), r"prompts\[0\]"),
                                      (dict(prompts=[torch.arange(3, 8)[None]]), r"prompts\[0\].*\[1, 5\]")])
def test_generate_sequences_refuses_bad_arguments_before_any_work(target, bad, word, monkeypatch):
    monkeypatch.setattr(target, "generate", lambda *a, **k: pytest.fail("generate ran"))
    kw = dict(prompts=[torch.arange(3, 8)], max_new_tokens=4) | bad
    with pytest.raises(ValueError, match=word):
        tr.generate_sequences(target, **kw)


@pytest.mark.parametrize("bad,word", [(dict(steps=0), "steps"), (dict(batch_size=0), "batch_size"),
                                      (dict(seq_len=1), "seq_len")])
def test_evaluate_head_refuses_bad_arguments_before_any_work(target, bad, word, monkeypatch):
    monkeypatch.setattr(tr, "_target_pass", lambda *a, **k: pytest.fail("a target pass ran"))
    with pytest.raises(ValueError, match=word):
        tr.evaluate_head(EagleHead.from_target(target, "eagle1"), target, [torch.arange(20)], **bad)


def test_count_tokens_and_build_draft_vocab():
    seqs = [torch.tensor([5, 5, 5, 2, 9]), torch.tensor([9, 2, 7])]
    counts = tr.count_tokens(seqs, 10)
    assert counts.tolist() == [0, 0, 2, 0, 0, 3, 0, 1, 0, 2]
    d2t, t2d = tr.build_draft_vocab(counts, 3)
    # top-3: 5 (3), then the tie 2/9 (2 each), both kept; ids ascending
    assert (torch.arange(3) + d2t).tolist() == [2, 5, 9]
    assert t2d.nonzero()[:, 0].tolist() == [2, 5, 9] and d2t.dtype == torch.int64 and t2d.dtype == torch.bool
    d2t, t2d = tr.build_draft_vocab(counts, 2)  # tie at the cut: the lower id wins
    assert (torch.arange(2) + d2t).tolist() == [2, 5]
    d2t, _ = tr.build_draft_vocab(counts, 6)  # zero counts fill up, lowest ids first
    assert (torch.arange(6) + d2t).tolist() == [0, 1, 2, 5, 7, 9]
    with pytest.raises(ValueError):
        tr.build_draft_vocab(counts, 11)


def test_generate_sequences(target):
    prompts = [torch.tensor([4, 5, 6]), torch.tensor([7, 8, 9, 10, 11])]
    seqs = tr.generate_sequences(target, prompts, 12, eos_token_id=None, batch_size=2)
    for p, s in zip(prompts, seqs):
        assert torch.equal(s[:len(p)], p) and len(s) == len(p) + 12
        x = p.clone()
        with torch.no_grad():  # plain greedy decoding, no padding, no cache
            for _ in range(12):
                x = torch.cat([x, target(x[None]).logits[0, -1].argmax()[None]])
        assert torch.equal(s, x)
    new = seqs[1][5:]
    eos = int(new[3])
    first = int((new == eos).nonzero()[0, 0])  # generation stops at the first EOS, which is kept
    cut = tr.generate_sequences(target, prompts, 12, eos_token_id=eos)
    assert torch.equal(cut[1], seqs[1][:5 + first + 1])
    assert len(cut[0]) <= len(seqs[0]) and torch.equal(cut[0], seqs[0][:len(cut[0])])


def test_window_batches():
    seqs = [torch.arange(3), torch.arange(100, 140)]
    it = tr.window_batches(seqs, 16, 10, torch.Generator().manual_seed(0))
    for _ in range(5):
        ids, valid = next(it)
        assert ids.shape == (16, 10) and valid.dtype == torch.bool
        for row, ok in zip(ids, valid):
            n = int(ok.sum())
            assert ok[:n].all() and not ok[n:].any() and (ids[:, 0] >= 0).all()
            w = row[:n]
            assert torch.equal(w, torch.arange(3)) or (n == 10 and torch.equal(w, torch.arange(w[0], w[0] + 10)))


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_unroll_matches_drafting_with_cache(target, kind):
    """Step j of training-time test at row i = drafting j tokens past pair i (true tokens fed), via the KV cache."""
    torch.manual_seed(3)
    head = EagleHead.from_target(target, kind, **({"draft_vocab_size": 50} if kind == "eagle3" else {})).eval()
    T, steps = 12, 3
    ids = torch.randint(0, V, (1, T))
    with torch.no_grad():
        feats, _ = tr._target_pass(target, ids, head.config.target_layers)
        outs = list(tr.unroll(head, feats, ids, steps))  # each [1, T-1, h]
        for i in range(T - 1 - (steps - 1)):
            cache = head.alloc_cache(32)
            x = head(feats[:, :i + 1], ids[:, 1:i + 2], torch.arange(i + 1), cache)[:, -1:]  # commit pairs 0..i
            cache.rewind(i + 1)
            torch.testing.assert_close(x[0, 0], outs[0][0, i], atol=1e-5, rtol=0)
            for j in range(1, steps):
                x = head(x, ids[:, i + 1 + j:i + 2 + j], torch.tensor([i + j]), cache, kv_len=i + j + 1)
                torch.testing.assert_close(x[0, 0], outs[j][0, i], atol=1e-5, rtol=0)


def _train(target, data, kind, lr=3e-3, **kw):
    train, held = data
    torch.manual_seed(0)
    head = EagleHead.from_target(target, kind, **({"draft_vocab_size": 64} if kind == "eagle3" else {}))
    if kind == "eagle3":
        head.set_draft_vocab(*tr.build_draft_vocab(tr.count_tokens(train, V), 64))
    before = tr.evaluate_head(head, target, held, steps=2)["acc"]
    rows = tr.train_head(head, target, train, batch_size=8, lr=lr, seq_len=64, log_every=25, **kw)
    after = tr.evaluate_head(head, target, held, steps=2)["acc"]
    return head, rows, before, after


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_training_reduces_loss_and_raises_agreement(target, data, kind):
    params = {n: p.detach().clone() for n, p in target.named_parameters()}
    head, rows, before, after = _train(target, data, kind, steps=100, lr=6e-3, ttt_steps=3)
    assert [r["step"] for r in rows] == list(range(25, 101, 25))
    assert {"loss", "acc", "lr", "elapsed_s"} <= set(rows[0])
    assert {"vloss", "ploss"} <= set(rows[0]) if kind == "eagle1" else {"ce_0", "ce_2", "acc_2"} <= set(rows[0])
    assert rows[-1]["loss"] < 0.7 * rows[0]["loss"]
    assert rows[-1]["acc"] > rows[0]["acc"] + 0.15
    # held-out sequences: the untrained head agrees with the target about 1 time in 50
    assert before[0] < 0.1 and after[0] > before[0] + 0.2 and after[1] > before[1] + 0.15
    # the target is untouched and its requires_grad flags are restored
    for n, p in target.named_parameters():
        assert torch.equal(p, params[n]) and p.requires_grad and p.grad is None
    assert not head.training


def test_train_head_accepts_a_batch_iterator(target, data):
    train, _ = data
    ids = torch.nn.utils.rnn.pad_sequence([s[:20] for s in train[:4]], batch_first=True)
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[0, 15:] = False

    def batches():
        while True:
            yield ids, valid

    torch.manual_seed(0)
    head = EagleHead.from_target(target, "eagle1")
    rows = tr.train_head(head, target, batches(), steps=4, log_every=2, lr=1e-3)
    assert [r["step"] for r in rows] == [2, 4] and all(r["loss"] == r["loss"] for r in rows)  # finite, not NaN
    rows = tr.train_head(head, target, [ids] * 3, steps=3, log_every=5)  # a list of [B, T] batches
    assert [r["step"] for r in rows] == [3]


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_init_from_head_copies_matching_tensors_and_maps_lm_head_rows(target, kind):
    torch.manual_seed(3)
    old = EagleHead.from_target(target, kind=kind, **({"draft_vocab_size": 40} if kind == "eagle3" else {}))
    new = EagleHead.from_target(target, kind=kind, **({"draft_vocab_size": 24} if kind == "eagle3" else {}))
    if kind == "eagle3":
        g = torch.Generator().manual_seed(0)
        old.set_draft_vocab(*tr.build_draft_vocab(torch.randint(0, 50, (V,), generator=g), 40))
        new.set_draft_vocab(*tr.build_draft_vocab(torch.randint(0, 50, (V,), generator=g), 24))
    before = {k: v.clone() for k, v in new.state_dict().items()}
    copied = tr.init_from_head(new, old.state_dict())
    sd_new, sd_old = new.state_dict(), old.state_dict()
    for name in sd_new:
        if name in ("d2t", "t2d"):
            assert torch.equal(sd_new[name], before[name])  # the new draft vocabulary stays
        elif name != "lm_head.weight":
            assert name in copied and torch.equal(sd_new[name], sd_old[name])
    if kind == "eagle3":
        old_ids, new_ids = old.draft_ids().tolist(), new.draft_ids().tolist()
        for row, t in enumerate(new_ids):  # slow reference: row by row through the target ids
            want = sd_old["lm_head.weight"][old_ids.index(t)] if t in old_ids else before["lm_head.weight"][row]
            assert torch.equal(sd_new["lm_head.weight"][row], want)
        assert len(set(old_ids) & set(new_ids)) > 0


def test_init_from_head_of_a_larger_vocabulary_copies_only_the_rows_both_hold():
    """Old draft ids past this target's vocabulary are skipped (no IndexError); rows both hold are copied."""
    small, big = make_target(), LlamaForCausalLM(LlamaConfig(vocab_size=V + 50, hidden_size=H, intermediate_size=128,
                                                             num_hidden_layers=L, num_attention_heads=4,
                                                             num_key_value_heads=2))
    old = EagleHead.from_target(big, "eagle3", draft_vocab_size=40)
    ids = torch.arange(V - 20, V + 20)  # half of them past the small vocabulary
    t2d = torch.zeros(V + 50, dtype=torch.bool)
    t2d[ids] = True
    old.set_draft_vocab(ids - torch.arange(40), t2d)
    new = EagleHead.from_target(small, "eagle3", draft_vocab_size=40)
    new.set_draft_vocab(*tr.build_draft_vocab(torch.arange(V), 40))  # ids V-40..V-1
    before = new.lm_head.weight.detach().clone()
    assert "lm_head.weight" in tr.init_from_head(new, old.state_dict())
    for row, t in enumerate(new.draft_ids().tolist()):
        want = old.lm_head.weight[t - (V - 20)] if t >= V - 20 else before[row]
        assert torch.equal(new.lm_head.weight[row], want)
