"""Where a zoo target leaves the copy of its input, teacher-forced on the reference answers of the quality gate's
prompts: at each place where the reference leaves the copy, whether the target's greedy token leaves it too (found
places), and at each token where the reference copies, whether it leaves the copy there (spurious departures). It
separates a target that cannot find the places asked for from one that edits too eagerly, which the gate's
correlation mixes.

    python -m experiments.edit_places --model M [M ...] [--labels L ...] --rows eval --prompts 96 --out F.json
    python -m experiments.edit_places --compare A.json:LABEL B.json:LABEL --out F.json   # B against A, paired
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.edit_corpus import EDIT_SPLITS, EDITS_CANDIDATES, load_edits, split_rows
from experiments.provenance import run_info
from experiments.sequence_match import matching_blocks
from experiments.train_zoo import TargetConfig, special_ids
from experiments.zoo_gate import as_saved, gate_prompt, gate_rows


def copy_places(before: list[int], answer: list[int], end: int) -> tuple[list[tuple[int, int]], list[int]]:
    """The places of ``answer`` (token ids, the end-of-turn token ``end`` not included) that say whether a target
    copies ``before`` where it should, from one token alignment (difflib's matching blocks):

    - ``leaves``: (j, copy) for each change, ``j`` the answer position where the reference stops copying and
      ``copy`` the token copying would give there (``before``'s next token, or ``end`` after its last); ``j`` may be
      ``len(answer)``, the end-of-turn token, where the change deletes ``before``'s tail;
    - ``copies``: every answer position inside a copied run but its first token after a change (where the copy
      resumes, which is a decision of its own), where copying gives the reference token.
    """
    leaves, copies, i, j = [], [], 0, 0
    for bi, bj, size in matching_blocks(before, answer):
        changed = i < bi or j < bj
        if changed:
            leaves.append((j, before[i] if i < len(before) else end))
        copies.extend(range(bj + changed, bj + size))
        i, j = bi + size, bj + size
    return leaves, copies


def place_scores(greedy: list[int], answer: list[int], leaves: list[tuple[int, int]], copies: list[int],
                 end: int, text=None) -> dict:
    """One answer's counts: ``greedy[j]`` is the target's token at answer position ``j`` (teacher-forced; one more
    than ``answer``, for the end-of-turn position). ``found``: leaves where the greedy token is not the copy
    (``first_found``: the first leave's); ``exact``: leaves where it is the reference's token; ``spurious``: copy
    positions where it is not the reference's (the copy's) token. With ``text`` (token ids -> their text, e.g. a
    tokenizer's ``decode``), also ``spurious_same_text``: those of them whose greedy token's text begins the
    reference's text from there (the same text split into other tokens, not a departure a reader would see)."""
    target = answer + [end]
    left = [greedy[j] != c for j, c in leaves]
    spurious = [j for j in copies if greedy[j] != target[j]]
    out = {"leaves": len(leaves), "found": sum(left), "first_found": bool(left) and left[0],
           "exact": sum(greedy[j] == target[j] for j, _ in leaves), "copies": len(copies), "spurious": len(spurious)}
    if text is not None:
        out["spurious_same_text"] = sum(bool(t) and text(target[j:j + SAME_TEXT_TOKENS]).startswith(t)
                                        for j in spurious for t in [text([greedy[j]])])
    return out


SAME_TEXT_TOKENS = 8  # reference tokens whose text a greedy token's text is matched against (longer than a token)


def summarize(samples: list[dict]) -> dict:
    """Pooled over answers: the share of leaves found and matched exactly, spurious departures per 1,000 copy
    tokens, and the share of answers whose first leave is found; where every answer has it, the share of the
    spurious departures that are the same text split into other tokens."""
    total = {k: sum(s[k] for s in samples) for k in ("leaves", "found", "exact", "copies", "spurious")}
    with_leave = [s for s in samples if s["leaves"]]
    same = ({"spurious_same_text_share": sum(s["spurious_same_text"] for s in samples) / max(total["spurious"], 1)}
            if samples and all("spurious_same_text" in s for s in samples) else {})
    return {"n": len(samples), **total,
            "found_share": total["found"] / max(total["leaves"], 1),
            "exact_share": total["exact"] / max(total["leaves"], 1),
            "spurious_per_1000": 1000 * total["spurious"] / max(total["copies"], 1),
            "first_found_share": float(np.mean([s["first_found"] for s in with_leave])) if with_leave else None,
            **same}


def compare_places(a: list[dict], b: list[dict], n_boot: int = 2000, seed: int = 0) -> dict:
    """Two targets' samples (:func:`teacher_forced`'s) on the prompts both have (by id): ``n``, each one's
    :func:`summarize` there, B's found share minus A's and B's spurious departures per copy token over A's, each
    with its paired bootstrap 95% interval over the prompts (``n_boot`` resamples). Raises ValueError when they
    share fewer than 3 prompts or differ in a shared prompt's places (not the same references)."""
    sa, sb = ({s["id"]: s for s in samples} for samples in (a, b))
    ids = sorted(set(sa) & set(sb))
    if len(ids) < 3:
        raise ValueError(f"the two records share {len(ids)} prompts; comparing them needs at least 3")
    if any((sa[i]["leaves"], sa[i]["copies"]) != (sb[i]["leaves"], sb[i]["copies"]) for i in ids):
        raise ValueError("a shared prompt has other places in the two records: they answer other references")
    counts = {k: np.array([[side[i][k] for i in ids] for side in (sa, sb)], dtype=float)  # (2, n) each
              for k in ("leaves", "found", "copies", "spurious")}
    rng = np.random.default_rng(seed)
    draws = np.vstack([np.arange(len(ids)), rng.integers(0, len(ids), (n_boot, len(ids)))])  # (1 + n_boot, n)
    sums = {k: v[:, draws].sum(-1) for k, v in counts.items()}  # (2, 1 + n_boot) each: row 0 of draws is the data
    found = sums["found"] / np.maximum(sums["leaves"], 1)
    spurious = sums["spurious"] / np.maximum(sums["copies"], 1)
    diff = found[1] - found[0]
    ratio = spurious[1] / np.where(spurious[0] > 0, spurious[0], np.nan)
    return {"n": len(ids), "a": summarize([sa[i] for i in ids]), "b": summarize([sb[i] for i in ids]),
            "found_share_b_minus_a": float(diff[0]), "found_ci95": np.percentile(diff[1:], [2.5, 97.5]).tolist(),
            "spurious_b_over_a": float(ratio[0]), "spurious_ci95": np.nanpercentile(ratio[1:], [2.5, 97.5]).tolist(),
            "n_boot": n_boot}


def teacher_forced(model_dir: Path, rows: list[dict], cfg) -> dict:
    """:func:`place_scores` of every row's reference answer under the target in ``model_dir`` (its weights as saved:
    bf16 on the GPU, fp32 on the CPU), with each sample's id and reference edit norm, and :func:`summarize`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = as_saved(AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True), device).to(device)
    end = special_ids(tokenizer)["eot"]
    samples, start = [], time.time()
    for r in rows:
        _, prompt = gate_prompt(tokenizer, r, cfg)
        before, answer = (tokenizer.encode(r[k], add_special_tokens=False) for k in ("before", "after"))
        ids = torch.tensor([prompt + answer + [end]], device=device)  # (1, P + A + 1)
        with torch.no_grad():
            logits = model(ids[:, :-1]).logits[0, len(prompt) - 1:]  # (A + 1, V): the answer's positions
        greedy = logits.argmax(-1).tolist()  # host sync: the scores are counted in Python
        samples.append({"id": r["id"], "ref_norm": r["char_edit_norm"],
                        **place_scores(greedy, answer, *copy_places(before, answer, end), end, tokenizer.decode)})
    return {"model": str(model_dir), "device": str(device), "seconds": round(time.time() - start, 1),
            "summary": summarize(samples), "samples": samples}


def rows_of(which: str, prompts: int, cfg) -> list[dict]:
    """The quality gate's prompts (:func:`experiments.zoo_gate.gate_rows`) of one split
    (:func:`experiments.edit_corpus.split_rows`)."""
    return gate_rows(split_rows(load_edits(), which, cfg.validation_repos), prompts, cfg.gate_bins,
                     cfg.gate_max_before_chars)


SAMPLE_KEYS = {"id", "leaves", "found", "first_found", "exact", "copies", "spurious"}  # what a comparison reads


def read_side(spec: str) -> tuple[dict, list[dict]]:
    """``RECORD:LABEL`` (a record this command wrote, gzipped or not, and one of its models' labels): the record
    and that model's samples. Raises ValueError naming what is wrong."""
    path, sep, label = spec.rpartition(":")
    if not sep or not path or not label:
        raise ValueError(f"{spec!r} is not RECORD:LABEL")
    opener = gzip.open if path.endswith(".gz") else open
    try:  # EOFError: a truncated .gz
        with opener(path, "rt", encoding="utf-8") as f:
            record = json.load(f)
        models = {m["label"]: m for m in record["models"]}
        record["rows"]
    except (OSError, EOFError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not an edit_places record ({type(e).__name__}: {e})") from None
    if label not in models:
        raise ValueError(f"{path} has no model labelled {label!r} (it has {sorted(models)})")
    samples = models[label].get("samples")
    if not isinstance(samples, list) or not all(isinstance(s, dict) and SAMPLE_KEYS <= s.keys() for s in samples):
        raise ValueError(f"{path}: model {label!r} has no samples of places (a list of records with "
                         f"{', '.join(sorted(SAMPLE_KEYS))})")
    return record, samples


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, nargs="+", default=None, help="target model folders")
    p.add_argument("--compare", nargs=2, metavar="RECORD:LABEL", default=None,
                   help="instead of --model: two models of records this command wrote (A, then B), compared on the "
                   "prompts both have (B's found share minus A's, B's spurious rate over A's, paired bootstrap "
                   "intervals)")
    p.add_argument("--labels", nargs="+", default=None, help="a name for each model in the record (default: folders)")
    p.add_argument("--rows", choices=EDIT_SPLITS, default=None,
                   help="eval (default): the held-out test split; validation: the repositories held out to choose "
                   "checkpoints; "
                        "train: the training split's other rows")
    p.add_argument("--prompts", type=int, default=None,
                   help="prompts, spread over 8 bins of reference edit norm (default 96)")
    p.add_argument("--out", type=Path, required=True, help="the record (JSON, with every sample)")
    args = p.parse_args(argv)
    p.check_output(args.out)
    if (args.model is None) == (args.compare is None):
        p.error("give either --model or --compare")
    if args.compare:
        given = [o for o, v in (("--labels", args.labels), ("--rows", args.rows), ("--prompts", args.prompts)) if v]
        if given:
            p.error(f"{given[0]} is for --model; --compare takes the rows of its records")
        try:
            sides = [read_side(spec) for spec in args.compare]
            if sides[0][0]["rows"] != sides[1][0]["rows"]:
                raise ValueError(f"the records are of other rows ({sides[0][0]['rows']}, {sides[1][0]['rows']})")
            args.comparison = compare_places(sides[0][1], sides[1][1])
        except ValueError as e:
            p.error(f"--compare: {e}")
        args.rows = sides[0][0]["rows"]
        return args
    args.rows, args.prompts = args.rows or "eval", 96 if args.prompts is None else args.prompts
    if args.prompts < 1:
        p.error(f"--prompts must be >= 1, got {args.prompts}")
    for m in args.model:  # every folder checked before the first is loaded
        p.check_model(m, "--model")
    if args.labels is None:
        args.labels = [str(m) for m in args.model]
    elif len(args.labels) != len(args.model) or len(set(args.labels)) != len(args.labels):
        p.error(f"--labels: {len(args.labels)} given, distinct and one per --model ({len(args.model)}) wanted")
    args.config = replace(TargetConfig(), gate_prompts=args.prompts)
    try:
        args.prompt_rows = rows_of(args.rows, args.prompts, args.config)
    except StopIteration:
        p.error(f"no code edits to ask: none of {', '.join(map(str, EDITS_CANDIDATES))} exists")
    except (OSError, ValueError, KeyError) as e:
        p.error(f"the code edits cannot be read ({type(e).__name__}: {e})")
    if not args.prompt_rows:
        p.error(f"--rows {args.rows}: no prompts for the quality gate in this split")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.compare:
        c = args.comparison
        print(f"{args.rows}, {c['n']} prompts: found {100 * c['a']['found_share']:.0f}% -> "
              f"{100 * c['b']['found_share']:.0f}% ({100 * c['found_share_b_minus_a']:+.1f} points, 95% CI "
              f"{100 * c['found_ci95'][0]:+.1f} to {100 * c['found_ci95'][1]:+.1f}); spurious per 1,000 "
              f"{c['a']['spurious_per_1000']:.1f} -> {c['b']['spurious_per_1000']:.1f} (x{c['spurious_b_over_a']:.2f}, "
              f"95% CI {c['spurious_ci95'][0]:.2f} to {c['spurious_ci95'][1]:.2f})", flush=True)
        record = {"compare": args.compare, "rows": args.rows, "command": "python -m experiments.edit_places "
                  f"--compare {' '.join(args.compare)} --out {args.out}", "run_info": run_info("cpu"), **c}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out, json.dumps(record, indent=1) + "\n")
        return
    cfg, rows = args.config, args.prompt_rows
    results = []
    for m, label in zip(args.model, args.labels):
        res = {"label": label, **teacher_forced(m, rows, cfg)}
        s = res["summary"]
        first = "none" if s["first_found_share"] is None else f"{100 * s['first_found_share']:.0f}%"
        print(f"{label}: {s['found']}/{s['leaves']} places found ({100 * s['found_share']:.0f}%; first place "
              f"{first}), {s['spurious_per_1000']:.1f} spurious departures per 1,000 copy tokens "
              f"({100 * s['spurious_same_text_share']:.0f}% of them the same text in other tokens), {res['seconds']} s",
              flush=True)
        results.append(res)
    record = {"rows": args.rows, "prompts": len(rows), "command": "python -m experiments.edit_places --model "
              + " ".join(map(str, args.model)) + " --labels " + " ".join(args.labels)
              + f" --rows {args.rows} --prompts {args.prompts} --out {args.out}",
              "config": {k: getattr(cfg, k) for k in ("change_request", "max_places", "gate_bins",
                                                       "gate_max_before_chars", "validation_repos")},
              "run_info": run_info(results[0]["device"]), "models": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
