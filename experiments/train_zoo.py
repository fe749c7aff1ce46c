"""Train the models of the zoo (``hybridsd/models/``); no model hub is needed.

Subcommands:

``target``  the ``tiny-coder`` target, a ~16M-parameter ``LlamaForCausalLM``, on one GPU:
            (a) pretraining on ~150 MB of varied Python code (this machine's installed Python sources, without
            the evaluation repositories' packages), packed into 2048-token sequences, up to 6 reshuffled passes
            within its time budget; skipped with ``--init MODEL_DIR``, which fine-tunes that model instead;
            (b) tuning on change request -> edited-file pairs in the Blazedit prompt format, wrapped in the chat
            template, loss on the answer (the ``after`` file + ``<|eot_id|>``) only: the TRAIN split of
            code_edits_dev.jsonl (without the validation repositories) plus synthetic copy-heavy edits of Python
            files. The change request is a located one (``hybridsd.edit_requests``: the commit subject, then each
            changed place by the quoted kept lines around it, its line number, enclosing def/class, kind and number
            of new lines), or with ``--change-request subject`` the commit subject / transform instruction alone;
            ``--span-share`` of the synthetic edits are span edits at random places (``synthetic_edits.span_edit``),
            which only the located request can locate; a share of the steps (``--sft-replay``) are pretraining
            batches, so that the model keeps writing code (with ``--init``, from a smaller corpus read for that);
            optionally, against greedy loops, an unlikelihood term on copying an earlier occurrence inside new text
            (``--unlikelihood-weight``) and examples with an answer line repeated in the input, its targets ignored
            and the exit from the repeat taught (``--repeat-share``, ``--repeat-max``);
            (c) optionally, loop repair (``--repair-time-s``): greedy continuations of answers from their changed
            places, every token that repeats a 4-gram of its continuation lowered by unlikelihood, beside
            edit-tuning batches;
            then a quality gate: greedy answers (the project's own decoding loop with an n-gram drafter) to
            ~32 evaluation-split prompts spread over the reference edit norm: share ending with EOS before
            the cap (1.5x the reference's tokens), share ending at 2/3 to 1.5x the reference's length, Spearman
            correlation between the reference's edit norm and the output's (both against the input), and each
            output's n-gram sequence-normalized AL.
``repair``  loop repair of an edit-tuned target on a small repair set (150 real training edits, ~300 synthetic
            edits of short files), then the quality gate (GPU or CPU; ``repair_config.json`` records it); with
            ``--repair-mode resync``, instead of the repeats' unlikelihood, the answer after the model's own new
            lines at a changed place (:func:`resync_batch`: going back to copying after writing the change);
            ``--repair-mode both``, the two terms in every step; ``--repair-mode drift``, the input's
            continuation where the model's own whole answers leave the copy away from the reference's changes
            (:func:`decision_batch`: skipped, repeated or rewritten stretches and early ends);
            ``--repair-mode skip``, the reference's change where those answers copy through a place it changes
            (omitted changes); ``--repair-mode decisions``, the first of the two in each answer.
``gate``    the quality gate on a saved target, on the validation split (``pallets/click``, held out of training to
            choose among checkpoints) or the evaluation split.
``split``   write ``eval_split.json`` (the evaluation rows held out of all training) only.

Each phase stops at its step count (its epochs', at most ``--pretrain-steps`` / ``--sft-steps``) or at its time
budget, whichever comes first; the cosine learning-rate schedule follows the larger of the two progress fractions,
so it always completes.

    python -m experiments.train_zoo target --smoke          # tiny model and data, CPU, seconds
    python -m experiments.train_zoo target --out /tmp/tc    # from scratch (GPU, under 9 minutes)
    python -m experiments.train_zoo target --init hybridsd/models/tiny-coder --out /tmp/tc   # fine-tune (GPU)
    python -m experiments.train_zoo repair --init /tmp/tc --out /tmp/tc-repaired --repair-weight 0.3 \
        --repair-batch 6 --repair-new-tokens 96 --repair-steps 23 --repair-time-s 1200    # CPU, about 11 minutes
    python -m experiments.train_zoo repair --init hybridsd/models/tiny-coder --out /tmp/tc-repaired --smoke  # seconds
    python -m experiments.train_zoo gate --model /tmp/tc-repaired --rows validation --out /tmp/gate.json
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import itertools
import json
import math
import random
import shutil
import time
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.edit_corpus import (EVAL_REPOS, VALIDATION_REPOS, blazedit_messages, change_request,
                                     eval_split_record, load_edits, pretraining_texts, split_edits, split_rows,
                                     split_validation)
from experiments.provenance import run_info
from experiments.sequence_match import matching_blocks
from experiments.synthetic_edits import synthetic_edit
from experiments.train_tokenizer import EOT
from experiments.zoo_data import (cached_edit_data, edit_data, edit_key, eval_examples_of, padded_width,
                                  pretraining_data, sft_batch_rows, sft_batches, sft_examples, with_repeated_line,
                                  with_replay)
from experiments.zoo_gate import (GATE_MAX_NEW_FRAC, CheckpointSelection, as_saved, cap_of, compare_gates,
                                  read_gate, run_gate)
from hybridsd.data import BLAZEDIT_TEMPLATE, CHANGE_REQUESTS

REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = REPO / "hybridsd" / "models" / "tiny-coder"


REPAIR_MODES = ("loops", "resync", "both", "drift", "skip", "decisions")
ANSWER_MODES = {"drift": ("drift",), "skip": ("skip",), "decisions": ("drift", "skip")}  # modes that repair the
# model's own whole answers: the decision_batch kinds of each


@dataclass(frozen=True)
class TargetConfig:
    """Model shape, data sizes and optimisation of the ``tiny-coder`` target."""

    # model
    hidden_size: int = 384
    num_layers: int = 8
    num_heads: int = 6
    num_kv_heads: int = 2
    intermediate_size: int = 1024
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    # (a) pretraining
    pretrain_chars: int = 150_000_000
    pretrain_max_file_chars: int = 200_000
    pretrain_seq_len: int = 2048
    pretrain_batch_tokens: int = 65_536
    pretrain_lr: float = 2e-3
    pretrain_warmup_steps: int = 30
    pretrain_epochs: int = 6            # passes over the corpus (each reshuffled), if the time budget allows
    pretrain_steps: int = 0             # at most this many steps (0: the epochs decide)
    pretrain_time_s: float = 240.0      # at most; also at most ``pretrain_share`` of the time left after data prep
    pretrain_share: float = 0.55
    val_sequences: int = 32
    # (b) edit tuning
    synthetic_examples: int = 60_000    # the SFT time budget decides how many are used
    synthetic_sources: int = 40_000     # distinct files they are made from (a file can serve twice)
    synthetic_min_chars: int = 300
    synthetic_max_chars: int = 5000
    span_share: float = 0.5             # share of synthetic edits that are span edits (synthetic_edits.span_edit)
    real_epochs: int = 2                # copies of the real edits among one epoch's examples
    sft_epochs: int = 1
    sft_steps: int = 0                  # at most this many steps, replay steps included (0: the epochs decide)
    change_weight: float = 1.0          # loss weight of answer tokens where the edit departs from a copy
    decision_weight: float = 1.0        # loss weight where the answer leaves or resumes the copy (and its end)
    ambiguity_weight: float = 0.0       # loss weight of copies whose context recurs in the prompt with another
    # continuation, that continuation avoided (zoo_data.ambiguous_copies; 0: neither)
    unlikelihood_weight: float = 0.0    # weight of the unlikelihood term against copying inside new text
    copy_margin_weight: float = 0.0     # weight of the hinge relu(copy_margin - (z_copy - max other z)) at the
    # answer's copy positions (neither changed nor decisions; 0: none), see masked_loss
    copy_margin: float = 2.0            # the logit margin that hinge asks of the copied token
    repeat_share: float = 0.0           # share of examples with an answer line repeated in the input (loop exits)
    repeat_max: int = 2                 # ... repeated 1 to this many times
    repair_time_s: float = 0.0          # loop repair after edit tuning (seconds; 0: none), see loop_repair
    repair_batch: int = 64              # greedy continuations per repair step ...
    repair_new_tokens: int = 160        # ... of this many tokens, from a changed place of an answer
    repair_lr: float = 1e-4
    repair_weight: float = 0.3          # loops, both: weight of the unlikelihood of the continuations' repeats
    repair_steps: int = 0               # at most this many repair steps (0: the time budget alone)
    repair_mode: str = "loops"          # loops: unlikelihood of greedy repeats; resync: the answer after the
    # model's own new lines (see resync_batch); both: the two terms in every step; drift: the input's continuation
    # where the model's own answers leave the copy away from the changes; skip: the reference's change where they
    # copy through it; decisions: the first of the two in each answer (see decision_batch)
    repair_copy_share: float = 0.0      # resync, both: share of its places that are kept lines
    repair_early_stop: int = 0          # loops, both: also lower a stop this many or more tokens before the
    # reference's end (0: never), see loop_batch
    resync_weight: float = 1.0          # resync, both, drift, skip, decisions: weight of the loss after the
    # model's own text
    repair_fp32: bool = False           # repair in fp32 on a GPU too (no bf16 autocast): a CPU repair's arithmetic
    sft_max_len: int = 4096
    sft_batch_tokens: int = 65_536
    sft_lr: float = 1e-3
    sft_warmup_steps: int = 20
    sft_replay: float = 0.15            # share of edit-tuning steps that are pretraining batches (keeps the LM)
    sft_time_s: float = 260.0           # at most; also ends ``reserve_s`` before ``deadline_s``
    deadline_s: float = 480.0           # wall time from start by which training must be over ...
    reserve_s: float = 75.0             # ... leaving this for saving and the quality gate
    # shared optimisation
    min_lr_frac: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 10
    compile_layers: bool = False        # torch.compile each decoder layer for the training steps (evaluation and
    # generation stay eager); see compile_layers()
    # quality gate
    gate_prompts: int = 32
    gate_max_before_chars: int = 2500
    gate_max_new_frac: float = GATE_MAX_NEW_FRAC
    gate_time_s: float = 90.0           # no new gate prompt is started after this
    gate_bins: int = 8                  # gate prompts are spread evenly over this many bins of [0, 0.6]
    validation_repos: tuple[str, ...] = VALIDATION_REPOS  # held out of training; a repair chooses its step on them
    change_request: str = "located"     # or "subject": the commit subject / transform instruction alone
    max_places: int = 6                 # changed places named in a located request
    rename_share: float = 0.0           # share of the edit-tuning edits whose file's own names are renamed
    # (experiments.identifier_renaming: files the target cannot recall from pretraining, as on unseen repositories)
    workers: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "validation_repos", tuple(self.validation_repos))  # a JSON record holds a list
        if self.repair_mode not in REPAIR_MODES:
            raise ValueError(f"repair_mode must be one of {REPAIR_MODES}, not {self.repair_mode!r}")
        if self.resync_weight < 0:
            raise ValueError(f"resync_weight must be >= 0, got {self.resync_weight}")
        if not 0 <= self.repair_copy_share <= 1:
            raise ValueError(f"repair_copy_share must be in [0, 1], got {self.repair_copy_share}")
        if not 0 <= self.rename_share <= 1:
            raise ValueError(f"rename_share must be in [0, 1], got {self.rename_share}")
        if set(self.validation_repos) & set(EVAL_REPOS):
            raise ValueError(f"validation_repos must not hold an evaluation repository {EVAL_REPOS}, got "
                             f"{self.validation_repos}")
        if self.change_request not in CHANGE_REQUESTS:
            raise ValueError(f"change_request must be one of {CHANGE_REQUESTS}, got {self.change_request!r}")
        if self.unlikelihood_weight < 0:
            raise ValueError(f"unlikelihood_weight must be >= 0, got {self.unlikelihood_weight}")
        if self.ambiguity_weight < 0:
            raise ValueError(f"ambiguity_weight must be >= 0, got {self.ambiguity_weight}")
        if self.copy_margin_weight < 0 or not self.copy_margin > 0:
            raise ValueError(f"need copy_margin_weight >= 0 and copy_margin > 0, got {self.copy_margin_weight}, "
                             f"{self.copy_margin}")
        for name in ("change_weight", "decision_weight"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.repair_early_stop < 0:
            raise ValueError(f"repair_early_stop must be >= 0, got {self.repair_early_stop}")
        if self.repair_time_s < 0 or self.repair_steps < 0 or self.repair_batch < 1 or self.repair_new_tokens < 8:
            raise ValueError(f"need repair_time_s >= 0, repair_steps >= 0, repair_batch >= 1 and "
                             f"repair_new_tokens >= 8, got {self.repair_time_s}, {self.repair_steps}, "
                             f"{self.repair_batch}, {self.repair_new_tokens}")
        if self.repeat_max < 1:
            raise ValueError(f"repeat_max must be >= 1, got {self.repeat_max}")
        if self.gate_prompts < 1:
            raise ValueError(f"gate_prompts must be >= 1, got {self.gate_prompts}")
        if not 0 <= self.repeat_share <= 1:
            raise ValueError(f"repeat_share must be in [0, 1], got {self.repeat_share}")
        if not 0 <= self.span_share <= 1:
            raise ValueError(f"span_share must be in [0, 1], got {self.span_share}")
        if not 0 <= self.sft_replay < 1:
            raise ValueError(f"sft_replay must be in [0, 1), got {self.sft_replay}")
        if not 0 < self.pretrain_share <= 1:
            raise ValueError(f"pretrain_share must be in (0, 1], got {self.pretrain_share}")
        if self.pretrain_epochs < 1 or self.sft_epochs < 1:
            raise ValueError(f"pretrain_epochs and sft_epochs must be >= 1, got {self.pretrain_epochs}, "
                             f"{self.sft_epochs}")
        shape = (self.hidden_size, self.num_layers, self.num_heads, self.num_kv_heads, self.intermediate_size)
        if min(shape) < 1 or self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads or \
                (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"the model shape (hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size) "
                             f"needs positive sizes, num_heads dividing hidden_size into an even head size and "
                             f"num_kv_heads dividing num_heads, got {shape}")
        if self.pretrain_steps < 0 or self.sft_steps < 0:
            raise ValueError(f"pretrain_steps and sft_steps must be >= 0, got {self.pretrain_steps}, "
                             f"{self.sft_steps}")
        if not 0 <= self.seed < 2 ** 32:  # numpy's seeds
            raise ValueError(f"seed must be in [0, 2**32), got {self.seed}")
        positive = ("pretrain_lr", "sft_lr", "repair_lr", "gate_time_s")  # the rest: >= 0
        for name in (*positive, "pretrain_time_s", "sft_time_s", "deadline_s", "reserve_s", "repair_time_s",
                     "repair_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and (value > 0 if name in positive else value >= 0)):
                raise ValueError(f"{name} must be a finite number {'>' if name in positive else '>='} 0, got {value}")
        at_least = {**dict.fromkeys(("pretrain_chars", "synthetic_examples", "real_epochs", "val_sequences",
                                     "pretrain_warmup_steps", "sft_warmup_steps"), 0),
                    **dict.fromkeys(("synthetic_sources", "sft_max_len", "sft_batch_tokens", "pretrain_seq_len",
                                     "pretrain_batch_tokens", "gate_bins", "gate_max_before_chars", "log_every",
                                     "workers"), 1)}
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(self, name)}")


# Fine-tuning an already pretrained target (``--init``): no pretraining corpus, edit tuning only.
FINETUNE = dict(pretrain_chars=30_000_000, synthetic_examples=40_000, synthetic_sources=16_000, real_epochs=2,
                sft_epochs=3, sft_lr=5e-4, sft_warmup_steps=20, sft_time_s=200.0, deadline_s=270.0, reserve_s=55.0,
                gate_time_s=50.0)
SMOKE = dict(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128,
             pretrain_chars=400_000, pretrain_seq_len=256, pretrain_batch_tokens=2048, pretrain_time_s=20,
             deadline_s=150, reserve_s=30, val_sequences=4, synthetic_examples=60, sft_max_len=2048,
             sft_batch_tokens=4096, sft_time_s=20, gate_prompts=2, gate_max_before_chars=600, log_every=2, workers=2,
             synthetic_sources=50, gate_time_s=20)
# Smoke test of fine-tuning: the real model, tiny data and budgets.
SMOKE_FINETUNE = dict(pretrain_chars=200_000, pretrain_seq_len=256, pretrain_batch_tokens=2048, val_sequences=4,
                      synthetic_examples=24, synthetic_sources=24, real_epochs=1, sft_max_len=1024,
                      sft_batch_tokens=2048, sft_time_s=8, deadline_s=150, reserve_s=30, gate_prompts=2,
                      gate_max_before_chars=400, gate_max_new_frac=1.0, gate_time_s=30, log_every=1, workers=2)
SMOKE_REAL_ROWS = 16


def build_model(cfg: TargetConfig, vocab_size: int, special: dict):
    """A freshly initialised ``LlamaForCausalLM`` with tied embeddings."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings, rope_theta=cfg.rope_theta, tie_word_embeddings=True,
        bos_token_id=special["bos"], eos_token_id=[special["eos"], special["eot"]], pad_token_id=special["pad"],
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config)


