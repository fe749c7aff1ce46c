"""The zoo trainer's data and loss helpers (train_zoo, edit_corpus, synthetic_edits): located requests on synthetic
and real edits, packing, losses, loop repair batches and the repair command (its gate: test_zoo_gate.py). No GPU
training here: the GPU script is smoke-tested by ``bash experiments/train_zoo_gpu.sh /tmp/out --smoke``."""

from __future__ import annotations

import ast
import collections
import dataclasses
import difflib
import itertools
import random
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import edit_corpus, synthetic_edits
from experiments import train_zoo as tz
from experiments import zoo_data as zd
from hybridsd.edit_requests import change_places, located_request

SOURCE = '''"""Helpers."""
import os
import re
import sys

LIMIT = 10


def parse(text):
    return text.split()


class Store:
    def get(self, key):
        return key

    def put(self, key, value):
        self.key = value


def join(parts):
    """Join the parts."""
    return os.sep.join(parts)
'''


DONOR = '''import json


def load(path):
    """Read a JSON file."""
    with open(path) as f:
        data = json.load(f)
    return {k.lower(): v for k, v in data.items()}


class Cache:
    def __init__(self):
        self.items = {}
        self.hits = 0
'''


def _options(argv: list[str]):
    """``train_zoo``'s options for ``argv``, its paths unchecked (the folders a command line names need not exist)."""
    return tz.parse_args(argv, paths=False)


def _model_folder(folder, tokenizer: bool = True):
    """A folder that :meth:`Parser.check_model` takes (its files empty: nothing loads them before the work)."""
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    return folder


def _refused(capsys, argv: list[str], *words: str) -> str:
    """The one stderr line of ``train_zoo`` refusing ``argv`` as it parses it: exit code 2, no traceback, naming
    ``words``."""
    with pytest.raises(SystemExit) as e:
        tz.parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert all(w in err[0] for w in words), err
    return err[0]


@pytest.mark.parametrize("transform", [synthetic_edits.t_rewrite_body, synthetic_edits.t_insert_foreign])
@pytest.mark.parametrize("seed", range(6))
def test_donor_transforms_write_text_from_the_other_file(transform, seed):
    """The donor transforms bring lines that are in the donor file and nowhere in the input, keep the file
    parseable, and the located request names every changed place."""
    text, donor = DONOR, SOURCE + ("\n\ndef count(items):\n    n = 0\n    for x in items:\n        n += 1\n"
                                   "    return n\n")
    lines = text.splitlines(keepends=True)
    got = transform(text, ast.parse(text), lines, random.Random(seed), donor)
    assert got is not None
    instr, after = got
    ast.parse(after)
    new = {ln.strip() for ln in after.splitlines()} - {ln.strip() for ln in lines}
    assert new and all(ln in {d.strip() for d in donor.splitlines()} for ln in new)
    request = located_request(text, after, instr, 6)
    assert len([ln for ln in request.splitlines() if ln.startswith("- ")]) == len(change_places(text, after, 6))


@pytest.mark.parametrize("seed", range(12))
def test_synthetic_edits_carry_a_located_request(seed):
    got = synthetic_edits.synthetic_edit((seed, SOURCE, DONOR, "located", 6))
    if got is None:
        pytest.skip("this seed's transforms did not apply")
    ast.parse(got["after"])
    assert got["instruction"] == located_request(got["before"], got["after"],
                                                 got["instruction"].splitlines()[0], 6)
    assert len([ln for ln in got["instruction"].splitlines() if ln.startswith("- ")]) == \
        len(change_places(got["before"], got["after"], 6))
    plain = synthetic_edits.synthetic_edit((seed, SOURCE, DONOR, "subject", 6))
    assert plain["after"] == got["after"] and plain["instruction"] == got["instruction"].splitlines()[0]


@pytest.mark.parametrize("seed", range(40))
def test_span_edits_take_new_lines_from_the_donor_and_name_every_place(seed):
    got = synthetic_edits.span_edit(seed, SOURCE, DONOR, "located", 6)
    if got is None:
        pytest.skip("this seed's draw fell outside (0, 0.6]")
    assert got["before"] == SOURCE and 0 < got["char_edit_norm"] <= 0.6
    subject = got["instruction"].splitlines()[0]
    assert subject in synthetic_edits.SPAN_SUBJECTS
    assert got["instruction"] == located_request(SOURCE, got["after"], subject, 6)
    donor = {ln.strip() for ln in DONOR.splitlines()}
    for place in change_places(SOURCE, got["after"], 6):
        new = got["after"].splitlines()[place.new_start:place.new_end]
        assert all(ln.strip() in donor or ln.strip() in SOURCE for ln in new)  # donor text (or a matched line)


def test_span_edit_norms_spread_over_the_range():
    norms = [g["char_edit_norm"] for seed in range(300)
             if (g := synthetic_edits.span_edit(seed, SOURCE * 3, DONOR, "located", 6))]
    assert len(norms) >= 250
    assert len(set(np.minimum((np.array(norms) / 0.075).astype(int), 7))) == 8  # every 0.075-wide bin of (0, 0.6]


def test_span_share_routes_synthetic_edits():
    spans = [synthetic_edits.synthetic_edit((seed, SOURCE, DONOR, "located", 6, 1.0)) for seed in range(10)]
    assert all(g["kinds"] == ["span_edit"] for g in spans if g)
    plain = [synthetic_edits.synthetic_edit((seed, SOURCE, DONOR, "located", 6, 0.0)) for seed in range(10)]
    assert all("span_edit" not in g["kinds"] for g in plain if g)
    with pytest.raises(ValueError, match="span_share"):
        tz.TargetConfig(span_share=1.5)


def test_real_request_modes():
    row = {"before": SOURCE, "after": SOURCE.replace("LIMIT = 10", "LIMIT = 20"), "instruction": "Raise the limit"}
    assert edit_corpus.real_request((row, "subject", 6)) == "Raise the limit"
    located = edit_corpus.real_request((row, "located", 6))
    assert located.startswith("Raise the limit\n") and "replace the next line with about 1 new line" in located


def test_config_rejects_an_unknown_request_mode():
    with pytest.raises(ValueError, match="change_request"):
        tz.TargetConfig(change_request="free")


def test_seed_option_sets_the_config_and_the_edit_data_key():
    """``target --seed N`` is the run's seed; the cached edit data is keyed by it, so runs of different seeds that
    share a cache do not share synthetic edits."""
    assert tz.target_config(tz.parse_args(["target"])).seed == 0
    cfg = tz.target_config(_options(["target", "--seed", "3", "--init", "x"]))
    assert cfg == dataclasses.replace(tz.target_config(_options(["target", "--init", "x"])), seed=3)
    keys = {zd.edit_key(dataclasses.replace(cfg, seed=s), tz.MODEL_DIR, [], []) for s in (0, 3)}
    assert len(keys) == 2


def _slow_changed(before, after):
    """Positions of ``after`` not in the longest-common-subsequence alignment used by difflib, plus the token
    after each deletion: recomputed by walking the opcodes' blocks one token at a time."""
    import difflib
    out = set()
    sm = difflib.SequenceMatcher(None, before, after, autojunk=False)
    matched = {j + t for _, j, n in sm.get_matching_blocks() for t in range(n)}
    out |= {j for j in range(len(after)) if j not in matched}
    for tag, _, _, j1, j2 in sm.get_opcodes():
        if tag == "delete":
            out.add(j1)
    return sorted(out)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=30), st.lists(st.integers(0, 4), max_size=30))
def test_changed_positions(before, after):
    got = zd.edit_positions(([9, 9, 9], before, after))[0]
    assert got == _slow_changed(before, after)
    if before == after:
        assert got == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=30), st.lists(st.integers(0, 4), max_size=30))
def test_decision_positions(before, after):
    """Reference: walk the token alignment; a decision is where a copy of ``before`` is left (a new token after
    a copied one) or resumed at a place other than the next source token (after new tokens, or after a skip);
    the end-of-turn position counts as copying ``before``'s end."""
    import difflib

    source = {}  # position in after -> position in before it copies
    for i, j, n in difflib.SequenceMatcher(None, before, after, autojunk=False).get_matching_blocks():
        source.update({j + t: i + t for t in range(n)})
    source[len(after)] = len(before)
    want, prev = set(), -1  # prev: source position of the previous token; None after a new token
    for j in range(len(after) + 1):
        if j not in source:
            if prev is not None:
                want.add(j)
            prev = None
        else:
            if prev is None or source[j] != prev + 1:
                want.add(j)
            prev = source[j]
    got = zd.edit_positions(([9, 9, 9], before, after))[1]
    assert got == sorted(want)
    assert all(0 <= j <= len(after) for j in got)
    assert (got == []) == (before == after)


@pytest.mark.parametrize("example", [([7, 8, 9, 1, 2, 3, 4], 3, [1, 3], [1, 2, 3, 4], [(1, 8)]),
                                     ([7, 8, 1, 2, 4], 2, [0, 2], [0, 3], [])])
def test_sft_batches_weight_the_changed_tokens(example):
    ids, n_prompt, changed, decisions, avoided = example
    (x, y, w, avoid, copy), = zd.sft_batches([example], 4096, pad=0, seed=0, change_weight=5.0,
                                             decision_weight=3.0)
    assert {(int(q) - n_prompt + 1, int(avoid[0, q])) for q in torch.nonzero(avoid[0] >= 0)[:, 0]} == set(avoided)
    assert x[0, : len(ids) - 1].tolist() == ids[:-1]
    for pos in range(len(ids) - n_prompt):  # answer token pos is predicted at n_prompt - 1 + pos
        assert int(y[0, n_prompt - 1 + pos]) == ids[n_prompt + pos]
        want = 5.0 if pos in changed else 3.0 if pos in decisions else 1.0
        assert float(w[0, n_prompt - 1 + pos]) == want
        assert bool(copy[0, n_prompt - 1 + pos]) == (want == 1.0)
    assert int((y != -100).sum()) == len(ids) - n_prompt


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(2, 700), min_size=1, max_size=60), st.integers(256, 4096), st.integers(0, 5))
def test_sft_batch_rows_are_the_batches_of_sft_batches(lengths, batch_tokens, seed):
    """Every example lands in one batch; a batch of two or more rows padded to 64 tokens stays within
    ``batch_tokens``; ``sft_batches`` yields exactly these rows in this order (so counting the rows counts its
    batches)."""
    examples = [(list(range(n)), 1, [0], [0], []) for n in lengths]
    rows = zd.sft_batch_rows(examples, batch_tokens, seed)
    assert sorted(i for batch in rows for i in batch) == list(range(len(examples)))
    for batch in rows:
        width = -(-max(lengths[i] for i in batch) // 64) * 64
        assert len(batch) == 1 or width * len(batch) <= batch_tokens
    built = list(zd.sft_batches(examples, batch_tokens, pad=0, seed=seed))
    assert len(built) == len(rows)
    for (x, *_), batch in zip(built, rows):
        assert x.shape[0] == len(batch)
        assert [int((row != 0).sum()) + 1 for row in x] == [lengths[i] - 1 for i in batch]  # ids[:-1], first is 0



@st.composite
def sft_rows(draw):
    """An ``sft_examples`` row (with ignored positions or not): ids, prompt length, changed, decisions, avoided."""
    n_prompt = draw(st.integers(1, 40))
    n_answer = draw(st.integers(1, 90))
    top = draw(st.sampled_from([8, 50]))  # few distinct tokens: ambiguous copies (ambiguous_copies) are common
    ids = draw(st.lists(st.integers(6, top), min_size=n_prompt + n_answer, max_size=n_prompt + n_answer))
    pos = st.integers(0, n_answer - 1)
    row = (ids, n_prompt, sorted(set(draw(st.lists(pos, max_size=8)))), sorted(set(draw(st.lists(pos, max_size=5)))),
           sorted(dict(draw(st.lists(st.tuples(pos, st.integers(6, 50)), max_size=4))).items()))
    return row + (sorted(set(draw(st.lists(pos, max_size=4)))),) if draw(st.booleans()) else row


def slow_ambiguous_copies(ids: list[int], n_prompt: int, n: int) -> dict[int, int]:
    """Answer position -> wrong token: the n tokens before it followed in the prompt by 2+ tokens, its own one of
    them; the wrong one the most frequent other (smallest id among equals)."""
    follow = collections.defaultdict(collections.Counter)
    for i in range(n_prompt - n):
        follow[tuple(ids[i:i + n])][ids[i + n]] += 1
    out = {}
    for t in range(max(n_prompt, n), len(ids)):
        c = follow.get(tuple(ids[t - n:t]))
        if c and len(c) >= 2 and ids[t] in c:
            out[t - n_prompt] = min((-k, tok) for tok, k in c.items() if tok != ids[t])[1]
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([3, 4, 5, 10239]), max_size=70), st.integers(0, 70), st.integers(1, 4))
def test_ambiguous_copies_equal_a_reference(ids, n_prompt, n):
    where, wrong = zd.ambiguous_copies(ids, min(n_prompt, len(ids)), n)
    assert dict(zip(where.tolist(), wrong.tolist())) == slow_ambiguous_copies(ids, min(n_prompt, len(ids)), n)
    assert where.dtype == wrong.dtype == np.int64 and list(where) == sorted(where)


def test_ambiguous_copies_mark_the_copy_after_a_recurring_context():
    """``x = 1`` then ``y = 1`` in the input: copying ``= 1`` after ``x`` is ambiguous only at the token after it."""
    prompt = [1, 2, 3, 9, 7, 2, 3, 8, 0]  # "x = 1 ;" twice with different ends (9, then 8)
    where, wrong = zd.ambiguous_copies(prompt + [1, 2, 3, 9, 4], len(prompt), n=2)
    assert where.tolist() == [3] and wrong.tolist() == [8]  # after "= 1" (2, 3): 9 is the copy, 8 the other


@settings(max_examples=60, deadline=None)
@given(st.lists(sft_rows(), min_size=1, max_size=12), st.sampled_from([0.5, 1.0, 5.0]),
       st.sampled_from([1.0, 3.0]), st.sampled_from([0.0, 2.5]), st.integers(0, 3))
def test_sft_batches_equal_a_per_position_reference(rows, change_weight, decision_weight, ambiguity_weight, seed):
    """Every position of every batch, dtypes included, against a loop over the rows' positions."""
    batches = list(zd.sft_batches(rows, 512, pad=2, seed=seed, change_weight=change_weight,
                                  decision_weight=decision_weight, ambiguity_weight=ambiguity_weight))
    for (x, y, w, avoid, copy), batch in zip(batches, zd.sft_batch_rows(rows, 512, seed), strict=True):
        assert (x.dtype, y.dtype, w.dtype, avoid.dtype, copy.dtype) == (torch.long, torch.long, torch.float32,
                                                                         torch.long, torch.bool)
        assert x.shape == y.shape == w.shape == avoid.shape == copy.shape and x.shape[1] % 64 == 0
        for r, i in enumerate(batch):
            ids, n_prompt, changed, decisions, avoided = rows[i][:5]
            ignored = rows[i][5] if len(rows[i]) > 5 else []
            ambiguous = slow_ambiguous_copies(ids, n_prompt, 4) if ambiguity_weight else {}
            for t in range(x.shape[1]):
                q = t - (n_prompt - 1)  # the answer token this position predicts, when 0 <= q < answer length
                answer = 0 <= q < len(ids) - n_prompt and q not in ignored
                want_w = 0.0 if not answer else max(change_weight if q in changed else 1.0,
                                                     decision_weight if q in decisions else 0.0,
                                                     ambiguity_weight if q in ambiguous else 0.0)
                assert int(x[r, t]) == (ids[t] if t < len(ids) - 1 else 2)
                assert int(y[r, t]) == (ids[n_prompt + q] if answer else -100)
                assert float(w[r, t]) == want_w
                assert bool(copy[r, t]) == (answer and q not in changed and q not in decisions)
                want_avoid = dict(avoided).get(q, ambiguous.get(q, -100))
                assert int(avoid[r, t]) == (want_avoid if answer else -100)


