"""Weight averaging of two checkpoints of one model (WiSE-FT style interpolation between a model and a fine-tuned
descendant): every tensor becomes ``(1 - w) * A + w * B``, computed in fp32 and stored in A's dtype.

    python -m experiments.weight_average A_DIR B_DIR --weight 0.75 --out OUT_DIR

OUT_DIR is A's folder (every file, its heads and records included) with the averaged weights in A's shard layout and
``average_config.json`` (both parents, their shards' SHA-256, the weight, the command and run_info); OUT_DIR may be
A itself, which then keeps everything but its weights. Both folders must hold safetensors weights of the same
architecture (``config.json`` equal but for bookkeeping keys) and the same tensor names, shapes and dtypes; a
mismatch is one line and exit code 2 before anything is written; a failure to read or write files is one line and
exit code 1.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info

IGNORED_CONFIG_KEYS = ("transformers_version", "_name_or_path", "dtype", "torch_dtype")


def shards(folder: Path) -> list[Path]:
    """The safetensors weight files of a model folder, sorted by name."""
    return sorted(folder.glob("*.safetensors"))


def check_pair(a: Path, b: Path) -> None:
    """Raises ValueError naming the first reason why A and B cannot be averaged."""
    for name, folder in (("A", a), ("B", b)):
        if not (folder / "config.json").is_file():
            raise ValueError(f"{name}: no model folder (config.json) at {folder}")
        if not shards(folder):
            raise ValueError(f"{name}: no safetensors weights in {folder}")
    ca, cb = ({k: v for k, v in json.loads((f / "config.json").read_text()).items() if k not in IGNORED_CONFIG_KEYS}
              for f in (a, b))
    if ca != cb:
        keys = sorted(k for k in ca.keys() | cb.keys() if ca.get(k) != cb.get(k))
        raise ValueError(f"A and B are different architectures: config.json differs in {', '.join(keys)}")
    ta, tb = tensor_specs(a), tensor_specs(b)
    if ta.keys() != tb.keys():
        raise ValueError(f"A and B hold different tensors ({sorted(ta.keys() ^ tb.keys())[:3]} ...)")
    for k, spec in ta.items():
        if spec != tb[k]:
            raise ValueError(f"tensor {k} is {spec[0]}{spec[1]} in A and {tb[k][0]}{tb[k][1]} in B")


def tensor_specs(folder: Path) -> dict[str, tuple[str, list[int]]]:
    """(dtype, shape) of every tensor of a model folder's safetensors shards, read from their headers."""
    from safetensors import safe_open

    specs = {}
    for p in shards(folder):
        with safe_open(p, "pt") as f:
            for k in f.keys():
                s = f.get_slice(k)
                specs[k] = (s.get_dtype(), list(s.get_shape()))
    return specs


def average(a: dict, b: dict, weight: float) -> dict:
    """``(1 - weight) * a + weight * b`` for each of ``a``'s tensor names, in fp32, cast back to ``a``'s dtype."""
    return {k: ((1 - weight) * a[k].float() + weight * b[k].float()).to(a[k].dtype) for k in a}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def weight_average(a: Path, b: Path, weight: float, out: Path, command: str = "") -> dict:
    """Writes OUT (see the module docstring) and returns its ``average_config.json`` record."""
    from safetensors.torch import load_file, save

    check_pair(a, b)
    parents = {name: {"path": str(folder), "shards": {p.name: sha256(p) for p in shards(folder)}}
               for name, folder in (("a", a), ("b", b))}
    wb = {k: t for p in shards(b) for k, t in load_file(p).items()}  # B's tensors, whatever its sharding
    mixed = {p.name: average(load_file(p), wb, weight) for p in shards(a)}  # all read before anything is written
    if out.resolve() != a.resolve():
        shutil.copytree(a, out, dirs_exist_ok=True)
    for name, tensors in mixed.items():
        write_atomic(out / name, save(tensors, metadata={"format": "pt"}))
    record = {"what": "weights (1 - weight) * a + weight * b, per tensor in fp32, stored in a's dtype; every other "
                      "file is a's", "weight": weight, **parents,
              "shards": {p.name: sha256(p) for p in shards(out)}, "command": command, "run_info": run_info()}
    write_atomic(out / "average_config.json", json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="model folder A (its files and dtype are kept)")
    parser.add_argument("b", type=Path, help="model folder B")
    parser.add_argument("--weight", type=float, required=True, help="B's weight w in (1 - w) * A + w * B, in [0, 1]")
    parser.add_argument("--out", type=Path, required=True, help="the averaged model's folder (may be A)")
    args = parser.parse_args(argv)
    if not 0.0 <= args.weight <= 1.0:
        parser.error(f"--weight must be in [0, 1], got {args.weight}")
    command = "python -m experiments.weight_average " + " ".join(argv if argv is not None else sys.argv[1:])
    try:  # weight_average checks the pair before it reads or writes any weights
        record = weight_average(args.a, args.b, args.weight, args.out, command)
    except ValueError as e:  # the pair cannot be averaged: bad input
        parser.error(str(e))
    except OSError as e:  # reading or writing failed (disk, permissions): one line, not a usage error
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"wrote {args.out}: {len(record['shards'])} shards, weight {args.weight} of {args.b}")


if __name__ == "__main__":
    main()
