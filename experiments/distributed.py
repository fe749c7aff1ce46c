"""Data-parallel helpers for the experiment scripts under torchrun: one shard of prompts per process (GPU).

    torchrun --nproc_per_node=4 experiments/spec_bench.py ...   # rank r decodes todo[r::4]

Each rank appends its rows to its own shard ``<out>.rank{r}.part`` beside the output; after a barrier rank 0
merges the shards into the output in the examples' order and deletes them. The ranks read each other's files,
so they must share a filesystem (one host). Outside torchrun (``WORLD_SIZE`` unset or 1) the collective helpers
do nothing: the process is rank 0 of a world of 1.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

# A barrier waits for the slowest rank's whole shard (and its model load), far longer than torch's default.
TIMEOUT = timedelta(hours=6)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def init(device: str = "cpu") -> tuple[int, int]:
    """Join torchrun's process group once; (rank, world size), (0, 1) outside torchrun.

    Backend: nccl when ``device`` is "cuda" (each rank on ``cuda:{LOCAL_RANK}``) and CUDA is available, else gloo.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    if not dist.is_initialized():
        if device == "cuda" and torch.cuda.is_available():
            torch.cuda.set_device(local_rank())
            dist.init_process_group("nccl", timeout=TIMEOUT, device_id=torch.device("cuda", local_rank()))
        else:
            dist.init_process_group("gloo", timeout=TIMEOUT)
    return dist.get_rank(), dist.get_world_size()


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def barrier() -> None:
    if world() > 1:
        dist.barrier()


def broadcast(obj, src: int = 0):
    """``obj`` as rank ``src`` has it, on every rank (also a barrier)."""
    if world() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def finish() -> None:
    """Leave the process group (at the end of a script)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def local_device(device: str) -> str:
    """The device this rank decodes on: ``cuda:{LOCAL_RANK}`` for "cuda" under torchrun, else ``device``."""
    if device == "cuda" and world() > 1:
        torch.cuda.set_device(local_rank())
        return f"cuda:{local_rank()}"
    return device


def shard_path(out: Path, r: int) -> Path:
    return out.with_name(f"{out.name}.rank{r}.part")  # not *.jsonl: globs over results skip shards


def shard_paths(out: Path) -> list[Path]:
    """The shard files of ``out`` that exist, by rank; any world size (a crashed earlier run's too)."""
    pat = re.compile(re.escape(out.name) + r"\.rank(\d+)\.part")
    if not out.parent.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in out.parent.iterdir() if (m := pat.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def keyed_rows(path: Path) -> list[tuple[tuple[str, str], str]]:
    """((config key, example id), line) of each complete row of ``path``; torn or blank lines are skipped."""
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            out.append(((row["config_key"], row["example_id"]), line))
    return out


def _whole(text: str) -> str:
    """``text`` up to its last complete line: an unterminated tail (a write torn by a crash) is dropped, or
    terminated where it parses as a row."""
    head, sep, tail = text.rpartition("\n")
    if not tail:
        return text
    try:
        json.loads(tail)
    except json.JSONDecodeError:
        return head + sep
    return text + "\n"


def repair_tail(path: Path) -> None:
    """Make ``path`` end at a line boundary before appending to it (see :func:`_whole`)."""
    if path.exists() and path.stat().st_size:
        text = path.read_text()
        fixed = _whole(text)
        if fixed != text:
            path.write_text(fixed)


def merge(out: Path, order: Sequence[str]) -> int:
    """Append every shard row of ``out`` not yet in it, in the order of the example ids ``order`` (rows of other
    ids after them, in shard order), then delete the shards. Returns the rows added; rank 0 alone calls it.

    Rows are keyed by (config key, example id): a key already in ``out`` or seen earlier is skipped. ``out`` is
    replaced atomically (its old rows, then the new) before any shard is deleted, so a crash at any point leaves
    every row in ``out`` or a shard, and the rerun's merge adds only what ``out`` lacks.
    """
    shards = shard_paths(out)
    if not shards:
        return 0
    have = {k for k, _ in keyed_rows(out)}
    pos = {eid: i for i, eid in enumerate(order)}
    rows = sorted((r for p in shards for r in keyed_rows(p)), key=lambda r: pos.get(r[0][1], len(pos)))  # stable
    new = []
    for k, line in rows:
        if k not in have:
            have.add(k)
            new.append(line + "\n")
    if new:
        old = _whole(out.read_text()) if out.exists() else ""
        tmp = out.with_name(out.name + ".merging")
        with tmp.open("w") as f:
            f.write(old + "".join(new))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    for p in shards:
        p.unlink()
    return len(new)