def test_masked_loss_on_kept_positions_from_the_host_is_the_masked_loss():
    torch.manual_seed(0)
    model = tz.build_model(tz.TargetConfig(**tz.SMOKE), 32, {"bos": 0, "eos": 1, "pad": 2, "eot": 3})
    x, y = torch.randint(4, 32, (3, 11)), torch.randint(4, 32, (3, 11))
    y[0, :4], y[1, 7:], y[2, ::2] = -100, -100, -100
    w = torch.rand(3, 11)
    keep = tz.kept_positions(y)
    assert keep.tolist() == [i for i, t in enumerate(y.flatten().tolist()) if t != -100]
    logits = model(x).logits.float()
    ce = torch.nn.functional.cross_entropy(logits[y != -100], y[y != -100], reduction="none")
    want = (ce * w[y != -100]).sum() / w[y != -100].sum()
    assert torch.allclose(tz.masked_loss(model, x, y, w, keep=keep), want, atol=1e-6)
    assert torch.equal(tz.masked_loss(model, x, y, w, keep=keep), tz.masked_loss(model, x, y, w))

def test_train_phase_counts_tokens_on_the_host():
    """The loss-token and seen-token counts are the targets' non-ignored positions and the inputs' sizes."""
    special = {"bos": 0, "eos": 1, "pad": 2, "eot": 3}
    cfg = tz.TargetConfig(**{**tz.SMOKE, "log_every": 2})
    torch.manual_seed(0)
    model = tz.build_model(cfg, 40, special)
    g = torch.Generator().manual_seed(3)
    batches = []
    for n in (9, 14, 11):
        x, y = torch.randint(4, 40, (3, n), generator=g), torch.randint(4, 40, (3, n), generator=g)
        y[:, : n // 2] = -100
        batches.append((x, y, torch.ones(y.shape), torch.full(y.shape, -100)))
    log: list = []
    info = tz.train_phase(model, torch.optim.AdamW(model.parameters(), lr=1e-3), iter(batches),
                          tz.Phase("sft", 3, 600.0, 1e-3, 1, 0.1), cfg, torch.device("cpu"), log)
    assert info["steps"] == 3 and info["stopped_by"] == "steps"
    assert info["loss_tokens"] == sum(int((y != -100).sum()) for _, y, _, _ in batches) == 3 * (5 + 7 + 6)
    assert info["tokens_seen"] == 3 * (9 + 14 + 11)
    assert [e["step"] for e in log] == [1, 2] and log[-1]["loss_tokens"] == 3 * (5 + 7)


@pytest.mark.parametrize("weight", [0.0, 4.0])
def test_train_phase_adds_the_copy_margin_hinge_of_its_config(weight):
    """A step's logged loss is masked_loss with the batch's copy positions and the config's hinge weight."""
    special = {"bos": 0, "eos": 1, "pad": 2, "eot": 3}
    cfg = tz.TargetConfig(**{**tz.SMOKE, "log_every": 1, "copy_margin_weight": weight, "copy_margin": 5.0})
    torch.manual_seed(0)
    model = tz.build_model(cfg, 40, special)
    g = torch.Generator().manual_seed(4)
    x, y = torch.randint(4, 40, (3, 12), generator=g), torch.randint(4, 40, (3, 12), generator=g)
    y[:, :4] = -100
    copy = torch.rand(3, 12, generator=g) < 0.6
    want = tz.masked_loss(model, x, y, torch.ones(y.shape), None, 0.0, None, copy, 5.0, weight).item()
    plain = tz.masked_loss(model, x, y).item()
    assert (want > plain + 0.1) == (weight > 0)  # an untrained model is inside a margin of 5 at copy positions
    log: list = []
    tz.train_phase(model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                   iter([(x, y, torch.ones(y.shape), torch.full(y.shape, -100), copy)]),
                   tz.Phase("sft", 1, 600.0, 1e-3, 1, 0.1), cfg, torch.device("cpu"), log)
    assert log[0]["loss"] == pytest.approx(want, abs=1e-4)


def _slow_copy_candidates(ids, q, n):
    for t in range(q - 1, n - 1, -1):  # latest earlier occurrence of ids[q-n:q] ending at t (t < q)
        if ids[t - n:t] == ids[q - n:q]:
            return ids[t]
    return -1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=4, max_size=40), st.data())
def test_copy_candidates(ids, data):
    positions = sorted(data.draw(st.sets(st.integers(3, len(ids) - 1))))
    assert zd.copy_candidates(ids, positions) == [_slow_copy_candidates(ids, q, 3) for q in positions]


def test_sft_examples_equal_each_example_made_alone():
    """Examples made together (befores shared, tokenized once; parallel batches) equal each made alone."""
    from transformers import AutoTokenizer

    import hybridsd as hsd

    tok = AutoTokenizer.from_pretrained(hsd.zoo.path(), local_files_only=True)
    eot = tz.special_ids(tok)["eot"]
    a, b = "def f(x):\n    return x\n", "import os\n\nPATH = os.sep\n"
    triples = [(a, "Add a docstring.", 'def f(x):\n    """X."""\n    return x\n'), (b, "Drop PATH.", "import os\n"),
               (a, "Rename f to g.", "def g(x):\n    return x\n"), (a, "Keep it.", a)]
    together = zd.sft_examples(tok, triples, eot)
    assert together == [zd.sft_examples(tok, [t], eot)[0] for t in triples]
    assert together[0][2] and together[3][2] == [len(tok.encode(a, add_special_tokens=False))]  # only the EOT


def test_sft_examples_avoid_only_copies_that_would_be_wrong():
    """The unlikelihood targets of a real example: inside changed answer tokens only, never the answer's token,
    and each the token after an earlier occurrence of the three tokens before it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tz.MODEL_DIR)
    after = SOURCE.replace("LIMIT = 10\n", "LIMIT = 10\nLIMIT = 10\nLIMIT = 12\n")
    (ids, n_prompt, changed, _, avoided), = zd.sft_examples(tok, [(SOURCE, "Repeat the limit.", after)],
                                                            tok.eos_token_id)
    assert avoided and all(j in changed for j, _ in avoided)
    for j, t in avoided:
        q = n_prompt + j
        assert ids[q] != t and t == _slow_copy_candidates(ids, q, 3)


def test_unlikelihood_term_is_added_where_asked():
    torch.manual_seed(0)
    model = tz.build_model(tz.TargetConfig(**tz.SMOKE), 32, {"bos": 0, "eos": 1, "pad": 2, "eot": 3})
    x = torch.randint(4, 32, (2, 10))
    y = torch.randint(4, 32, (2, 10))
    y[:, :3] = -100
    avoid = torch.full_like(y, -100)
    avoid[0, 5], avoid[1, 7], avoid[1, 8] = 9, 11, int(y[1, 8])  # the last is the target itself: not avoided
    plain = tz.masked_loss(model, x, y)
    assert torch.allclose(tz.masked_loss(model, x, y, None, avoid, 0.0), plain)
    logits = model(x).logits.float()
    p = torch.softmax(logits, -1)
    want = plain - 0.5 * (torch.log(1 - p[0, 5, 9]) + torch.log(1 - p[1, 7, 11])) / 14
    assert torch.allclose(tz.masked_loss(model, x, y, None, avoid, 0.5), want, atol=1e-6)


@pytest.mark.parametrize("margin", [0.5, 2.0, 30.0])
def test_copy_margin_hinge_is_added_at_the_copy_positions(margin):
    """The hinge term against a loop over the copy positions: relu(margin - (z_target - best other z)), over the
    total weight; zero weight or no mask leaves the plain loss; a huge margin makes every copy position count."""
    torch.manual_seed(1)
    model = tz.build_model(tz.TargetConfig(**tz.SMOKE), 32, {"bos": 0, "eos": 1, "pad": 2, "eot": 3})
    x, y = torch.randint(4, 32, (2, 13)), torch.randint(4, 32, (2, 13))
    y[0, :5], y[1, 11:] = -100, -100
    w = torch.rand(2, 13) + 0.5
    copy = torch.rand(2, 13) < 0.5
    copy[0, 2] = True  # a copy flag where the target is ignored counts nothing
    plain = tz.masked_loss(model, x, y, w)
    assert torch.allclose(tz.masked_loss(model, x, y, w, copy=copy, copy_margin=margin), plain)
    assert torch.allclose(tz.masked_loss(model, x, y, w, copy=None, copy_margin_weight=3.0), plain)
    with torch.no_grad():
        logits = model(x).logits.float()
    hinge = 0.0
    for b in range(2):
        for t in range(13):
            if copy[b, t] and y[b, t] != -100:
                z = logits[b, t]
                other = max(float(z[v]) for v in range(z.numel()) if v != int(y[b, t]))
                hinge += max(0.0, margin - (float(z[y[b, t]]) - other))
    want = plain + 3.0 * hinge / float(w[y != -100].sum())
    got = tz.masked_loss(model, x, y, w, copy=copy, copy_margin=margin, copy_margin_weight=3.0)
    assert torch.allclose(got, want, atol=1e-5)
    if margin == 30.0:  # every kept copy position is inside the margin of an untrained model
        assert hinge > 0 and sum(1 for b in range(2) for t in range(13) if copy[b, t] and y[b, t] != -100) > 3
    with pytest.raises(ValueError, match="copy_margin"):
        tz.TargetConfig(copy_margin=0.0)
    with pytest.raises(ValueError, match="copy_margin"):
        tz.TargetConfig(copy_margin_weight=-1.0)
    for command in ("target", "repair"):  # both commands take the hinge (the repair: on its edit-tuning anchors)
        args = _options([command, "--init", "m", "--out", "o", "--copy-margin-weight", "4",
                         "--copy-margin", "1.5"])
        cfg = tz.target_config(args) if command == "target" else tz.repair_config(args)
        assert (cfg.copy_margin_weight, cfg.copy_margin) == (4.0, 1.5)


@pytest.mark.parametrize("mode", ["layers", "model"])
def test_compiled_layers_train_as_eager_ones_and_evaluate_uncompiled(mode, tmp_path):
    """``compile_layers`` (backend ``aot_eager`` here; ``inductor`` on the GPU, where the ``-graphs`` modes also
    replay CUDA graphs: tests/test_cuda.py), each layer or the whole decoder: the training steps run the compiled
    region and follow the eager model's losses and weights; ``generate`` under ``eager()`` compiles nothing; the
    saved state dict has the eager model's keys; ``--compile-layers`` reaches the config."""
    from torch._dynamo.utils import counters

    special = {"bos": 0, "eos": 1, "pad": 2, "eot": 3}
    cfg = tz.TargetConfig(**{**tz.SMOKE, "log_every": 1})
    torch.manual_seed(0)
    plain = tz.build_model(cfg, 40, special)
    compiled = tz.build_model(cfg, 40, special)
    compiled.load_state_dict(plain.state_dict())
    torch._dynamo.reset()
    tz.compile_layers(compiled, backend="aot_eager", mode=mode)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(4, 40, (2, n), generator=g), torch.randint(4, 40, (2, n), generator=g))
               for n in (12, 12, 17, 9)]  # 3 shapes
    runs = {}
    for name, model in (("plain", plain), ("compiled", compiled)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        log = []
        before = counters["stats"]["unique_graphs"]
        info = tz.train_phase(model, opt, iter(batches), tz.Phase(name, 4, 600.0, 1e-2, 1, 0.1), cfg,
                              torch.device("cpu"), log)
        runs[name] = ([e["loss"] for e in log], counters["stats"]["unique_graphs"] - before, info["first_step_s"])
        assert info["steps"] == 4 and info["tokens_seen"] == 2 * (12 + 12 + 17 + 9)
        assert 0 <= info["first_step_s"] <= info["wall_s"] + 0.05 and info["tokens_per_s_after_first_step"] > 0
    assert len(runs["plain"][0]) == 4 and runs["plain"][1] == 0
    assert runs["compiled"][2] > runs["plain"][2]  # the compiled run's first step holds its compilation
    assert runs["compiled"][1] >= 1  # the layers ran compiled (one graph shared by the layers, one more per shape kind)
    assert runs["compiled"][0] == pytest.approx(runs["plain"][0], rel=1e-4)
    for (k, a), (k2, b) in zip(plain.state_dict().items(), compiled.state_dict().items()):
        assert k == k2 and torch.allclose(a, b, atol=1e-5), k
    before = counters["stats"]["unique_graphs"]
    out = tz.greedy_continuations(compiled, [[4, 5, 6], [7, 8]], 5, special["pad"], [special["eot"]],
                                  torch.device("cpu"))
    assert counters["stats"]["unique_graphs"] == before
    assert out == tz.greedy_continuations(plain, [[4, 5, 6], [7, 8]], 5, special["pad"], [special["eot"]],
                                          torch.device("cpu"))
    assert tz.target_config(tz.parse_args(["target", "--compile-layers"])).compile_layers
    assert not tz.target_config(tz.parse_args(["target"])).compile_layers
    with pytest.raises(ValueError, match="compile mode 'graphs'"):
        tz.compile_layers(plain, mode="graphs")


@pytest.mark.parametrize("seed", range(6))
def test_repeated_line_is_ignored_and_its_exit_is_taught(seed):
    """Token 0 is the newline: the answer [5 6 0 | 7 8 9 0 | 3 4 0] after a 3-token prompt, its second line the
    change. That line is repeated once or twice after itself, the repeats' targets ignored; the target after
    them is the original next token (3), a decision, with copying the line once more (7) avoided."""
    answer = [5, 6, 0, 7, 8, 9, 0, 3, 4, 0]
    example = ([1, 2, 2] + answer + [99], 3, [3, 4, 5, 6], [3, 7], [(4, 9)])
    ids, n_prompt, changed, decisions, avoided, ignored = zd.with_repeated_line(example, {0}, random.Random(seed))
    d = len(ignored)
    assert d in (4, 8) and ignored == list(range(7, 7 + d))
    assert ids[n_prompt + 7: n_prompt + 7 + d] == [7, 8, 9, 0] * (d // 4)
    assert ids[:n_prompt + 7] + ids[n_prompt + 7 + d:] == example[0]  # the original, with the repeats cut out
    assert changed == [3, 4, 5, 6] and decisions == [3, 7 + d] and avoided == [(4, 9), (7 + d, 7)]
    (x, y, w, avoid, _), = zd.sft_batches([(ids, n_prompt, changed, decisions, avoided, ignored)], 4096, pad=0,
                                       seed=0, decision_weight=2.0)
    for q in range(len(ids) - n_prompt):
        at = n_prompt - 1 + q
        if q in ignored:
            assert int(y[0, at]) == -100 and float(w[0, at]) == 0 and int(avoid[0, at]) == -100
        else:
            assert int(y[0, at]) == ids[n_prompt + q] and float(w[0, at]) == (2.0 if q in decisions else 1.0)
    assert int(y[0, n_prompt - 1 + 7 + d]) == 3 and int(avoid[0, n_prompt - 1 + 7 + d]) == 7
    assert zd.with_repeated_line(([1, 5, 6, 99], 1, [0], [0], []), {0}, random.Random(0)) is None  # no line
    counts = {len(zd.with_repeated_line(example, {0}, random.Random(s), max_repeats=5)[5]) // 4 for s in range(60)}
    assert counts == {1, 2, 3, 4, 5}


def test_target_options_override_the_presets(capsys):
    args = _options(["target", "--init", "m", "--decision-weight", "4", "--sft-max-len", "2048",
                     "--sft-lr", "3e-4", "--sft-epochs", "4", "--sft-time-s", "290", "--deadline-s", "400"])
    cfg = tz.target_config(args)
    assert (cfg.decision_weight, cfg.sft_max_len, cfg.sft_lr, cfg.sft_epochs, cfg.sft_time_s, cfg.deadline_s) == \
        (4.0, 2048, 3e-4, 4, 290.0, 400.0)
    assert cfg.pretrain_chars == tz.FINETUNE["pretrain_chars"] and cfg.change_weight == 1.0  # the fine-tuning preset
    scratch = tz.target_config(tz.parse_args(["target", "--pretrain-time-s", "450", "--pretrain-epochs", "3",
                                              "--sft-replay", "0.2", "--pretrain-steps", "700", "--sft-steps", "90"]))
    assert (scratch.pretrain_time_s, scratch.pretrain_epochs, scratch.sft_replay) == (450.0, 3, 0.2)
    assert (scratch.pretrain_steps, scratch.sft_steps) == (700, 90) and tz.TargetConfig().sft_steps == 0
    assert scratch.pretrain_chars == tz.TargetConfig().pretrain_chars
    assert set(tz.CONFIG_OPTIONS) <= set(tz.TargetConfig.__dataclass_fields__)
    spans = tz.target_config(tz.parse_args(["target", "--span-share", "0.6", "--unlikelihood-weight", "1",
                                            "--repeat-share", "0.3", "--repeat-max", "6", "--real-epochs", "1",
                                            "--synthetic-examples", "500"]))
    assert (spans.span_share, spans.unlikelihood_weight, spans.repeat_share, spans.repeat_max, spans.real_epochs,
            spans.synthetic_examples) == (0.6, 1.0, 0.3, 6, 1, 500)
    for bad, name in ((["--repeat-max", "0"], "repeat_max"), (["--repeat-share", "2"], "repeat_share"),
                      (["--unlikelihood-weight", "-1"], "unlikelihood_weight"), (["--decision-weight", "0"],
                      "decision_weight"), (["--sft-replay", "1"], "sft_replay"), (["--sft-steps", "-1"], "sft_steps")):
        with pytest.raises(SystemExit) as e:  # checked as the options are parsed: one line, exit 2
            tz.parse_args(["target", *bad])
        err = capsys.readouterr().err
        assert e.value.code == 2 and name in err and "Traceback" not in err


def test_shape_options_are_checked_and_from_scratch_only(capsys):
    cfg = tz.target_config(tz.parse_args(["target", "--num-layers", "12", "--num-heads", "12", "--num-kv-heads", "4",
                                          "--intermediate-size", "512"]))
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size, cfg.hidden_size) == \
        (12, 12, 4, 512, tz.TargetConfig().hidden_size)
    for bad, said in ((["--num-heads", "5"], "num_heads dividing hidden_size"),  # 384 / 5
                      (["--num-heads", "128"], "even head size"),  # head size 3
                      (["--num-kv-heads", "4"], "num_kv_heads dividing num_heads"),  # 6 / 4
                      (["--num-layers", "0"], "positive sizes"),
                      (["--init", "m", "--num-heads", "12"], "--num-heads: the model shape is --init's")):
        with pytest.raises(SystemExit) as e:  # one line, exit 2, before any work
            tz.parse_args(["target", *bad])
        err = capsys.readouterr().err
        assert e.value.code == 2 and said in err and "Traceback" not in err


@pytest.mark.parametrize("epoch_steps, cap, planned", [(100, 0, 100), (100, 30, 30), (20, 30, 20), (1, 1, 1)])
def test_step_budget_caps_the_epochs_steps(epoch_steps, cap, planned):
    assert tz.step_budget(epoch_steps, cap) == planned


@pytest.mark.parametrize("every, n", [(2, 5), (3, 7), (7, 20), (7, 6)])
def test_replay_takes_every_nth_step(every, n):
    edits = [(torch.full((1, 2), i), torch.full((1, 2), i), torch.zeros(1, 2), torch.full((1, 2), -100),
              torch.ones(1, 2, dtype=torch.bool)) for i in range(n)]
    replay = ((torch.full((1, 2), -1 - j), torch.full((1, 2), -1 - j)) for j in itertools.count())
    out = list(zd.with_replay(iter(edits), replay, every))
    is_replay = [int(x[0, 0]) < 0 for x, *_ in out]
    assert [int(x[0, 0]) for x, *_ in out if int(x[0, 0]) >= 0] == list(range(n))  # every edit batch, in order
    assert [i for i, r in enumerate(is_replay) if r] == [i for i in range(len(out)) if i % every == every - 1]
    # replay batches weigh every token, avoid nothing and have no copy positions
    assert all(bool((w == 1).all()) and a is None and c is None for x, _, w, a, c in out if int(x[0, 0]) < 0)


def _slow_repeat_positions(tokens, n, reference, exempt):
    def count(seq, gram):
        return sum(seq[i:i + n] == gram for i in range(len(seq) - n + 1))

    return [t for t in range(n - 1, len(tokens))
            if count(tokens[:t + 1], tokens[t - n + 1:t + 1]) > max(1, count(reference, tokens[t - n + 1:t + 1]))
            and not count(exempt, tokens[t - n + 1:t + 1])]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=40), st.integers(1, 5), st.lists(st.integers(0, 3), max_size=30),
       st.lists(st.integers(0, 5), max_size=20))
