"""Quickstart: every drafter on the project's own small model, on the CPU, with exact stats.

    python -m experiments.quickstart [--out FILE.json]

Loads ``tiny-coder`` (a 16.5M-parameter Llama trained for code edits) and its EAGLE heads from the
repository, asks it for one code edit in the zoo's located format (the places and sizes of an intended change,
named by ``hybridsd.edit_requests.located_request``; the model sees only the request and the file), and decodes
the answer plainly and with each drafter. Every speculative output must equal the plain greedy output token for
token. Prints the request, the table and the diff between the input file and the answer; with ``--out``, also
writes them as JSON with the command and ``run_info`` (device, versions, commit).
"""

from __future__ import annotations

import difflib
import json
import math
import sys
import time
from pathlib import Path

import torch

import hybridsd as hsd
from hybridsd.prompts import build_prompt_ids
from hybridsd.data import blazedit_prompt
from hybridsd.edit_requests import located_request
from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info

CODE = '''"""Small helpers for reading configuration files."""
import json
import os


def load_config(path):
    with open(path) as f:
        return json.load(f)


def save_config(path, config):
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def config_path(name):
    return os.path.join(os.path.expanduser("~"), ".config", name + ".json")
'''
# the intended change: the request is built from it (where, and how many lines), its new text is left to the model
INTENDED = CODE.replace("import os\n", "import os\nimport pathlib\n").replace(
    'return os.path.join(os.path.expanduser("~"), ".config", name + ".json")',
    'return pathlib.Path.home() / ".config" / (name + ".json")')
REQUEST = located_request(CODE, INTENDED, "Use pathlib in config_path")
NGRAM = {"k": 5, "min_n": 2, "max_n": 5}  # the n-gram drafter's settings
EAGLE_K = 3
# each method: (the n-gram drafter's settings, the EAGLE head, the hybrid policy); None where it has no such part
METHODS = {"plain": (None, None, None), "ngram": (NGRAM, None, None), "eagle": (None, "eagle1", None),
           "eagle3": (None, "eagle3", None), "ngram-eagle": (NGRAM, "eagle1", "prefer-ngram"),
           "ngram-eagle3": (NGRAM, "eagle3", "prefer-ngram"), "ngram-eagle tree": (NGRAM, "eagle1", "tree")}


def drafter(heads: dict, ngram: dict | None, head: str | None, policy: str | None):
    """The drafter of one of :data:`METHODS` (None: plain decoding)."""
    n = hsd.NgramDrafter(**ngram) if ngram else None
    e = hsd.EagleDrafter(heads[head], k=EAGLE_K) if head else None
    return hsd.HybridDrafter(n, e, policy=policy) if policy else n or e


def main(argv: list[str] | None = None) -> None:
    p = Parser(prog="quickstart", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="also write the request, the table and the answer to this JSON file")
    args = p.parse_args(argv)
    if args.out is not None and not args.out.parent.is_dir():
        p.error(f"--out {args.out}: no folder {args.out.parent}")
    p.check_output(args.out)
    torch.manual_seed(0)
    model, tok, heads = hsd.zoo.load()  # fp32 on the CPU, from files in the repository
    device = next(model.parameters()).device
    ids = build_prompt_ids(tok, blazedit_prompt(CODE, REQUEST))  # chat template once: exactly one BOS
    eos = [tok.convert_tokens_to_ids("<|eot_id|>"), tok.eos_token_id]
    max_new = 256
    drafters = {name: (drafter(heads, *parts), parts) for name, parts in METHODS.items()}
    print(f"change request:\n{REQUEST}\n")
    print(f"prompt: {len(ids)} tokens; model: tiny-coder, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
          f"parameters, CPU fp32\n")
    print(f"{'method':18s} {'tokens':>6s} {'passes':>6s} {'seq AL':>7s} {'prec AL':>7s} {'same':>5s} {'s':>6s}  "
          "steps by drafter")
    plain, rows = None, []
    for name, (d, (ngram, head, policy)) in drafters.items():
        t = time.perf_counter()
        res = hsd.generate(model, ids, drafter=d, max_new_tokens=max_new, eos_token_id=eos)
        wall = time.perf_counter() - t
        res.stats.check()
        plain = plain or res.tokens
        st = res.stats
        same = res.tokens == plain
        print(f"{name:18s} {st.num_tokens:6d} {st.num_target_steps:6d} {st.seq_normalized_al:7.2f} "
              f"{st.precision_al:7.2f} {str(same):>5s} {wall:6.2f}  {dict(st.steps_by_drafter)}")
        rows.append({"method": name, "ngram": ngram, "eagle": head and {"head": head, "k": EAGLE_K},
                     "hybrid_policy": policy, "tokens": st.num_tokens, "passes": st.num_target_steps,
                     "seq_normalized_al": st.seq_normalized_al,
                     "precision_al": None if math.isnan(st.precision_al) else st.precision_al, "same": same,
                     "seconds": round(wall, 3), "steps_by_drafter": dict(st.steps_by_drafter)})
        if not same:
            raise SystemExit(f"{name}: output differs from plain greedy decoding")
    out = tok.decode(plain, skip_special_tokens=True)
    diff = "".join(difflib.unified_diff(CODE.splitlines(True), out.splitlines(True), "input", "answer"))
    print("\nthe answer (plain greedy) against the input file:\n")
    print(diff or "no change")
    if args.out is not None:
        record = {"what": "the quickstart: one located code edit decoded plainly and with every drafter (CPU fp32)",
                  "command": " ".join(["python -m experiments.quickstart", *(sys.argv[1:] if argv is None else argv)]),
                  "run_info": run_info(device), "model": "tiny-coder", "dtype": str(model.dtype).removeprefix("torch."),
                  "request": REQUEST, "prompt_tokens": len(ids), "max_new_tokens": max_new,
                  "rows": rows, "answer": out, "diff": diff}
        write_atomic(args.out, json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
