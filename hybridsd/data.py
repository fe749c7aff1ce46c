"""Evaluation examples: the project's code-edit, EditEval and MT-Bench files, and the Hub datasets vLLM's
benchmarks use (Blazedit, MT-Bench, InstructCoder), each with the vLLM benchmarks' prompt formats.

Loaders keep the file's order; filters and resampling are deterministic given their seed. A missing file, a
line that is not JSON or a row without a field the loader needs raises ``ValueError`` (``FileNotFoundError``
for a missing path) naming the file, line or row and field.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
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
        for name in ("id", "source", "prompt", "reference"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Example.{name} must be a string, got {getattr(self, name)!r}")
        if not self.id:
            raise ValueError("Example.id must not be empty")
        if self.input_text is not None and not isinstance(self.input_text, str):
            raise TypeError(f"Example.input_text must be a string or None, got {self.input_text!r}")
        if isinstance(self.edit_norm, bool) or not isinstance(self.edit_norm, numbers.Real):
            raise TypeError(f"Example.edit_norm must be a number (NaN when there is no reference), "
                            f"got {self.edit_norm!r}")
        if not (math.isnan(self.edit_norm) or 0.0 <= self.edit_norm <= 1.0):
            raise ValueError(f"Example.edit_norm must be NaN or in [0, 1], got {self.edit_norm}")
        if not isinstance(self.meta, dict):
            raise TypeError(f"Example.meta must be a dict, got {self.meta!r}")


def default_data_dir() -> Path:
    """``$HYBRIDSD_DATA`` when set, else ``shared/data`` next to the repository."""
    env = os.environ.get(DATA_ENV)
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {path} not found (set ${DATA_ENV} to the data folder)")
    return path


def _rows(path: str | Path | None, name: str, fields: Sequence[str],
          text: Sequence[str] = ()) -> list[tuple[str, dict]]:
    """``(where, row)`` for each JSON line of the file (``where``: "FILE line N"; blank lines skipped), each
    row checked to hold ``fields``, those of them in ``text`` as strings."""
    p = Path(path) if path is not None else default_data_dir() / name
    if not p.is_file():
        raise FileNotFoundError(f"data file {p} not found")
    out = []
    with p.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                row = json.loads(line)
            except UnicodeDecodeError as e:
                raise ValueError(f"{p} line {n} is not UTF-8 ({e.reason} at byte {e.start})") from None
            except json.JSONDecodeError as e:
                raise ValueError(f"{p} line {n} is not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{p} line {n} is not a JSON object")
            out.append((f"{p} line {n}", _need(row, f"{p} line {n}", fields, text)))
    return out


def _need(row: dict, where: str, fields: Sequence[str], text: Sequence[str] = ()) -> dict:
    """``row``, or ``ValueError`` naming ``where`` and every one of ``fields`` it lacks (or holds as null), else
    every one of ``text`` that is not a string."""
    missing = [name for name in fields if row.get(name) is None]
    if missing:
        raise ValueError(f"{where}: the row has no field{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(repr, missing))}")
    bad = {name: type(row[name]).__name__ for name in text if not isinstance(row[name], str)}
    if bad:
        raise ValueError(f"{where}: {', '.join(f'{k!r} must be a string, got {v}' for k, v in bad.items())}")
    return row


def _edit_norm_field(row: dict, name: str, where: str) -> float:
    """``row[name]`` as an edit norm in [0, 1] (float rounding past either end clamped); ``ValueError`` naming
    ``where`` and the field when it is not a number (an int or float: not text, not a bool) in that range."""
    v = row[name]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise ValueError(f"{where}: {name!r} must be a number in [0, 1], got {v!r}")
    e = float(v)
    if not -1e-9 <= e <= 1 + 1e-9:  # NaN fails too
        raise ValueError(f"{where}: {name!r} must be in [0, 1], got {e}")
    return min(max(e, 0.0), 1.0)


def _row_id(row: dict, name: str, where: str) -> str:
    """``row[name]`` (a string or a number) as an example id; ``ValueError`` naming ``where`` and the field when it
    is empty or some other value (a list, an object, a bool)."""
    v = row[name]
    if isinstance(v, bool) or not isinstance(v, (str, numbers.Real)):
        raise ValueError(f"{where}: {name!r} must be a string or a number, got {v!r}")
    if v == "":
        raise ValueError(f"{where}: {name!r} must not be empty")
    return str(v)


def _check_count(name: str, value, least: int) -> None:
    """``TypeError`` unless ``value`` is an int (numpy's too, not a bool), ``ValueError`` unless it is >= ``least``;
    each naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value}")


