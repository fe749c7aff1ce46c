"""spec_bench's bad input, table-driven: each is one line on stderr naming the problem, exit code 2, no traceback,
and no results file (no work done); one subprocess check that nothing else is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny_target
from tiny_checkpoints import datasets_on_disk, target_folder

import hybridsd as hsd
from experiments import spec_bench

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A good target + heads + datasets, and bad ones: heads for another hidden size / vocabulary, a head
    whose config fits but whose weights do not, datasets with wrong columns, a corrupt line, a missing field."""
    root = tmp_path_factory.mktemp("cli")
    target_folder(root, "llama")
    data = datasets_on_disk(root)
    hsd.EagleHead.from_target(tiny_target("llama", vocab=10240, hidden_size=32, num_attention_heads=2),
                              "eagle1").save_pretrained(root / "head-h32")
    hsd.EagleHead.from_target(tiny_target("llama", vocab=67), "eagle1").save_pretrained(root / "head-v67")
    hsd.EagleHead.from_target(tiny_target("llama", vocab=10240, hidden_size=32, num_attention_heads=2),
                              "eagle1").save_pretrained(root / "head-lying")
    cfg = json.loads((root / "head-lying" / "config.json").read_text())
    (root / "head-lying" / "config.json").write_text(json.dumps({**cfg, "hidden_size": 64, "head_dim": 16}))
    (root / "not-a-model").mkdir()
    import datasets

    datasets.Dataset.from_dict({"question": ["a"], "answer": ["b"]}).to_parquet(str(root / "wrong.parquet"))
    (root / "corrupt.jsonl").write_text('{"turns": ["hi"]}\n{"turns": ["x"\n')
    (root / "no-turns.jsonl").write_text('{"turns": ["hi"]}\n{"category": "math"}\n')
    (root / "own").mkdir()
    (root / "own" / "mt_bench.jsonl").write_text('{"question_id": 1, "turns": ["hi"]}\n{"question_id": 2}\n')
    return {"root": root, "model": root / "llama", "eagle1": root / "llama-eagle1", "eagle3": root / "llama-eagle3",
            **{f"data-{k}": v for k, v in data.items()}}


def _case(*argv: str, want: str) -> tuple[tuple[str, ...], str]:
    return argv, want


