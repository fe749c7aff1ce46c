"""Training EAGLE heads on text the target generated, with the target's states computed on the fly.

EAGLE-1: ``feature_weight * SmoothL1(predicted f_{i+1}, f_{i+1}) + token_weight * CE(target's
distribution, head's)``, teacher-forced, with uniform noise on the input features.
EAGLE-3: training-time test: the head is unrolled ``ttt_steps`` times, feeding it its own
outputs (step ``j`` of pair ``i`` sits at position ``i + j`` and attends to the true pairs
``<= i`` plus its own chain), loss ``sum_j decay^j CE_j`` on the draft vocabulary.
Both use AdamW (0.9, 0.95) and gradient clipping. The only Python loop per batch is over
unrolled steps.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F

from hybridsd.eagle.model import EagleHead, KVList


def _check_ints(*args: tuple[str, object, int]) -> None:
    """``ValueError`` naming the first ``(name, value, least)`` whose value is not an int ``>= least``."""
    for name, value, least in args:
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")


# ---- data -------------------------------------------------------------------------------

@torch.no_grad()
def generate_sequences(target, prompts: Sequence[torch.Tensor], max_new_tokens: int, *, temperature: float = 0.0,
                       batch_size: int = 16, eos_token_id: int | list[int] | None = None,
                       pad_token_id: int = 0) -> list[torch.Tensor]:
    """Prompts continued by the target (HF ``generate``), each cut after its first EOS: 1-D LongTensors on CPU.

    Sampling (``temperature > 0``) draws from torch's global RNG; seed it for reproducibility.
    ``eos_token_id=None`` generates ``max_new_tokens`` tokens without stopping. Arguments out of range (and
    prompts that are not 1-D and non-empty) raise ``ValueError`` naming them, before any work.
    """
    _check_ints(("max_new_tokens", max_new_tokens, 1), ("batch_size", batch_size, 1))
    if not (isinstance(temperature, numbers.Real) and 0 <= temperature < math.inf):
        raise ValueError(f"temperature must be >= 0 and finite, got {temperature!r}")
    for i, p in enumerate(prompts):
        if p.ndim != 1 or len(p) == 0:
            raise ValueError(f"prompts[{i}] must be a non-empty 1-D tensor of token ids, got shape {list(p.shape)}")
    dev = target.get_input_embeddings().weight.device
    eos = [] if eos_token_id is None else [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    out: list[torch.Tensor] = []
    for b in range(0, len(prompts), batch_size):
        chunk = [p.to(torch.int64).cpu() for p in prompts[b:b + batch_size]]
        n = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), n), pad_token_id, dtype=torch.int64)
        mask = torch.zeros((len(chunk), n), dtype=torch.int64)
        for i, p in enumerate(chunk):  # left padding
            ids[i, n - len(p):] = p
            mask[i, n - len(p):] = 1
        kw = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
        gen = target.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), max_new_tokens=max_new_tokens,
                              pad_token_id=pad_token_id, eos_token_id=eos_token_id, **kw).cpu()  # host copy
        for i, p in enumerate(chunk):
            new = gen[i, n:]
            hits = torch.isin(new, torch.tensor(eos, dtype=torch.int64)).nonzero() if eos else []
            if len(hits):
                new = new[: int(hits[0, 0]) + 1]
            out.append(torch.cat([p, new]))
    return out


def count_tokens(sequences: Iterable[torch.Tensor], vocab_size: int) -> torch.Tensor:
    """Occurrences of each target token id in ``sequences``: ``[V]`` int64."""
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for s in sequences:
        counts += torch.bincount(s.cpu().to(torch.int64), minlength=vocab_size)[:vocab_size]
    return counts


def build_draft_vocab(token_counts: torch.Tensor, draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``d2t [Vd]`` int64 and ``t2d [V]`` bool for the ``Vd`` most frequent target tokens (ties: lower id)."""
    V = token_counts.shape[0]
    if not 1 <= draft_vocab_size <= V:
        raise ValueError(f"draft_vocab_size must be in [1, {V}], got {draft_vocab_size}")
    order = torch.sort(token_counts.cpu(), descending=True, stable=True).indices
    ids = order[:draft_vocab_size].sort().values  # target ids of the draft vocabulary, ascending
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(draft_vocab_size), t2d