def _check_limit(limit: int | None) -> None:
    if limit is not None and not (isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0):
        raise ValueError(f"limit must be None or an int >= 0, got {limit!r}")


def _check_bounds(lo, hi, names=("min_distance", "max_distance"), optional: bool = True) -> None:
    """``ValueError`` naming the bound unless each is a number (not NaN; ``None`` too when ``optional``) and
    ``lo <= hi``."""
    for name, v in zip(names, (lo, hi)):
        if v is None and optional:
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(v):
            raise ValueError(f"{name} must be {'None or ' if optional else ''}a number, got {v!r}")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{names[0]} ({lo}) must be <= {names[1]} ({hi})")


def _inside(e: float, min_distance, max_distance) -> bool:
    """Whether edit norm ``e`` lies in ``[min_distance, max_distance]`` (either end ``None``: open)."""
    return (min_distance is None or e >= min_distance) and (max_distance is None or e <= max_distance)


def _keep(examples: Iterable[Example], min_distance, max_distance, limit) -> list[Example]:
    """The examples whose edit norm lies in ``[min_distance, max_distance]`` (either end ``None``: open), the
    first ``limit`` of them (``None``: all)."""
    _check_limit(limit)
    out = []
    for ex in examples:
        if limit is not None and len(out) >= limit:
            break
        if _inside(ex.edit_norm, min_distance, max_distance):
            out.append(ex)
    return out


def blazedit_prompt(code: str, change_request: str) -> str:
    """vLLM's Blazedit benchmark prompt for editing ``code`` as ``change_request`` asks."""
    return BLAZEDIT_TEMPLATE.format(code=code, change_request=change_request)


def instructcoder_prompt(input_code: str, instruction: str) -> str:
    """vLLM's InstructCoder benchmark prompt: ``f"{input}\\n\\n{instruction} Just output the code, ..."``."""
    return f"{input_code}\n\n{instruction}{INSTRUCTCODER_SUFFIX}"


CHANGE_REQUESTS = ("subject", "located")


def load_code_edits(path: str | Path | None = None, *, min_distance: float | None = None,
                    max_distance: float | None = None, limit: int | None = None,
                    change_request: str = "subject", max_places: int = 6,
                    ids: Collection[str] | None = None) -> list[Example]:
    """``code_edits_dev.jsonl`` as Blazedit prompts (``before`` edited as the change request asks; reference
    ``after``), keeping rows with ``min_distance <= char_edit_norm <= max_distance`` (and, given ``ids``, whose id
    is one of them; the others are skipped before their prompt is built), at most ``limit``, in file order.

    ``change_request``: ``"subject"``, the commit subject (``instruction``) alone, or ``"located"``, the
    subject with every changed place named by line, scope and size
    (:func:`hybridsd.edit_requests.located_request`, at most ``max_places`` places; the zoo's format)."""
    if change_request not in CHANGE_REQUESTS:
        raise ValueError(f"change_request must be one of {CHANGE_REQUESTS}, got {change_request!r}")
    _check_count("max_places", max_places, 1)
    if isinstance(ids, str):
        raise ValueError(f"ids must be a collection of ids, not one string, got {ids!r}")
    if ids is not None:
        if not isinstance(ids, Iterable):
            raise TypeError(f"ids must be None or a collection of id strings, got {ids!r}")
        ids = tuple(ids)  # an iterator is read once
        for i in ids:
            if not isinstance(i, str):
                raise TypeError(f"ids must hold id strings (Example.id), got {i!r} ({type(i).__name__})")
        ids = frozenset(ids)
    _check_bounds(min_distance, max_distance)
    _check_limit(limit)
    from hybridsd.edit_requests import located_request

    def request(w: str, r: dict) -> str:
        if change_request == "subject":
            return r["instruction"]
        try:
            return located_request(r["before"], r["after"], r["instruction"], max_places)
        except ValueError as e:  # before == after: no place to name
            raise ValueError(f"{w}: {e} (change_request='located' needs an edit)") from None

    meta_keys = ("repo", "commit", "path", "license", "instruction")
    rows = ((w, r, _row_id(r, "id", w), _edit_norm_field(r, "char_edit_norm", w))
            for w, r in _rows(path, "code_edits_dev.jsonl", ("id", "before", "after", "instruction", "char_edit_norm"),
                              text=("before", "after", "instruction")))
    examples = (
        Example(id=rid, source="code_edits", prompt=blazedit_prompt(r["before"], request(w, r)),
                reference=r["after"], edit_norm=e, input_text=r["before"], meta={k: r[k] for k in meta_keys if k in r})
        for w, r, rid, e in rows
        if (ids is None or rid in ids) and _inside(e, min_distance, max_distance)
    )
    return _keep(examples, None, None, limit)


