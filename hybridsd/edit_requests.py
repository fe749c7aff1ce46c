"""Located change requests: what a real edit changed, said as where and how much, for a model to carry out.

A commit subject alone ("Some performance improvements") does not tell a model which lines to change, so
a small model cannot make the edit and copies its input. :func:`located_request` turns an edit
(``before``, ``after``, subject) into a request that names each changed place of ``before`` by its anchors:
the kept line just above it (quoted, with its line number and enclosing function or class), what happens to
the lines that follow (replaced by about N new lines, removed, or N new lines added) and the kept line the
file continues from. Copying the file, a model meets the quoted line above a place, writes its new lines and
resumes at the quoted line below, so the edit's size and position are given and only the new text inside
each place is left to the model. Pure Python (``difflib``, ``ast``), deterministic.

    >>> print(located_request("a = 1\\nb = 2\\nc = 3\\n", "a = 1\\nb = 20\\nc = 3\\n", "Raise b"))
    Raise b
    Where:
    - after `a = 1` (line 1): replace the next line with about 1 new line, then continue from `c = 3`.
    Keep every other line as it is.
"""

from __future__ import annotations

import ast
import difflib
import re
import warnings
from dataclasses import dataclass

KINDS = ("replace", "remove", "add")
QUOTE_CHARS = 60
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """``text``'s lines with their ends, split where Python ends a line (``\\n``, ``\\r\\n``, ``\\r``) so that
    line numbers are the file's and ``ast``'s; unlike ``str.splitlines``, a form feed or ``\\u2028`` ends none."""
    return _LINE.findall(text)


@dataclass(frozen=True)
class Place:
    """One changed region: lines ``[start, end)`` of ``before`` (0-based) become lines ``[new_start, new_end)``
    of ``after``; ``kind`` is ``"replace"``, ``"remove"`` (no new lines) or ``"add"`` (no old lines, inserted
    before line ``start``); ``scope`` is the innermost enclosing ``def``/``class`` (dotted), or ``""``."""

    kind: str
    start: int
    end: int
    new_start: int
    new_end: int
    scope: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Place.kind must be one of {KINDS}, got {self.kind!r}")
        if not (0 <= self.start <= self.end and 0 <= self.new_start <= self.new_end):
            raise ValueError(f"Place ranges must be ordered and non-negative, got {self}")
        expected = "add" if self.start == self.end else "remove" if self.new_start == self.new_end else "replace"
        if self.kind != expected:
            raise ValueError(f"Place.kind {self.kind!r} does not match its ranges (expected {expected!r})")


