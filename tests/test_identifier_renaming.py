"""experiments.identifier_renaming and its use in the edit data: one injective renaming of a file's own names over
all texts of an edit, so the renamed edit is the same edit (same changed lines, same request places), the code
still compiles, and nothing changes when the share is 0."""

import ast
import dataclasses
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import identifier_renaming as ir
from experiments import zoo_data as zd
from experiments.edit_corpus import real_request
from experiments.synthetic_edits import synthetic_edit
from hybridsd.edit_requests import change_places, located_request

REPO = Path(__file__).resolve().parents[1]
FILES = sorted((REPO / "experiments").glob("[a-s]*.py"))[:12]  # real, varied Python files of this repository


def _names(text: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("share", [0.5, 1.0])
def test_a_renamed_file_compiles_and_renames_back(path, share):
    text = path.read_text()
    mapping = ir.renaming(text, random.Random(len(text)), share)
    assert mapping, "a real file defines names to rename"
    if share == 1.0:
        assert len(mapping) == len(ir.defined_names(text))  # every defined name
    assert len(set(mapping.values())) == len(mapping)  # injective
    assert not set(mapping.values()) & set(re.findall(r"\w+", text))  # new words only
    new = ir.apply_renaming(text, mapping)
    compile(new, path.name, "exec")
    assert new.count("\n") == text.count("\n")
    assert ir.apply_renaming(new, {v: k for k, v in mapping.items()}) == text  # exactly invertible
    assert not set(mapping) & _names(new)  # every renamed name is gone from the code
    for old, fresh in mapping.items():  # the old name's case style
        core, fresh_core = old.lstrip("_"), fresh.lstrip("_")
        assert len(old) - len(core) == len(fresh) - len(fresh_core)
        assert core[0].isupper() == fresh_core[0].isupper()


@pytest.mark.parametrize("path", FILES[:6], ids=lambda p: p.name)
def test_a_renamed_edit_is_the_same_edit(path):
    """An edit (lines removed, changed and added) renamed by one mapping: the same changed places, and its located
    request is the renamed file's (each quoted line renamed)."""
    before = path.read_text()
    lines = before.splitlines(keepends=True)
    k = len(lines) // 3
    after = "".join(lines[:k] + ["    extra = compute(value)\n"] + lines[k + 2: 2 * k] + lines[2 * k + 1:])
    subject = f"Rework {ir.defined_names(before)[0]}"
    b, a, s = ir.renamed((before, after, subject), random.Random(1), 1.0)
    mapping = ir.renaming(before, random.Random(1), 1.0)
    assert (b, a, s) == tuple(ir.apply_renaming(t, mapping) for t in (before, after, subject))
    assert change_places(b, a) == [dataclasses.replace(p, scope=ir.apply_renaming(p.scope, mapping))
                                   for p in change_places(before, after)]
    assert s != subject and located_request(b, a, s).count("\n") == located_request(before, after, subject).count("\n")


def test_what_is_defined_and_what_is_kept():
    src = ("import numpy as np\nimport os\n\nLIMIT = 3\n\n\nclass Fetcher:\n    def __init__(self, url, n=2):\n"
           "        self.url = url\n        self._tries = n\n\n    def fetch(self):\n"
           "        for item in range(LIMIT):\n            print(os.path.join(self.url, str(item)))\n"
           "        return len(self.url)\n")
    assert set(ir.defined_names(src)) == {"LIMIT", "Fetcher", "url", "_tries", "fetch", "item"}
    new = ir.apply_renaming(src, ir.renaming(src, random.Random(0), 1.0))
    for kept in ("import numpy as np", "import os", "def __init__(self,", "os.path.join", "range(", "print(",
                 "len(", "str("):
        assert kept in new
    assert "Fetcher" not in new and "LIMIT" not in new and "_tries" not in new
    assert ir.defined_names("def broken(:\n") == []


@settings(max_examples=60, deadline=None)
@given(names=st.lists(st.from_regex(r"[a-z][a-z_]{2,8}[a-z]", fullmatch=True)
                      .filter(lambda n: n not in ir.RESERVED),
                      min_size=1, max_size=6, unique=True),
       seed=st.integers(0, 10 ** 6), share=st.floats(0, 1))
def test_renaming_any_assignments(names, seed, share):
    src = "".join(f"{n} = {i}\n" for i, n in enumerate(names)) + f"total = {' + '.join(names)}\n"
    mapping = ir.renaming(src, random.Random(seed), share)
    assert set(mapping) <= set(names) | {"total"}
    new = ir.apply_renaming(src, mapping)
    env_old, env_new = {}, {}
    exec(src, env_old)
    exec(new, env_new)
    assert env_new[mapping.get("total", "total")] == env_old["total"]  # the same program under new names
    assert ir.renaming(src, random.Random(seed), share) == mapping  # deterministic
    assert ir.renamed((src,), random.Random(seed), 0.0) == (src,)


def test_share_must_be_a_probability():
    with pytest.raises(ValueError, match="share must be in"):
        ir.renamed(("x = 1\n",), random.Random(0), 1.5)


def test_edit_data_workers_change_nothing_at_share_zero_and_rename_at_one():
    before = FILES[0].read_text()
    after = before.replace("\n\n", "\n\n# a comment\n", 1)
    row = {"before": before, "after": after, "instruction": "Add a comment"}
    assert zd.renamed_real_row((row, "located", 6, 0.0, 5)) == (before, real_request((row, "located", 6)), after)
    b, q, a = zd.renamed_real_row((row, "located", 6, 1.0, 5))
    assert b != before and q == located_request(b, a, "Add a comment")
    assert [p.start for p in change_places(b, a)] == [p.start for p in change_places(before, after)]
    job = (11, before, FILES[1].read_text(), "located", 6, 0.5)
    assert zd.renamed_synthetic_edit((job, 0.0)) == synthetic_edit(job)
    shares = [zd.renamed_synthetic_edit(((s, *job[1:]), 1.0)) for s in range(6)]
    assert any(e is not None and e["before"] != before for e in shares)  # renamed files, edited