def load_editeval(path: str | Path | None = None, *, min_distance: float | None = None,
                  max_distance: float | None = None, limit: int | None = None) -> list[Example]:
    """``editeval.jsonl`` as InstructCoder prompts (reference ``output``), filtered as :func:`load_code_edits`."""
    _check_bounds(min_distance, max_distance)
    _check_limit(limit)
    meta_keys = ("instruction", "context", "test", "author", "license")
    examples = (
        Example(id=_row_id(r, "task_id", w), source="editeval",
                prompt=instructcoder_prompt(r["input"], r["instruction"]), reference=r["output"],
                edit_norm=_edit_norm_field(r, "char_edit_norm", w), input_text=r["input"],
                meta={k: r[k] for k in meta_keys if k in r})
        for w, r in _rows(path, "editeval.jsonl", ("task_id", "input", "instruction", "output", "char_edit_norm"),
                          text=("input", "instruction", "output"))
    )
    return _keep(examples, min_distance, max_distance, limit)


def mt_bench_example(row: dict, where: str, id: str) -> Example:
    """An MT-Bench row (``turns``, optional ``category`` / ``reference``) as its first turn; no reference
    output (``reference == ""``, ``edit_norm`` NaN)."""
    turns = row.get("turns")
    if not isinstance(turns, (list, tuple)) or not turns or not isinstance(turns[0], str):
        raise ValueError(f"{where}: 'turns' must be a non-empty list of strings, got {str(turns)[:60]}")
    meta = {"category": row.get("category"), "turns": list(turns)}
    if row.get("reference") is not None:
        meta["reference"] = row["reference"]
    return Example(id=id, source="mt_bench", prompt=turns[0], reference="", edit_norm=math.nan, meta=meta)


def load_mt_bench(path: str | Path | None = None, *, limit: int | None = None) -> list[Example]:
    """``mt_bench.jsonl``, first turn only (see :func:`mt_bench_example`)."""
    _check_limit(limit)
    examples = [mt_bench_example(r, w, _row_id(r, "question_id", w))
                for w, r in _rows(path, "mt_bench.jsonl", ("question_id", "turns"))]
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
    _check_bounds(lo, hi, ("lo", "hi"), optional=False)
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


def _floats(name: str, values) -> np.ndarray:
    """``values`` as a float array; ``TypeError`` naming ``name`` when they are not numbers."""
    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be numbers, got {str(values)[:60]}") from None


