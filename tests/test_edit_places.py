"""Teacher-forced edit places (experiments.edit_places): the places where a reference leaves or keeps the copy of its
input against difflib's opcodes, the counts of one answer by hand, the whole measure on the zoo target against
one-token-at-a-time greedy predictions, and its command line's bad input."""

from __future__ import annotations

import difflib
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import edit_places as ep
from experiments.train_zoo import MODEL_DIR, TargetConfig

END = 99


def _slow_places(before, answer):
    """From difflib's opcodes: a leave at the start of every non-equal opcode (with the token a copy would give
    there), copies at every position of an equal opcode but the first one after a non-equal opcode."""
    leaves, copies, after_change = [], [], False
    for tag, i1, _, j1, j2 in difflib.SequenceMatcher(None, before, answer, autojunk=False).get_opcodes():
        if tag == "equal":
            copies += list(range(j1 + after_change, j2))
            after_change = False
        else:
            leaves.append((j1, before[i1] if i1 < len(before) else END))
            after_change = True
    return leaves, copies


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=14), st.lists(st.integers(0, 4), max_size=14))
def test_copy_places_match_difflib(before, answer):
    assert ep.copy_places(before, answer, END) == _slow_places(before, answer)


def test_place_scores_by_hand():
    before, answer = [1, 2, 3, 4, 5, 6], [1, 2, 9, 9, 4, 5]  # 3 replaced by 9 9; 6 deleted at the end
    leaves, copies = ep.copy_places(before, answer, END)
    assert leaves == [(2, 3), (6, 6)] and copies == [0, 1, 5]  # 4 (position 4) resumes the copy: not counted
    copying = [1, 2, 3, 0, 4, 5, 6]  # a target that copies (teacher-forced): a prediction per answer token and the end
    assert ep.place_scores(copying, answer, leaves, copies, END) == {
        "leaves": 2, "found": 0, "first_found": False, "exact": 0, "copies": 3, "spurious": 0}
    perfect = answer + [END]
    assert ep.place_scores(perfect, answer, leaves, copies, END) == {
        "leaves": 2, "found": 2, "first_found": True, "exact": 2, "copies": 3, "spurious": 0}
    eager = [7, 2, 8, 9, 4, 5, END]  # leaves at position 0 (spurious) and at 2 with its own token
    assert ep.place_scores(eager, answer, leaves, copies, END) == {
        "leaves": 2, "found": 2, "first_found": True, "exact": 1, "copies": 3, "spurious": 1}
    late = [1, 2, 3, 0, 4, 5, END]  # misses the first place, finds the deletion at the end
    assert ep.place_scores(late, answer, leaves, copies, END)["first_found"] is False
    summary = ep.summarize([ep.place_scores(eager, answer, leaves, copies, END),
                            ep.place_scores([1, 2, END], [1, 2], *ep.copy_places([1, 2], [1, 2], END), END)])
    assert summary["found_share"] == 1.0 and summary["exact_share"] == 0.5
    # copies 3 + 2, one departure; the unchanged answer has no first place to count
    assert summary["spurious_per_1000"] == pytest.approx(200.0) and summary["first_found_share"] == 1.0
    unchanged = ep.summarize([ep.place_scores([1, 2, END], [1, 2], *ep.copy_places([1, 2], [1, 2], END), END)])
    assert unchanged["leaves"] == 0 and unchanged["first_found_share"] is None


def test_same_text_departures_by_hand():
    """A departure whose token's text begins the reference's text from there (the same text in other tokens) is
    counted apart; one that writes other text is not; the summary's share pools them."""
    vocab = {1: "de", 2: "f", 3: "def", 4: " x", 5: "class", 6: "d", END: ""}
    text = lambda ids: "".join(vocab[i] for i in ids)  # noqa: E731
    before = answer = [1, 2, 4, 1, 2]  # "de" "f" " x" "de" "f": nothing changes
    leaves, copies = ep.copy_places(before, answer, END)
    assert leaves == [] and copies == [0, 1, 2, 3, 4]
    greedy = [3, 2, 4, 5, 2, END]  # "def" at 0: the same text; "class" at 3: another
    scores = ep.place_scores(greedy, answer, leaves, copies, END, text)
    assert scores["spurious"] == 2 and scores["spurious_same_text"] == 1
    shorter = ep.place_scores([6, 2, 4, 1, 2, END], answer, leaves, copies, END, text)  # "d" begins "de": same text
    assert shorter["spurious"] == shorter["spurious_same_text"] == 1
    assert "spurious_same_text" not in ep.place_scores(greedy, answer, leaves, copies, END)
    assert ep.summarize([scores, shorter])["spurious_same_text_share"] == pytest.approx(2 / 3)
    assert "spurious_same_text_share" not in ep.summarize([ep.place_scores(greedy, answer, leaves, copies, END)])


