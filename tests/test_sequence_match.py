"""experiments.sequence_match against difflib itself, block for block."""
import difflib
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import edit_corpus, time_edit_data, zoo_data
from experiments.sequence_match import changed_spans, matching_blocks


def _difflib_blocks(a, b):
    return [tuple(m) for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()]


def _difflib_spans(a, b):
    return [(j1, j2) for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            if tag != "equal"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=40), st.lists(st.integers(0, 5), max_size=40))
def test_matching_blocks_equal_difflib(a, b):
    assert matching_blocks(a, b) == _difflib_blocks(a, b)
    assert changed_spans(a, b) == _difflib_spans(a, b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=60), st.data())
def test_matching_blocks_of_an_edit_equal_difflib(a, data):
    """b is a with a few spans replaced, removed or inserted (the case of the training data: long equal runs)."""
    b = list(a)
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(b)))
        cut = data.draw(st.integers(0, 3))
        b[at:at + cut] = data.draw(st.lists(st.integers(0, 7), max_size=4))
    assert matching_blocks(a, b) == _difflib_blocks(a, b)
    assert changed_spans(a, b) == _difflib_spans(a, b)


def test_long_repetitive_sequences_equal_difflib():
    """Thousands of tokens from a small vocabulary (many equal candidates per token, the slow case of the search)."""
    rng = random.Random(3)
    for size, vocab in ((1500, 40), (2500, 6), (700, 300)):
        a = [rng.randrange(vocab) for _ in range(size)]
        b = list(a)
        for _ in range(12):
            at = rng.randrange(len(b))
            b[at:at + rng.randrange(30)] = [rng.randrange(vocab) for _ in range(rng.randrange(30))]
        assert matching_blocks(a, b) == _difflib_blocks(a, b)
        assert matching_blocks(b, a) == _difflib_blocks(b, a)


def test_empty_and_identical():
    assert matching_blocks([], []) == [(0, 0, 0)]
    assert matching_blocks([1, 2], []) == [(2, 0, 0)]
    assert changed_spans([], [4, 5]) == [(0, 2)]
    assert changed_spans([1, 2, 3], [1, 2, 3]) == []
    assert changed_spans([1, 2, 3], [1, 3]) == [(1, 1)]


def test_time_edit_data_compares_the_same_examples(tmp_path):
    """``experiments.time_edit_data`` times sft_examples with both aligners on the same rows (the real training edits
    and the synthetic ones asked for) and finds the same examples."""
    if not any(p.exists() for p in edit_corpus.EDITS_CANDIDATES):
        pytest.skip("code_edits_dev.jsonl not available")
    out = tmp_path / "timing.json"
    time_edit_data.main(["--synthetic-examples", "12", "--workers", "1", "--out", str(out)])
    record = json.loads(out.read_text())
    real = len(edit_corpus.split_validation(edit_corpus.split_edits(edit_corpus.load_edits())[0],
                                            edit_corpus.VALIDATION_REPOS)[0])
    assert record["rows"] == real + 12 and record["same_examples"]
    assert record["digest_compiled"] == record["digest_difflib"] == record["digest_compiled_again"]
    assert all(record[f"sft_examples_{n}_s"] > 0 for n in ("compiled", "difflib", "compiled_again"))
    assert zoo_data.changed_spans is changed_spans  # the aligner is put back