@torch.no_grad()
def init_eagle3_output(head: EagleHead, target) -> None:
    """Start an EAGLE-3 head's ``lm_head`` and final norm from the target's (rows of its draft vocabulary).

    The head then begins by reading its output the way the target reads its last
    state, instead of learning a vocabulary projection from scratch; install the
    draft vocabulary first.
    """
    if head.config.kind != "eagle3":
        raise ValueError("only EAGLE-3 heads have their own lm_head")
    w = target.get_output_embeddings().weight  # [V, h]
    head.lm_head.weight.copy_(w.index_select(0, head.draft_ids().to(w.device)))
    norm = getattr(getattr(target, "model", None), "norm", None)
    if norm is not None and getattr(norm, "weight", None) is not None and norm.weight.shape == head.norm.weight.shape:
        head.norm.weight.copy_(norm.weight)


@torch.no_grad()
def init_from_head(head: EagleHead, state_dict: dict[str, torch.Tensor]) -> list[str]:
    """Start ``head`` from another head's tensors (e.g. one trained for an earlier version of the target).

    Tensors whose name and shape match are copied. An EAGLE-3 ``lm_head`` over a different draft
    vocabulary is copied row by row for the target tokens both vocabularies hold (``d2t`` of both
    heads says which); the other rows and the head's own ``d2t``/``t2d`` stay. Returns the names
    copied (in part, for ``lm_head``).
    """
    own = head.state_dict()
    copied = []
    for name, value in state_dict.items():
        if name in ("d2t", "t2d", "lm_head.weight") or name not in own or own[name].shape != value.shape:
            continue
        own[name].copy_(value)
        copied.append(name)
    old_w = state_dict.get("lm_head.weight")  # [Vd_old, h]
    if head.config.kind == "eagle3" and old_w is not None and old_w.shape[1:] == head.lm_head.weight.shape[1:] \
            and "d2t" in state_dict:
        old_d2t = state_dict["d2t"].to(torch.int64).cpu()
        old_ids = torch.arange(len(old_d2t)) + old_d2t  # [Vd_old] target ids of the old draft rows
        held = ((old_ids >= 0) & (old_ids < head.config.vocab_size)).nonzero().flatten()  # ids this vocab has
        row_of = torch.full((head.config.vocab_size,), -1, dtype=torch.int64)
        row_of[old_ids[held]] = held
        rows = row_of[head.draft_ids().cpu()]  # [Vd] old row of each new draft token, -1 if none
        keep = (rows >= 0).nonzero().flatten()
        w = head.lm_head.weight
        w[keep.to(w.device)] = old_w[rows[keep]].to(device=w.device, dtype=w.dtype)
        if len(keep):
            copied.append("lm_head.weight")
    return copied


