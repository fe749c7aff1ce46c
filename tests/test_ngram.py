import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsd.drafters.base import Drafter, ProposeRequest
from hybridsd.drafters.ngram import NgramConfig, NgramDrafter, ngram_propose


def reference(ctx, min_n, max_n, k):
    """Longest n first, then the leftmost occurrence that is not the suffix itself."""
    ctx = list(ctx)
    t = len(ctx)
    for n in range(max_n, min_n - 1, -1):
        if n >= t:
            continue
        suffix = ctx[t - n :]
        for i in range(t - n):  # i = t - n would be the suffix itself
            if ctx[i : i + n] == suffix:
                return ctx[i + n : i + n + k]
    return []


@st.composite
def cases(draw, alphabet=3):
    ctx = draw(st.lists(st.integers(0, alphabet), max_size=60))
    min_n = draw(st.integers(1, 6))
    max_n = draw(st.integers(min_n, min_n + 5))
    k = draw(st.integers(1, 70))
    return ctx, min_n, max_n, k


@settings(max_examples=1500, deadline=None)
@given(cases())
def test_matches_reference_small_alphabet(case):
    ctx, min_n, max_n, k = case
    got = ngram_propose(ctx, min_n, max_n, k)
    assert got.dtype == np.int64
    assert got.tolist() == reference(ctx, min_n, max_n, k)


@settings(max_examples=300, deadline=None)
@given(cases(alphabet=1))
def test_matches_reference_binary(case):
    assert ngram_propose(*case).tolist() == reference(*case)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), max_size=30), st.integers(1, 4), st.integers(1, 8))
def test_matches_reference_large_ids(ctx, n, k):
    ctx = ctx + ctx[: len(ctx) // 2]  # make repeats likely
    assert ngram_propose(ctx, 1, n, k).tolist() == reference(ctx, 1, n, k)


@pytest.mark.parametrize(
    "ctx, min_n, max_n, k, want",
    [
        ([1, 2, 3, 4, 1, 2, 3], 2, 2, 3, [4, 1, 2]),
        ([1, 2, 3, 4, 1, 2, 3, 5, 6], 2, 2, 2, []),
        ([2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4], 3, 4, 2, [1, 2]),  # the 4-gram wins
        ([1, 1, 1, 1], 2, 2, 3, [1, 1]),  # occurrence overlapping the suffix
        ([1, 2, 3, 4, 2, 3], 2, 3, 4, [4, 2, 3]),  # fewer than k follow
        ([], 1, 3, 2, []),
        ([7], 1, 1, 2, []),
        ([7, 7], 1, 1, 2, [7]),
        ([1, 2, 9, 1, 2, 8, 1, 2], 2, 2, 1, [9]),  # earliest occurrence wins
    ],
)
def test_hand_made_cases(ctx, min_n, max_n, k, want):
    assert ngram_propose(ctx, min_n, max_n, k).tolist() == want


@pytest.mark.parametrize(
    "args, name",
    [((0, 2, 5), "k"), ((-1, 2, 5), "k"), ((3, 0, 5), "min_n"), ((3, 4, 3), "max_n")],
)
def test_bad_arguments(args, name):
    k, min_n, max_n = args
    with pytest.raises(ValueError, match=name):
        ngram_propose([1, 2, 1, 2], min_n, max_n, k)
    with pytest.raises(ValueError, match=name):
        NgramConfig(k=k, min_n=min_n, max_n=max_n)
    with pytest.raises(ValueError, match=name):
        NgramDrafter(k=k, min_n=min_n, max_n=max_n)


@pytest.mark.parametrize("args, name", [((2.5, 2, 5), "k"), ((3, 2, 2.5), "max_n"), ((3, True, 5), "min_n")])
def test_non_integer_arguments_are_refused(args, name):
    k, min_n, max_n = args
    with pytest.raises(TypeError, match=f"{name} must be an int"):
        NgramDrafter(k=k, min_n=min_n, max_n=max_n)
    with pytest.raises(TypeError, match=f"{name} must be an int"):
        ngram_propose([1, 2, 1, 2], min_n, max_n, k)


def test_rejects_2d_context():
    with pytest.raises(ValueError, match="1-D"):
        ngram_propose(np.zeros((2, 3), dtype=np.int64), 1, 2, 2)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16])
def test_dtypes(dtype):
    ctx = [5, 6, 7, 8, 5, 6]
    arr = np.array(ctx, dtype=dtype)
    for c in (ctx, arr, arr[::-1][::-1]):  # list, array, non-contiguous view
        got = ngram_propose(c, 2, 3, 5)
        assert got.dtype == np.int64 and got.tolist() == [7, 8, 5, 6]
    assert arr.tolist() == ctx  # input untouched


@pytest.mark.parametrize("context", [[1.9, 2.2, 7.5, 1.1, 2.8], np.array([1.0, 2.0, 1.0]), [True, False, True],
                                     torch.tensor([1.0, 2.0, 1.0])])
def test_non_integer_context_is_refused(context):
    """Float or bool ids are refused, not truncated to other ids (a TypeError naming the context)."""
    with pytest.raises(TypeError, match="context must hold integer token ids"):
        ngram_propose(context, 1, 2, 3)


def test_ids_beyond_int64_are_refused_and_tensors_taken():
    with pytest.raises(ValueError, match="beyond int64"):
        ngram_propose(np.array([5, 2**64 - 1], dtype=np.uint64), 1, 2, 2)
    assert ngram_propose(torch.tensor([5, 6, 7, 5, 6], dtype=torch.int32), 2, 2, 2).tolist() == [7, 5]
    assert ngram_propose([], 1, 2, 2).tolist() == []


def test_draft_does_not_alias_input():
    arr = np.array([1, 2, 3, 1, 2], dtype=np.int64)
    got = ngram_propose(arr, 1, 2, 3)
    got[:] = -1
    assert arr.tolist() == [1, 2, 3, 1, 2]


def test_config_defaults_and_frozen():
    cfg = NgramConfig()
    assert (cfg.k, cfg.min_n, cfg.max_n) == (5, 2, 5)
    with pytest.raises(AttributeError):
        cfg.k = 3


def req(tokens, budget, device="cpu"):
    return ProposeRequest(tokens=np.asarray(tokens, dtype=np.int64), budget=budget, device=torch.device(device))


def test_drafter_attributes():
    d = NgramDrafter(k=4, min_n=1, max_n=3)
    assert isinstance(d, Drafter)
    assert d.name == "ngram" and d.hidden_layers == () and d.max_tokens == 4
    assert d.config == NgramConfig(k=4, min_n=1, max_n=3)


def test_drafter_propose_and_budget():
    ctx = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    d = NgramDrafter(k=4, min_n=2, max_n=3)
    (draft,) = d.propose(req(ctx, budget=10))
    assert draft.source == "ngram" and draft.probs is None
    assert draft.tokens.dtype == torch.int64 and draft.tokens.device.type == "cpu"
    assert draft.tokens.tolist() == [3, 4, 5, 6]  # k caps
    (draft,) = d.propose(req(ctx, budget=2))
    assert draft.tokens.tolist() == [3, 4]  # budget caps
    assert d.propose(req(ctx, budget=0)) == []
    assert d.propose(req([1, 2, 3, 4], budget=5)) == []  # no match
    assert d.propose(req([], budget=5)) == []
