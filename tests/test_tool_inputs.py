"""The command lines' bad input (tree_al, train_heads, bench_ngram, make_checkpoint, bench_speed, edit_places): one
stderr line naming it, exit code 2, no output written, no model loaded; and run_info naming the run's own device."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import hybridsd as hsd
from experiments import bench_ngram, bench_speed, edit_places, make_checkpoint, provenance, train_heads, tree_al

ZOO = hsd.zoo.path("tiny-coder")


@pytest.fixture
def no_load(monkeypatch):
    """Loading a model (or starting a tool's work) fails the test."""
    def refuse(*a, **k):
        raise AssertionError("a model was loaded (work began) before the input was checked")

    import transformers

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(hsd.checkpoint, "load_target", refuse)
    for module, name in ((tree_al, "record"), (train_heads, "load_target"), (bench_ngram, "ngram_propose"),
                         (make_checkpoint, "build"), (bench_speed, "copy_bandwidth"), (bench_speed, "llama8b"),
                         (edit_places, "teacher_forced"), (edit_places, "rows_of")):
        monkeypatch.setattr(module, name, refuse)


@pytest.fixture
def paths(tmp_path):
    """Bad places: a regular file, an output under it, a model folder without weights, one whose index names a
    weight file outside it."""
    (tmp_path / "file").write_text("not a folder")
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "eval_split.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ZOO / name, bare / name)
    outside = tmp_path / "outside"
    shutil.copytree(bare, outside)
    (outside / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "../x.safetensors"}}))
    return {"file": tmp_path / "file", "under_file": tmp_path / "file" / "o.json", "bare": bare, "outside": outside,
            "folder": tmp_path}


