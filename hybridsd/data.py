"""Evaluation examples: the code-edit, EditEval and MT-Bench sets with the vLLM benchmarks' prompt formats.

Loaders keep the file's order; filters and resampling are deterministic given their seed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hybridsd.edit_distance import edit_norm as _edit_norm

DATA_ENV = "HYBRIDSD_DATA"

BLAZEDIT_TEMPLATE = (
    "Given a code file, please apply the change requests and generate the new file.\n\n"
    "Original file:\n```python\n{code}\n```\n\n"
    "Change request:\n{change_request}\n\n"
    'Please generate the new code file in the "New file" section below.'
)
INSTRUCTCODER_SUFFIX = " Just output the code, do not include any explanation."


@dataclass(frozen=True)
class Example:
    """One evaluation prompt: ``prompt`` is the text sent to the model, ``reference`` the expected output
    (empty when there is none), ``edit_norm`` the character-level edit norm of ``reference`` against
    ``input_text`` (the text the output edits; NaN and ``None`` when there is none)."""

    id: str
    source: str
    prompt: str
    reference: str
    edit_norm: float
    input_text: str | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("Example.id must not be empty")
        if not (math.isnan(self.edit_norm) or 0.0 <= self.edit_norm <= 1.0):
            raise ValueError(f"Example.edit_norm must be NaN or in [0, 1], got {self.edit_norm}")


def default_data_dir() -> Path:
    """``$HYBRIDSD_DATA`` when set, else ``shared/data`` next to the repository."""
    env = os.environ.get(DATA_ENV)
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {path} not found (set ${DATA_ENV} to the data folder)")
    return path


def _rows(path: str | Path | None, name: str) -> list[dict]:
    p = Path(path) if path is not None else default_data_dir() / name
    if not p.is_file():
        raise FileNotFoundError(f"data file {p} not found")
    with p.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _keep(examples: Iterable[Example], min_distance, max_distance, limit) -> list[Example]:
    out = []
    for ex in examples:
        if min_distance is not None and not ex.edit_norm >= min_distance:
            continue
        if max_distance is not None and not ex.edit_norm <= max_distance:
            continue
        out.append(ex)
        if limit is not None and len(out) >= limit:
            break
    return out


def blazedit_prompt(code: str, change_request: str) -> str:
    """vLLM's Blazedit benchmark prompt for editing ``code`` as ``change_request`` asks."""
    return BLAZEDIT_TEMPLATE.format(code=code, change_request=change_request)


def instructcoder_prompt(input_code: str, instruction: str) -> str:
    """vLLM's InstructCoder benchmark prompt: ``f"{input}\\n\\n{instruction} Just output the code, ..."``."""
    return f"{input_code}\n\n{instruction}{INSTRUCTCODER_SUFFIX}"


def load_code_edits(path: str | Path | None = None, *, min_distance: float | None = None,
                    max_distance: float | None = None, limit: int | None = None) -> list[Example]:
    """``code_edits_dev.jsonl`` as Blazedit prompts (``before`` edited by ``instruction``; reference
    ``after``), keeping rows with ``min_distance <= char_edit_norm <= max_distance``, at most ``limit``."""
    meta_keys = ("repo", "commit", "path", "license", "instruction")
    examples = (
        Example(id=r["id"], source="code_edits", prompt=blazedit_prompt(r["before"], r["instruction"]),
                reference=r["after"], edit_norm=float(r["char_edit_norm"]), input_text=r["before"],
                meta={k: r[k] for k in meta_keys if k in r})
        for r in _rows(path, "code_edits_dev.jsonl")
    )
    return _keep(examples, min_distance, max_distance, limit)


