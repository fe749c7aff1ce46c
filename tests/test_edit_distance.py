import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DATA_DIR
from hybridsd.edit_distance import copied_runs, edit_norm, levenshtein, token_edit_norm

DATA = DATA_DIR

texts = st.text(alphabet="abc", max_size=12)
tokens = st.lists(st.integers(0, 3), max_size=12)
seqs = texts | tokens


def dp_levenshtein(a, b):
    """Textbook Wagner-Fischer table."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i, j in itertools.product(range(1, len(a) + 1), range(1, len(b) + 1)):
        d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(a)][len(b)]


@settings(max_examples=300, deadline=None)
@given(seqs, seqs)
def test_matches_dp_reference(a, b):
    assert levenshtein(a, b) == dp_levenshtein(a, b)
    want = dp_levenshtein(a, b) / max(len(a), len(b)) if a or b else 0.0
    assert edit_norm(a, b) == pytest.approx(want)


@settings(max_examples=300, deadline=None)
@given(texts, texts, texts)
def test_metric_on_text(a, b, c):
    assert (levenshtein(a, b) == 0) == (a == b)
    assert levenshtein(a, b) == levenshtein(b, a)
    assert levenshtein(a, c) <= levenshtein(a, b) + levenshtein(b, c)
    assert 0.0 <= edit_norm(a, b) <= 1.0


@settings(max_examples=300, deadline=None)
@given(tokens, tokens, tokens)
def test_metric_on_tokens(a, b, c):
    assert (levenshtein(a, b) == 0) == (a == b)
    assert levenshtein(a, b) == levenshtein(b, a)
    assert levenshtein(a, c) <= levenshtein(a, b) + levenshtein(b, c)
    assert 0.0 <= token_edit_norm(a, b) <= 1.0


def test_edge_cases_and_arrays():
    assert edit_norm("", "") == 0.0 and edit_norm("", "ab") == 1.0
    assert levenshtein("kitten", "sitting") == 3
    a, b = np.array([1, 2, 3, 4]), np.array([1, 3, 4])
    assert levenshtein(a, b) == 1 and token_edit_norm(a, b) == 0.25
    assert token_edit_norm(a.astype(np.int32), b.tolist()) == 0.25


@settings(max_examples=300, deadline=None)
@given(seqs, seqs, st.integers(1, 4))
def test_copied_runs_properties(src, out, min_n):
    runs = copied_runs(src, out, 1)
    assert all(r >= 1 for r in runs)
    assert len(out) - levenshtein(src, out) <= sum(runs) <= len(out)
    assert copied_runs(src, out, min_n) == [r for r in runs if r >= min_n]


def test_copied_runs_examples():
    assert copied_runs("abcdef", "abXdef") == [2, 3]
    assert copied_runs("abcdef", "abXdef", min_n=3) == [3]
    assert copied_runs([1, 2, 3], [1, 2, 3]) == [3]
    assert copied_runs("", "abc") == [] and copied_runs("abc", "xyz") == []
    with pytest.raises(ValueError, match="min_n"):
        copied_runs("a", "a", 0)


def test_matches_char_edit_norm_column():
    path = DATA / "code_edits_dev.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not found")
    with path.open() as f:
        rows = [json.loads(line) for line in itertools.islice(f, 50)]
    assert len(rows) == 50
    for row in rows:
        assert round(edit_norm(row["before"], row["after"]), 6) == pytest.approx(row["char_edit_norm"], abs=1e-9)


def test_batched_token_arrays_are_refused():
    import torch

    for a in (np.array([[1, 2, 3]]), torch.tensor([[1, 2, 3]])):
        with pytest.raises(ValueError, match="1-D"):
            token_edit_norm(a, [1, 2, 4])
        with pytest.raises(ValueError, match="1-D"):
            edit_norm([1, 2, 4], a)
        with pytest.raises(ValueError, match="1-D"):
            copied_runs(a, [1, 2])
    assert token_edit_norm(torch.tensor([1, 2, 3]), np.array([1, 2, 4])) == pytest.approx(1 / 3)


@pytest.mark.parametrize("min_n,err", [(float("nan"), ValueError), (float("inf"), ValueError), (1.5, ValueError),
                                       (0, ValueError), (True, TypeError), ("2", TypeError), (None, TypeError)],
                         ids=repr)
def test_a_min_n_that_is_not_a_whole_number_from_one_is_named(min_n, err):
    """min_n=nan used to return [] (no run is >= nan) without a word, and True and 1.5 were taken as numbers."""
    with pytest.raises(err, match="min_n must be an integer >= 1"):
        copied_runs("abcdef", "abXdef", min_n)


def test_a_whole_min_n_of_any_numeric_type_gives_the_same_runs():
    for min_n in (2, 2.0, np.int64(2), np.float32(2)):
        assert copied_runs("abcdef", "abXdef", min_n) == [2, 3]
