"""Loaders, prompt formats, edit-norm filters and bin resampling."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DATA_DIR
from hybridsd.data import (
    CHANGE_REQUESTS,
    Example,
    bin_index,
    blazedit_prompt,
    default_data_dir,
    filter_by_edit_norm,
    instructcoder_prompt,
    load_code_edits,
    load_editeval,
    load_mt_bench,
    resample_by_bins,
    token_level_edit_norm,
)
from hybridsd.edit_distance import edit_norm

DATA = DATA_DIR
needs_data = pytest.mark.skipif(not (DATA / "code_edits_dev.jsonl").is_file(), reason="shared data not present")
HYP = settings(max_examples=50, deadline=None)


class CharTokenizer:
    """Duck-typed tokenizer: one id per character."""

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _edit_row(i: int, before: str, after: str) -> dict:
    return {"id": f"r{i}", "repo": "o/n", "commit": "c" * 40, "path": "a.py", "license": "MIT",
            "instruction": f"change {i}", "before": before, "after": after,
            "char_edit_norm": round(edit_norm(before, after), 6)}


def test_prompt_formats():
    assert blazedit_prompt("x = 1", "rename x") == (
        "Given a code file, please apply the change requests and generate the new file.\n\n"
        "Original file:\n```python\nx = 1\n```\n\nChange request:\nrename x\n\n"
        'Please generate the new code file in the "New file" section below.')
    assert instructcoder_prompt("def f(): pass", "Add a docstring.") == (
        "def f(): pass\n\nAdd a docstring. Just output the code, do not include any explanation.")


def test_load_code_edits(tmp_path):
    rows = [_edit_row(0, "a = 1\n", "a = 2\n"), _edit_row(1, "print('hi')\n", "print('hi')\nprint('yo')\n"),
            _edit_row(2, "x", "x")]
    path = _write(tmp_path / "edits.jsonl", rows)
    exs = load_code_edits(path)
    assert [e.id for e in exs] == ["r0", "r1", "r2"]
    e0 = exs[0]
    assert e0.source == "code_edits"
    assert e0.prompt == blazedit_prompt("a = 1\n", "change 0")
    assert (e0.reference, e0.input_text) == ("a = 2\n", "a = 1\n")
    assert e0.edit_norm == rows[0]["char_edit_norm"]
    assert e0.meta == {"repo": "o/n", "commit": "c" * 40, "path": "a.py", "license": "MIT",
                       "instruction": "change 0"}
    assert [e.id for e in load_code_edits(path, min_distance=0.1)] == ["r0", "r1"]
    assert [e.id for e in load_code_edits(path, max_distance=0.0)] == ["r2"]
    assert [e.id for e in load_code_edits(path, limit=2)] == ["r0", "r1"]


def test_load_editeval_and_mt_bench(tmp_path):
    ee = _write(tmp_path / "ee.jsonl", [{"task_id": "EditEval/0", "instruction": "Fix it. ", "context": "",
                                         "input": "x=1", "output": "x = 1", "test": "", "author": "a",
                                         "license": "MIT", "char_edit_norm": 0.4}])
    (ex,) = load_editeval(ee)
    assert ex.prompt == "x=1\n\nFix it.  Just output the code, do not include any explanation."
    assert (ex.reference, ex.input_text, ex.source, ex.edit_norm) == ("x = 1", "x=1", "editeval", 0.4)
    assert load_editeval(ee, max_distance=0.3) == []
    mt = _write(tmp_path / "mt.jsonl", [{"question_id": 81, "category": "writing", "turns": ["one", "two"]},
                                        {"question_id": 82, "category": "math", "turns": ["a", "b"],
                                         "reference": ["r"]}])
    first, second = load_mt_bench(mt)
    assert (first.id, first.prompt, first.reference, first.input_text) == ("81", "one", "", None)
    assert math.isnan(first.edit_norm)
    assert second.meta["reference"] == ["r"] and "reference" not in first.meta
    assert len(load_mt_bench(mt, limit=1)) == 1


def test_missing_files_name_the_path(tmp_path, monkeypatch):
    missing = tmp_path / "nope.jsonl"
    for loader in (load_code_edits, load_editeval, load_mt_bench):
        with pytest.raises(FileNotFoundError, match="nope.jsonl"):
            loader(missing)
    monkeypatch.setenv("HYBRIDSD_DATA", str(tmp_path))
    assert default_data_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "code_edits_dev.jsonl")):
        load_code_edits()
    monkeypatch.setenv("HYBRIDSD_DATA", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="HYBRIDSD_DATA"):
        default_data_dir()


def test_example_validation():
    with pytest.raises(ValueError):
        Example(id="", source="s", prompt="p", reference="r", edit_norm=0.1)
    with pytest.raises(ValueError):
        Example(id="a", source="s", prompt="p", reference="r", edit_norm=1.5)


@pytest.mark.parametrize("field, value, match", [
    ("id", 7, "Example.id must be a string"),
    ("source", None, "Example.source must be a string"),
    ("prompt", b"p", "Example.prompt must be a string"),
    ("reference", 1.0, "Example.reference must be a string"),
    ("input_text", 3, "Example.input_text must be a string or None"),
    ("edit_norm", "0.1", "Example.edit_norm must be a number"),
    ("edit_norm", True, "Example.edit_norm must be a number"),
    ("edit_norm", None, "Example.edit_norm must be a number"),
    ("meta", [], "Example.meta must be a dict"),
])
def test_example_refuses_wrong_types(field, value, match):
    fields = dict(id="a", source="s", prompt="p", reference="r", edit_norm=0.1)
    with pytest.raises(TypeError, match=match):
        Example(**{**fields, field: value})
    ok = Example(**{**fields, "edit_norm": np.float32(0.25), "input_text": None})  # numpy reals are numbers
    assert ok.edit_norm == 0.25


def _examples(norms):
    return [Example(id=str(i), source="t", prompt="", reference="", edit_norm=e) for i, e in enumerate(norms)]


@HYP
@given(norms=st.lists(st.floats(0, 1), max_size=30), lo=st.floats(0, 1), width=st.floats(0, 1))
def test_filter_by_char_edit_norm(norms, lo, width):
    exs = _examples(norms)
    kept = filter_by_edit_norm(exs, lo, lo + width)
    assert kept == [e for e in exs if lo <= e.edit_norm <= lo + width]  # same order


def test_filter_by_token_edit_norm():
    exs = [Example(id="a", source="t", prompt="", reference="abcd", edit_norm=0.0, input_text="abce"),
           Example(id="b", source="t", prompt="", reference="abcd", edit_norm=0.9, input_text="abcd"),
           Example(id="c", source="t", prompt="", reference="abcd", edit_norm=0.0)]
    tok = CharTokenizer()
    assert token_level_edit_norm(exs[0], tok) == 0.25
    assert [e.id for e in filter_by_edit_norm(exs, 0.0, 0.1, level="token", tokenizer=tok)] == ["b"]
    with pytest.raises(ValueError):
        filter_by_edit_norm(exs, 0.0, 0.1, level="token")
    with pytest.raises(ValueError):
        filter_by_edit_norm(exs, 0.0, 0.1, level="word", tokenizer=tok)
    with pytest.raises(ValueError, match=r"lo \(0.5\) must be <= hi \(0.1\)"):
        filter_by_edit_norm(exs, 0.5, 0.1)
    for lo, hi, name in ((math.nan, 0.5, "lo"), (0.0, math.nan, "hi"), (None, 0.5, "lo")):  # NaN used to keep none
        with pytest.raises(ValueError, match=rf"{name} must be a number, got"):
            filter_by_edit_norm(exs, lo, hi)
    with pytest.raises(ValueError):
        token_level_edit_norm(exs[2], tok)


def test_bin_index():
    edges = [0.0, 0.1, 0.2, 0.6]
    assert bin_index([0.0, 0.05, 0.1, 0.2, 0.6, 0.61, -0.1, float("nan")], edges).tolist() == [0, 0, 1, 2, 2, -1,
                                                                                               -1, -1]
    with pytest.raises(ValueError):
        bin_index([0.1], [0.2, 0.1])


@HYP
@given(norms=st.lists(st.floats(0, 1), max_size=60), per_bin=st.integers(1, 5), seed=st.integers(0, 3))
def test_resample_by_bins(norms, per_bin, seed):
    exs = _examples(norms)
    edges = [0.0, 0.2, 0.4, 0.6]
    out = resample_by_bins(exs, edges, per_bin, seed)
    assert out == resample_by_bins(exs, edges, per_bin, seed)  # deterministic
    idx = bin_index([e.edit_norm for e in out], edges)
    assert (idx >= 0).all() and list(idx) == sorted(idx)  # by bin
    everyone = bin_index(norms, edges)
    for b in range(3):
        assert (idx == b).sum() == min(per_bin, (everyone == b).sum())
    assert len({e.id for e in out}) == len(out)  # no repeats
    positions = [int(e.id) for e in out]
    for b in range(3):
        in_bin = [p for p, i in zip(positions, idx) if i == b]
        assert in_bin == sorted(in_bin)
    with pytest.raises(ValueError):
        resample_by_bins(exs, edges, 0)


@needs_data
def test_real_data():
    edits = load_code_edits(DATA / "code_edits_dev.jsonl")
    assert len(edits) == 3724
    assert all(0.01 <= e.edit_norm <= 0.6 for e in edits)
    assert edits[0].prompt.startswith("Given a code file, please apply the change requests")
    assert edits[0].prompt == blazedit_prompt(edits[0].input_text, edits[0].meta["instruction"])
    assert len(load_editeval(DATA / "editeval.jsonl")) == 194
    mt = load_mt_bench(DATA / "mt_bench.jsonl")
    assert len(mt) == 80 and mt[0].id == "81"
    spread = resample_by_bins(edits, [0.0, 0.2, 0.4, 0.6], 30, seed=0)
    assert len(spread) == 90


# ---- bad rows in the project's files, and the Hub datasets through `datasets` -------------------------------
def test_bad_rows_name_file_line_and_field(tmp_path):
    bad = tmp_path / "mt_bench.jsonl"
    bad.write_text('{"question_id": 1, "turns": ["a"]}\n\n{"question_id": 2, "turns": \n')
    with pytest.raises(ValueError, match=r"mt_bench.jsonl line 3 is not valid JSON"):
        load_mt_bench(bad)
    bad.write_text('{"question_id": 1, "turns": ["a"]}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"line 2 is not a JSON object"):
        load_mt_bench(bad)
    bad.write_text('{"question_id": 1, "turns": ["a"]}\n{"question_id": 2}\n')
    with pytest.raises(ValueError, match=r"mt_bench.jsonl line 2: the row has no field 'turns'"):
        load_mt_bench(bad)
    bad.write_text('{"question_id": 1, "turns": []}\n')
    with pytest.raises(ValueError, match=r"line 1: 'turns' must be a non-empty list"):
        load_mt_bench(bad)
    edits = _write(tmp_path / "e.jsonl", [{k: v for k, v in _edit_row(0, "a", "b").items() if k != "after"}])
    with pytest.raises(ValueError, match=r"e.jsonl line 1: the row has no field 'after'"):
        load_code_edits(edits)


def test_bad_values_and_bytes_name_file_line_and_field(tmp_path):
    edits = tmp_path / "e.jsonl"
    good = json.dumps(_edit_row(0, "a", "b"))
    for value, words in (('"abc"', "must be a number in [0, 1], got 'abc'"), ("1.5", "must be in [0, 1], got 1.5"),
                         ("NaN", "must be in [0, 1], got nan")):
        edits.write_text(good + "\n" + good.replace('"char_edit_norm": 1.0', f'"char_edit_norm": {value}') + "\n")
        with pytest.raises(ValueError) as e:
            load_code_edits(edits)
        assert "e.jsonl line 2: 'char_edit_norm' " + words in str(e.value)
    edits.write_bytes(good.encode() + b"\n\xff\xfe{\n")
    with pytest.raises(ValueError, match=r"e.jsonl line 2 is not UTF-8"):
        load_code_edits(edits)


def test_limits(tmp_path):
    edits = _write(tmp_path / "e.jsonl", [_edit_row(i, "a", "b") for i in range(3)])
    assert [e.id for e in load_code_edits(edits, limit=0)] == []
    assert [e.id for e in load_code_edits(edits, limit=2)] == ["r0", "r1"]
    mt = _write(tmp_path / "mt.jsonl", [{"question_id": i, "turns": ["q"]} for i in range(3)])
    assert len(load_mt_bench(mt, limit=0)) == 0
    for loader, path in ((load_code_edits, edits), (load_mt_bench, mt)):
        with pytest.raises(ValueError, match="limit must be None or an int >= 0, got -1"):
            loader(path, limit=-1)


def _hub_forms(tmp_path, columns: dict, name: str) -> list[Path]:
    """The same table as a save_to_disk folder, a DatasetDict folder, parquet, JSONL and a folder of JSONL."""
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(columns)
    ds.save_to_disk(str(tmp_path / f"{name}_disk"))
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / f"{name}_dict"))
    ds.to_parquet(str(tmp_path / f"{name}.parquet"))
    rows = [dict(zip(columns, v)) for v in zip(*columns.values())]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / f"{name}.jsonl").write_text(text)
    (tmp_path / f"{name}_jsonl").mkdir()
    (tmp_path / f"{name}_jsonl" / "part-0.jsonl").write_text(text)
    return [tmp_path / f"{name}{s}" for s in ("_disk", "_dict", ".parquet", ".jsonl", "_jsonl")]


def test_a_seed_takes_the_rows_in_the_order_vllm_streams_them(tmp_path):
    """With a seed the rows come as vLLM's benchmark datasets read them: `datasets` streams the data files (a shard
    each: here three of unequal size) and shuffles them with the seed; ids stay the rows' own indices, equal rows
    included. A saved dataset streams as one shard."""
    datasets = pytest.importorskip("datasets")
    from hybridsd.data import load_hf

    n = 1300  # over the stream's 1,000-row shuffle buffer
    codes = [f"x = {i % 1100}\n" for i in range(n)]  # rows 1100.. repeat rows 0..
    (tmp_path / "edits" / "data").mkdir(parents=True)
    for i, (a, b) in enumerate([(0, 200), (200, 1000), (1000, n)]):
        datasets.Dataset.from_dict({"code": codes[a:b], "change_request": ["c"] * (b - a),
                                    "norm_distance": [0.1] * (b - a)}).to_parquet(
            str(tmp_path / "edits" / "data" / f"train-{i:05d}-of-00003.parquet"))
    for seed in (0, 7):
        exs = load_hf(str(tmp_path / "edits"), shuffle_seed=seed)
        vllm = datasets.load_dataset(str(tmp_path / "edits"), split="train", streaming=True).shuffle(seed=seed)
        assert [e.input_text for e in exs] == [r["code"] for r in vllm]
        assert sorted(int(e.id) for e in exs) == list(range(n)) and all(codes[int(e.id)] == e.input_text for e in exs)
    assert [e.id for e in exs] != [e.id for e in load_hf(str(tmp_path / "edits"), shuffle_seed=0)]
    assert [e.id for e in load_hf(str(tmp_path / "edits"))] == [str(i) for i in range(n)]  # no seed: file order

    ds = datasets.load_dataset(str(tmp_path / "edits"), split="train")
    for seed in (None, 0):  # a limit: the first examples that pass the filter, the stream read no further
        full = load_hf(str(tmp_path / "edits"), shuffle_seed=seed, max_distance=0.1)
        assert [e.id for e in load_hf(str(tmp_path / "edits"), shuffle_seed=seed, max_distance=0.1, limit=7)] == \
            [e.id for e in full][:7]
    bad = ds.to_list()
    bad[-1]["norm_distance"] = None  # the file order's last row: read only without a limit
    (tmp_path / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad))
    assert len(load_hf(str(tmp_path / "bad.jsonl"), limit=3)) == 3
    with pytest.raises(ValueError, match="norm_distance"):
        load_hf(str(tmp_path / "bad.jsonl"))
    ds.save_to_disk(str(tmp_path / "saved"))
    one = [r["code"] for r in ds.to_iterable_dataset(num_shards=1).shuffle(seed=3)]
    assert [e.input_text for e in load_hf(str(tmp_path / "saved"), shuffle_seed=3)] == one


def test_hub_datasets_in_every_local_form(tmp_path):
    from hybridsd.data import load_hf

    blazedit = {"code": ["a = 1\n", "b = 2\n", "c = 3\n"], "change_request": ["x", "y", "z"],
                "norm_distance": [0.005, 0.1, 0.3]}
    mt = {"question_id": [81, 82], "category": ["writing", "math"], "turns": [["first", "second"], ["q", "r"]]}
    ic = {"instruction": ["Add a docstring."], "input": ["def f(): pass"], "output": ["def f():\n  '''d'''\n"]}
    for path in _hub_forms(tmp_path, blazedit, "edits"):
        exs = load_hf(str(path), min_distance=0.01, max_distance=0.25)
        assert [(e.id, e.prompt, e.edit_norm, e.source) for e in exs] == [("1", blazedit_prompt("b = 2\n", "y"), 0.1,
                                                                           "blazedit")], path
        assert len(load_hf(str(path))) == 3
    for path in _hub_forms(tmp_path, mt, "questions"):
        exs = load_hf(str(path))
        assert [(e.id, e.prompt, e.source) for e in exs] == [("81", "first", "mt_bench"), ("82", "q", "mt_bench")]
    for path in _hub_forms(tmp_path, ic, "ic"):
        (e,) = load_hf(str(path))
        assert e.prompt == instructcoder_prompt("def f(): pass", "Add a docstring.") and e.source == "instructcoder"


def test_hub_dataset_errors(tmp_path):
    from hybridsd.data import hf_kind, load_hf

    (wrong,) = _hub_forms(tmp_path, {"question": ["a"]}, "wrong")[2:3]
    with pytest.raises(ValueError, match=r"has columns \['question'\]; expected the columns of blazedit"):
        load_hf(str(wrong))
    with pytest.raises(ValueError, match=r"expected the columns of blazedit \['code', 'change_request', "
                                         r"'norm_distance'\]$"):
        hf_kind("vdaita/edit_5k_char", ["code", "change_request"])  # the id says Blazedit: name its columns
    assert hf_kind("philschmid/mt-bench", ["turns", "question_id"]) == "mt-bench"
    assert hf_kind("somebody/anything", ["instruction", "input", "output"]) == "instructcoder"
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_hf(str(tmp_path / "missing.parquet"))
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a save_to_disk folder nor parquet/JSONL"):
        load_hf(str(tmp_path / "notes.txt"))
    (tmp_path / "bad.jsonl").write_text('{"turns": ["a"]}\n{"turns": \n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 2 is not a JSON object"):
        load_hf(str(tmp_path / "bad.jsonl"))
    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=rf"{name}: no rows \(its JSONL files are empty\)$"):
            load_hf(str(tmp_path / name))
    (tmp_path / "bytes.jsonl").write_bytes(b'{"turns": ["a"]}\n{"turns": ["\xff"]}\n')
    with pytest.raises(ValueError, match=r"bytes.jsonl row 1: a text field is not UTF-8"):
        load_hf(str(tmp_path / "bytes.jsonl"))
    (tmp_path / "far.jsonl").write_text('{"code": "a", "change_request": "x", "norm_distance": 0.2}\n'
                                        '{"code": "b", "change_request": "y", "norm_distance": 3.7}\n')
    with pytest.raises(ValueError, match=r"far.jsonl row 1: 'norm_distance' must be in \[0, 1\], got 3.7"):
        load_hf(str(tmp_path / "far.jsonl"))


def test_hub_ids_fall_back_to_the_row_index(tmp_path):
    """A question id that is missing in some rows (``datasets`` fills null) gives way to the row's index."""
    from hybridsd.data import load_hf

    (tmp_path / "mt-bench.jsonl").write_text('{"question_id": 81, "turns": ["a"]}\n{"turns": ["b"]}\n')
    assert [e.id for e in load_hf(str(tmp_path / "mt-bench.jsonl"))] == ["81", "1"]


