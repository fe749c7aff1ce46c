"""Weight averaging of checkpoints of one model: WiSE-FT style interpolation between a model and a fine-tuned
descendant (``(1 - w) * A + w * B``; with ``--extrapolate``, ``w > 1`` goes past B along the line from A), or a
weighted "model soup" of several fine-tunes of one start (``w1 * M1 + w2 * M2 + ...``, the weights summing to 1);
computed in fp32 per tensor and stored in the first model's dtype.

    python -m experiments.weight_average A_DIR B_DIR --weight 0.75 --out OUT_DIR
    python -m experiments.weight_average A_DIR B_DIR --weight 1.25 --extrapolate --out OUT_DIR
    python -m experiments.weight_average M1 M2 M3 M4 --weights 0.4 0.2 0.2 0.2 --out OUT_DIR

OUT_DIR is the first model's folder (every file, its heads and records included) with the averaged weights in its
shard layout and ``average_config.json`` (every parent with its shards' SHA-256, the weights, the command and
run_info; for two models also ``a``, ``b`` and B's ``weight``); OUT_DIR may be the first folder itself, which then
keeps everything but its weights. All folders must hold safetensors weights of the same architecture
(``config.json`` equal but for bookkeeping keys) and the same tensor names, shapes and dtypes, in files inside
their folders (a shard that is a link to elsewhere is refused); a mismatch, or a folder OUT_DIR cannot be written
in, is one line and exit code 2 before anything is written (a shard that is not a readable safetensors file too,
named); a failure to read or write files during the run is one line and exit code 1.

OUT_DIR is replaced whole (an existing one must be a model folder, or empty, hold none of the models and be none of
them but the first): the new folder is written beside it (``.OUT_DIR.averaging``), then OUT_DIR is renamed
to ``.OUT_DIR.replaced``, the new folder to OUT_DIR, and the old one deleted. A run killed at any point leaves the
old OUT_DIR or the new one (between the two renames, the old one under its ``.replaced`` name); the next run first
puts that back, or finishes the deletion, and removes an unfinished new folder, so it never reads a half-written
model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info
from hybridsd.checkpoint_files import json_object, weight_files

SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")  # the weight files a model folder may have
IGNORED_CONFIG_KEYS = ("transformers_version", "_name_or_path", "dtype", "torch_dtype")


def shards(folder: Path) -> list[Path]:
    """The safetensors weight files of a model folder (``model.safetensors``, or the shards its index names), sorted
    by name; none when it has neither; ValueError naming one that lies or links outside the folder or is missing."""
    try:
        files = sorted(weight_files(folder, SAFETENSORS), key=lambda p: p.name)
    except FileNotFoundError:
        return []
    missing = [p.name for p in files if not p.is_file()]
    if missing:
        raise ValueError(f"{folder / SAFETENSORS[1]} names {missing[0]}, which {folder} does not hold")
    return files


def model_names(n: int) -> list[str]:
    """The names errors give the models: A and B for a pair, M1, M2, ... for more."""
    return ["A", "B"] if n == 2 else [f"M{i + 1}" for i in range(n)]


def check_models(folders: list[Path]) -> None:
    """Raises ValueError naming the first reason why ``folders`` cannot be averaged (each is held against the
    first)."""
    names = model_names(len(folders))
    for name, folder in zip(names, folders):
        if not (folder / "config.json").is_file():
            raise ValueError(f"{name}: no model folder (config.json) at {folder}")
        if not shards(folder):
            raise ValueError(f"{name}: no safetensors weights in {folder}")
    configs = [{k: v for k, v in json_object(f / "config.json").items() if k not in IGNORED_CONFIG_KEYS}
               for f in folders]
    specs = [tensor_specs(f) for f in folders]
    a = names[0]
    for name, c, t in zip(names[1:], configs[1:], specs[1:]):
        if c != configs[0]:
            keys = sorted(k for k in c.keys() | configs[0].keys() if c.get(k) != configs[0].get(k))
            raise ValueError(f"{a} and {name} are different architectures: config.json differs in {', '.join(keys)}")
        if t.keys() != specs[0].keys():
            raise ValueError(f"{a} and {name} hold different tensors ({sorted(t.keys() ^ specs[0].keys())[:3]} ...)")
        for k, spec in specs[0].items():
            if spec != t[k]:
                raise ValueError(f"tensor {k} is {spec[0]}{spec[1]} in {a} and {t[k][0]}{t[k][1]} in {name}")


def tensor_specs(folder: Path) -> dict[str, tuple[str, list[int]]]:
    """(dtype, shape) of every tensor of a model folder's safetensors shards, read from their headers; ValueError
    naming a shard that is not a safetensors file (truncated, corrupt)."""
    from safetensors import SafetensorError, safe_open

    specs = {}
    for p in shards(folder):
        try:
            with safe_open(p, "pt") as f:
                for k in f.keys():
                    s = f.get_slice(k)
                    specs[k] = (s.get_dtype(), list(s.get_shape()))
        except SafetensorError as e:
            raise ValueError(f"{p}: not a readable safetensors file ({e})") from None
    return specs


def load_shard(path: Path) -> dict:
    """A safetensors file's tensors; ValueError naming it when it cannot be read as one."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except SafetensorError as e:
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from None