def test_repeat_positions(tokens, n, reference, exempt):
    assert tz.repeat_positions(tokens, n, reference, exempt) == _slow_repeat_positions(tokens, n, reference, exempt)
    assert tz.repeat_positions(tokens, n) == _slow_repeat_positions(tokens, n, [], [])


def test_repeats_that_the_reference_has_are_not_loops():
    line = [7, 8, 9, 0]
    assert tz.repeat_positions(line * 3, 4) == list(range(7, 12))  # from the first 4-gram seen twice
    # the reference has the line twice: only 4-grams past their count there (the wrap 8907 it has once)
    assert tz.repeat_positions(line * 3, 4, reference=line * 2) == [8, 9, 10, 11]
    assert tz.repeat_positions(line * 3, 4, exempt=[5] + line) == [8, 9, 10]  # a line the prompt has: 7890 exempt


def test_loop_batch_penalizes_the_repeats_of_a_greedy_continuation():
    """A model that continues every prefix with the same token: its continuation repeats from the fourth token
    on, and each repeat is avoided at the position that predicts it; a stop token ends a continuation."""

    class Always(torch.nn.Module):
        def __init__(self, token):
            super().__init__()
            self.token = token

        def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
            assert kw["do_sample"] is False and bool((attention_mask.sum(1) > 0).all())
            fill = torch.full((input_ids.shape[0], max_new_tokens), self.token)
            fill[1, 2] = kw["eos_token_id"][0]  # the second row stops after two tokens
            return torch.cat([input_ids, fill], dim=1)

    prefixes = [[5, 6, 7], [8, 9]]
    inputs, avoid, share, early = tz.loop_batch(Always(3), prefixes, 8, pad=0, stop=[1, 2],
                                                device=torch.device("cpu"))
    assert inputs[0, :11].tolist() == [5, 6, 7] + [3] * 8 and inputs[1, :4].tolist() == [8, 9, 3, 3]
    assert [q for q in range(inputs.shape[1]) if avoid[0, q] >= 0] == [3 + t - 1 for t in range(4, 8)]
    assert set(avoid[0][avoid[0] >= 0].tolist()) == {3} and not bool((avoid[1] >= 0).any())
    assert share == 4 / 10 and early == 0
    # early stops: the second row stops after 2 tokens; its reference goes on for 9 more (11 in all)
    for refs, margin, want in ((([], list(range(11))), 9, True), (([], list(range(11))), 10, False),
                               (([], list(range(11))), 0, False), (([], [4, 4]), 1, False)):
        _, avoid, _, early = tz.loop_batch(Always(3), prefixes, 8, pad=0, stop=[1, 2], device=torch.device("cpu"),
                                           references=list(refs), early_stop=margin)
        assert early == (0.5 if want else 0)
        assert avoid[1].tolist()[:5] == [-100, -100, -100, 1 if want else -100, -100]  # position 3 predicted the stop


def test_resync_batch_teaches_the_answer_after_the_models_own_lines():
    """A model that writes the same three lines at every place: its text is kept up to as many line ends as the
    place has new lines, and the targets are the answer's lines after the place and the end of turn; a place where
    it writes fewer line ends is left out, and an answer that only deletes lines has no place."""
    from transformers import AutoTokenizer

    import hybridsd as hsd

    tok = AutoTokenizer.from_pretrained(hsd.zoo.path(), local_files_only=True)
    special = tz.special_ids(tok)

    class Writes(torch.nn.Module):
        def __init__(self, text):
            super().__init__()
            self.ids = tok.encode(text, add_special_tokens=False)

        def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
            assert kw["do_sample"] is False and special["eot"] in kw["eos_token_id"]
            own = torch.tensor((self.ids + [special["eot"]] * max_new_tokens)[:max_new_tokens])
            return torch.cat([input_ids, own.expand(input_ids.shape[0], -1)], dim=1)

    before = "a = 1\nb = 2\nc = 3\n"
    two = (before, "add two lines after `a = 1`", "a = 1\nnew_one()\nnew_two()\nb = 2\nc = 3\n")
    gone = (before, "remove `b = 2`", "a = 1\nc = 3\n")
    model, rng, cpu = Writes("x = 10\ny = 20\nz = 30\n"), random.Random(0), torch.device("cpu")
    inputs, targets, share = tz.resync_batch(model, tok, [two, gone], 16, special, cpu, rng)
    assert inputs.shape[0] == 1 and share == 1.0
    first = int((targets[0] != -100).nonzero()[0])
    assert tok.decode(targets[0][targets[0] != -100]) == "b = 2\nc = 3\n" + tz.EOT
    assert tok.decode(inputs[0, : first + 1]).endswith("a = 1\nx = 10\ny = 20\n")
    few = Writes("x = 10 y = 20\n")  # one line end where the place has two
    assert tz.resync_batch(few, tok, [two], 16, special, cpu, rng) == (None, None, 0.0)
    with pytest.raises(ValueError, match="repair_mode"):
        tz.TargetConfig(repair_mode="all")
    with pytest.raises(ValueError, match="resync_weight"):
        tz.TargetConfig(resync_weight=-1.0)
    with pytest.raises(ValueError, match="repair_copy_share"):
        tz.TargetConfig(repair_copy_share=1.5)
    # a kept line as the place (copy_share 1): the model's line where "b = 2" was copied, then the answer after it
    inputs, targets, _ = tz.resync_batch(Writes("wrong = 0\n"), tok, [gone], 16, special, cpu, random.Random(3),
                                         copy_share=1.0)
    first = int((targets[0] != -100).nonzero()[0])
    context, answer = tok.decode(inputs[0, : first + 1]), tok.decode(targets[0][targets[0] != -100])
    # in place of "a = 1" the answer goes on with "c = 3"; in place of "c = 3", after "a = 1", it ends
    assert (context.endswith("\nwrong = 0\n") and answer == "c = 3\n" + tz.EOT
            or context.endswith("a = 1\nwrong = 0\n") and answer == tz.EOT), (context[-40:], answer)


@pytest.mark.parametrize("output, want", [
    (list(range(30)) + list(range(40, 100)), (30, 30, 50, False)),   # skips a stretch
    (list(range(70)) + list(range(60, 100)), (70, 70, 100, True)),   # copies a stretch again
    (list(range(30)), (30, 30, 50, False)),                          # ends early
    (list(range(30)) + [500, 501] + list(range(32, 100)), (30, 30, 50, False)),  # rewrites a stretch
    (list(range(48)) + [7, 7] + list(range(48, 100)), None),  # departs within the margin of the change at 50
    (list(range(5)) + [7] + list(range(6, 100)), None),   # after a copied run shorter than min_run
    (list(range(50)) + [999] + list(range(51, 100)), None),  # the reference itself
])
def test_drift_point_finds_where_the_output_leaves_the_copy_away_from_the_changes(output, want):
    before = list(range(100))
    answer = before[:50] + [999] + before[51:]  # the reference replaces token 50
    assert tz.drift_point(before, answer, output) == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60), st.lists(st.integers(0, 3), max_size=60),
       st.lists(st.integers(0, 3), max_size=60), st.integers(1, 6), st.integers(1, 6))
def test_drift_point_is_a_departure_after_a_copied_run_inside_a_reference_copy(before, answer, output, margin,
                                                                                 min_run):
    """Where it says the output leaves the copy, the output's last ``min_run`` tokens copy the input's before that
    place, the output's next token is not the input's, and the reference copies at least ``margin`` tokens on both
    sides of the place, up to the run end it gives (difflib's blocks), which ends the reference where it says so;
    the reference itself never leaves the copy where it copies."""
    point = tz.drift_point(before, answer, output, margin, min_run)
    assert tz.drift_point(before, answer, answer, margin, min_run) is None
    if point is None:
        return
    i, j, stop, last = point
    assert j >= min_run and output[j - min_run: j] == before[i - min_run: i] and i < len(before)
    assert j == len(output) or output[j] != before[i]
    blocks = difflib.SequenceMatcher(None, before, answer, autojunk=False).get_matching_blocks()
    run = [b for b in blocks if b.a + margin <= i < b.a + b.size - margin]
    assert len(run) == 1 and stop == run[0].a + run[0].size and last == (run[0].b + run[0].size == len(answer))


@pytest.mark.parametrize("output, want", [
    (list(range(100)), (50, 50)),                             # copies the input through the change
    (list(range(30)) + list(range(40, 100)), (40, 50)),       # ... after skipping a stretch
    (list(range(50)) + [999] + list(range(51, 100)), None),   # the reference itself
    (list(range(50)) + [7, 7] + list(range(51, 100)), None),  # changes the place, in its own words
    (list(range(45)), None),                                  # stops before the change
    (list(range(55)) + [777] * 5, None),                      # copies fewer than the margin's tokens past it
])
def test_skip_point_finds_where_the_output_copies_through_a_change(output, want):
    before = list(range(100))
    answer = before[:50] + [999] + before[51:]  # the reference replaces token 50
    assert tz.skip_point(before, answer, output) == want


def test_skip_point_is_the_first_change_the_output_omits():
    before = list(range(100))
    answer = before[:20] + [900] + before[20:60] + [901] + before[61:]  # inserts at 20, replaces 60
    assert tz.skip_point(before, answer, answer[:21] + before[20:]) == (61, 61)  # makes the first only
    assert tz.skip_point(before, answer, before) == (20, 20)
    assert tz.skip_point(before, answer, before[:20] + [5] + before[20:]) == (61, 61)  # the first in its own words


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60), st.lists(st.integers(0, 3), max_size=60),
       st.lists(st.integers(0, 3), max_size=60), st.integers(1, 6))
