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
    (root / "no-weights").mkdir()
    (root / "no-weights" / "config.json").write_text((root / "llama" / "config.json").read_text())
    for name, files in (("no-tokenizer", ("config.json", "model.safetensors")),
                        ("no-chat-template", ("config.json", "model.safetensors", "tokenizer.json",
                                              "tokenizer_config.json"))):  # a base model's: no chat_template.jinja
        (root / name).mkdir()
        for f in files:
            (root / name / f).write_bytes((root / "llama" / f).read_bytes())
    import torch
    from safetensors.torch import load_file, save_file

    other = root / "head-other-embedding"  # an EAGLE-1 head shipping another model's input embedding (same shape)
    other.mkdir()
    (other / "config.json").write_bytes((root / "llama-eagle1" / "config.json").read_bytes())
    sd = load_file(str(root / "llama-eagle1" / "model.safetensors"))
    own = load_file(str(root / "llama" / "model.safetensors"))["model.embed_tokens.weight"]
    save_file({**sd, "embed_tokens.weight": torch.randn_like(own)}, str(other / "model.safetensors"))
    no_bos = root / "no-bos"  # a tokenizer that adds no BOS of its own (as Qwen's): the template writes it alone
    no_bos.mkdir()
    for f in (root / "llama").iterdir():
        if f.is_file():
            (no_bos / f.name).write_bytes(f.read_bytes())
    tok = json.loads((no_bos / "tokenizer.json").read_text())
    (no_bos / "tokenizer.json").write_text(json.dumps({**tok, "post_processor": None}))
    import datasets

    datasets.Dataset.from_dict({"question": ["a"], "answer": ["b"]}).to_parquet(str(root / "wrong.parquet"))
    (root / "corrupt.jsonl").write_text('{"turns": ["hi"]}\n{"turns": ["x"\n')
    (root / "no-turns.jsonl").write_text('{"turns": ["hi"]}\n{"category": "math"}\n')
    (root / "own").mkdir()
    (root / "own" / "mt_bench.jsonl").write_text('{"question_id": 1, "turns": ["hi"]}\n{"question_id": 2}\n')
    (root / "twice.jsonl").write_text('{"question_id": 7, "turns": ["a"]}\n{"question_id": 7, "turns": ["b"]}\n')
    (root / "index.jsonl").write_text('{"question_id": 1, "turns": ["a"]}\n{"turns": ["b"]}\n')  # row 1's id: "1"
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
    "distances swapped": _case(*GOOD, "--blazedit-min-distance", "0.3", "--blazedit-max-distance", "0.1",
                               want="--blazedit-min-distance (0.3) must be <= --blazedit-max-distance (0.1)"),
    "distance nan": _case(*GOOD, "--blazedit-max-distance", "nan", want="--blazedit-min/max-distance must be finite"),
    "num prompts zero": _case(*GOOD, "--num-prompts", "0", want="--num-prompts must be >= 1, got 0"),
    "num prompts negative": _case(*GOOD, "--num-prompts", "-1", want="--num-prompts must be >= 1, got -1"),
    "temperature negative": _case(*GOOD, "--temperature", "-1", want="--temperature must be a finite number >= 0"),
    "temperature nan": _case(*GOOD, "--temp", "nan", want="--temperature must be a finite number >= 0, got nan"),
    "unknown method": _case(*GOOD, "--method", "medusa", want="argument --method: invalid choice: 'medusa'"),
    "bin width": _case(*GOOD, "--method", "ngram", "--per-bin", "4", "--bin-width", "0.07",
                       want="--bin-width must divide 0.6 into whole bins, got 0.07"),
    "bin width without per bin": _case(*GOOD, "--method", "ngram", "--bin-width", "0.1",
                                       want="--bin-width 0.1: only --per-bin reads it"),
    "per bin of MT-Bench": _case("--method", "ngram", "--dataset-name", "mt-bench", "--per-bin", "2",
                                 want="--per-bin 2: --dataset-name mt-bench does not use it (used by hf, code-edits, "
                                 "editeval)"),
    "per bin negative": _case(*GOOD, "--method", "ngram", "--per-bin", "-1",
                              want="--per-bin must be >= 0 (0: every prompt inside the bins), got -1"),
    "exact with a dynamic tree": _case(*GOOD, "--method", "eagle3", "--tree", "dynamic", "--exact",
                                       want="--exact verifies at most 2 draft branches a step"),
    "output is a folder": _case(*GOOD, "--method", "ngram", "--output", "{root}", want="is a folder, not a file"),
    "output parent is a file": _case(*GOOD, "--method", "ngram", "--output", "{root}/wrong.parquet/new/out.jsonl",
                                     want="cannot make the folder {root}/wrong.parquet/new: {root}/wrong.parquet is "
                                     "a file"),
    "hybrid policy for ngram": _case(*GOOD, "--method", "ngram", "--hybrid-policy", "tree",
                                     want="--hybrid-policy tree: --method ngram does not use it (used by ngram-eagle, "
                                     "ngram-eagle3)"),
    "lossless check of plain decoding": _case(*GOOD, "--method", "none", "--check-lossless",
                                              want="--check-lossless: --method none does not use it (used by ngram,"),
    "hf split of the project's sets": _case("--method", "ngram", "--dataset-name", "mt-bench", "--hf-split", "test",
                                            want="--hf-split test: --dataset-name mt-bench does not use it (used by "
                                            "hf)"),
    "hf split of a data folder": _case("--method", "ngram", "--dataset-name", "editeval", "--dataset-path",
                                       "{root}/own", "--hf-split", "test",
                                       want="--hf-split test: --dataset-name editeval does not use it"),
    "shuffle order of a project set": _case("--method", "ngram", "--dataset-name", "code-edits", "--disable-shuffle",
                                            want="--disable-shuffle: --dataset-name code-edits does not use it"),
    "code-edit split of MT-Bench": _case("--method", "ngram", "--dataset-name", "mt-bench", "--split", "all",
                                         want="--split all: --dataset-name mt-bench does not use it"),
    "edit-norm filter of MT-Bench": _case("--method", "ngram", "--dataset-name", "mt-bench",
                                          "--blazedit-max-distance", "0.2",
                                          want="--blazedit-max-distance 0.2: --dataset-name mt-bench does not use"),
    "model without a tokenizer": _case("--model-dir", "{root}/no-tokenizer", "--method", "ngram", "--dataset-name",
                                       "hf", "--dataset-path", D, want="no-tokenizer' has no tokenizer (none of"),
    "head folder as the model": _case("--model-dir", E1, "--method", "ngram", "--dataset-name", "hf",
                                      "--dataset-path", D, want="llama-eagle1' has no tokenizer"),
    "model without a chat template": _case("--model-dir", "{root}/no-chat-template", "--method", "ngram",
                                           "--dataset-name", "hf", "--dataset-path", D,
                                           want="its tokenizer has no chat template (a base model?); pass "
                                           "--skip-chat-template"),
    "doubled BOS without a chat template": _case(*GOOD, "--method", "ngram", "--skip-chat-template", "--double-bos",
                                                want="--double-bos doubles the BOS that the chat template writes"),
    "doubled BOS where the tokenizer adds none": _case("--model-dir", "{root}/no-bos", "--method", "ngram",
                                                       "--dataset-name", "hf", "--dataset-path", D, "--double-bos",
                                                       want="--double-bos: the tokenizer of --model-dir"),
    "head shipping another model's embedding": _case(*GOOD, "--method", "eagle", "--eagle-dir",
                                                     "{root}/head-other-embedding",
                                                     want="is not the target's input embedding (relative"),
    "head shipping another model's embedding names the flag": _case(
        *GOOD, "--method", "eagle", "--eagle-dir", "{root}/head-other-embedding",
        want="pass --use-checkpoint-embeddings to draft with the checkpoint's copy anyway"),
    "checkpoint embeddings without a head": _case(*GOOD, "--method", "ngram", "--use-checkpoint-embeddings",
                                                  want="--use-checkpoint-embeddings: --method ngram does not use it"),
    "model without weights": _case("--model-dir", "{root}/no-weights", "--method", "ngram", "--dataset-name", "hf",
                                   "--dataset-path", D, want="no-weights': no weights in"),
    "exact below k + 1": _case(*GOOD, "--method", "ngram", "--num-spec-tokens", "5", "--exact", "5",
                               want="--exact 5: every step is a block of 5 rows, but --method ngram verifies up to 5 "
                               "draft tokens plus the newest one; pass --exact 6 or more"),
    "exact below a hybrid tree": _case(*GOOD, "--method", "ngram-eagle", "--eagle-dir", E1, "--hybrid-policy", "tree",
                                       "--exact", "8", want="verifies up to 8 draft tokens"),
    "exact below the larger hybrid k": _case(*GOOD, "--method", "ngram-eagle", "--eagle-dir", E1, "--exact", "5",
                                             want="verifies up to 5 draft tokens"),
    "exact below a static tree": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree", "static",
                                       "--tree-paths", "[[0],[0,0],[0,0,0]]", "--exact", "3",
                                       want="verifies up to 3 draft tokens"),
    "exact static tree of 3 leaves": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree", "static",
                                           "--tree-paths", "[[0],[1],[2]]", "--exact",
                                           want="--exact verifies at most 2 draft branches a step; this draft has 3"),
    "tree paths not a tree": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree", "static",
                                   "--tree-paths", "[[0],[5,5]]", want="--tree-paths: tree path (5, 5) has no parent"),
    "tree paths a string": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree", "static",
                                 "--tree-paths", '"abc"', want="argument --tree-paths: want a JSON list of paths"),
    "tree paths not JSON": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree", "static",
                                 "--tree-paths", "[[0]", want="argument --tree-paths: not JSON"),
    "tree paths without a static tree": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree-paths", "[[0]]",
                                              want="--tree-paths shapes only --tree static, got --tree none"),
    "tree depth without a dynamic tree": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree-depth", "4",
                                               want="--tree-depth shapes only --tree dynamic, got --tree none"),
    "tree nodes with a static tree": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree", "static",
                                           "--tree-paths", "[[0],[1]]", "--tree-nodes", "8",
                                           want="--tree-nodes shapes only --tree dynamic, got --tree static"),
    "eagle k with a tree": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--tree", "dynamic",
                                 "--num-speculative-tokens", "5",
                                 want="--tree dynamic: the EAGLE tree's size is --tree-depth and --tree-nodes"),
    "device unknown": _case(*GOOD, "--method", "ngram", "--device", "foo", want="--device: not a torch device: 'foo'"),
    "device cuda absent": _case(*GOOD, "--method", "ngram", "--device", "cuda:99",
                                want="--device cuda:99: no such CUDA device here"),
    "device neither CPU nor CUDA": _case(*GOOD, "--method", "ngram", "--device", "mps",
                                         want="--device mps: runs on cuda (cuda:N) or cpu only"),
    "device a second CPU": _case(*GOOD, "--method", "ngram", "--device", "cpu:1",
                                 want="--device cpu:1: runs on cuda (cuda:N) or cpu only"),
    "spec token tree not tuples": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--spec-token-tree", "[0, 1]",
                                        want="argument --spec-token-tree: want a list of tuples of child ranks"),
    "spec token tree of another size": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--spec-token-tree",
                                             "[(0,), (1,), (0, 0)]", "--num-spec-tokens", "2",
                                             want="--spec-token-tree has 3 nodes but --num-spec-tokens is 2"),
    "spec token tree beside tree paths": _case(*GOOD, "--method", "eagle", "--eagle-dir", E1, "--spec-token-tree",
                                               "[(0,)]", "--tree", "static", "--tree-paths", "[[0]]",
                                               want="give it or --tree/--tree-paths, not both"),
    "gzip output": _case(*GOOD, "--method", "ngram", "--output", "{root}/new/out.jsonl.gz",
                         want="a .gz one cannot be appended"),
    "head hub id offline": _case(*GOOD, "--method", "eagle", "--eagle-dir", "nobody/no-such-head",
                                 want="could not fetch the EAGLE head 'nobody/no-such-head'"),
    "hf split of a file": _case(*GOOD, "--method", "ngram", "--hf-split", "test",
                                want="questions.parquet has splits ['train'], not 'test'"),
    "two prompts of one id": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                                   "{root}/twice.jsonl", want="twice.jsonl: two prompts have the id '7'"),
    "a row index that is another row's id": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf",
                                                  "--dataset-path", "{root}/index.jsonl",
                                                  want="index.jsonl: two prompts have the id '1'"),
    "no prompts left": _case("--model-dir", M, "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                             "{data-blazedit}", "--blazedit-min-distance", "0.9", want="no prompts left"),
}