def test_code_edit_change_requests(tmp_path):
    """``subject`` prompts carry the commit subject alone; ``located`` ones the request naming the changed places."""
    from hybridsd.data import load_code_edits
    from hybridsd.edit_requests import located_request

    before, after = "a = 1\nb = 2\nc = 3\n", "a = 1\nb = 20\nc = 3\n"
    path = _write(tmp_path / "code_edits_dev.jsonl", [_edit_row(0, before, after)])
    subject, = load_code_edits(path)
    located, = load_code_edits(path, change_request="located")
    assert subject.prompt == blazedit_prompt(before, "change 0")
    assert located.prompt == blazedit_prompt(before, located_request(before, after, "change 0", 6))
    assert "after `a = 1` (line 1): replace the next line with about 1 new line, then continue from `c = 3`" \
           in located.prompt
    assert (located.reference, located.edit_norm) == (subject.reference, subject.edit_norm)
    with pytest.raises(ValueError, match="change_request must be one of"):
        load_code_edits(path, change_request="free text")


def test_code_edits_keep_the_given_ids_in_file_order(tmp_path, monkeypatch):
    """``ids`` keeps those rows (file order, after the distance filter) and builds no prompt for the others."""
    from hybridsd import data, edit_requests

    rows = [_edit_row(i, f"x = {i}\ny = 0\n", f"x = {i}\ny = 1\n") for i in range(5)]
    path = _write(tmp_path / "code_edits_dev.jsonl", rows)
    every = data.load_code_edits(path, change_request="located")
    built = []
    real = edit_requests.located_request
    monkeypatch.setattr(edit_requests, "located_request", lambda *a: built.append(a[0]) or real(*a))
    ids = {every[3].id, every[1].id, "no such id"}
    kept = data.load_code_edits(path, change_request="located", ids=ids)
    assert [e.id for e in kept] == [every[1].id, every[3].id]
    assert [e.prompt for e in kept] == [every[1].prompt, every[3].prompt]
    assert built == [every[1].input_text, every[3].input_text]  # the others' requests are never built
    assert data.load_code_edits(path, ids=set()) == []