def test_skip_point_is_a_copy_through_the_end_of_a_reference_run(before, answer, output, margin):
    """Where it says the output omits a change, the reference's copied run (difflib's blocks) ends there, short of
    ending both sequences, and the output copies the input's ``margin`` tokens on each side of that place; the
    reference itself omits none."""
    assert tz.skip_point(before, answer, answer, margin) is None
    point = tz.skip_point(before, answer, output, margin)
    if point is None:
        return
    j, aj = point
    ends = [b.a + b.size for b in difflib.SequenceMatcher(None, before, answer, autojunk=False).get_matching_blocks()
            if b.size and b.b + b.size == aj and (b.a + b.size, aj) != (len(before), len(answer))]
    assert len(ends) == 1
    i = ends[0]
    assert i >= margin and output[j - margin: j + margin] == before[i - margin: i + margin]


def test_decision_batch_teaches_the_input_after_the_models_own_answer_where_it_leaves_the_copy():
    """A model whose answer copies the input's first lines and then stops: the row is the prompt, its answer, then
    the input's next tokens as targets; an answer that is the reference gives no row."""
    from transformers import AutoTokenizer

    import hybridsd as hsd

    tok = AutoTokenizer.from_pretrained(hsd.zoo.path(), local_files_only=True)
    special = tz.special_ids(tok)

    class Writes(torch.nn.Module):
        def __init__(self, text):
            super().__init__()
            self.ids = tok.encode(text, add_special_tokens=False) + [special["eot"]]

        def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
            assert kw["do_sample"] is False and special["eot"] in kw["eos_token_id"]
            own = torch.tensor((self.ids + [special["pad"]] * max_new_tokens)[:max_new_tokens])
            return torch.cat([input_ids, own.expand(input_ids.shape[0], -1)], dim=1)

    lines = [f"value_{n} = compute({n}, {n * n})\n" for n in range(24)]
    before = "".join(lines)
    after = "".join(lines[:2] + ["changed = True\n"] + lines[3:20] + ["also = False\n"] + lines[21:])
    triple = (before, "replace line 3", after)
    cpu = torch.device("cpu")
    inputs, targets, share = tz.decision_batch(Writes("".join(lines[:12])), tok, [triple], special, cpu, supervised=8)
    assert inputs.shape[0] == 1 and share == 1.0
    first = int((targets[0] != -100).nonzero()[0])
    want = tok.encode("".join(lines[12:]), add_special_tokens=False)[:8]
    assert targets[0][targets[0] != -100].tolist() == want
    assert tok.decode(inputs[0, : first + 1]).endswith("".join(lines[:12]))
    # up to the reference's next change only (its copied run's end, within the token before line 20's change)
    _, targets, _ = tz.decision_batch(Writes("".join(lines[:12])), tok, [triple], special, cpu, supervised=400)
    taught = tok.decode(targets[0][targets[0] != -100])
    assert "".join(lines[12:20]).startswith(taught) and len(taught) > len("".join(lines[12:19]))
    # at the reference's last run the end of turn is taught after it
    _, targets, _ = tz.decision_batch(Writes("".join(lines[:22])), tok, [triple], special, cpu, supervised=400)
    taught = targets[0][targets[0] != -100].tolist()
    assert taught == tok.encode("".join(lines[22:]), add_special_tokens=False) + [special["eot"]]
    assert tz.decision_batch(Writes(after), tok, [triple], special, cpu) == (None, None, 0.0)
    # an answer that copies the input through the first change: skip teaches the reference's change there, and
    # decisions the earlier of that and its early end
    ref = tok.encode(after, add_special_tokens=False)
    first_change = next(k for k, (x, y) in enumerate(zip(tok.encode(before, add_special_tokens=False), ref)) if x != y)
    for kinds in (("skip",), ("drift", "skip")):
        inputs, targets, share = tz.decision_batch(Writes("".join(lines[:12])), tok, [triple], special, cpu, kinds,
                                                   supervised=400)
        first = int((targets[0] != -100).nonzero()[0])
        assert share == 1.0 and targets[0][targets[0] != -100].tolist() == ref[first_change:] + [special["eot"]]
        assert tok.decode(inputs[0, : first + 1]).endswith("".join(lines[:2]))
    made_first = "".join(lines[:2] + ["changed = True\n"] + lines[3:12])  # makes the first change, then stops
    assert tz.decision_batch(Writes(made_first), tok, [triple], special, cpu, ("skip",)) == (None, None, 0.0)
    _, targets, _ = tz.decision_batch(Writes(made_first), tok, [triple], special, cpu, ("drift", "skip"), 8)
    assert targets[0][targets[0] != -100].tolist() == tok.encode("".join(lines[12:]), add_special_tokens=False)[:8]
    assert tz.decision_batch(Writes(after), tok, [triple], special, cpu, ("drift", "skip")) == (None, None, 0.0)
    for kinds in ((), ("drift", "loops")):
        with pytest.raises(ValueError, match="kinds"):
            tz.decision_batch(Writes(after), tok, [triple], special, cpu, kinds)


@pytest.mark.parametrize("mode", tz.REPAIR_MODES)
def test_repair_mode_picks_the_terms_of_every_step(mode, monkeypatch):
    """Every repair step adds to the edit-tuning loss the terms its mode names: the repeats' unlikelihood (weight
    ``repair_weight``) for loops and both, the answer after the model's own lines (weight ``resync_weight``) for
    resync and both, the input after the model's own answer where it leaves the copy (the same weight) for drift,
    the reference's change where it copies through it for skip, the first of the two for decisions;
    each term's share is logged."""
    from dataclasses import replace

    from transformers import AutoTokenizer

    import hybridsd as hsd

    tok = AutoTokenizer.from_pretrained(hsd.zoo.path(), local_files_only=True)
    special = tz.special_ids(tok)
    before = "a = 1\nb = 2\nc = 3\n"
    triples = [(before, "add a line after `a = 1`", "a = 1\nnew()\nb = 2\nc = 3\n"),
               (before, "change `b = 2`", "a = 1\nb = 5\nc = 3\n")]
    examples = zd.sft_examples(tok, triples, special["eot"])
    seq = torch.tensor([[5, 6, 7, 8]])
    labels = torch.tensor([[-100, 7, 8, -100]])
    halves = []  # the half-precision switch of each generation and training step: off with repair_fp32
    kinds = []  # the decision kinds each whole-answer step asked for
    monkeypatch.setattr(tz, "resync_batch", lambda *a, **k: halves.append(k["half"]) or (seq, labels, 0.25))
    monkeypatch.setattr(tz, "loop_batch", lambda *a, **k: halves.append(k["half"]) or (seq, labels, 0.5))
    monkeypatch.setattr(tz, "decision_batch", lambda *a, **k: halves.append(k["half"]) or kinds.append(a[5]) or (
        seq, labels, 0.75))
    autocast = tz.bf16
    monkeypatch.setattr(tz, "bf16", lambda device, on=True: halves.append(on) or autocast(device, on))
    calls = []
    masked, unlikely = tz.masked_loss, tz.unlikelihood_loss
    monkeypatch.setattr(tz, "masked_loss", lambda m, x, *a, **k: calls.append(("masked", x.shape[0])) or
                        masked(m, x, *a, **k))
    monkeypatch.setattr(tz, "unlikelihood_loss", lambda *a: calls.append(("unlikely", 1)) or unlikely(*a))
    cfg = replace(tz.TargetConfig(**tz.SMOKE), repair_mode=mode, repair_steps=2, repair_batch=2,
                  repair_new_tokens=8, repair_time_s=60.0, sft_batch_tokens=4096, repair_fp32=mode == "both")
    model = tz.build_model(cfg, len(tok), special)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.repair_lr)
    log = []
    out = tz.loop_repair(model, opt, examples, cfg, special, torch.device("cpu"), log, tokenizer=tok,
                         triples=triples)
    resync, loops, answers = mode in ("resync", "both"), mode in ("loops", "both"), mode in tz.ANSWER_MODES
    per_step = [("masked", calls[0][1])] + [("masked", 1)] * (resync or answers) + [("unlikely", 1)] * loops
    assert out["steps"] == 2 and len(calls) == 2 * len(per_step) and [c[0] for c in calls[: len(per_step)]] == [
        c[0] for c in per_step]
    assert ("resync_share" in log[0]) == resync and ("repeated_share" in log[0]) == loops
    assert all((f"{m}_share" in log[0]) == (m == mode) for m in tz.ANSWER_MODES)
    assert (out.get("resync_share_last"), out.get("repeated_share_last")) == (
        [0.25, 0.25] if resync else None, [0.5, 0.5] if loops else None)
    assert all(out.get(f"{m}_share_last") == ([0.75, 0.75] if m == mode else None) for m in tz.ANSWER_MODES)
    assert kinds == [tz.ANSWER_MODES[mode]] * 2 if answers else not kinds
    assert len(halves) == 2 * (resync + loops + answers + 1) and set(halves) == {not cfg.repair_fp32}


def test_unlikelihood_loss_is_the_mean_over_avoided_positions():
    torch.manual_seed(1)
    model = tz.build_model(tz.TargetConfig(**tz.SMOKE), 32, {"bos": 0, "eos": 1, "pad": 2, "eot": 3})
    x = torch.randint(4, 32, (2, 9))
    avoid = torch.full_like(x, -100)
    avoid[0, 2], avoid[1, 6] = 7, 12
    p = torch.softmax(model(x).logits.float(), -1)
    want = -(torch.log(1 - p[0, 2, 7]) + torch.log(1 - p[1, 6, 12])) / 2
    assert torch.allclose(tz.unlikelihood_loss(model, x, avoid), want, atol=1e-6)


def test_repair_options(capsys):
    cfg = tz.repair_config(_options(["repair", "--init", "m", "--out", "o", "--repair-weight", "0.3",
                                     "--repair-steps", "23", "--repair-batch", "6", "--repair-new-tokens", "96"]))
    assert (cfg.repair_weight, cfg.repair_steps, cfg.repair_batch, cfg.repair_new_tokens) == (0.3, 23, 6, 96)
    assert cfg.sft_batch_tokens == tz.REPAIR_DEFAULTS["sft_batch_tokens"] and cfg.repair_lr == 1e-4
    assert set(tz.REPAIR_OPTIONS) <= set(tz.TargetConfig.__dataclass_fields__)
    with pytest.raises(SystemExit) as e:
        _options(["repair", "--init", "m", "--out", "o", "--repair-steps", "-1"])
    assert e.value.code == 2 and "repair_steps" in capsys.readouterr().err
    smoke = tz.repair_config(_options(["repair", "--init", "m", "--out", "o", "--smoke", "--repair-steps", "2"]))
    assert smoke.repair_steps == 2 and smoke.gate_prompts == tz.SMOKE_REPAIR["gate_prompts"]
    assert smoke.repair_mode == "loops"
    resync = tz.repair_config(_options(["repair", "--init", "m", "--out", "o", "--repair-mode", "resync"]))
    assert resync.repair_mode == "resync"
    both = tz.repair_config(_options(["repair", "--init", "m", "--out", "o", "--repair-mode", "both",
                                      "--resync-weight", "0.5"]))
    assert (both.repair_mode, both.resync_weight) == ("both", 0.5)
    gated = tz.repair_config(_options(["repair", "--init", "m", "--out", "o", "--gate-prompts", "48"]))
    assert gated.gate_prompts == 48  # the selection's gates and the final one
    assert tz.repair_config(_options(["repair", "--init", "m", "--out", "o"])).gate_prompts == 64  # the default
    assert tz.target_config(tz.parse_args(["target"])).gate_prompts == 32
    for cmd in (["repair", "--init", "m", "--out", "o"], ["target"]):  # a bad value: one line, exit 2, no work
        with pytest.raises(SystemExit) as e:
            tz.parse_args(cmd + ["--gate-prompts" if cmd[0] == "repair" else "--repair-batch", "0"])
        assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        _options(["repair", "--init", "m", "--out", "o", "--repair-mode", "all"])
    assert e.value.code == 2
    # the target command takes every repair option too (its optional repair stage)
    assert set(tz.REPAIR_HELP) <= set(tz.CONFIG_OPTIONS)
    target = tz.target_config(tz.parse_args(["target", "--repair-mode", "resync", "--repair-copy-share", "0.5"]))
    assert (target.repair_mode, target.repair_copy_share) == ("resync", 0.5)
    early = tz.repair_config(_options(["repair", "--init", "m", "--out", "o", "--repair-early-stop", "32"]))
    assert early.repair_early_stop == 32 and tz.repair_config(_options(
        ["repair", "--init", "m", "--out", "o"])).repair_early_stop == 0
    with pytest.raises(SystemExit) as e:
        _options(["repair", "--init", "m", "--out", "o", "--repair-early-stop", "-1"])
    assert e.value.code == 2 and "repair_early_stop" in capsys.readouterr().err


def test_gate_every_must_not_be_negative(capsys):
    with pytest.raises(SystemExit) as e:
        _options(["repair", "--init", "m", "--out", "o", "--gate-every", "-1"])
    assert e.value.code == 2 and "--gate-every" in capsys.readouterr().err


def test_repair_smoke_writes_a_changed_gated_target(tmp_path, monkeypatch):
    """``train_zoo repair --smoke --gate-every 1`` on the zoo target: the weights of the better gated step (the
    initial ones or the one repair step's, which change them) are written, and the folder loads, with its record (the
    final gate on held-out prompts only; the run_info taken as the repair started) beside it."""
    import json

    from safetensors.torch import load_file

    import hybridsd as hsd

    init = hsd.zoo.path()
    if not any(p.exists() for p in edit_corpus.EDITS_CANDIDATES) or \
            not (init / "model.safetensors.index.json").is_file():
        pytest.skip("code_edits_dev.jsonl or the zoo weights not available")
    monkeypatch.setattr(tz, "run_info", lambda *a: {"weights_saved": any(tmp_path.glob("*.safetensors"))})
    tz.main(["repair", "--init", str(init), "--out", str(tmp_path), "--smoke", "--gate-every", "1"])
    record = json.loads((tmp_path / "repair_config.json").read_text())
    assert record["smoke"] and record["repair"]["steps"] == 1 and record["quality_gate"]["n"] == 2
    assert record["run_info"] == {"weights_saved": False}  # taken before the repair's work, not as it was written
    selection = record["selection"]  # the initial weights and the one step's, gated on training edits
    assert [g["step"] for g in selection["gates"]] == [0, 1] and selection["chosen_step"] in (0, 1)
    held_out = set(json.loads((init / "eval_split.json").read_text())["ids"])
    samples = json.loads((tmp_path / "repair_log.json").read_text())["quality_gate_samples"]
    assert {s["id"] for s in samples} <= held_out
    name = "model-00001-of-00003.safetensors"
    before, after = load_file(init / name), load_file(tmp_path / name)
    changed = any(not torch.equal(before[k], after[k]) for k in before)
    assert before.keys() == after.keys() and changed == (selection["chosen_step"] == 1)
    from transformers import AutoModelForCausalLM

    count = lambda folder: sum(  # noqa: E731
        p.numel() for p in AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).parameters())
    assert count(tmp_path) == count(init)


