"""The zoo's training corpus: the real edits of ``code_edits_dev.jsonl`` (loaded, split by whole repository
into training, validation and evaluation rows) with their change requests in the Blazedit prompt, and this machine's
Python sources as pretraining text and as the files that synthetic edits (``synthetic_edits``) change."""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import random
from pathlib import Path

from experiments.train_tokenizer import python_files, read_text, source_roots
from hybridsd.data import DATA_ENV, blazedit_prompt
from hybridsd.edit_requests import located_request

REPO = Path(__file__).resolve().parents[1]


def edits_candidates() -> tuple[Path, ...]:
    """Where code_edits_dev.jsonl is looked for, in order: its compressed copies in .cache/, then the data folder:
    ``$HYBRIDSD_DATA`` when set (and then no other, as :func:`hybridsd.data.default_data_dir`), else shared/data
    next to the repository and /work/shared/data."""
    env = os.environ.get(DATA_ENV)
    folders = [Path(env)] if env else [REPO.parent / "shared" / "data", Path("/work/shared/data")]
    return (REPO / ".cache" / "code_edits_dev.jsonl.xz", REPO / ".cache" / "code_edits_dev.jsonl.gz",
            *(f / "code_edits_dev.jsonl" for f in folders))


EDITS_CANDIDATES = edits_candidates()
# Whole repositories held out of all training: the evaluation files come from unseen repositories.
EVAL_REPOS = ("marshmallow-code/marshmallow", "more-itertools/more-itertools")
# Whole repositories held out of the zoo target's training to choose among its checkpoints (never the evaluation
# rows): 296 edits, 34 of them of reference edit norm 0.3-0.6.
VALIDATION_REPOS = ("pallets/click",)


def edits_path() -> Path:
    """The first of :func:`edits_candidates` that exists; ``FileNotFoundError`` naming ``$HYBRIDSD_DATA`` when it
    is set to something other than a folder (as :func:`hybridsd.data.default_data_dir`), or naming every candidate
    when none exists."""
    env = os.environ.get(DATA_ENV)
    if env and not Path(env).is_dir():
        raise FileNotFoundError(f"data directory {env} not found (set ${DATA_ENV} to the data folder)")
    found = next((p for p in edits_candidates() if p.exists()), None)
    if found is None:
        raise FileNotFoundError(f"no code edits: none of {', '.join(map(str, edits_candidates()))} exists")
    return found


def load_edits(path: Path | None = None) -> list[dict]:
    """Rows of code_edits_dev.jsonl (by default :func:`edits_path`: a compressed copy in .cache/ when present).
    ``ValueError`` naming the file (and line) when it is a folder, cannot be read, holds a line that is not a JSON
    object with a ``repo``, or holds no row."""
    path = Path(path) if path is not None else edits_path()
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a code edits file")
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    rows = []
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                row = json.loads(line)
                if not isinstance(row, dict) or not isinstance(row.get("repo"), str):
                    raise ValueError(f"{path} line {i}: not a code edit (a JSON object with a 'repo')")
                rows.append(row)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} line {i}: not JSON ({e.msg})") from None
    except (OSError, UnicodeDecodeError, EOFError, lzma.LZMAError) as e:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"{path}: not a readable code edits file ({type(e).__name__}: {e})") from None
    if not rows:
        raise ValueError(f"{path}: no code edits in it")
    return rows


def split_edits(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(train, eval): eval is every row of the ``EVAL_REPOS``."""
    return [r for r in rows if r["repo"] not in EVAL_REPOS], [r for r in rows if r["repo"] in EVAL_REPOS]


def split_validation(rows: list[dict], repos: tuple[str, ...] = VALIDATION_REPOS) -> tuple[list[dict], list[dict]]:
    """(rest, validation): validation is every row of ``repos``."""
    return [r for r in rows if r["repo"] not in repos], [r for r in rows if r["repo"] in repos]


EDIT_SPLITS = ("eval", "validation", "train")


def split_rows(rows: list[dict], which: str, repos: tuple[str, ...] = VALIDATION_REPOS) -> list[dict]:
    """The rows of one split: ``eval`` (the evaluation repositories), ``validation`` (``repos``) or ``train`` (the
    training rows outside ``repos``)."""
    train, evaluation = split_edits(rows)
    rest, validation = split_validation(train, repos)
    return {"eval": evaluation, "validation": validation, "train": rest}[which]


def eval_split_record(rows: list[dict]) -> dict:
    """The content of ``eval_split.json``."""
    train, held = split_edits(rows)
    return {"rule": "all rows of these repositories (whole-repository holdout)", "repos": list(EVAL_REPOS),
            "n": len(held), "n_train": len(train), "ids": [r["id"] for r in held]}


def blazedit_messages(before: str, instruction: str) -> list[dict]:
    """The user turn of a Blazedit-format edit request."""
    return [{"role": "user", "content": blazedit_prompt(before, instruction)}]


def pretraining_texts(cfg) -> tuple[list[str], list[str], dict]:
    """(pretraining texts, candidate files for synthetic edits, stats), from this machine's Python sources.

    ``cfg``: the target's :class:`train_zoo.TargetConfig` (its seed, ``pretrain_*`` and ``synthetic_*`` sizes).
    A seeded shuffle of the sorted file list, deduplicated by content; pretraining takes files until
    ``pretrain_chars``; synthetic edits take the files of suitable size from the whole list. The texts depend on
    the machine's Python installation, so ``stats`` fingerprints both lists (:func:`fingerprint`): two runs with
    equal fingerprints trained on the same text.
    """
    files = python_files(source_roots())
    random.Random(cfg.seed).shuffle(files)
    seen: set[bytes] = set()
    pretrain, edit_sources, total = [], [], 0
    want_sources = cfg.synthetic_sources
    for path in files:
        text = read_text(path)
        if text is None or len(text) < 200:
            continue
        digest = hashlib.sha1(text.encode()).digest()
        if digest in seen:
            continue
        seen.add(digest)
        if cfg.synthetic_min_chars <= len(text) <= cfg.synthetic_max_chars and len(edit_sources) < want_sources:
            edit_sources.append(text)
        if total < cfg.pretrain_chars and len(text) <= cfg.pretrain_max_file_chars and \
                max(map(len, text.splitlines())) <= 1000:  # skips minified or generated data files
            pretrain.append(text)
            total += len(text)
        if total >= cfg.pretrain_chars and len(edit_sources) >= want_sources:
            break
    stats = {"python_files_found": len(files), "pretrain_files": len(pretrain), "pretrain_chars": total,
             "edit_source_files": len(edit_sources), "pretrain_sha256": fingerprint(pretrain),
             "edit_sources_sha256": fingerprint(edit_sources)}
    return pretrain, edit_sources, stats


def fingerprint(texts: list[str]) -> str:
    """SHA-256 of ``texts`` in their order (each text's length and UTF-8 bytes): equal exactly for equal lists."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def change_request(before: str, after: str, subject: str, mode: str, max_places: int) -> str:
    """The change request of an edit: located (see ``hybridsd.edit_requests``) or the subject alone."""
    return located_request(before, after, subject, max_places) if mode == "located" else subject


def real_request(args: tuple[dict, str, int]) -> str:
    """The change request of a code_edits row (pool worker)."""
    row, mode, max_places = args
    return change_request(row["before"], row["after"], row["instruction"], mode, max_places)