def window_batches(sequences: Sequence[torch.Tensor], batch_size: int, seq_len: int,
                   generator: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless batches ``(ids [B, T], valid [B, T] bool)`` of random windows, right-padded with 0.

    Sequences are drawn in proportion to their length (every token equally likely);
    a window starts at a random offset when the sequence is longer than ``seq_len``.
    """
    seqs = [s.to(torch.int64).cpu() for s in sequences if len(s) >= 2]
    if not seqs:
        raise ValueError("need at least one sequence of 2 or more tokens")
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.float)
    while True:
        picks = torch.multinomial(lengths, batch_size, replacement=True, generator=generator).tolist()
        wins = []
        for i in picks:
            s = seqs[i]
            start = int(torch.randint(0, len(s) - seq_len + 1, (1,), generator=generator)) if len(s) > seq_len else 0
            wins.append(s[start:start + seq_len])
        T = max(len(w) for w in wins)
        ids = torch.zeros(batch_size, T, dtype=torch.int64)
        valid = torch.zeros(batch_size, T, dtype=torch.bool)
        for b, w in enumerate(wins):
            ids[b, :len(w)] = w
            valid[b, :len(w)] = True
        yield ids, valid


# ---- the unrolled forward -------------------------------------------------------------------

def ttt_mask(T: int, step: int, device) -> torch.Tensor:
    """Mask ``[T, (step + 1) * T]`` of unrolled step ``step``: causal over the true pairs, diagonal over own ones."""
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    eye = torch.eye(T, dtype=torch.bool, device=device)
    return torch.cat([causal] + [eye] * step, dim=1)


def _shift(x: torch.Tensor, j: int) -> torch.Tensor:
    """``x[:, 1 + j:]`` right-padded (zeros/False) back to length ``T - 1``."""
    y = x[:, 1 + j:]
    pad = [0, 0] * (x.ndim - 2) + [0, j]
    return F.pad(y, pad) if j else y


def unroll(head: EagleHead, feats: torch.Tensor, ids: torch.Tensor, steps: int,
           noise: float = 0.0) -> Iterator[torch.Tensor]:
    """Outputs ``[B, T-1, h]`` of unrolled steps ``0..steps-1`` over a batch of sequences ``ids [B, T]``.

    Row ``i`` of step ``j`` reads token ``t_{i+1+j}`` at position ``i + j`` and, for ``j > 0``,
    the head's own step ``j-1`` output; its logits predict ``t_{i+2+j}``.
    """
    T1 = ids.shape[1] - 1
    x = feats[:, :T1]  # [B, T1, F] f_0..f_{T-2}
    if noise > 0:
        x = x + (torch.rand_like(x) * 2 - 1) * noise
    kv = KVList() if steps > 1 else None
    base = torch.arange(T1, device=ids.device)  # [T1]
    for j in range(steps):
        mask = None if j == 0 else ttt_mask(T1, j, ids.device)
        out = head(x, _shift(ids, j), base + j, kv, attn_mask=mask)  # [B, T1, h]
        yield out
        x = out


def _target_pass(target, ids: torch.Tensor, layers: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Target features ``[B, T, F]`` (hidden states at ``layers``, concatenated) and logits ``[B, T, V]``."""
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True, use_cache=False)
        feats = torch.cat([out.hidden_states[i] for i in layers], dim=-1)
    return feats, out.logits


