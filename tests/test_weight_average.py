"""experiments.weight_average: every tensor (1 - w) A + w B (or w1 M1 + w2 M2 + ...) in the first model's dtype and
shard layout, its other files kept, the record naming every parent, and bad input refused with one line before
anything is written."""

import json

import pytest
import torch
from conftest import tiny_target
from safetensors.torch import load_file

from experiments import weight_average as wa


def _save(tmp_path, name: str, seed: int, dtype=torch.bfloat16, **overrides):
    folder = tmp_path / name
    tiny_target(seed=seed, vocab=97, **overrides).to(dtype).save_pretrained(folder, max_shard_size="100KB")
    return folder


def _weights(folder):
    out = {}
    for p in wa.shards(folder):
        out.update(load_file(p))
    return out


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.75, 1.0, 4 / 3])
def test_every_tensor_is_the_weighted_mean_in_a_dtype(tmp_path, weight):
    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    (a / "eagle1").mkdir()
    (a / "eagle1" / "config.json").write_text("{}")  # a head folder, kept as A's
    assert len(wa.shards(a)) > 1  # several shards: the layout is kept shard by shard
    past_b = ["--extrapolate"] if weight > 1 else []  # beyond B on the line from A: A's weight is negative
    wa.main([str(a), str(b), "--weight", str(weight), *past_b, "--out", str(tmp_path / "out")])
    out, wa_, wb = (_weights(f) for f in (tmp_path / "out", a, b))
    assert out.keys() == wa_.keys()
    for k, t in out.items():  # the slow reference: element by element in float64, rounded once to bf16
        ref = ((1 - weight) * wa_[k].double() + weight * wb[k].double()).to(torch.bfloat16)
        assert t.dtype == torch.bfloat16
        # fp32's rounding of the sum (at most 2^-23 of |A| + |B|) may move the final rounding by one bf16 ulp
        slack = 2 ** -7 * ref.double().abs() + 2 ** -22 * (wa_[k].double().abs() + wb[k].double().abs())
        assert bool(((t.double() - ref.double()).abs() <= slack).all()), k
        if weight in (0.0, 1.0):
            assert torch.equal(t, (wa_ if weight == 0.0 else wb)[k])
    assert (tmp_path / "out" / "eagle1" / "config.json").is_file()
    record = json.loads((tmp_path / "out" / "average_config.json").read_text())
    assert record["weight"] == weight and record["a"]["path"] == str(a) and record["b"]["path"] == str(b)
    assert set(record["shards"]) == {p.name for p in wa.shards(a)} == set(record["a"]["shards"])
    assert record["shards"] == {p.name: wa.sha256(p) for p in wa.shards(tmp_path / "out")}
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")  # loads as a model
    assert model.config.vocab_size == 97


@pytest.mark.parametrize("weights", [(0.4, 0.2, 0.2, 0.2), (0.2, 0.2, 0.15, 0.15, 0.15, 0.15), (0.0, 1.0, 0.0)])
def test_a_soup_of_several_is_their_weighted_sum(tmp_path, weights):
    folders = [_save(tmp_path, f"m{i}", i) for i in range(len(weights))]
    wa.main([str(f) for f in folders] + ["--weights", *map(str, weights), "--out", str(tmp_path / "out")])
    out, parents = _weights(tmp_path / "out"), [_weights(f) for f in folders]
    for k, t in out.items():  # the slow reference: in float64, rounded once to bf16
        exact = sum(w * p[k].double() for w, p in zip(weights, parents))
        ref = exact.to(torch.bfloat16).double()
        slack = 2 ** -7 * ref.abs() + 2 ** -21 * sum(p[k].double().abs() for p in parents)
        assert t.dtype == torch.bfloat16 and bool(((t.double() - ref).abs() <= slack).all()), k
        if weights == (0.0, 1.0, 0.0):
            assert torch.equal(t, parents[1][k])
    record = json.loads((tmp_path / "out" / "average_config.json").read_text())
    assert record["weights"] == list(weights) and "a" not in record and "weight" not in record
    assert [m["path"] for m in record["models"]] == [str(f) for f in folders]
    assert [m["shards"] for m in record["models"]] == [{p.name: wa.sha256(p) for p in wa.shards(f)} for f in folders]
    assert record["shards"] == {p.name: wa.sha256(p) for p in wa.shards(tmp_path / "out")}


def test_two_models_by_weights_equal_the_pair_by_weight(tmp_path):
    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    wa.main([str(a), str(b), "--weight", "0.75", "--out", str(tmp_path / "x")])
    wa.main([str(a), str(b), "--weights", "0.25", "0.75", "--out", str(tmp_path / "y")])
    x, y = _weights(tmp_path / "x"), _weights(tmp_path / "y")
    assert all(torch.equal(x[k], y[k]) for k in x)
    rx, ry = (json.loads((tmp_path / f / "average_config.json").read_text()) for f in ("x", "y"))
    assert rx["weight"] == ry["weight"] == 0.75 and rx["weights"] == ry["weights"] == [0.25, 0.75]
    assert rx["a"] == ry["a"] == rx["models"][0] and rx["b"] == ry["b"] == ry["models"][1]


