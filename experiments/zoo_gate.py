"""The zoo target's quality gate: greedy answers to edit prompts spread over the reference edit norm (the project's
own loop with an n-gram drafter), scored by the share that ends with EOS before a cap, the share that ends at a length
near the reference's and the Spearman correlation between the reference's and the output's edit norm; and the early
stopping of a loop repair by it
(:class:`CheckpointSelection`). ``cfg`` is a :class:`experiments.train_zoo.TargetConfig` (its ``gate_*``,
``change_request``, ``max_places`` and ``max_position_embeddings``)."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np

from experiments.edit_corpus import blazedit_messages, change_request

GATE_MAX_NEW_FRAC = 1.5  # the gate's token cap: this many times the reference answer's tokens


def distinct_share(tokens: list[int], n: int = 4) -> float:
    """Distinct n-grams over all n-grams of ``tokens`` (1.0 when there are none): near 0 for an output stuck in a
    loop, near 1 for text that does not repeat itself."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


LOOP_DISTINCT = 0.5  # an output that does not stop and has fewer distinct 4-grams than this is counted as a loop


def spearman(x, y) -> float:
    """Spearman rank correlation (``scipy.stats.spearmanr``: ties get their average rank); NaN when either side
    is constant or has fewer than two values."""
    from scipy.stats import spearmanr

    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def _resampled(stat, n: int, resamples: int, seed: int) -> np.ndarray:
    """``stat(i)`` over ``resamples`` bootstrap draws ``i`` of ``n`` indices (fixed seed), NaN draws dropped."""
    draws = np.asarray([stat(i) for i in np.random.default_rng(seed).integers(0, n, size=(resamples, n))])
    return draws[~np.isnan(draws)]


def spearman_ci(x, y, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`spearman` over the ``(x, y)`` pairs (resampled together, fixed
    seed): how far a gate's Spearman could move on another draw of as many prompts. NaN where it is undefined."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return float("nan"), float("nan")
    x, y = np.asarray(x, float), np.asarray(y, float)
    draws = _resampled(lambda i: spearman(x[i], y[i]), len(x), resamples, seed)
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2]) if draws.size else (float("nan"),) * 2
    return float(lo), float(hi)


def spearman_diff_ci(x, y_a, y_b, level: float = 0.95, resamples: int = 2000,
                     seed: int = 0) -> tuple[float, float, float, float]:
    """``(d, lo, hi, share)``: ``d = spearman(x, y_b) - spearman(x, y_a)``, two targets' Spearman on the same
    prompts (``x`` their reference norms, ``y_a, y_b`` the two targets' output norms), with the percentile interval
    of a paired bootstrap over the prompts (fixed seed) and the share of its resamples where ``d <= 0``: whether B's
    correlation beats A's by more than another draw of as many prompts would move it."""
    x, y_a, y_b = (np.asarray(v, float) for v in (x, y_a, y_b))
    if not len(x) == len(y_a) == len(y_b):
        raise ValueError(f"spearman_diff_ci needs paired samples, got {len(x)}, {len(y_a)} and {len(y_b)}")
    d = spearman(x, y_b) - spearman(x, y_a)
    if len(x) < 3 or math.isnan(d):
        return d, float("nan"), float("nan"), float("nan")
    draws = _resampled(lambda i: spearman(x[i], y_b[i]) - spearman(x[i], y_a[i]), len(x), resamples, seed)
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(d), float(lo), float(hi), float(np.mean(draws <= 0))


MISS_UNDER, MISS_OVER, MISS_SLACK, MISS_MIN_REF = 0.3, 2.0, 0.1, 0.05  # see misses()


def misses(gate: dict) -> dict:
    """The answers that hold a gate's Spearman correlation down, by kind, from a gate record (or its
    ``quality_gate``): ``short``, an output edit norm below ``MISS_UNDER`` x the reference's (references of at least
    ``MISS_MIN_REF``: the edit asked for mostly not made), and ``long``, above ``MISS_OVER`` x the reference's plus
    ``MISS_SLACK`` (far more changed than asked); ``short_unedited``, the short ones whose output edit norm is below
    ``MISS_MIN_REF`` (the input copied); with the correlation as it is (``rho``) and as it would be with
    those answers' edit norms replaced by their references' (``rho_without_short``, ``_long``, ``_both``): what each
    kind costs."""
    samples = gate.get("quality_gate", gate)["samples"]
    ref = np.array([s["ref_norm"] for s in samples], dtype=float)
    out = np.array([s["out_norm"] for s in samples], dtype=float)
    short, long = miss_masks(ref, out)
    return {"n": len(samples), "rho": spearman(ref, out), "short": int(short.sum()), "long": int(long.sum()),
            "short_unedited": int((short & (out < MISS_MIN_REF)).sum()),
            "rho_without_short": rho_without(ref, out, short), "rho_without_long": rho_without(ref, out, long),
            "rho_without_both": rho_without(ref, out, short | long)}


