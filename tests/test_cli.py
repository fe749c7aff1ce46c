"""Every command line reports a usage mistake in one line on stderr with exit code 2, before any work."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

COMMANDS = ["experiments.al_by_edit_norm", "experiments.bench_ngram", "experiments.bench_speed",
            "experiments.bench_train_steps",
            "experiments.bench_tree", "experiments.diagnose_heads", "experiments.exact_rows",
            "experiments.make_checkpoint", "experiments.simulate_al", "experiments.spec_bench",
            "experiments.summarize_runs", "experiments.sweep", "experiments.train_heads",
            "experiments.train_tokenizer", "experiments.train_zoo", "experiments.tree_al", "paper.make_figures"]


@pytest.mark.parametrize("module", COMMANDS)
def test_an_unknown_option_is_one_line_and_exit_2(module, monkeypatch, capsys):
    main = importlib.import_module(module).main
    monkeypatch.setattr(sys, "argv", [module, "--no-such-option"])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "error:" in err[0] and "Traceback" not in err[0], err


@pytest.mark.parametrize("tool", ["parser", "spec_bench"])
def test_the_error_line_is_one_write(tool, record_stderr):
    """The error line goes to stderr in one write, newline included, so that processes sharing an unbuffered pipe
    (torchrun's ranks under PYTHONUNBUFFERED) cannot interleave two lines into one; spec_bench's ``fail`` too."""
    from experiments import spec_bench
    from experiments.cli import Parser

    writes = record_stderr()
    with pytest.raises(SystemExit) as e:
        if tool == "parser":
            Parser(prog="tool").parse_args(["--nope"])
        else:
            spec_bench.fail("--tp 2: only 1 is supported")
    want = {"parser": "tool: error: unrecognized arguments: --nope\n",
            "spec_bench": "spec_bench: error: --tp 2: only 1 is supported\n"}[tool]
    assert e.value.code == 2 and writes == [want]


def test_a_subcommand_mistake_is_one_line_too(capsys):
    from experiments import train_zoo

    with pytest.raises(SystemExit) as e:
        train_zoo.parse_args(["repair", "--out", "o"])  # --init missing
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--init" in err[0], err


@pytest.mark.parametrize("argv, message", [
    (["--steps", "-1"], "--steps"), (["--batch-size", "0"], "--batch-size"), (["--gen-seconds", "-1"], "--gen-seconds"),
    (["--device", "nonsense"], "--device"), (["--target", "/nonexistent/tc"], "--target"),
    (["--data", "/nonexistent/data"], "--data"), (["--init-heads", "/nonexistent/heads"], "--init-heads"),
    (["--model", "no-such-model"], "--model")])
def test_train_heads_names_bad_input(argv, message, capsys, tmp_path):
    from experiments import train_heads

    with pytest.raises(SystemExit) as e:
        train_heads.parse_args(["--out", str(tmp_path / "heads"), "--device", "cpu", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and message in err[0], err
    assert not any(tmp_path.iterdir())  # nothing written, not even the --out folder


def test_train_heads_asks_for_a_cuda_device_it_lacks(capsys, tmp_path, monkeypatch):
    import torch

    from experiments import train_heads

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        train_heads.parse_args(["--out", str(tmp_path)])  # the default device is cuda
    assert e.value.code == 2 and "--device cuda" in capsys.readouterr().err


def test_train_heads_takes_good_input(tmp_path):
    import hybridsd as hsd
    from experiments import train_heads

    a = train_heads.parse_args(["--out", str(tmp_path), "--device", "cpu", "--steps", "2"])
    assert a.steps == 2 and a.device == "cpu" and a.target == hsd.zoo.path()  # the zoo's target by default


@pytest.mark.parametrize("argv, message", [
    (["--steps", "5"], "--steps"), (["--reps", "0"], "--reps"), (["--examples", "10"], "--examples"),
    (["--device", "cpu", "--modes", "eager", "--examples", "100", "--steps", "250"], "fewer than --steps 250"),
    (["--device", "cpu", "--modes", "eager", "layers"], "--modes other than eager need --device cuda"),
    (["--modes", "graphs"], "--modes")])
def test_bench_train_steps_refuses_bad_sizes_in_one_line(argv, message, tmp_path, capsys):
    from experiments import bench_train_steps

    with pytest.raises(SystemExit) as e:
        bench_train_steps.main(argv + ["--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o.json").exists()


def test_bench_train_steps_records_every_pass_of_a_mode(tmp_path):
    """On the CPU (eager, the smoke model, small batches): the record holds the warm-up, each timed pass and the
    profiled pass of the mode, with the model's shape, the command, the plan's batch shapes and run_info."""
    from experiments import bench_train_steps

    out = tmp_path / "steps.json"
    bench_train_steps.main(["--device", "cpu", "--smoke", "--modes", "eager", "--batch-tokens", "1024",
                            "--examples", "100", "--steps", "10", "--reps", "2", "--out", str(out)])
    rec = json.loads(out.read_text())
    mode = rec["modes"]["eager"]
    assert [p["steps"] for p in mode["passes"]] == [10, 10] and mode["warmup"]["steps"] == 10
    assert mode["median_ms_per_step"] == pytest.approx(sum(p["ms_per_step"] for p in mode["passes"]) / 2)
    assert mode["profiled"]["steps"] == 10 and mode["peak_memory_gib"] is None
    assert rec["model"]["hidden_size"] == 64 and rec["batch_shapes"] >= 1 and "commit" in rec["run_info"]
    assert rec["command"].endswith(str(out))


def test_output_paths_are_checked_before_any_work(tmp_path, capsys):
    from experiments.cli import Parser

    p = Parser(prog="tool")
    p.check_output(tmp_path / "new" / "deeper" / "out.json")  # the writer makes the folders
    p.check_output(tmp_path / "runs", flag="--out-dir", folder=True)
    assert not any(tmp_path.iterdir())  # a check makes nothing: a later usage error leaves no folder behind
    (tmp_path / "file").write_text("x")
    for path, kw, words in ((tmp_path, {}, "is a folder, not a file"),
                            (tmp_path / "file", {"folder": True}, "is a file, not a folder"),
                            (tmp_path / "file" / "out.json", {},
                             f"cannot make the folder {tmp_path / 'file'}: {tmp_path / 'file'} is a file"),
                            (tmp_path / "file" / "a" / "b", {"folder": True}, f"{tmp_path / 'file'} is a file")):
        with pytest.raises(SystemExit) as e:
            p.check_output(path, **kw)
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and words in err[0], err
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        import tempfile

        try:
            tempfile.TemporaryFile(dir=ro).close()
            writable = True  # root writes anyway: nothing to refuse
        except OSError:
            writable = False
        if not writable:
            for path in (ro / "out.json", ro / "new" / "out.json"):
                with pytest.raises(SystemExit):
                    p.check_output(path)
                assert f"cannot write in {ro} " in capsys.readouterr().err
    finally:
        ro.chmod(0o700)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "ro"]


def test_write_atomic_makes_the_folders_the_check_left_to_it(tmp_path):
    from experiments.distributed import write_atomic

    write_atomic(tmp_path / "new" / "deeper" / "out.json", "{}\n")
    assert (tmp_path / "new" / "deeper" / "out.json").read_text() == "{}\n"


def _one_error_line(capsys, e) -> str:
    """The one stderr line of a refused command (exit code 2, no traceback)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "error:" in err[0] and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("module, argv", [
    ("al_by_edit_norm", ["runs.jsonl", "--out", "{folder}"]),
    ("bench_sweep_ranks", ["--out", "{folder}"]),
    ("bench_sweep_ranks", ["--out", "{new}", "--work-dir", "{file}"]),
    ("edit_failures", ["sweep", "--out", "{folder}"]),
    ("exact_rows", ["--run", "grid.jsonl", "c", "cmd", "--out", "{folder}"]),
    ("simulate_al", ["--out", "{folder_stem}"]),
    ("sweep", ["--preset", "cpu-small", "--out-dir", "{file}"])])
def test_output_paths_are_refused_before_any_work(module, argv, tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    (tmp_path / "stem.json").mkdir()  # simulate_al writes --out with .json and .csv
    (tmp_path / "file").write_text("x")
    names = {"{folder}": tmp_path / "folder", "{folder_stem}": tmp_path / "stem", "{file}": tmp_path / "file",
             "{new}": tmp_path / "new.json"}
    main = importlib.import_module(f"experiments.{module}").main
    with pytest.raises(SystemExit) as e:
        main([str(names.get(x, x)) for x in argv])
    line = _one_error_line(capsys, e)
    assert ("is a file, not a folder" if "{file}" in argv else "is a folder, not a file") in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder", "stem.json"]  # nothing written
    assert not any((tmp_path / "folder").iterdir())


def test_exact_rows_makes_the_output_folder_and_names_a_bad_line(tmp_path, capsys):
    from experiments import exact_rows

    line = {"model": "a", "compile": "auto", "drafter": "ngram", "k": 1, "torch": "2.11", "device": "H200",
            "exact_same": "6/6"}
    grid = tmp_path / "grid.jsonl"
    grid.write_text(json.dumps(line) + "\n")
    out = tmp_path / "new" / "exact_match.jsonl"  # its folder is made
    exact_rows.main(["--run", str(grid), "c", "cmd", "--out", str(out)])
    assert json.loads(out.read_text())["exact_same"] == "6/6"
    capsys.readouterr()
    for text, words in (('{"model": "a" "k": 1}\n', "bad.jsonl line 1: not JSON"),
                        ("[1, 2]\n", "bad.jsonl line 1: not a JSON object"),
                        (b"\xff\xfe garbage\n", "bad.jsonl: not UTF-8 text")):
        bad = tmp_path / "bad.jsonl"
        bad.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(SystemExit) as e:
            exact_rows.main(["--run", str(bad), "c", "cmd", "--out", str(tmp_path / "other.jsonl")])
        assert words in _one_error_line(capsys, e)
        assert not (tmp_path / "other.jsonl").exists()


@pytest.mark.parametrize("argv, env", [(["--dataset-path", "/nonexistent/data"], None),
                                       ([], "/nonexistent/data")])
def test_sweep_names_a_missing_data_folder(argv, env, tmp_path, monkeypatch, capsys):
    from experiments import sweep

    if env:
        monkeypatch.setenv("HYBRIDSD_DATA", env)
    with pytest.raises(SystemExit) as e:
        sweep.main(["--preset", "cpu-small", "--dry-run", "--out-dir", str(tmp_path / "runs"), *argv])
    assert "/nonexistent/data" in _one_error_line(capsys, e)
    assert not (tmp_path / "runs").exists()  # a dry run makes no folder


@pytest.fixture()
def one_edit(tmp_path):
    """A code_edits_dev.jsonl of one small edit."""
    row = {"id": "e0", "instruction": "Rename", "before": "def f(x):\n    return x\n",
           "after": "def g(x):\n    return x\n", "char_edit_norm": 0.05}
    path = tmp_path / "code_edits_dev.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize("argv, words", [
    (["--data", "/nonexistent.jsonl"], "--data: data file /nonexistent.jsonl not found"),
    (["--k-ngram", "0"], "--k-ngram"), (["--k-eagle", "0"], "--k-eagle"),
    (["--min-n", "5", "--max-n", "2"], "--min-n <= --max-n"),
    (["--eagle-rates", "1.5", "0.5", "0.2"], "--eagle-rates must lie in [0, 1]"),
    (["--eagle-rates", "0.5", "0.6", "0.2"], "--eagle-rates: eagle_rates must lie in [0, 1] and not increase"),
    (["--eagle-rates", "0.6", "0.5", "0.2", "--k-eagle", "5"], "--eagle-rates: one rate per draft position"),
    (["--limit", "0"], "--limit must be >= 4"), (["--limit", "-3"], "--limit must be >= 4"),
    (["--max-e", "0"], "--max-e must be > 0"), (["--max-e", "-1"], "--max-e must be > 0"),
    ([], "0 of the 1 examples have an edit norm in [0, --max-e 0.01]")])