def test_local_copies_give_the_split_asked_for(tmp_path):
    """A folder of split-named files (a Hub repository's layout) gives the asked split alone; a lone file, files
    that name no split and a saved dataset are one split (``train``, or the saved one's); any other is an error
    naming the splits there are."""
    datasets = pytest.importorskip("datasets")
    from hybridsd.data import load_hf

    def questions(path: Path, ids) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        return _write(path, [{"question_id": i, "turns": [f"q{i}"]} for i in ids])

    snap = tmp_path / "snapshot"
    questions(snap / "data" / "train-00000.jsonl", [1, 2])
    questions(snap / "data" / "test-00000.jsonl", [10, 11])
    assert [e.id for e in load_hf(str(snap))] == ["1", "2"]
    assert [e.id for e in load_hf(str(snap), split="test")] == ["10", "11"]
    with pytest.raises(ValueError, match=r"snapshot has splits \['test', 'train'\], not 'validation'"):
        load_hf(str(snap), split="validation")
    questions(snap / "data" / "extra.jsonl", [20])
    with pytest.raises(ValueError, match=r"extra.jsonl is in no split \(the other files' names make the splits "
                                         r"\['test', 'train'\]\)"):
        load_hf(str(snap))

    lone = questions(tmp_path / "test.jsonl", [1])
    assert [e.id for e in load_hf(str(lone))] == ["1"]
    with pytest.raises(ValueError, match=r"test.jsonl has splits \['train'\], not 'test'"):
        load_hf(str(lone), split="test")
    unnamed = tmp_path / "parts"
    questions(unnamed / "part-0.jsonl", [1])
    questions(unnamed / ".cache" / "notes.json", [9])  # hidden: not data
    assert [e.id for e in load_hf(str(unnamed))] == ["1"]
    with pytest.raises(ValueError, match=r"parts has splits \['train'\], not 'test'"):
        load_hf(str(unnamed), split="test")

    saved = datasets.load_dataset("json", data_files={"test": str(snap / "data" / "test-00000.jsonl")}, split="test")
    saved.save_to_disk(str(tmp_path / "saved_test"))
    assert [e.id for e in load_hf(str(tmp_path / "saved_test"), split="test")] == ["10", "11"]
    with pytest.raises(ValueError, match=r"saved_test has splits \['test'\], not 'train'"):
        load_hf(str(tmp_path / "saved_test"))


