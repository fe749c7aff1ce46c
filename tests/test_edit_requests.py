"""Located change requests: the places cover exactly the changed lines, the text names them, and it is stable."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsd.edit_requests import (
    Place,
    anchor_lines,
    change_places,
    describe_place,
    located_request,
    quote_line,
    split_lines,
)

FILE = '''import os


class Client:
    """A client."""

    def __init__(self, url):
        self.url = url
        self.retries = 3

    def send(self, data):
        for _ in range(self.retries):
            pass
        return data


def parse_url(url):
    host = url.split(":")[0]
    return host
'''

LINES = st.lists(st.sampled_from(["a = 1\n", "b = 2\n", "\n", "def f():\n", "    return x\n", "# c\n", "x"]),
                 max_size=25)


def splice(before: str, after: str, places: list[Place]) -> str:
    """``before`` with each place's lines replaced by its lines of ``after``: the reference for coverage."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    out, pos = [], 0
    for p in places:
        out += a[pos:p.start] + b[p.new_start:p.new_end]
        pos = p.end
    return "".join(out + a[pos:])


@settings(max_examples=300, deadline=None)
@given(LINES, LINES, st.integers(1, 6))
def test_places_reconstruct_after_and_are_ordered(a, b, max_places):
    before, after = "".join(a), "".join(b)
    places = change_places(before, after, max_places)
    assert splice(before, after, places) == after  # outside the places, before's lines are kept
    assert len(places) <= max_places
    assert (not places) == (before.splitlines(keepends=True) == after.splitlines(keepends=True))
    for p, q in zip(places, places[1:]):
        assert p.end <= q.start and p.new_end <= q.new_start
        assert (p.end, p.new_end) != (q.start, q.new_start)  # separated by at least one kept line


@settings(max_examples=200, deadline=None)
@given(LINES, LINES)
def test_merging_keeps_every_changed_line(a, b):
    before, after = "".join(a), "".join(b)
    fine = change_places(before, after, 10 ** 6)
    coarse = change_places(before, after, 2)
    covered = {i for p in coarse for i in range(p.start, p.end)}
    assert {i for p in fine for i in range(p.start, p.end)} <= covered
    inserted = {(p.start, p.new_start) for p in fine if p.kind == "add"}
    for start, new_start in inserted:  # every insertion point lies in (or at the edge of) a coarse place
        assert any(q.start <= start <= q.end and q.new_start <= new_start <= q.new_end for q in coarse)


@settings(max_examples=200, deadline=None)
@given(LINES, LINES, st.text(max_size=30))
def test_request_names_each_place_by_its_true_anchors(a, b, subject):
    """Reference: the anchors found by a direct scan of ``before``'s lines, and the place's sizes."""
    before, after = "".join(a), "".join(b)
    places = change_places(before, after)
    if not places:
        with pytest.raises(ValueError, match="no change"):
            located_request(before, after, subject)
        return
    text = located_request(before, after, subject)
    assert text == located_request(before, after, subject)  # deterministic
    items = [ln for ln in text.splitlines() if ln.startswith("- ")]
    assert len(items) == len(places)
    lines = before.splitlines(keepends=True)
    for p, item in zip(places, items):
        old, new = p.end - p.start, p.new_end - p.new_start
        kept_above = [i for i in range(p.start) if lines[i].strip()]
        if kept_above:
            i = kept_above[-1]
            assert item.startswith(f"- after `{lines[i].strip()}` (line {i + 1})")
        else:
            assert "top of the file" in item
        if p.kind == "add":
            assert f"add about {new} new line" in item
        elif p.kind == "remove":
            assert f"remove the {'next' if kept_above or p.start else 'first'} " in item
            assert (f"{old} lines" in item) == (old > 1)
        else:
            assert f" with about {new} new line" in item
        kept_below = [j for j in range(p.end, len(lines)) if lines[j].strip()]
        assert anchor_lines(p, lines) == ((kept_above or [-1])[-1], (kept_below or [len(lines)])[0])
        if kept_below:
            j = kept_below[0]
            assert item.endswith(f"`{lines[j].strip()}`.")
            assert (j > p.end) == ("blank line" in item.split(", then")[-1])
        elif p.end < len(lines):  # only blank lines below: the file ends with them
            gap = len(lines) - p.end
            assert item.endswith(f"then continue with {gap} blank line{'s' if gap > 1 else ''} and end the file.")
        else:
            assert item.endswith("then end the file.")


def test_located_request_on_a_real_looking_edit():
    after = FILE.replace("        self.retries = 3\n", "").replace(
        "        for _ in range(self.retries):\n            pass\n", "        self.log(data)\n        self.flush()\n"
        "        self.count += 1\n").replace('    host = url.split(":")[0]\n',
                                           '    if not url:\n        raise ValueError("empty url")\n'
                                           '    host = url.split(":")[0]\n')
    text = located_request(FILE, after, "Drop retries")
    assert text.splitlines()[:2] == ["Drop retries", "Where:"]
    assert ("- after `self.url = url` (line 8) in `Client.__init__`: remove the next line, then continue with "
            "1 blank line and `def send(self, data):`.") in text
    assert ("- after `def send(self, data):` (line 11) in `Client.send`: replace the next 2 lines with about "
            "3 new lines, then continue from `return data`.") in text
    assert ("- after `def parse_url(url):` (line 17) in `parse_url`: add about 2 new lines, then continue from "
            "`host = url.split(\":\")[0]`.") in text
    assert text.endswith("Keep every other line as it is.")