def average(first: dict, others: list[dict], weights: list[float]) -> dict:
    """``weights[0] * first + weights[1] * others[0] + ...`` for each of ``first``'s tensor names, summed in fp32
    and cast back to ``first``'s dtype."""
    out = {}
    for k, t in first.items():
        acc = weights[0] * t.float()
        for w, o in zip(weights[1:], others):
            acc += w * o[k].float()
        out[k] = acc.to(t.dtype)
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def siblings(out: Path) -> tuple[Path, Path]:
    """Where a run writes the new ``out`` and where the old one waits while they are swapped: hidden folders beside
    ``out``, named after it (fixed names, so that a rerun finds what a killed run left)."""
    return out.with_name(f".{out.name}.averaging"), out.with_name(f".{out.name}.replaced")


def recover(out: Path) -> None:
    """Undo what a run killed while writing ``out`` left: the old folder goes back to ``out`` when the swap was cut
    between its renames, is deleted when the swap was done; an unfinished new folder is deleted."""
    new, old = siblings(out)
    if old.exists():
        if out.exists():  # the new folder is in place: finish the clean-up
            shutil.rmtree(old)
        else:  # killed between the renames: the old folder comes back
            os.rename(old, out)
    if new.exists():
        shutil.rmtree(new)


def check_out(out: Path, folders: list[Path]) -> None:
    """ValueError when ``out`` is a folder this command must not replace or write: one holding a model to average, a
    model other than the first (its own files would be lost), one inside a model's folder, or an existing folder
    that is neither empty nor a model folder (``config.json``)."""
    target = out.resolve()
    if target.exists() and not target.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    for i, (name, f) in enumerate(zip(model_names(len(folders)), folders)):
        if f.resolve().is_relative_to(target) and f.resolve() != target:
            raise ValueError(f"--out {out} holds {name} ({f}); it is replaced whole: give a folder of its own")
        if i > 0 and f.resolve() == target:
            raise ValueError(f"--out {out} is {name}; only the first model's folder may be replaced (the others' "
                             "files would be lost): give the first model or a folder of its own")
        if target.is_relative_to(f.resolve()) and f.resolve() != target:  # A's copy would hold its older outputs
            raise ValueError(f"--out {out} lies inside {name} ({f}): give a folder outside the models")
    if target.is_dir() and any(target.iterdir()) and not (target / "config.json").is_file():
        raise ValueError(f"--out {out} exists and is not a model folder (no config.json); it would be replaced "
                         "whole: give a new folder or a model folder")


def swap_in(new: Path, out: Path) -> None:
    """Put the complete folder ``new`` at ``out`` (see the module docstring): at any kill, ``out`` is old or new, or
    missing with the old one at its :func:`siblings` name, which :func:`recover` puts back."""
    old = siblings(out)[1]
    if out.exists():
        os.rename(out, old)
    os.rename(new, out)
    if old.exists():
        shutil.rmtree(old)