M, E1, E3, D = "{model}", "{eagle1}", "{eagle3}", "{data-mt-bench}"
GOOD = ("--model-dir", M, "--dataset-name", "hf", "--dataset-path", D, "--device", "cpu")
CASES = {
    "hub id offline": _case("--model-dir", "nobody/no-such-model", "--method", "ngram", "--dataset-name", "hf",
                            "--dataset-path", D, want="cannot reach model 'nobody/no-such-model'"),
    "folder not a model": _case("--model-dir", "{root}/not-a-model", "--method", "ngram",
                                want="is not a model folder (no config.json)"),
    "missing model folder": _case("--model-dir", "{root}/nothing/here", "--method", "ngram", want="no such folder"),
    "head hidden size": _case(*GOOD, "--method", "eagle", "--eagle-dir", "{root}/head-h32",
                              want="hidden_size 32 vs the target's 64"),
    "head vocabulary": _case(*GOOD, "--method", "eagle", "--eagle-dir", "{root}/head-v67",
                             want="vocab_size 67 vs the target's 10240"),
    "head weights": _case(*GOOD, "--method", "eagle", "--eagle-dir", "{root}/head-lying",
                          want="'fc.weight': the checkpoint has shape [32, 64]"),
    "head kind": _case(*GOOD, "--method", "eagle3", "--eagle-dir", E1, want="holds an eagle1 head; --method eagle3"),
    "missing head": _case(*GOOD, "--method", "eagle", "--eagle-dir", "{root}/no-head", want="--eagle-dir"),
    "no head for non-zoo model": _case(*GOOD, "--method", "ngram-eagle", want="needs an eagle1 head: pass --eagle-dir"),
    "dataset columns": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                             "{root}/wrong.parquet",
                             want="has columns ['answer', 'question']; expected the columns of"),
    "dataset hub id offline": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                                    "nobody/no-such-data", want="cannot reach dataset 'nobody/no-such-data'"),
    "missing dataset path": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                                  "{root}/nothing.jsonl", want="nothing.jsonl: no such file or folder"),
    "missing data folder": _case("--method", "ngram", "--dataset-name", "mt-bench", "--dataset-path",
                                 "{root}/nothing", want="mt_bench.jsonl not found"),
    "hf without path": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf",
                             want="--dataset-name hf needs --dataset-path"),
    "corrupt row": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                         "{root}/corrupt.jsonl", want="corrupt.jsonl line 2 is not a JSON object"),
    "row missing a field": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                                 "{root}/no-turns.jsonl", want="no-turns.jsonl row 1: 'turns' must be"),
    "own set missing a field": _case("--method", "ngram", "--dataset-name", "mt-bench", "--dataset-path",
                                     "{root}/own", want="mt_bench.jsonl line 2: the row has no field 'turns'"),
    "tp 2": _case(*GOOD, "--tp", "2", want="--tp 2: only 1 is supported"),
    "max-num-seqs": _case(*GOOD, "--max-num-seqs", "4", want="--max-num-seqs 4: only 1"),
    "k zero": _case(*GOOD, "--method", "ngram", "--num-spec-tokens", "0", want="every count must be an integer >= 1"),
    "k negative per method": _case(*GOOD, "--num-speculative-tokens-per-method", '{"ngram": -1, "eagle": 3}',
                                   want="every count must be an integer >= 1"),
    "per method not JSON": _case(*GOOD, "--num-speculative-tokens-per-method", "{ngram: 5}", want="not JSON"),
    "per method unknown key": _case(*GOOD, "--num-speculative-tokens-per-method", '{"medusa": 5}',
                                    want="want a JSON object over ngram/eagle/eagle3"),
    "negative output len": _case(*GOOD, "--output-len", "-5", want="--output-len must be >= 1, got -5"),
    "negative hf output len": _case(*GOOD, "--hf-output-len", "-1", want="--hf-output-len must be >= 1"),
    "lookup min > max": _case(*GOOD, "--prompt_lookup_min", "4", "--prompt_lookup_max", "2",
                              want="--prompt-lookup-min (4) must be <= --prompt-lookup-max (2)"),
    "num prompts zero": _case(*GOOD, "--num-prompts", "0", want="--num-prompts must be >= 1, got 0"),
    "num prompts negative": _case(*GOOD, "--num-prompts", "-1", want="--num-prompts must be >= 1, got -1"),
    "temperature negative": _case(*GOOD, "--temperature", "-1", want="--temperature must be a finite number >= 0"),
    "temperature nan": _case(*GOOD, "--temp", "nan", want="--temperature must be a finite number >= 0, got nan"),
    "unknown method": _case(*GOOD, "--method", "medusa", want="argument --method: invalid choice: 'medusa'"),
    "bin width": _case(*GOOD, "--method", "ngram", "--per-bin", "4", "--bin-width", "0.07",
                       want="--bin-width must divide 0.6 into whole bins, got 0.07"),
    "per bin negative": _case(*GOOD, "--method", "ngram", "--per-bin", "-1",
                              want="--per-bin must be >= 0 (0: every prompt inside the bins), got -1"),
    "exact with a dynamic tree": _case(*GOOD, "--method", "eagle3", "--tree", "dynamic", "--exact",
                                       want="--exact verifies at most 2 draft branches a step"),
    "no prompts left": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                             "{data-blazedit}", "--blazedit-min-distance", "0.9", want="no prompts left"),
}


@pytest.fixture
def offline(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_exit_2(name, inputs, offline, tmp_path, capsys):
    argv, want = CASES[name]
    out = tmp_path / "out.jsonl"
    for k, v in inputs.items():
        argv = [a.replace("{" + k + "}", str(v)) for a in argv]
    argv = [*argv, "--output", str(out)]
    with pytest.raises(SystemExit) as exc:
        spec_bench.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spec_bench: error: "), err
    assert want in err[0], err[0]
    assert not out.exists()  # no work done


def test_subprocess_prints_one_line_and_no_traceback(inputs, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "experiments.spec_bench", "--model-dir", "nobody/no-such-model",
            "--method", "ngram", "--output", str(tmp_path / "o.jsonl")]
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "nobody/no-such-model" in r.stderr
