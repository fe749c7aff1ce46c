"""Time `ngram_propose` per call at several context lengths on two token streams.

Streams: "iid-random" (uniform ids from a 32k vocabulary: almost every call misses and scans the
whole context, the worst case), "copy-random" (random ids from a 32k vocabulary, where half the segments copy an earlier
span, so matches come and go) and "code-bytes" (UTF-8 bytes of real before/after file pairs from
code_edits_dev.jsonl in ``$HYBRIDSD_DATA``, else in ``shared/data`` next to the repository, each after-file mostly
copying its before-file). Each call ends the context at a different position just below the target length, so the
figures mix hits and misses.

    python -m experiments.bench_ngram [--calls 4000] [--out experiments/results/speed/bench_ngram.json]
"""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path

import numpy as np

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info
from hybridsd.data import DATA_ENV
from hybridsd.drafters.ngram import ngram_propose

REPO = Path(__file__).resolve().parents[1]
LENGTHS = (512, 2048, 8192, 32768)
MIN_N, MAX_N, K = 2, 5, 5
SPREAD = 256  # contexts end at T - SPREAD + 1 .. T


def copy_random_stream(n: int, rng: np.random.Generator, vocab: int = 32000) -> np.ndarray:
    out: list[int] = list(rng.integers(0, vocab, 64))
    while len(out) < n:
        length = int(rng.integers(8, 128))
        if rng.random() < 0.5:
            start = int(rng.integers(0, len(out) - 1))
            out.extend(out[start : start + length])
        else:
            out.extend(rng.integers(0, vocab, length).tolist())
    return np.asarray(out[:n], dtype=np.int64)


def data_file() -> Path:
    """code_edits_dev.jsonl of ``$HYBRIDSD_DATA`` when set, else of ``shared/data`` next to the repository."""
    return Path(os.environ.get(DATA_ENV) or REPO.parent / "shared" / "data") / "code_edits_dev.jsonl"


def code_bytes_stream(n: int, path: Path) -> np.ndarray:
    chunks, total = [], 0
    with path.open() as f:
        for line in f:
            row = json.loads(line)
            for text in (row["before"], row["after"]):
                chunks.append(text.encode())
                total += len(chunks[-1])
            if total >= n:
                break
    return np.frombuffer(b"".join(chunks)[:n], dtype=np.uint8).astype(np.int64)


def bench(stream: np.ndarray, length: int, calls: int) -> dict:
    ends = length - np.arange(calls) % SPREAD
    for e in ends[:SPREAD]:  # warm-up (JIT is compiled or loaded from cache before this)
        ngram_propose(stream[:e], MIN_N, MAX_N, K)
    times = np.empty(calls, dtype=np.int64)
    drafted = np.empty(calls, dtype=np.int64)
    gc.disable()
    for i, e in enumerate(ends):
        ctx = stream[:e]
        t0 = time.perf_counter_ns()
        draft = ngram_propose(ctx, MIN_N, MAX_N, K)
        times[i] = time.perf_counter_ns() - t0
        drafted[i] = draft.size
    gc.enable()
    us = times / 1e3
    return {
        "context": length,
        "calls": calls,
        "median_us": round(float(np.median(us)), 3),
        "p90_us": round(float(np.percentile(us, 90)), 3),
        "hit_rate": round(float((drafted > 0).mean()), 4),
        "mean_draft_len": round(float(drafted.mean()), 3),
    }


def main(argv: list[str] | None = None) -> None:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments/results/speed/bench_ngram.json")
    args = ap.parse_args(argv)
    ap.check_output(args.out)
    if args.calls < 1:
        ap.error(f"--calls must be >= 1, got {args.calls}")
    if args.seed < 0:
        ap.error(f"--seed must be >= 0, got {args.seed}")

    data, code = data_file(), None
    if data.exists():
        if not data.is_file():
            ap.error(f"{data}: is not a file ({DATA_ENV} names the data folder)")
        try:
            code = code_bytes_stream(max(LENGTHS), data)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            ap.error(f"{data}: not JSON lines with before/after texts ({type(e).__name__}: {e})")
        if code.size < max(LENGTHS):
            ap.error(f"{data}: holds {code.size} bytes of before/after text, fewer than the longest context "
                     f"{max(LENGTHS)}")
    else:
        print(f"skipping code-bytes: {data} not found")

    ngram_propose(np.zeros(16, dtype=np.int64), MIN_N, MAX_N, K)  # compile / load the kernel
    rng = np.random.default_rng(args.seed)
    streams = {
        "iid-random": rng.integers(0, 32000, max(LENGTHS)),
        "copy-random": copy_random_stream(max(LENGTHS), rng),
    }
    if code is not None:
        streams["code-bytes"] = code

    results = []
    for name, stream in streams.items():
        for length in LENGTHS:
            r = {"stream": name, **bench(stream, length, args.calls)}
            results.append(r)
            print(f"{name:12s} T={length:6d}  median {r['median_us']:7.2f} us  p90 {r['p90_us']:7.2f} us"
                  f"  hit {r['hit_rate']:.2f}  draft {r['mean_draft_len']:.2f}")

    payload = {"run_info": run_info("cpu"), "min_n": MIN_N, "max_n": MAX_N, "k": K, "seed": args.seed,
               "spread": SPREAD, "results": results}
    write_atomic(args.out, json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