def weight_average(folders: list[Path], weights: list[float], out: Path, command: str = "") -> dict:
    """Writes OUT, ``sum(w * M for w, M in zip(weights, folders))`` (see the module docstring), and returns its
    ``average_config.json`` record."""
    from safetensors.torch import save

    if len(folders) < 2 or len(weights) != len(folders):
        raise ValueError(f"{len(folders)} models and {len(weights)} weights: give two or more models, one weight each")
    for folder in dict.fromkeys(f.resolve() for f in [*folders, out]):  # what a killed run left
        recover(folder)
    check_out(out, folders)
    check_models(folders)
    parents = [{"path": str(f), "shards": {p.name: sha256(p) for p in shards(f)}} for f in folders]
    others = [{k: t for p in shards(f) for k, t in load_shard(p).items()} for f in folders[1:]]  # any sharding
    first = folders[0]
    mixed = {p.name: average(load_shard(p), others, weights) for p in shards(first)}  # read before any write
    target = out.resolve()  # a link to a folder: the folder is replaced
    new = siblings(target)[0]
    replaced = {p.name for p in shards(first)}  # A's own weights are not copied, only its other files
    shutil.copytree(first, new, ignore=lambda d, names: replaced & set(names) if d == str(first) else set())
    for name, tensors in mixed.items():
        write_atomic(new / name, save(tensors, metadata={"format": "pt"}))
    pair = ({"what": "weights (1 - weight) * a + weight * b, per tensor in fp32, stored in a's dtype; every other "
                     "file is a's", "weight": weights[1], "a": parents[0], "b": parents[1]}
            if len(folders) == 2 else
            {"what": "weights sum(weights[i] * models[i]), per tensor in fp32, stored in the first model's dtype; "
                     "every other file is the first model's"})
    record = {**pair, "weights": weights, "models": parents, "shards": {p.name: sha256(p) for p in shards(new)},
              "command": command, "run_info": run_info("cpu")}
    write_atomic(new / "average_config.json", json.dumps(record, indent=1) + "\n")
    swap_in(new, target)
    return record


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=Path, nargs="+",
                        help="model folders, two or more; the first's files and dtype are kept")
    mix = parser.add_mutually_exclusive_group(required=True)
    mix.add_argument("--weight", type=float, help="for two models A B: B's weight w in (1 - w) * A + w * B, in [0, 1] "
                     "(with --extrapolate any w >= 0)")
    mix.add_argument("--weights", type=float, nargs="+", help="one weight per model, each in [0, 1], summing to 1")
    parser.add_argument("--extrapolate", action="store_true",
                        help="with --weight: allow w > 1, a point past B on the line from A through B")
    parser.add_argument("--out", type=Path, required=True, help="the averaged model's folder (may be the first)")
    args = parser.parse_args(argv)
    if len(args.models) < 2:
        parser.error(f"give two or more model folders, got {len(args.models)}")
    if args.weight is not None:
        if len(args.models) != 2:
            parser.error(f"--weight is for two models (A B), got {len(args.models)}: give --weights instead")
        if args.extrapolate and not 0.0 <= args.weight < float("inf"):
            parser.error(f"--weight must be finite and >= 0 with --extrapolate, got {args.weight}")
        if not args.extrapolate and not 0.0 <= args.weight <= 1.0:
            parser.error(f"--weight must be in [0, 1], got {args.weight} (past B: --extrapolate)")
        weights = [1.0 - args.weight, args.weight]
    else:
        if args.extrapolate:
            parser.error("--extrapolate is for --weight (two models A B)")
        weights = args.weights
        if len(weights) != len(args.models):
            parser.error(f"--weights gives {len(weights)} weights for {len(args.models)} models")
        if not all(0.0 <= w <= 1.0 for w in weights) or abs(sum(weights) - 1.0) > 1e-6:
            parser.error(f"--weights must each be in [0, 1] and sum to 1, got {weights} (sum {sum(weights):g})")
    parser.check_output(args.out.resolve().parent, f"--out {args.out}: its folder", folder=True)  # the new one's
    command = "python -m experiments.weight_average " + " ".join(argv if argv is not None else sys.argv[1:])
    try:  # weight_average checks the models before it reads or writes any weights
        record = weight_average(args.models, weights, args.out, command)
    except ValueError as e:  # the pair cannot be averaged: bad input
        parser.error(str(e))
    except OSError as e:  # reading or writing failed (disk, permissions): one line, not a usage error
        sys.stderr.write(f"{parser.prog}: error: {e}\n")  # one write, as Parser.error's
        sys.exit(1)
    print(f"wrote {args.out}: {len(record['shards'])} shards, weights {weights} of {len(args.models)} models")


if __name__ == "__main__":
    main()