def bin_index(values: Sequence[float], bins: Sequence[float]) -> np.ndarray:
    """Bin of each value for ascending ``bins`` edges (finite): ``[b_i, b_{i+1})``, the last bin closed; -1
    outside (and for NaN)."""
    edges = _floats("bins", bins)
    if edges.ndim != 1 or edges.size < 2 or not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bins must be at least two finite, strictly increasing edges, got {str(bins)[:60]}")
    v = _floats("values", values)
    if v.ndim == 0:
        raise TypeError(f"values must be a sequence of numbers, not one number, got {values!r}")
    idx = np.searchsorted(edges, v, side="right") - 1
    idx[v == edges[-1]] = edges.size - 2
    idx[(v < edges[0]) | (v > edges[-1]) | np.isnan(v)] = -1
    return idx


def resample_by_bins(examples: Sequence[Example], bins: Sequence[float], per_bin: int, seed: int = 0) -> list[Example]:
    """Up to ``per_bin`` examples drawn without replacement from each edit-norm bin (all of a bin that has
    fewer), for an even spread; returned by bin, in their original order within a bin. Examples outside
    the bins are dropped. ``per_bin``: an int >= 1; ``seed``: an int >= 0."""
    _check_count("per_bin", per_bin, 1)
    _check_count("seed", seed, 0)
    idx = bin_index([ex.edit_norm for ex in examples], bins)
    rng = np.random.default_rng(seed)
    out: list[Example] = []
    for b in range(len(bins) - 1):
        members = np.flatnonzero(idx == b)
        if members.size > per_bin:
            members = np.sort(rng.choice(members, size=per_bin, replace=False))
        out.extend(examples[i] for i in members)
    return out


# ---- Hub datasets (vLLM's benchmark datasets), through the `datasets` library -------------------------------
# kind -> the columns a dataset of that kind must have; detected by the dataset id, else by the columns
HF_KINDS = {
    "blazedit": ("code", "change_request", "norm_distance"),
    "mt-bench": ("turns",),
    "instructcoder": ("instruction", "input"),
}
HF_ID_HINTS = {"edit_5k_char": "blazedit", "blazedit": "blazedit", "mt-bench": "mt-bench", "mt_bench": "mt-bench",
               "instructcoder": "instructcoder"}
DATA_FILE_TYPES = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


def _saved_folder(p: Path) -> bool:
    """Whether ``p`` is a ``save_to_disk`` folder (of a dataset or a dataset dict)."""
    return p.is_dir() and ((p / "dataset_info.json").is_file() or (p / "dataset_dict.json").is_file())


def _hidden(f: Path, folder: Path) -> bool:
    """Whether ``f`` or a folder it is in below ``folder`` is hidden (its name starts with a dot)."""
    return any(part.startswith(".") for part in f.relative_to(folder).parts)


def _data_files(p: Path) -> tuple[str, list[str]]:
    """The ``datasets`` builder and files of a local parquet/JSONL file or a folder of them (hidden ones left out,
    as ``datasets`` leaves them)."""
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.suffix in DATA_FILE_TYPES and not _hidden(f, p))
    types = {DATA_FILE_TYPES.get(f.suffix) for f in files}
    if not files or None in types:
        raise ValueError(f"--dataset-path {p}: not a save_to_disk folder nor parquet/JSONL file(s)")
    if len(types) > 1:
        raise ValueError(f"--dataset-path {p} mixes parquet and JSON files")
    return types.pop(), [str(f) for f in files]


