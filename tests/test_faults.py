"""Results files under kills: a writer killed (SIGKILL) at random moments, many times, also inside the repair of
a damaged file and inside the sweep manifest's write, ends with exactly an uninterrupted run's rows; nothing is
lost, duplicated or dropped without a copy.

The writer is a stand-in for spec_bench / sweep that calls the same file functions (``distributed.keyed_rows``,
``repair_tail``, ``read_json``, ``write_atomic``) with no model, so each run takes a fraction of a second.
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments import distributed as dp

REPO = Path(__file__).resolve().parents[1]

N_ROWS, N_CONFIGS = 400, 4

# argv: mode (bench | sweep), work folder; run from the repository root
WRITER = r'''
import json, sys
from pathlib import Path
from experiments import distributed as dp

N_ROWS, N_CONFIGS = %d, %d


def row(key, i):
    return {"config_key": key, "example_id": f"e{i:04d}", "tokens": list(range(i %% 97)),
            "text": "x" * (i * 37 %% 2500)}


def bench(out, key):  # spec_bench.run's file handling
    seen = {k for k, _ in dp.keyed_rows(out)}
    todo = [i for i in range(N_ROWS) if (key, f"e{i:04d}") not in seen]
    print("repair", flush=True)
    dp.repair_tail(out)
    print("append", flush=True)
    with out.open("a") as f:
        for i in todo:
            f.write(json.dumps(row(key, i)) + "\n")
            f.flush()


mode, folder = sys.argv[1], Path(sys.argv[2])
if mode == "bench":
    bench(folder / "x.jsonl", "cfg")
else:  # sweep.main: one file per config, the manifest rewritten after each (sweep.record_call's calls)
    call = {"started": "t0", "run_info": {"pad": "y" * 300_000}, "configs": []}
    for c in range(N_CONFIGS):
        bench(folder / f"c{c}.jsonl", f"cfg{c}")
        call["configs"].append({"file": f"c{c}.jsonl", "rows": N_ROWS})
        doc = dp.read_json(folder / "sweep.json", {"calls": []})
        doc["calls"] = [x for x in doc["calls"] if x.get("started") != call["started"]] + [call]
        print("manifest", flush=True)
        dp.write_atomic(folder / "sweep.json", json.dumps(doc, indent=1) + "\n")
print("done", flush=True)
''' % (N_ROWS, N_CONFIGS)


@functools.cache
def _want(key: str) -> dict[tuple[str, str], str]:
    """The lines of an uninterrupted run, by key (the writer's ``row`` made here too)."""
    return {(key, f"e{i:04d}"): json.dumps({"config_key": key, "example_id": f"e{i:04d}", "tokens": list(range(i % 97)),
                                            "text": "x" * (i * 37 % 2500)}) for i in range(N_ROWS)}


def _good(path: Path) -> dict[tuple[str, str], str]:
    rows = dp.keyed_rows(path)
    got = dict(rows)
    assert len(got) == len(rows), "a row is duplicated"
    return got


class Harness:
    """Runs the writer, kills it at a chosen moment, keeps count."""

    def __init__(self, folder: Path, mode: str, rng: random.Random):
        self.script = folder / "writer.py"
        self.script.write_text(WRITER)
        self.work = folder / "work"
        self.work.mkdir()
        self.mode, self.rng = mode, rng
        self.env = {**os.environ, "PYTHONPATH": str(REPO)}  # the writer imports experiments.distributed
        self.kills = {}  # stage the writer was in when killed -> count

    def run(self, after: str | None = None, delay: float = 0.0) -> bool:
        """One writer run; killed ``delay`` seconds after it prints ``after`` (None: after it starts), unless it
        finishes first. True when it finished."""
        # -S: no site-packages (the writer needs only the standard library and PYTHONPATH), a faster start
        p = subprocess.Popen([sys.executable, "-S", str(self.script), self.mode, str(self.work)], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = []
        if after is not None:
            while (line := p.stdout.readline()) and line.strip() != after:
                seen.append(line.strip())
            if line:  # at EOF the writer finished before printing ``after``: its last line is "done"
                seen.append(after)
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
        seen += p.stdout.read().split()  # through readline's buffered reader: communicate() would skip its buffer
        err = p.stderr.read()
        p.wait()
        p.stdout.close(), p.stderr.close()
        if seen and seen[-1] == "done":  # finished (perhaps killed while the interpreter shut down)
            return True
        assert p.returncode == -signal.SIGKILL, err
        stage = seen[-1] if seen else "start"
        self.kills[stage] = self.kills.get(stage, 0) + 1
        return False


def _damage(path: Path, rng: random.Random, want: dict) -> list[bytes]:
    """Damage ``path`` the ways a crash or a disk does; returns the damaged lines (to be found in the copy)."""
    lines = path.read_bytes().split(b"\n")
    tail = lines.pop()
    kind = rng.choice(["torn", "garbage", "empty", "nokey", "binary"])
    if kind == "torn" or not lines:
        bad = json.dumps(next(iter(want.values()))).encode()[: rng.randrange(1, 200)]
        path.write_bytes(b"".join(x + b"\n" for x in lines) + tail + bad)
        return [tail + bad]
    bad = {"garbage": b"not json {", "empty": b"{}", "nokey": b'{"example_id": "e0001"}',
           "binary": b"\xff\xfe\x00garbage"}.get(kind)
    i = rng.randrange(len(lines))
    if kind == "garbage":
        bad = lines[i][: len(lines[i]) // 2]  # a row cut in half, mid-file
    lines[i] = bad
    path.write_bytes(b"".join(x + b"\n" for x in lines) + tail)
    return [bad]


def _check_no_loss(before: dict, after: dict, want: dict) -> None:
    assert set(before) <= set(after), f"rows lost: {sorted(set(before) - set(after))[:5]}"
    assert all(after[k] == want[k] for k in after), "a row changed"


def test_kills_lose_nothing_and_resume_to_an_uninterrupted_run(tmp_path):
    rng = random.Random(0)
    h = Harness(tmp_path, "bench", rng)
    out, want = h.work / "x.jsonl", _want("cfg")
    dropped, damages = [], 0
    t0 = time.perf_counter()
    assert h.run(delay=5.0)  # how long an uninterrupted run takes (it finishes well within 5 s)
    full = time.perf_counter() - t0
    assert _good(out) == want
    out.unlink()
    attempt = 0
    while sum(h.kills.values()) < 40 and attempt < 150:
        attempt += 1
        if out.exists() and len(_good(out)) == N_ROWS:  # done: start over from a random number of rows
            lines = out.read_bytes().splitlines(keepends=True)
            out.write_bytes(b"".join(lines[: rng.randrange(N_ROWS)]))
        before = _good(out) if out.exists() else {}
        if out.exists() and out.stat().st_size and attempt % 2:
            damaged = _damage(out, rng, want)
            dropped += damaged
            damages += 1
            before = _good(out)  # the damaged row is to be made again
            h.run("repair", rng.uniform(0, 0.01))  # inside the repair, mostly
        elif attempt % 4 == 0:
            h.run(None, rng.uniform(0, full))  # anywhere, startup included
        else:
            h.run("append", rng.uniform(0, 0.015))  # while rows are appended
        _check_no_loss(before, _good(out), want)
    while not h.run(delay=5.0):
        pass
    assert _good(out) == want and len(out.read_bytes().splitlines()) == N_ROWS
    copy = (h.work / "x.jsonl.damaged").read_bytes() if dropped else b""
    assert all(d in copy for d in dropped), "a damaged line was dropped without a copy"
    assert sum(h.kills.values()) >= 30 and min(h.kills.get("repair", 0), h.kills.get("append", 0)) >= 3, h.kills
    print(f"\nbench: {sum(h.kills.values())} kills {h.kills}, {damages} damaged files")


def test_killed_sweep_resumes(tmp_path):
    rng = random.Random(1)
    h = Harness(tmp_path, "sweep", rng)
    manifest = h.work / "sweep.json"
    manifest.write_text('{"calls": [{"started": "old", "configs": [{"file": "c0.js')  # torn by an older version
    attempt, after = 0, {}
    while sum(h.kills.values()) < 24 and attempt < 100:
        attempt += 1
        before = after  # the files as the previous run left them (nothing touches them in between)
        if attempt % 2:
            h.run("manifest", rng.uniform(0, 0.01))  # inside the manifest write, mostly
        else:
            h.run(None, rng.uniform(0, 0.6))
        after = {c: _good(h.work / f"c{c}.jsonl") for c in range(N_CONFIGS) if (h.work / f"c{c}.jsonl").exists()}
        for c, rows in before.items():
            _check_no_loss(rows, after[c], _want(f"cfg{c}"))
        if manifest.exists():
            doc = json.loads(manifest.read_text())  # never torn
            assert [x["started"] for x in doc["calls"]] == ["t0"]
    while not h.run(delay=10.0):
        pass
    for c in range(N_CONFIGS):
        assert _good(h.work / f"c{c}.jsonl") == _want(f"cfg{c}")
    doc = json.loads(manifest.read_text())
    assert [c["file"] for c in doc["calls"][0]["configs"]] == [f"c{c}.jsonl" for c in range(N_CONFIGS)]
    assert (h.work / "sweep.json.damaged").read_text().startswith('{"calls": [{"started": "old"')
    assert sum(h.kills.values()) >= 20 and h.kills.get("manifest", 0) >= 3, h.kills
    print(f"\nsweep: {sum(h.kills.values())} kills {h.kills}")


@pytest.mark.parametrize("text", ['{"calls": [{"star', "\xff not json", "[1, 2]", '{"calls": 3}'])
def test_sweep_manifest_damaged_is_reported_kept_and_rebuilt(tmp_path, capsys, text):
    from experiments import sweep

    path = tmp_path / "sweep.json"
    path.write_bytes(text.encode("latin-1"))
    sweep.record_call(path, {"started": "now", "configs": []})
    assert json.loads(path.read_text()) == {"calls": [{"started": "now", "configs": []}]}
    assert (tmp_path / "sweep.json.damaged").read_bytes() == text.encode("latin-1")
    assert "sweep.json" in capsys.readouterr().err


def test_repair_names_file_and_line_and_keeps_a_copy(tmp_path, capsys):
    p = tmp_path / "r.jsonl"
    good = [json.dumps({"config_key": "c", "example_id": f"e{i}"}) for i in range(4)]
    p.write_text(good[0] + "\n{}\n" + good[1] + "\nnot json\n" + good[2] + "\n[1]\n" + good[3] + "\n" + '{"conf')
    assert dp.repair_tail(p) == 4
    assert p.read_text() == "".join(g + "\n" for g in good)
    err = capsys.readouterr().err.splitlines()
    assert [e.split(": ")[0] for e in err] == [f"{p}:{i}" for i in (2, 4, 6, 8)]
    assert (tmp_path / "r.jsonl.damaged").read_text() == '{}\nnot json\n[1]\n{"conf\n'
    assert dp.repair_tail(p) == 0 and capsys.readouterr().err == ""
