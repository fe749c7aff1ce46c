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
        train_heads.parse_args(["--out", str(tmp_path), "--device", "cpu", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and message in err[0], err
    assert not any(tmp_path.iterdir())  # nothing written


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
    p.check_output(tmp_path / "new" / "deeper" / "out.json")  # parents are made
    assert (tmp_path / "new" / "deeper").is_dir()
    p.check_output(tmp_path / "runs", flag="--out-dir", folder=True)
    (tmp_path / "file").write_text("x")
    for path, kw, words in ((tmp_path, {}, "is a folder, not a file"),
                            (tmp_path / "file", {"folder": True}, "is a file, not a folder"),
                            (tmp_path / "file" / "out.json", {}, "cannot make the folder")):
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
            with pytest.raises(SystemExit):
                p.check_output(ro / "out.json")
            assert "cannot write in" in capsys.readouterr().err
    finally:
        ro.chmod(0o700)
