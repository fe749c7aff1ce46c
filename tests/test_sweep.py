"""The sweep's presets: every one builds its grid (one config per file name, an output length for each dataset),
and the PR grid holds exactly the PR's configurations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import results, sweep


@pytest.mark.parametrize("name", sorted(sweep.PRESETS))
def test_every_preset_builds_its_grid(name):
    preset = sweep.PRESETS[name]
    runs = sweep.grid(preset, device="cpu")
    stems = [s for s, _ in runs]
    assert runs and len(set(stems)) == len(stems)
    assert len({c.key() for _, c in runs}) == len(runs)  # no two files run the same config
    assert {c.dataset_name for _, c in runs} == set(preset.datasets) <= set(sweep.DATASETS)
    assert all(c.output_len == preset.output_len[c.dataset_name] for _, c in runs)


def test_pr_grid_is_the_prs_configurations():
    runs = dict(sweep.grid(sweep.PRESETS["edit-norm"], device="cpu"))
    assert {c.method for c in runs.values()} == {"none", *sweep.SPEC_METHODS}
    assert all(c.k.get("ngram", 5) == 5 and c.k.get("eagle", 3) == 3 for c in runs.values() if c.method != "none")


def test_edit_norm_preset_fills_the_analysis_bins():
    """The edit-norm preset draws per analysis bin (8 of 0.075): each holds 16 prompts, or all the held-out
    split has there."""
    from hybridsd import data, zoo

    try:
        data.default_data_dir()
    except FileNotFoundError:
        pytest.skip("code_edits_dev.jsonl not available")
    preset = sweep.PRESETS["edit-norm"]
    edges = results.norm_bins(preset.bin_width)
    assert tuple(edges) == results.ANALYSIS_BINS and len(edges) == 9 and edges[-1] == 0.6
    cfg = dict(sweep.grid(preset, device="cpu"))["code-edits__none"]
    picked = sweep.select_examples(cfg, preset, None)
    ids = set(json.loads((zoo.path(cfg.model) / "eval_split.json").read_text())["ids"])
    split = data.load_code_edits(ids=ids, change_request=cfg.change_request)
    have = np.bincount(data.bin_index([e.edit_norm for e in split], edges) + 1, minlength=10)[1:]
    got = np.bincount(data.bin_index([e.edit_norm for e in picked], edges) + 1, minlength=10)[1:]
    assert got.tolist() == np.minimum(have, 16).tolist()


def test_validation_split_draws_the_validation_repositories_rows():
    """``--split validation``: the edit-norm preset's prompts are the validation repositories' rows, drawn per bin
    as the held-out split's are, none of them held-out (evaluation) rows; the split enters the config's key."""
    from experiments.edit_corpus import VALIDATION_REPOS
    from hybridsd import data, zoo

    try:
        data.default_data_dir()
    except FileNotFoundError:
        pytest.skip("code_edits_dev.jsonl not available")
    preset = sweep.PRESETS["edit-norm"]
    cfg = dict(sweep.grid(preset, device="cpu", split="validation"))["code-edits__ngram__pr"]
    assert cfg.key() != dict(sweep.grid(preset, device="cpu"))["code-edits__ngram__pr"].key()
    picked = sweep.select_examples(cfg, preset, None)
    rows = {e.id: e for e in data.load_code_edits(change_request=cfg.change_request)}
    mine = [e for e in rows.values() if e.meta["repo"] in VALIDATION_REPOS]
    assert picked and {rows[e.id].meta["repo"] for e in picked} == set(VALIDATION_REPOS)
    held_out = set(json.loads((zoo.path(cfg.model) / "eval_split.json").read_text())["ids"])
    assert not {e.id for e in picked} & held_out
    edges = results.norm_bins(preset.bin_width)
    have = np.bincount(data.bin_index([e.edit_norm for e in mine], edges) + 1, minlength=10)[1:]
    got = np.bincount(data.bin_index([e.edit_norm for e in picked], edges) + 1, minlength=10)[1:]
    assert got.tolist() == np.minimum(have, 16).tolist()
    with pytest.raises(SystemExit):
        sweep.main(["--preset", "edit-norm", "--split", "nowhere", "--dry-run"])


def test_split_reaches_only_the_code_edit_configs(capsys):
    """``--split`` (like ``--per-bin``) is code edits' alone: the other datasets' configs, and so their keys and
    result rows, are the same whatever it is, and a sweep without code edits refuses both in one line."""
    preset = sweep.PRESETS["cpu-small"]
    for split in ("validation", "all"):
        other = dict(sweep.grid(preset, device="cpu", split=split))
        for stem, cfg in sweep.grid(preset, device="cpu"):
            assert (cfg.key() == other[stem].key()) == (cfg.dataset_name != "code-edits"), stem
    for flag, value in (("--split", "all"), ("--split", "eval"), ("--per-bin", "2")):
        with pytest.raises(SystemExit) as e:
            sweep.main(["--preset", "cpu-small", "--datasets", "mt-bench", flag, value, "--dry-run", "--device", "cpu"])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and f"{flag} {value}: only code-edits reads it" in err[0], err


def test_per_bin_zero_takes_every_prompt_in_the_bins(capsys):
    """``per_bin=0`` (``--per-bin 0``): every held-out prompt inside the bins, in bin order; a negative count is
    refused by the preset and, as one line with exit code 2, by the CLI."""
    from dataclasses import replace

    from hybridsd import data, zoo

    try:
        data.default_data_dir()
    except FileNotFoundError:
        pytest.skip("code_edits_dev.jsonl not available")
    preset = replace(sweep.PRESETS["edit-norm"], per_bin=0)
    cfg = dict(sweep.grid(preset, device="cpu"))["code-edits__ngram__pr"]
    picked = sweep.select_examples(cfg, preset, None)
    ids = set(json.loads((zoo.path(cfg.model) / "eval_split.json").read_text())["ids"])
    edges = results.norm_bins(preset.bin_width)
    inside = [e for e in data.load_code_edits(ids=ids, change_request=cfg.change_request)
              if 0 <= data.bin_index([e.edit_norm], edges)[0]]
    assert sorted(e.id for e in picked) == sorted(e.id for e in inside) and len(picked) > 16 * 8
    bins = data.bin_index([e.edit_norm for e in picked], edges)
    assert (np.diff(bins) >= 0).all()
    with pytest.raises(ValueError, match="per_bin"):
        replace(preset, per_bin=-1)
    with pytest.raises(SystemExit) as e:
        sweep.main(["--preset", "edit-norm", "--per-bin", "-1", "--dry-run"])
    assert e.value.code == 2 and "--per-bin" in capsys.readouterr().err
    sweep.main(["--preset", "edit-norm", "--per-bin", "0", "--methods", "ngram", "--dry-run", "--device", "cpu"])
    assert f"code-edits {len(inside)}" in capsys.readouterr().err


@pytest.fixture()
def fake_sweep(monkeypatch, tmp_path):
    """A sweep of mt-bench's plain and n-gram configs over three made-up prompts, whose spec_bench run writes a row
    for every prompt but ``p2`` (its generation failed) and records the configs it was called for."""
    from types import SimpleNamespace

    calls = []

    def run(cfg, examples, path):
        calls.append(cfg)
        rows = [{"config_key": cfg.key(), "example_id": e.id} for e in examples if e.id != "p2"]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return len(rows)

    monkeypatch.setattr(sweep, "select_examples", lambda cfg, preset, data_dir: [SimpleNamespace(id=f"p{i}")
                                                                                  for i in range(3)])
    monkeypatch.setattr(sweep.sb, "run", run)
    argv = ["--preset", "cpu-small", "--datasets", "mt-bench", "--methods", "none", "ngram", "--dataset-path",
            str(tmp_path), "--out-dir", str(tmp_path / "runs")]
    return argv, calls, tmp_path / "runs" / "sweep.json"


def test_prompts_left_without_a_row_are_recorded_and_fail_the_sweep(fake_sweep, monkeypatch, capsys):
    """A prompt whose generation failed has no row: sweep.json names it per config, and the sweep ends with one line
    and exit code 1 (after every config, so the rest are done); its run_info names the device it ran on."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "FakeGPU")
    argv, calls, manifest = fake_sweep
    with pytest.raises(SystemExit) as e:
        sweep.main([*argv, "--device", "cpu"])
    assert e.value.code == 1 and len(calls) == 4
    assert "4 prompt(s) have no row" in capsys.readouterr().err.strip().splitlines()[-1]
    call = json.loads(manifest.read_text())["calls"][-1]
    assert [c["prompts_without_row"] for c in call["configs"]] == [["p2"]] * 4
    assert [c["rows_written"] for c in call["configs"]] == [2] * 4
    assert call["run_info"]["device"].startswith("cpu (")