COMPILE_MODES = ("layers", "layers-graphs", "model", "model-graphs")


def compile_layers(model, backend: str = "inductor", mode: str = "layers") -> None:
    """``torch.compile`` the decoder of ``model`` in place for its training steps; the state dict is unchanged.
    ``mode`` (one of ``COMPILE_MODES``): ``layers`` compiles every decoder layer (regional compilation: the layers
    share one compiled graph, so compiling costs about one layer's time; shapes recompile dynamically after the
    first); ``model`` the whole decoder (embedding to final norm) as one region; ``-graphs`` also replays each
    shape's kernels as CUDA graphs (inductor's ``reduce-overhead``: one recording per batch shape, replayed without
    launching each kernel). Code that evaluates or generates runs under :func:`eager`."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode {mode!r} is not one of {COMPILE_MODES}")
    options = {"backend": backend, **({"mode": "reduce-overhead"} if mode.endswith("-graphs") else {})}
    if mode.startswith("layers"):
        for layer in model.model.layers:
            layer.compile(**options)
    else:
        model.model.compile(**options)


def eager():
    """A context in which compiled modules run eagerly (evaluation and ``generate``: their shapes would recompile)."""
    import torch

    return torch.compiler.set_stance("force_eager")


def bf16(device, on: bool = True):
    """bf16 autocast on CUDA when ``on`` (training steps, generation); fp32 elsewhere or when off."""
    import torch

    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=on and device.type == "cuda")


def unlikelihood(logits, tokens):
    """``-log(1 - p(token))`` per row of ``logits`` ``[N, V]`` for ``tokens`` ``[N]`` (p capped below 1)."""
    import torch

    p = torch.softmax(logits.float(), dim=-1).gather(1, tokens[:, None]).squeeze(1)  # [N]
    return -torch.log1p(-p.clamp(max=1 - 1e-6))


def kept_positions(targets):
    """The flat indices ``[K]`` (int64, row-major) of the positions of ``targets`` ``[B, T]`` that are not -100;
    computed on the host for a host tensor, so that a training step need not wait for the device to count them."""
    return (targets != -100).flatten().nonzero().squeeze(1)


def masked_loss(model, input_ids, targets, weights=None, avoid=None, unlikelihood_weight: float = 0.0, keep=None,
                copy=None, copy_margin: float = 2.0, copy_margin_weight: float = 0.0):
    """Mean cross-entropy over positions whose target is not -100 (logits computed only there); with
    ``weights`` (same shape as ``targets``) the weighted mean. With ``avoid`` (same shape; a token id, or -100)
    and ``unlikelihood_weight`` > 0, plus that weight times the unlikelihood term ``-log(1 - p(avoid))`` summed
    over the positions whose avoided token is not their target, over the same total weight. With ``copy`` (same
    shape, bool: the positions where the answer copies its input) and ``copy_margin_weight`` > 0, plus that weight
    times the hinge ``relu(copy_margin - (z_target - max_other z))`` on the logits, summed over the copy positions
    over the same total weight: it acts only where greedy decoding would leave the copy or nearly so. ``keep``:
    those positions as :func:`kept_positions` gives them, already on the device (else found here: a host sync)."""
    import torch
    import torch.nn.functional as F

    hidden = model.model(input_ids=input_ids, use_cache=False).last_hidden_state  # [B, T, H]
    if keep is None:
        keep = kept_positions(targets)  # a device tensor: nonzero waits for the device (sync)
    logits = model.lm_head(hidden.flatten(0, 1).index_select(0, keep)).float()  # [K, vocab]
    y = targets.flatten().index_select(0, keep)  # [K]
    if weights is None:
        weights = torch.ones_like(targets, dtype=logits.dtype)
    w = weights.flatten().index_select(0, keep)  # [K]
    loss = (F.cross_entropy(logits, y, reduction="none") * w).sum() / w.sum()
    if copy is not None and copy_margin_weight > 0:
        top = logits.topk(2, dim=1)  # values, indices [K, 2]
        other = torch.where(top.indices[:, 0] == y, top.values[:, 1], top.values[:, 0])  # [K] best other logit
        hinge = torch.relu(copy_margin - (logits.gather(1, y[:, None]).squeeze(1) - other))  # [K]
        loss = loss + copy_margin_weight * (hinge * copy.flatten().index_select(0, keep)).sum() / w.sum()
    if avoid is None or unlikelihood_weight == 0:
        return loss
    a = avoid.flatten().index_select(0, keep)  # [K]
    sel = (a >= 0) & (a != y)
    return loss + unlikelihood_weight * unlikelihood(logits[sel], a[sel]).sum() / w.sum()


def unlikelihood_loss(model, input_ids, avoid):
    """Mean of ``-log(1 - p(avoid))`` over the positions where ``avoid`` (same shape as ``input_ids``: the token
    that position must not predict, or -100) is set."""
    hidden = model.model(input_ids=input_ids, use_cache=False).last_hidden_state
    keep = avoid >= 0
    return unlikelihood(model.lm_head(hidden[keep]), avoid[keep]).mean()


def repeat_positions(tokens: list[int], n: int = 4, reference: list[int] = (), exempt: list[int] = ()) -> list[int]:
    """Indices ``t`` of ``tokens`` whose n-gram ``tokens[t-n+1 : t+1]`` has now occurred more often than once and
    more often than in ``reference`` (the text that should have come), and never in ``exempt`` (the text it may
    copy from): the tokens of new text that repeats itself, as a greedy loop does."""
    allowed = Counter(tuple(reference[i:i + n]) for i in range(len(reference) - n + 1))
    allowed.update({tuple(exempt[i:i + n]): len(tokens) for i in range(len(exempt) - n + 1)})
    seen: Counter = Counter()
    out = []
    for t in range(n - 1, len(tokens)):
        gram = tuple(tokens[t - n + 1:t + 1])
        seen[gram] += 1
        if seen[gram] > max(1, allowed[gram]):
            out.append(t)
    return out


class Phase:
    """Step/time bookkeeping and the warmup + cosine learning rate of one training phase."""

    def __init__(self, name: str, steps: int, time_s: float, lr: float, warmup: int, min_frac: float):
        self.name, self.steps, self.time_s = name, steps, time_s
        self.lr, self.warmup, self.min_frac = lr, warmup, min_frac
        self.start, self.step = time.time(), 0

    def progress(self) -> float:
        return max(self.step / max(self.steps, 1), (time.time() - self.start) / self.time_s)

    def current_lr(self) -> float:
        if self.step < self.warmup:
            return self.lr * (self.step + 1) / self.warmup
        p = min(self.progress(), 1.0)
        return self.lr * (self.min_frac + (1 - self.min_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def step_budget(epoch_steps: int, cap: int) -> int:
    """A phase's planned steps: those of its epochs, at most ``cap`` (0: no cap)."""
    return min(epoch_steps, cap) if cap else epoch_steps