def test_local_digest_follows_the_files_not_their_place(tmp_path):
    import shutil

    from hybridsd.data import local_digest

    folder = tmp_path / "a"
    folder.mkdir()
    _write(folder / "train.jsonl", [{"question_id": 1, "turns": ["q"]}])
    first = local_digest(folder)
    assert len(first) == 12 and local_digest(folder) == first
    shutil.copytree(folder, tmp_path / "b")
    assert local_digest(tmp_path / "b") == first  # a copy elsewhere
    (tmp_path / "b" / "train.jsonl").rename(tmp_path / "b" / "test.jsonl")
    assert local_digest(tmp_path / "b") != first  # the same bytes in another split
    _write(folder / "train.jsonl", [{"question_id": 1, "turns": ["another"]}])
    assert local_digest(folder) != first
    assert local_digest(folder / "train.jsonl") not in (None, local_digest(folder))
    assert local_digest("nobody/no-such-data") is None  # a Hub id


def test_bad_distance_bounds_are_named_before_any_reading(tmp_path):
    """Swapped, NaN or non-number bounds are an error naming them (they used to keep nothing), before the file is
    read (a missing one is not reached)."""
    from hybridsd.data import load_hf

    missing = tmp_path / "nope.jsonl"
    for loader in (load_code_edits, load_editeval, load_hf):
        with pytest.raises(ValueError, match=r"min_distance \(0.25\) must be <= max_distance \(0.01\)"):
            loader(str(missing), min_distance=0.25, max_distance=0.01)
        with pytest.raises(ValueError, match="max_distance must be None or a number, got nan"):
            loader(str(missing), max_distance=float("nan"))
        with pytest.raises(ValueError, match="min_distance must be None or a number, got '0.01'"):
            loader(str(missing), min_distance="0.01")
    edits = _write(tmp_path / "e.jsonl", [_edit_row(0, "a = 1\n", "a = 2\n")])
    assert len(load_code_edits(edits, min_distance=0, max_distance=1)) == 1  # ints are numbers