@pytest.fixture
def offline(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


def _fill(text: str, inputs: dict) -> str:
    """``text`` with each ``{name}`` of ``inputs`` replaced by its path (JSON braces left alone)."""
    for k, v in inputs.items():
        text = text.replace("{" + k + "}", str(v))
    return text


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_exit_2(name, inputs, offline, tmp_path, capsys):
    argv, want = CASES[name]
    out = tmp_path / "new" / "out.jsonl"
    argv, want = [_fill(a, inputs) for a in argv], _fill(want, inputs)
    if "--output" not in argv:
        argv = [*argv, "--output", str(out)]
    with pytest.raises(SystemExit) as exc:
        spec_bench.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spec_bench: error: "), err
    assert want in err[0], err[0]
    assert not any(tmp_path.iterdir())  # no work done, not even the output's folder made


@pytest.mark.parametrize("content", [b"line one\nline two\n", b'{"question_id": 1, "turns": ["hi"]}\n',
                                     b"\x1f\x8b\x08\x00rest of a gzip file"], ids=["notes", "a dataset", "gzip"])
def test_an_output_file_without_results_rows_is_refused_untouched(content, inputs, tmp_path, capsys):
    """An existing --output that holds no results rows (notes, a dataset, compressed rows under a plain name) is one
    line and exit 2 before any work, and stays as it was; a killed run's file with a torn first row is taken."""
    out = tmp_path / "out.jsonl"
    out.write_bytes(content)
    with pytest.raises(SystemExit) as exc:
        spec_bench.main([_fill(a, inputs) for a in GOOD] + ["--method", "ngram", "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "an existing file that holds no results rows" in err[0], err
    assert out.read_bytes() == content and sorted(tmp_path.iterdir()) == [out]
    out.write_bytes(b'{"config_key": "a", "example_id": "1", "num_tok')  # torn: repaired when the run starts
    spec_bench.check_results_file(out)


def test_an_output_stored_compressed_beside_it_is_refused(inputs, tmp_path, capsys):
    """--output X.jsonl with X.jsonl.gz beside it (a finished run, compressed): one line naming the copy and exit 2,
    before any work; a run would make its rows again beside the copy's."""
    out = tmp_path / "out.jsonl"
    (tmp_path / "out.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00rest of a gzip file")
    with pytest.raises(SystemExit) as exc:
        spec_bench.main([_fill(a, inputs) for a in GOOD] + ["--method", "ngram", "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"spec_bench: error: --output {out}: out.jsonl.gz beside it holds its rows compressed")
    assert not out.exists()


VLLM_IGNORED = {  # vLLM's script takes these with any method and ignores them where the method does not read them
    "a head for a method without one": (["--method", "ngram", "--eagle-dir", E1], ("--eagle-dir {eagle1}: --method "
                                        "ngram does not use it (used by eagle, eagle3, ngram-eagle, ngram-eagle3)")),
    "k of a method not run": (["--method", "eagle", "--eagle-dir", E1, "--num-speculative-tokens-per-method",
                               '{"ngram": 7, "eagle": 3}'], ('--num-speculative-tokens-per-method {"ngram": 7}: '
                              "--method eagle does not use it (used by ngram, ngram-eagle, ngram-eagle3)")),
    "eagle k beside eagle3's": (["--method", "eagle3", "--eagle-dir", E3, "--num-speculative-tokens-per-method",
                                 '{"eagle": 4, "eagle3": 3}'],
                                '{"eagle": 4}: --method eagle3 does not use it (used by eagle, ngram-eagle)'),
    "k for plain decoding": (["--method", "vanilla", "--num-spec-tokens", "4"],
                             "--num-speculative-tokens 4: --method none does not use it"),
    "lookup for eagle": (["--method", "eagle", "--eagle-dir", E1, "--prompt_lookup_min", "3"],
                         "--prompt-lookup-min 3: --method eagle does not use it"),
}


@pytest.mark.parametrize("case", sorted(VLLM_IGNORED))
def test_vllm_flags_a_method_does_not_read_are_ignored_with_a_note(case, inputs, capsys, monkeypatch):
    """As vLLM's script does, a vLLM flag the method does not read is ignored, not refused; a note names it, and
    the run's config (its results key) is the one without the flag."""
    argv, note = VLLM_IGNORED[case]
    argv = [_fill(a, inputs) for a in argv]
    configs = []
    monkeypatch.setattr(spec_bench, "vllm_speculative_config", lambda cfg, head: configs.append(cfg) or {})
    base = [_fill(a, inputs) for a in GOOD] + ["--print-vllm-config"]
    spec_bench.main([*base, *argv])
    err = capsys.readouterr().err
    assert _fill(note, inputs) in err and "ignored, as vLLM's script ignores it" in err
    bare = argv[:argv.index("--method") + 2]
    if "--eagle-dir" in argv and "ngram" not in argv[1]:
        bare += ["--eagle-dir", argv[argv.index("--eagle-dir") + 1]]
    spec_bench.main([*base, *bare])
    assert configs[0] == configs[1] and configs[0].key() == configs[1].key()


@pytest.mark.parametrize("argv", [
    ["--method", "eagle3", "--num-speculative-tokens-per-method", '{"ngram":5,"eagle3":3}'],  # trees_zoo_cpu.sh
    ["--method", "ngram", "--num-speculative-tokens-per-method", '{"ngram":5,"eagle3":3}'],
    ["--method", "none", "--num-speculative-tokens-per-method", '{"ngram": 5, "eagle3": 3}'],  # device_run.sh real8b
    ["--method", "replay", "--num-spec-tokens", "3", "--prompt_lookup_max", "5", "--hybrid-policy", "prefer-ngram"],
    ["--method", "ngram-eagle3", "--num-speculative-tokens-per-method", '{"eagle": 4}', "--hybrid-policy", "tree"],
    ["--method", "eagle", "--dataset-name", "hf", "--dataset-path", "x", "--hf-split", "test", "--disable-shuffle"],
    ["--method", "eagle", "--temp", "0", "--enforce-eager", "--top-p", "1.0", "--top-k", "-1"]])  # vLLM's spelling
def test_flags_at_their_defaults_or_in_use_are_taken(argv, capsys):
    """A flag a method or dataset does not read is taken at its default value (the repository's scripts pass
    such flags); the flags the run reads take any value."""
    spec_bench.main([*argv, "--device", "cpu", "--print-vllm-config"])
    assert capsys.readouterr().out.strip()


def test_vllms_eager_and_sampling_flags(capsys, monkeypatch):
    """--enforce-eager is --no-cuda-graphs; --top-p, --top-k and --enable-chunked-prefill, which vLLM's script does
    not pass on, are ignored with a note, and the run's config is the one without them."""
    configs = []
    monkeypatch.setattr(spec_bench, "vllm_speculative_config", lambda cfg, head: configs.append(cfg) or {})
    spec_bench.main(["--method", "eagle", "--device", "cpu", "--print-vllm-config", "--enforce-eager"])
    spec_bench.main(["--method", "eagle", "--device", "cpu", "--print-vllm-config", "--no-cuda-graphs", "--top-p",
                     "0.9", "--top-k", "20", "--enable-chunked-prefill"])
    err = capsys.readouterr().err
    assert configs[0] == configs[1] and configs[0].cuda_graphs is False
    assert all(f"{f}: ignored, as vLLM's spec_decode.py ignores it" in err
               for f in ("--top-p", "--top-k", "--enable-chunked-prefill"))


@pytest.mark.parametrize("argv,want", [
    (["--method", "eagle", "--tree", "static", "--tree-paths", "[[0],[1],[0,0],[1,0],[0,0,0]]"],
     {"method": "eagle", "model": "<eagle head folder>", "num_speculative_tokens": 5,
      "speculative_token_tree": "[(0,), (1,), (0, 0), (1, 0), (0, 0, 0)]"}),
    (["--method", "eagle3", "--tree", "dynamic"], None),
    (["--method", "ngram-eagle", "--hybrid-policy", "tree"], None)])
def test_the_vllm_config_of_a_tree(argv, want, capsys):
    """A static EAGLE tree is vLLM's speculative_token_tree (a token per node); drafts vLLM has no counterpart of
    print null, with a note saying so; vLLM's --spec-token-tree gives the same run as --tree static --tree-paths."""
    spec_bench.main([*argv, "--device", "cpu", "--print-vllm-config"])
    out = capsys.readouterr()
    assert json.loads(out.out) == want and ("no counterpart" in out.err) == (want is None)
    if want and "speculative_token_tree" in want:  # vLLM's own flag, its paths in any order, with its k
        spec_bench.main(["--method", "eagle", "--spec-token-tree", "[(1, 0), (0,), (0, 0), (1,), (0, 0, 0)]",
                         "--num-spec-tokens", "5", "--device", "cpu", "--print-vllm-config"])
        assert json.loads(capsys.readouterr().out) == want


def test_subprocess_prints_one_line_and_no_traceback(inputs, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "experiments.spec_bench", "--model-dir", "nobody/no-such-model",
            "--method", "ngram", "--output", str(tmp_path / "o.jsonl")]
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "nobody/no-such-model" in r.stderr


@pytest.mark.parametrize("content, want", [(b"\xff\xfe not json\n", "bad.jsonl line 1 is not a JSON object"),
                                           (b"", "bad.jsonl: no rows (its JSONL files are empty)")])
def test_a_bad_local_jsonl_is_one_line_in_a_subprocess(content, want, tmp_path):
    """A local JSONL that is not JSON, or is empty: one line of ours, without the datasets JSON builder's own logged
    error line before it (a subprocess: the builder's log handler writes to the real stderr)."""
    data = tmp_path / "bad.jsonl"
    data.write_bytes(content)
    argv = [sys.executable, "-m", "experiments.spec_bench", "--method", "ngram", "--dataset-name", "hf",
            "--dataset-path", str(data), "--device", "cpu", "--output", str(tmp_path / "o.jsonl")]
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                       timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and want in r.stderr, r.stderr


def test_hub_retries_are_not_logged(inputs, offline, tmp_path, capsys):
    """An unreachable Hub id is one line, without huggingface_hub's / datasets' "Retrying in Ns" warnings first."""
    import logging

    with pytest.raises(SystemExit):
        spec_bench.main(["--model-dir", "nobody/no-such-model", "--method", "ngram", "--dataset-name", "hf",
                         "--dataset-path", "nobody/no-such-data", "--output", str(tmp_path / "o.jsonl")])
    for name in ("huggingface_hub.utils._http", "datasets.load"):
        assert not logging.getLogger(name).isEnabledFor(logging.WARNING), name


def test_failed_prompts_exit_1_after_writing_the_rest(monkeypatch, tmp_path, capsys):
    """A prompt whose generation raises gets no row; the others are written, then one line and exit code 1."""
    real = spec_bench.timed_generate
    calls = []

    def flaky(*args, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(*args, **kw)

    monkeypatch.setattr(spec_bench, "timed_generate", flaky)
    out = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as exc:
        spec_bench.main(["--method", "ngram", "--dataset-name", "mt-bench", "--num-prompts", "2", "--output-len", "4",
                         "--device", "cpu", "--output", str(out)])
    assert exc.value.code == 1
    assert len(out.read_text().splitlines()) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "FAILED ngram" in "\n".join(err) and "RuntimeError: boom" in "\n".join(err)
    assert err[-1].startswith("spec_bench: 1 prompt(s) failed, no rows for them"), err[-1]


def test_head_hub_failure_is_one_line(inputs, monkeypatch, tmp_path, capsys):
    """A Hub error of several lines (as huggingface_hub's connection errors are) becomes one line: its first."""
    import huggingface_hub

    def unreachable(*args, **kw):
        raise OSError("An error happened while trying to locate the files on the Hub.\nGot: ConnectError")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    out = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as exc:
        spec_bench.main(["--model-dir", str(inputs["model"]), "--method", "eagle", "--eagle-dir", "nobody/no-head",
                         "--device", "cpu", "--output", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(OSError: An error happened while trying to locate the files on the Hub.)" in err[0], err
    assert not out.exists()


def test_a_prompt_that_fills_the_context_is_named_and_exits_1(monkeypatch, tmp_path, capsys):
    """A prompt with no room left for output gets no row, like a failed one: named, the rest written, exit code 1;
    the rows' run_info names the device they ran on (the CPU, on a machine with a GPU too)."""
    import torch

    real = spec_bench.prompts.build_prompt_ids
    calls = []

    def long_first(*args, **kw):
        ids = real(*args, **kw)
        calls.append(1)
        return ids * 5000 if len(calls) == 1 else ids

    monkeypatch.setattr(spec_bench.prompts, "build_prompt_ids", long_first)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "FakeGPU")
    out = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as exc:
        spec_bench.main(["--method", "ngram", "--dataset-name", "mt-bench", "--num-prompts", "2", "--output-len", "4",
                         "--device", "cpu", "--output", str(out)])
    assert exc.value.code == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["run_info"]["device"].startswith("cpu (")
    err = capsys.readouterr().err
    assert "fill the model's context (4096)" in err and "1 prompt(s) failed" in err.strip().splitlines()[-1]



def test_a_base_models_tokenizer_runs_the_raw_prompts(inputs, tmp_path):
    """A tokenizer without a chat template is refused only when the template is used: with --skip-chat-template
    the raw prompts run."""
    out = tmp_path / "raw.jsonl"
    spec_bench.main(["--model-dir", str(inputs["root"] / "no-chat-template"), "--method", "ngram", "--dataset-name",
                     "hf", "--dataset-path", str(inputs["data-mt-bench"]), "--num-prompts", "1", "--output-len", "4",
                     "--skip-chat-template", "--device", "cpu", "--output", str(out)])
    assert len(out.read_text().splitlines()) == 1


def test_a_target_that_lacks_weights_is_one_line_exit_2(inputs, tmp_path, capsys):
    """A target folder whose checkpoint lacks a weight its config describes (found when the weights are read): one
    line and exit code 2, no rows, where transformers would have run it with that weight random."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "target"
    folder.mkdir()
    for f in (inputs["model"]).iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    sd = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in sd.items() if k != "model.norm.weight"}, str(folder / "model.safetensors"))
    out = tmp_path / "rows.jsonl"
    with pytest.raises(SystemExit) as exc:
        spec_bench.main(["--model-dir", str(folder), "--method", "ngram", "--dataset-name", "hf", "--dataset-path",
                         str(inputs["data-mt-bench"]), "--device", "cpu", "--output", str(out)])
    assert exc.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("spec_bench: error")]
    assert len(err) == 1 and "lacks 1 of the weights its config.json describes (model.norm.weight)" in err[0], err
    assert not out.exists() or not out.read_text()


def test_a_row_whose_output_the_context_cuts_says_its_cap(monkeypatch, tmp_path):
    """A prompt that leaves less room than --output-len runs with what is left, and its row says so."""
    from experiments.results import load_runs

    real = spec_bench.prompts.build_prompt_ids
    calls = []

    def long_first(*args, **kw):
        ids = real(*args, **kw)
        calls.append(1)
        return (ids * 100)[: 4096 - 3] if len(calls) == 1 else ids  # 3 tokens of room in the zoo's 4,096

    monkeypatch.setattr(spec_bench.prompts, "build_prompt_ids", long_first)
    out = tmp_path / "out.jsonl"
    spec_bench.main(["--method", "ngram", "--dataset-name", "mt-bench", "--num-prompts", "2", "--output-len", "8",
                     "--device", "cpu", "--output", str(out)])
    rows = sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["prompt_tokens"])
    assert [r["max_new_tokens"] for r in rows] == [8, 3] and len(rows[1]["tokens"]) <= 3
    assert sorted(load_runs(out)["max_new_tokens"]) == [3, 8]


def test_a_head_shipping_another_embedding_runs_with_the_flag(inputs, tmp_path):
    """--use-checkpoint-embeddings drafts with the head's own embedding: the run is made, lossless, under a key of
    its own."""
    argv = [_fill(a, inputs) for a in GOOD] + ["--method", "eagle", "--eagle-dir",
                                               str(inputs["root"] / "head-other-embedding"), "--num-prompts", "1",
                                               "--output-len", "6", "--check-lossless"]
    out = tmp_path / "rows.jsonl"
    spec_bench.main([*argv, "--use-checkpoint-embeddings", "--output", str(out)])
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["config"]["checkpoint_embeddings"] is True and row["lossless"] is True
    plain = spec_bench.BenchConfig(**{**row["config"], "checkpoint_embeddings": False})
    assert row["config_key"] != plain.key()