def train_phase(model, opt, batches, phase: Phase, cfg: TargetConfig, device, log: list, on_log=None) -> dict:
    """Run optimisation steps over ``batches`` (an iterable of (inputs, targets[, weights, avoid, copy]) CPU tensors)
    until done; returns the phase's record, with the first step's time (compilation, with ``compile_layers``) and
    the throughput after it. Token counts and the loss's positions (:func:`kept_positions`) come from the host's
    tensors and CUDA copies are pinned and non-blocking, so the host builds the next batch while the device runs a
    step; it waits for the device only where a loss is logged."""
    import torch

    tokens = seen = first_seen = 0
    first_s = 0.0
    pin = device.type == "cuda"
    model.train()
    for inputs, targets, *extra in batches:
        if phase.progress() >= 1.0:
            break
        keep = kept_positions(targets)  # host tensors: no device sync
        tokens += keep.numel()
        seen += inputs.numel()
        weights, avoid, copy = (extra + [None, None, None])[:3]
        copy = copy if cfg.copy_margin_weight > 0 else None  # the hinge's mask crosses only when it is used
        inputs, targets, keep, weights, avoid, copy = [
            None if t is None else (t.pin_memory() if pin else t).to(device, non_blocking=True)
            for t in [inputs, targets, keep, weights, avoid, copy]]
        lr = phase.current_lr()
        if pin:  # a new step for compiled CUDA graphs (their outputs of the last step may be overwritten)
            torch.compiler.cudagraph_mark_step_begin()
        for group in opt.param_groups:
            group["lr"] = lr
        with bf16(device):
            loss = masked_loss(model, inputs, targets, weights, avoid, cfg.unlikelihood_weight, keep, copy,
                               cfg.copy_margin, cfg.copy_margin_weight)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        phase.step += 1
        if phase.step == 1:  # the first step holds the compilation, if any; loss.item() waits for the step (sync)
            loss.item()
            first_seen, first_s = seen, time.time() - phase.start
        if phase.step % cfg.log_every == 0 or phase.step == 1:
            entry = {"step": phase.step, "loss": round(loss.item(), 4), "lr": round(lr, 6),
                     "grad_norm": round(float(grad_norm), 3), "loss_tokens": tokens, "tokens_seen": seen,
                     "elapsed_s": round(time.time() - phase.start, 1)}
            log.append(entry)
            print(f"[{phase.name}] " + " ".join(f"{k}={v}" for k, v in entry.items()), flush=True)
            if on_log:
                on_log(phase.step)
    if phase.step:
        loss.item()  # waits for the last queued step (sync), so that the wall time holds it
    wall = time.time() - phase.start
    return {"steps": phase.step, "planned_steps": phase.steps, "time_budget_s": round(phase.time_s, 1),
            "loss_tokens": tokens, "tokens_seen": seen, "tokens_per_s": round(seen / max(wall, 1e-9)),
            "first_step_s": round(first_s, 3),
            "tokens_per_s_after_first_step": round((seen - first_seen) / max(wall - first_s, 1e-9)),
            "wall_s": round(wall, 1), "stopped_by": "time" if phase.step < phase.steps else "steps"}