def load_editeval(path: str | Path | None = None, *, min_distance: float | None = None,
                  max_distance: float | None = None, limit: int | None = None) -> list[Example]:
    """``editeval.jsonl`` as InstructCoder prompts (reference ``output``), filtered as :func:`load_code_edits`."""
    meta_keys = ("instruction", "context", "test", "author", "license")
    examples = (
        Example(id=r["task_id"], source="editeval", prompt=instructcoder_prompt(r["input"], r["instruction"]),
                reference=r["output"], edit_norm=float(r["char_edit_norm"]), input_text=r["input"],
                meta={k: r[k] for k in meta_keys if k in r})
        for r in _rows(path, "editeval.jsonl")
    )
    return _keep(examples, min_distance, max_distance, limit)


def load_mt_bench(path: str | Path | None = None, *, limit: int | None = None) -> list[Example]:
    """``mt_bench.jsonl``, first turn only; no reference output (``reference == ""``, ``edit_norm`` NaN)."""
    examples = [
        Example(id=str(r["question_id"]), source="mt_bench", prompt=r["turns"][0], reference="",
                edit_norm=math.nan, input_text=None,
                meta={"category": r["category"], "turns": list(r["turns"]),
                      **({"reference": r["reference"]} if "reference" in r else {})})
        for r in _rows(path, "mt_bench.jsonl")
    ]
    return examples if limit is None else examples[:limit]


def _token_ids(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (``transformers`` or ``tokenizers`` tokenizers)."""
    out = tokenizer.encode(text, add_special_tokens=False)
    return list(getattr(out, "ids", out))


def token_level_edit_norm(example: Example, tokenizer) -> float:
    """Edit norm of the example's reference against its input over ``tokenizer``'s tokens."""
    if example.input_text is None:
        raise ValueError(f"example {example.id} has no input_text to measure an edit against")
    return _edit_norm(_token_ids(tokenizer, example.input_text), _token_ids(tokenizer, example.reference))


def filter_by_edit_norm(examples: Iterable[Example], lo: float, hi: float, level: str = "char",
                        tokenizer=None) -> list[Example]:
    """The examples with ``lo <= edit norm <= hi``, in order; ``level="char"`` uses ``Example.edit_norm``,
    ``level="token"`` recomputes it over ``tokenizer``'s tokens (examples without input are dropped)."""
    if lo > hi:
        raise ValueError(f"lo ({lo}) must be <= hi ({hi})")
    if level not in ("char", "token"):
        raise ValueError(f"level must be 'char' or 'token', got {level!r}")
    if level == "token" and tokenizer is None:
        raise ValueError("level='token' needs a tokenizer")
    out = []
    for ex in examples:
        if level == "token":
            if ex.input_text is None:
                continue
            e = token_level_edit_norm(ex, tokenizer)
        else:
            e = ex.edit_norm
        if lo <= e <= hi:
            out.append(ex)
    return out


def bin_index(values: Sequence[float], bins: Sequence[float]) -> np.ndarray:
    """Bin of each value for ascending ``bins`` edges: ``[b_i, b_{i+1})``, the last bin closed; -1 outside."""
    edges = np.asarray(bins, dtype=float)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError("bins must be at least two strictly increasing edges")
    v = np.asarray(values, dtype=float)
    idx = np.searchsorted(edges, v, side="right") - 1
    idx[v == edges[-1]] = edges.size - 2
    idx[(v < edges[0]) | (v > edges[-1]) | np.isnan(v)] = -1
    return idx


def resample_by_bins(examples: Sequence[Example], bins: Sequence[float], per_bin: int, seed: int = 0) -> list[Example]:
    """Up to ``per_bin`` examples drawn without replacement from each edit-norm bin (all of a bin that has
    fewer), for an even spread; returned by bin, in their original order within a bin. Examples outside
    the bins are dropped."""
    if per_bin < 1:
        raise ValueError(f"per_bin must be >= 1, got {per_bin}")
    idx = bin_index([ex.edit_norm for ex in examples], bins)
    rng = np.random.default_rng(seed)
    out: list[Example] = []
    for b in range(len(bins) - 1):
        members = np.flatnonzero(idx == b)
        if members.size > per_bin:
            members = np.sort(rng.choice(members, size=per_bin, replace=False))
        out.extend(examples[i] for i in members)
    return out