def test_validation_split_is_held_out_of_training_and_apart_from_the_evaluation_split():
    from experiments.edit_corpus import EVAL_REPOS, VALIDATION_REPOS, split_edits, split_validation

    rows = [{"id": str(i), "repo": repo} for i, repo in enumerate(["a/b", *VALIDATION_REPOS, *EVAL_REPOS] * 3)]
    train, held = split_edits(rows)
    rest, val = split_validation(train)
    assert {r["repo"] for r in val} == set(VALIDATION_REPOS) and not {r["repo"] for r in rest} & set(VALIDATION_REPOS)
    assert len(rest) + len(val) + len(held) == len(rows) and not {r["id"] for r in val} & {r["id"] for r in held}
    assert tz.TargetConfig().validation_repos == VALIDATION_REPOS
    assert tz.TargetConfig(validation_repos=["x/y"]).validation_repos == ("x/y",)  # as a JSON record holds it
    with pytest.raises(ValueError, match="validation_repos"):
        tz.TargetConfig(validation_repos=(EVAL_REPOS[0],))


@pytest.mark.parametrize("argv,message", [(["--model", "/nonexistent/tc"], "--model"),
                                          (["--prompts", "0"], "--prompts")])
def test_gate_command_names_bad_input(argv, message, capsys):
    import hybridsd as hsd

    args = ["gate", "--model", str(hsd.zoo.path()), "--out", "/tmp/g.json"]
    with pytest.raises(SystemExit) as e:
        tz.parse_args(args + argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize("argv, flag", [
    (["--time-s", "-1"], "--time-s"), (["--time-s", "0"], "--time-s"), (["--time-s", "nan"], "--time-s"),
    (["--time-s", "inf"], "--time-s"), (["--out", "{file}/g.json"], "--out"), (["--out", "{tmp}"], "--out"),
    (["--model", "{untokenized}"], "--model")])
def test_gate_command_checks_its_time_output_and_model_before_any_work(argv, flag, tmp_path, capsys):
    """``gate``: a time limit that is not a finite number > 0 (0 starts no prompt), an output under a file or that is
    a folder, and a model folder without a tokenizer are one line and exit 2 as the options are parsed."""
    model, untokenized = _model_folder(tmp_path / "model"), _model_folder(tmp_path / "untokenized", tokenizer=False)
    (tmp_path / "file").write_text("")
    given = {"--model": str(model), "--out": str(tmp_path / "g.json")}
    assert tz.parse_args(["gate", *itertools.chain(*given.items())]).time_s == 3600.0
    given.update(zip(argv[::2], (a.format(file=tmp_path / "file", tmp=tmp_path, untokenized=untokenized)
                                 for a in argv[1::2])))
    _refused(capsys, ["gate", *itertools.chain(*given.items())], flag)


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_compare_gates_names_a_damaged_gzipped_record(damage, tmp_path, capsys):
    """``compare-gates`` with a ``.json.gz`` record cut short or with a flipped byte: one line naming the record."""
    import gzip
    import json

    raw = gzip.compress(json.dumps({"quality_gate": {"samples": [
        {"id": str(i), "ref_norm": i / 10, "out_norm": i / 9, "stopped": True} for i in range(40)]}}).encode())
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    a.write_bytes(raw)
    b.write_bytes(raw[: len(raw) // 2] if damage == "truncated" else raw[:20] + bytes([raw[20] ^ 0xFF]) + raw[21:])
    _refused(capsys, ["compare-gates", str(a), str(b)], str(b))


def test_compare_gates_names_the_record_it_cannot_read(tmp_path, capsys):
    """A record that is not JSON, or missing, beside a good one: one line naming that record alone."""
    import json

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"quality_gate": {"samples": []}}))
    bad.write_text("not json")
    missing = tmp_path / "none.json"
    for argv, named in (([good, bad], bad), ([bad, good], bad), ([good, missing], missing)):
        assert str(good) not in _refused(capsys, ["compare-gates", *map(str, argv)], f"compare-gates {named}: ")


@pytest.mark.parametrize("argv, said", [
    (["--seed", "-1"], "seed"), (["--seed", str(2 ** 32)], "seed"), (["--sft-lr", "-1"], "sft_lr"),
    (["--sft-lr", "nan"], "sft_lr"), (["--repair-lr", "0"], "repair_lr"), (["--sft-time-s", "-5"], "sft_time_s"),
    (["--pretrain-time-s", "nan"], "pretrain_time_s"), (["--deadline-s", "inf"], "deadline_s"),
    (["--repair-time-s", "nan"], "repair_time_s"), (["--repair-weight", "-1"], "repair_weight"),
    (["--synthetic-examples", "-1"], "synthetic_examples"), (["--real-epochs", "-1"], "real_epochs"),
    (["--pretrain-chars", "-1"], "pretrain_chars"), (["--sft-max-len", "0"], "sft_max_len"),
    (["--out", "{file}"], "--out"), (["--data-cache", "{file}"], "--data-cache"),
    (["--tokenizer", "/nonexistent/tok"], "--tokenizer"), (["--tokenizer", "{untokenized}"], "--tokenizer"),
    (["--init", "/nonexistent/tc"], "--init"), (["--init", "{untokenized}"], "--init")])
def test_target_checks_its_values_and_paths_before_any_work(argv, said, tmp_path, capsys):
    """``target``: a seed numpy does not take, learning rates not > 0, time budgets and weights not >= 0 (or not
    finite), sizes below their least, an output or data cache that is a file, a folder without a tokenizer as
    ``--tokenizer``, and an ``--init`` that is no model folder (with its tokenizer unless ``--tokenizer`` gives one)
    are one line and exit 2, nothing written (not even ``--out``)."""
    model, untokenized = _model_folder(tmp_path / "model"), _model_folder(tmp_path / "untokenized", tokenizer=False)
    (tmp_path / "file").write_text("")
    out = ["--out", str(tmp_path / "out")]
    assert tz.parse_args(["target", *out, "--init", str(untokenized), "--tokenizer", str(model), "--seed",
                          str(2 ** 32 - 1), "--sft-time-s", "0", "--synthetic-examples", "0"]).init == untokenized
    _refused(capsys, ["target", *out, *(a.format(file=tmp_path / "file", untokenized=untokenized) for a in argv)],
             said)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, said", [
    (["--init", "/nonexistent/tc"], "--init"), (["--init", "{untokenized}"], "--init"), (["--out", "{file}"], "--out"),
    (["--synthetic-sources", "0"], "--synthetic-sources"), (["--max-example-tokens", "0"], "--max-example-tokens"),
    (["--max-before-chars", "-1"], "--max-before-chars"), (["--real-rows", "-1"], "--real-rows"),
    (["--synthetic-edits", "-1"], "--synthetic-edits"), (["--real-rows", "0", "--synthetic-edits", "0"], "not both 0"),
    (["--seed", "-1"], "seed"), (["--repair-lr", "-1"], "repair_lr")])
def test_repair_checks_its_sizes_and_paths_before_any_work(argv, said, tmp_path, capsys):
    """``repair``: an ``--init`` that is no model folder with a tokenizer, an ``--out`` that is a file, repair-set
    sizes below 1 (the real rows and the synthetic edits: below 0, or both 0) and bad config values are one line and
    exit 2, before any data is read."""
    model, untokenized = _model_folder(tmp_path / "model"), _model_folder(tmp_path / "untokenized", tokenizer=False)
    (tmp_path / "file").write_text("")
    given = {"--init": str(model), "--out": str(tmp_path / "out")}
    assert tz.parse_args(["repair", *itertools.chain(*given.items()), "--real-rows", "0"]).real_rows == 0
    extra = [a.format(file=tmp_path / "file", untokenized=untokenized) for a in argv]
    _refused(capsys, ["repair", *itertools.chain(*given.items()), *extra], said)


def test_recorded_configs_pass_the_config_checks():
    """Every recorded ``config`` of a target or repair call (experiments/results, the installed target's records)
    makes a :class:`TargetConfig` (its fields of then)."""
    import gzip
    import json

    fields = set(tz.TargetConfig.__dataclass_fields__)
    records = [p for root in (tz.REPO / "experiments" / "results", tz.MODEL_DIR) for p in root.rglob("*config*.json*")
               if "training_config" in p.name or "repair_config" in p.name]
    assert len(records) >= 50
    for p in records:
        raw = p.read_bytes()
        config = json.loads(gzip.decompress(raw) if p.name.endswith(".gz") else raw)["config"]
        tz.TargetConfig(**{k: v for k, v in config.items() if k in fields})


def test_gate_command_writes_its_record(tmp_path):
    """``train_zoo gate`` on the zoo target, two validation prompts: the record names its rows, model and command,
    with the gate's shares and every sample."""
    import json

    import hybridsd as hsd

    pytest.importorskip("rapidfuzz")
    if not any(p.exists() for p in edit_corpus.EDITS_CANDIDATES):
        pytest.skip("code_edits_dev.jsonl not available")
    out = tmp_path / "gate.json"
    tz.main(["gate", "--model", str(hsd.zoo.path()), "--rows", "validation", "--prompts", "2", "--out",
             str(out)])
    record = json.loads(out.read_text())
    gate = record["quality_gate"]
    assert record["rows"] == "validation" and record["repos"] == ["pallets/click"]
    assert "gate --model" in record["command"]
    assert gate["n"] == 2 and len(gate["samples"]) == 2 and 0 <= gate["length_share"] <= 1
    assert all(s["ref_tokens"] > 0 and isinstance(s["length_ok"], bool) for s in gate["samples"])


def test_target_smoke_without_gate_writes_a_loadable_target(tmp_path):
    """``train_zoo target --smoke --no-gate`` from scratch (tiny model, data and budgets): pretraining and edit
    tuning run, the model folder loads, and its record says the gate was skipped (a stage of a lineage)."""
    import json

    from transformers import AutoModelForCausalLM

    if not any(p.exists() for p in edit_corpus.EDITS_CANDIDATES):
        pytest.skip("code_edits_dev.jsonl not available")
    records = []
    for run, shape in (("first", []), ("second", ["--num-heads", "4", "--num-kv-heads", "2"])):
        out = tmp_path / run  # the second run, of another shape, loads the first's prepared data
        tz.main(["target", "--smoke", "--no-gate", "--pretrain-time-s", "4", "--sft-time-s", "4", "--out", str(out),
                 "--data-cache", str(tmp_path / "cache"), *shape])
        records.append(json.loads((out / "training_config.json").read_text()))
    record = records[0]
    assert record["quality_gate"] == {"skipped": "--no-gate"} and record["smoke"]
    assert record["pretrain"]["steps"] >= 1 and record["sft"]["steps"] >= 1
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "first", local_files_only=True)
    assert sum(p.numel() for p in model.parameters()) == record["parameters"]
    shaped = AutoModelForCausalLM.from_pretrained(tmp_path / "second", local_files_only=True).config
    smoke = tz.SMOKE
    assert (shaped.num_attention_heads, shaped.num_key_value_heads, shaped.head_dim) == \
        (4, 2, smoke["hidden_size"] // 4) and (records[1]["config"]["num_heads"], model.config.num_attention_heads) \
        == (4, smoke["num_heads"])
    (cached,) = (tmp_path / "cache").glob("edit_data_*.pkl")
    first, second = (dict(r["data"]) for r in records)
    assert first.pop("data_cache") == f"written {cached.name}"
    assert second.pop("data_cache") == f"hit {cached.name} ({first['synthetic_examples']} synthetic edits)"
    first.pop("reading_s"), second.pop("reading_s")
    assert first == second and first["sft_tokens"] > 0


def test_edit_data_cache_is_keyed_by_what_makes_the_data_and_serves_fewer_synthetic_edits(tmp_path):
    """The key changes with an edit setting, the rows, the tokenizer's files and the synthetic edits' sources, not
    with a training setting or the number of synthetic edits; a cached build serves a call asking for fewer
    synthetic edits with its prefix (real examples first), one asking for more builds again."""
    import shutil

    tok = tmp_path / "tok"
    tok.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tz.MODEL_DIR / name, tok / name)
    rows = [{"id": "a", "before": "x = 1\n", "after": "x = 2\n"}]
    sources = ["def f():\n    return 1\n"]
    cfg = tz.TargetConfig(synthetic_examples=3)
    key = zd.edit_key(cfg, tok, rows, sources)
    assert zd.edit_key(tz.replace(cfg, sft_lr=1e-5, synthetic_examples=9), tok, rows, sources) == key
    changed = [zd.edit_key(tz.replace(cfg, span_share=0.25), tok, rows, sources),
               zd.edit_key(cfg, tok, rows + [{"id": "b", "before": "", "after": "y\n"}], sources),
               zd.edit_key(cfg, tok, rows, sources + ["x = 3\n"])]
    (tok / "chat_template.jinja").write_text("{{ messages }}")
    changed.append(zd.edit_key(cfg, tok, rows, sources))
    assert len({key, *changed}) == 5
    calls = []

    def build(n):
        def run():
            calls.append(n)
            return {"examples": [["real"]] * 2 + [[f"synthetic {i}"] for i in range(n)], "n_real": 2,
                    "synthetic": [(["k"], i / 10) for i in range(n)], "example_real_request": "r"}
        return run

    cache = tmp_path / "cache"
    first = zd.cached_edit_data(cache, tz.replace(cfg, synthetic_examples=3), key, build(3))
    fewer = zd.cached_edit_data(cache, tz.replace(cfg, synthetic_examples=2), key, build(2))
    assert calls == [3] and first["data_cache"].startswith("written") and fewer["data_cache"].startswith("hit")
    assert fewer["examples"] == [["real"], ["real"], ["synthetic 0"], ["synthetic 1"]]
    assert fewer["synthetic"] == [(["k"], 0.0), (["k"], 0.1)]
    more = zd.cached_edit_data(cache, tz.replace(cfg, synthetic_examples=5), key, build(5))
    assert calls == [3, 5] and len(more["examples"]) == 7 and more["data_cache"].startswith("written")
    assert len(zd.cached_edit_data(cache, cfg, key, build(3))["examples"]) == 5 and calls == [3, 5]
    assert zd.cached_edit_data(None, cfg, key, build(3))["data_cache"] is None and calls == [3, 5, 3]