def _scopes(before: str) -> list[tuple[int, int, str]]:
    """(first line, last line, dotted name) of every def/class of ``before`` (1-based), outer before inner;
    empty when ``before`` does not parse."""
    try:
        with warnings.catch_warnings():  # the code's own invalid escapes ("\d" in a plain string) are not ours
            warnings.simplefilter("ignore", SyntaxWarning)  # Python >= 3.12
            warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.11
            tree = ast.parse(before)
    except (SyntaxError, ValueError, RecursionError):
        return []
    out: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((first, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def _scope_of(scopes: list[tuple[int, int, str]], line: int) -> str:
    """The innermost scope holding 1-based ``line`` (the last match: inner scopes come after outer ones)."""
    name = ""
    for first, last, n in scopes:
        if first <= line <= last:
            name = n
    return name


def change_places(before: str, after: str, max_places: int = 6) -> list[Place]:
    """The changed regions of ``before`` (a diff of :func:`split_lines`), at most ``max_places``: when there are
    more, the two neighbouring regions with the fewest unchanged lines between them are merged (leftmost first)
    until they fit, the unchanged lines between them joining the merged region. Sorted, non-overlapping."""
    if not isinstance(before, str) or not isinstance(after, str):
        raise TypeError("before and after must be str")
    if max_places < 1:
        raise ValueError(f"max_places must be >= 1, got {max_places}")
    a, b = split_lines(before), split_lines(after)
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    regions = [[i1, i2, j1, j2] for _, i1, i2, j1, j2 in ops]
    while len(regions) > max_places:
        gaps = [regions[k + 1][0] - regions[k][1] for k in range(len(regions) - 1)]
        k = gaps.index(min(gaps))
        regions[k:k + 2] = [[regions[k][0], regions[k + 1][1], regions[k][2], regions[k + 1][3]]]
    scopes = _scopes(before)
    places = []
    for i1, i2, j1, j2 in regions:
        kind = "add" if i1 == i2 else "remove" if j1 == j2 else "replace"
        anchor = i1 + 1 if kind != "add" else i1  # an insertion belongs to the line above it (none at the top)
        places.append(Place(kind, i1, i2, j1, j2, _scope_of(scopes, anchor)))
    return places


def quote_line(line: str) -> str:
    """How a request quotes ``line``: its stripped text in backquotes, cut after :data:`QUOTE_CHARS` characters
    ("..." added); two lines with the same quote are the same anchor to a reader of the request."""
    text = line.strip()
    if len(text) > QUOTE_CHARS:
        text = text[:QUOTE_CHARS].rstrip() + "..."
    return f"`{text.replace('`', chr(39))}`"


def _lines(n: int, adjective: str = "") -> str:
    return f"{n} {adjective}line" if n == 1 else f"{n} {adjective}lines"


def _blank(line: str) -> bool:
    return not line.strip()


def anchor_lines(place: Place, before_lines: list[str]) -> tuple[int, int]:
    """The lines of ``before`` (given as :func:`split_lines` of it, 0-based) that :func:`describe_place` quotes
    for ``place``: the nearest non-blank kept line above it (-1: none) and the first non-blank kept line below it
    (``len(before_lines)``: the place runs to the end of the file)."""
    above = place.start - 1
    while above >= 0 and _blank(before_lines[above]):
        above -= 1
    below = place.end
    while below < len(before_lines) and _blank(before_lines[below]):
        below += 1
    return above, below


def describe_place(place: Place, before_lines: list[str]) -> str:
    """One line of a request naming ``place`` in ``before`` (given as :func:`split_lines` of it) by its anchors:
    the nearest non-blank kept line above it (quoted, with its line number) and the kept line it continues from
    below (or the blank lines the file ends with)."""
    above, below = anchor_lines(place, before_lines)
    gap_above = place.start - 1 - above  # blank kept lines between the anchor and the place
    gap_below = below - place.end

    if above >= 0:
        where = f"after {quote_line(before_lines[above])} (line {above + 1})"
        where += f" and {_lines(gap_above, 'blank ')}" if gap_above else ""
    else:
        where = (f"after the {_lines(gap_above, 'blank ')} at the top of the file" if gap_above
                 else "at the top of the file")
    where += f" in `{place.scope}`" if place.scope else ""

    old, new = place.end - place.start, place.new_end - place.new_start
    first = "first" if above < 0 and not gap_above else "next"
    span = f"{first} line" if old == 1 else f"{first} {old} lines"
    if place.kind == "add":
        action = f"add about {_lines(new, 'new ')}"
    elif place.kind == "remove":
        action = f"remove the {span}"
    else:
        action = f"replace the {span} with about {_lines(new, 'new ')}"

    if below == len(before_lines):
        then = f"then continue with {_lines(gap_below, 'blank ')} and end the file" if gap_below \
            else "then end the file"
    elif gap_below:
        then = f"then continue with {_lines(gap_below, 'blank ')} and {quote_line(before_lines[below])}"
    else:
        then = f"then continue from {quote_line(before_lines[below])}"
    return f"- {where}: {action}, {then}."


def located_request(before: str, after: str, subject: str, max_places: int = 6) -> str:
    """A change request for turning ``before`` into ``after``: ``subject`` (e.g. the commit subject), then one
    line per changed place (see :func:`change_places`), then that every other line stays.

    Deterministic; raises ValueError when ``before == after`` (there is nothing to request).
    """
    if not isinstance(subject, str):
        raise TypeError("subject must be str")
    places = change_places(before, after, max_places)
    if not places:
        raise ValueError("before and after have the same lines: there is no change to request")
    lines = split_lines(before)
    body = "\n".join(describe_place(p, lines) for p in places)
    head = subject.strip() or "Edit the file."
    return f"{head}\nWhere:\n{body}\nKeep every other line as it is."