def test_merging_joins_the_closest_places_first():
    before = "".join(f"v{i} = {i}\n" for i in range(30))
    lines = before.splitlines(keepends=True)
    for i in (2, 4, 20):  # gaps: 1 line between 2 and 4, 15 lines between 4 and 20
        lines[i] = lines[i].replace("=", "==")
    places = change_places(before, "".join(lines), max_places=2)
    assert [(p.start, p.end) for p in places] == [(2, 5), (20, 21)]


def test_scope_falls_back_when_the_file_does_not_parse():
    before, after = "def f(:\n    x = 1\n", "def f(:\n    x = 2\n"
    assert change_places(before, after)[0].scope == ""
    assert ("- after `def f(:` (line 1): replace the next line with about 1 new line, then end the file."
            in located_request(before, after, "s"))


def test_invalid_escapes_in_the_code_raise_no_warning():
    """Code with an invalid escape in a plain string (common in real files) is located without a warning."""
    import warnings

    before = 'import re\n\n\ndef digits(s):\n    return re.findall("\\d+", s)\n'
    after = before.replace("digits(s)", "digits(s, limit=None)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        request = located_request(before, after, "Add a limit")
    assert "digits" in request


def test_quotes_are_cut_and_blank_lines_skipped():
    long = "x = '" + "y" * 100 + "'\n"
    item = describe_place(Place("replace", 2, 3, 2, 3), [long, "\n", "a\n", "\n", "\n", "b\n"])
    assert "..." in item and len(item) < 200
    assert item.endswith("and 1 blank line: replace the next line with about 1 new line, then continue with "
                         "2 blank lines and `b`.")
    assert describe_place(Place("remove", 1, 2, 1, 1), ["\n", "a\n"]).startswith(
        "- after the 1 blank line at the top of the file: remove the next line")


def test_lines_that_differ_past_the_cut_or_in_indent_are_quoted_alike():
    head = "    result = compute(" + "a" * 60
    assert quote_line(head + "1)\n") == quote_line("  " + head + "2)")  # cut before the difference
    assert quote_line("x" * 60) == f"`{'x' * 60}`" and quote_line("x" * 61) == f"`{'x' * 60}...`"
    assert quote_line("return x\n") == quote_line("        return x") == "`return x`"
    assert quote_line("return x") != quote_line("return y") and quote_line("a `b`") == "`a 'b'`"


@pytest.mark.parametrize("args, err", [
    ((1, "a"), TypeError), (("a", None), TypeError)])
def test_bad_texts_are_rejected(args, err):
    with pytest.raises(err, match="before and after"):
        change_places(*args)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="max_places"):
        change_places("a\n", "b\n", 0)
    with pytest.raises(TypeError, match="subject"):
        located_request("a\n", "b\n", None)
    with pytest.raises(ValueError, match="kind"):
        Place("add", 0, 1, 0, 1)


def test_module_imports_only_the_standard_library():
    import ast

    import hybridsd.edit_requests as mod

    tree = ast.parse(open(mod.__file__, encoding="utf-8").read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_line_numbers_and_scopes_are_the_files_past_a_form_feed_or_a_unicode_line_break():
    """Python (and ``ast``) end lines only at \\n, \\r\\n, \\r: a form feed or U+2028 shifts no line number."""
    before = "import os\n\x0c\ndef f():\n    x = 1\n    y = 2\n    return x\n"
    request = located_request(before, before.replace("y = 2", "y = 20"), "s")
    assert "- after `x = 1` (line 4) in `f`: replace the next line" in request
    before = "def f():\n    s = 'a\u2028b'\n    return 1\n\n\ndef g():\n    return 2\n"
    request = located_request(before, before.replace("return 2", "return 3"), "s")
    assert "- after `def g():` (line 6) in `g`: replace the next line" in request
    crlf = "def f():\r\n    return 1\r\n"
    assert "- after `def f():` (line 1) in `f`:" in located_request(crlf, crlf.replace("1", "2"), "s")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab \n\r\x0c\u2028", max_size=30))
def test_split_lines_keeps_the_text_and_splits_at_python_line_ends(text):
    lines = split_lines(text)
    assert "".join(lines) == text and all(lines)
    for line in lines:
        body = line.removesuffix("\n").removesuffix("\r")
        assert "\n" not in body and "\r" not in body  # one line end, at the end
    assert all(line.endswith(("\n", "\r")) for line in lines[:-1])
    if "\x0c" not in text and "\u2028" not in text:
        assert lines == text.splitlines(keepends=True)


def test_blank_lines_the_file_ends_with_are_named():
    before = "a = 1\nb = 2\n\n\n"
    assert ("- after `a = 1` (line 1): replace the next line with about 1 new line, then continue with 2 blank "
            "lines and end the file.") in located_request(before, before.replace("b = 2", "b = 3"), "s")
    assert located_request("a = 1\nb = 2\n", "a = 1\nb = 3\n", "s").splitlines()[2].endswith(
        "then end the file.")


def test_an_insertion_at_the_top_is_in_no_scope():
    """Lines added above a file's first line are in no function, even when that line opens one."""
    for before in ("def f():\n    return 1\n", "@decorator\ndef f():\n    return 1\n"):
        (place,) = change_places(before, "import os\n\n\n" + before)
        assert (place.kind, place.start, place.scope) == ("add", 0, "")
        assert "- at the top of the file: add about 3 new lines, then continue from" in located_request(
            before, "import os\n\n\n" + before, "s")
    before = "def f():\n    return 1\n"
    assert change_places(before, before.replace("return 1", "x = 1\n    return 1"))[0].scope == "f"