def test_teacher_forced_agrees_with_greedy_one_token_at_a_time():
    """Two small edits on the installed zoo target (fp32 on the CPU): every count equals the one recomputed from
    greedy predictions made one prefix at a time."""
    before = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    rows = [{"id": "r0", "char_edit_norm": 0.1, "instruction": "Rename add to plus",
             "before": before, "after": before.replace("def add", "def plus")},
            {"id": "r1", "char_edit_norm": 0.2, "instruction": "Remove sub",
             "before": before, "after": before.split("\n\n\n")[0] + "\n"}]
    res = ep.teacher_forced(MODEL_DIR, rows, TargetConfig())
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from experiments.edit_corpus import blazedit_messages, change_request
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR).to(torch.bfloat16).float().eval()
    end = tok.convert_tokens_to_ids("<|eot_id|>")
    cfg = TargetConfig()
    for r, s in zip(rows, res["samples"]):
        request = change_request(r["before"], r["after"], r["instruction"], cfg.change_request, cfg.max_places)
        prompt = tok.encode(tok.apply_chat_template(blazedit_messages(r["before"], request), tokenize=False,
                                                    add_generation_prompt=True), add_special_tokens=False)
        b, a = tok.encode(r["before"], add_special_tokens=False), tok.encode(r["after"], add_special_tokens=False)
        with torch.no_grad():
            greedy = [int(model(torch.tensor([prompt + a[:j]])).logits[0, -1].argmax()) for j in range(len(a) + 1)]
        leaves, copies = _slow_places(b, a)
        assert leaves, "each row changes its input"
        want = {"leaves": len(leaves), "found": sum(greedy[j] != c for j, c in leaves),
                "exact": sum(greedy[j] == (a + [end])[j] for j, _ in leaves), "copies": len(copies),
                "spurious": sum(greedy[j] != a[j] for j in copies)}
        assert {k: s[k] for k in want} == want
        assert s["first_found"] == (greedy[leaves[0][0]] != leaves[0][1])
        target = tok.decode(a + [end])
        offsets = [len(tok.decode(a[:j])) for j in range(len(a))]  # each answer token's first character
        assert s["spurious_same_text"] == sum(
            bool(tok.decode([greedy[j]])) and target[offsets[j]:].startswith(tok.decode([greedy[j]]))
            for j in copies if greedy[j] != a[j])
    assert res["summary"]["leaves"] == sum(s["leaves"] for s in res["samples"])