def _bad_json_line(files: Sequence[str]) -> str | None:
    """"FILE line N" of the first line of the JSONL ``files`` that is not a UTF-8 JSON object, if any."""
    for f in files:
        with open(f, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    ok = isinstance(json.loads(line.decode("utf-8")), dict)
                except (UnicodeDecodeError, json.JSONDecodeError):
                    ok = False
                if not ok:
                    return f"{f} line {n}"
    return None


def _no_rows(files: Sequence[str]) -> bool:
    """Whether the JSONL ``files`` hold no line but blank ones."""
    for f in files:
        with open(f, "rb") as fh:
            if any(line.strip() for line in fh):
                return False
    return True


def _split_files(p: Path, files: list[str]) -> dict[str, list[str]]:
    """The local data ``files`` of ``p`` by split, as ``datasets`` splits a Hub repository's files: by the split
    named in their paths (``data/test-00000.parquet``: ``test``), all ``train`` when none names one (and a lone
    file); ``ValueError`` naming a file that falls in no split while others do."""
    if p.is_file():
        return {"train": files}
    from datasets.data_files import DataFilesDict, get_data_patterns

    found = DataFilesDict.from_patterns(get_data_patterns(str(p)), base_path=str(p))
    of = {str(Path(f).resolve()): f for f in files}
    splits = {str(s): [of[r] for r in sorted(map(str, found[s])) if r in of] for s in found}
    splits = {s: fs for s, fs in splits.items() if fs}
    placed = {f for fs in splits.values() for f in fs}
    stray = [f for f in files if f not in placed]
    if stray:
        raise ValueError(f"--dataset-path {p}: {stray[0]} is in no split (the other files' names make the splits "
                         f"{sorted(splits)})")
    return splits


def _check_split(splits: Collection[str], split: str, path) -> None:
    """``ValueError`` naming ``splits`` unless ``split`` is one of them."""
    if split not in splits:
        raise ValueError(f"--dataset-path {path} has splits {sorted(splits)}, not {split!r}")


def _source(path: str, split: str) -> tuple:
    """Where the ``split`` of ``path`` comes from: ``("saved", folder)`` for a ``save_to_disk`` folder,
    ``("files", builder, files)`` for local files or folders of them (the parquet/JSON builder by extension; splits
    as :func:`_split_files`), ``("hub", id)`` for a Hub id; a split a local dataset does not have raises
    ``ValueError`` naming those it has."""
    import datasets

    p = Path(path).expanduser()
    if p.exists():
        if _saved_folder(p):
            ds = datasets.load_from_disk(str(p))
            _check_split([str(ds.split or "train")] if isinstance(ds, datasets.Dataset) else ds, split, path)
            return ("saved", p)
        builder, files = _data_files(p)
        splits = _split_files(p, files)
        _check_split(splits, split, path)
        return ("files", builder, splits[split])
    if str(path).count("/") == 1 and not str(path).startswith((".", "/", "~")):
        return ("hub", str(path))
    raise FileNotFoundError(f"--dataset-path {path}: no such file or folder (nor a Hub id owner/name)")


def load_hf_table(path: str, split: str = "train"):
    """The ``split`` of a dataset as a ``datasets.Dataset`` of Python values: ``load_from_disk`` for a
    ``save_to_disk`` folder (a single dataset is the split it was saved from, ``train`` when unnamed), the
    parquet/JSON builder for local files or folders of them (by extension; splits as :func:`_split_files`),
    ``load_dataset`` for a Hub id. A split the dataset does not have raises ``ValueError`` naming those it has."""
    import datasets

    source = _source(path, split)
    if source[0] == "saved":
        ds = datasets.load_from_disk(str(source[1]))
    elif source[0] == "files":
        _, builder, files = source
        try:
            ds = datasets.load_dataset(builder, data_files=files, split="train")
        except Exception as e:  # the JSON builder's errors name neither file nor line: find them
            bad = _bad_json_line(files) if builder == "json" else None
            if bad:
                raise ValueError(f"--dataset-path: {bad} is not a JSON object (one UTF-8 JSON object a line)"
                                 ) from None
            if builder == "json" and _no_rows(files):
                raise ValueError(f"--dataset-path {path}: no rows (its JSONL files are empty)") from None
            raise ValueError(f"--dataset-path {path}: cannot read it ({type(e).__name__}: {e})") from e
    else:
        try:
            ds = datasets.load_dataset(source[1])
        except Exception as e:  # offline without a cached copy, missing or gated repository
            raise _unreachable(path, e) from e
    if isinstance(ds, datasets.DatasetDict):
        _check_split(ds, split, path)
        ds = ds[split]
    return ds.with_format(None)  # rows of Python values, whatever format a saved dataset was left in


def _unreachable(path: str, e: Exception) -> ValueError:
    first = (str(e).strip().splitlines() or [""])[0]
    return ValueError(f"cannot reach dataset {str(path)!r} on the Hugging Face Hub ({type(e).__name__}: "
                      f"{first[:160]}), nor is it a local file or folder; go online or pass a local copy")


def _table_rows(table) -> Iterator[dict]:
    """The rows of ``table`` (a ``datasets.Dataset`` of Python values) in its order, read a batch at a time."""
    for batch in table.iter(batch_size=1000):
        for values in zip(*batch.values()):
            yield dict(zip(batch, values))


def _row_digest(row: dict) -> bytes:
    """A SHA-256 of ``row``'s fields and values: the same for rows whose JSON is the same (sorted keys, other
    objects as ``str``), text hashed as its UTF-8 bytes."""
    h = hashlib.sha256()
    for name in sorted(row):
        v = row[name]
        text = isinstance(v, str)
        b = v.encode("utf-8", "surrogatepass") if text else json.dumps(v, sort_keys=True, default=str).encode()
        h.update(f"{json.dumps(name)}{'s' if text else 'j'}{len(b)}:".encode())
        h.update(b)
    return h.digest()


def shuffled_order(path: str, table, split: str, seed: int) -> Iterator[int]:
    """The row indices of ``table`` (:func:`load_hf_table` of ``path`` and ``split``) in the order vLLM's benchmark
    datasets read the rows, lazily: streamed by ``datasets`` (one shard per data file; a saved dataset as one
    shard) and shuffled with ``seed`` (``IterableDataset.shuffle``: the shards' order, then a buffer of 1,000 rows).
    Rows are matched to ``table``'s by content (equal rows in their order); a single shard's ``table`` is read only
    as far as the streamed rows need."""
    import datasets

    source = _source(path, split)
    if source[0] == "saved":
        stream = table.to_iterable_dataset(num_shards=1)
    elif source[0] == "files":
        stream = datasets.load_dataset(source[1], data_files=source[2], split="train", streaming=True)
    else:
        try:
            stream = datasets.load_dataset(source[1], split=split, streaming=True)
        except Exception as e:  # offline: streaming needs the Hub
            raise _unreachable(path, e) from e

    unmatched: dict[bytes, deque[int]] = {}  # digest -> indices of the rows read but not streamed yet, ascending
    rows = enumerate(_table_rows(table))

    def read(n: int | None) -> int:
        """How many of ``n`` more rows of ``table`` (``None``: the rest) there were to read; read in ``table``'s
        order, so equal rows match in their order."""
        count = 0
        for count, (i, row) in enumerate(islice(rows, n), 1):
            unmatched.setdefault(_row_digest(row), deque()).append(i)
        return count

    # several shards: the buffer takes rows from several at once (datasets 5), so nearly every row is needed soon;
    # read them all before streaming (read while streaming, they let the stream's readers run ahead: more memory)
    if stream.num_shards > 1:
        read(None)
    streamed = 0
    for row in stream.shuffle(seed=seed):
        key = _row_digest(row)
        while key not in unmatched:
            if not read(1000):
                raise ValueError(f"--dataset-path {path}: the streamed rows differ from the loaded ones")
        positions = unmatched[key]
        i = positions.popleft()
        if not positions:
            del unmatched[key]
        streamed += 1
        yield i
    if streamed != len(table):
        raise ValueError(f"--dataset-path {path}: {streamed} rows streamed, {len(table)} loaded")


def local_digest(path: str | Path) -> str | None:
    """A short SHA-1 of a local dataset's files, their names (relative to ``path``) and bytes: the same for a copy
    of them elsewhere, another after any change; ``None`` when ``path`` is no local file or folder (a Hub id)."""
    p = Path(path).expanduser()
    if not p.exists():
        return None
    if _saved_folder(p):
        files = sorted(f for f in p.rglob("*") if f.is_file() and not _hidden(f, p))
    else:
        files = [Path(f) for f in _data_files(p)[1]]
    h = hashlib.sha1()
    for f in files:
        h.update(f"{f.relative_to(p).as_posix() if p.is_dir() else ''}\0{f.stat().st_size}\0".encode())
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()[:12]


def hf_kind(path: str, columns: Sequence[str]) -> str:
    """Which of :data:`HF_KINDS` a dataset is: the one whose columns it has, its id (or a folder name in its
    path) choosing when it has those of several; ``ValueError`` naming the expected columns (the id's kind's, when
    it names one) when it has none's."""
    name = str(path).lower()
    hinted = next((k for hint, k in HF_ID_HINTS.items() if hint in name), None)
    fits = [k for k, cols in HF_KINDS.items() if set(cols) <= set(columns)]
    if fits:
        return hinted if hinted in fits else fits[0]
    want = " or ".join(f"{k} {list(c)}" for k, c in HF_KINDS.items() if hinted in (None, k))
    raise ValueError(f"--dataset-path {path} has columns {sorted(columns)}; expected the columns of {want}")


def _check_utf8(ds, path: str) -> None:
    """``ValueError`` naming the first row of ``ds`` with a text field that is not UTF-8 (the JSON builder keeps
    such bytes in a string column; reading the row fails)."""
    import pyarrow as pa

    try:
        ds.data.validate(full=True)  # every string UTF-8: no row to name
        return
    except pa.ArrowInvalid:
        pass
    stream = iter(ds)
    for i in range(len(ds)):
        try:
            next(stream)
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} row {i}: a text field is not UTF-8 ({e.reason})") from None