def test_a_call_is_on_record_from_its_start(fake_sweep, monkeypatch):
    """A sweep killed in its first config leaves its call (command, run_info) in sweep.json."""
    argv, _, manifest = fake_sweep

    def killed(cfg, examples, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep.sb, "run", killed)
    with pytest.raises(KeyboardInterrupt):
        sweep.main([*argv, "--device", "cpu"])
    call = json.loads(manifest.read_text())["calls"][-1]
    assert call["configs"] == [] and "--preset cpu-small" in call["command"] and call["run_info"]["commit"]


def test_a_second_sweep_into_the_same_folder_stops_at_once(fake_sweep, monkeypatch, capsys):
    """While a sweep holds its folder's sweep.json, a second one is one line and exit 2, before it records a call
    (its record would race the first's); so is a sweep whose config file a spec_bench run is writing."""
    from experiments import distributed as dp

    argv, calls, manifest = fake_sweep
    manifest.parent.mkdir(parents=True)
    with dp.exclusive(manifest):
        with pytest.raises(SystemExit) as e:
            sweep.main([*argv, "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and "sweep.json: another run is writing it" in err[-1]
    assert not calls and not manifest.exists()

    def busy(cfg, examples, path):
        raise dp.Busy(f"{path}: another run is writing it")

    monkeypatch.setattr(sweep.sb, "run", busy)
    with pytest.raises(SystemExit) as e:
        sweep.main([*argv, "--device", "cpu"])
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert e.value.code == 2 and len(err) == 1 and "none.jsonl: another run is writing it" in err[0]
    assert not (manifest.parent / "sweep.json.lock").exists()  # the lead's lock went with it


@pytest.mark.parametrize("argv, words", [(["--device", "nonsense"], "--device: not a torch device"),
                                         (["--device", "cuda:99"], "--device cuda:99: no such CUDA device"),
                                         (["--device", "mps"], "--device mps: runs on cuda (cuda:N) or cpu only"),
                                         (["--device", "cpu", "--methods", "eagle3"], "needs an eagle3 head"),
                                         (["--device", "cpu", "--methods", "replay"],
                                          ("has no config for --datasets mt-bench and --methods replay; it runs "
                                           "datasets code-edits, editeval, mt-bench and methods eagle, eagle3,"))])
def test_a_device_or_head_mistake_is_one_line_before_any_config(argv, words, fake_sweep, monkeypatch, capsys):
    argv0, calls, manifest = fake_sweep
    real = sweep.sb.checkpoint.zoo_heads
    monkeypatch.setattr(sweep.sb.checkpoint, "zoo_heads",
                        lambda folder: {k: v for k, v in real(folder).items() if k != "eagle3"})
    with pytest.raises(SystemExit) as e:
        sweep.main([*argv0, *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and words in err[0], err
    assert not calls and not manifest.exists()


def test_a_data_folder_given_enters_every_config_key(fake_sweep):
    """With --dataset-path the data read is part of each config (spec_bench's dataset_digest): other bytes under the
    same path are other configs, so a resumed sweep does not take their prompts as done."""
    from hybridsd.data import local_digest

    argv, calls, _ = fake_sweep
    data = Path(argv[argv.index("--dataset-path") + 1]) / "mt_bench.jsonl"
    keys = []
    for text in ('{"question_id": 1}\n', '{"question_id": 2}\n'):
        data.write_text(text)
        calls.clear()
        with pytest.raises(SystemExit):  # the fake run leaves a prompt without a row
            sweep.main([*argv, "--device", "cpu"])
        assert {c.dataset_digest for c in calls} == {local_digest(data)} != {None}
        keys.append({c.key() for c in calls})
    assert not keys[0] & keys[1]


def test_a_config_file_stored_compressed_is_one_line_before_any_config(fake_sweep, capsys):
    """A config's file kept as ``.jsonl.gz`` (as the stored sweeps are): a rerun into the folder would make every
    row again beside that copy's, so it is one line naming the file and exit code 2, before any config."""
    import gzip

    argv, calls, manifest = fake_sweep
    manifest.parent.mkdir(parents=True)
    (manifest.parent / "mt-bench__ngram__k3.jsonl.gz").write_bytes(gzip.compress(b'{"config_key": "a"}\n'))
    with pytest.raises(SystemExit) as e:
        sweep.main([*argv, "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert "mt-bench__ngram__k3.jsonl.gz beside it holds its rows compressed" in err[0]
    assert not calls and not manifest.exists()
