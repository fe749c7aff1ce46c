"""Tiny on-disk stand-ins for the real study's inputs: target folders written with ``save_pretrained`` (Llama,
Qwen3) with the zoo's Llama-3-style tokenizer and chat template, EAGLE-1/3 heads in the public layouts, and
Blazedit / MT-Bench / InstructCoder datasets with the Hub column names (save_to_disk, parquet, JSONL)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import hybridsd as hsd
from conftest import tiny_target

EOT, END_OF_TEXT, BOS = 4, 1, 0  # the zoo tokenizer's <|eot_id|>, <|end_of_text|>, <|begin_of_text|>
VOCAB = 10240  # the zoo tokenizer's


def target_folder(root: Path, family: str, seed: int = 0) -> Path:
    """A random ``family`` target saved with its tokenizer and a generation config whose EOS ids are
    ``<|eot_id|>`` and ``<|end_of_text|>`` (as Llama-3.1's), plus ``eagle1/`` and ``eagle3/`` heads beside it
    (the heads are also the ``--eagle-dir`` folders)."""
    from transformers import AutoTokenizer, GenerationConfig

    folder = root / family
    model = tiny_target(family, vocab=VOCAB, seed=seed, layers=5, max_position_embeddings=1024,
                        bos_token_id=BOS, eos_token_id=END_OF_TEXT, pad_token_id=5, tie_word_embeddings=False)
    model.save_pretrained(folder)
    GenerationConfig(bos_token_id=BOS, eos_token_id=[EOT, END_OF_TEXT]).save_pretrained(folder)
    AutoTokenizer.from_pretrained(hsd.zoo.path("tiny-coder")).save_pretrained(folder)
    torch.manual_seed(seed + 1)
    for kind in ("eagle1", "eagle3"):
        hsd.EagleHead.from_target(model, kind, **({"draft_vocab_size": 4096} if kind == "eagle3" else {})) \
            .save_pretrained(root / f"{family}-{kind}")
    return folder


BLAZEDIT = {  # code, change_request, norm_distance (two rows outside 0.01-0.25)
    "code": ["def add(a, b):\n    return a + b\n", "x = 1\ny = 2\nprint(x + y)\n", "import os\nprint(os.getcwd())\n",
             "class A:\n    pass\n", "def f():\n    return 0\n"],
    "change_request": ["Rename add to plus.", "Print x * y instead.", "Use pathlib.", "Add a docstring.",
                       "Return 1."],
    "norm_distance": [0.1, 0.2, 0.6, 0.05, 0.0],
}
MT_BENCH = {"question_id": [81, 82, 83], "category": ["writing", "math", "coding"],
            "turns": [["Write a haiku about rain.", "Now in French."], ["What is 2 + 2?", "And 3 + 3?"],
                      ["Write a Python hello world.", "In C now."]]}
INSTRUCTCODER = {"instruction": ["Add type hints.", "Use a list comprehension.", "Remove the print."],
                 "input": ["def f(x):\n    return x\n", "out = []\nfor i in range(3):\n    out.append(i)\n",
                           "print('debug')\ny = 3\n"],
                 "output": ["def f(x: int) -> int:\n    return x\n", "out = [i for i in range(3)]\n", "y = 3\n"]}


def datasets_on_disk(root: Path) -> dict[str, Path]:
    """The three datasets in the three local forms: Blazedit as a save_to_disk folder, MT-Bench as parquet,
    InstructCoder as JSONL (names that do not give the kind away: it is found by the columns)."""
    import datasets

    out = {"blazedit": root / "edits_disk", "mt-bench": root / "questions.parquet",
           "instructcoder": root / "instruct.jsonl"}
    datasets.Dataset.from_dict(BLAZEDIT).save_to_disk(str(out["blazedit"]))
    datasets.Dataset.from_dict(MT_BENCH).to_parquet(str(out["mt-bench"]))
    rows = [dict(zip(INSTRUCTCODER, v)) for v in zip(*INSTRUCTCODER.values())]
    out["instructcoder"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out