def test_b_sharded_otherwise_averages_the_same(tmp_path):
    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    whole = tmp_path / "b_whole"  # the same weights as B in one file
    tiny_target(seed=1, vocab=97).to(torch.bfloat16).save_pretrained(whole)
    assert len(wa.shards(whole)) == 1 < len(wa.shards(b))
    wa.main([str(a), str(b), "--weight", "0.3", "--out", str(tmp_path / "x")])
    wa.main([str(a), str(whole), "--weight", "0.3", "--out", str(tmp_path / "y")])
    x, y = _weights(tmp_path / "x"), _weights(tmp_path / "y")
    assert all(torch.equal(x[k], y[k]) for k in x)


def test_in_place_on_a_replaces_only_the_weights(tmp_path):
    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    (a / "training_config.json").write_text('{"kept": true}')
    before = _weights(a)
    wa.main([str(a), str(b), "--weight", "0.5", "--out", str(a)])
    after = _weights(a)
    assert json.loads((a / "training_config.json").read_text()) == {"kept": True}
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert not list(a.glob("*.tmp"))


@pytest.mark.parametrize("case, message", [
    ("weight", "--weight must be in [0, 1], got 1.5 (past B: --extrapolate)"),
    ("weight_negative_extrapolated", "--weight must be finite and >= 0 with --extrapolate, got -0.5"),
    ("extrapolate_weights", "--extrapolate is for --weight (two models A B)"),
    ("weights_sum", "--weights must each be in [0, 1] and sum to 1, got [0.5, 0.6]"),
    ("weights_count", "--weights gives 3 weights for 2 models"),
    ("weight_of_three", "--weight is for two models (A B), got 3"),
    ("one_model", "give two or more model folders, got 1"),
    ("third_differs", "M1 and M3 are different architectures"),
    ("missing", "B: no model folder (config.json)"),
    ("architecture", "different architectures: config.json differs in head_dim, hidden_size"),
    ("no_safetensors", "A: no safetensors weights"),
    ("missing_shard", "model-00001-of-00004.safetensors, which"),
    ("dtype", "is BF16"),
    ("config_not_json", "config.json is not valid JSON"),
    ("config_a_list", "config.json must hold a JSON object"),
    ("linked_outside", "outside the checkpoint folder"),
])
def test_bad_input_is_one_line_before_any_work(tmp_path, capsys, case, message):
    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    weight = "1.5" if case == "weight" else "0.5"
    if case == "missing":
        b = tmp_path / "nowhere"
    if case == "architecture":
        b = _save(tmp_path, "wide", 1, hidden_size=96, intermediate_size=128)
    if case == "no_safetensors":
        for p in [*wa.shards(a), a / "model.safetensors.index.json"]:
            p.unlink()
    if case == "missing_shard":
        wa.shards(a)[0].unlink()
    if case == "dtype":
        b = _save(tmp_path, "fp32", 1, dtype=torch.float32)
    if case in ("config_not_json", "config_a_list"):
        (b / "config.json").write_text("{oops" if case == "config_not_json" else "[1]")
    if case == "linked_outside":  # B's shards are links to another model's
        elsewhere = _save(tmp_path, "elsewhere", 2)
        for p in wa.shards(b):
            p.unlink()
            p.symlink_to(elsewhere / p.name)
    models, mix = [str(a), str(b)], ["--weight", weight]
    if case == "weight_negative_extrapolated":
        mix = ["--weight", "-0.5", "--extrapolate"]
    if case == "extrapolate_weights":
        mix = ["--weights", "0.5", "0.5", "--extrapolate"]
    if case == "weights_sum":
        mix = ["--weights", "0.5", "0.6"]
    if case == "weights_count":
        mix = ["--weights", "0.5", "0.25", "0.25"]
    if case == "weight_of_three":
        models.append(str(a))
    if case == "one_model":
        models = [str(a)]
    if case == "third_differs":
        models.append(str(_save(tmp_path, "wide", 2, hidden_size=96, intermediate_size=128)))
        mix = ["--weights", "0.5", "0.25", "0.25"]
    out = tmp_path / "out"
    capsys.readouterr()  # the saves' progress bars
    with pytest.raises(SystemExit) as e:
        wa.main(models + mix + ["--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_a_failed_write_is_one_line_and_not_a_usage_error(tmp_path, monkeypatch, record_stderr):
    """A write that fails during the run (a full disk): one 'error:' line naming it, exit code 1, no usage text."""
    import errno

    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(wa, "write_atomic", full)
    writes = record_stderr()
    with pytest.raises(SystemExit) as e:
        wa.main([str(a), str(b), "--weight", "0.5", "--out", str(tmp_path / "out")])
    assert e.value.code == 1 and len(writes) == 1 and writes[0].endswith("\n"), writes  # one line, one write
    assert "error:" in writes[0] and "No space left" in writes[0] and "usage" not in writes[0]


def test_an_out_that_cannot_be_written_is_refused_before_reading_weights(tmp_path, capsys, monkeypatch):
    """OUT under a regular file cannot be made: one line naming it, exit code 2, no shard read."""
    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "out"
    monkeypatch.setattr(wa, "load_shard", lambda p: pytest.fail(f"{p} was read before --out was checked"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        wa.main([str(a), str(b), "--weight", "0.5", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and f"--out {out}" in err[0] and "is a file" in err[0], err


class Killed(BaseException):
    """A kill: not an Exception, so nothing on the way catches it."""


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kill", ["first_shard", "config", "between_renames", "cleanup"])
def test_a_killed_in_place_run_leaves_a_whole_and_a_rerun_averages_once(tmp_path, monkeypatch, capsys, kill):
    """A run with --out A killed at any point leaves the old A (put back by the next run when killed between the
    swap's renames) or the new average; the next run gives exactly 0.5 A + 0.5 B of the old A, never a mix."""
    import os
    import shutil

    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    (a / "eagle1").mkdir()
    (a / "eagle1" / "model.safetensors").write_bytes(b"a head's weights, kept as they are")
    old, wb = _files(a), _weights(b)
    exact = {k: (0.5 * t.float() + 0.5 * wb[k].float()).to(t.dtype) for k, t in _weights(a).items()}
    real_write, real_rename, real_rmtree = wa.write_atomic, os.rename, shutil.rmtree

    def write(path, data):
        real_write(path, data)
        if kill == "first_shard" or (kill == "config" and path.name == "average_config.json"):
            raise Killed

    def rename(src, dst):
        real_rename(src, dst)
        if kill == "between_renames" and str(dst).endswith(".replaced"):
            raise Killed

    def rmtree(path, *args, **kw):
        if kill == "cleanup" and str(path).endswith(".replaced"):
            raise Killed
        real_rmtree(path, *args, **kw)

    with monkeypatch.context() as m:
        m.setattr(wa, "write_atomic", write)
        m.setattr(os, "rename", rename)
        m.setattr(shutil, "rmtree", rmtree)
        with pytest.raises(Killed):
            wa.main([str(a), str(b), "--weight", "0.5", "--out", str(a)])
    if kill == "cleanup":  # the swap was done: A is the new average
        assert all(torch.equal(t, exact[k]) for k, t in _weights(a).items())
        wa.recover(a)
    else:
        if kill == "between_renames":
            assert not a.exists()
            wa.recover(a)  # what the next run does first
        assert _files(a) == old  # the old A, byte for byte
        wa.main([str(a), str(b), "--weight", "0.5", "--out", str(a)])
        after = _weights(a)
        assert after.keys() == exact.keys() and all(torch.equal(after[k], exact[k]) for k in exact)
        assert (a / "eagle1" / "model.safetensors").read_bytes() == old[(a / "eagle1" / "model.safetensors")
                                                                          .relative_to(a)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # nothing left beside them


@pytest.mark.parametrize("which", ["a", "b"])
def test_a_truncated_shard_is_one_line_naming_it(tmp_path, capsys, which):
    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    shard = wa.shards(a if which == "a" else b)[-1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    before = _files(a)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        wa.main([str(a), str(b), "--weight", "0.5", "--out", str(a)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and str(shard) in err[0] and "Traceback" not in err[0], err
    assert _files(a) == before


@pytest.mark.parametrize("case", ["not_a_model", "holds_a", "a_file", "is_b", "inside_a", "inside_b"])
def test_an_out_it_must_not_replace_is_refused(tmp_path, capsys, case):
    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    (b / "eagle1").mkdir()
    (b / "eagle1" / "config.json").write_text("{}")  # B's own head: replacing B by A's files would lose it
    out = {"not_a_model": tmp_path / "notes", "holds_a": tmp_path, "a_file": tmp_path / "f", "is_b": b,
           "inside_a": a / "avg", "inside_b": b / "eagle1" / "avg"}[case]  # inside A: A's copy would nest it
    if case == "not_a_model":
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    if case == "a_file":
        out.write_text("mine")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        wa.main([str(a), str(b), "--weight", "0.5", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--out" in err[0], err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_shard_its_index_does_not_name_is_neither_averaged_nor_a_weight(tmp_path):
    """A stray safetensors file beside the index is a file of A's like any other: copied, not averaged in."""
    from safetensors.torch import save_file

    a, b = _save(tmp_path, "a", 0), _save(tmp_path, "b", 1)
    save_file({"stray": torch.ones(3)}, a / "zz-stray.safetensors")
    assert "zz-stray.safetensors" not in {p.name for p in wa.shards(a)}
    wa.main([str(a), str(b), "--weight", "0.5", "--out", str(tmp_path / "out")])
    record = json.loads((tmp_path / "out" / "average_config.json").read_text())
    assert "zz-stray.safetensors" not in record["shards"] and "stray" not in _weights(tmp_path / "out")
    assert torch.equal(load_file(tmp_path / "out" / "zz-stray.safetensors")["stray"], torch.ones(3))
