"""Data-parallel helpers for the experiment scripts under torchrun: one shard of prompts per process.

    torchrun --nproc_per_node=4 -m experiments.spec_bench ...   # rank r decodes todo[r::4]

Each rank appends its rows to its own shard ``<out>.rank{r}.part`` beside the output; after a barrier rank 0
merges the shards into the output in the examples' order and deletes them. The ranks read each other's files,
so they must share a filesystem (one host). Outside torchrun (``WORLD_SIZE`` unset or 1) the collective helpers
do nothing: the process is rank 0 of a world of 1. Ranks fill the host's GPUs round robin: more ranks than GPUs
put several on each GPU (over gloo, as NCCL takes one rank per GPU), which keeps busy a GPU that one process of
a small model leaves idle between its launches; their timings then share the GPU.

Results files are written so that a kill at any moment loses at most the row being made: rows are appended as
whole lines and flushed, a resume repairs the file first (:func:`repair_tail`), and whole files (the merged
output, state such as a sweep's ``sweep.json``) are replaced atomically (:func:`write_atomic`). A run holds its
output's lock (:func:`exclusive`) while it writes, so a second run on the same output stops at once; under torchrun
each rank dies with the launcher (:func:`die_with_parent`), so a killed launcher leaves no rank writing.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import sys
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

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
    die_with_parent()
    import torch  # here, not at the top: the file helpers below work without torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if device == "cuda" and torch.cuda.is_available():
            gpu = gpu_of(local_rank(), torch.cuda.device_count())
            torch.cuda.set_device(gpu)
            if ranks_per_gpu(torch.cuda.device_count()) == 1:
                dist.init_process_group("nccl", timeout=TIMEOUT, device_id=torch.device("cuda", gpu))
            else:  # NCCL refuses two ranks on one GPU; the collectives here are barriers and small objects
                dist.init_process_group("gloo", timeout=TIMEOUT)
        else:
            dist.init_process_group("gloo", timeout=TIMEOUT)
    return dist.get_rank(), dist.get_world_size()


def die_with_parent() -> None:
    """On Linux, have the kernel kill this process (SIGKILL) when its parent, torchrun's launcher, dies; elsewhere
    nothing. Rows are whole appended lines, so a kill loses at most the row being made."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl in this libc: ranks outlive a killed launcher, as without it
        return
    if os.getppid() != parent:  # the parent died before the call (the launcher may itself be pid 1, in a container)
        os.kill(os.getpid(), signal.SIGKILL)


class Busy(RuntimeError):
    """Another run holds the lock of the output (see :func:`exclusive`)."""


