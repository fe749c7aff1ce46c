"""Levenshtein distances between texts or token sequences, and the copied runs an edit leaves.

``edit_norm`` is the data sets' ``char_edit_norm``: ``Levenshtein(a, b) / max(len(a), len(b))``
with unit costs (rapidfuzz), 0.0 for two empty inputs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from rapidfuzz.distance import Levenshtein


def _seq(x):
    """Strings as they are; 1-D arrays and tensors as lists of Python ints (rapidfuzz hashes elements)."""
    if isinstance(x, str) or not hasattr(x, "tolist"):
        return x
    if getattr(x, "ndim", 1) != 1:
        raise ValueError(f"token sequences must be 1-D, got shape {tuple(x.shape)}")
    return x.tolist()


def levenshtein(a: str | Sequence, b: str | Sequence) -> int:
    """Unit-cost insert/delete/substitute distance between two strings or sequences of hashables."""
    return Levenshtein.distance(_seq(a), _seq(b))


def edit_norm(a: str | Sequence, b: str | Sequence) -> float:
    """``levenshtein(a, b) / max(len(a), len(b))``, in [0, 1]; 0.0 when both are empty."""
    a, b = _seq(a), _seq(b)
    longest = max(len(a), len(b))
    return levenshtein(a, b) / longest if longest else 0.0


def token_edit_norm(a: Sequence[int], b: Sequence[int]) -> float:
    """:func:`edit_norm` over token ids (lists, numpy arrays or tensors)."""
    return edit_norm(_seq(a), _seq(b))


def copied_runs(source: str | Sequence, output: str | Sequence, min_n: int = 1) -> list[int]:
    """Lengths, in output order, of the runs of ``output`` copied verbatim from ``source``.

    A run is an ``"equal"`` block of rapidfuzz's ``Levenshtein.opcodes(source, output)``: a maximal
    stretch of the (one, rapidfuzz-chosen) minimal edit script where consecutive output tokens equal
    consecutive source tokens. Only runs of at least ``min_n`` tokens are returned, since an n-gram
    proposer needs ``min_n`` matching tokens before it can copy. With ``min_n=1`` the runs sum to
    the number of matched tokens, which is at least ``len(output) - levenshtein(source, output)``.
    """
    if isinstance(min_n, bool) or not isinstance(min_n, numbers.Real):
        raise TypeError(f"min_n must be an integer >= 1, got {min_n!r:.60}")
    if not (math.isfinite(min_n) and min_n >= 1 and min_n == int(min_n)):  # NaN fails too
        raise ValueError(f"min_n must be an integer >= 1, got {min_n}")
    ops = Levenshtein.opcodes(_seq(source), _seq(output))
    runs = (op.dest_end - op.dest_start for op in ops if op.tag == "equal")
    return [n for n in runs if n >= min_n]
