"""The model zoo: listing, loading, the tiny-coder tokenizer's contract, and the held-out evaluation split."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybridsd import checkpoint, zoo

FOLDER = zoo.MODELS_DIR / "tiny-coder"
HAS_WEIGHTS = (FOLDER / "config.json").is_file() and any(FOLDER.glob("*.safetensors"))
needs_weights = pytest.mark.skipif(not HAS_WEIGHTS, reason="tiny-coder weights not trained yet")
EVAL_REPOS = {"marshmallow-code/marshmallow", "more-itertools/more-itertools"}
CODE = 'class A:\n\tdef f(self, x):  # tab\r\n        return  x  \n\n\n\n    """doc  é ☃"""\n  \n'


def _edits_file() -> Path | None:
    here = Path(__file__).resolve()
    for p in (here.parents[2] / "shared" / "data" / "code_edits_dev.jsonl",
              Path("/work/shared/data/code_edits_dev.jsonl")):
        if p.is_file():
            return p
    return None


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(FOLDER, local_files_only=True)


@pytest.fixture(scope="module")
def loaded():
    return zoo.load("tiny-coder")


def test_import_has_no_heavy_side_effects():
    """In a fresh interpreter, importing and listing the zoo loads neither torch nor transformers (nor scipy),
    while importing the fits does load scipy: the check sees a heavy import when one happens."""
    code = ("import sys; heavy = lambda: sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch', 'transformers', 'scipy'}); assert not heavy(), heavy(); "
            "import hybridsd.zoo; hybridsd.zoo.names(); assert not heavy(), heavy(); "
            "import hybridsd.fit; assert heavy() == ['scipy'], heavy()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


@needs_weights
def test_load_takes_dtype_names():
    """The names the rest of the library takes (and transformers'), not a TypeError from Module.to after loading."""
    import torch

    model, _, heads = zoo.load(dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert heads and all(h.fc.weight.dtype == torch.bfloat16 for h in heads.values())
    assert next(zoo.load(dtype="fp32")[0].parameters()).dtype == torch.float32


BAD_LOADS = [  # (case, load kwargs, exception, words)
    ("dtype name unknown", dict(dtype="half"), ValueError, ["dtype", "'half'", "bfloat16"]),
    ("dtype an int", dict(dtype=16), TypeError, ["dtype", "16"]),
    ("dtype not floating", dict(dtype="torch.int64"), ValueError, ["dtype"]),
    ("device unknown", dict(device="tpu"), ValueError, ["device", "'tpu'"]),
    ("device a list", dict(device=[0]), TypeError, ["device", "[0]"]),
]


@pytest.mark.parametrize("case,kw,exc,words", BAD_LOADS, ids=[c[0] for c in BAD_LOADS])
def test_bad_load_arguments_fail_before_loading(monkeypatch, case, kw, exc, words):
    import transformers

    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    with pytest.raises(exc) as e:
        zoo.load(**kw)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_load_refuses_an_integer_torch_dtype(monkeypatch):
    import torch
    import transformers

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: 1 / 0)
    with pytest.raises(TypeError, match="floating torch.dtype"):
        zoo.load(dtype=torch.int64)


def test_unknown_name_lists_names():
    with pytest.raises(ValueError, match="unknown model"):
        zoo.load("no-such-model")


def test_tokenizer_round_trips_code_exactly(tokenizer):
    for text in (CODE, Path(zoo.__file__).read_text(), "x" * 50 + "\n" + " " * 17 + "\t\t\n"):
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_tokenizer_special_tokens(tokenizer):
    assert tokenizer.bos_token == "<|begin_of_text|>" and tokenizer.eos_token == "<|end_of_text|>"
    config = json.loads((FOLDER / "config.json").read_text())
    assert tokenizer.pad_token == "<|pad|>" and tokenizer.pad_token_id == config["pad_token_id"]
    assert tokenizer.pad_token_id not in (tokenizer.bos_token_id, tokenizer.eos_token_id)
    for tok in ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"):
        assert tokenizer.convert_tokens_to_ids(tok) != tokenizer.unk_token_id
        assert len(tokenizer.encode(tok, add_special_tokens=False)) == 1
    assert 8192 <= len(tokenizer) <= 12288


def test_chat_template_bos_once_and_doubled_bos_pitfall(tokenizer):
    messages = [{"role": "user", "content": CODE}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|begin_of_text|>") and prompt.endswith("assistant<|end_header_id|>\n\n")
    assert CODE in prompt  # contents are copied verbatim (no trimming)
    bos = tokenizer.bos_token_id
    once = tokenizer.encode(prompt, add_special_tokens=False)
    twice = tokenizer.encode(prompt, add_special_tokens=True)
    assert once.count(bos) == 1 and once[0] == bos
    assert twice.count(bos) == 2 and twice[:2] == [bos, bos]


@needs_weights
def test_names_lists_tiny_coder():
    assert "tiny-coder" in zoo.names()


@needs_weights
def test_load_cpu_model_matches_config(loaded, tokenizer):
    import torch

    model, tok, heads = loaded
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (384, 8, 6, 2)
    assert cfg.vocab_size == len(tok) == len(tokenizer)
    assert cfg.tie_word_embeddings and cfg.max_position_embeddings == 4096
    assert not model.training and next(model.parameters()).dtype == torch.float32
    assert next(model.parameters()).device.type == "cpu"
    n = sum(p.numel() for p in model.parameters())
    assert 12e6 <= n <= 22e6
    assert set(heads) <= {"eagle1", "eagle3"}
    assert sum(p.stat().st_size for p in FOLDER.glob("*.safetensors")) <= 40e6


@needs_weights
def test_greedy_generation_runs(loaded):
    import torch

    model, tok, _ = loaded
    prompt = tok.apply_chat_template([{"role": "user", "content": "def add(a, b):\n"}], tokenize=False,
                                     add_generation_prompt=True)
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=6, do_sample=False)
    assert out.shape[0] == 1 and ids["input_ids"].shape[1] < out.shape[1] <= ids["input_ids"].shape[1] + 6
    stop = model.generation_config.eos_token_id
    assert tok.convert_tokens_to_ids("<|eot_id|>") in (stop if isinstance(stop, list) else [stop])


@needs_weights
def test_readmes_use_block_runs_as_written():
    """The README's ``Use`` example, run on the zoo as printed (shorter outputs: a prompt, not a placeholder);
    every call in it is lossless against plain greedy decoding."""
    import re

    import hybridsd as hsd

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"## Use\n\n```python\n(.*?)```", readme, re.S).group(1)
    calls = block.count("hsd.generate(")
    block = block.replace('"Fix the bug ..."', '"Fix the bug in def add(a, b): return a - b"')
    block = block.replace("hsd.generate(", "run(")
    runs = []

    def run(model, ids, **kw):
        res = hsd.generate(model, ids, **{"max_new_tokens": 24, **kw})
        runs.append((res.tokens, hsd.generate(model, ids, max_new_tokens=len(res.tokens)).tokens))
        return res

    exec(block, {"hsd": hsd, "run": run})
    assert len(runs) == calls >= 3 and all(got == plain for got, plain in runs)


