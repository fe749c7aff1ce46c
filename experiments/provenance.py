"""Where and with what a result was made: commit, device, library versions."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path


# what runs write into the tree: changes under these paths leave the code that made a result unchanged
OUTPUT_PATHS = ("experiments/results",)


def git_commit(repo: str | Path | None = None) -> str:
    """The checked-out commit (with ``-dirty`` when tracked files outside ``OUTPUT_PATHS`` have changes, so that a
    chain of runs writing results into the tree names the commit of its code), ``$HYBRIDSD_COMMIT`` where there
    is no git checkout (a copied working tree on a GPU machine), or ``"unknown"``."""
    if os.environ.get("HYBRIDSD_COMMIT"):
        return os.environ["HYBRIDSD_COMMIT"]
    cwd = Path(repo) if repo else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                                *(f":(top,exclude){p}" for p in OUTPUT_PATHS)],
                               cwd=cwd, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def run_info(device: str | None = None) -> dict:
    """Provenance fields every results file carries. ``device``: the run's torch device (``"cpu"``, ``"cuda"``,
    ``"cuda:1"``, a ``torch.device``), described as the CPU or as that GPU's name; None: GPU 0's name where CUDA
    is present, else the CPU."""
    import numpy
    import torch
    import transformers

    where = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
    if where.type == "cuda":
        device = torch.cuda.get_device_name(0 if device is None else where)  # no index: the current GPU
    elif where.type == "cpu":
        device = f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    else:
        device = str(where)
    return {
        "commit": git_commit(),
        "device": device,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
