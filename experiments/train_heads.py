"""Train the zoo target's EAGLE-1 and EAGLE-3 heads on text the target itself generates (one GPU).

    python -m experiments.train_heads --data ../shared/data --out hybridsd/models/tiny-coder
    python -m experiments.train_heads --target /tmp/new/tiny-coder --out /tmp/new/tiny-coder \
        --init-heads hybridsd/models/tiny-coder      # a retrained target; heads start from the old ones

1. Prompts: the Blazedit prompts of the code-edit rows outside the held-out split, with the change
   request the target was tuned on (``--change-request``: located, see ``hybridsd.edit_requests``, or
   the commit subject).
2. Data: the target's own greedy answers to as many prompts as ``--gen-seconds`` allows (batched HF
   ``generate``), plus prompt + reference answer for every training row (teacher-forced text).
3. Each head trains for ``--seconds-per-head`` (steps fixed from a timed probe), fixed seeds; the loss
   curves and data sizes go to ``heads_training.json``; heads are saved in bf16 in the public layouts.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import torch

import hybridsd as hsd
from experiments import provenance
from experiments.cli import Parser
from experiments.distributed import write_atomic
from hybridsd import data, prompts
from hybridsd.checkpoint_files import json_object
from hybridsd.eagle.loader import read_state_dict
from hybridsd.eagle.train import (build_draft_vocab, count_tokens, evaluate_head, generate_sequences,
                                  init_eagle3_output, init_from_head, train_head)
from hybridsd.edit_requests import located_request


def edit_examples(path: Path | None, held_out: set[str], max_before_chars: int, change_request: str) -> list:
    """The code-edit examples outside ``held_out`` with short inputs, as Blazedit prompts (file order)."""
    out = []
    for e in data.load_code_edits(path):
        if e.id in held_out or len(e.input_text) > max_before_chars:
            continue
        if change_request == "located":
            request = located_request(e.input_text, e.reference, e.meta["instruction"])
            e = replace(e, prompt=data.blazedit_prompt(e.input_text, request))
        out.append(e)
    return out


def load_target(folder: Path, device: str):
    """(model, tokenizer) of a model folder: bf16 on CUDA, fp32 otherwise, eval mode, no network."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True).to(device).eval()
    return model, AutoTokenizer.from_pretrained(folder, local_files_only=True)


def training_sequences(model, tok, examples, gen_seconds: float, max_new: int, batch: int, log) -> tuple[list, dict]:
    """(self-generated sequences, teacher-forced sequences) as 1-D LongTensors, and counts."""
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    prompt_ids = [torch.tensor(prompts.build_prompt_ids(tok, e.prompt)) for e in examples]
    forced = [torch.cat([p, torch.tensor(tok.encode(e.reference, add_special_tokens=False) + [eot])])
              for p, e in zip(prompt_ids, examples)]
    order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))  # similar lengths batch well
    generated, t0 = [], time.perf_counter()
    for b in range(0, len(order), batch):
        if time.perf_counter() - t0 > gen_seconds:
            break
        chunk = [prompt_ids[i] for i in order[b:b + batch]]
        generated += generate_sequences(model, chunk, max_new, batch_size=batch, eos_token_id=[eot, tok.eos_token_id],
                                        pad_token_id=tok.pad_token_id)
        log(f"generated {len(generated)} sequences in {time.perf_counter() - t0:.0f}s")
    info = {"train_rows": len(examples), "generated": len(generated),
            "generated_tokens": int(sum(len(s) for s in generated)),
            "forced_tokens": int(sum(len(s) for s in forced)), "gen_seconds": time.perf_counter() - t0}
    return generated, forced, info