def test_rows_name_every_missing_field_and_non_text(tmp_path):
    row = {k: v for k, v in _edit_row(0, "a", "b").items() if k not in ("after", "instruction")}
    with pytest.raises(ValueError, match=r"e.jsonl line 1: the row has no fields 'after', 'instruction'$"):
        load_code_edits(_write(tmp_path / "e.jsonl", [row]))
    for field, value, kind in (("before", 5, "int"), ("instruction", ["a", "b"], "list")):
        path = _write(tmp_path / "t.jsonl", [dict(_edit_row(0, "a", "b"), **{field: value})])
        for mode in CHANGE_REQUESTS:
            with pytest.raises(ValueError, match=rf"t.jsonl line 1: '{field}' must be a string, got {kind}"):
                load_code_edits(path, change_request=mode)
    ee = _write(tmp_path / "ee.jsonl", [{"task_id": "t", "input": 3, "instruction": "i", "output": "o",
                                         "char_edit_norm": 0.1}])
    with pytest.raises(ValueError, match=r"ee.jsonl line 1: 'input' must be a string, got int"):
        load_editeval(ee)
    (tmp_path / "hub.jsonl").write_text('{"code": "a", "change_request": "x", "norm_distance": 0.2}\n'
                                        '{"code": 7, "change_request": "y", "norm_distance": 0.2}\n')
    from hybridsd.data import load_hf

    with pytest.raises(ValueError, match=r"hub.jsonl row 1: 'code' must be a string, got int"):
        load_hf(str(tmp_path / "hub.jsonl"))