@pytest.mark.parametrize("argv, named", [
    (["--model", "no/such/folder", "--out", "x.json"], "no/such/folder"),
    (["--model", str(MODEL_DIR), "--prompts", "0", "--out", "x.json"], "--prompts"),
    (["--model", str(MODEL_DIR), "--rows", "test", "--out", "x.json"], "--rows"),
    (["--model", str(MODEL_DIR), str(MODEL_DIR), "--labels", "a", "--out", "x.json"], "--labels"),
])
def test_bad_input_is_one_line_and_exit_2(argv, named, capsys):
    with pytest.raises(SystemExit) as e:
        ep.parse_args(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and named in err and len(err.splitlines()) == 1


def test_record_is_written_with_its_command(tmp_path, monkeypatch):
    rows = [{"id": "r0", "char_edit_norm": 0.1, "instruction": "x", "before": "a = 1\n", "after": "a = 2\n"}]
    monkeypatch.setattr(ep, "rows_of", lambda which, n, cfg: rows)
    out = tmp_path / "places.json"
    ep.main(["--model", str(MODEL_DIR), "--labels", "installed", "--rows", "validation", "--prompts", "1",
             "--out", str(out)])
    record = json.loads(out.read_text())
    assert record["rows"] == "validation" and record["prompts"] == 1 and "--rows validation" in record["command"]
    assert record["models"][0]["label"] == "installed" and "--labels installed" in record["command"]
    assert record["models"][0]["summary"]["n"] == 1 and record["run_info"]["commit"]
    assert record["config"]["change_request"] == TargetConfig().change_request  # how the prompts were asked
    assert record["config"]["gate_bins"] == TargetConfig().gate_bins


@pytest.mark.parametrize("rows_of, named", [
    (lambda which, n, cfg: [], "--rows eval: no prompts"),
    (lambda which, n, cfg: next(iter(())), "no code edits to ask: none of"),
    (lambda which, n, cfg: open("/nonexistent/code_edits_dev.jsonl"), "code_edits_dev.jsonl"),
])
def test_missing_prompts_are_named_before_any_model_is_loaded(rows_of, named, tmp_path, capsys, monkeypatch):
    """No edit corpus, an unreadable one or a split without gate prompts: one line and exit 2, no model loaded."""
    monkeypatch.setattr(ep, "rows_of", rows_of)
    monkeypatch.setattr(ep, "teacher_forced", lambda *a: pytest.fail("loaded a model"))
    with pytest.raises(SystemExit) as e:
        ep.main(["--model", str(MODEL_DIR), "--out", str(tmp_path / "places.json")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and named in err and len(err.splitlines()) == 1
    assert not (tmp_path / "places.json").exists()


def _samples(rng, n, start=0):
    """``n`` made-up samples of ids ``start``..: places and copies, some found, some spurious."""
    out = []
    for i in range(start, start + n):
        leaves, copies = int(rng.integers(0, 6)), int(rng.integers(1, 400))
        out.append({"id": f"p{i}", "leaves": leaves, "found": int(rng.integers(0, leaves + 1)), "copies": copies,
                    "spurious": int(rng.integers(0, 12)), "exact": 0, "first_found": False})
    return out


def _slow_compare(a, b, n_boot, seed):
    """The pooled shares of the shared prompts, one bootstrap resample at a time, in plain Python."""
    import numpy as np

    sa, sb = {s["id"]: s for s in a}, {s["id"]: s for s in b}
    ids = sorted(set(sa) & set(sb))

    def stats(pick):
        tot = {(side, k): sum(s[i][k] for i in pick) for side, s in (("a", sa), ("b", sb))
               for k in ("leaves", "found", "copies", "spurious")}
        found = [tot[side, "found"] / max(tot[side, "leaves"], 1) for side in "ab"]
        spur = [tot[side, "spurious"] / max(tot[side, "copies"], 1) for side in "ab"]
        return found[1] - found[0], (spur[1] / spur[0] if spur[0] > 0 else float("nan"))

    draws = np.random.default_rng(seed).integers(0, len(ids), (n_boot, len(ids)))
    boot = [stats([ids[j] for j in row]) for row in draws]
    d, r = stats(ids)
    return len(ids), d, r, [x for x, _ in boot], [y for _, y in boot]


@pytest.mark.parametrize("n_a, n_b, shift, n_boot, seed", [(7, 7, 0, 50, 0), (23, 17, 5, 333, 3), (3, 40, 0, 9, 1)])
def test_compare_places_against_a_slow_bootstrap(n_a, n_b, shift, n_boot, seed):
    import numpy as np

    rng = np.random.default_rng(seed + 10)
    a = _samples(rng, n_a)
    b = [{**s, "found": int(rng.integers(0, s["leaves"] + 1)), "spurious": int(rng.integers(0, 9))}
         for s in _samples(np.random.default_rng(seed + 10), n_b, 0)][shift:]  # the same places, other counts
    n, d, r, ds, rs = _slow_compare(a, b, n_boot, seed)
    got = ep.compare_places(a, b, n_boot=n_boot, seed=seed)
    assert got["n"] == n and got["found_share_b_minus_a"] == pytest.approx(d)
    assert got["spurious_b_over_a"] == pytest.approx(r)
    assert got["found_ci95"] == pytest.approx(np.percentile(ds, [2.5, 97.5]).tolist())
    assert got["spurious_ci95"] == pytest.approx(np.nanpercentile(rs, [2.5, 97.5]).tolist())
    assert got["a"]["n"] == got["b"]["n"] == n


def test_compare_places_of_equal_and_of_scaled_samples():
    import numpy as np

    a = _samples(np.random.default_rng(0), 30)
    same = ep.compare_places(a, a)
    assert same["found_share_b_minus_a"] == 0 and same["found_ci95"] == [0, 0]
    assert same["spurious_b_over_a"] == 1 and same["spurious_ci95"] == [1, 1]
    double = ep.compare_places(a, [{**s, "spurious": 2 * s["spurious"]} for s in a])
    assert double["spurious_b_over_a"] == pytest.approx(2) and double["spurious_ci95"] == pytest.approx([2, 2])
    with pytest.raises(ValueError, match="share 2 prompts"):
        ep.compare_places(a[:2], a)
    with pytest.raises(ValueError, match="other places"):
        ep.compare_places(a, [{**s, "copies": s["copies"] + 1} for s in a])


def _record(path, rows, labels_samples):
    path.write_text(json.dumps({"rows": rows, "prompts": 3, "models": [
        {"label": label, "samples": samples, "summary": ep.summarize(samples)} for label, samples in labels_samples]}))
    return path


def test_compare_command_writes_its_record(tmp_path, capsys):
    import gzip

    import numpy as np

    a = _samples(np.random.default_rng(1), 12)
    b = [{**s, "spurious": s["spurious"] + 1} for s in a]
    ra = _record(tmp_path / "a.json", "eval", [("installed", a), ("other", b)])
    rb = tmp_path / "b.json.gz"
    rb.write_bytes(gzip.compress(_record(tmp_path / "b.json", "eval", [("deep", b)]).read_bytes()))
    out = tmp_path / "cmp.json"
    ep.main(["--compare", f"{ra}:installed", f"{rb}:deep", "--out", str(out)])
    record = json.loads(out.read_text())
    assert {k: record[k] for k in ep.compare_places(a, b)} == json.loads(json.dumps(ep.compare_places(a, b)))
    assert record["rows"] == "eval" and f"--compare {ra}:installed {rb}:deep" in record["command"]
    assert "eval, 12 prompts" in capsys.readouterr().out


@pytest.mark.parametrize("make, named", [
    (lambda t, a: ["--compare", f"{a}:installed", f"{t / 'none.json'}:x"], "none.json"),
    (lambda t, a: ["--compare", f"{a}:installed", f"{a}:nobody"], "no model labelled 'nobody'"),
    (lambda t, a: ["--compare", f"{a}:installed", str(a)], "is not RECORD:LABEL"),
    (lambda t, a: ["--compare", f"{a}:installed", f"{_record(t / 'v.json', 'validation', [('x', [])])}:x"],
     "other rows"),
    (lambda t, a: ["--compare", f"{a}:installed", f"{_record(t / 'f.json', 'eval', [('x', [])])}:x"],
     "share 0 prompts"),
    (lambda t, a: ["--compare", f"{a}:installed", f"{a}:installed", "--model", str(MODEL_DIR)], "either --model"),
    (lambda t, a: ["--labels", "x"], "either --model"),
    (lambda t, a: ["--compare", f"{a}:installed", f"{a}:installed", "--rows", "eval"], "--rows is for --model"),
    (lambda t, a: ["--compare", f"{a}:installed", f"{a}:installed", "--labels", "x"], "--labels is for --model"),
])
def test_compare_bad_input_is_one_line_and_exit_2(tmp_path, capsys, make, named):
    import numpy as np

    a = _record(tmp_path / "a.json", "eval", [("installed", _samples(np.random.default_rng(2), 5))])
    with pytest.raises(SystemExit) as e:
        ep.parse_args([*make(tmp_path, a), "--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and named in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_every_model_is_checked_before_the_first_is_loaded(tmp_path, capsys, monkeypatch):
    """``--model M1 M2`` where M2 has config and weights but no tokenizer: one line naming M2, exit 2, no model
    loaded."""
    import shutil

    bare = tmp_path / "no-tokenizer"
    bare.mkdir()
    for f in MODEL_DIR.iterdir():
        if f.name == "config.json" or f.name.startswith("model"):
            shutil.copy(f, bare / f.name)
    monkeypatch.setattr(ep, "rows_of", lambda which, n, cfg: pytest.fail("read the prompts"))
    monkeypatch.setattr(ep, "teacher_forced", lambda *a: pytest.fail("loaded a model"))
    with pytest.raises(SystemExit) as e:
        ep.main(["--model", str(MODEL_DIR), str(bare), "--out", str(tmp_path / "places.json")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and f"--model {bare}: no tokenizer" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("broken, named", [
    ("no samples", "model 'x' has no samples"),
    ("no leaves", "model 'x' has no samples"),
    ("truncated gz", "not an edit_places record (EOFError"),
])
def test_a_broken_record_to_compare_is_one_line_naming_it(tmp_path, capsys, broken, named):
    """A model without samples, samples without their places, and a truncated .gz record: one line naming the
    file, exit 2, no traceback."""
    import gzip

    import numpy as np

    a = _record(tmp_path / "a.json", "eval", [("installed", _samples(np.random.default_rng(2), 5))])
    b = tmp_path / "b.json"
    if broken == "truncated gz":
        data = gzip.compress(_record(b, "eval", [("x", _samples(np.random.default_rng(2), 5))]).read_bytes())
        b = tmp_path / "b.json.gz"
        b.write_bytes(data[: len(data) // 2])
    else:
        doc = json.loads(_record(b, "eval", [("x", _samples(np.random.default_rng(2), 5))]).read_text())
        for s in doc["models"][0]["samples"]:
            s.pop("leaves")
        if broken == "no samples":
            doc["models"][0].pop("samples")
        b.write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as e:
        ep.parse_args(["--compare", f"{a}:installed", f"{b}:x", "--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and f"{b}" in err and named in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
