"""Does decoding use a head exactly as training did? And how well does each head predict the answer region?

    python -m experiments.diagnose_heads --prompts 3 --out experiments/results/zoo/head_diagnosis.json

For held-out code-edit prompts, the target's greedy answer is computed; then for each head (1) the training
path (``hybridsd.eagle.train.unroll``, step 0) predicts every next-next token, and its agreement with the
target is measured on the answer region; (2) ``EagleDrafter`` is fed the same committed prefix and asked for one
token at up to 30 answer positions; the share equal to the training path's prediction says whether decoding and
training compute the same function.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import hybridsd as hsd
from experiments import provenance
from experiments.cli import Parser
from experiments.distributed import write_atomic
from hybridsd import data, prompts
from hybridsd.drafters.base import ProposeRequest
from hybridsd.eagle.train import _target_pass, unroll


@torch.no_grad()
def diagnose(model, tok, head, examples, max_new: int, positions: int) -> dict:
    """The head's agreement with the target on the answer region (training path) and the share of up to
    ``positions`` answer positions per example where the drafter proposes what the training path predicts (None
    where no position was checked)."""
    agree, same, n_agree, n_same = 0, 0, 0, 0
    for e in examples:
        ids = prompts.build_prompt_ids(tok, e.prompt)
        plain = hsd.generate(model, ids, max_new_tokens=max_new, eos_token_id=[4, 1])
        seq = torch.tensor(ids + plain.tokens)[None]
        feats, tl = _target_pass(model, seq, head.config.target_layers)
        pred = head.to_target(head.logits(next(unroll(head, feats, seq, 1))).argmax(-1))[0]  # row i -> t_{i+2}
        target = tl[0].argmax(-1)
        rows = torch.arange(len(ids) - 1, seq.shape[1] - 2)
        agree += int((pred[rows] == target[rows + 1]).sum())
        n_agree += len(rows)
        for r in rows[:positions].tolist():
            d = hsd.EagleDrafter(head, k=1)
            d.reset(0)
            d.observe(feats[0, : r + 1], seq[0, 1 : r + 2])
            draft = d.propose(ProposeRequest(seq[0, : r + 2].numpy(), 1))[0].tokens
            same += int(draft[0]) == int(pred[r])
            n_same += 1
    return {"answer_agreement": agree / n_agree if n_agree else None, "answer_rows": n_agree,
            "drafter_equals_training_path": same / n_same if n_same else None, "positions_checked": n_same}


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--max-new", type=int, default=64)
    p.add_argument("--positions", type=int, default=30)
    p.add_argument("--out", type=Path, default=Path("experiments/results/zoo/head_diagnosis.json"))
    a = p.parse_args(argv)
    for name in ("prompts", "max_new", "positions"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    p.check_output(a.out)
    try:
        keep = set(json.loads((hsd.zoo.path() / "eval_split.json").read_text())["ids"])
        exs = [e for e in data.load_code_edits(change_request="located", ids=keep)  # the zoo format, held out
               if len(e.input_text) < 1500][: a.prompts]
    except (FileNotFoundError, ValueError) as e:  # no data folder or file, a bad row
        p.error(f"the held-out code edits: {e}")
    if not exs:
        p.error("no held-out code edit with an input under 1500 characters")
    device = "cpu"
    model, tok, heads = hsd.zoo.load(device=device)
    res = {"run_info": provenance.run_info(device), "config": vars(a) | {"out": str(a.out)},
           "heads": {kind: diagnose(model, tok, head, exs, a.max_new, a.positions) for kind, head in heads.items()}}
    write_atomic(a.out, json.dumps(res, indent=1))
    print(json.dumps(res["heads"], indent=1))


if __name__ == "__main__":
    main()