@needs_weights
def test_quickstart_writes_its_table(tmp_path, capsys):
    from experiments import quickstart

    with pytest.raises(SystemExit) as e:
        quickstart.main(["--out", str(tmp_path / "missing" / "q.json")])
    assert e.value.code == 2 and "no folder" in capsys.readouterr().err
    quickstart.main(["--out", str(tmp_path / "q.json")])
    rec = json.loads((tmp_path / "q.json").read_text())
    printed = capsys.readouterr().out
    assert [r["method"] for r in rec["rows"]][0] == "plain" and len(rec["rows"]) == 7
    assert all(r["same"] and r["tokens"] == rec["rows"][0]["tokens"] for r in rec["rows"])
    assert rec["diff"] in printed and rec["run_info"]["commit"] and rec["command"].endswith("q.json")
    assert any(line.startswith("+") and "import" in line for line in rec["diff"].splitlines())  # an edit, as asked
    # the committed record, and the README's table quoted from it, are what the quickstart gives now
    repo = Path(__file__).resolve().parents[1]
    saved = json.loads((repo / "experiments" / "results" / "quickstart_cpu_fp32.json").read_text())
    same = ("method", "tokens", "passes", "seq_normalized_al", "precision_al", "steps_by_drafter")
    assert [{k: r[k] for k in same} for r in saved["rows"]] == [{k: r[k] for k in same} for r in rec["rows"]]
    readme = (repo / "README.md").read_text()
    for r in saved["rows"]:
        prec = "nan" if r["precision_al"] is None else f"{r['precision_al']:.2f}"
        assert (f"{r['method']:18s} {r['tokens']:6d} {r['passes']:6d} {r['seq_normalized_al']:7.2f} {prec:>7s} "
                f"{str(r['same']):>5s} {r['seconds']:6.2f}  {r['steps_by_drafter']}") in readme, r["method"]
    assert saved["run_info"]["commit"][:7] in readme