def test_retrain_stages_pass_options_the_trainer_takes(tmp_path):
    """``retrain_zoo.sh`` (PRINT_ONLY) names every stage of the lineage in order, each with options that
    ``train_zoo.py target`` (stages 1-4, stage 1 from scratch) or ``repair`` (the repairs) parses, compiled target
    stages with the shared data cache; an unknown stage or a missing starting target (also a previous stage that did not
    run on this machine) is one line and exit 2."""
    import json
    import subprocess

    script = str(tz.REPO / "experiments" / "retrain_zoo.sh")
    env = {"PATH": "/usr/bin:/bin", "PRINT_ONLY": "1"}
    out = subprocess.run(["bash", script, "1,2,3,4,cpu-repair,5", str(tmp_path)], cwd=tz.REPO, env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert [line.split(":")[0] for line in out] == [f"stage {s}" for s in ("1", "2", "3", "4", "cpu-repair", "5")]
    configs = {}
    for line in out:
        stage, rest = line.split(": INIT=")
        init, options = rest.split(" OPTIONS=")
        if stage in ("stage 1", "stage 2", "stage 3", "stage 4"):
            init_arg = ["--init", "x"] if stage != "stage 1" else []
            argv = ["target", "--out", str(tmp_path), *init_arg, *options.split()]
            cfg = configs[stage] = tz.target_config(_options(argv))
            assert cfg.compile_layers and _options(argv).no_gate and _options(argv).data_cache
            assert (init == "") == (stage == "stage 1")
        else:  # the repair: on the CPU, or its steps on the GPU in fp32; the best of its validation gates kept
            assert ";" not in options
            args = _options(["repair", "--init", "x", "--out", "y"] + options.split())
            cfg = tz.repair_config(args)
            assert cfg.repair_steps > 0 and cfg.repair_fp32 == (stage == "stage 5")
            assert args.gate_every > 0 and args.gate_after == 0 and cfg.gate_prompts == 64
    # each target stage trains the installed lineage's steps (its records: the steps each phase took)
    installed = {s: json.loads((tz.MODEL_DIR / f"training_config{suffix}.json").read_text()) for s, suffix in
                 (("stage 1", "_from_scratch"), ("stage 2", "_edit_tuning"), ("stage 3", "_span_edits"),
                  ("stage 4", ""))}
    assert configs["stage 1"].pretrain_steps == installed["stage 1"]["pretrain"]["steps"]
    assert all(configs[s].sft_steps == installed[s]["sft"]["steps"] for s in installed)
    # stage 2 takes a prefix of stage 1's cached edit data, stage 4 stage 3's whole
    keys = {k: zd.edit_key(c, tz.MODEL_DIR, [{"id": "a"}], ["x = 1\n"]) for k, c in configs.items()}
    assert keys["stage 1"] == keys["stage 2"] != keys["stage 3"] == keys["stage 4"]
    assert configs["stage 2"].synthetic_examples <= configs["stage 1"].synthetic_examples
    # a later stage of a call gets a deadline that ends the call by CALL_S; the call's first keeps its own
    short = subprocess.run(["bash", script, "3,4", str(tmp_path), str(tz.MODEL_DIR)], cwd=tz.REPO,
                           env={**env, "CALL_S": "300"}, capture_output=True, text=True, check=True).stdout
    deadlines = [int(line.split("--deadline-s ")[1].split()[0]) for line in short.splitlines()]
    assert deadlines[0] == 505 and 300 <= deadlines[1] <= 330
    for argv, message in ((["9", str(tmp_path)], "unknown stage '9'"),
                          (["3", str(tmp_path), str(tmp_path / "none")], "needs the previous stage's target"),
                          (["2", str(tmp_path)], f"not found at '{tmp_path / 'work'}/zoo_stage1/tiny-coder'")):
        # a stage whose previous stage did not run on this machine (a fresh one) never starts from the installed zoo
        run = subprocess.run(["bash", script, *argv], cwd=tz.REPO, env={**env, "WORK_ROOT": str(tmp_path / "work")},
                             capture_output=True, text=True)
        assert run.returncode == 2 and message in run.stderr and len(run.stderr.splitlines()) == 1


def test_retrain_stages_after_the_base_repeat_the_installed_targets_calls(tmp_path):
    """Stages 6-8 of ``retrain_zoo.sh`` (PRINT_ONLY) take the options of the calls that made the installed target from
    its base, as recorded in zoo/margin_recipe_h200/seed0/: the decision tuning with the copy-margin hinge
    (stage6_training_config.json; there with a longer time limit, two draws sharing the GPU), the weak loop repair
    (stage7_repair_config.json) and the weight average (average_config.json, tiny-coder's); stage 8 without stage
    5's target is one line and exit 2."""
    import json
    import subprocess

    script = str(tz.REPO / "experiments" / "retrain_zoo.sh")
    env = {"PATH": "/usr/bin:/bin", "WORK_ROOT": str(tmp_path / "work")}
    out = subprocess.run(["bash", script, "6,7,8", str(tmp_path), str(tz.MODEL_DIR)], cwd=tz.REPO,
                         env={**env, "PRINT_ONLY": "1"}, capture_output=True, text=True, check=True).stdout.splitlines()
    options = {line.split(":")[0]: line.split(" OPTIONS=")[1].split() for line in out}
    assert list(options) == ["stage 6", "stage 7", "stage 8"]
    results = tz.REPO / "experiments" / "results" / "zoo" / "margin_recipe_h200" / "seed0"
    tuning = json.loads((results / "stage6_training_config.json").read_text())
    cfg = tz.target_config(_options(["target", "--out", str(tmp_path), "--init", "x", *options["stage 6"]]))
    for name in ("decision_weight", "sft_lr", "synthetic_examples", "pretrain_chars", "sft_max_len", "real_epochs",
                 "span_share", "unlikelihood_weight", "repeat_share", "compile_layers", "copy_margin_weight",
                 "copy_margin"):
        assert getattr(cfg, name) == tuning["config"][name], name
    assert cfg.sft_steps == tuning["sft"]["steps"] == 1862 and cfg.copy_margin_weight == 4
    weak = json.loads((results / "stage7_repair_config.json").read_text())
    args = _options(["repair", "--init", "x", "--out", "y", *options["stage 7"]])
    cfg = tz.repair_config(args)
    for name in ("repair_weight", "repair_steps", "repair_batch", "repair_new_tokens", "repair_lr", "repair_mode",
                 "decision_weight", "gate_prompts"):
        assert getattr(cfg, name) == weak["config"][name], name
    assert args.gate_every == weak["selection"]["every"] and args.gate_after == weak["selection"]["after"]
    average = json.loads((tz.MODEL_DIR / "average_config.json").read_text())
    assert average == json.loads((results / "average_config.json").read_text())
    assert options["stage 8"] == ["--weight", str(average["weight"])]
    run = subprocess.run(["bash", script, "8", str(tmp_path), str(tz.MODEL_DIR)], cwd=tz.REPO, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and "give its folder as BASE" in run.stderr


def test_retrain_shape_options_reach_stage_1_only_and_stage_8_heads_fit_the_shape(tmp_path):
    """``SHAPE_OPTIONS`` follows stage 1's options alone (the later stages start from its target and keep its shape);
    stage 8 starts the heads from the installed ones only for a target of the installed shape, and only where the
    installed folder has heads (not while it holds a stage's unpacked archive given as INIT)."""
    import json
    import shutil
    import subprocess

    script = tz.REPO / "experiments" / "retrain_zoo.sh"
    env = {"PATH": "/usr/bin:/bin", "WORK_ROOT": str(tmp_path / "work"), "PRINT_ONLY": "1"}
    lines = {}
    for shape in ("", "--num-layers 12 --intermediate-size 512"):
        out = subprocess.run(["bash", str(script), "1,2,3,4,5,6,7,8", str(tmp_path)], cwd=tz.REPO,
                             env={**env, "SHAPE_OPTIONS": shape}, capture_output=True, text=True, check=True)
        lines[shape] = {line.split(":")[0]: line.split(" OPTIONS=")[1].split() for line in out.stdout.splitlines()}
    plain, deep = lines[""], lines["--num-layers 12 --intermediate-size 512"]
    assert deep["stage 1"] == plain["stage 1"] + ["--num-layers", "12", "--intermediate-size", "512"]
    assert all(deep[s] == plain[s] for s in plain if s != "stage 1") and len(plain) == 8
    cfg = tz.target_config(tz.parse_args(["target", *deep["stage 1"]]))
    assert (cfg.num_layers, cfg.intermediate_size) == (12, 512)

    function = script.read_text().split("heads_fit() {")[1].split("\n}\n")[0]
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((tz.MODEL_DIR / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "intermediate_size": 512}))
    same = tmp_path / "same"
    same.mkdir()
    shutil.copy(tz.MODEL_DIR / "config.json", same / "config.json")
    headless = tmp_path / "headless"  # an installed folder holding a stage's archive: a target without heads
    headless.mkdir()
    shutil.copy(tz.MODEL_DIR / "config.json", headless / "config.json")
    for args, status in (((same,), 0), ((other,), 1), ((same, tz.MODEL_DIR), 0), ((same, headless), 1)):
        call = " ".join(map(str, args))
        run = subprocess.run(["bash", "-c", f"heads_fit() {{{function}\n}}\nheads_fit {call}"], cwd=tz.REPO,
                             capture_output=True, text=True)
        assert run.returncode == status, (args, run.stderr)


def test_retrain_target_options_reach_the_target_stages_only(tmp_path):
    """``TARGET_OPTIONS`` follows the options of stages 1-4 and 6 (so that it wins), and the recorded variant's stage
    6 (zoo/ambiguity_tuning_h200/) is the installed recipe's stage 6 with the ambiguity weight; stages 7 and 8 are
    unchanged."""
    import json
    import subprocess

    script = str(tz.REPO / "experiments" / "retrain_zoo.sh")
    env = {"PATH": "/usr/bin:/bin", "WORK_ROOT": str(tmp_path / "work"), "PRINT_ONLY": "1"}
    lines = {}
    for extra in ("", "--ambiguity-weight 4"):
        out = subprocess.run(["bash", script, "3,4,6,7,8", str(tmp_path), str(tz.MODEL_DIR)], cwd=tz.REPO,
                             env={**env, "TARGET_OPTIONS": extra}, capture_output=True, text=True, check=True)
        lines[extra] = {line.split(":")[0]: line.split(" OPTIONS=")[1].split() for line in out.stdout.splitlines()}
    plain, variant = lines[""], lines["--ambiguity-weight 4"]
    for stage in ("stage 3", "stage 4", "stage 6"):
        assert variant[stage] == plain[stage] + ["--ambiguity-weight", "4"]
    assert variant["stage 7"] == plain["stage 7"] and variant["stage 8"] == plain["stage 8"]
    recorded = json.loads((tz.REPO / "experiments" / "results" / "zoo" / "ambiguity_tuning_h200" /
                           "stage6_training_config.json").read_text())["config"]
    cfg = tz.target_config(_options(["target", "--out", str(tmp_path), "--init", "x", *variant["stage 6"]]))
    assert cfg.ambiguity_weight == recorded["ambiguity_weight"] == 4
    for name in ("decision_weight", "sft_steps", "sft_lr", "unlikelihood_weight"):
        assert getattr(cfg, name) == recorded[name], name


def _as_recorded(make, argv: list[str], recorded: dict) -> dict:
    """``make(parse_args(argv))`` as a JSON config, without the fields added after ``recorded`` was written, which
    must be at their defaults."""
    import json
    from dataclasses import asdict

    parsed = json.loads(json.dumps(asdict(make(_options(argv)))))
    default = asdict(tz.TargetConfig())
    assert all(parsed[k] == default[k] for k in parsed.keys() - recorded.keys())
    return {k: v for k, v in parsed.items() if k in recorded}


def _weight_average_shards() -> dict:
    """The weight-average target's shards (zoo/weight_average_h200/average_config.json): the installed target when
    the variants paired with it ran."""
    import json

    record = tz.REPO / "experiments" / "results" / "zoo" / "weight_average_h200" / "average_config.json"
    return json.loads(record.read_text())["shards"]


def _script_commands(script: str, marker: str) -> list[list[str]]:
    """The argument lists after ``marker`` of a shell script's commands that contain it (continued lines joined,
    stopping at the first redirection)."""
    import shlex

    m = marker.split()
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        if marker not in line:  # (only command lines are split: a heredoc's text need not be shell words)
            continue
        words = shlex.split(line, comments=True)
        if (i := next((i for i in range(len(words)) if words[i:i + len(m)] == m), None)) is not None:
            rest = words[i + len(m):]
            commands.append(rest[:next((j for j, w in enumerate(rest) if w.startswith(">")), len(rest))])
    return commands


def test_recorded_drift_repairs_are_the_recorded_command():
    """zoo/drift_repair_h200/: each variant's recorded repair config is what its call's command line parses to (the
    drift mode, its batch, steps, time, rate and weights), run at the call's commit, and the runs' gates are the
    recorded products' gates; the third call's configs are what its recorded script's command lines parse to, and its
    averages are of the weight-average target's shards and the repaired ones, at the script's weights."""
    import json

    from experiments import zoo_gate

    folder = tz.REPO / "experiments" / "results" / "zoo" / "drift_repair_h200"
    runs = json.loads((folder / "runs.json").read_text())
    options = {"lr1e-4": ["--repair-lr", "1e-4"], "lr3e-4": ["--repair-lr", "3e-4"],
               "lr1e-4_decision16": ["--repair-lr", "1e-4", "--decision-weight", "16", "--resync-weight", "1"],
               "lr1e-4_decision16_resync0.3": ["--repair-lr", "1e-4", "--decision-weight", "16",
                                               "--resync-weight", "0.3"]}
    rerun = "lr1e-4_decision16_resync0.3_9steps"
    averages = {f"{rerun}_avg0.75": 0.75, f"{rerun}_avg0.5": 0.5}
    assert sorted(v for call in runs["calls"] for v in call["variants"]) == sorted([*options, rerun, *averages])

    for call in runs["calls"]:
        for variant in call["variants"]:
            if variant in options:
                recorded = json.loads((folder / variant / "repair_config.json").read_text())
                argv = ["repair", "--init", "hybridsd/models/tiny-coder", "--out", "o", "--repair-mode", "drift",
                        "--repair-batch", "96", "--repair-steps", "16", "--repair-time-s", "270", *options[variant]]
                assert _as_recorded(tz.repair_config, argv, recorded["config"]) == recorded["config"]
                assert recorded["run_info"]["commit"] == call["commit"]
            for prompts in ("eval96", "val160"):
                q = zoo_gate.read_gate(folder / variant / f"gate_{prompts}_h200.json")["quality_gate"]
                assert runs["gates"][prompts][variant] == [round(q["eos_share"], 4),
                                                           round(q["spearman_ref_out"], 4), q["loops"]]
    script = (folder / rerun / "call.sh").read_text()
    drift, loops = (c for c in _script_commands(script, "-m experiments.train_zoo") if c[0] == "repair")
    assert drift[drift.index("--repair-steps") + 1] == "9" and drift[drift.index("--resync-weight") + 1] == "0.3"
    for argv, name in ((drift, "repair_config.json"), (loops, "loop_repair_config.json")):
        recorded = json.loads((folder / rerun / name).read_text())
        assert _as_recorded(tz.repair_config, argv, recorded["config"]) == recorded["config"]
        assert recorded["run_info"]["commit"] == runs["calls"][-1]["commit"]
    assert runs["repair"][rerun]["loop_repair"]["chosen_step"] == 0  # the loop repair kept the drift product
    installed = _weight_average_shards()  # the installed target when these ran
    weights = [float(a[a.index("--weight") + 1]) for a in _script_commands(script, "-m experiments.weight_average")]
    assert sorted(weights) == sorted(averages.values())
    repaired = set()
    for variant, weight in averages.items():
        avg = json.loads((folder / variant / "average_config.json").read_text())
        assert avg["weight"] == weight and avg["a"]["shards"] == installed
        repaired.add(json.dumps(avg["b"]["shards"], sort_keys=True))
    assert len(repaired) == 1  # both averages are of the same repaired weights



def test_recorded_decision_repairs_are_the_recorded_script():
    """zoo/decision_repair_cpu/: the repairs' recorded configs are what call.sh's command lines parse to (at the
    recorded seed), the averages are of the weight-average target's shards and the repaired ones at the script's
    weights, the soup (call_soup.sh) of the weight-average target's and both draws' repaired shards at its weights,
    and runs.json's gates and comparisons are the gate records'."""
    import json

    from experiments import zoo_gate

    folder = tz.REPO / "experiments" / "results" / "zoo" / "decision_repair_cpu"
    runs = json.loads((folder / "runs.json").read_text())
    script = (folder / "call.sh").read_text()
    decisions, loops = (c for c in _script_commands(script, "-m experiments.train_zoo") if c[0] == "repair")
    installed = _weight_average_shards()  # the installed target when these ran
    weights = [float(a[a.index("--weight") + 1]) for a in _script_commands(script, "-m experiments.weight_average")]
    assert runs["draws"] and set(runs["gates"]["eval96"]) == set(runs["gates"]["val160"])
    gated = set(runs["gates"]["eval96"]) - {"installed"}
    for draw, seed in runs["draws"].items():
        assert draw in gated
        for argv, name in ((decisions, draw), (loops, f"{draw}_loops")):
            if name != draw and not (folder / name).is_dir():
                continue  # this draw's loop repair did not run
            recorded = json.loads((folder / name / "repair_config.json").read_text())
            argv = [str(seed) if a == "$SEED" else a for a in argv]
            assert _as_recorded(tz.repair_config, argv, recorded["config"]) == recorded["config"]
        assert json.loads((folder / draw / "repair_config.json").read_text())["config"]["repair_mode"] == "decisions"
        for suffix, weight in zip(("_loops_avg0.75", "_avg0.5"), weights, strict=True):  # call.sh's order
            if f"{draw}{suffix}" in gated:
                avg = json.loads((folder / f"{draw}{suffix}" / "average_config.json").read_text())
                assert avg["weight"] == weight and avg["a"]["shards"] == installed and avg["b"]["shards"] != installed
    soup = json.loads((folder / "decisions_soup" / "average_config.json").read_text())  # call_soup.sh's
    (argv,) = _script_commands((folder / "call_soup.sh").read_text(), "-m experiments.weight_average")
    draws = [json.loads((folder / f"{d}_avg0.5" / "average_config.json").read_text())["b"]["shards"]
             for d in ("decisions_seed0", "decisions_seed1")]  # each draw's repaired weights, as its average read
    assert soup["weights"] == [float(w) for w in argv[argv.index("--weights") + 1:][:3]] == [0.5, 0.25, 0.25]
    assert [m["shards"] for m in soup["models"]] == [installed, *draws]
    assert gated <= {f"{d}{s}" for d in runs["draws"] for s in ("", "_avg0.5", "_loops_avg0.75")} | {"decisions_soup"}
    for prompts in ("eval96", "val160"):
        base = zoo_gate.read_gate(folder / f"installed_gate_{prompts}_cpu.json")
        for variant, row in runs["gates"][prompts].items():
            gate = base if variant == "installed" else zoo_gate.read_gate(folder / variant / f"gate_{prompts}_cpu.json")
            q = gate["quality_gate"]
            assert row == [round(q["eos_share"], 4), round(q["spearman_ref_out"], 4), q["loops"]]
            assert "cpu" in gate["run_info"]["device"]
            if variant != "installed":
                c = zoo_gate.compare_gates(base, gate)
                assert runs["compare"][variant][prompts] == {
                    "spearman_b_minus_a": round(c["spearman_b_minus_a"], 4), "ci95": [round(v, 4) for v in c["ci95"]],
                    "share_not_above_0": round(c["share_not_above_0"], 4)}


def test_recorded_gpu_decision_repairs_are_the_recorded_script():
    """zoo/decision_repair_h200/: each draw's repair config is what call.sh's command line parses to at its seed, the
    averages' logs are the script's weight, and runs.json's gates, comparisons and misses are those of the gate
    records, paired with the weight-average target's GPU gates."""
    import json

    from experiments import zoo_gate

    folder = tz.REPO / "experiments" / "results" / "zoo" / "decision_repair_h200"
    runs = json.loads((folder / "runs.json").read_text())
    script = (folder / "call.sh").read_text()
    (repair,) = (c for c in _script_commands(script, "-m experiments.train_zoo") if c[0] == "repair")
    (average,) = _script_commands(script, "-m experiments.weight_average")
    installed = tz.REPO / "experiments" / "results" / "zoo" / "weight_average_h200"
    for draw, seed in runs["draws"].items():
        recorded = json.loads((folder / draw / "repair_config.json").read_text())
        argv = [w.replace("$s", str(seed)) for w in repair]
        assert _as_recorded(tz.repair_config, argv, recorded["config"]) == recorded["config"]
        assert recorded["config"]["repair_mode"] == "decisions" and recorded["config"]["repair_batch"] == 96
        assert recorded["repair"]["steps"] == runs["call"]["steps"][draw]
        weight = float(average[average.index("--weight") + 1])
        log = (folder / f"{draw}_avg0.5" / "average.log").read_text()
        assert f"weights [{1 - weight}, {weight}] of 2 models" in log
    for prompts in ("eval96", "val160"):
        base = zoo_gate.read_gate(installed / f"installed_gate_{prompts}_h200.json.gz")
        assert set(runs["gates"][prompts]) == {"installed", *runs["draws"], *(f"{d}_avg0.5" for d in runs["draws"])}
        for variant, row in runs["gates"][prompts].items():
            path = folder / variant / f"gate_{prompts}_h200.json"
            gate = base if variant == "installed" else zoo_gate.read_gate(path)
            q = gate["quality_gate"]
            assert row == [round(q["eos_share"], 4), round(q["spearman_ref_out"], 4), q["loops"]]
            assert gate["run_info"]["device"] == "NVIDIA H200"
            assert runs["misses"][variant][prompts]["rho"] == round(zoo_gate.misses(gate)["rho"], 4)
            if variant != "installed":
                c = zoo_gate.compare_gates(base, gate)
                assert runs["compare"][variant][prompts] == {
                    "spearman_b_minus_a": round(c["spearman_b_minus_a"], 4), "ci95": [round(v, 4) for v in c["ci95"]],
                    "share_not_above_0": round(c["share_not_above_0"], 4)}


def test_recorded_resync_repairs_are_the_recorded_script():
    """zoo/resync_repair_h200/: each variant's repair config is what call.sh's command line parses to with its kept-
    line share, at the call's commit; the runs' gates are the gate records', and its paired comparisons are
    compare-gates' against the weight-average target's records; call_loops_average.sh's resync, loop repair and average
    records are what its command lines parse to (the resync repair a rerun of copy0.5's), the average of the
    weight-average target's shards."""
    import json

    from experiments import zoo_gate

    folder = tz.REPO / "experiments" / "results" / "zoo" / "resync_repair_h200"
    runs = json.loads((folder / "runs.json").read_text())
    script = (folder / "call.sh").read_text()
    assert 'for v in "copy0 0" "copy0.5 0.5"; do set -- $v' in script
    (repair,) = _script_commands(script, "-m experiments.train_zoo repair")
    installed = tz.REPO / "experiments" / "results" / "zoo" / "weight_average_h200"
    for variant, share in (("copy0", "0"), ("copy0.5", "0.5")):
        argv = ["repair", *[w.replace("$2", share).replace("$1", variant) for w in repair]]
        recorded = json.loads((folder / variant / "repair_config.json").read_text())
        assert _as_recorded(tz.repair_config, argv, recorded["config"]) == recorded["config"]
        assert recorded["config"]["repair_mode"] == "resync" and recorded["repair"]["steps"] == 16
        assert recorded["run_info"]["commit"] == runs["calls"][0]["commit"]
        for prompts in ("eval96", "val160"):
            gate = zoo_gate.read_gate(folder / variant / f"gate_{prompts}_h200.json.gz")
            q = gate["quality_gate"]
            assert runs["gates"][prompts][variant] == [round(q["eos_share"], 4), round(q["spearman_ref_out"], 4),
                                                       q["loops"]]
            paired = zoo_gate.compare_gates(zoo_gate.read_gate(installed / f"installed_gate_{prompts}_h200.json.gz"),
                                            gate)
            want = runs["compare"][f"{variant} vs installed, {prompts}"]
            assert want == {"spearman_b_minus_a": round(paired["spearman_b_minus_a"], 4),
                            "ci95": [round(x, 4) for x in paired["ci95"]]}
    text = (folder / "call_loops_average.sh").read_text()
    resync, loops = _script_commands(text, "-m experiments.train_zoo repair")
    rerun = json.loads((folder / "copy0.5_loops" / "repair_config.json").read_text())
    assert _as_recorded(tz.repair_config, ["repair", *resync], rerun["config"]) == rerun["config"]
    assert rerun["config"] == json.loads((folder / "copy0.5" / "repair_config.json").read_text())["config"]
    repaired = json.loads((folder / "copy0.5_loops" / "loop_repair_config.json").read_text())
    assert _as_recorded(tz.repair_config, ["repair", *loops], repaired["config"]) == repaired["config"]
    assert {rerun["run_info"]["commit"], repaired["run_info"]["commit"]} == {runs["calls"][1]["commit"]}
    average = json.loads((folder / "copy0.5_loops_avg0.75" / "average_config.json").read_text())
    (argv,) = _script_commands(text, "-m experiments.weight_average")
    assert average["weight"] == float(argv[argv.index("--weight") + 1]) == 0.75
    assert average["a"]["shards"] == _weight_average_shards()  # the installed target when it ran
    for variant in ("copy0.5_loops", "copy0.5_loops_avg0.75"):
        for prompts in ("eval96", "val160"):
            q = zoo_gate.read_gate(folder / variant / f"gate_{prompts}_h200.json.gz")["quality_gate"]
            assert runs["gates"][prompts][variant] == [round(q["eos_share"], 4), round(q["spearman_ref_out"], 4),
                                                       q["loops"]]


@pytest.mark.parametrize("folder, variable, variants", [
    ("seed_soup_h200", "s", {"seed1": "1", "seed2": "2", "seed3": "3"}),
    ("rename_tuning_h200", "r", {"rename0.5": "0.5", "rename1.0": "1.0"}),
    ("margin_recipe_h200", "s", {"seed0": "0", "seed1": "1"}),
])
def test_recorded_draws_are_the_recorded_script(folder, variable, variants):
    """zoo/seed_soup_h200/, zoo/rename_tuning_h200/ and zoo/margin_recipe_h200/: each variant's stage-6 and stage-7
    configs are what the recorded script's command lines parse to with its seed or renamed share, at the calls'
    commit; its stage-8 average is of the base target (the installed target's first parent) at weight 0.75; the soup
    is the mean of the weight-average target and the draws' averages, at the script's weights; the runs' gates are the
    gate records', and (margin_recipe_h200) the paired comparisons those of the gates with the weight-average
    target's, and seed 0's product, average record and heads record the installed target's."""
    import json

    from experiments import zoo_gate

    root = tz.REPO / "experiments" / "results" / "zoo" / folder
    runs = json.loads((root / "runs.json").read_text())
    script = (root / "call.sh").read_text()
    commit = {c["commit"] for c in runs["calls"]}
    assert len(commit) == 1
    base = json.loads((tz.MODEL_DIR / "average_config.json").read_text())["a"]["shards"]
    assert sorted(base.values()) == sorted(runs["base_shards_sha256"])

    draws = []
    for variant, value in variants.items():
        commands = _script_commands(script.replace("$" + variable, value), "-m experiments.train_zoo")
        target, repair = ([c for c in commands if c[0] == kind][0] for kind in ("target", "repair"))
        for argv, name, make in ((target, "stage6_training_config.json", tz.target_config),
                                 (repair, "stage7_repair_config.json", tz.repair_config)):
            recorded = json.loads((root / variant / name).read_text())
            assert _as_recorded(make, argv, recorded["config"]) == recorded["config"], (variant, name)
            assert recorded["run_info"]["commit"] in commit
        assert runs["stage7"][variant]["chosen_step"] == recorded["selection"]["chosen_step"]
        avg = json.loads((root / variant / "average_config.json").read_text())
        assert avg["weights"] == [0.25, 0.75] and avg["a"]["shards"] == base
        draws.append(avg["b"]["shards"])
    for variant in [*variants, *(["soup"] if "soup" in runs["gates"]["eval96"] else [])]:
        for prompts in ("eval96", "val160"):
            q = zoo_gate.read_gate(root / variant / f"gate_{prompts}_h200.json")["quality_gate"]
            assert runs["gates"][prompts][variant] == [round(q["eos_share"], 4), round(q["spearman_ref_out"], 4),
                                                       q["loops"]]
    if folder == "margin_recipe_h200":
        average = tz.REPO / "experiments" / "results" / "zoo" / "weight_average_h200"
        for prompts in ("eval96", "val160"):
            base_gate = zoo_gate.read_gate(average / f"installed_gate_{prompts}_h200.json.gz")
            for variant in variants:
                c = zoo_gate.compare_gates(base_gate, zoo_gate.read_gate(root / variant / f"gate_{prompts}_h200.json"))
                assert runs["compare"][prompts][variant] == [round(c["spearman_b_minus_a"], 4),
                                                             [round(v, 4) for v in c["ci95"]]]
        assert json.loads((root / "seed0" / "stage6_training_config.json").read_text())["config"][
            "copy_margin_weight"] == 4
        import hashlib  # seed 0's product, its heads and its average's record are the installed target's

        shards = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in tz.MODEL_DIR.glob("model*.safetensors")}
        assert shards == runs["product_seed0"]["shards_sha256"]
        assert json.loads((tz.MODEL_DIR / "average_config.json").read_text()) == json.loads(
            (root / "seed0" / "average_config.json").read_text())
        assert json.loads((tz.MODEL_DIR / "heads_training_eagle1_eagle3.json").read_text()) == json.loads(
            (root / "seed0" / "heads_training_eagle1_eagle3.json").read_text())
        c = zoo_gate.compare_gates(zoo_gate.read_gate(average / "installed_gate_eval274_cpu.json.gz"),
                                   zoo_gate.read_gate(root / "seed0" / "gate_eval274_cpu.json"))
        assert runs["eval274_cpu"]["compare"] == [round(c["spearman_b_minus_a"], 4), [round(v, 4) for v in c["ci95"]]]
        from experiments import edit_places

        places = tz.REPO / "experiments" / "results" / "zoo" / "edit_places_cpu_fp32"
        for prompts in ("eval96", "val160", "train96"):
            (_, a), (_, b) = (edit_places.read_side(f"{path}.json.gz:{label}") for path, label in (
                (places / f"installed_average_{prompts}", "installed_average"),
                (root / "seed0" / f"edit_places_{prompts}_cpu", "hinge_seed0")))
            c = edit_places.compare_places(a, b)
            assert runs["edit_places"][prompts]["departures_b_over_a"] == [
                round(c["spurious_b_over_a"], 4), [round(v, 4) for v in c["spurious_ci95"]]]
    if folder == "seed_soup_h200":
        soup = json.loads((root / "soup" / "average_config.json").read_text())
        (argv,) = [a for a in _script_commands(script, "-m experiments.weight_average") if "--weights" in a]
        i = argv.index("--weights")
        assert soup["weights"] == [float(w) for w in argv[i + 1:i + 6]] and sum(soup["weights"]) == 1.0
        installed = _weight_average_shards()  # the installed target when these ran
        assert [m["shards"] for m in soup["models"]] == [installed, base, *draws]