def greedy_continuations(model, prefixes: list[list[int]], new_tokens: int, pad: int, stop: list[int],
                         device, half: bool = True) -> list[list[int]]:
    """``new_tokens`` greedy tokens after each of ``prefixes`` (``generate``, left padding, bf16 autocast on CUDA
    unless ``half`` is False; rows that stop early are filled after their stop token), in eval mode, the model left
    in train mode."""
    import torch

    width = max(len(x) for x in prefixes)
    ids = torch.full((len(prefixes), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, x in enumerate(prefixes):
        ids[i, width - len(x):], mask[i, width - len(x):] = torch.tensor(x), 1
    model.eval()
    with eager(), torch.no_grad(), bf16(device, half):
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=new_tokens,
                             min_new_tokens=1, do_sample=False, pad_token_id=pad, eos_token_id=stop)
    model.train()
    return out[:, width:].tolist()  # one host sync for the batch


def loop_batch(model, prefixes: list[list[int]], new_tokens: int, pad: int, stop: list[int], device,
               references: list[list[int]] | None = None, early_stop: int = 0, half: bool = True):
    """Greedy continuations of ``prefixes`` by ``model`` (``generate``, left padding, up to ``new_tokens`` each,
    cut before a stop token), and the batch that penalizes what repeats in them: ``(inputs, avoid, share,
    early)``, inputs prefix + continuation right-padded, avoid the continuation's token where it is predicted if it
    ends a 4-gram of new text (not in the prefix) repeated beyond the prefix's reference continuation
    (``references``; :func:`repeat_positions`), else -100; share: those tokens over all continuation tokens. With
    ``early_stop`` > 0 (and ``references``), a continuation that stops while its reference goes on for
    ``early_stop`` or more tokens past the stop has that stop token avoided where it was predicted (the end of a
    file cut short, or fewer new lines than asked); early: the share of continuations so stopped."""
    import torch

    conts, stops = [], []
    for i, row in enumerate(greedy_continuations(model, prefixes, new_tokens, pad, stop, device, half)):
        cut = next((j for j, t in enumerate(row) if t in stop), len(row))
        conts.append(row[:cut])
        early = early_stop > 0 and references and cut < len(row) and len(references[i]) - cut >= early_stop
        stops.append(row[cut] if early else None)
    seq_width = padded_width(max(len(x) + len(c) for x, c in zip(prefixes, conts)))
    inputs = torch.full((len(prefixes), seq_width), pad, dtype=torch.long)
    avoid = torch.full_like(inputs, -100)
    repeated = 0
    for i, (x, c) in enumerate(zip(prefixes, conts)):
        inputs[i, : len(x) + len(c)] = torch.tensor(x + c)
        for t in repeat_positions(c, 4, references[i] if references else (), x):
            avoid[i, len(x) + t - 1] = c[t]  # the position that predicts c[t]
            repeated += 1
        if stops[i] is not None:
            avoid[i, len(x) + len(c) - 1] = stops[i]  # the last token's position predicted the stop
    return (inputs, avoid, repeated / max(1, sum(map(len, conts))),
            sum(t is not None for t in stops) / max(1, len(stops)))


def supervised_rows(rows: list[tuple[list[int], int]], pad: int, attempted: int):
    """``(inputs, targets, share)`` of ``rows`` (token ids, the first supervised position): inputs the ids but the
    last, right-padded; targets the ids from that position on, at the positions that predict them (else -100);
    share: the rows over ``attempted``. ``(None, None, 0.0)`` without rows."""
    import torch

    if not rows:
        return None, None, 0.0
    seq_width = padded_width(max(len(r) for r, _ in rows))
    inputs = torch.full((len(rows), seq_width), pad, dtype=torch.long)  # (rows, width)
    targets = torch.full_like(inputs, -100)
    for k, (r, first) in enumerate(rows):
        inputs[k, : len(r) - 1] = torch.tensor(r[:-1])
        targets[k, first - 1: len(r) - 1] = torch.tensor(r[first:])
    return inputs, targets, len(rows) / attempted


def resync_batch(model, tokenizer, triples: list[tuple[str, str, str]], new_tokens: int, special: dict, device,
                 rng: random.Random, supervised: int = 256, copy_share: float = 0.0, half: bool = True):
    """The model's own new lines at one changed place per ``(before, request, after)``, then the answer after them:
    ``(inputs, targets, share)``. For a place where ``after`` inserts or replaces lines (a line diff), the prompt
    and the answer's lines before it are the prefix (cut at a token boundary); the model continues it greedily
    (up to ``new_tokens``) and its text is kept up to as many line ends as the place has new lines; the inputs are
    prefix + that text + the answer's lines after the place + end of turn, the targets the first ``supervised``
    tokens after the model's text (else -100): where a model that wrote the change in its own words must go back
    to copying the input, the step a derailed answer misses. With probability ``copy_share`` the place is instead
    one or two kept lines (the model should copy them; where it did not, the targets teach the way back).
    ``share``: the places whose continuation held that many line ends (the rest are left out)."""

    items = []
    for before, request, after in triples:
        b_lines, a_lines = before.splitlines(keepends=True), after.splitlines(keepends=True)
        ops = difflib.SequenceMatcher(None, b_lines, a_lines, autojunk=False).get_opcodes()
        places = [(j1, j2) for tag, _, _, j1, j2 in ops if tag in ("insert", "replace")]
        kept = [(j, j2) for tag, _, _, j1, j2 in ops if tag == "equal" for j in range(j1, j2)]  # (line, run end)
        if kept and copy_share and rng.random() < copy_share:
            j, end = rng.choice(kept)
            places = [(j, min(j + rng.choice((1, 2)), end))]
        if not places:
            continue
        j1, j2 = rng.choice(places)
        prompt = tokenizer.apply_chat_template(blazedit_messages(before, request), tokenize=False,
                                               add_generation_prompt=True)
        text = prompt + after
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        start = len(prompt) + sum(map(len, a_lines[:j1]))  # the place's first character
        cut = next(i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > start)  # the token holding it
        items.append((enc["input_ids"][:cut], text[: enc["offset_mapping"][cut][0]], start, j2 - j1,
                      "".join(a_lines[j2:])))
    if not items:
        return None, None, 0.0
    conts = greedy_continuations(model, [x[0] for x in items], new_tokens, special["pad"],
                                 [special["eot"], special["eos"]], device, half)
    rows = []
    for (_, head, start, lines, rest), cont in zip(items, conts):
        own = tokenizer.decode(cont, skip_special_tokens=True)
        skip = start - len(head)  # characters of the model's text before the place (the cut token's)
        ends = [i for i, c in enumerate(own) if c == "\n" and i >= skip]
        if len(ends) < lines:
            continue
        own = own[: ends[lines - 1] + 1]
        full = tokenizer(head + own + rest + EOT, add_special_tokens=False, return_offsets_mapping=True)
        first = next(i for i, (a, _) in enumerate(full["offset_mapping"]) if a >= len(head) + len(own))
        rows.append((full["input_ids"][: first + supervised], first))
    return supervised_rows(rows, special["pad"], len(items))


def drift_point(before: list[int], answer: list[int], output: list[int], margin: int = 8,
                min_run: int = 8) -> tuple[int, int, int, bool] | None:
    """Where ``output`` (the model's answer, token ids, cut before its stop) first leaves the copy of ``before`` at
    a token the reference ``answer`` copies: ``(i, j, stop, last)``, ``output[:j]`` the model's text up to there,
    ``before[i:stop]`` what the reference copies from there on (its copied run's rest) and ``last`` whether that
    run ends the reference; None if it never does. A departure is the end of a run of at least ``min_run`` tokens
    of ``output`` matching ``before`` (difflib's matching blocks; the end of ``output`` counts, a stop while the
    input goes on) whose next input token ``before[i]`` lies at least ``margin`` tokens inside a run the reference
    copies: a skipped, repeated or rewritten stretch, or an early end, away from the reference's changes."""
    stop = np.zeros(len(before) + 1, dtype=np.int64)  # (len(before) + 1,): the end of the reference's copied run
    # around each input position at least `margin` tokens inside it (0: none)
    last_run = -1
    for bi, bj, size in matching_blocks(before, answer)[:-1]:  # the last block is difflib's sentinel
        stop[bi + margin: max(bi + margin, bi + size - margin)] = bi + size  # (a negative end would wrap)
        if bj + size == len(answer):
            last_run = bi + size
    for bi, oj, size in matching_blocks(before, output)[:-1]:
        i, j = bi + size, oj + size
        if size >= min_run and i < len(before) and stop[i] and (j == len(output) or output[j] != before[i]):
            return i, j, int(stop[i]), int(stop[i]) == last_run
    return None


def skip_point(before: list[int], answer: list[int], output: list[int], margin: int = 8) -> tuple[int, int] | None:
    """Where ``output`` (the model's answer, token ids, cut before its stop) copies ``before`` through a place the
    reference ``answer`` changes: ``(j, aj)``, ``output[:j]`` the model's text up to the place and ``answer[aj:]``
    the reference from it, for the first such place of ``output``; None if it makes (or leaves) every change. A
    place is where a run the reference copies ends (difflib's matching blocks, but the run that ends both); the
    output copies through it when one of its copied runs holds at least ``margin`` input tokens on each side of it:
    an omitted change."""
    ref_blocks = matching_blocks(before, answer)[:-1]  # the last block is difflib's sentinel
    places = [(bi + size, bj + size) for bi, bj, size in ref_blocks
              if (bi + size, bj + size) != (len(before), len(answer))]
    found = [(oj + i - bo, aj) for bo, oj, size in matching_blocks(before, output)[:-1]
             for i, aj in places if bo + margin <= i <= bo + size - margin]
    return min(found) if found else None


DECISION_KINDS = ("drift", "skip")  # decision_batch: departures from the copy where the reference copies, omissions


def decision_batch(model, tokenizer, triples: list[tuple[str, str, str]], special: dict, device,
                   kinds: tuple[str, ...] = ("drift",), supervised: int = 64, max_len: int = 2048,
                   half: bool = True):
    """The model's own whole answers to ``triples``' ``(before, request, after)`` prompts (greedy, up to the gate's
    cap + 16 tokens), and, at the first wrong copy decision of ``kinds`` in each, what the reference does from
    there, at most ``supervised`` tokens: ``"drift"``, where the answer leaves the copy where the reference copies
    (:func:`drift_point`), the input the reference copies from there (and the end of turn where the reference ends
    with it); ``"skip"``, where the answer copies through a place the reference changes (:func:`skip_point`), the
    reference from that place (its change, then what follows, and the end of turn where it ends within
    ``supervised``). ``(inputs, targets, share)``: inputs the prompt + the model's text up to there + those
    tokens, targets those tokens (else -100), share the answers with such a decision. It teaches the decisions from
    the states a greedy answer reaches, which teacher forcing on the references never shows."""
    if not kinds or set(kinds) - set(DECISION_KINDS):
        raise ValueError(f"kinds must be some of {DECISION_KINDS}, got {kinds!r}")
    stop_ids = [special["eot"], special["eos"]]
    items = []
    for before, request, after in triples:
        text = tokenizer.apply_chat_template(blazedit_messages(before, request), tokenize=False,
                                             add_generation_prompt=True)
        prompt, b, a = (tokenizer.encode(t, add_special_tokens=False) for t in (text, before, after))
        items.append((prompt, b, a, min(cap_of(len(a)) + 16, max_len - len(prompt))))
    items = [x for x in items if x[3] > 0]
    if not items:
        return None, None, 0.0
    outputs = greedy_continuations(model, [x[0] for x in items], max(x[3] for x in items), special["pad"], stop_ids,
                                   device, half)
    rows = []
    for (prompt, b, a, cap), out in zip(items, outputs):
        out = out[:cap]
        out = out[: next((k for k, t in enumerate(out) if t in stop_ids), len(out))]
        taught = []  # (output position, the tokens taught there)
        if "drift" in kinds and (point := drift_point(b, a, out)) is not None:
            i, j, stop, last = point
            end = [special["eot"]] if last and stop - i < supervised else []  # the reference ends with this run
            taught.append((j, b[i: min(stop, i + supervised)] + end))
        if "skip" in kinds and (point := skip_point(b, a, out)) is not None:
            j, aj = point
            taught.append((j, (a[aj:] + [special["eot"]])[:supervised]))
        if taught:
            j, tokens = min(taught, key=lambda x: x[0])
            rows.append((prompt + out[:j] + tokens, len(prompt) + j))
    return supervised_rows(rows, special["pad"], len(items))


def loop_repair(model, opt, examples: list[tuple], cfg: TargetConfig, special: dict, device, log: list,
                after_step=None, tokenizer=None, triples: list[tuple[str, str, str]] = ()) -> dict:
    """Repair steps of an edit-tuned target, for ``cfg.repair_time_s`` seconds, each beside an edit-tuning batch
    that keeps the answers' likelihood. ``cfg.repair_mode`` picks their terms: ``"loops"`` continues
    ``cfg.repair_batch`` answers greedily from one of their changed places (the teacher-forced answer before it)
    for ``cfg.repair_new_tokens`` tokens and lowers by unlikelihood (weight ``cfg.repair_weight``) every token that
    repeats a 4-gram of new text (one the prompt and answer so far do not have) more often than the rest of the
    answer has it (:func:`loop_batch`); ``"resync"`` trains (weight ``cfg.resync_weight``) on the answer after
    the model's own new lines at a changed place of ``cfg.repair_batch`` of ``triples`` (:func:`resync_batch`,
    with ``tokenizer``); ``"both"`` takes the two terms in every step; ``"drift"`` trains (weight
    ``cfg.resync_weight``) on the input's continuation where the model's own whole answers to ``cfg.repair_batch``
    of ``triples`` leave the copy away from the reference's changes, ``"skip"`` on the reference's change where
    they copy through a place it changes and ``"decisions"`` on the first of the two in each answer
    (:func:`decision_batch`). Logs each term's share
    (of repeated tokens in the continuations before the update; of places used; of answers that leave the copy).
    ``after_step(steps)``, when given, is called after every step; its time does not count against the budget."""
    import torch

    rng = random.Random(cfg.seed + 5)
    # the last changed position is the end of turn
    pool = [e for e in examples if len(e[2]) > 1 and e[1] + e[2][-2] + cfg.repair_new_tokens <= cfg.sft_max_len]
    anchors = sft_batches(examples, cfg.sft_batch_tokens, special["pad"], cfg.seed + 50, cfg.change_weight,
                          cfg.decision_weight, cfg.ambiguity_weight)
    stop = [special["eot"], special["eos"]]
    start, steps, paused = time.time(), 0, 0.0
    loops, resync = cfg.repair_mode in ("loops", "both"), cfg.repair_mode in ("resync", "both")
    answers = ANSWER_MODES.get(cfg.repair_mode)  # the decision kinds repaired on whole answers, or None
    if (resync or answers) and (tokenizer is None or not triples):
        raise ValueError(f"repair_mode {cfg.repair_mode!r} needs the tokenizer and the repair set's (before, "
                         "request, after)")
    shares = {k: [] for k, on in (("repeated_share", loops), ("resync_share", resync),
                                  (f"{cfg.repair_mode}_share", answers),
                                  ("early_stop_share", loops and cfg.repair_early_stop > 0)) if on}
    while ((pool if loops else triples) and time.time() - start - paused < cfg.repair_time_s
           and not 0 < cfg.repair_steps <= steps):
        synced = repeats = None  # (inputs, targets, share), (inputs, avoided tokens, share)
        if answers:  # the copy decisions of the model's own answers
            picked = rng.sample(triples, min(cfg.repair_batch, len(triples)))
            synced = decision_batch(model, tokenizer, picked, special, device, answers, max_len=cfg.sft_max_len,
                                    half=not cfg.repair_fp32)
        if resync:  # the answer after the model's own new lines
            picked = rng.sample(triples, min(cfg.repair_batch, len(triples)))
            synced = resync_batch(model, tokenizer, picked, cfg.repair_new_tokens, special, device, rng,
                                  copy_share=cfg.repair_copy_share, half=not cfg.repair_fp32)
        if loops:  # the model's own repeats
            picked = rng.sample(pool, min(cfg.repair_batch, len(pool)))
            cuts = [e[1] + rng.choice(e[2][:-1]) for e in picked]  # up to a changed answer position
            prefixes = [e[0][:c] for e, c in zip(picked, cuts)]
            references = [e[0][c:-1] for e, c in zip(picked, cuts)]
            repeats = loop_batch(model, prefixes, cfg.repair_new_tokens, special["pad"], stop, device, references,
                                 cfg.repair_early_stop, half=not cfg.repair_fp32)
        batch = next(anchors, None)
        if batch is None:
            anchors = sft_batches(examples, cfg.sft_batch_tokens, special["pad"], cfg.seed + 51 + steps,
                                  cfg.change_weight, cfg.decision_weight, cfg.ambiguity_weight)
            batch = next(anchors)
        x, y, w, a, c = (t.to(device) for t in batch)
        for group in opt.param_groups:
            group["lr"] = cfg.repair_lr
        with bf16(device, not cfg.repair_fp32):
            loss = masked_loss(model, x, y, w, a, cfg.unlikelihood_weight, copy=c, copy_margin=cfg.copy_margin,
                               copy_margin_weight=cfg.copy_margin_weight)
            if synced is not None and synced[0] is not None:
                loss = loss + cfg.resync_weight * masked_loss(model, synced[0].to(device), synced[1].to(device))
            if repeats is not None and bool((repeats[1] >= 0).any()):  # CPU tensors: no device sync
                loss = loss + cfg.repair_weight * unlikelihood_loss(model, repeats[0].to(device),
                                                                    repeats[1].to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps += 1
        for kind, batch_ in ((f"{cfg.repair_mode}_share" if answers else "resync_share", synced),
                             ("repeated_share", repeats)):
            if batch_ is not None:
                shares[kind].append(round(batch_[2], 4))
        if "early_stop_share" in shares:
            shares["early_stop_share"].append(round(repeats[3], 4))
        entry = {"step": steps, "loss": round(loss.item(), 4), **{k: v[-1] for k, v in shares.items()},
                 "elapsed_s": round(time.time() - start - paused, 1)}
        log.append(entry)
        print("[repair] " + " ".join(f"{k}={v}" for k, v in entry.items()), flush=True)
        if after_step is not None:
            t = time.time()
            after_step(steps)
            paused += time.time() - t
    out = {"steps": steps, "wall_s": round(time.time() - start - paused, 1), "mode": cfg.repair_mode}
    for kind, values in shares.items():
        out.update({f"{kind}_first": values[:3], f"{kind}_last": values[-3:]})
    return out


def load_target(cfg: TargetConfig, init: Path | None, n_vocab: int, special: dict):
    """The model to train: ``init``'s weights in fp32, or a fresh one of ``cfg``'s shape."""
    if init is None:
        return build_model(cfg, n_vocab, special)
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32, local_files_only=True)
    if model.config.vocab_size != n_vocab:
        raise ValueError(f"--init model's vocabulary ({model.config.vocab_size}) != the tokenizer's ({n_vocab})")
    return model


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "tokenizer_training.json")