def test_located_requests_skip_filtered_rows_and_name_a_row_without_an_edit(tmp_path):
    rows = [_edit_row(0, "a = 1\n", "a = 2\n"), _edit_row(1, "b = 1\n", "b = 1\n")]
    path = _write(tmp_path / "e.jsonl", rows)
    assert [e.id for e in load_code_edits(path, change_request="located", min_distance=0.01)] == ["r0"]
    assert [e.id for e in load_code_edits(path, change_request="located", ids={"r0"})] == ["r0"]
    with pytest.raises(ValueError, match=r"e.jsonl line 2: before and after have the same lines"):
        load_code_edits(path, change_request="located")
    with pytest.raises(ValueError, match="ids must be a collection of ids, not one string"):
        load_code_edits(path, ids="r0")


def test_columns_decide_the_kind_over_a_word_in_a_folder_name(tmp_path):
    """A hint word in a parent folder ('blazedit-study') does not override the columns the data has."""
    from hybridsd.data import hf_kind, load_hf

    folder = tmp_path / "blazedit-study" / "mt_bench_runs"
    folder.mkdir(parents=True)
    (folder / "ic.jsonl").write_text(json.dumps({"instruction": "Add a docstring.", "input": "def f(): pass"}) + "\n")
    (e,) = load_hf(str(folder / "ic.jsonl"))
    assert e.source == "instructcoder"
    assert hf_kind("likaixin/InstructCoder", ["instruction", "input", "turns"]) == "instructcoder"  # id breaks ties
    assert hf_kind("philschmid/mt-bench", ["instruction", "input", "turns"]) == "mt-bench"
    with pytest.raises(ValueError, match=r"expected the columns of mt-bench \['turns'\]$"):
        hf_kind("philschmid/mt-bench", ["question"])


@pytest.mark.parametrize("fmt", ["numpy", "pandas", "torch", "arrow"])
def test_a_saved_dataset_reads_as_python_values_whatever_its_format(tmp_path, fmt):
    """``save_to_disk`` keeps a ``set_format``; rows are read as Python values all the same (a torch-formatted
    one used to give ids like 'tensor(81)', the others errors)."""
    datasets = pytest.importorskip("datasets")
    from hybridsd.data import load_hf

    ds = datasets.Dataset.from_dict({"question_id": [81, 82], "turns": [["first", "second"], ["q", "r"]]})
    ds.set_format(fmt)
    ds.save_to_disk(str(tmp_path / "questions"))
    assert [(e.id, e.prompt) for e in load_hf(str(tmp_path / "questions"))] == [("81", "first"), ("82", "q")]


def _content_order(stream, table) -> list[int]:
    """The row indices of ``table`` in ``stream``'s order, matched by each whole row's JSON (equal rows in their
    order): the plain reference for :func:`hybridsd.data.shuffled_order`."""
    where: dict[str, list[int]] = {}
    for i, row in enumerate(table):
        where.setdefault(json.dumps(row, sort_keys=True, default=str), []).append(i)
    return [where[json.dumps(row, sort_keys=True, default=str)].pop(0) for row in stream]


@pytest.mark.parametrize("layout", ["one file", "empty shard", "saved"])
def test_a_seed_matches_equal_rows_as_whole_row_content_does(tmp_path, layout):
    """Ids in vLLM's stream order are the indices whole-row matching gives: equal rows (many here, some across
    files) take their indices in order, rows equal but for a number stay apart; a single file, a saved dataset
    and a folder with an empty file alike."""
    datasets = pytest.importorskip("datasets")
    from hybridsd.data import load_hf

    n = 2500  # over the shuffle buffer, and read in several batches
    table = datasets.Dataset.from_dict({"code": [f"x = {i % 7}\n" for i in range(n)],
                                        "change_request": ["c\u00e9" if i % 3 else "c" for i in range(n)],
                                        "norm_distance": [0.1 if i % 11 else 0.2 for i in range(n)]})
    path = tmp_path / layout.replace(" ", "_")
    if layout == "one file":  # JSON: a parquet stream takes seconds to close
        table.to_json(str(path) + ".jsonl")
        path = Path(str(path) + ".jsonl")
    elif layout == "empty shard":
        (path / "data").mkdir(parents=True)
        for k, (a, b) in enumerate([(0, 900), (900, 900), (900, n)]):
            table.select(range(a, b)).to_parquet(str(path / "data" / f"train-{k:05d}-of-00003.parquet"))
    else:
        table.save_to_disk(str(path))
    seed = len(layout)
    if layout == "saved":
        stream = datasets.load_from_disk(str(path)).to_iterable_dataset(num_shards=1).shuffle(seed=seed)
    else:
        stream = datasets.load_dataset(str(path.parent) if path.is_file() else str(path),
                                       data_files=path.name if path.is_file() else None,
                                       split="train", streaming=True).shuffle(seed=seed)
    want = _content_order(stream, table.to_list())
    assert [int(e.id) for e in load_hf(str(path), shuffle_seed=seed)] == want
    assert sorted(want) == list(range(n)) and want != list(range(n))