def test_recorded_shapes_are_the_recorded_script():
    """zoo/target_shapes_h200/: each shape's and seed's config is what the recorded script's command line parses to
    with that seed and the shape's options, at its call's commit, and is of the recorded shape; the runs' place
    counts are the edit_places records', and each comparison is :func:`edit_places.compare_places` of the records
    it names, as the runs hold it."""
    import gzip
    import json
    import shlex

    from experiments import edit_places

    root = tz.REPO / "experiments" / "results" / "zoo" / "target_shapes_h200"
    runs = json.loads((root / "runs.json").read_text())
    script = (root / "call.sh").read_text()
    options = dict(re.findall(r'\[(\w+)\]="([^"]*)"', script))
    assert set(options) == set(runs["shapes"]) and options["installed"] == ""
    commits = {c["commit"] for c in runs["calls"]}
    for run, t in runs["training"].items():
        shape, seed = run.rsplit("_seed", 1)
        (argv,) = _script_commands(script.replace("${OPTS[$label]}", options[shape]).replace("$SEED", seed)
                                   .replace("$label", shape), "-m experiments.train_zoo")
        recorded = json.loads((root / run / "training_config.json").read_text())
        assert _as_recorded(tz.target_config, argv, recorded["config"]) == recorded["config"], run
        assert recorded["run_info"]["commit"] == t["commit"] and t["commit"] in commits
        assert {k: recorded["config"][k] for k in ("num_layers", "num_heads", "num_kv_heads", "intermediate_size")} \
            == {k: v for k, v in runs["shapes"][shape].items() if k not in ("head_dim", "parameters")}
        assert recorded["parameters"] == runs["shapes"][shape]["parameters"]
        assert (t["pretrain_steps"], t["pretrain_stopped_by"]) == (2236, "steps") == \
            (recorded["pretrain"]["steps"], recorded["pretrain"]["stopped_by"])
    samples = {}
    for rows, by_run in runs["places"].items():
        for run, p in by_run.items():
            label, seed = run.rsplit("_", 1)
            with gzip.open(root / p["record"], "rt") as f:
                (model,) = [m for m in json.load(f)["models"] if m["label"] == label]
            assert {k: p[k] for k in ("found", "leaves", "spurious", "copies")} == \
                {k: model["summary"][k] for k in ("found", "leaves", "spurious", "copies")}
            samples[rows, p["record"].split("/")[-1], label] = model["samples"]
    for name, c in runs["comparisons"].items():
        record = json.loads((root / "comparisons" / f"{name}.json").read_text())
        rows = name.split("_")[0]
        (a, b) = (samples[(rows, *spec.rsplit(":", 1))] for spec in (c["a"], c["b"]))
        got = edit_places.compare_places(a, b)
        assert record["n"] == c["n"] == got["n"] and shlex.split(record["command"])[4:6] == record["compare"]
        for key, digits in (("found_share_b_minus_a", 4), ("found_ci95", 4), ("spurious_b_over_a", 3),
                            ("spurious_ci95", 3)):  # the record's figures, rounded in the runs
            assert got[key] == pytest.approx(record[key]) and got[key] == pytest.approx(c[key], abs=10 ** -digits)