def _step_losses(head: EagleHead, feats, ids, tlogits, valid, *, ttt_steps, decay, feature_weight, token_weight,
                 noise) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss of one batch and detached metrics (device tensors, no host sync)."""
    eagle1 = head.config.kind == "eagle1"
    steps = 1 if eagle1 else ttt_steps
    draft_ids = None if eagle1 else head.draft_ids()
    total = 0.0
    metrics: dict[str, torch.Tensor] = {}
    for j, out in enumerate(unroll(head, feats, ids, steps, noise if eagle1 else 0.0)):
        tl = _shift(tlogits, j)  # [B, T1, V] the target's logits at position i + 1 + j
        ok = _shift(valid, j)  # [B, T1] rows whose input token is real
        tgt = tl.argmax(-1)  # [B, T1]
        logits = head.logits(out).float()  # [B, T1, Vout]
        logp = torch.log_softmax(logits, dim=-1)
        if eagle1:
            p = torch.softmax(tl.float(), dim=-1)  # [B, T1, V]
            m = ok
        else:
            p = torch.softmax(tl.float().index_select(-1, draft_ids), dim=-1)  # [B, T1, Vd]
            m = ok & head.t2d[tgt]  # as the reference: targets outside the draft vocabulary are skipped
        mf = m.float()
        ce = -((p * logp).sum(-1) * mf).sum() / mf.sum().clamp(min=1)
        acc = ((head.to_target(logits.argmax(-1)) == tgt) & ok).sum() / ok.sum().clamp(min=1)
        if eagle1:
            f_next = _shift(feats, 0).float()  # [B, T1, h] f_{i+1}
            fl = F.smooth_l1_loss(out.float(), f_next, reduction="none").mean(-1)  # [B, T1]
            vloss = (fl * mf).sum() / mf.sum().clamp(min=1)
            total = feature_weight * vloss + token_weight * ce
            metrics.update(vloss=vloss.detach(), ploss=ce.detach(), acc=acc.detach())
        else:
            total = total + decay ** j * ce
            metrics[f"ce_{j}"] = ce.detach()
            metrics[f"acc_{j}"] = acc.detach()
    if not eagle1:
        metrics["acc"] = metrics["acc_0"]
    metrics["loss"] = total.detach()
    return total, metrics


# ---- training and evaluation ----------------------------------------------------------------

def _autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype not in (None, torch.float32))


def _default_dtype(device: torch.device, dtype: torch.dtype | None) -> torch.dtype | None:
    return dtype if dtype is not None else (torch.bfloat16 if device.type == "cuda" else None)


def train_head(head: EagleHead, target, sequences: Sequence[torch.Tensor] | Iterable, *, steps: int = 1000,
               batch_size: int = 8, lr: float = 3e-4, seq_len: int = 512, device=None,
               dtype: torch.dtype | None = None, log_every: int = 50, ttt_steps: int = 7, ttt_decay: float = 0.8,
               feature_weight: float = 1.0, token_weight: float = 0.1, noise: float = 0.05, grad_clip: float = 0.5,
               warmup_steps: int | None = None, min_lr_ratio: float = 0.1, weight_decay: float = 0.0, seed: int = 0,
               log_fn: Callable[[dict], None] | None = None) -> list[dict]:
    """Train ``head`` in place for ``steps`` optimizer steps; return the loss-curve rows.

    ``sequences``: 1-D LongTensors the target generated (random windows of ``seq_len``
    are batched), or an iterable of batches ``ids [B, T]`` / ``(ids, valid [B, T] bool)``
    (right-padded). ``dtype``: autocast dtype (default: bf16 on CUDA, none on CPU); keep
    the head's weights in fp32. The LR warms up linearly, then follows a cosine to
    ``min_lr_ratio * lr``. An EAGLE-3 head's draft vocabulary must be set beforehand
    (see :func:`build_draft_vocab`). Each row holds ``step``, ``lr``, ``loss``, ``acc``
    (top-1 agreement with the target at step 0) and per-kind terms averaged since the
    previous row, plus ``elapsed_s``. ``seed`` fixes the window sampling and (through
    torch's global RNG) the feature noise. Arguments out of range raise ``ValueError`` naming them, before any
    work.
    """
    _check_ints(("steps", steps, 0), ("batch_size", batch_size, 1), ("seq_len", seq_len, 2),
                ("log_every", log_every, 1), ("ttt_steps", ttt_steps, 1),
                ("warmup_steps", 0 if warmup_steps is None else warmup_steps, 0))
    if not (lr > 0 and grad_clip > 0 and noise >= 0 and ttt_decay > 0 and 0 <= min_lr_ratio <= 1):
        raise ValueError(f"need lr > 0, grad_clip > 0, noise >= 0, ttt_decay > 0 and min_lr_ratio in [0, 1], got "
                         f"{lr}, {grad_clip}, {noise}, {ttt_decay} and {min_lr_ratio}")
    head.check_fits(target)
    device = torch.device(device) if device is not None else head.fc.weight.device
    dtype = _default_dtype(device, dtype)
    head.to(device).train()
    target.eval()
    layers = head.config.target_layers
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    warmup = min(100, steps // 10) if warmup_steps is None else warmup_steps

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, steps - warmup)
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    if isinstance(sequences, Sequence) and (len(sequences) == 0 or isinstance(sequences[0], torch.Tensor)
                                            and sequences[0].ndim == 1):
        batches: Iterator = window_batches(sequences, batch_size, seq_len, torch.Generator().manual_seed(seed))
    else:
        if isinstance(sequences, Sequence) and len(sequences) < steps:
            raise ValueError(f"steps={steps} needs as many batches; sequences holds {len(sequences)}")
        batches = iter(sequences)
    torch.manual_seed(seed)  # feature noise
    frozen = [(p, p.requires_grad) for p in target.parameters()]
    for p, _ in frozen:
        p.requires_grad_(False)
    rows: list[dict] = []
    sums: dict[str, torch.Tensor] = {}
    n_acc, t0 = 0, time.perf_counter()
    try:
        for step in range(1, steps + 1):
            batch = next(batches, None)
            if batch is None:
                raise ValueError(f"the batches ran out after {step - 1} of steps={steps} steps")
            ids, valid = batch if isinstance(batch, tuple) else (batch, torch.ones_like(batch, dtype=torch.bool))
            ids, valid = ids.to(device, non_blocking=True), valid.to(device, non_blocking=True)
            with _autocast(device, dtype):
                feats, tlogits = _target_pass(target, ids, layers)
                loss, metrics = _step_losses(head, feats, ids, tlogits, valid, ttt_steps=ttt_steps, decay=ttt_decay,
                                             feature_weight=feature_weight, token_weight=token_weight, noise=noise)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            sched.step()
            for k, v in metrics.items():
                sums[k] = sums[k] + v if k in sums else v
            n_acc += 1
            if step % log_every == 0 or step == steps:
                vals = torch.stack(list(sums.values())).div(n_acc).tolist()  # host sync: once per log row
                row = {"step": step, "lr": sched.get_last_lr()[0]} | dict(zip(sums.keys(), vals))
                row["elapsed_s"] = time.perf_counter() - t0
                rows.append(row)
                if log_fn is not None:
                    log_fn(row)
                sums, n_acc = {}, 0
    finally:
        for p, flag in frozen:
            p.requires_grad_(flag)
        head.eval()
    return rows


@torch.no_grad()
def evaluate_head(head: EagleHead, target, sequences: Sequence[torch.Tensor], *, steps: int = 1,
                  batch_size: int = 8, seq_len: int = 512, device=None, dtype: torch.dtype | None = None) -> dict:
    """Top-1 agreement of the head with the target over ``sequences`` (each cut to ``seq_len``).

    ``acc[j]``: share of rows where the head, unrolled ``j`` steps on its own outputs
    (as when drafting the ``j+1``-th token), predicts the target's greedy token. Arguments out of range raise
    ``ValueError`` naming them, before any work.
    """
    _check_ints(("steps", steps, 1), ("batch_size", batch_size, 1), ("seq_len", seq_len, 2))
    head.check_fits(target)
    device = torch.device(device) if device is not None else head.fc.weight.device
    dtype = _default_dtype(device, dtype)
    was_training = head.training
    head.eval()
    hits = torch.zeros(steps, device=device)
    rows = torch.zeros(steps, device=device)
    seqs = [s[:seq_len].to(torch.int64) for s in sequences if len(s) >= 2]
    for b in range(0, len(seqs), batch_size):
        chunk = seqs[b:b + batch_size]
        T = max(len(s) for s in chunk)
        ids = torch.zeros(len(chunk), T, dtype=torch.int64)
        valid = torch.zeros(len(chunk), T, dtype=torch.bool)
        for i, s in enumerate(chunk):
            ids[i, :len(s)] = s
            valid[i, :len(s)] = True
        ids, valid = ids.to(device), valid.to(device)
        with _autocast(device, dtype):
            feats, tlogits = _target_pass(target, ids, head.config.target_layers)
            for j, out in enumerate(unroll(head, feats, ids, steps)):
                ok = _shift(valid, j)
                pred = head.to_target(head.logits(out).argmax(-1))
                hits[j] += ((pred == _shift(tlogits, j).argmax(-1)) & ok).sum()
                rows[j] += ok.sum()
    head.train(was_training)
    acc = (hits / rows.clamp(min=1)).tolist()  # host sync: once, at the end
    return {"acc": acc, "rows": rows.tolist()}
