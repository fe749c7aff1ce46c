"""N-gram (prompt lookup) drafting: copy what followed an earlier occurrence of the context's suffix.

Semantics are vLLM v1's (``vllm/v1/spec_decode/ngram_proposer.py``): take the longest suffix of the
context whose length n is in ``[min_n, max_n]`` and that also occurs earlier in the context (any
occurrence other than the suffix itself, overlaps allowed); among that n-gram's occurrences the
earliest wins; propose the up-to-k tokens that follow it.

Deliberate differences from vLLM's ``_find_longest_matched_ngram_and_propose_tokens``:

- no ``max_model_len`` argument: the caller caps ``k`` (``NgramDrafter`` uses the step's budget);
- the draft is always a fresh int64 array (vLLM returns a view in the input's dtype);
- bad arguments (``k < 1``, ``min_n < 1``, ``min_n > max_n``, non-1-D input) raise ``ValueError``
  instead of returning nothing or failing inside numba.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numba import njit

from hybridsd.drafters.base import Draft, Drafter, ProposeRequest, check_count, token_array


@njit(cache=True, nogil=True)
def _match(tokens: np.ndarray, max_n: int) -> tuple[int, int]:
    """(end, n) of the earliest occurrence of the longest suffix n-gram (n <= max_n) that is not the suffix itself."""
    last = tokens.shape[0] - 1
    best_end, best_n = -1, 0
    # An occurrence ending at `end` < last is never the suffix itself and is followed by >= 1 token.
    for end in range(last):
        if tokens[end] != tokens[last]:
            continue
        cap = min(max_n, end + 1)
        n = 1
        while n < cap and tokens[end - n] == tokens[last - n]:
            n += 1
        if n > best_n:  # strict: ties keep the earlier occurrence
            best_end, best_n = end, n
            if n == max_n:  # nothing later can be longer or earlier
                break
    return best_end, best_n


def _check(k: int, min_n: int, max_n: int) -> None:
    check_count("k", k)
    check_count("min_n", min_n)
    check_count("max_n", max_n)
    if min_n > max_n:
        raise ValueError(f"min_n ({min_n}) must be <= max_n ({max_n})")


def ngram_propose(context, min_n: int, max_n: int, k: int) -> np.ndarray:
    """Up to ``k`` tokens (int64) that followed the earliest earlier occurrence of the longest
    suffix n-gram of ``context`` with ``min_n <= n <= max_n``; an empty array when there is none.

    ``context``: a 1-D sequence of integer token ids (list, or numpy array of any integer dtype).
    """
    _check(k, min_n, max_n)
    tokens = token_array("context", context)  # [T] int64 (the loop's host ids as they are, no copy)
    end, n = _match(tokens, max_n)
    if n < min_n:
        return np.empty(0, dtype=np.int64)
    return tokens[end + 1 : end + 1 + k].copy()


@dataclass(frozen=True)
class NgramConfig:
    """Draft length ``k`` and the n-gram lengths ``[min_n, max_n]`` to match."""

    k: int = 5
    min_n: int = 2
    max_n: int = 5

    def __post_init__(self) -> None:
        _check(self.k, self.min_n, self.max_n)


class NgramDrafter(Drafter):
    """Proposes one deterministic branch with :func:`ngram_propose`, or none when nothing matches."""

    name = "ngram"
    hidden_layers = ()

    def __init__(self, k: int = 5, min_n: int = 2, max_n: int = 5) -> None:
        self.config = NgramConfig(k=k, min_n=min_n, max_n=max_n)

    @property
    def max_tokens(self) -> int:
        return self.config.k

    def propose(self, request: ProposeRequest) -> list[Draft]:
        k = min(self.config.k, request.budget)
        if k < 1:
            return []
        draft = ngram_propose(request.tokens, self.config.min_n, self.config.max_n, k)
        if draft.size == 0:
            return []
        return [Draft(tokens=torch.as_tensor(draft, device=request.device), source=self.name)]
