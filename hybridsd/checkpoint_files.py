"""The files of a checkpoint folder: its weight files, refused when any of them lies outside it, and its JSON
objects (``config.json`` and the like), read with errors that name the file.

A shard named in an index (``../other/model.safetensors``, an absolute path) or a file that is a link to
elsewhere would make a loader read weights the folder does not hold. Files are checked as written (normalised
against the folder's absolute path) and as resolved (links followed): the resolved file must lie in the folder,
or, for a Hugging Face Hub snapshot (``.../models--owner--name/snapshots/<revision>/``), in that repository's
blob store, where the snapshot's links point.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# in the order loaders prefer them: safetensors first
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def allowed_roots(folder: Path) -> tuple[Path, ...]:
    """Where ``folder``'s files may resolve to: the folder itself, and the blob store of the Hub repository whose
    snapshot it is."""
    real = folder.resolve()
    if real.parent.name == "snapshots":
        return real, real.parent.parent / "blobs"
    return (real,)


def inside(folder: Path, name: str, source: Path | None = None) -> Path:
    """``folder / name``, refused (``ValueError`` naming ``source``, the index that names it, or the file) when
    ``name`` is absolute, leads out of ``folder`` or is a link to a file outside :func:`allowed_roots`."""
    where = source if source is not None else folder / str(name)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: a weight file name must be a non-empty string, got {name!r}")
    path = Path(os.path.abspath(folder / name))
    if Path(name).is_absolute() or not path.is_relative_to(os.path.abspath(folder)):
        raise ValueError(f"{where} names the weight file {name!r}, outside the checkpoint folder {folder}; "
                         "refusing to read it")
    if path.exists() and not any(path.resolve().is_relative_to(root) for root in allowed_roots(folder)):
        raise ValueError(f"{path} is a link to {path.resolve()}, outside the checkpoint folder {folder}; "
                         "refusing to read it")
    return path


def weight_files(folder: str | Path, names: tuple[str, ...] = WEIGHT_FILES) -> list[Path]:
    """The files holding ``folder``'s weights, in the first of ``names`` present: the file itself or the shards
    its ``.index.json`` names, each checked by :func:`inside`. ``FileNotFoundError`` when none is present,
    ``ValueError`` naming the index when it is not a JSON object with a ``weight_map``."""
    folder = Path(folder)
    for name in names:
        f = folder / name
        if not f.exists():
            continue
        if not name.endswith(".index.json"):
            return [inside(folder, name)]
        index = inside(folder, name)
        try:
            weight_map = json.loads(index.read_bytes())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # not JSON, not an object, no weight_map
            raise ValueError(f"{index} is not a weight index: a JSON object with a 'weight_map' of tensor name "
                             f"to file ({type(e).__name__}: {e})") from None
        return [inside(folder, s, index) for s in shards]
    raise FileNotFoundError(f"no weights in {folder} (looked for {', '.join(names)})")


def json_object(path: Path, *required: str) -> dict:
    """The JSON object in ``path``: ``FileNotFoundError`` when there is no such file, ``ValueError`` naming the file
    when it is not a JSON object or lacks a ``required`` key."""
    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} in {path.parent}")
    try:
        raw = json.loads(path.read_bytes())
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(raw).__name__}")
    for key in required:
        if key not in raw:
            raise ValueError(f"{path} has no {key!r}")
    return raw


def read_tensor(folder: str | Path, name: str):
    """The tensor ``name`` read alone from ``folder``'s safetensors weights (the file an index names for it, or the
    single file), or None when the folder's weights are not safetensors or hold no such tensor."""
    from safetensors import safe_open

    for f in weight_files(folder):
        if f.suffix != ".safetensors":
            return None
        with safe_open(f, "pt") as st:
            if name in st.keys():
                return st.get_tensor(name)
    return None