def test_eval_split_is_held_out():
    split = json.loads((FOLDER / "eval_split.json").read_text())
    assert set(split["repos"]) == EVAL_REPOS and split["n"] == len(split["ids"]) == len(set(split["ids"]))
    prefixes = {r.replace("/", "__") + "__" for r in EVAL_REPOS}
    assert all(any(i.startswith(p) for p in prefixes) for i in split["ids"])
    record_path = FOLDER / "training_config.json"
    if record_path.is_file():
        data = json.loads(record_path.read_text())["data"]
        assert not set(data["sft_real_repos"]) & EVAL_REPOS
        assert set(data["eval_repos"]) == EVAL_REPOS
    edits = _edits_file()
    if edits is None:
        pytest.skip("code_edits_dev.jsonl not available")
    rows = [json.loads(line) for line in edits.open(encoding="utf-8")]
    assert [r["id"] for r in rows if r["repo"] in EVAL_REPOS] == split["ids"]
    train_ids = sorted(r["id"] for r in rows if r["repo"] not in EVAL_REPOS)
    assert not set(train_ids) & set(split["ids"]) and split["n_train"] == len(train_ids)
    if record_path.is_file():
        digest = hashlib.sha256("\n".join(train_ids).encode()).hexdigest()
        assert digest == json.loads(record_path.read_text())["data"]["sft_train_ids_sha256"]


def test_a_head_folder_without_a_config_is_no_head(tmp_path, monkeypatch):
    """zoo.load and spec_bench (checkpoint.zoo_heads) take the same head folders: eagle1/ or eagle3/ holding a
    config.json; an empty or half-copied one is skipped rather than failing the load."""
    target = tmp_path / "models" / "tc"
    target.mkdir(parents=True)
    for f in FOLDER.iterdir():
        if f.is_file():
            (target / f.name).symlink_to(f)
    (target / "eagle1").mkdir()  # no config.json
    (target / "eagle3").mkdir()
    (target / "eagle3" / "config.json").write_text("{}")
    assert zoo.head_folders(target) == checkpoint.zoo_heads(target) == {"eagle3": target / "eagle3"}
    (target / "eagle3" / "config.json").unlink()
    monkeypatch.setattr(zoo, "MODELS_DIR", tmp_path / "models")
    model, _, heads = zoo.load("tc")
    assert heads == {} and model.config.num_hidden_layers > 0


def test_read_tensor_reads_one_tensor_from_the_shard_that_holds_it(loaded):
    """The zoo target's weights are three shards under an index: each tensor comes from its own shard alone."""
    import torch

    from hybridsd.checkpoint_files import read_tensor

    model = loaded[0]
    folder = zoo.path("tiny-coder")
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    one_per_shard = {shard: name for name, shard in sorted(weight_map.items())}
    assert len(one_per_shard) == 3
    for name in one_per_shard.values():
        assert torch.equal(read_tensor(folder, name), model.state_dict()[name])
    assert read_tensor(folder, "no.such.weight") is None