def _wheel(folder, name: str, source: str):
    """A pure-Python wheel of one module ``name`` holding ``source``, written into ``folder``."""
    import zipfile

    info = f"{name}-0.1.dist-info"
    files = {f"{name}.py": source, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}-0.1-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


def test_device_env_gives_every_later_python_the_wheels_and_the_data(tmp_path):
    """``experiments/device_env.sh``, sourced in a checkout with ``.whl/`` and ``.cache/``: a python3 started
    afterwards by the same shell, or by a script it starts, imports the wheel's module and reads the unpacked edits
    through ``HYBRIDSD_DATA``; a script started after it does not install again (its broken wheel is never read);
    a wheel that does not install, or a data file that does not unpack, is one line and status 1."""
    import gzip
    import lzma
    import os
    import subprocess

    env_sh = tz.REPO / "experiments" / "device_env.sh"
    repo, dev = tmp_path / "checkout", tmp_path / "device"
    _wheel(repo / ".whl", "probe_mod", "X = 42\n")
    (repo / ".cache").mkdir()
    (repo / ".cache" / "code_edits_dev.jsonl.xz").write_bytes(lzma.compress(b'{"id": "e1"}\n'))
    env = {k: v for k, v in os.environ.items() if k not in ("HYBRIDSD_ENV_READY", "PYTHONPATH")}
    env["DEVICE_TMP"] = str(dev)
    (tmp_path / "probe.py").write_text("import os, probe_mod\n"
                                       "data = os.environ['HYBRIDSD_DATA'] + '/code_edits_dev.jsonl'\n"
                                       "print(probe_mod.X, open(data).read())\n")
    (tmp_path / "later.sh").write_text(f"source {env_sh} && python3 {tmp_path / 'probe.py'}\n")
    script = (f"source {env_sh} || exit 1; python3 {tmp_path / 'probe.py'}; "
              f"echo broken > .whl/probe_mod-0.1-py3-none-any.whl; bash {tmp_path / 'later.sh'}")
    run = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n") == ['42 {"id": "e1"}', "", '42 {"id": "e1"}', "", ""]
    assert (dev / "d" / "code_edits_dev.jsonl").read_text() == '{"id": "e1"}\n'
    fresh = subprocess.run(["bash", "-c", f"source {env_sh} || exit 1; echo unreachable"], cwd=repo,
                           env={**env, "DEVICE_TMP": str(tmp_path / "other")}, capture_output=True, text=True)
    assert fresh.returncode == 1 and fresh.stdout == ""
    assert fresh.stderr.strip().splitlines()[-1] == "device_env.sh: the wheels in .whl/ did not install"
    # the gzipped data sets beside the edits; a damaged one is one line and status 1, and leaves no partial file
    (repo / ".whl" / "probe_mod-0.1-py3-none-any.whl").unlink()
    (repo / ".cache" / "mt_bench.jsonl.gz").write_bytes(gzip.compress(b'{"id": "m1"}\n'))
    (repo / ".cache" / "editeval.jsonl.gz").write_bytes(gzip.compress(b'{"id": "v1"}\n')[:-6])
    broken = subprocess.run(["bash", "-c", f"source {env_sh} || exit 1; echo unreachable"], cwd=repo,
                            env={**env, "DEVICE_TMP": str(tmp_path / "third")}, capture_output=True, text=True)
    assert broken.returncode == 1 and broken.stdout == ""
    assert broken.stderr.strip().splitlines() == ["device_env.sh: .cache/editeval.jsonl.gz does not unpack"]
    assert sorted(p.name for p in (tmp_path / "third" / "d").iterdir()) == ["code_edits_dev.jsonl", "mt_bench.jsonl"]
    assert (tmp_path / "third" / "d" / "mt_bench.jsonl").read_text() == '{"id": "m1"}\n'


def test_retrain_stages_that_run_python_themselves_get_the_device_env(tmp_path):
    """Stage 7 of ``retrain_zoo.sh`` runs ``python3`` itself, not through ``train_zoo_gpu.sh``: it starts in the
    environment of ``device_env.sh`` (the wheels' folder first on ``PYTHONPATH``). A stand-in ``python3`` on ``PATH``
    records what it was started with and fails, which ends the call with status 1."""
    import os
    import subprocess

    checkout, bin_dir, seen = tmp_path / "checkout", tmp_path / "bin", tmp_path / "seen.txt"
    checkout.mkdir(), bin_dir.mkdir()
    (checkout / "experiments").symlink_to(tz.REPO / "experiments")  # no .whl/ or .cache/ here
    fake = bin_dir / "python3"
    fake.write_text(f'#!/bin/sh\necho "$HYBRIDSD_ENV_READY|$PYTHONPATH|$HYBRIDSD_DATA|$*" >> {seen}\nexit 1\n')
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "WORK_ROOT": str(tmp_path / "work"), "DEVICE_TMP": str(tmp_path / "dev"),
           "HOME": os.environ.get("HOME", "/tmp")}
    run = subprocess.run(["bash", str(checkout / "experiments" / "retrain_zoo.sh"), "7", str(tmp_path / "out"),
                          str(tz.MODEL_DIR)], cwd=checkout, env=env, capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    ready, path, data, argv = seen.read_text().splitlines()[-1].split("|")
    assert ready == "1" and path.split(":")[:2] == [str(tmp_path / "dev" / "site"), str(checkout)]
    assert data and argv.startswith("-m experiments.train_zoo repair --init")


def test_retrain_smoke_runs_every_stage_from_the_one_before(tmp_path):
    """``SMOKE=1 retrain_zoo.sh 1,2,3,4,5,6,7,8`` on the CPU (tiny model, budgets and data; about 5 minutes): each
    target stage starts from the one before and records it, stage 4 loads stage 3's edit data, stage 5 repairs in fp32,
    keeping the best of its validation gates, and trains no heads; stage 7 repairs stage 6's target, stage 8 averages
    stage 5's and stage 7's weights and trains the heads of the average; the archive is stage 8's, with its heads."""
    import io
    import json
    import os
    import subprocess
    import tarfile

    if not any(p.exists() for p in edit_corpus.EDITS_CANDIDATES):
        pytest.skip("code_edits_dev.jsonl not available")
    if list((tz.REPO / ".whl").glob("*.whl")):
        pytest.skip("wheels for the GPU machine's Python in .whl/ (train_zoo_gpu.sh would install them)")
    out, root = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ, SMOKE="1", WORK_ROOT=str(root))
    run = subprocess.run(["bash", str(tz.REPO / "experiments" / "retrain_zoo.sh"), "1,2,3,4,5,6,7,8", str(out)],
                         cwd=tz.REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    records = {s: json.loads((out / f"stage{s}_training_config.json").read_text()) for s in (1, 2, 3, 4)}
    assert records[1]["init"] is None and records[1]["pretrain"]["steps"] >= 1
    for s in (2, 3, 4):
        assert records[s]["init"] == str(root / f"zoo_stage{s - 1}" / "tiny-coder")
    assert records[1]["data"]["data_cache"].startswith("written")  # (stage 2's smoke key differs from stage 1's)
    assert records[4]["data"]["data_cache"].startswith("hit") and records[3]["data"]["data_cache"].startswith("written")
    repair = json.loads((out / "stage5_repair_config.json").read_text())
    assert repair["config"]["repair_fp32"] and repair["init"] == str(root / "zoo_stage5" / "tiny-coder")
    assert [g["step"] for g in repair["selection"]["gates"]] == [0, repair["repair"]["steps"]]  # smoke: 2 steps
    assert not (out / "stage5_repair_config_1.json").exists()
    assert not (out / "stage5_heads_training_eagle1_eagle3.json").exists()
    assert not (root / "zoo_stage5" / "tiny-coder" / "eagle1").exists()
    archive = b"".join(p.read_bytes() for p in sorted(out.glob("tiny-coder.tar.part-*")))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = tar.getnames()
    assert "tiny-coder/eagle1/config.json" in names and "tiny-coder/eagle3/config.json" in names
    tuned = json.loads((out / "stage6_training_config.json").read_text())
    assert tuned["init"] == str(root / "zoo_stage5" / "tiny-coder")
    weak = json.loads((out / "stage7_repair_config.json").read_text())
    assert weak["init"] == str(root / "zoo_stage6" / "tiny-coder") and weak["config"]["repair_weight"] == 0.1
    average = json.loads((out / "stage8_average_config.json").read_text())
    assert average["weight"] == 0.75 and average["a"]["path"] == str(root / "zoo_stage5" / "tiny-coder")
    assert average["b"]["path"] == str(root / "zoo_stage7" / "tiny-coder")
    assert (out / "stage8_heads_training_eagle1_eagle3.json").is_file() and "tiny-coder/average_config.json" in names


def test_corpus_fingerprint_tells_apart_any_change_of_texts_or_order():
    fp = edit_corpus.fingerprint
    texts = ["import os\n", "def f():\n    return 1\n", "x = 'é'\n"]
    assert fp(texts) == fp(list(texts)) and len(fp(texts)) == 64
    assert fp(texts) != fp(texts[::-1])  # the order is part of the corpus (it fixes the packing)
    assert fp(texts) != fp(texts[:2]) != fp(["import os\n", "def f():\n    return 2\n", "x = 'é'\n"])
    assert fp(["ab", "c"]) != fp(["a", "bc"])  # boundaries count



def test_recorded_copy_margin_runs_are_the_recorded_scripts():
    """zoo/copy_margin_h200/: each tuning's, loop repair's and average's recorded config is what its call's script
    parses to (call.sh's shared options with each variant's hinge weight), at the call's commit; the averages are of
    the weight-average target's shards; the runs' gates are the gate records'."""
    import json
    import re

    from experiments import zoo_gate

    folder = tz.REPO / "experiments" / "results" / "zoo" / "copy_margin_h200"
    runs = json.loads((folder / "runs.json").read_text())
    commit = {c["script"]: c["commit"] for c in runs["calls"]}
    installed = _weight_average_shards()  # the installed target when these ran

    def check(name: str, argv: list[str], make, script: str) -> dict:
        recorded = json.loads((folder / name).read_text())
        assert _as_recorded(make, argv, recorded["config"]) == recorded["config"], name
        assert recorded["run_info"]["commit"] == commit[script], name
        return recorded

    call = (folder / "call.sh").read_text()
    assert 'for v in "control 0" "margin4 4" "margin16 16"; do set -- $v' in call
    common = re.search(r'COMMON="([^"]*)"', call).group(1)
    expanded = call.replace("$COMMON", common.replace("\\\n", " "))
    (target,) = _script_commands(expanded, "-m experiments.train_zoo target")
    for variant, weight in (("control", "0"), ("margin4", "4"), ("margin16", "16")):
        argv = ["target", *[w.replace("$2", weight).replace("$1", variant) for w in target]]
        check(f"{variant}/training_config.json", argv, tz.target_config, "call.sh")
    for script, tuned, loops in (("call_repair_average.sh", "margin4_rerun", "margin4_rerun_loops_avg0.75"),
                                 ("call_hinge_repair.sh", "hinge_loops_avg0.75", "hinge_loops_avg0.75")):
        text = (folder / script).read_text()
        (target,) = _script_commands(text, "-m experiments.train_zoo target")
        tuning = check(f"{tuned}/training_config.json", ["target", *target], tz.target_config, script)
        margin4 = json.loads((folder / "margin4" / "training_config.json").read_text())["config"]
        assert tuning["config"] == margin4  # a rerun of call.sh's weight-4 tuning
        (repair,) = _script_commands(text, "-m experiments.train_zoo repair")
        check(f"{loops}/loop_repair_config.json", ["repair", *repair], tz.repair_config, script)
        for argv in _script_commands(text, "-m experiments.weight_average"):
            weight = float(argv[argv.index("--weight") + 1])
            product = {0.5: "margin4_rerun_avg0.5", 0.75: loops}[weight]
            average = json.loads((folder / product / "average_config.json").read_text())
            assert average["weight"] == weight and average["a"]["shards"] == installed
    hinge = json.loads((folder / "hinge_loops_avg0.75" / "loop_repair_config.json").read_text())["config"]
    plain = json.loads((folder / "margin4_rerun_loops_avg0.75" / "loop_repair_config.json").read_text())["config"]
    assert (hinge["copy_margin_weight"], plain["copy_margin_weight"]) == (4.0, 0.0)
    for prompts, gates in runs["gates"].items():
        for variant, recorded in gates.items():
            path = (tz.REPO / "experiments" / "results" / "zoo" / "weight_average_h200"
                    / f"installed_gate_{prompts}_h200.json") if variant == "installed" else \
                folder / variant / f"gate_{prompts}_h200.json"
            q = zoo_gate.read_gate(path)["quality_gate"]
            assert recorded == [round(q["eos_share"], 4), round(q["spearman_ref_out"], 4), q["loops"]]