@contextlib.contextmanager
def exclusive(out: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``out`` (``fcntl.flock`` of ``<out>.lock`` beside it, made with its
    folder) for the block; :class:`Busy` at once when another run holds it. The kernel drops the lock with its
    process, so a killed run leaves none; the lock file is removed at the end. Without ``fcntl`` (Windows) no
    lock is taken."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    lock = out.with_name(out.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Busy(f"{out}: another run is writing it (it holds {lock.name}); wait for it or stop it") from None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # the run that held it removed this file as it ended: lock the new one
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


@contextlib.contextmanager
def exclusive_for_all(out: Path) -> Iterator[None]:
    """:func:`exclusive` for a whole torchrun run: rank 0 holds the lock for the block; when it cannot take it, every
    rank raises :class:`Busy` with rank 0's message (broadcast) before any work. Outside torchrun: :func:`exclusive`."""
    with contextlib.ExitStack() as held:
        busy = None
        if rank() == 0:
            try:
                held.enter_context(exclusive(out))
            except Busy as e:
                busy = str(e)
        if (busy := broadcast(busy)) is not None:
            raise Busy(busy)
        yield


def gpu_of(rank: int, n_gpus: int) -> int:
    """The GPU of local rank ``rank`` on a host of ``n_gpus``: round robin."""
    if n_gpus < 1:
        raise ValueError(f"no GPU to place local rank {rank} on")
    return rank % n_gpus


def ranks_per_gpu(n_gpus: int) -> int:
    """How many of this host's ranks (torchrun's ``LOCAL_WORLD_SIZE``) share the busiest of its ``n_gpus``
    GPUs: 1 for one process per GPU."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    return -(-local // max(n_gpus, 1))


def gpu_sharing(device: str) -> int:
    """:func:`ranks_per_gpu` of this host for a run on ``device``: 1 off CUDA and outside torchrun (the timings of
    a run with more share their GPU)."""
    if not device.startswith("cuda") or world() == 1:
        return 1
    import torch

    return ranks_per_gpu(torch.cuda.device_count())


def _group():
    """torch.distributed when a process group is up, else None (without torch imported there is none)."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def rank() -> int:
    return g.get_rank() if (g := _group()) else 0


def world() -> int:
    return g.get_world_size() if (g := _group()) else 1


def barrier() -> None:
    if world() > 1:
        _group().barrier()


def broadcast(obj, src: int = 0):
    """``obj`` as rank ``src`` has it, on every rank (also a barrier)."""
    if world() == 1:
        return obj
    box = [obj]
    _group().broadcast_object_list(box, src=src)
    return box[0]


def finish() -> None:
    """Leave the process group (at the end of a script), once every rank is done with its collectives: a rank that
    tore its connections down while another still received from it could abort that one at exit."""
    if g := _group():
        barrier()
        g.destroy_process_group()


def local_device(device: str) -> str:
    """The device this rank decodes on: for "cuda" under torchrun its GPU by :func:`gpu_of`, else ``device``."""
    if device == "cuda" and world() > 1:
        import torch

        gpu = gpu_of(local_rank(), torch.cuda.device_count())
        torch.cuda.set_device(gpu)
        return f"cuda:{gpu}"
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


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace ``path`` by ``data`` all at once: a kill at any point leaves the old file or the new, never a mix.

    Written to ``<path>.tmp`` in the same folder (made if missing), flushed to disk (fsync), then renamed over
    ``path``; a write that fails removes ``<path>.tmp``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself reaches the disk
    finally:
        os.close(fd)


def read_json(path: Path, default):
    """The JSON document in ``path``; ``default`` if there is none. A damaged one (a torn write of an older
    version) is reported on stderr, kept as ``<path>.damaged`` and replaced by ``default``."""
    if not path.exists():
        return default
    try:
        return json.loads(path.read_bytes())
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        keep = path.with_name(path.name + ".damaged")
        os.replace(path, keep)
        print(f"{path}: damaged ({e}); kept as {keep.name}, starting a new one", file=sys.stderr)
        return default


def row_key(line: str | bytes) -> tuple[str, str] | None:
    """(config key, example id) of one results line; None if the line is not a complete row (torn, not JSON,
    not an object, or without a string ``config_key`` and ``example_id``)."""
    try:
        row = json.loads(line.decode() if isinstance(line, bytes) else line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return None
    if not isinstance(row, dict):
        return None
    key, eid = row.get("config_key"), row.get("example_id")
    return (key, eid) if isinstance(key, str) and isinstance(eid, str) else None


def keyed_rows(path: Path) -> list[tuple[tuple[str, str], str]]:
    """((config key, example id), line) of each complete row of ``path``, in file order; damaged and blank
    lines are skipped (:func:`repair_tail` reports and removes them)."""
    out = []
    if path.exists():
        for raw in path.read_bytes().split(b"\n"):
            if (key := row_key(raw)) is not None:
                out.append((key, raw.decode()))
    return out


def repair_tail(path: Path) -> int:
    """Make ``path`` hold only complete rows, ending at a line boundary, before appending to it; returns the
    lines dropped.

    Each damaged line (see :func:`row_key`; a torn last line is the usual one) is named on stderr by file and
    line number, appended to ``<path>.damaged``, and removed, so a resume makes its row again. A torn tail goes
    by truncation, damage elsewhere by :func:`write_atomic`: a kill at any point leaves the old file or the
    repaired one (and the copy). A last row missing only its newline gets the newline.
    """
    if not path.exists() or not path.stat().st_size:
        return 0
    data = path.read_bytes()
    *lines, tail = data.split(b"\n")  # tail: what follows the last newline, b"" when the file ends with one
    bad = [(i, line) for i, line in enumerate(lines) if line.strip() and row_key(line) is None]
    torn = bool(tail.strip()) and row_key(tail) is None
    if tail and not torn:
        with path.open("ab") as f:  # a whole row whose newline was lost: terminate it
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
        tail = b""
    if not bad and not tail:
        return 0
    dropped = bad + ([(len(lines), tail)] if tail.strip() else [])
    keep = path.with_name(path.name + ".damaged")
    for i, line in dropped:
        print(f"{path}:{i + 1}: damaged row dropped and to be made again (copy in {keep.name}): "
              f"{line[:60]!r}", file=sys.stderr)
    if dropped:
        with keep.open("ab") as f:  # the copy first: a kill before the removal only repeats it
            f.write(b"".join(line + b"\n" for _, line in dropped))
            f.flush()
            os.fsync(f.fileno())
    if bad:
        gone = {i for i, _ in bad}
        write_atomic(path, b"".join(line + b"\n" for i, line in enumerate(lines) if i not in gone))
    else:
        os.truncate(path, len(data) - len(tail))  # one system call: the old length or the new
    return len(dropped)


def merge(out: Path, order: Sequence[str]) -> int:
    """Append every shard row of ``out`` not yet in it, in the order of the example ids ``order`` (rows of other
    ids after them, in shard order), then delete the shards. Returns the rows added; rank 0 alone calls it.

    Rows are keyed by (config key, example id): a key already in ``out`` or seen earlier is skipped. ``out`` is
    repaired (:func:`repair_tail`) and then replaced atomically (its old rows, then the new) before any shard is
    deleted, so a crash at any point leaves every row in ``out`` or a shard, and the rerun's merge adds only what
    ``out`` lacks. Damaged shard lines are skipped (their rows were redone, or are missing and a rerun makes them).
    """
    shards = shard_paths(out)
    if not shards:
        return 0
    repair_tail(out)
    have = {k for k, _ in keyed_rows(out)}
    pos = {eid: i for i, eid in enumerate(order)}
    rows = sorted((r for p in shards for r in keyed_rows(p)), key=lambda r: pos.get(r[0][1], len(pos)))  # stable
    new = []
    for k, line in rows:
        if k not in have:
            have.add(k)
            new.append(line + "\n")
    if new:
        write_atomic(out, (out.read_bytes() if out.exists() else b"") + "".join(new).encode())
    for p in shards:
        p.unlink()
    return len(new)