def _one_line(capsys, e, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert all(w in err[0] for w in words), err
    return err[0]


@pytest.mark.parametrize("argv, flag", [
    (["--num-prompts", "0"], "--num-prompts"),
    (["--folds", "1"], "--folds"),
    (["--output-len", "0"], "--output-len"),
    (["--data-dir", "/nonexistent"], "--data-dir"),
    (["--model", "/nonexistent"], "--model"),
    (["--model", "{bare}"], "--model"),
    (["--model", "{outside}"], "--model"),
    (["--model", "{file}"], "--model"),
    (["--tree", "static", "--tree-paths", "[[0],[1,0,0]]"], "--tree-paths"),
    (["--tree", "static", "--tree-paths", "[[-1]]"], "--tree-paths"),
    (["--tree", "static", "--tree-paths", "5"], "--tree-paths"),
    (["--tree", "static", "--tree-paths", "not json"], "--tree-paths"),
    (["--device", "foo"], "--device"),
    (["--device", "cuda"], "--device"),
    (["--out", "{under_file}"], "--out"),
    (["--out", "{folder}"], "--out"),
])
def test_tree_al_checks_before_loading(argv, flag, paths, tmp_path, capsys, monkeypatch, no_load):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "res" / "tree_al.json"
    with pytest.raises(SystemExit) as e:
        tree_al.main(["--device", "cpu", "--out", str(out), *[a.format(**paths) for a in argv]])
    line = _one_line(capsys, e, flag)
    assert flag == "--model" or "--model" not in line, line
    assert not out.exists()


def test_tree_al_with_fewer_tree_steps_than_folds_is_one_line(tmp_path, capsys, monkeypatch):
    """How many tree steps a run takes is known only after it: too few for the folds is one line, no record."""
    monkeypatch.setattr(tree_al, "record", lambda cfg, examples: [((-1,), [0])])
    out = tmp_path / "tree_al.json"
    with pytest.raises(SystemExit) as e:
        tree_al.main(["--device", "cpu", "--num-prompts", "1", "--folds", "3", "--out", str(out)])
    _one_line(capsys, e, "1 tree steps", "--folds 3")
    assert not out.exists()


@pytest.mark.parametrize("argv, flag", [
    (["--target", "{bare}"], "--target"),
    (["--target", "{outside}"], "--target"),
    (["--kinds", "eagle3", "--draft-vocab", "999999"], "--draft-vocab"),
    (["--out", "{file}"], "--out"),
    (["--out", "{file}/heads"], "--out"),
    (["--seconds-per-head", "inf"], "--seconds-per-head"),
    (["--lr", "inf"], "--lr"),
    (["--gen-seconds", "nan"], "--gen-seconds"),
    (["--max-before-chars", "1"], "--max-before-chars"),
])
def test_train_heads_checks_before_loading(argv, flag, paths, tmp_path, capsys, no_load):
    out = tmp_path / "heads"
    with pytest.raises(SystemExit) as e:
        train_heads.main(["--device", "cpu", "--steps", "2", "--out", str(out), *[a.format(**paths) for a in argv]])
    _one_line(capsys, e, flag)
    assert not out.exists()


@pytest.mark.parametrize("case, flag, words", [
    ("split_without_ids", "--target", "'ids'"),
    ("config_a_list", "--target", "JSON object"),
    ("heads_without_weights", "--init-heads", "no weights"),
    ("heads_of_another_size", "--init-heads", "hidden size 64"),
])
def test_train_heads_refuses_a_target_or_heads_it_cannot_use(case, flag, words, paths, tmp_path, capsys, no_load):
    target, heads = paths["bare"], tmp_path / "heads"
    if case == "split_without_ids":  # a model folder (weights named) whose split record lacks its ids
        (target / "eval_split.json").write_text('{"n": 3}')
        (target / "model.safetensors").write_bytes(b"")
    if case == "config_a_list":
        (target / "config.json").write_text("[1]")
    shutil.copytree(ZOO / "eagle1", heads / "eagle1")
    if case == "heads_without_weights":
        (heads / "eagle1" / "model.safetensors").unlink()
    if case == "heads_of_another_size":
        config = json.loads((heads / "eagle1" / "config.json").read_text())
        (heads / "eagle1" / "config.json").write_text(json.dumps(config | {"hidden_size": 64}))
    argv = ["--target", str(target)] if flag == "--target" else ["--init-heads", str(heads)]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        train_heads.main(["--device", "cpu", "--kinds", "eagle1", "--out", str(out), *argv])
    _one_line(capsys, e, flag, *words)
    assert not out.exists()  # not even made empty


def test_train_heads_takes_a_draft_vocab_up_to_the_targets(tmp_path):
    vocab = json.loads((ZOO / "config.json").read_text())["vocab_size"]
    a = train_heads.parse_args(["--device", "cpu", "--kinds", "eagle3", "--draft-vocab", str(vocab),
                                "--out", str(tmp_path / "heads")])
    assert a.draft_vocab == vocab


@pytest.mark.parametrize("argv, flag", [
    (["--calls", "0"], "--calls"), (["--calls", "-5"], "--calls"), (["--seed", "-1"], "--seed"),
    (["--out", "{under_file}"], "--out"), (["--out", "{folder}"], "--out"),
])
def test_bench_ngram_checks_its_arguments(argv, flag, paths, tmp_path, capsys, no_load):
    out = tmp_path / "res" / "ngram.json"
    with pytest.raises(SystemExit) as e:
        bench_ngram.main(["--out", str(out), *[a.format(**paths) for a in argv]])
    _one_line(capsys, e, flag)
    assert not out.exists()


@pytest.mark.parametrize("argv, flag", [
    (["--out", "{file}"], "--out"), (["--out", "{under_file}"], "--out"), (["--device", "foo"], "--device"),
    (["--device", "cuda"], "--device"), (["--device", "cuda:0"], "--device"), (["--layers", "2"], "--layers"),
])
def test_make_checkpoint_checks_its_arguments(argv, flag, paths, tmp_path, capsys, monkeypatch, no_load):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "ckpt"
    with pytest.raises(SystemExit) as e:
        make_checkpoint.main(["--device", "cpu", "--out", str(out), *[a.format(**paths) for a in argv]])
    _one_line(capsys, e, flag)
    assert not out.exists()
    assert paths["file"].read_text() == "not a folder"


@pytest.mark.parametrize("cuda, argv, words", [
    (False, [], ["CUDA"]), (True, ["--out", "{folder}"], ["--out"]), (True, ["--out", "{under_file}"], ["--out"]),
])
def test_bench_speed_needs_a_gpu_and_a_writable_out(cuda, argv, words, paths, tmp_path, capsys, monkeypatch,
                                                    no_load):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    out = tmp_path / "res" / "speed.json"
    with pytest.raises(SystemExit) as e:
        bench_speed.main(["--out", str(out), *[a.format(**paths) for a in argv]])
    _one_line(capsys, e, *words)
    assert not out.exists()


@pytest.mark.parametrize("argv, words", [
    (["--model", "{bare}", "--prompts", "2"], ["--model", "no weights"]),
    (["--model", str(ZOO), "{bare}"], ["--model", "bare"]),  # the second of two
    (["--model", "{outside}"], ["--model", "outside the checkpoint folder"]),
    (["--model", str(ZOO), "--out", "{folder}"], ["--out"]),
    (["--model", str(ZOO), "--out", "{under_file}"], ["--out"]),
])
def test_edit_places_checks_models_and_out_before_loading(argv, words, paths, tmp_path, capsys, no_load):
    out = tmp_path / "res" / "places.json"
    with pytest.raises(SystemExit) as e:
        edit_places.main(["--out", str(out), *[a.format(**paths) for a in argv]])
    _one_line(capsys, e, *words)
    assert not out.exists()


def test_run_info_names_the_runs_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: asked.append(d) or "FakeGPU")
    assert provenance.run_info("cpu")["device"].startswith("cpu (") and not asked  # a CPU run on a GPU machine
    assert provenance.run_info(torch.device("cpu"))["device"].startswith("cpu (")
    assert provenance.run_info("cuda:1")["device"] == "FakeGPU" and asked[-1] == torch.device("cuda:1")
    assert provenance.run_info()["device"] == "FakeGPU" and asked[-1] == 0  # the default: GPU 0, as before
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert provenance.run_info()["device"].startswith("cpu (")


