"""difflib's matching blocks of two integer sequences, compiled.

:func:`matching_blocks` returns what ``difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()``
returns (no junk, no popular elements), block for block: the same longest-match search (the earliest block in ``a``,
then in ``b``, among the longest), the same order of sub-ranges and the same merging of adjacent blocks, in numba
instead of Python (7x faster on the token lists of synthetic edits; the whole of ``zoo_data.sft_examples``, where
tokenizing dominates, about 7% faster: experiments/results/zoo/data_prep_h200/). :func:`changed_spans` gives the
non-equal opcodes' ranges in ``b``. Used to weight the edit-tuning examples' tokens (``zoo_data.edit_positions``).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _blocks(a, b):  # a: (la,) int64, b: (lb,) int64 -> (n, 3) int64 [i, j, size], sorted, adjacent merged, sentinel
    la, lb = a.shape[0], b.shape[0]
    # b2j as CSR: the positions of each value of b, ascending
    order = np.argsort(b, kind="mergesort")
    values = b[order]
    # j2len of the previous and the current row of a, double-buffered; an entry is valid when its stamp is the
    # row's (a counter over every row of every search, so that no entry outlives its row)
    length = np.zeros((2, lb + 1), np.int64)
    stamp = np.full((2, lb + 1), -2, np.int64)
    t = np.int64(0)
    stack = np.empty((la + lb + 2, 4), np.int64)  # the sub-ranges still to search (difflib's queue, LIFO)
    found = np.empty((la + lb + 2, 3), np.int64)
    n_stack, n_found = 1, 0
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = 0, la, 0, lb
    while n_stack:
        n_stack -= 1
        alo, ahi, blo, bhi = stack[n_stack, 0], stack[n_stack, 1], stack[n_stack, 2], stack[n_stack, 3]
        besti, bestj, bestsize = alo, blo, 0
        t += 2  # the first row reads no entry of an earlier search
        for i in range(alo, ahi):
            t += 1
            cur, prev = t & 1, (t - 1) & 1
            x = a[i]
            lo = np.searchsorted(values, x, side="left")
            hi = np.searchsorted(values, x, side="right")
            for p in range(lo, hi):
                j = order[p]
                if j < blo:
                    continue
                if j >= bhi:
                    break
                k = 1
                if j > 0 and stamp[prev, j - 1] == t - 1:
                    k = length[prev, j - 1] + 1
                length[cur, j] = k
                stamp[cur, j] = t
                if k > bestsize:
                    besti, bestj, bestsize = i - k + 1, j - k + 1, k
        if bestsize:
            found[n_found, 0], found[n_found, 1], found[n_found, 2] = besti, bestj, bestsize
            n_found += 1
            if alo < besti and blo < bestj:
                stack[n_stack, 0], stack[n_stack, 1], stack[n_stack, 2], stack[n_stack, 3] = alo, besti, blo, bestj
                n_stack += 1
            if besti + bestsize < ahi and bestj + bestsize < bhi:
                stack[n_stack, 0], stack[n_stack, 1] = besti + bestsize, ahi
                stack[n_stack, 2], stack[n_stack, 3] = bestj + bestsize, bhi
                n_stack += 1
    found = found[:n_found][np.argsort(found[:n_found, 0], kind="mergesort")]  # blocks never share an i
    out = np.empty((n_found + 1, 3), np.int64)
    n_out = 0
    i1 = j1 = k1 = 0
    for r in range(n_found):
        i2, j2, k2 = found[r, 0], found[r, 1], found[r, 2]
        if i1 + k1 == i2 and j1 + k1 == j2:
            k1 += k2
        else:
            if k1:
                out[n_out, 0], out[n_out, 1], out[n_out, 2] = i1, j1, k1
                n_out += 1
            i1, j1, k1 = i2, j2, k2
    if k1:
        out[n_out, 0], out[n_out, 1], out[n_out, 2] = i1, j1, k1
        n_out += 1
    out[n_out, 0], out[n_out, 1], out[n_out, 2] = la, lb, 0
    return out[: n_out + 1]


def matching_blocks(a, b) -> list[tuple[int, int, int]]:
    """``difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()`` of two integer sequences, as
    (i, j, size) tuples ending with the sentinel (len(a), len(b), 0)."""
    blocks = _blocks(np.asarray(a, dtype=np.int64).reshape(-1), np.asarray(b, dtype=np.int64).reshape(-1))
    return [tuple(int(v) for v in row) for row in blocks]


def changed_spans(a, b) -> list[tuple[int, int]]:
    """(j1, j2) of every non-equal opcode of ``SequenceMatcher(None, a, b, autojunk=False).get_opcodes()``, in order:
    the ranges of ``b`` that differ from ``a`` (empty where ``a``'s tokens were only deleted)."""
    spans, i, j = [], 0, 0
    for ai, bj, size in matching_blocks(a, b):
        if i < ai or j < bj:
            spans.append((j, bj))
        i, j = ai + size, bj + size
    return spans