def test_simulate_al_names_bad_input(argv, words, one_edit, tmp_path, capsys):
    from experiments import simulate_al

    with pytest.raises(SystemExit) as e:
        simulate_al.main(["--data", str(one_edit), "--max-e", "0.01", "--out", str(tmp_path / "sim"), *argv])
    assert words in _one_error_line(capsys, e)
    assert not list(tmp_path.glob("sim*"))


def test_simulate_al_names_a_missing_data_folder(tmp_path, monkeypatch, capsys):
    from experiments import simulate_al

    monkeypatch.setenv("HYBRIDSD_DATA", "/nonexistent/data")
    with pytest.raises(SystemExit) as e:
        simulate_al.main(["--out", str(tmp_path / "sim")])
    assert "data directory /nonexistent/data not found" in _one_error_line(capsys, e)


@pytest.mark.parametrize("argv, theory, words", [
    (["--k-ngram", "0"], None, "--k-ngram"), (["--k-eagle", "0"], None, "--k-eagle"),
    (["--max-e", "0"], None, "--max-e"),
    (["--theory"], {"fits": 3}, "theory.json: not a simulate_al.json"),
    (["--theory"], {"fits": {"ngram": {"harmonic_fit": 1}}}, "fits['ngram']['harmonic_fit'] is not a fit record")])