def test_git_commit_is_dirty_for_code_changes_not_for_results(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.delenv("HYBRIDSD_COMMIT", raising=False)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    (tmp_path / "experiments" / "results" / "zoo").mkdir(parents=True)
    code, result = tmp_path / "experiments" / "run.py", tmp_path / "experiments" / "results" / "zoo" / "r.json"
    code.write_text("x = 1\n")
    result.write_text("{}\n")
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], cwd=tmp_path, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    where = tmp_path / "experiments"  # asked from a folder below the top, as the module asks from its own
    assert provenance.git_commit(where) == sha
    result.write_text('{"al": 2}\n')  # a run wrote its result: the code is the commit's
    (tmp_path / "experiments" / "results" / "new.json").write_text("{}\n")  # untracked, as a new result file
    assert provenance.git_commit(where) == sha
    code.write_text("x = 2\n")
    assert provenance.git_commit(where) == sha + "-dirty"
    code.write_text("x = 1\n")
    (tmp_path / "experiments" / "results_old.py").write_text("")  # a name that merely begins like the folder
    subprocess.run([*git, "add", "experiments/results_old.py"], cwd=tmp_path, check=True)
    assert provenance.git_commit(where) == sha + "-dirty"
    monkeypatch.setenv("HYBRIDSD_COMMIT", "abc1234")  # a copied tree on the GPU machine names what it was given
    assert provenance.git_commit(where) == "abc1234"


def test_bench_ngram_records_the_cpu_it_ran_on(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "FakeGPU")
    monkeypatch.setattr(bench_ngram, "LENGTHS", (512,))
    out = tmp_path / "ngram.json"
    bench_ngram.main(["--calls", "3", "--out", str(out)])
    rec = json.loads(out.read_text())
    assert rec["run_info"]["device"].startswith("cpu (") and rec["results"][0]["calls"] == 3