def load_hf(path: str, *, min_distance: float | None = None, max_distance: float | None = None,
            split: str = "train", shuffle_seed: int | None = None, limit: int | None = None) -> list[Example]:
    """A Hub dataset (or a local copy of one) as examples prompted as vLLM's benchmarks do: Blazedit
    (:func:`blazedit_prompt`; ``norm_distance`` filtered to ``[min_distance, max_distance]``), MT-Bench (first
    turn) or InstructCoder (:func:`instructcoder_prompt`). Ids are ``id``/``question_id`` or the row index. In the
    dataset's order, or with ``shuffle_seed`` in the order vLLM's benchmarks read it (:func:`shuffled_order`);
    ``limit``: the first that many examples (as vLLM, the stream is read no further)."""
    _check_bounds(min_distance, max_distance)
    _check_limit(limit)
    if shuffle_seed is not None:
        _check_count("shuffle_seed", shuffle_seed, 0)
    ds = load_hf_table(path, split)
    kind = hf_kind(path, ds.column_names)
    _check_utf8(ds, path)
    out = []
    if shuffle_seed is None:
        rows = enumerate(_table_rows(ds))
    else:  # without a limit every row is needed: read a batch at a time, they come faster than one at a time
        row_at = list(_table_rows(ds)).__getitem__ if limit is None else ds.__getitem__
        rows = ((i, row_at(i)) for i in shuffled_order(path, ds, split, shuffle_seed))
    for i, row in rows:
        if limit is not None and len(out) >= limit:
            break
        where = f"{path} row {i}"
        rid = next((_row_id(row, k, where) for k in ("id", "question_id") if row.get(k) is not None), str(i))
        if kind == "mt-bench":
            out.append(mt_bench_example(row, where, rid))
            continue
        _need(row, where, HF_KINDS[kind], text=[c for c in HF_KINDS[kind] if c != "norm_distance"])
        if kind == "blazedit":
            e = _edit_norm_field(row, "norm_distance", where)
            if not _inside(e, min_distance, max_distance):
                continue
            out.append(Example(id=rid, source="blazedit", prompt=blazedit_prompt(row["code"], row["change_request"]),
                               reference=row.get("new_code") or "", edit_norm=e, input_text=row["code"],
                               meta={"change_request": row["change_request"]}))
        else:
            out.append(Example(id=rid, source="instructcoder",
                               prompt=instructcoder_prompt(row["input"], row["instruction"]),
                               reference=row.get("output") or "", edit_norm=math.nan, input_text=row["input"],
                               meta={"instruction": row["instruction"]}))
    return out
