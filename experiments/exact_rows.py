"""Exact-mode grid rows into the results file: ``tests/test_cuda.py`` appends one JSON line per configuration and mode
(``exact_same`` or ``nonexact_same``) to ``$HYBRIDSD_EXACT_JSON``; this merges such files into
``exact/exact_match.jsonl``, one row per (model, compile, drafter, k) with both modes' counts (``<mode>_same``: prompts
equal to plain decoding; where the grid records them, ``<mode>_accepted``: draft tokens accepted by the drafter that
proposed them, and ``<mode>_drafted``) and, per mode, the ``run_info`` (commit, device, torch, date, command) of the run
its count came from (a row's modes may come from different machines, so the row names none of its own). Runs later on
the command line replace earlier ones' counts for the same configuration and mode. A results file can be a run too
(its rows keep their own ``run_info``; the COMMIT and COMMAND given with it are not used), so that one mode can be
measured anew and the other kept: ``--run FILE:exact_same ...`` takes that mode's counts of FILE only.

    python -m experiments.exact_rows --run tiny.jsonl 6f5600a "pytest tests/test_cuda.py -k ..." \\
        --run zoo.jsonl 5ff2dfd "pytest ..." --out experiments/results/exact/exact_match.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
from pathlib import Path

from experiments.cli import Parser
from experiments.distributed import write_atomic

MODES = ("exact_same", "nonexact_same")
# each mode's fields (``exact_same`` -> exact_same, exact_accepted, exact_drafted)
MODE_OF = {f"{m.removesuffix('_same')}_{f}": m for m in MODES for f in ("same", "accepted", "drafted")}
CONFIG = ("model", "compile", "drafter", "k")
RUN_FIELDS = ("run_info", "device", "torch")  # a grid line's run, kept per mode in the row's run_info only


def merge(runs: list[tuple[list[dict], dict]]) -> list[dict]:
    """Rows of ``runs`` (each: its grid lines and the run_info to record) merged by configuration, in order of first
    appearance; a later run's count for a configuration and mode replaces an earlier one's, with its run_info
    (``row["run_info"][mode]``). A line that carries its own ``run_info`` (a results file's row; one for every mode,
    or one per mode) keeps it."""
    merged: dict[tuple, dict] = {}
    for lines, info in runs:
        for line in lines:
            key = tuple(json.dumps(line[c]) for c in CONFIG)
            row = merged.setdefault(key, {})
            infos = row.pop("run_info", {})  # re-added last
            own = line.get("run_info", {})
            if "commit" in own:  # one run_info for the row's every mode (as this file wrote rows before)
                own = {m: own for m in MODES}
            for k in [k for k in row if MODE_OF.get(k) in line]:  # a mode measured anew: none of its old fields
                del row[k]
            row.update({k: v for k, v in line.items() if k not in RUN_FIELDS})  # the machine: per mode, below
            for mode in MODES:
                if mode in line:
                    infos[mode] = own.get(mode) or dict(info, device=line["device"], torch=line["torch"])
            row["run_info"] = {m: infos[m] for m in MODES if m in infos}
    return list(merged.values())


def read_grid(path: Path, modes: tuple[str, ...] = MODES) -> list[dict]:
    """The grid lines of ``path``: JSON objects with every configuration field and one or both modes' counts (of
    which only ``modes`` are kept), each count of its form (:data:`COUNT_FORMS`), the run_info an object (one run's,
    or one per mode) and the machine (``device``, ``torch``) given for each mode it does not name. ``ValueError``
    naming the file and line of any other line."""
    lines = []
    try:
        texts = path.read_text().splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    for i, text in enumerate(texts, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} line {i}: not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path} line {i}: not a JSON object")
        own = row.get("run_info", {})
        if not isinstance(own, dict) or ("commit" not in own and not all(isinstance(v, dict) for v in own.values())):
            raise ValueError(f"{path} line {i}: run_info must be a run's object or one per mode, got {own!r:.60}")
        taken = {k: v for k, v in row.items() if k not in MODE_OF or MODE_OF[k] in modes}
        # a mode taken whose run the line's own run_info does not name: its machine comes from the line
        bare = "commit" not in own and any(m in taken and not own.get(m) for m in MODES)
        missing = [c for c in (*CONFIG, *(("device", "torch") if bare else ())) if c not in row]
        if missing or not any(m in row for m in MODES):
            raise ValueError(f"{path}:{i}: not an exact-mode grid line (missing {missing or list(MODES)})")
        for k in [k for k in taken if k in MODE_OF]:
            if not _count_ok(k, taken[k]):
                raise ValueError(f"{path} line {i}: {k} must be {COUNT_FORMS[k.rpartition('_')[2]]}, "
                                 f"got {taken[k]!r:.60}")
        if any(m in taken for m in MODES):
            lines.append(taken)
    return lines


COUNT_FORMS = {"same": '"N/M" (N of M prompts, 0 <= N <= M)', "accepted": "an object of drafter: count (>= 0)",
               "drafted": "a count (an int >= 0)"}


def _count_ok(field: str, value) -> bool:
    """Whether ``value`` is a grid line's ``field`` (a mode's ``_same``, ``_accepted`` or ``_drafted``)."""
    count = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    kind = field.rpartition("_")[2]
    if kind == "same":
        m = re.fullmatch(r"(\d+)/(\d+)", value) if isinstance(value, str) else None
        return m is not None and int(m[1]) <= int(m[2])
    if kind == "accepted":
        return isinstance(value, dict) and all(isinstance(k, str) and count(v) for k, v in value.items())
    return count(value)


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", nargs=3, action="append", required=True, metavar=("FILE", "COMMIT", "COMMAND"),
                   help="a grid file, the commit it ran at and the command that ran it (repeatable, in order); "
                        "FILE:exact_same or FILE:nonexact_same keeps that mode's counts only; a run that adds "
                        "no count is refused")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--date", default=datetime.date.today().isoformat(), help="date recorded in run_info")
    a = p.parse_args(argv)
    p.check_output(a.out)
    try:
        date_ok = datetime.date.fromisoformat(a.date).isoformat() == a.date
    except ValueError:
        date_ok = False
    if not date_ok:
        p.error(f"--date {a.date!r}: not a date (YYYY-MM-DD)")
    runs = []
    try:
        for spec, commit, command in a.run:
            path, _, mode = spec.rpartition(":")
            path, mode = (path, mode) if path and mode in MODES else (spec, "")
            if not Path(path).is_file():
                raise ValueError(f"--run {spec}: no file {path}")
            grid = read_grid(Path(path), (mode,) if mode else MODES)
            if not grid:  # a run that would add nothing (an empty grid, or none of that mode's counts)
                raise ValueError(f"--run {spec}: no grid line{' with ' + mode if mode else ''}")
            runs.append((grid, {"commit": commit, "date": a.date, "command": command}))
    except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        p.error(str(e))
    rows = merge(runs)
    write_atomic(a.out, "".join(json.dumps(r) + "\n" for r in rows))
    print(f"exact_rows: {len(rows)} configurations -> {a.out}")


if __name__ == "__main__":
    main()