def test_a_single_file_is_read_only_as_far_as_the_examples_need(tmp_path, monkeypatch):
    """With a limit, the rows of a single file (one shard) are read into Python only as far as the stream (or
    the file order) needs them, not all of them."""
    datasets = pytest.importorskip("datasets")
    from hybridsd.data import load_hf

    n = 6000
    datasets.Dataset.from_dict({"code": [f"x = {i}\n" for i in range(n)], "change_request": ["c"] * n,
                                "norm_distance": [0.1] * n}).to_json(str(tmp_path / "edits.jsonl"))
    read = []
    each, batches = datasets.Dataset.__iter__, datasets.Dataset.iter

    def counted_rows(self):
        for row in each(self):
            read.append(1)
            yield row

    def counted_batches(self, batch_size, *args, **kwargs):
        for batch in batches(self, batch_size, *args, **kwargs):
            read.append(len(next(iter(batch.values()))))
            yield batch

    monkeypatch.setattr(datasets.Dataset, "__iter__", counted_rows)
    monkeypatch.setattr(datasets.Dataset, "iter", counted_batches)
    for seed in (None, 0):
        read.clear()
        exs = load_hf(str(tmp_path / "edits.jsonl"), shuffle_seed=seed, limit=5)
        assert len(exs) == 5 and 0 < sum(read) <= 3000, (seed, sum(read))


# ---- bad arguments and values: one clear error naming them, before any work ---------------------------------
@pytest.mark.parametrize("bins", [[0, math.nan, 1], [0, math.inf], [-math.inf, 0, 1], [0.5], [0.2, 0.1], [[0, 1]]])
def test_bin_edges_must_be_finite_and_increasing(bins):
    """A NaN edge used to put every value in bin 0."""
    with pytest.raises(ValueError, match="bins must be at least two finite, strictly increasing edges"):
        bin_index([0.1, 0.5, 0.9], bins)


@pytest.mark.parametrize("values, bins, error, match", [
    (0.3, [0, 0.5, 1], TypeError, "values must be a sequence of numbers, not one number"),
    (["a"], [0, 1], TypeError, "values must be numbers"),
    ([0.1], ["a", "b"], TypeError, "bins must be numbers"),
])
def test_bin_index_names_bad_values(values, bins, error, match):
    with pytest.raises(error, match=match):
        bin_index(values, bins)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"per_bin": 1.5}, TypeError, "per_bin must be an int, got 1.5"),
    ({"per_bin": "2"}, TypeError, "per_bin must be an int"),
    ({"per_bin": True}, TypeError, "per_bin must be an int"),
    ({"per_bin": 0}, ValueError, "per_bin must be >= 1, got 0"),
    ({"per_bin": 1, "seed": "x"}, TypeError, "seed must be an int, got 'x'"),
    ({"per_bin": 1, "seed": 1.0}, TypeError, "seed must be an int"),
    ({"per_bin": 1, "seed": -1}, ValueError, "seed must be >= 0, got -1"),
])
def test_resample_names_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        resample_by_bins(_examples([0.1, 0.15, 0.5]), [0, 0.5, 1], **kwargs)


@HYP
@given(norms=st.lists(st.floats(0, 1), max_size=20), per_bin=st.integers(1, 3), seed=st.integers(0, 2**63))
def test_resample_takes_numpy_ints(norms, per_bin, seed):
    import numpy as np

    exs = _examples(norms)
    assert resample_by_bins(exs, [0, 0.5, 1], np.int64(per_bin), np.uint64(seed)) == \
        resample_by_bins(exs, [0, 0.5, 1], per_bin, seed)


@pytest.mark.parametrize("value, words", [
    ('"0.2"', "'char_edit_norm' must be a number in [0, 1], got '0.2'"),
    ("true", "'char_edit_norm' must be a number in [0, 1], got True"),
    ("null", "the row has no field 'char_edit_norm'"),
    ("[0.2]", "'char_edit_norm' must be a number in [0, 1], got [0.2]"),
    ("-0.5", "'char_edit_norm' must be in [0, 1], got -0.5"),
    ("Infinity", "'char_edit_norm' must be in [0, 1], got inf"),
])
def test_edit_norms_must_be_numbers_in_range(tmp_path, value, words):
    """Text and bools used to pass as numbers ("0.2" -> 0.2, true -> 1.0)."""
    ee = {"task_id": "t", "input": "a", "instruction": "i", "output": "b", "char_edit_norm": 1.0}
    for name, loader, row in (("e.jsonl", load_code_edits, _edit_row(0, "a", "b")), ("ee.jsonl", load_editeval, ee)):
        good = json.dumps(row)
        bad = good.replace('"char_edit_norm": 1.0', f'"char_edit_norm": {value}')
        assert bad != good
        (tmp_path / name).write_text(good + "\n" + bad + "\n")
        with pytest.raises(ValueError) as e:
            loader(tmp_path / name)
        assert f"{name} line 2: {words}" in str(e.value)
    rows = [_edit_row(0, "a", "b"), dict(_edit_row(1, "a", "a"), char_edit_norm=0),
            dict(_edit_row(2, "a", "b"), char_edit_norm=1)]
    assert [e.edit_norm for e in load_code_edits(_write(tmp_path / "ok.jsonl", rows))] == [1.0, 0.0, 1.0]  # ints