# ``target`` options that set the model's shape, from scratch only: {option: what it sets}
SHAPE_OPTIONS = {"num_layers": "decoder layers", "num_heads": "attention (query) heads",
                 "num_kv_heads": "key/value heads", "intermediate_size": "MLP width"}
# ``target`` options that override a TargetConfig field of the same name when given
CONFIG_OPTIONS = ("change_weight", "decision_weight", "ambiguity_weight", "sft_epochs", "sft_steps", "sft_time_s",
                  "deadline_s", "sft_max_len", "sft_lr", "sft_replay", "pretrain_time_s", "pretrain_epochs",
                  "pretrain_steps", "pretrain_chars", "span_share", "real_epochs", "synthetic_examples",
                  "unlikelihood_weight", "copy_margin_weight", "copy_margin", "repeat_share", "repeat_max",
                  "repair_time_s", "repair_batch", "repair_new_tokens", "repair_lr", "repair_weight", "repair_steps",
                  "repair_mode", "repair_copy_share", "resync_weight", "repair_early_stop", "repair_fp32",
                  "compile_layers", "seed", "rename_share", *SHAPE_OPTIONS)


def target_config(args) -> TargetConfig:
    """The ``target`` command's config: defaults, then the fine-tuning and smoke presets, then given options."""
    overrides = {**(FINETUNE if args.init else {}), **((SMOKE_FINETUNE if args.init else SMOKE) if args.smoke else {})}
    overrides.update({name: getattr(args, name) for name in CONFIG_OPTIONS if getattr(args, name) is not None})
    return replace(TargetConfig(), **overrides, change_request=args.change_request)