def test_al_by_edit_norm_names_bad_input(argv, theory, words, tmp_path, capsys):
    from experiments import al_by_edit_norm

    if theory is not None:
        (tmp_path / "theory.json").write_text(json.dumps(theory))
        argv = [*argv, str(tmp_path / "theory.json")]
    out = tmp_path / "al.json"
    with pytest.raises(SystemExit) as e:
        al_by_edit_norm.main([str(tmp_path / "runs.jsonl"), "--out", str(out), *argv])
    assert words in _one_error_line(capsys, e)
    assert not out.exists()


@pytest.mark.parametrize("module", ["summarize_runs", "al_by_edit_norm"])
@pytest.mark.parametrize("name, content, words", [
    ("random.jsonl", bytes(range(128, 256)) * 4, "UnicodeDecodeError"),
    ("plain.jsonl.gz", b'{"method": "none"}\n', "BadGzipFile")], ids=["random bytes", "not gzip"])
def test_an_unreadable_results_file_is_named(module, name, content, words, tmp_path, capsys):
    main = importlib.import_module(f"experiments.{module}").main
    path = tmp_path / name
    path.write_bytes(content)
    out = tmp_path / "al.json"
    with pytest.raises(SystemExit) as e:
        main([str(path)] + (["--out", str(out)] if module == "al_by_edit_norm" else []))
    line = _one_error_line(capsys, e)
    assert f"{path}: not a readable results file" in line and words in line
    assert not out.exists()


def test_check_model_names_what_a_model_folder_lacks(tmp_path, capsys):
    from experiments.cli import Parser

    m = tmp_path / "m"
    (tmp_path / "file").write_text("x")
    steps = [(tmp_path / "none", None, "no such model folder"), (tmp_path / "file", None, "is a file, not a model"),
             (m, ("config.json", "[1]"), "must hold a JSON object"), (m, ("config.json", "{}"), "no weights"),
             (m, ("model.safetensors", ""), "no tokenizer")]
    m.mkdir()
    for path, write, words in steps:
        if write:
            (m / write[0]).write_text(write[1])
        with pytest.raises(SystemExit) as e:
            Parser(prog="tool").check_model(path, "--model")
        line = _one_error_line(capsys, e)
        assert line.startswith(f"tool: error: --model {path}: ") and words in line, line
    (m / "tokenizer.json").write_text("{}")
    assert Parser(prog="tool").check_model(m) == m
    (m / "tokenizer.json").unlink()
    (m / "model.safetensors").unlink()
    assert Parser(prog="tool").check_model(m, tokenizer=False, weights=False) == m