@pytest.mark.parametrize("value, words", [('"0.1"', "must be a number in [0, 1], got '0.1'"),
                                          ("true", "must be a number in [0, 1], got True")])
def test_hub_edit_norms_must_be_numbers(tmp_path, value, words):
    pytest.importorskip("datasets")
    from hybridsd.data import load_hf

    (tmp_path / "hub.jsonl").write_text(f'{{"code": "a", "change_request": "x", "norm_distance": {value}}}\n')
    with pytest.raises(ValueError) as e:
        load_hf(str(tmp_path / "hub.jsonl"))
    assert f"hub.jsonl row 0: 'norm_distance' {words}" in str(e.value)


@pytest.mark.parametrize("value, words", [('""', "must not be empty"), ("[1]", "must be a string or a number"),
                                          ("{}", "must be a string or a number"), ("true", "must be a string or a")])
def test_bad_ids_name_file_line_and_field(tmp_path, value, words):
    """An empty id used to fail in Example without the file or line; a list or object became its text."""
    path = tmp_path / "e.jsonl"
    good = json.dumps(_edit_row(0, "a", "b"))
    path.write_text(good + "\n" + good.replace('"id": "r0"', f'"id": {value}') + "\n")
    with pytest.raises(ValueError, match=rf"e.jsonl line 2: 'id' {words}"):
        load_code_edits(path)
    mt = tmp_path / "mt.jsonl"
    mt.write_text(f'{{"question_id": 1, "turns": ["a"]}}\n{{"question_id": {value}, "turns": ["b"]}}\n')
    with pytest.raises(ValueError, match=rf"mt.jsonl line 2: 'question_id' {words}"):
        load_mt_bench(mt)
    ee = tmp_path / "ee.jsonl"
    ee.write_text(f'{{"task_id": {value}, "input": "a", "instruction": "i", "output": "b", "char_edit_norm": 0.5}}\n')
    with pytest.raises(ValueError, match=rf"ee.jsonl line 1: 'task_id' {words}"):
        load_editeval(ee)


def test_an_empty_hub_id_names_the_row(tmp_path):
    pytest.importorskip("datasets")
    from hybridsd.data import load_hf

    (tmp_path / "hub.jsonl").write_text('{"id": "a", "code": "a", "change_request": "x", "norm_distance": 0.1}\n'
                                        '{"id": "", "code": "b", "change_request": "y", "norm_distance": 0.1}\n')
    with pytest.raises(ValueError, match=r"hub.jsonl row 1: 'id' must not be empty"):
        load_hf(str(tmp_path / "hub.jsonl"))


@pytest.mark.parametrize("ids, error, match", [
    (5, TypeError, "ids must be None or a collection of id strings, got 5"),
    ({1, 2}, TypeError, r"ids must hold id strings \(Example.id\), got 1"),
    (["r0", None], TypeError, "ids must hold id strings"),
    ("r0", ValueError, "ids must be a collection of ids, not one string"),
])
def test_ids_are_checked_before_reading(tmp_path, ids, error, match):
    """Checked before the file is read (a missing one is not reached); int ids used to match nothing."""
    with pytest.raises(error, match=match):
        load_code_edits(tmp_path / "missing.jsonl", ids=ids)


def test_ids_may_be_any_iterable_of_strings(tmp_path):
    path = _write(tmp_path / "e.jsonl", [_edit_row(i, "a", "b") for i in range(4)])
    for ids in (["r2", "r0"], ("r0", "r2"), iter(["r2", "r0"]), {"r0": 1, "r2": 2}.keys(), frozenset({"r0", "r2"})):
        assert [e.id for e in load_code_edits(path, ids=ids)] == ["r0", "r2"]


@pytest.mark.parametrize("max_places, error, match", [
    ("3", TypeError, "max_places must be an int, got '3'"), (2.5, TypeError, "max_places must be an int, got 2.5"),
    (True, TypeError, "max_places must be an int"), (0, ValueError, "max_places must be >= 1, got 0"),
    (-1, ValueError, "max_places must be >= 1, got -1"),
])
@pytest.mark.parametrize("mode", CHANGE_REQUESTS)
def test_max_places_is_checked_before_reading(tmp_path, max_places, error, match, mode):
    """It used to fail per row ('needs an edit' for 0) or deep in edit_requests ('3')."""
    with pytest.raises(error, match=match):
        load_code_edits(tmp_path / "missing.jsonl", change_request=mode, max_places=max_places)


@pytest.mark.parametrize("limit", [True, -1, 1.5, "2"])
def test_limit_must_be_an_int(tmp_path, limit):
    with pytest.raises(ValueError, match="limit must be None or an int >= 0"):
        load_code_edits(tmp_path / "missing.jsonl", limit=limit)


@pytest.mark.parametrize("seed, error, match", [("x", TypeError, "shuffle_seed must be an int, got 'x'"),
                                                (1.5, TypeError, "shuffle_seed must be an int"),
                                                (-1, ValueError, "shuffle_seed must be >= 0, got -1")])
def test_shuffle_seed_is_checked_before_loading(tmp_path, seed, error, match):
    from hybridsd.data import load_hf

    with pytest.raises(error, match=match):  # the missing path is never reached
        load_hf(str(tmp_path / "missing.jsonl"), shuffle_seed=seed)
