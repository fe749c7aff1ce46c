"""How a target's free-running answers miss the edit asked for, from a sweep's plain-decoding rows of code edits:
each answer is over-edited (far more changed than asked) or under-edited (far less) by
:func:`experiments.zoo_gate.misses`' rules, and an over-edit's largest departure from its input (line alignment of
input and answer) is one of

- ``end early``: the answer ends while input lines remain (the departure deletes the input's tail);
- ``skipped copy``: it drops a stretch of input lines (deleting more than twice what it adds, plus 2 lines);
- ``repeated copy``: it adds lines more than half of which are input lines (a stretch copied twice, or from
  elsewhere in the file);
- ``new text``: it adds lines, more than half of them not in the input;
- ``rewrite``: it replaces input lines by about as many others;

at a requested place (where it leaves the input, within ``near`` lines of a line the reference changes) or
elsewhere, and there whether it leaves the input just below a twin of a line the request quotes above a place (a
line quoted alike: :func:`anchor_twins`). The correlation of reference and answer edit norms is given as it is and
with each kind's answer norms set to their references' (what the correlation would be without that kind), over all
answers and per reference-norm bin; and the share of over-edits, of those that leave the input away from a requested
place, and of under-edits, the over-edits' share among the answers whose request has an anchor with a twin and among
the others, and the correlation, per quarter of the answers by their input's length in lines.

    python -m experiments.edit_failures SWEEP_DIR --out F.json [--near 2]
"""

from __future__ import annotations

import difflib
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info
from experiments.zoo_gate import miss_masks, rho_without, spearman

KINDS = ("end early", "skipped copy", "repeated copy", "new text", "rewrite")


def departure(before: list[str], answer: list[str]) -> tuple[str, int, int, int, int] | None:
    """The largest departure of ``answer`` from ``before`` (lines): ``(kind, i1, i2, j1, j2)``, difflib's opcode
    with the most lines on either side (the first among equals; ``before[i1:i2]`` replaced by ``answer[j1:j2]``),
    ``kind`` one of :data:`KINDS` (see the module docstring); None when the answer is the input."""
    ops = [op for op in difflib.SequenceMatcher(None, before, answer, autojunk=False).get_opcodes()
           if op[0] != "equal"]
    if not ops:
        return None
    _, i1, i2, j1, j2 = max(ops, key=lambda op: (op[2] - op[1]) + (op[4] - op[3]))
    removed, added = i2 - i1, j2 - j1
    if i2 == len(before) and j2 == len(answer) and removed > added:
        kind = "end early"
    elif removed > 2 * added + 2:
        kind = "skipped copy"
    elif added > 2 * removed + 2:
        known = set(before)
        copied = sum(1 for line in answer[j1:j2] if line in known)
        kind = "repeated copy" if copied > added / 2 else "new text"
    else:
        kind = "rewrite"
    return kind, i1, i2, j1, j2


def requested_lines(before: list[str], after: list[str]) -> set[int]:
    """The input lines the reference changes: every replaced or deleted line, and both neighbours of an
    insertion point."""
    lines: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            lines.update(range(i1, i2))
        elif tag == "insert":
            lines.update((i1 - 1, i1))
    return lines


def anchor_twins(before: str, after: str) -> tuple[list[int], list[int]]:
    """Lines of ``before`` (0-based) quoted like, but other than, an anchor of the located request for
    ``before`` -> ``after`` (:func:`hybridsd.edit_requests.located_request`): ``(above, below)``, twins of the
    quoted lines above the places and of the lines they continue from. A reader of the request cannot tell a
    twin from its anchor but by the line number."""
    from hybridsd.edit_requests import anchor_lines, change_places, quote_line, split_lines

    lines = split_lines(before)
    quotes = [quote_line(line) for line in lines]
    twins: tuple[set[int], set[int]] = (set(), set())
    for place in change_places(before, after):
        for side, anchor in zip(twins, anchor_lines(place, lines)):
            if 0 <= anchor < len(lines):
                side.update(i for i, q in enumerate(quotes) if q == quotes[anchor] and i != anchor)
    return sorted(twins[0]), sorted(twins[1])


def classify(before: str, after: str, answer: str, near: int = 2) -> dict:
    """An over-edited answer's largest departure from its input: its ``kind``, whether it leaves the input
    ``at_request`` (within ``near`` lines of a line the reference changes) or, elsewhere, ``at_twin``: within
    ``near`` + 1 lines below a twin of a quoted line above a place (:func:`anchor_twins`), where a reader that
    takes the twin for the anchor would leave it; and its lines removed and added (kind and places None when the
    answer's lines are the input's, its edit norm coming from line ends alone)."""
    from hybridsd.edit_requests import split_lines

    def lines(text: str) -> list[str]:  # numbered as the request numbers them
        return [line.rstrip("\r\n") for line in split_lines(text)]

    b = lines(before)
    dep = departure(b, lines(answer))
    if dep is None:
        return {"kind": None, "at_request": None, "at_twin": None, "removed": 0, "added": 0}
    kind, i1, i2, j1, j2 = dep
    asked = requested_lines(b, lines(after))
    at_request = any(i in asked for i in range(i1 - near, i1 + near + 1))
    twins = anchor_twins(before, after)[0]
    return {"kind": kind, "at_request": at_request,
            "at_twin": not at_request and any(t < i1 <= t + near + 1 for t in twins),
            "removed": i2 - i1, "added": j2 - j1}


