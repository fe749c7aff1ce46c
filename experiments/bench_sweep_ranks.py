"""A sweep's wall time on one host against the ranks that share each GPU: the same sweep (preset, methods, prompts)
run by one process and under torchrun with more ranks than GPUs, each in a folder of its own; per run the wall time
of the whole command (start-up and model loads included) and each config's seconds from its ``sweep.json``, and
whether its rows equal the one-process run's (every field but the timings and run_info).

    python -m experiments.bench_sweep_ranks --ranks 1 4 8 --methods none ngram eagle --out F.json [--preset edit-norm]
        [--mps]

The sweep options after ``--`` go to every run; the sweep's dry run checks them first, so one it refuses is one
line and exit code 2 before any run.

A small model at batch 1 leaves the GPU idle between its kernel launches, so ranks sharing it decode their prompts
side by side; the rows' ``tpot_ms`` then times a shared GPU (``ranks_per_gpu`` in their run_info). Without MPS the
GPU runs one process's kernels at a time; ``--mps`` starts NVIDIA's Multi-Process Service control daemon for the
runs (its pipes and logs in the work folder; the GPU's settings are left as they are) and stops it after them, so
the ranks' kernels run at the same time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info
from experiments.spec_bench import METHODS
from experiments.sweep import PRESETS

TIMING = ("wall_s", "tpot_ms", "run_info")
# the sweep's options this tool sets itself, or that leave no sweep.json (refused after --; abbreviations too)
OWN = ("--preset", "--methods", "--out-dir", "--dry-run", "--help")


def sweep_command(ranks: int, preset: str, methods: list[str], out_dir: Path, extra: list[str]) -> list[str]:
    """The command line of one sweep: one process for ``ranks`` 1, else torchrun with ``ranks`` processes."""
    launch = ([sys.executable] if ranks == 1 else
              [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"])
    return [*launch, "-m", "experiments.sweep", "--preset", preset, "--methods", *methods, "--out-dir", str(out_dir),
            *extra]


def sweep_problem(a) -> str | None:
    """What the sweep's own checks find in the runs' options (``a``: the parsed command line; the sweep options
    after ``--`` included), as its dry run reports it in one line; None when it runs."""
    cmd = sweep_command(1, a.preset, a.methods, (a.work_dir or Path(tempfile.gettempdir())) / "ranks1", a.extra)
    proc = subprocess.run([*cmd, "--dry-run"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if not proc.returncode:
        return None
    last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return f"the sweep refuses its options: {last.partition('error: ')[2] or last}"


def start_mps(folder: Path) -> dict[str, str]:
    """Start an MPS control daemon whose pipes and logs are under ``folder``; the environment its clients need."""
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    for d in env.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env={**os.environ, **env}, stdin=subprocess.DEVNULL, check=True)
    return env


def stop_mps(env: dict[str, str]) -> None:
    """Stop the daemon of :func:`start_mps` (and its server, once its clients are gone)."""
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env={**os.environ, **env}, check=False)


def rows_by_file(out_dir: Path) -> dict[str, dict[str, dict]]:
    """{file name: {example id: row without its timings}} of a sweep's folder."""
    out = {}
    for path in sorted(out_dir.glob("*.jsonl")):
        rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
        out[path.name] = {r["example_id"]: {k: v for k, v in r.items() if k not in TIMING} for r in rows}
    return out


def compare(rows: dict[str, dict[str, dict]], reference: dict[str, dict[str, dict]]) -> dict:
    """Rows of ``rows`` equal to ``reference``'s row of the same file and example, and the rows compared."""
    same = total = missing = 0
    for name, ref in reference.items():
        got = rows.get(name, {})
        for eid, want in ref.items():
            total += 1
            same += got.get(eid) == want
            missing += eid not in got
    return {"rows": total, "equal": same, "missing": missing}


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 4, 8], help="processes per run (1: no torchrun)")
    p.add_argument("--preset", default="edit-norm", choices=sorted(PRESETS))
    p.add_argument("--methods", nargs="+", choices=METHODS, default=["none", "ngram", "eagle"])
    p.add_argument("--work-dir", type=Path, default=None, help="where the runs' folders go (default: a temporary one)")
    p.add_argument("--mps", action="store_true", help="run the sweeps under an MPS daemon started for them")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("extra", nargs="*", help="more sweep options after --, e.g. -- --per-bin 4")
    a = p.parse_args(argv)
    if any(n < 1 for n in a.ranks) or a.ranks[0] != 1 or len(set(a.ranks)) < len(a.ranks):
        p.error(f"--ranks: distinct counts >= 1, the first 1 (the reference run), got {a.ranks}")
    own = [t for t in a.extra if t == "-h" or t.startswith("--") and len(name := t.split("=")[0]) > 2
           and any(f.startswith(name) for f in OWN)]
    if own:
        p.error(f"after --: {' '.join(own)}: not a sweep option here (this tool sets --preset, --methods and "
                "--out-dir itself; --dry-run and --help run no sweep)")
    if a.mps and shutil.which("nvidia-cuda-mps-control") is None:
        p.error("--mps: nvidia-cuda-mps-control is not on PATH")
    p.check_output(a.out)  # last: they make their folders
    p.check_output(a.work_dir, "--work-dir", folder=True)
    for n in a.ranks if a.work_dir else ():
        out_dir = a.work_dir / f"ranks{n}"
        if out_dir.exists() and any(out_dir.iterdir()):
            p.error(f"{out_dir}: not empty (a sweep there would resume instead of running)")
    if (problem := sweep_problem(a)) is not None:
        p.error(problem)
    work = a.work_dir or Path(tempfile.mkdtemp(prefix="bench_sweep_ranks_"))
    mps = start_mps(work / "mps") if a.mps else {}
    try:
        runs = time_sweeps(a, work, {**os.environ, **mps})
    finally:
        if mps:
            stop_mps(mps)
    doc = {"command": "python -m experiments.bench_sweep_ranks " + " ".join(sys.argv[1:] if argv is None else argv),
           "run_info": run_info(), "preset": a.preset, "methods": a.methods, "mps": a.mps, "runs": runs}
    write_atomic(a.out, json.dumps(doc, indent=1) + "\n")


def time_sweeps(a, work: Path, env: dict) -> list[dict]:
    """One record per rank count of ``a.ranks`` (see :func:`main`), each sweep run in ``work/ranks<N>``."""
    runs, reference = [], None
    for n in a.ranks:
        out_dir = work / f"ranks{n}"
        cmd = sweep_command(n, a.preset, a.methods, out_dir, a.extra)
        print(" ".join(cmd), file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=sys.stderr, env=env)
        wall = time.perf_counter() - t0
        if proc.returncode:
            sys.exit(f"bench_sweep_ranks: the sweep with {n} ranks exited {proc.returncode}")
        call = json.loads((out_dir / "sweep.json").read_text())["calls"][-1]
        rows = rows_by_file(out_dir)
        reference = rows if reference is None else reference  # the one-process run's, even with no rows
        runs.append({"ranks": n, "command": " ".join(cmd[1:]), "wall_s": round(wall, 1),
                     "configs": {c["file"]: c["seconds"] for c in call["configs"]},
                     "ranks_per_gpu": call.get("ranks_per_gpu", 1), "rows": compare(rows, reference)})
        runs[-1]["speedup"] = round(runs[0]["wall_s"] / wall, 2)
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    return runs


if __name__ == "__main__":
    main()
