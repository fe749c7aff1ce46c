"""Data-parallel spec_bench under torchrun (gloo, CPU): the merged file equals a one-process run's, and the
shard merge survives crashes (torn lines, leftover shards, rows already merged)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from experiments import distributed as dp
from experiments import spec_bench
from hybridsd import zoo

REPO = Path(__file__).resolve().parents[1]

DATA = next((d for d in (os.environ.get("HYBRIDSD_DATA"), REPO.parent / "shared" / "data", "/work/shared/data")
             if d and (Path(d) / "code_edits_dev.jsonl").is_file()), None)
HAS_WEIGHTS = any((zoo.MODELS_DIR / "tiny-coder").glob("*.safetensors"))
TIMING = ("wall_s", "tpot_ms", "run_info")
ARGS = ["--device", "cpu", "--dtype", "fp32", "--method", "ngram", "--num-prompts", "3", "--output-len", "16",
        "--change-request", "subject",  # the prompts are not the point here: the cheaper ones
        "--dataset-name", "code-edits"]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="no torch.distributed gloo")
@pytest.mark.skipif(DATA is None or not HAS_WEIGHTS, reason="needs ../shared/data and the tiny-coder weights")
def test_spec_bench_torchrun_matches_one_process(tmp_path, monkeypatch):
    """Two ranks under torchrun write what one process writes. The one-process runs call spec_bench.main in this
    process (the same code path as its command line, without a second interpreter's imports), the first one
    while torchrun starts."""
    env = {**os.environ, "HYBRIDSD_DATA": str(DATA), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    monkeypatch.setenv("HYBRIDSD_DATA", str(DATA))
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):  # this process is one process, whatever launched pytest
        monkeypatch.delenv(var, raising=False)
    one, par = tmp_path / "one.jsonl", tmp_path / "dp.jsonl"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                "-m", "experiments.spec_bench", *ARGS, "--output", str(par)]

    ranks = subprocess.Popen(torchrun, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:  # the one-process run while the ranks start their interpreters
        spec_bench.main([*ARGS, "--output", str(one)])
        stdout, stderr = ranks.communicate(timeout=180)
    finally:
        ranks.kill()
    assert ranks.returncode == 0, stdout[-3000:] + stderr[-3000:]
    want = _rows(one)
    assert len(want) == 3
    got = _rows(par)
    assert [r["example_id"] for r in got] == [r["example_id"] for r in want]
    assert _strip(got) == _strip(want)
    assert not dp.shard_paths(par) and sorted(p.name for p in tmp_path.iterdir()) == ["dp.jsonl", "one.jsonl"]

    before = par.read_text()
    spec_bench.main([*ARGS, "--output", str(par)])  # a one-process rerun
    assert par.read_text() == before  # finds every row the two ranks wrote done
    assert not dp.shard_paths(par)

    with dp.exclusive(par):  # ranks started while another run holds the output: each stops with one line
        r = subprocess.run(torchrun, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    errors = [line for line in r.stderr.splitlines() if line.startswith("spec_bench: error:")]
    assert r.returncode != 0 and len(errors) == 2 and all("another run is writing it" in e for e in errors), r.stderr
    assert par.read_text() == before and not dp.shard_paths(par)


def _line(cfg: str, eid: str, v: int = 0) -> str:
    return json.dumps({"config_key": cfg, "example_id": eid, "v": v}) + "\n"


def test_merge_orders_dedups_and_survives_crashes(tmp_path):
    out = tmp_path / "x.jsonl"
    out.write_text(_line("c", "a") + '{"config_key": "c", "exa')  # a torn row, never completed
    # shards of an earlier run with 3 ranks, one torn, one row already in out, one duplicated across shards
    dp.shard_path(out, 0).write_text(_line("c", "d") + _line("c", "a", 9) + _line("c", "b"))
    dp.shard_path(out, 2).write_text(_line("c", "c") + _line("c", "b", 9) + _line("c", "zz") + '{"conf')
    (tmp_path / "x.jsonl.rank1.part.bak").write_text("not a shard")
    assert [p.name for p in dp.shard_paths(out)] == ["x.jsonl.rank0.part", "x.jsonl.rank2.part"]
    assert dp.merge(out, ["a", "b", "c", "d"]) == 4
    assert out.read_text() == _line("c", "a") + _line("c", "b") + _line("c", "c") + _line("c", "d") + _line("c", "zz")
    assert not dp.shard_paths(out) and (tmp_path / "x.jsonl.rank1.part.bak").exists()
    assert dp.merge(out, ["a"]) == 0  # nothing left to merge

    # a crash after the merge replaced out but before the shards went: the rerun adds nothing
    dp.shard_path(out, 1).write_text(_line("c", "b") + _line("c", "e"))
    assert dp.merge(out, ["a", "b", "c", "d", "e"]) == 1
    assert [r["example_id"] for r in _rows(out)] == ["a", "b", "c", "d", "zz", "e"]


def test_write_atomic_keeps_the_old_file_and_no_tmp_when_the_write_fails(tmp_path, monkeypatch):
    out = tmp_path / "out.json"
    dp.write_atomic(out, "old\n")

    def killed(*a):
        raise OSError("killed")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(OSError, match="killed"):
        dp.write_atomic(out, "new\n")
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_repair_tail(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text(_line("c", "a") + '{"config_key": "c", "ex')
    dp.repair_tail(p)
    assert p.read_text() == _line("c", "a")
    p.write_text(_line("c", "a") + _line("c", "b").rstrip("\n"))  # a whole row, only its newline missing
    dp.repair_tail(p)
    assert p.read_text() == _line("c", "a") + _line("c", "b")


@pytest.mark.parametrize("local_world, n_gpus, want", [(1, 1, 1), (4, 4, 1), (8, 1, 8), (5, 2, 3), (2, 8, 1)])
def test_ranks_fill_the_gpus_round_robin(monkeypatch, local_world, n_gpus, want):
    """Ranks go to GPUs in turn; more ranks than GPUs share them (the count decides NCCL or gloo)."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    assert dp.ranks_per_gpu(n_gpus) == want
    placed = [dp.gpu_of(r, n_gpus) for r in range(local_world)]
    assert set(placed) == set(range(min(local_world, n_gpus)))
    assert max(placed.count(g) for g in set(placed)) == want
    with pytest.raises(ValueError, match="no GPU"):
        dp.gpu_of(0, 0)


def test_sweep_ranks_bench_compares_rows_without_timings():
    from experiments.bench_sweep_ranks import compare, sweep_command

    ref = {"a.jsonl": {"x": {"tokens": [1, 2]}, "y": {"tokens": [3]}}}
    assert compare(ref, ref) == {"rows": 2, "equal": 2, "missing": 0}
    assert compare({"a.jsonl": {"x": {"tokens": [1, 2]}, "y": {"tokens": [4]}}}, ref) == {
        "rows": 2, "equal": 1, "missing": 0}
    assert compare({"a.jsonl": {"x": {"tokens": [1, 2]}}}, ref) == {"rows": 2, "equal": 1, "missing": 1}
    assert compare({"a.jsonl": {"x": {"tokens": [1, 2]}, "z": {"tokens": [3]}}}, ref) == {  # z: not the reference's
        "rows": 2, "equal": 1, "missing": 1}
    one, eight = (sweep_command(n, "edit-norm", ["ngram"], Path("d"), []) for n in (1, 8))
    assert "torch.distributed.run" not in one and "--nproc_per_node=8" in eight
    assert one[1:] == eight[5:]  # the same sweep


def test_sweep_ranks_bench_starts_and_stops_its_mps_daemon(tmp_path, monkeypatch):
    """--mps: the daemon starts with its pipes under the work folder and is told to quit, its clients get the pipe
    folder; a machine without MPS is one line before any sweep runs."""
    from experiments import bench_sweep_ranks as bsr

    log = tmp_path / "calls.txt"
    stand_in = tmp_path / "bin" / "nvidia-cuda-mps-control"
    stand_in.parent.mkdir()
    stand_in.write_text(f'#!/bin/sh\necho "$* pipe=$CUDA_MPS_PIPE_DIRECTORY in=$(cat)" >> {log}\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ['PATH']}")
    env = bsr.start_mps(tmp_path / "mps")
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps" / "pipe") and (tmp_path / "mps" / "log").is_dir()
    bsr.stop_mps(env)
    pipe = env["CUDA_MPS_PIPE_DIRECTORY"]
    assert log.read_text().splitlines() == [f"-d pipe={pipe} in=", f" pipe={pipe} in=quit"]

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SystemExit) as e:
        bsr.main(["--mps", "--work-dir", str(tmp_path / "w"), "--out", str(tmp_path / "o.json")])
    assert e.value.code == 2 and not (tmp_path / "w").exists()


def test_gpu_sharing_is_one_off_cuda_and_outside_torchrun(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert dp.world() == 1 and dp.gpu_sharing("cuda") == 1 and dp.gpu_sharing("cpu") == 1


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_a_rank_dies_with_its_launcher():
    """die_with_parent (every torchrun rank calls it when it joins): a SIGKILL to the launcher ends the rank too,
    so no rank of a killed run goes on writing."""
    rank = ("from experiments import distributed as dp; dp.die_with_parent(); print('up', flush=True); "
            "import time; time.sleep(60)")
    launcher = subprocess.Popen(_python(f"import subprocess, time; p = subprocess.Popen({_python(rank)!r}); "
                                        "print(p.pid, flush=True); time.sleep(60)"), stdout=subprocess.PIPE, text=True)
    pid = int(launcher.stdout.readline())
    try:
        assert launcher.stdout.readline().strip() == "up"
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        launcher.stdout.close()


def test_the_output_lock_is_one_run_at_a_time_and_dies_with_it(tmp_path):
    """exclusive: another process holding the lock is Busy at once; killed, it leaves the lock free (its file is
    taken over and removed at the end)."""
    out = tmp_path / "runs" / "x.jsonl"
    holder = subprocess.Popen(_python(f"from pathlib import Path; from experiments import distributed as dp; "
                                      f"import time\nwith dp.exclusive(Path({str(out)!r})):\n    print('held', "
                                      "flush=True); time.sleep(60)"), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(dp.Busy, match="another run is writing it"):
            with dp.exclusive(out):
                pass
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert (tmp_path / "runs" / "x.jsonl.lock").exists()  # a killed run's file, not its lock
    with dp.exclusive(out):
        with pytest.raises(dp.Busy):
            with dp.exclusive(out):  # one run at a time within a process too
                pass
    assert not any((tmp_path / "runs").iterdir())


def _lock_rank(r: int, out: str, port: int, report: str) -> None:
    """One rank of :func:`test_exclusive_for_all_stops_every_rank`: joins a 2-rank gloo group and records what
    ``exclusive_for_all`` does."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=2)
    try:
        with dp.exclusive_for_all(Path(out)):
            outcome = "held"
    except dp.Busy as e:
        outcome = f"busy: {e}"
    finally:
        dist.destroy_process_group()
    Path(report + str(r)).write_text(outcome)


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="no torch.distributed gloo")
def test_exclusive_for_all_stops_every_rank(tmp_path):
    """While another run holds the output's lock, every rank of a torchrun run raises Busy with rank 0's message (the
    rank that does not lock would otherwise go on to work alone); once it is free, the run goes ahead."""
    import socket

    import torch.multiprocessing as mp

    out, report = tmp_path / "o.jsonl", str(tmp_path / "rank")
    for held in (True, False):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with dp.exclusive(out) if held else contextlib.nullcontext():
            mp.spawn(_lock_rank, args=(str(out), port, report), nprocs=2, join=True)
        outcomes = [Path(report + str(r)).read_text() for r in (0, 1)]
        if held:
            assert outcomes[0] == outcomes[1] and outcomes[0].startswith("busy: ") and "another run" in outcomes[0]
        else:
            assert outcomes == ["held", "held"]