def miss_labels(ref: np.ndarray, out: np.ndarray) -> list[str | None]:
    """Per answer ``over``, ``under`` or None by the gate's rules (:func:`experiments.zoo_gate.miss_masks`)."""
    under, over = miss_masks(ref, out)
    return ["over" if o else "under" if u else None for u, o in zip(under, over)]


def summarize(samples: list[dict]) -> dict:
    """Counts of misses by kind and place, and the correlation as it is and without each kind (its answers'
    norms set to their references'); the over-edits at a twin of an anchor (and the correlation without them),
    and the answers whose request has an anchor with a twin (``twinned``) and how many of them are over-edits."""
    ref = np.array([s["ref_norm"] for s in samples], dtype=float)
    out = np.array([s["out_norm"] for s in samples], dtype=float)
    over = np.array([s["miss"] == "over" for s in samples])
    under = np.array([s["miss"] == "under" for s in samples])
    at = np.array([bool(s.get("at_request")) for s in samples])
    kinds = {}
    for kind in KINDS:
        mask = np.array([s.get("kind") == kind for s in samples])
        kinds[kind] = {"n": int(mask.sum()), "at_request": int((mask & at).sum()),
                       "elsewhere": int((mask & ~at).sum()), "rho_without": rho_without(ref, out, mask)}
    twin = np.array([bool(s.get("at_twin")) for s in samples])
    twinned = np.array([bool(s.get("twinned")) for s in samples])
    return {"n": len(samples), "rho": spearman(ref, out), "over": int(over.sum()), "under": int(under.sum()),
            "rho_without_over": rho_without(ref, out, over), "rho_without_under": rho_without(ref, out, under),
            "rho_without_both": rho_without(ref, out, over | under), "over_kinds": kinds,
            "over_at_twin": int((over & twin).sum()), "rho_without_at_twin": rho_without(ref, out, over & twin),
            "twinned": int(twinned.sum()), "over_twinned": int((over & twinned).sum())}


def plain_rows(sweep: Path):
    """The sweep's plain-decoding rows of code edits (a DataFrame from :func:`experiments.results.load_runs`);
    ValueError naming the folder when it has none, and the files when they lack output tokens, hold rows of more
    than one config or a prompt twice (a file beside its ``.gz`` copy)."""
    from experiments.results import load_runs, repeated_prompt

    files = [f for f in (sweep / "code-edits__none.jsonl", sweep / "code-edits__none.jsonl.gz") if f.is_file()]
    if not files:
        raise ValueError(f"{sweep}: no plain-decoding rows of code edits (code-edits__none.jsonl[.gz])")
    df = load_runs(files)
    if df.empty:
        raise ValueError(f"{', '.join(map(str, files))}: holds no rows")
    if df["config_key"].nunique() > 1:
        raise ValueError(f"{', '.join(map(str, files))}: rows of {df['config_key'].nunique()} configs (config keys "
                         f"{', '.join(sorted(set(df['config_key'])))}); give a folder of one")
    if (twice := repeated_prompt(df)) is not None:
        raise ValueError(twice)
    if df["output_tokens"].isna().any():
        raise ValueError(f"{sweep}: plain rows without output tokens")
    return df