def cmd_target(args) -> None:
    import torch
    from transformers import AutoTokenizer

    cfg = target_config(args)
    t0, started = time.time(), run_info()  # the code and machine as the run starts (the tree may change meanwhile)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    out = args.out or (Path("/tmp/tiny-coder-smoke") if args.smoke else MODEL_DIR)
    out.mkdir(parents=True, exist_ok=True)
    tok_dir = args.tokenizer or args.init or MODEL_DIR
    tokenizer = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    special = special_ids(tokenizer)

    # data
    rows = load_edits()
    train_rows, eval_rows = split_edits(rows)
    train_rows, val_rows = split_validation(train_rows, cfg.validation_repos)
    split = eval_split_record(rows)
    if args.smoke:
        train_rows = [r for r in train_rows if len(r["before"]) <= 1500][:SMOKE_REAL_ROWS]
    write_atomic(out / "eval_split.json", json.dumps(split, indent=1) + "\n")
    pre, edit_sources = pretraining_data(cfg, tokenizer, special)
    val_seqs, train_seqs, data_stats = pre["val_seqs"], pre["train_seqs"], pre["stats"]
    eval_examples = [e for e in eval_examples_of(cfg, tokenizer, special, eval_rows) if len(e[0]) <= cfg.sft_max_len]
    key = edit_key(cfg, tok_dir, train_rows, edit_sources)

    # edit-tuning examples (repeated lines added, cut to ``sft_max_len``) and repair rows
    edits = cached_edit_data(args.data_cache, cfg, key,
                             lambda: edit_data(cfg, tokenizer, special, train_rows, edit_sources))
    examples = edits["examples"]
    if cfg.repeat_share > 0:
        newline_ids = {i for t, i in tokenizer.get_vocab().items()
                       if "\n" in tokenizer.convert_tokens_to_string([t])}
        rng = random.Random(cfg.seed + 3)
        examples = [(with_repeated_line(e, newline_ids, rng, cfg.repeat_max) or e)
                    if rng.random() < cfg.repeat_share else e for e in examples]
    examples = [e for e in examples if len(e[0]) <= cfg.sft_max_len]
    data_stats.update(
        sft_real_rows=len(train_rows), sft_real_repos=sorted({r["repo"] for r in train_rows}),
        sft_train_ids_sha256=hashlib.sha256("\n".join(sorted(r["id"] for r in train_rows)).encode()).hexdigest(),
        eval_rows=len(eval_rows), eval_repos=list(EVAL_REPOS), validation_rows=len(val_rows),
        validation_repos=list(cfg.validation_repos), synthetic_examples=len(edits["synthetic"]),
        synthetic_kinds=dict(Counter(k for kinds, _ in edits["synthetic"] for k in kinds)),
        synthetic_median_char_edit_norm=float(np.median([n for _, n in edits["synthetic"]]))
        if edits["synthetic"] else None,
        example_real_request=edits["example_real_request"],
        data_cache=edits["data_cache"],
        sft_examples=len(examples), sft_tokens=int(sum(len(e[0]) for e in examples)),
        sft_answer_tokens=int(sum(len(e[0]) - e[1] for e in examples)))
    sft_rows = edits.get("sft_rows")

    t_data = time.time() - t0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # after the worker pool has forked
    print(f"data ready in {t_data:.0f}s: "
          + json.dumps({k: v for k, v in data_stats.items() if k not in ("sft_real_repos", "example_real_request")}),
          flush=True)

    # model and optimiser
    model = load_target(cfg, args.init, len(tokenizer), special).to(device)
    if cfg.compile_layers:
        compile_layers(model, args.compile_backend)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters on {device}" + (f", from {args.init}" if args.init else ""),
          flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]

    def optimizer(lr):
        return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(cfg.beta1, cfg.beta2),
                                 fused=device.type == "cuda")

    def val_loss(seq_rows: np.ndarray | None = None, sft: list | None = None) -> float | tuple[float, float]:
        """Mean token loss on ``seq_rows``; on ``sft`` examples (answer loss, loss at the decision positions)."""
        model.eval()
        losses, decided = [], []
        with eager(), torch.no_grad(), bf16(device):
            if seq_rows is not None:
                for i in range(0, len(seq_rows), 8):
                    x = torch.from_numpy(seq_rows[i:i + 8]).long().to(device)
                    losses.append(masked_loss(model, x[:, :-1], x[:, 1:]).item())
            else:  # weights 1 on answer tokens, 2 on decision positions: two unweighted means from one pass
                for x, y, w, *_ in sft_batches(sft, cfg.sft_batch_tokens, special["pad"], cfg.seed, 1.0, 2.0):
                    x, y, w = x.to(device), y.to(device), w.to(device)
                    keep = y != -100
                    logits = model.lm_head(model.model(input_ids=x, use_cache=False).last_hidden_state[keep])
                    ce = torch.nn.functional.cross_entropy(logits.float(), y[keep], reduction="none")
                    losses.append(ce.mean().item())
                    decided.append(ce[w[keep] == 2.0].mean().item())  # every answer has its end-of-turn
        model.train()
        mean = lambda v: round(float(np.mean(v)), 4) if v else float("nan")  # noqa: E731
        return mean(losses) if seq_rows is not None else (mean(losses), mean(decided))

    log = {"pretrain": [], "sft": [], "val": [], "repair": []}

    def record_val(phase: str, step: int) -> None:
        answer, decision = val_loss(sft=eval_examples)
        entry = {"phase": phase, "step": step, "eval_edit_answer_loss": answer, "eval_decision_loss": decision}
        if val_seqs is not None:
            entry["code_val_loss"] = val_loss(seq_rows=val_seqs)
        log["val"].append(entry)
        print("[val] " + json.dumps(entry), flush=True)

    record_val("init", 0)
    pre_info = {"skipped": f"fine-tuned from {args.init}"} if args.init else None
    bs = max(1, cfg.pretrain_batch_tokens // cfg.pretrain_seq_len)

    def pre_batches(epochs: int | None, seed: int):
        """Pretraining rows in batches of ``bs``, each epoch in a new order (``epochs`` None: without end);
        (inputs, targets) CPU tensors."""
        for e in range(epochs) if epochs is not None else itertools.count():
            order = np.random.default_rng(seed + e).permutation(len(train_seqs))
            for i in range(0, len(order) - bs + 1, bs):
                x = torch.from_numpy(train_seqs[np.sort(order[i:i + bs])]).long()
                yield x[:, :-1], x[:, 1:]

    if pre_info is None:  # (a) pretraining
        left = cfg.deadline_s - cfg.reserve_s - (time.time() - t0)
        phase = Phase("pretrain", step_budget(cfg.pretrain_epochs * (len(train_seqs) // bs), cfg.pretrain_steps),
                      max(5.0, min(cfg.pretrain_time_s, cfg.pretrain_share * left)), cfg.pretrain_lr,
                      cfg.pretrain_warmup_steps, cfg.min_lr_frac)
        pre_info = train_phase(model, optimizer(cfg.pretrain_lr), pre_batches(cfg.pretrain_epochs, cfg.seed + 1),
                               phase, cfg, device, log["pretrain"],
                               on_log=lambda s: s % (cfg.log_every * 10) == 0 and record_val("pretrain", s))
        pre_info["epochs"] = round(pre_info["steps"] / max(1, len(train_seqs) // bs), 2)
        record_val("pretrain_end", pre_info["steps"])
    # (b) edit tuning, with every ``every``-th step a pretraining batch when replay is on
    per_epoch = len(sft_batch_rows(examples, cfg.sft_batch_tokens, cfg.seed + 2))
    batches = itertools.chain.from_iterable(
        sft_batches(examples, cfg.sft_batch_tokens, special["pad"], cfg.seed + 2 + e, cfg.change_weight,
                    cfg.decision_weight, cfg.ambiguity_weight)
        for e in range(cfg.sft_epochs))  # each epoch reshuffled
    every = round(1 / cfg.sft_replay) if cfg.sft_replay > 0 and val_seqs is not None and len(train_seqs) >= bs else 0
    if every:
        batches = with_replay(batches, pre_batches(None, cfg.seed + 101), every)
    left = cfg.deadline_s - cfg.reserve_s - cfg.repair_time_s - (time.time() - t0)
    steps = per_epoch * cfg.sft_epochs
    phase = Phase("sft", step_budget(steps + (steps // (every - 1) if every else 0), cfg.sft_steps),
                  max(5.0, min(cfg.sft_time_s, left)),
                  cfg.sft_lr, cfg.sft_warmup_steps, 0.0)
    sft_info = train_phase(model, optimizer(cfg.sft_lr), batches, phase, cfg, device, log["sft"],
                           on_log=lambda s: s % (cfg.log_every * 10) == 0 and record_val("sft", s))
    sft_info.update(replay_every=every,
                    epochs=round(phase.step * (1 - 1 / every if every else 1) / max(per_epoch, 1), 2))
    record_val("sft_end", sft_info["steps"])
    repair_info = None
    if cfg.repair_time_s > 0:  # (c) loop repair
        repair_info = loop_repair(model, optimizer(cfg.repair_lr), examples, cfg, special, device, log["repair"],
                                  tokenizer=tokenizer, triples=sft_rows)
        record_val("repair_end", repair_info["steps"])

    # save (bf16), quality gate, records
    model = save_target(model, out, tok_dir, special, device)

    def write_record(gate: dict) -> dict:
        record = {"config": asdict(cfg), "smoke": args.smoke, "init": str(args.init) if args.init else None,
                  "parameters": n_params,
                  "safetensors_bytes": sum(p.stat().st_size for p in out.glob("*.safetensors")),
                  "data": data_stats, "pretrain": pre_info, "sft": sft_info, "repair": repair_info,
                  "data_prep_s": round(t_data, 1),
                  "wall_s": round(time.time() - t0, 1), "special_token_ids": special,
                  "blazedit_prompt": BLAZEDIT_TEMPLATE, "run_info": started,
                  "quality_gate": {k: v for k, v in gate.items() if k != "samples"}}
        write_atomic(out / "training_config.json", json.dumps(record, indent=1) + "\n")
        write_atomic(out / "train_log.json", json.dumps({**log, "quality_gate_samples": gate.get("samples", [])},
                                                        indent=0) + "\n")
        return record

    if args.no_gate:
        record = write_record({"skipped": "--no-gate"})
    else:
        write_record({"error": "not run yet"})  # kept if the gate fails
        with eager():
            record = write_record(run_gate(model, tokenizer, eval_rows, cfg, special))
    print(json.dumps({k: v for k, v in record.items() if k not in ("config", "blazedit_prompt", "data")}, indent=1))


def save_target(model, out: Path, tok_dir, special: dict, device):
    """``model`` saved to ``out`` in bf16 (14 MB shards) with its generation config and ``tok_dir``'s tokenizer
    files; returned in eval mode, in bf16 on the GPU and fp32 on the CPU (the gate's dtypes)."""
    import torch

    model = model.to(torch.bfloat16).eval()
    model.generation_config.eos_token_id = [special["eot"], special["eos"]]
    model.generation_config.bos_token_id = special["bos"]
    model.generation_config.pad_token_id = special["pad"]
    model.generation_config.do_sample = False
    model.save_pretrained(out, max_shard_size="14MB")
    for name in TOKENIZER_FILES:
        if (Path(tok_dir) / name).is_file() and Path(tok_dir).resolve() != out.resolve():
            shutil.copyfile(Path(tok_dir) / name, out / name)
    return as_saved(model, device)


REPAIR_OPTIONS = ("repair_time_s", "repair_steps", "repair_batch", "repair_new_tokens", "repair_lr", "repair_weight",
                  "repair_mode", "repair_copy_share", "resync_weight", "repair_early_stop", "repair_fp32",
                  "gate_prompts", "sft_batch_tokens", "sft_max_len", "unlikelihood_weight", "decision_weight",
                  "span_share", "copy_margin_weight", "copy_margin", "seed")


# ``repair``'s defaults: a small repair set (CPU-sized anchor batches), gates of 64 prompts (a 32-prompt gate's
# Spearman interval is about +-0.25 wide: too wide to choose a step on) without a time limit
REPAIR_DEFAULTS = dict(repair_time_s=600.0, sft_max_len=2048, sft_batch_tokens=16384, decision_weight=4.0,
                       unlikelihood_weight=1.0, gate_time_s=3000.0, gate_prompts=64)


# ``repair --smoke``: one short step on a tiny repair set, a two-prompt gate (for testing the command on a CPU)
SMOKE_REPAIR = dict(repair_steps=1, repair_batch=2, repair_new_tokens=8, sft_max_len=1024, sft_batch_tokens=2048,
                    gate_prompts=2, gate_max_before_chars=400, gate_max_new_frac=1.0, gate_time_s=30.0)
SMOKE_REPAIR_SET = dict(real_rows=4, synthetic_sources=8, synthetic_edits=8, max_before_chars=1200)


def repair_config(args) -> TargetConfig:
    """The ``repair`` command's config: defaults, then :data:`REPAIR_DEFAULTS` (and :data:`SMOKE_REPAIR` with
    ``--smoke``), then the given options."""
    given = {n: getattr(args, n) for n in REPAIR_OPTIONS if getattr(args, n) is not None}
    smoke = SMOKE_REPAIR if args.smoke else {}
    return replace(TargetConfig(), **{**REPAIR_DEFAULTS, **smoke, **given})


def cmd_repair(args) -> None:
    """Loop repair (:func:`loop_repair`) of an edit-tuned target on a small edit-tuning set (real training edits
    and synthetic edits of files of at most ``--max-before-chars``), then the quality gate; saved as ``target``
    saves (GPU or CPU)."""
    import torch
    from transformers import AutoTokenizer

    t0, started = time.time(), run_info()  # as the run starts
    cfg = repair_config(args)
    if args.smoke:
        for name, value in SMOKE_REPAIR_SET.items():
            setattr(args, name, value)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.init, local_files_only=True)
    special = special_ids(tokenizer)
    train_rows, eval_rows = split_edits(load_edits())
    train_rows, val_rows = split_validation(train_rows, cfg.validation_repos)
    real = [r for r in train_rows if len(r["before"]) < args.max_before_chars][: args.real_rows]
    _, sources, _ = pretraining_texts(replace(cfg, pretrain_chars=0, synthetic_max_chars=args.max_before_chars,
                                              synthetic_sources=args.synthetic_sources))
    synth = [s for i in range(args.synthetic_edits) if (s := synthetic_edit(
        (i, sources[i % len(sources)], sources[(7919 * i + 1) % len(sources)], cfg.change_request, cfg.max_places,
         cfg.span_share)))]
    triples = [(r["before"], change_request(r["before"], r["after"], r["instruction"], cfg.change_request,
                                            cfg.max_places), r["after"]) for r in real]
    triples += [(s["before"], s["instruction"], s["after"]) for s in synth]
    examples = [e for e in sft_examples(tokenizer, triples, special["eot"]) if len(e[0]) < args.max_example_tokens]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_target(cfg, args.init, len(tokenizer), special).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.repair_lr, betas=(cfg.beta1, cfg.beta2),
                            weight_decay=cfg.weight_decay)
    log = {"repair": []}
    select = None
    if args.gate_every:  # selection rows: the validation split, else training edits outside the repair set; never
        # the evaluation split
        used = {r["id"] for r in real}
        rows, what = ((val_rows, f"validation split {list(cfg.validation_repos)}") if val_rows else
                      ([r for r in train_rows if r["id"] not in used], "training split, outside the repair set"))
        select = CheckpointSelection(tokenizer, rows, cfg, special, device, args.gate_every, args.gate_after, what)
        select(model, 0)
    info = loop_repair(model, opt, examples, cfg, special, device, log["repair"],
                       None if select is None else lambda steps: select(model, steps), tokenizer, triples)
    if select is not None:
        select(model, info["steps"], last=True)
        model.load_state_dict(select.best_state)
    args.out.mkdir(parents=True, exist_ok=True)
    model = save_target(model, args.out, args.init, special, device)
    gate = run_gate(model, tokenizer, eval_rows, cfg, special)
    record = {"config": asdict(cfg), "smoke": args.smoke, "init": str(args.init), "repair": info,
              "selection": None if select is None else select.record(),
              "data": {"real_rows": len(real), "synthetic_edits": len(synth), "examples": len(examples),
                       **{k: getattr(args, k) for k in ("max_before_chars", "max_example_tokens", "real_rows",
                                                         "synthetic_sources", "synthetic_edits")}},
              "wall_s": round(time.time() - t0, 1), "run_info": started,
              "quality_gate": {k: v for k, v in gate.items() if k != "samples"}}
    write_atomic(args.out / "repair_config.json", json.dumps(record, indent=1) + "\n")
    write_atomic(args.out / "repair_log.json", json.dumps({**log, "quality_gate_samples": gate["samples"]}) + "\n")


def special_ids(tokenizer) -> dict:
    """The zoo tokenizer's special token ids by role (``bos``, ``eos``, ``pad``, ``eot``: the end of a turn)."""
    return {"bos": tokenizer.bos_token_id, "eos": tokenizer.eos_token_id, "pad": tokenizer.pad_token_id,
            "eot": tokenizer.convert_tokens_to_ids(EOT)}


def cmd_gate(args) -> None:
    """The quality gate on a saved target, its weights as saved (bf16 on the GPU; fp32 compute on the CPU), on
    ``--prompts`` prompts of the validation or the evaluation split; written to ``--out`` with the gate's samples."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = run_info()  # as the gate starts
    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = as_saved(AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True), device).to(device)
    cfg = replace(TargetConfig(), gate_prompts=args.prompts, gate_time_s=args.time_s,
                  max_position_embeddings=model.config.max_position_embeddings)
    rows = split_rows(load_edits(), args.rows, cfg.validation_repos)
    gate = run_gate(model, tokenizer, rows, cfg, special_ids(tokenizer))
    record = {"model": str(args.model), "rows": args.rows,
              "repos": list(cfg.validation_repos if args.rows == "validation" else EVAL_REPOS), "device": str(device),
              "command": f"python -m experiments.train_zoo gate --model {args.model} --rows {args.rows} --prompts "
                         f"{args.prompts} --out {args.out}", "run_info": started, "quality_gate": gate}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps(record, indent=1) + "\n")


def cmd_compare_gates(args) -> None:
    """Prints :func:`~experiments.zoo_gate.compare_gates` of the two records (one JSON line)."""
    print(json.dumps(args.comparison))


def cmd_split(args) -> None:
    record = eval_split_record(load_edits())
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    write_atomic(MODEL_DIR / "eval_split.json", json.dumps(record, indent=1) + "\n")
    print(f"{record['n']} evaluation rows ({', '.join(record['repos'])}), {record['n_train']} training rows")


REPAIR_HELP = {
    "repair_time_s": "seconds of repair (--repair-mode: its terms)",
    "repair_steps": "most repair steps (0: the time budget alone)",
    "repair_batch": "greedy continuations per repair step",
    "repair_new_tokens": "tokens per repair continuation",
    "repair_lr": "repair learning rate",
    "repair_weight": "loops, both: weight of the repeats' unlikelihood",
    "repair_mode": "loops: unlikelihood of greedy repeats; resync: the answer after the model's own new lines; "
                   "both: the two in every step; drift: the input's continuation where the model's own whole "
                   "answers leave the copy away from the changes; skip: the reference's change where they copy "
                   "through it; decisions: the first of the two in each answer",
    "repair_copy_share": "resync, both: share of its places that are kept lines (where the model should copy)",
    "resync_weight": "resync, both, drift, skip, decisions: weight of the loss after the model's own text",
    "repair_early_stop": "loops, both: also lower a stop this many or more tokens before the reference's end "
                         "(0: never)",
    "repair_fp32": "repair in fp32 on a GPU too (no bf16 autocast; the arithmetic of a repair on the CPU)",
}


def add_repair_options(parser, defaults: dict | None = None) -> None:
    """The loop repair options (:data:`REPAIR_HELP`), typed as :class:`TargetConfig`'s fields; the defaults shown
    are its own or ``defaults``'."""
    for name, text in REPAIR_HELP.items():
        default = (defaults or {}).get(name, getattr(TargetConfig(), name))
        if isinstance(default, bool):  # a switch
            parser.add_argument("--" + name.replace("_", "-"), action="store_true", default=None, help=text)
            continue
        parser.add_argument("--" + name.replace("_", "-"), type=type(getattr(TargetConfig(), name)), default=None,
                            help=f"{text} (default {default})",
                            **({"choices": REPAIR_MODES} if name == "repair_mode" else {}))


def parse_args(argv: list[str] | None = None, paths: bool = True) -> argparse.Namespace:
    """The command's options, checked before any work; with ``paths`` also the model folders it reads and the
    folders and files it writes (False: the options alone, as a recorded command line is read back)."""
    parser = Parser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("target", help="pretrain + edit-tune the tiny-coder target, then run the quality gate")
    p.add_argument("--out", type=Path, default=None, help="model folder (default hybridsd/models/tiny-coder)")
    p.add_argument("--init", type=Path, default=None,
                   help="fine-tune this model folder (no pretraining) instead of training from scratch")
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer folder (default: --init, else tiny-coder)")
    p.add_argument("--change-request", choices=CHANGE_REQUESTS, default="located",
                   help="located: where and how much changes (hybridsd.edit_requests); subject: the subject alone")
    p.add_argument("--change-weight", type=float, default=None,
                   help="loss weight of the answer tokens where the edit departs from a copy (default 1)")
    p.add_argument("--decision-weight", type=float, default=None,
                   help="loss weight of the answer tokens where it leaves or resumes the copy, and its end (default 1)")
    p.add_argument("--ambiguity-weight", type=float, default=None,
                   help="loss weight of the answer's copies whose context recurs in the prompt with another "
                   "continuation, that continuation avoided (default 0: neither)")
    p.add_argument("--copy-margin-weight", type=float, default=None,
                   help="weight of the hinge on the copied token's logit margin at the answer's copy positions "
                   "(default 0: none)")
    p.add_argument("--copy-margin", type=float, default=None,
                   help="the logit margin that hinge asks of the copied token over every other (default 2)")
    p.add_argument("--sft-epochs", type=int, default=None, help="passes over the edit-tuning examples")
    p.add_argument("--sft-steps", type=int, default=None,
                   help="edit-tuning steps, at most (replay steps included; default: the epochs')")
    p.add_argument("--sft-time-s", type=float, default=None, help="edit-tuning time budget in seconds")
    p.add_argument("--sft-max-len", type=int, default=None,
                   help="longest edit-tuning example in tokens (prompt + answer); longer ones are left out")
    p.add_argument("--sft-lr", type=float, default=None, help="edit-tuning peak learning rate")
    p.add_argument("--pretrain-time-s", type=float, default=None,
                   help="pretraining time budget in seconds (from scratch only; also at most 55%% of the time left)")
    p.add_argument("--pretrain-epochs", type=int, default=None, help="passes over the pretraining corpus, at most")
    p.add_argument("--pretrain-steps", type=int, default=None, help="pretraining steps, at most (default: the epochs')")
    p.add_argument("--pretrain-chars", type=int, default=None,
                   help="size of the code corpus in characters (pretraining; with --init the replay corpus)")
    p.add_argument("--sft-replay", type=float, default=None,
                   help="share of edit-tuning steps that are code-pretraining batches (0: none)")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="wall time from start by which training ends (the gate follows)")
    p.add_argument("--span-share", type=float, default=None,
                   help="share of synthetic edits that are span edits at random places (default 0.5)")
    p.add_argument("--unlikelihood-weight", type=float, default=None,
                   help="weight of an unlikelihood term against copying an earlier occurrence inside new text (0)")
    p.add_argument("--repeat-share", type=float, default=None,
                   help="share of examples with an answer line repeated in the input, its targets ignored (0)")
    p.add_argument("--repeat-max", type=int, default=None, help="most repeats of that line (default 2)")
    add_repair_options(p)
    p.add_argument("--real-epochs", type=int, default=None, help="copies of the real edits among the examples")
    p.add_argument("--synthetic-examples", type=int, default=None, help="synthetic edits made for edit tuning")
    p.add_argument("--compile-layers", action="store_const", const=True, default=None,
                   help="torch.compile each decoder layer for the training steps (evaluation and generation eager)")
    p.add_argument("--compile-backend", default="inductor", help=argparse.SUPPRESS)  # tests: aot_eager
    p.add_argument("--rename-share", type=float, default=None,
                   help="share of the edit-tuning edits whose file's own names are renamed (default 0)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the data's sampling, the batch order and the initialisation (default 0)")
    shape = TargetConfig()
    for name, what in SHAPE_OPTIONS.items():
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None,
                       help=f"{what} of a target trained from scratch (default {getattr(shape, name)})")
    p.add_argument("--no-gate", action="store_true",
                   help="no quality gate at the end (a stage of a lineage whose last stage is gated)")
    p.add_argument("--data-cache", type=Path, default=None,
                   help="a folder keeping the prepared edit data (edit_key: the edit settings, code, tokenizer, rows "
                        "and the synthetic edits' source files): a later call with the same key loads it, cut to "
                        "its number of synthetic edits")
    p.add_argument("--smoke", action="store_true", help="tiny data and budgets, for testing the script on a CPU")
    p.set_defaults(func=cmd_target)
    r = sub.add_parser("repair", help="loop repair of an edit-tuned target, then the quality gate")
    r.add_argument("--init", type=Path, required=True, help="the target's model folder")
    r.add_argument("--out", type=Path, required=True, help="where the repaired target goes")
    r.add_argument("--max-before-chars", type=int, default=2500, help="longest input file of the repair set")
    r.add_argument("--max-example-tokens", type=int, default=1800, help="longest repair-set example (tokens)")
    r.add_argument("--real-rows", type=int, default=150, help="real training edits in the repair set")
    r.add_argument("--synthetic-sources", type=int, default=200, help="files the synthetic edits are made from")
    r.add_argument("--synthetic-edits", type=int, default=300, help="synthetic edits attempted")
    add_repair_options(r, REPAIR_DEFAULTS)
    for name in REPAIR_OPTIONS:  # the edit-tuning settings the repair uses
        if name not in REPAIR_HELP:
            default = REPAIR_DEFAULTS.get(name, getattr(TargetConfig(), name))
            r.add_argument("--" + name.replace("_", "-"), type=type(getattr(TargetConfig(), name)), default=None,
                           help=f"TargetConfig.{name} (default {default})")
    r.add_argument("--gate-every", type=int, default=0, help="gate the weights every this many repair steps on "
                   "the validation split (TargetConfig.validation_repos; if none, training edits outside the repair "
                   "set) and keep the best (0: keep the last)")
    r.add_argument("--gate-after", type=int, default=0, help="the first repair step gated (0: the initial weights)")
    r.add_argument("--smoke", action="store_true", help="a tiny repair set (replacing the repair-set sizes above), "
                   "one short step and a two-prompt gate, for testing the command on a CPU")
    r.set_defaults(func=cmd_repair)
    g = sub.add_parser("gate", help="the quality gate on a saved target, on the validation or the evaluation split")
    g.add_argument("--model", type=Path, required=True, help="the target's model folder")
    g.add_argument("--rows", choices=("validation", "eval"), default="validation",
                   help="validation: the repositories held out to choose checkpoints; eval: the held-out test split")
    g.add_argument("--prompts", type=int, default=64, help="gate prompts, spread over 8 bins of reference edit norm")
    g.add_argument("--time-s", type=float, default=3600.0, help="no new prompt is started after this many seconds")
    g.add_argument("--out", type=Path, required=True, help="the gate's record (JSON, with every sample)")
    g.set_defaults(func=cmd_gate)
    c = sub.add_parser("compare-gates", help="two gate records on their shared prompts: B's Spearman minus A's, "
                       "with a paired bootstrap interval")
    c.add_argument("a", type=Path, help="gate record A (train_zoo gate --out; gzipped: .gz)")
    c.add_argument("b", type=Path, help="gate record B")
    c.set_defaults(func=cmd_compare_gates)
    sub.add_parser("split", help="write eval_split.json only").set_defaults(func=cmd_split)
    args = parser.parse_args(argv)
    if args.cmd == "gate" and args.prompts < 1:
        parser.error(f"--prompts must be >= 1, got {args.prompts}")
    if args.cmd == "gate" and not (math.isfinite(args.time_s) and args.time_s > 0):  # 0: no prompt is started
        parser.error(f"--time-s must be a finite number > 0, got {args.time_s}")
    if args.cmd == "repair" and min(args.max_before_chars, args.max_example_tokens, args.synthetic_sources) < 1:
        parser.error(f"--max-before-chars, --max-example-tokens and --synthetic-sources must be >= 1, got "
                     f"{args.max_before_chars}, {args.max_example_tokens} and {args.synthetic_sources}")
    if args.cmd == "repair" and (min(args.real_rows, args.synthetic_edits) < 0 or
                                 args.real_rows + args.synthetic_edits < 1):
        parser.error(f"--real-rows and --synthetic-edits must be >= 0 and make a repair set (not both 0), got "
                     f"{args.real_rows} and {args.synthetic_edits}")
    if args.cmd == "compare-gates":  # both records read and compared before anything is printed
        records = []
        for path in (args.a, args.b):
            try:
                records.append(read_gate(path))
            except (OSError, EOFError, zlib.error, ValueError) as e:
                parser.error(f"compare-gates {path}: not a readable gate record ({type(e).__name__}: {e})")
        try:
            args.comparison = compare_gates(*records)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            parser.error(f"compare-gates {args.a} {args.b}: {type(e).__name__}: {e}")
    if min(getattr(args, "gate_every", 0), getattr(args, "gate_after", 0)) < 0:
        parser.error(f"--gate-every and --gate-after must be >= 0, got {args.gate_every} and {args.gate_after}")
    shaped = [n for n in SHAPE_OPTIONS if getattr(args, n, None) is not None]
    if args.cmd == "target" and args.init is not None and shaped:
        parser.error(f"--{shaped[0].replace('_', '-')}: the model shape is --init's ({args.init}); shape options "
                     f"are for a target trained from scratch")
    configs = {"target": target_config, "repair": repair_config}
    if args.cmd in configs:  # the options' values checked before any work
        try:
            configs[args.cmd](args)
        except ValueError as e:
            parser.error(str(e))
    if paths and args.cmd == "gate":
        parser.check_model(args.model, "--model")
        parser.check_output(args.out)
    if paths and args.cmd == "target":  # --init's weights, and its tokenizer unless --tokenizer names one
        if args.init is not None:
            parser.check_model(args.init, "--init", tokenizer=args.tokenizer is None)
        if args.tokenizer is not None:
            parser.check_tokenizer(args.tokenizer)
        parser.check_output(args.out, folder=True)
        parser.check_output(args.data_cache, "--data-cache", folder=True)
    if paths and args.cmd == "repair":
        parser.check_model(args.init, "--init")
        parser.check_output(args.out, folder=True)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
