"""Time the edit-tuning examples' preparation (``zoo_data.sft_examples``) with the compiled token alignment
(``experiments/sequence_match.py``) and with difflib's, on the same rows and machine; checks that both give the same
examples.

    python -m experiments.time_edit_data --out experiments/results/zoo/data_prep_h200/alignment_timing.json

The rows are retrain_zoo.sh stage 3's: one copy of the real training edits and ``--synthetic-examples`` synthetic
edits (span share 0.5), made by ``zoo_data.edit_data`` (which also compiles the aligner, or loads it from numba's
cache). The timed runs go compiled, difflib, compiled again."""

from __future__ import annotations

import difflib
import hashlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from experiments import sequence_match, train_zoo, zoo_data
from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.edit_corpus import edits_path, load_edits, pretraining_texts, split_edits, split_validation
from experiments.provenance import run_info


def difflib_spans(a, b) -> list[tuple[int, int]]:
    """:func:`sequence_match.changed_spans` by difflib itself."""
    return [(j1, j2) for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            if tag != "equal"]


def digest(examples: list[tuple]) -> str:
    """A digest of every example's token ids, changed and decision positions and avoided copies."""
    return hashlib.sha256(json.dumps(examples).encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--synthetic-examples", type=int, default=60_000, help="synthetic edits among the rows")
    ap.add_argument("--workers", type=int, default=16, help="processes of the alignment pool")
    ap.add_argument("--out", type=Path, required=True, help="the timing record (JSON)")
    args = ap.parse_args(argv)
    if args.synthetic_examples < 1 or args.workers < 1:
        ap.error("--synthetic-examples and --workers must be >= 1")
    ap.check_output(args.out)
    cfg = replace(train_zoo.TargetConfig(), sft_max_len=4096, real_epochs=1, span_share=0.5, pretrain_chars=0,
                  synthetic_examples=args.synthetic_examples, workers=args.workers,
                  repair_time_s=1.0)  # repair_time_s > 0: edit_data returns its (before, request, after) rows
    try:  # the real edits, before the tokenizer loads: a missing or damaged data file is one line
        path = edits_path()
        train_rows = split_validation(split_edits(load_edits(path))[0], cfg.validation_repos)[0]
    except (OSError, ValueError) as e:
        ap.error(str(e))
    if not train_rows:
        ap.error(f"{path}: no training edits (every row is of a held-out repository)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(train_zoo.MODEL_DIR, local_files_only=True)
    eot = train_zoo.special_ids(tokenizer)["eot"]
    _, sources, _ = pretraining_texts(cfg)
    rows = zoo_data.edit_data(cfg, tokenizer, train_zoo.special_ids(tokenizer), train_rows, sources)["sft_rows"]
    record = {"rows": len(rows), "workers": args.workers, "synthetic_examples": args.synthetic_examples,
              "command": "python -m experiments.time_edit_data " + " ".join(sys.argv[1:] if argv is None else argv)}
    for name, spans in (("compiled", sequence_match.changed_spans), ("difflib", difflib_spans),
                        ("compiled_again", sequence_match.changed_spans)):
        zoo_data.changed_spans = spans  # edit_positions' aligner (the pool's workers fork after this)
        start = time.perf_counter()
        examples = zoo_data.sft_examples(tokenizer, rows, eot, args.workers)
        record[f"sft_examples_{name}_s"] = round(time.perf_counter() - start, 1)
        record[f"digest_{name}"] = digest(examples)
        print(json.dumps(record), flush=True)
    zoo_data.changed_spans = sequence_match.changed_spans
    record["same_examples"] = len({record[f"digest_{n}"] for n in ("compiled", "difflib", "compiled_again")}) == 1
    record["run_info"] = run_info("cpu")  # the preparation runs on the CPU
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