def miss_masks(ref: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(short, long): which answers, of reference and output edit norms ``ref`` and ``out``, make far less of the
    edit than asked and which far more (:func:`misses`' rules)."""
    return (ref >= MISS_MIN_REF) & (out < MISS_UNDER * ref), out > MISS_OVER * ref + MISS_SLACK


def rho_without(ref: np.ndarray, out: np.ndarray, mask: np.ndarray) -> float:
    """:func:`spearman` of ``ref`` and ``out`` with the output norms where ``mask`` holds set to their references':
    the correlation without those answers' misses."""
    return spearman(ref, np.where(mask, ref, out))


def read_gate(path: str | Path) -> dict:
    """The gate record in ``path``: a ``train_zoo gate`` JSON file, or the same file gzipped (name ending ``.gz``);
    a ``.json`` path that is stored only gzipped (``<path>.gz``, as the records under experiments/results are) is
    read from there."""
    path = Path(path)
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)


def compare_gates(a: dict, b: dict) -> dict:
    """Two gate records (``train_zoo gate`` files, or their ``quality_gate``) on the prompts both answered (by
    sample id): ``n``, each one's EOS share and Spearman, and B's Spearman minus A's with its paired bootstrap
    interval (:func:`spearman_diff_ci`). Raises ValueError when they share fewer than 3 prompts or differ in a shared
    prompt's reference edit norm (not the same references)."""
    sa, sb = ({s["id"]: s for s in g.get("quality_gate", g)["samples"]} for g in (a, b))
    ids = sorted(set(sa) & set(sb))
    if len(ids) < 3:
        raise ValueError(f"the two gates share {len(ids)} prompts; comparing them needs at least 3")
    other = [i for i in ids if sa[i]["ref_norm"] != sb[i]["ref_norm"]]
    if other:
        raise ValueError(f"{len(other)} shared prompts ({other[0]}, ...) have other reference edit norms in the two "
                         "gates: they answer other references")
    ref = [sa[i]["ref_norm"] for i in ids]
    d, lo, hi, share = spearman_diff_ci(ref, [sa[i]["out_norm"] for i in ids], [sb[i]["out_norm"] for i in ids])

    def side(samples: dict) -> dict:
        return {"eos_share": float(np.mean([samples[i]["stopped"] for i in ids])),
                "spearman": spearman(ref, [samples[i]["out_norm"] for i in ids])}

    return {"n": len(ids), "a": side(sa), "b": side(sb), "spearman_b_minus_a": d, "ci95": [lo, hi],
            "share_not_above_0": share}


def gate_rows(rows: list[dict], n: int, bins: int, max_before_chars: int) -> list[dict]:
    """Up to ``n`` rows with short inputs, spread evenly over ``bins`` equal bins of reference edit norm in
    [0, 0.6]: taken in turn from each bin, each bin in a fixed hash order."""
    by_bin: list[list[dict]] = [[] for _ in range(bins)]
    for r in sorted(rows, key=lambda r: hashlib.sha256(r["id"].encode()).hexdigest()):
        if len(r["before"]) <= max_before_chars and r["char_edit_norm"] <= 0.6:
            by_bin[min(int(r["char_edit_norm"] / 0.6 * bins), bins - 1)].append(r)
    chosen: list[dict] = []
    while len(chosen) < n and any(by_bin):
        for members in by_bin:
            if members and len(chosen) < n:
                chosen.append(members.pop(0))
    return chosen


def gate_prompt(tokenizer, row: dict, cfg) -> tuple[str, list[int]]:
    """An edit row's change request (``cfg.change_request``, ``cfg.max_places``) and its templated prompt's token
    ids, as the gate asks it."""
    request = change_request(row["before"], row["after"], row["instruction"], cfg.change_request, cfg.max_places)
    text = tokenizer.apply_chat_template(blazedit_messages(row["before"], request), tokenize=False,
                                         add_generation_prompt=True)
    return request, tokenizer.encode(text, add_special_tokens=False)


def gate_cap(tokenizer, after: str, frac: float = GATE_MAX_NEW_FRAC) -> int:
    """The quality gate's token cap for an answer whose reference is ``after``: ``frac`` x its tokens (at least 8)."""
    return cap_of(len(tokenizer.encode(after, add_special_tokens=False)), frac)


def cap_of(reference_tokens: int, frac: float = GATE_MAX_NEW_FRAC) -> int:
    """The quality gate's token cap for a reference of ``reference_tokens`` tokens."""
    return max(8, math.ceil(frac * reference_tokens))


GATE_EOS_SHARE, GATE_SPEARMAN = 0.9, 0.6  # the quality gate's pass line ...
GATE_LENGTH_SHARE = 0.8  # ... and this share of answers that stop at a length near the reference's:
GATE_LENGTH_RANGE = (2 / 3, 1.5)  # their tokens over the reference's (a truncated or rambling answer also stops)


def gate_score(gate: dict) -> float:
    """How far a quality gate result clears its pass line: min(EOS share / 0.9, Spearman / 0.6, length share / 0.8)
    (the length share where the result has one); >= 1 passes (a constant output norm, Spearman NaN or None, scores
    0)."""
    rho = gate["spearman_ref_out"]
    rho = 0.0 if rho is None or math.isnan(rho) else rho
    shares = [gate["eos_share"] / GATE_EOS_SHARE, rho / GATE_SPEARMAN]
    if gate.get("length_share") is not None:
        shares.append(gate["length_share"] / GATE_LENGTH_SHARE)
    return min(shares)


def length_ok(stopped: bool, tokens: int, ref_tokens: int) -> bool:
    """Whether an answer stopped with ``tokens`` tokens (its stop token not counted) within
    :data:`GATE_LENGTH_RANGE` times the reference answer's ``ref_tokens``."""
    lo, hi = GATE_LENGTH_RANGE
    return stopped and lo * ref_tokens <= tokens <= hi * ref_tokens


def quality_gate(model, tokenizer, rows: list[dict], cfg, stop_ids: list[int]) -> dict:
    """Greedy answers to the prompts of up to ``cfg.gate_prompts`` of ``rows`` (:func:`gate_rows`; held-out edits, or
    the validation split when a repair is stopped early) (hybridsd's loop, n-gram drafter k=5, n 2..5: lossless, and it
    gives each answer's n-gram AL): stops at EOS before the cap, edit norms against the input, Spearman
    correlation of the output's edit norm with the reference's, and outputs stuck in a loop (``loops``: no stop and a
    distinct-4-gram share below ``LOOP_DISTINCT``) and the share of answers of a length near the reference's
    (:func:`length_ok`). Passes when >= 90% stop, rho >= 0.6 and >= 80% have such a length."""
    import hybridsd as hsd
    from hybridsd.edit_distance import edit_norm

    chosen = gate_rows(rows, cfg.gate_prompts, cfg.gate_bins, cfg.gate_max_before_chars)
    samples, start = [], time.time()
    for r in chosen:
        if time.time() - start > cfg.gate_time_s:
            break
        request, ids = gate_prompt(tokenizer, r, cfg)
        cap = min(gate_cap(tokenizer, r["after"], cfg.gate_max_new_frac), cfg.max_position_embeddings - len(ids) - 16)
        res = hsd.generate(model, ids, drafter=hsd.NgramDrafter(k=5, min_n=2, max_n=5), max_new_tokens=cap,
                           eos_token_id=stop_ids)
        stopped = bool(res.tokens) and res.tokens[-1] in stop_ids
        out = tokenizer.decode(res.tokens[:-1] if stopped else res.tokens, skip_special_tokens=True)
        ref_tokens = len(tokenizer.encode(r["after"], add_special_tokens=False))
        samples.append({"id": r["id"], "ref_norm": r["char_edit_norm"],
                        "out_norm": round(edit_norm(r["before"], out), 6),
                        "out_vs_after": round(edit_norm(r["after"], out), 6), "stopped": stopped, "cap": cap,
                        "tokens": len(res.tokens), "ref_tokens": ref_tokens,
                        "length_ok": length_ok(stopped, len(res.tokens) - stopped, ref_tokens),
                        "ngram_seq_al": round(res.stats.seq_normalized_al, 4),
                        "exact_after": out == r["after"], "distinct_4gram": round(distinct_share(res.tokens), 4),
                        "request": request, "output_head": out[:300]})
    med = lambda xs: float(np.median(xs)) if xs else float("nan")  # noqa: E731
    n = len(samples)
    result = {"n": n, "planned": len(chosen), "generate_s": round(time.time() - start, 1),
              "eos_share": sum(s["stopped"] for s in samples) / max(n, 1),
              "length_share": sum(s["length_ok"] for s in samples) / max(n, 1),
              "spearman_ref_out": spearman([s["ref_norm"] for s in samples], [s["out_norm"] for s in samples]),
              "spearman_ci95": list(spearman_ci([s["ref_norm"] for s in samples],
                                                [s["out_norm"] for s in samples])),
              "median_ref_norm": med([s["ref_norm"] for s in samples]),
              "median_out_norm": med([s["out_norm"] for s in samples]),
              "median_out_vs_after": med([s["out_vs_after"] for s in samples]),
              "exact_after": sum(s["exact_after"] for s in samples),
              "loops": sum(not s["stopped"] and s["distinct_4gram"] < LOOP_DISTINCT for s in samples),
              "samples": samples}
    for name, lo, hi in (("low", 0.0, 0.1), ("high", 0.3, 0.6)):
        als = [s["ngram_seq_al"] for s in samples if lo <= s["ref_norm"] <= hi]
        result[f"ngram_seq_al_ref_{name}"] = float(np.mean(als)) if als else float("nan")
    result["passed"] = gate_score(result) >= 1
    nan = lambda v: isinstance(v, float) and math.isnan(v)  # noqa: E731
    result["spearman_ci95"] = None if any(map(nan, result["spearman_ci95"])) else result["spearman_ci95"]
    return {k: None if nan(v) else v for k, v in result.items()}  # strict JSON


def as_saved(model, device):
    """``model`` (in place) with the weights :func:`experiments.train_zoo.save_target` writes (rounded to bf16), in
    eval mode, in the gate's dtype: bf16 on the GPU, fp32 on the CPU."""
    import torch

    model = model.to(torch.bfloat16).eval()
    return model if device.type == "cuda" else model.float()


def run_gate(model, tokenizer, eval_rows: list[dict], cfg, special: dict) -> dict:
    """:func:`quality_gate` on ``eval_rows``, its summary and first samples printed."""
    gate = quality_gate(model, tokenizer, eval_rows, cfg, [special["eot"], special["eos"]])
    print(f"quality gate: n={gate['n']}/{gate['planned']} in {gate['generate_s']}s, EOS share {gate['eos_share']:.2f}, "
          f"length share {gate['length_share']:.2f}, "
          f"Spearman(ref, out) {gate['spearman_ref_out']} (95% CI {gate['spearman_ci95']}), "
          f"median ref norm {gate['median_ref_norm']}, "
          f"median out norm {gate['median_out_norm']}, n-gram seq AL ref<=0.1 {gate['ngram_seq_al_ref_low']} "
          f"vs 0.3-0.6 {gate['ngram_seq_al_ref_high']}, loops {gate['loops']}, passed={gate['passed']}", flush=True)
    for s in gate["samples"][:3]:
        print(json.dumps({k: s[k] for k in ("id", "ref_norm", "out_norm", "stopped", "ngram_seq_al")}), "\n",
              s["request"], "\n--- output head:\n", s["output_head"], "\n-----", flush=True)
    return gate


class CheckpointSelection:
    """Early stopping of a loop repair by the quality gate on ``rows`` (the validation split, or training edits
    outside the repair set; ``what`` says which):
    called after repair steps, it gates the weights as they would be saved at ``after``, ``after + every``, ...
    steps (and the last), and keeps the weights of the best :func:`gate_score` (the earliest among equals)."""

    def __init__(self, tokenizer, rows: list[dict], cfg, special: dict, device, every: int,
                 after: int, what: str = "training split, outside the repair set") -> None:
        self.tokenizer, self.rows, self.cfg, self.device, self.what = tokenizer, rows, cfg, device, what
        self.stops = [special["eot"], special["eos"]]
        self.every, self.after = every, after
        self.gates: list[dict] = []
        self.best: dict | None = None  # the best gate so far (its entry in ``gates``) ...
        self.best_state: dict | None = None  # ... and its weights (fp32 copies, on the CPU)

    def __call__(self, model, steps: int, last: bool = False) -> None:
        """Gate ``model`` after ``steps`` repair steps when the schedule (or ``last``) says so, once per step."""
        due = steps >= self.after and (steps - self.after) % self.every == 0
        if not (due or last) or any(g["step"] == steps for g in self.gates):
            return
        candidate = as_saved(copy.deepcopy(model), self.device)
        gate = quality_gate(candidate, self.tokenizer, self.rows, self.cfg, self.stops)
        entry = {"step": steps, "score": round(gate_score(gate), 4),
                 **{k: gate[k] for k in ("n", "eos_share", "length_share", "spearman_ref_out", "spearman_ci95",
                                         "loops", "median_out_norm")}}
        self.gates.append(entry)
        print("[select] " + " ".join(f"{k}={v}" for k, v in entry.items()), flush=True)
        if self.best is None or entry["score"] > self.best["score"]:
            self.best = entry
            self.best_state = {k: v.detach().float().cpu() for k, v in candidate.state_dict().items()}

    def record(self) -> dict:
        """What ``repair_config.json`` keeps: the schedule, the chosen step and every gate's summary."""
        return {"rows": self.what, "every": self.every, "after": self.after,
                "chosen_step": self.best["step"], "gates": self.gates}
