"""experiments.tree_al: the per-(depth, rank) acceptance fit, the analytic prediction and the run recording."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_target

from experiments import tree_al
from hybridsd.analytic import tree_al as analytic_tree_al
from hybridsd.drafters.eagle_tree import EagleTreeDrafter
from hybridsd.eagle.model import EagleHead
from hybridsd.generate import generate


def _simulate(rng, rate, steps: int):
    """Random trees walked from the root: each child, tried in order, passes w.p. ``rate(depth, rank)``."""
    out = []
    for _ in range(steps):
        n = int(rng.integers(1, 12))
        parents = tuple(int(rng.integers(-1, i)) for i in range(n))
        keys = tree_al._keys(parents)
        path, node = [], -1
        while True:
            nxt = next((c for c in range(n) if parents[c] == node and rng.random() < rate(*keys[c])), None)
            if nxt is None:
                break
            path.append(nxt)
            node = nxt
        out.append((parents, path))
    return out


def test_cross_fitted_prediction_matches_simulated_acceptance():
    rng = np.random.default_rng(0)
    rate = lambda d, r: 0.8 / (d + r)  # noqa: E731
    steps = _simulate(rng, rate, 4000)
    res = tree_al.compare(steps)
    truth = np.mean([analytic_tree_al(p, [rate(*k) for k in tree_al._keys(p)], sequential=True) for p, _ in steps])
    assert res["measured_al"] == pytest.approx(truth, abs=0.03)
    assert res["predicted_al"] == pytest.approx(res["measured_al"], abs=0.03)
    assert res["steps"] == 4000 and res["rates"]["1,0"][1] == 4000  # every step tries the root's first child
    with pytest.raises(ValueError, match="folds"):
        tree_al.compare(steps[:1])


def test_acceptance_table_counts_tries_after_failed_siblings():
    # root children 0, 1, 2; node 3 under 1; path [1, 3]: 0 tried and failed, 1 passed, 2 never tried
    table = tree_al.acceptance_table([((-1, -1, -1, 1), [1, 3])])
    assert table == {(1, 0): (0, 1), (1, 1): (1, 1), (2, 0): (1, 1)}
    assert tree_al.sibling_ranks((-1, -1, 0, 0, -1, 2)).tolist() == [0, 1, 0, 1, 2, 0]


def test_accepted_path_follows_tokens():
    tokens, parents = [5, 5, 7, 8, 9], (-1, -1, 0, 1, 3)
    assert tree_al.accepted_path(tokens, parents, [5, 8, 9]) == [1, 3, 4]  # the first 5 leads nowhere
    assert tree_al.accepted_path(tokens, parents, []) == []
    with pytest.raises(ValueError, match="no path"):
        tree_al.accepted_path(tokens, parents, [7])


def test_recorded_run_gives_each_tree_step_its_path():
    model = tiny_target("llama", vocab=9, seed=3, initializer_range=0.2)
    head = EagleHead.from_target(model, kind="eagle3")
    rec = tree_al.Recorder(EagleTreeDrafter(head, depth=3, top_k=3, nodes=8))
    ids = torch.arange(1, 12) % 9
    res = generate(model, ids, drafter=rec, max_new_tokens=20, eos_token_id=[])
    steps = tree_al.steps_of(res, rec.trees)
    tree_steps = [r for r in res.stats.trace if r.tree_tokens]
    assert len(steps) == len(tree_steps) == len(rec.trees) > 0
    assert [len(path) for _, path in steps] == [r.accepted for r in tree_steps]
    assert sum(r.accepted for r in tree_steps) > 0  # some paths are not empty
    assert res.tokens == generate(model, ids, max_new_tokens=20, eos_token_id=[]).tokens


@pytest.fixture(scope="module")
def non_zoo(tmp_path_factory):
    """A tiny target folder with its EAGLE heads beside it (not a zoo model), and two MT-Bench questions."""
    import json

    from tiny_checkpoints import target_folder

    root = tmp_path_factory.mktemp("tree_al")
    target_folder(root, "llama")
    (root / "data").mkdir()
    (root / "data" / "mt_bench.jsonl").write_text("".join(json.dumps({"question_id": i, "turns": [q]}) + "\n" for i, q
                                                          in enumerate(["Write a haiku.", "What is 2 + 2?"])))
    return root


def _tree_al(root, *extra):
    return ["--model", str(root / "llama"), "--method", "eagle3", "--dataset-name", "mt-bench", "--data-dir",
            str(root / "data"), "--num-prompts", "2", "--output-len", "6", "--tree-depth", "3", "--tree-top-k", "3",
            "--tree-nodes", "8", "--device", "cpu", *extra]


def test_a_non_zoo_model_runs_with_its_head_from_eagle_dir(non_zoo, tmp_path):
    import json

    out = tmp_path / "tree_al.json"
    tree_al.main(_tree_al(non_zoo, "--eagle-dir", str(non_zoo / "llama-eagle3"), "--out", str(out)))
    res = json.loads(out.read_text())
    assert res["steps"] >= 2 and res["args"]["eagle_dir"] == str(non_zoo / "llama-eagle3")


@pytest.mark.parametrize("head, want", [(None, "needs an eagle3 head: pass --eagle-dir"),
                                        ("no-head", "--eagle-dir"), ("llama-eagle1", "holds an eagle1 head")])
def test_a_missing_or_wrong_head_is_one_line_before_any_work(non_zoo, tmp_path, capsys, monkeypatch, head, want):
    monkeypatch.setattr(tree_al, "record", lambda *a, **k: pytest.fail("ran the target"))
    out = tmp_path / "tree_al.json"
    with pytest.raises(SystemExit) as e:
        tree_al.main(_tree_al(non_zoo, *(["--eagle-dir", str(non_zoo / head)] if head else []), "--out", str(out)))
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "error:" in err[0] and "Traceback" not in err[0], err
    assert want in err[0] and (head is None or head in err[0]) and "unrecognized" not in err[0] and not out.exists()


def test_a_target_that_lacks_weights_is_one_line(non_zoo, tmp_path, capsys):
    """A checkpoint without a weight its config describes: found when read, reported as one line, exit code 2."""
    from safetensors.torch import load_file, save_file

    lacking = tmp_path / "lacking"
    lacking.mkdir()
    for f in (non_zoo / "llama").iterdir():
        (lacking / f.name).write_bytes(f.read_bytes())
    sd = load_file(str(lacking / "model.safetensors"))
    save_file({k: v for k, v in sd.items() if k != "model.norm.weight"}, str(lacking / "model.safetensors"))
    argv = _tree_al(non_zoo, "--eagle-dir", str(non_zoo / "llama-eagle3"), "--out", str(tmp_path / "t.json"))
    argv[argv.index("--model") + 1] = str(lacking)
    with pytest.raises(SystemExit) as e:
        tree_al.main(argv)
    err = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]  # besides transformers' progress
    assert e.value.code == 2 and len(err) == 1 and "lacks 1 of the weights" in err[0], err