def timed_steps(head, model, seqs, seconds: float, probe_steps: int = 8, **kw) -> int:
    """Optimizer steps that fit in ``seconds``, from a timed probe on a copy of the head."""
    import copy

    probe = copy.deepcopy(head)
    train_head(probe, model, seqs, steps=2, log_every=2, **kw)  # warm-up
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t = time.perf_counter()
    train_head(probe, model, seqs, steps=probe_steps, log_every=probe_steps, **kw)
    sync()
    return max(10, int(seconds / ((time.perf_counter() - t) / probe_steps)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked before any work: a bad value is one line on stderr and exit 2."""
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-coder", help="zoo model name (see --target)")
    p.add_argument("--target", type=Path, default=None, help="target model folder (default: the zoo's --model)")
    p.add_argument("--init-heads", type=Path, default=None,
                   help="folder with eagle1/ and eagle3/ to start the heads from (matching tensors are copied)")
    p.add_argument("--change-request", choices=("located", "subject"), default="located")
    p.add_argument("--data", type=Path, default=None, help="folder with code_edits_dev.jsonl")
    p.add_argument("--out", type=Path, required=True, help="model folder to write eagle1/ and eagle3/ into")
    p.add_argument("--gen-seconds", type=float, default=60)
    p.add_argument("--gen-batch", type=int, default=128)
    p.add_argument("--max-new", type=int, default=1024)
    p.add_argument("--max-before-chars", type=int, default=4000)
    p.add_argument("--seconds-per-head", type=float, default=120)
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per head (default: fit --seconds-per-head)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--draft-vocab", type=int, default=4096)
    p.add_argument("--ttt-steps", type=int, default=5)
    p.add_argument("--no-init-from-target", dest="init_from_target", action="store_false",
                   help="EAGLE-3: start lm_head and norm at random instead of from the target's")
    p.add_argument("--device", default="cuda")
    p.add_argument("--kinds", nargs="+", default=["eagle1", "eagle3"], choices=["eagle1", "eagle3"])
    p.add_argument("--limit", type=int, default=None, help="use only this many training rows (smoke tests)")
    a = p.parse_args(argv)
    p.check_output(a.out, folder=True)
    positive = ("gen_batch", "max_new", "max_before_chars", "batch_size", "seq_len", "draft_vocab", "ttt_steps",
                "steps", "limit", "seconds_per_head", "lr")
    for name in positive:
        if getattr(a, name) is not None and not 0 < getattr(a, name) < math.inf:
            p.error(f"--{name.replace('_', '-')} must be a finite number > 0, got {getattr(a, name)}")
    if not a.gen_seconds >= 0:  # inf: no time limit
        p.error(f"--gen-seconds must be >= 0, got {a.gen_seconds}")
    p.check_device(a.device)
    flag = "--target" if a.target is not None else "--model"
    if a.target is None:
        try:
            a.target = hsd.zoo.path(a.model)
        except ValueError as e:
            p.error(f"--model: {e}")
    p.check_model(a.target, flag)  # config, weights and tokenizer
    try:
        config = json_object(a.target / "config.json")
        config = config.get("text_config", config)
        held_out = held_out_ids(a.target / "eval_split.json")
    except (FileNotFoundError, ValueError) as e:  # a file not as expected
        p.error(f"--target: {e}")
    vocab = config.get("vocab_size")
    if "eagle3" in a.kinds and isinstance(vocab, int) and a.draft_vocab > vocab:
        p.error(f"--draft-vocab {a.draft_vocab} is larger than the target's vocabulary ({vocab}, {a.target})")
    if a.data is not None and not (a.data / "code_edits_dev.jsonl").is_file():
        p.error(f"--data: no code_edits_dev.jsonl in {a.data}")
    try:  # the row filter only: the change request does not decide which rows are kept
        rows = edit_examples(a.data / "code_edits_dev.jsonl" if a.data else None, held_out, a.max_before_chars,
                             "subject")
    except (FileNotFoundError, ValueError) as e:
        p.error(f"--data: {e}")
    if not rows:
        p.error(f"--max-before-chars {a.max_before_chars}: no training row (outside {a.target}'s held-out split) "
                "has an input that short")
    a.init_states = {}  # kind -> the init head's state dict, read once here (checked) and used by main
    for kind in a.kinds if a.init_heads is not None else ():
        head = a.init_heads / kind
        try:  # every weight file read as the run reads it: missing, truncated or not a state dict
            a.init_states[kind] = read_state_dict(head)
            size = json_object(head / "config.json").get("hidden_size")
        except (FileNotFoundError, ValueError) as e:
            p.error(f"--init-heads: {e}")
        if size is not None and size != config.get("hidden_size", size):
            p.error(f"--init-heads: {head} is a head for hidden size {size}, the target's is "
                    f"{config.get('hidden_size')} ({a.target}); none of its tensors would fit")
    return a


def held_out_ids(path: Path) -> set[str]:
    """The ids of an ``eval_split.json`` (its ``ids``: a list of strings); ``ValueError`` naming the file."""
    ids = json_object(path).get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"{path}: 'ids' must be a list of row ids (strings)")
    return set(ids)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    t_start = time.perf_counter()
    torch.manual_seed(0)
    log = lambda msg: print(f"[{time.perf_counter() - t_start:6.1f}s] {msg}", flush=True)  # noqa: E731
    folder = a.target  # the zoo's --model when not given
    model, tok = load_target(folder, a.device)
    held_out = held_out_ids(folder / "eval_split.json")
    path = a.data / "code_edits_dev.jsonl" if a.data else None
    train = edit_examples(path, held_out, a.max_before_chars, a.change_request)[: a.limit]
    generated, forced, info = training_sequences(model, tok, train, a.gen_seconds, a.max_new, a.gen_batch, log)
    seqs = generated * 2 + forced  # the target's own text weighs double
    holdout = [s for s in generated[-64:]] or forced[-64:]
    report = {"data": info,
              "config": {k: v for k, v in vars(a).items() if k != "init_states"}
              | {k: str(getattr(a, k)) for k in ("data", "out", "target", "init_heads")},
              "run_info": provenance.run_info(a.device), "heads": {}}
    kw = dict(batch_size=a.batch_size, seq_len=a.seq_len, lr=a.lr, device=a.device)
    trained = {}
    for kind in a.kinds:
        head = hsd.EagleHead.from_target(model, kind=kind, device=a.device, dtype=torch.float32,
                                         **({"draft_vocab_size": a.draft_vocab} if kind == "eagle3" else {}))
        extra = {}
        if kind == "eagle3":
            d2t, t2d = build_draft_vocab(count_tokens(seqs, model.config.vocab_size), a.draft_vocab)
            head.set_draft_vocab(d2t.to(a.device), t2d.to(a.device))
            if a.init_from_target:
                init_eagle3_output(head, model)
            extra = {"ttt_steps": a.ttt_steps}
        if a.init_heads is not None:
            copied = init_from_head(head, a.init_states[kind])
            log(f"{kind}: started from {a.init_heads / kind} ({len(copied)} tensors)")
        steps = a.steps or timed_steps(head, model, seqs, a.seconds_per_head, **kw, **extra)
        log(f"{kind}: training {steps} steps")
        t = time.perf_counter()
        curve = train_head(head, model, seqs, steps=steps, log_every=max(1, steps // 40), seed=0, **kw, **extra,
                           log_fn=lambda r: log(f"{kind} step {r['step']} loss {r['loss']:.4f} "
                                                f"acc {r.get('acc', 0):.3f}"))
        acc = evaluate_head(head, model, holdout, steps=4, batch_size=8, seq_len=a.seq_len, device=a.device)["acc"]
        log(f"{kind}: held-out top-1 agreement by draft position {acc}")
        trained[kind] = head
        report["heads"][kind] = {"steps": steps, "train_s": time.perf_counter() - t, "curve": curve,
                                 "holdout_agreement": acc}
    for kind, head in trained.items():  # once all are trained: a kill before leaves the old heads and record
        head.to(torch.bfloat16).save_pretrained(a.out / kind)
    report["wall_s"] = time.perf_counter() - t_start
    dest = a.out / f"heads_training_{'_'.join(a.kinds)}.json"
    write_atomic(dest, json.dumps(report, indent=1))
    log("done")


if __name__ == "__main__":
    main()