def tokenizer_of(model: str):
    """The tokenizer of a zoo model name, else of a model folder or hub id (in the local cache); ValueError naming
    the model when it has none."""
    from transformers import AutoTokenizer

    from hybridsd import zoo

    try:
        return AutoTokenizer.from_pretrained(str(zoo.path(model)) if model in zoo.names() else model,
                                             local_files_only=True)
    except (OSError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__  # transformers' messages run over lines
        raise ValueError(f"model {model}: no tokenizer found ({first})") from None


def analyse(sweep: Path, data_dir: str | None, near: int, bins: list[float]) -> dict:
    """:func:`summarize` of every plain answer of ``sweep``, over all and per bin of the reference's edit norm."""
    from hybridsd.data import bin_index, load_code_edits

    df = plain_rows(sweep)
    models = sorted(set(df["model"]))
    if len(models) != 1:
        raise ValueError(f"{sweep}: plain rows of {len(models)} models ({models}); give a folder of one")
    try:
        tok = tokenizer_of(models[0])
    except ValueError as e:
        raise ValueError(f"{', '.join(sorted(set(df['file'].map(str))))}: the rows' {e}") from None
    path = Path(data_dir) / "code_edits_dev.jsonl" if data_dir is not None else None
    examples = {e.id: e for e in load_code_edits(path, ids=set(df["example_id"]))}
    missing = sorted(set(df["example_id"]) - set(examples))
    if missing:
        raise ValueError(f"{len(missing)} example ids of {sweep} are not in the code edits (first: {missing[0]})")
    df = df.sort_values("example_id")
    ref, out = df["ref_edit_norm"].to_numpy(float), df["output_edit_norm"].to_numpy(float)
    samples = []
    for r, miss in zip(df.itertuples(), miss_labels(ref, out)):
        e = examples[r.example_id]
        sample = {"id": r.example_id, "input_lines": len(e.input_text.splitlines()), "ref_norm": float(r.ref_edit_norm),
                  "out_norm": float(r.output_edit_norm), "miss": miss,
                  "twinned": any(anchor_twins(e.input_text, e.reference))}
        if miss == "over":
            sample.update(classify(e.input_text, e.reference, tok.decode(r.output_tokens, skip_special_tokens=True),
                                   near))
        samples.append(sample)
    at = bin_index(ref, bins)
    per_bin = []
    for i, (lo, hi) in enumerate(zip(bins[:-1], bins[1:])):
        inside = [s for s, b in zip(samples, at) if b == i]
        per_bin.append({"bin": [lo, hi], **({k: v for k, v in summarize(inside).items() if k != "rho_without_both"}
                                            if inside else {"n": 0})})
    return {"model": models[0], "all": summarize(samples), "by_ref_bin": per_bin,
            "by_input_quarter": by_length(samples), "samples": samples}


def share_over(samples: list[dict]) -> float | None:
    """The share of over-edits among ``samples`` (None for none)."""
    return sum(s["miss"] == "over" for s in samples) / len(samples) if samples else None


def by_length(samples: list[dict], parts: int = 4) -> list[dict]:
    """The answers in ``parts`` groups of (nearly) equal size by their input's lines (ties kept in order of id):
    each group's line range, median reference norm, shares of over-edits, of over-edits that leave the input away
    from a requested place, and of under-edits, the share of over-edits among the answers whose request has an
    anchor with a twin and among the others (None for none), and the Spearman correlation of reference and answer
    norms."""
    order = sorted(samples, key=lambda s: (s["input_lines"], s["id"]))
    out = []
    for part in np.array_split(np.arange(len(order)), parts):
        group = [order[i] for i in part]
        if not group:
            continue
        n = len(group)
        out.append({"input_lines": [group[0]["input_lines"], group[-1]["input_lines"]], "n": n,
                    "median_ref_norm": float(np.median([s["ref_norm"] for s in group])),
                    "over_share": sum(s["miss"] == "over" for s in group) / n,
                    "over_elsewhere_share": sum(s["miss"] == "over" and s.get("at_request") is False
                                                for s in group) / n,
                    "under_share": sum(s["miss"] == "under" for s in group) / n,
                    **{f"over_share_{name}": share_over([s for s in group if bool(s.get("twinned")) == flag])
                       for name, flag in (("twinned", True), ("untwinned", False))},
                    "rho": spearman([s["ref_norm"] for s in group], [s["out_norm"] for s in group])})
    return out


def parser() -> Parser:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("sweep", type=Path, help="a sweep folder holding code-edits__none.jsonl[.gz] (plain decoding)")
    p.add_argument("--out", type=Path, required=True, help="the analysis (JSON), written atomically")
    p.add_argument("--near", type=int, default=2, help="a departure that leaves the input within this many lines of "
                   "a line the reference changes is at a requested place (default 2)")
    p.add_argument("--data-dir", type=Path, default=None, help="folder of code_edits_dev.jsonl (default: "
                   "$HYBRIDSD_DATA, else the shared data)")
    p.add_argument("--bins", type=int, default=4, help="equal bins of the reference's edit norm over [0, 0.6]")
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    p.check_output(args.out)
    if not args.sweep.is_dir():
        p.error(f"sweep folder not found: {args.sweep}")
    if args.data_dir is not None and not (args.data_dir / "code_edits_dev.jsonl").is_file():
        p.error(f"code_edits_dev.jsonl not found in --data-dir {args.data_dir}")
    if args.near < 0 or args.bins < 1:
        p.error(f"need --near >= 0 and --bins >= 1, got {args.near} and {args.bins}")
    bins = [round(0.6 * i / args.bins, 6) for i in range(args.bins + 1)]
    try:
        result = analyse(args.sweep, args.data_dir, args.near, bins)
    except (ValueError, FileNotFoundError) as e:
        p.error(str(e))
    command = "python -m experiments.edit_failures " + shlex.join(sys.argv[1:] if argv is None else argv)
    record = {"command": command, "run_info": run_info(), "sweep": str(args.sweep), "near": args.near, **result}
    write_atomic(args.out, json.dumps(record, indent=1) + "\n")
    a = result["all"]
    print(f"{a['n']} answers: Spearman {a['rho']:.3f}; {a['over']} over-edited (without them "
          f"{a['rho_without_over']:.3f}), {a['under']} under-edited; over-edits by kind: " + ", ".join(
              f"{k} {v['n']} ({v['at_request']} at a requested place)" for k, v in a["over_kinds"].items())
          + f"; {a['over_at_twin']} elsewhere below a twin of an anchor; {a['over_twinned']} of the "
          f"{a['twinned']} answers whose request has an anchor with a twin over-edited")


if __name__ == "__main__":
    main()
