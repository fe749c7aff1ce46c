"""Trace-simulated AL of n-gram and hybrid drafting on the code-edit set, per edit-norm bin, and how well
the harmonic (PR) model and the re-sync model predict it.

Each example's prompt is the Blazedit prompt for its ``before`` file (raw text, no chat template: the
template's few tokens do not change what n-gram can copy), its reference output the ``after`` file; see
``hybridsd.simulate`` for the simulation. Models are fitted on a random half of the examples (per-bin
corpus ALs, bootstrap CIs from resampling examples within bins) and scored per bin on the other half.

    python -m experiments.simulate_al            # all 3,724 examples
    python -m experiments.simulate_al --limit 400

``--out`` is the stem of two files (a ``.json`` or ``.csv`` ending of its own is dropped; other dots are kept):
``.json`` (the tables, fits, predictions and errors, with the config and run_info) and ``.csv`` (one row per split,
bin and policy: the ALs and held-out predictions, the config and run_info).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info
from hybridsd.analytic import al_from_rates, harmonic_calibrate_ngram
from hybridsd.data import bin_index, default_data_dir, load_code_edits
from hybridsd.edit_distance import copied_runs, token_edit_norm
from hybridsd.fit import fit_edit_structure, fit_harmonic, fit_new_share, fit_resync, fit_resync_runs, model_error
from hybridsd.simulate import SimConfig, iter_simulate

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "experiments" / "results"
POLICIES = ("ngram", "eagle", "prefer-ngram", "tree")
MODELED = ("ngram", "prefer-ngram", "tree")
MODELS = ("harmonic_pr", "harmonic_pr_literal", "harmonic_fit", "harmonic_free", "resync", "resync_eagle",
          "resync_runs")
MAX_VOCAB = 1_000_000  # the fallback BPE's largest vocab
DEFAULT_RATES = (0.65, 0.42, 0.25)
RATES_SOURCE = (
    "default: assumed per-position rates (0.65, 0.42, 0.25), AL 2.32 at k=3, chosen to match vLLM's "
    "EAGLE-1 on Llama-3.1-8B-Instruct, MT-Bench, k=3 (AL 2.29, design/background.md); the decay shape is "
    "assumed, not measured"
)


def load_tokenizer(texts: list[str], vocab_size: int, source: str = "code_edits_dev.jsonl"):
    """The project tokenizer (``hybridsd/models/*/tokenizer.json``) if there is one, else a byte-level BPE of
    ``vocab_size`` trained once on ``texts`` (the before/after files of ``source``) and cached under
    ``experiments/results/`` by its vocab and a digest of ``texts``; returns (tokenizer, description)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    found = sorted((REPO / "hybridsd" / "models").glob("*/tokenizer.json"))
    if found:
        return Tokenizer.from_file(str(found[0])), f"project tokenizer {found[0].relative_to(REPO)}"
    digest = hashlib.sha1()
    for t in texts:
        digest.update(f"{len(t)}\0{t}".encode())
    cache = RESULTS / f"bpe{vocab_size}_{digest.hexdigest()[:12]}.json"
    if not cache.is_file():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(texts, trainer)
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache, tok.to_str())
    return Tokenizer.from_file(str(cache)), (f"byte-level BPE, vocab {vocab_size}, trained on the before/after "
                                             f"files of {source} ({cache.relative_to(REPO)})")


def encode(tok, texts: list[str]) -> list[np.ndarray]:
    return [np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(texts, add_special_tokens=False)]


def run_policy(pairs, cfg: SimConfig) -> dict[str, np.ndarray]:
    """Per-example counters of one policy (traces dropped as we go)."""
    cols = {c: [] for c in ("tokens", "steps", "drafts", "accepted", "truncated")}
    for s in iter_simulate(pairs, cfg):
        s.check()
        cols["tokens"].append(s.num_tokens)
        cols["steps"].append(s.num_target_steps)
        cols["drafts"].append(s.num_drafts)
        cols["accepted"].append(s.num_accepted)
        cols["truncated"].append(sum(1 for t in s.trace if t.emitted == t.accepted))
    return {c: np.asarray(v) for c, v in cols.items()}


def per_bin(idx: np.ndarray, n_bins: int, members: np.ndarray, e, length, res) -> dict:
    """Per-bin summaries over the examples in ``members``."""
    out = {"n": [], "mean_e": [], "mean_tokens": []}
    for p in res:
        out[f"{p}_al"], out[f"{p}_al_mean"], out[f"{p}_precision_al"] = [], [], []
    for b in range(n_bins):
        m = members[idx[members] == b]
        out["n"].append(int(m.size))
        out["mean_e"].append(float(e[m].mean()) if m.size else np.nan)
        out["mean_tokens"].append(float(length[m].mean()) if m.size else np.nan)
        for p, r in res.items():
            tok, st = r["tokens"][m].sum(), r["steps"][m].sum()
            out[f"{p}_al"].append(float(tok / st) if m.size else np.nan)
            out[f"{p}_al_mean"].append(float(np.mean(r["tokens"][m] / r["steps"][m])) if m.size else np.nan)
            d = r["drafts"][m].sum()
            out[f"{p}_precision_al"].append(float(1 + r["accepted"][m].sum() / d) if d else np.nan)
    return {k: np.asarray(v) for k, v in out.items()}


def boot_bins(idx, n_bins, members, r, n_boot, rng) -> np.ndarray:
    """``[n_boot, n_bins]`` corpus ALs with examples resampled within each bin."""
    out = np.full((n_boot, n_bins), np.nan)
    for b in range(n_bins):
        m = members[idx[members] == b]
        if not m.size:
            continue
        draw = rng.integers(0, m.size, size=(n_boot, m.size))
        out[:, b] = r["tokens"][m][draw].sum(1) / r["steps"][m][draw].sum(1)
    return out


def out_file(stem: Path, suffix: str) -> Path:
    """The ``suffix`` file of the ``--out`` stem: ``rates0.65`` -> ``rates0.65.json``, ``sim.json`` -> ``sim.csv``."""
    base = stem.with_suffix("") if stem.suffix in (".json", ".csv") else stem
    return base.with_name(base.name + suffix)


def main(argv=None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="code_edits_dev.jsonl (default: the shared data dir)")
    ap.add_argument("--limit", type=int, default=None, help="simulate a seeded random subset of this many examples")
    ap.add_argument("--k-ngram", type=int, default=5)
    ap.add_argument("--k-eagle", type=int, default=3)
    ap.add_argument("--min-n", type=int, default=2)
    ap.add_argument("--max-n", type=int, default=5)
    ap.add_argument("--eagle-rates", type=float, nargs="+", default=list(DEFAULT_RATES),
                    help="EAGLE per-position acceptance rates r_i (" + RATES_SOURCE + ")")
    ap.add_argument("--eagle-rates-by-state", type=Path, default=None,
                    help="a JSON with an eagle_by_ngram_state table (written by experiments.al_by_edit_norm): "
                    "EAGLE drawn from its 'novel' rates where n-gram would have no draft or a wrong first token, "
                    "from its 'first right' rates elsewhere (instead of --eagle-rates); the models' AL_eagle is "
                    "then EAGLE's AL on new text")
    ap.add_argument("--bins", type=int, default=12, help="edit-norm bins over [0, --max-e]")
    ap.add_argument("--max-e", type=float, default=0.6)
    ap.add_argument("--level", choices=("char", "token"), default="char", help="edit norm to bin by")
    ap.add_argument("--vocab", type=int, default=8000, help="vocab of the fallback BPE")
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "simulation" / "simulate_al")
    args = ap.parse_args(argv)
    if args.out.is_dir():  # a folder meant as the place of the files: they would go beside it, as <folder>.json
        ap.error(f"--out {args.out}: is a folder; --out is the stem of the two files, e.g. {args.out / 'simulate_al'}")
    for suffix in (".json", ".csv"):  # --out is the stem of both files
        ap.check_output(out_file(args.out, suffix))
    if args.limit is not None and args.limit < 4:
        ap.error(f"--limit must be >= 4 (half of them to fit, at least two, half to score), got {args.limit}")
    if args.bins < 10:
        ap.error(f"--bins must be >= 10, got {args.bins}")
    if args.limit is not None and args.bins > args.limit:
        ap.error(f"--bins must be <= --limit (more bins than examples leaves bins empty), got {args.bins} for "
                 f"--limit {args.limit}")
    if not 0 < args.max_e < float("inf"):
        ap.error(f"--max-e must be > 0 and finite, got {args.max_e}")
    if not 256 < args.vocab <= MAX_VOCAB:
        ap.error(f"--vocab must be in (256, {MAX_VOCAB}] (the 256 bytes plus merges), got {args.vocab}")
    if args.n_boot < 0:
        ap.error(f"--n-boot must be >= 0, got {args.n_boot}")
    if args.seed < 0:
        ap.error(f"--seed must be >= 0, got {args.seed}")
    if args.k_ngram < 1 or args.k_eagle < 1:
        ap.error(f"--k-ngram and --k-eagle must be >= 1, got {args.k_ngram} and {args.k_eagle}")
    if not 1 <= args.min_n <= args.max_n:
        ap.error(f"need 1 <= --min-n <= --max-n, got {args.min_n} and {args.max_n}")
    if args.eagle_rates_by_state is None:
        if len(args.eagle_rates) < args.k_eagle:
            ap.error(f"--eagle-rates: one rate per draft position, {args.k_eagle} for --k-eagle {args.k_eagle}, "
                     f"got {len(args.eagle_rates)}")
        if not all(0 <= r <= 1 for r in args.eagle_rates):
            ap.error(f"--eagle-rates must lie in [0, 1], got {args.eagle_rates}")
    novel_rates = None
    if args.eagle_rates_by_state is not None:
        try:
            states = json.loads(args.eagle_rates_by_state.read_text())["eagle_by_ngram_state"]
            args.eagle_rates = k_rates(states["first right"]["rates"], args.k_eagle)
            novel_rates = k_rates(states["novel"]["rates"], args.k_eagle)
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"--eagle-rates-by-state {args.eagle_rates_by_state}: no eagle_by_ngram_state table with "
                     f"'first right' and 'novel' rates ({type(e).__name__}: {e})")
    args.eagle_rates_novel = novel_rates
    try:  # SimConfig checks the rest: rates that increase (given, or read from --eagle-rates-by-state)
        configs = {p: SimConfig(policy=p, k_ngram=args.k_ngram, k_eagle=args.k_eagle, min_n=args.min_n,
                                max_n=args.max_n, eagle_rates=tuple(args.eagle_rates), eagle_rates_novel=novel_rates,
                                seed=args.seed) for p in POLICIES}
    except ValueError as e:
        flag = "--eagle-rates" if novel_rates is None else f"--eagle-rates-by-state {args.eagle_rates_by_state}"
        ap.error(f"{flag}: {e}")
    t0 = time.time()

    try:  # a missing data folder, or a missing or unreadable data file, is one line, before any work
        source = args.data or default_data_dir() / "code_edits_dev.jsonl"
        examples = load_code_edits(source)
    except (OSError, ValueError) as e:
        ap.error(f"{'--data: ' if args.data else ''}{e}")
    if not examples:
        ap.error(f"{'--data ' if args.data else ''}{source}: holds no code edits")
    corpus = [t for ex in examples for t in (ex.input_text, ex.reference)]  # the tokenizer's text: every example
    rng = np.random.default_rng(args.seed)
    if args.limit is not None and args.limit < len(examples):
        examples = [examples[i] for i in np.sort(rng.choice(len(examples), args.limit, replace=False))]

    def inside_bins(e: np.ndarray) -> np.ndarray:
        """The examples with an edit norm inside the bins; one line and exit 2 when too few for the fits or bins."""
        inside = np.flatnonzero((e >= 0) & (e <= args.max_e))
        if inside.size < 4:
            ap.error(f"{inside.size} of the {len(examples)} examples have an edit norm in [0, --max-e {args.max_e}]; "
                     "the fits need at least 4")
        if args.bins > inside.size:
            ap.error(f"--bins must be <= the {inside.size} examples with an edit norm in [0, --max-e {args.max_e}] "
                     f"(more bins than examples leaves bins empty), got {args.bins}")
        return inside

    e_char = np.array([ex.edit_norm for ex in examples])
    if args.level == "char":  # known before any tokenizing
        inside_bins(e_char)
    tok, tok_desc = load_tokenizer(corpus, args.vocab, str(args.data) if args.data else "code_edits_dev.jsonl")
    prompts = encode(tok, [ex.prompt for ex in examples])
    refs = encode(tok, [ex.reference for ex in examples])
    befores = encode(tok, [ex.input_text for ex in examples])
    e_tok = np.array([token_edit_norm(b, r) for b, r in zip(befores, refs)])
    e = e_char if args.level == "char" else e_tok
    length = np.array([r.size for r in refs], dtype=float)
    everyone = inside_bins(e)  # the examples inside the bins
    edges = np.linspace(0.0, args.max_e, args.bins + 1)
    idx = bin_index(e, edges)
    print(f"{len(examples)} examples, tokenizer: {tok_desc} ({time.time() - t0:.0f}s)", file=sys.stderr)

    pairs = list(zip(prompts, refs))
    res = {}
    for p, cfg in configs.items():
        t = time.time()
        res[p] = run_policy(pairs, cfg)
        print(f"simulated {p}: {time.time() - t:.1f}s", file=sys.stderr)

    n_bins = args.bins
    perm = rng.permutation(everyone)
    fit_half, test_half = np.sort(perm[: perm.size // 2]), np.sort(perm[perm.size // 2 :])
    table_all = per_bin(idx, n_bins, everyone, e, length, res)
    table_fit = per_bin(idx, n_bins, fit_half, e, length, res)
    table_test = per_bin(idx, n_bins, test_half, e, length, res)

    al_eagle = al_from_rates((novel_rates or args.eagle_rates)[: args.k_eagle])  # by state: EAGLE on new text
    ok_fit, ok_test = table_fit["n"] > 0, table_test["n"] > 0
    lowest = int(np.flatnonzero(ok_fit)[0])
    al_ngram_lowest = float(table_fit["ngram_al"][lowest])
    # the PR's calibration: the copy rate that reproduces the lowest bin's n-gram AL at that bin's edit norm
    # (using the measured AL itself as the copy rate would discount the bin's new text a second time)
    al_ngram_copy = float(harmonic_calibrate_ngram(al_ngram_lowest, table_fit["mean_e"][lowest], 1.0, k=args.k_ngram))
    # edit structure of the references (no decoding involved): copied runs over tokens, edits between them
    runs = [copied_runs(b, r) for b, r in zip(befores, refs)]
    n_edits = np.array([max(len(r) - 1, 0) for r in runs])
    share = np.array([1.0 - min(sum(r), n) / n if n else 0.0 for r, n in zip(runs, length)])  # new-token share
    share_consts = fit_new_share(e[fit_half], share[fit_half])
    structure = fit_edit_structure(share[fit_half], length[fit_half], n_edits[fit_half])
    fit_groups = np.full(len(examples), -1)
    fit_groups[fit_half] = np.searchsorted(np.flatnonzero(ok_fit), idx[fit_half])  # bin -> index among non-empty
    test_groups = np.full(len(examples), -1)
    test_groups[test_half] = idx[test_half]
    fits, preds, errors = {}, {}, {}
    for p in MODELED:
        ae = 1.0 if p == "ngram" else al_eagle
        y = table_fit[f"{p}_al"][ok_fit]
        x, ln = table_fit["mean_e"][ok_fit], table_fit["mean_tokens"][ok_fit]
        boot = boot_bins(idx, n_bins, fit_half, res[p], args.n_boot, np.random.default_rng([args.seed, 1]))[:, ok_fit]
        ks = {"k_ngram": args.k_ngram, "k_eagle": args.k_eagle}
        k_eagle = None if p == "ngram" else args.k_eagle  # bounds the re-sync models' novel rate with k_ngram
        fits[p] = {
            "harmonic_pr": fit_harmonic(x, y, al_eagle=ae, al_ngram=al_ngram_copy, **ks),
            "harmonic_pr_literal": fit_harmonic(x, y, al_eagle=ae, al_ngram=min(al_ngram_lowest, args.k_ngram + 1),
                                                **ks),
            "harmonic_fit": fit_harmonic(x, y, al_eagle=ae, boot=boot, **ks),
            "harmonic_free": fit_harmonic(x, y, boot=boot, **ks),
            "resync": fit_resync(x, y, ln, k=args.k_ngram, k_eagle=k_eagle, boot=boot, share=share_consts,
                                 **structure),
            "resync_eagle": fit_resync(x, y, ln, k=args.k_ngram, k_eagle=k_eagle, boot=boot, share=share_consts,
                                       novel_rate=ae, **structure),
            "resync_runs": fit_resync_runs(runs, length, fit_groups, y, k=args.k_ngram, k_eagle=k_eagle, boot=boot),
        }
        preds[p], errors[p] = {}, {}
        for name, f in fits[p].items():
            if name == "resync_runs":
                pred = f.predict(runs, length, test_groups)
                pred = np.concatenate([pred, np.full(n_bins - pred.size, np.nan)])
            else:
                pred = np.full(n_bins, np.nan)
                pred[ok_test] = f.predict(table_test["mean_e"][ok_test], table_test["mean_tokens"][ok_test])
            preds[p][name] = pred
            errors[p][name] = model_error(pred, table_test[f"{p}_al"])

    ctx = dict(args=args, tok_desc=tok_desc, edges=edges, tables={"all": table_all, "fit": table_fit,
               "test": table_test}, fits=fits, preds=preds, errors=errors, al_eagle=al_eagle,
               al_ngram_lowest=al_ngram_lowest, al_ngram_copy=al_ngram_copy, lowest=lowest, structure=structure,
               share_consts=share_consts,
               e_char=e_char[everyone], e_tok=e_tok[everyone], idx=idx[everyone], seconds=time.time() - t0)
    _write(ctx)
    _print(ctx)
    print(f"done in {time.time() - t0:.0f}s; wrote {out_file(args.out, '.json')} and {out_file(args.out, '.csv')}",
          file=sys.stderr)
    return 0


def k_rates(rates, k: int) -> list[float]:
    """``k`` per-position rates from measured ones (zeros past the measured positions; all zeros for none)."""
    r = [float(x) for x in rates or ()][:k]
    return r + [0.0] * (k - len(r))


def _rates_source(args) -> str:
    """Where the simulation's EAGLE rates come from."""
    if args.eagle_rates_novel is not None:
        return (f"by n-gram state, from {args.eagle_rates_by_state}: eagle_rates where n-gram's first token would be "
                f"right, eagle_rates_novel {args.eagle_rates_novel} where it would be wrong or absent")
    return RATES_SOURCE if tuple(args.eagle_rates) == DEFAULT_RATES else "given on the command line"


def json_safe(x):
    """JSON-safe copy (NaN -> None, numpy -> Python)."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [json_safe(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return None if not np.isfinite(x) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def _write(c: dict) -> None:
    args, edges, idx = c["args"], c["edges"], c["idx"]
    by_bin = lambda v: [float(v[idx == b].mean()) if np.any(idx == b) else None  # noqa: E731
                        for b in range(len(edges) - 1)]
    info = run_info("cpu")  # the simulation and the fits run on the CPU
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    doc = {
        "run_info": info,
        "config": config,
        "eagle_rates_source": _rates_source(args),
        "tokenizer": c["tok_desc"],
        "prompt": "Blazedit prompt (hybridsd.data.blazedit_prompt) as raw text, no chat template; reference = after",
        "al": "sequence-normalized: tokens / target passes, prefill included; corpus = sum tokens / sum passes",
        "models": {
            "harmonic_pr": (f"PR model (predictive); AL_eagle = al_from_rates(eagle_rates[:k_eagle]) = "
                            f"{c['al_eagle']:.4f} (1 for n-gram alone); AL_ngram calibrated on the lowest non-empty "
                            f"bin of the fit half (bin {c['lowest']}, n-gram-alone corpus AL "
                            f"{c['al_ngram_lowest']:.4f}): "
                            f"the copy rate that reproduces that AL at the bin's mean edit norm, "
                            f"hybridsd.analytic.harmonic_calibrate_ngram = {c['al_ngram_copy']:.4f} (capped at k+1)"),
            "harmonic_pr_literal": ("PR model as the PR calibrated it: the lowest bin's measured n-gram AL used as "
                                    f"AL_ngram itself ({c['al_ngram_lowest']:.4f}, capped at k+1), which discounts "
                                    "that bin's new text a second time, so the n-gram curve passes below its own "
                                    "calibration point"),
            "harmonic_fit": ("PR model (predictive); AL_eagle as harmonic_pr, AL_ngram fitted to the fit half's "
                             "per-bin ALs, bounded by k_ngram + 1"),
            "harmonic_free": ("PR model with both ALs fitted, each bounded by its k + 1 (a curve fit, not a "
                              "prediction from parts)"),
            "resync": ("hybridsd.analytic.resync_al (predictive), fed the new-token share: the bin's mean edit norm "
                       f"converted by new_share with constants fitted on the fit half's references "
                       f"({c['share_consts']}); base_edits and segment_len measured from the fit half's reference "
                       "diffs (fit_edit_structure on copied runs over tokens, against the new-token share); resync "
                       "and novel_rate fitted to the fit half's per-bin ALs with each bin's mean output length "
                       "(novel_rate free up to what one pass can emit, max(k_ngram, k_eagle) + 1 for the hybrids and "
                       "k_ngram + 1 for n-gram alone: an effective rate, a curve parameter); copy_accept fixed at 1 "
                       "(per-bin ALs cannot separate it from resync, which then also absorbs misdirected n-gram "
                       "drafts inside runs)"),
            "resync_eagle": ("as resync, with novel_rate held at its meaning: 1 for n-gram alone, AL_eagle for the "
                             "hybrids; resync alone fitted"),
            "resync_runs": ("hybridsd.analytic.resync_passes (diagnostic: needs each reference's copied runs, "
                            "token-level Levenshtein alignment of before vs after); resync and novel_rate fitted "
                            "(bounded as in resync), copy_accept 1"),
            "split": "seeded random half of the binned examples for fitting, the other half for scoring",
            "ci": f"95% percentile intervals over {args.n_boot} refits to fit-half examples resampled within bins",
        },
        "edit_structure": c["structure"],
        "new_share_constants": c["share_consts"],
        "bins": [[float(a), float(b)] for a, b in zip(edges[:-1], edges[1:])],
        "mean_char_edit_norm_by_bin": by_bin(c["e_char"]),
        "mean_token_edit_norm_by_bin": by_bin(c["e_tok"]),
        "tables": {split: {k: v.tolist() for k, v in t.items()} for split, t in c["tables"].items()},
        "fits": {p: {n: f.as_dict() for n, f in fs.items()} for p, fs in c["fits"].items()},
        "test_predictions": {p: {n: v.tolist() for n, v in ps.items()} for p, ps in c["preds"].items()},
        "test_errors": c["errors"],
        "test_errors_by_bin": {p: {n: (v - c["tables"]["test"][f"{p}_al"]).tolist() for n, v in ps.items()}
                               for p, ps in c["preds"].items()},
        "seconds": c["seconds"],
    }
    write_atomic(out_file(args.out, ".json"), json.dumps(json_safe(doc), indent=1) + "\n")
    table = io.StringIO(newline="")
    w = csv.writer(table)
    # every row carries the run's config and run_info, after the table's own columns
    setting = {**{k: json.dumps(v) if isinstance(v, list) else v for k, v in config.items() if k != "out"},
               "tokenizer": c["tok_desc"], **info}
    w.writerow(["split", "bin_lo", "bin_hi", "n", "mean_edit_norm", "mean_tokens", "policy", "al_corpus",
                "al_mean", "precision_al", *(f"pred_{m}" for m in MODELS), *setting])
    for split, t in c["tables"].items():
        for b in range(len(edges) - 1):
            for p in POLICIES:
                pr = [c["preds"][p][m][b] if split == "test" and p in c["preds"] else np.nan for m in MODELS]
                row = [split, edges[b], edges[b + 1], t["n"][b], t["mean_e"][b], t["mean_tokens"][b], p,
                       t[f"{p}_al"][b], t[f"{p}_al_mean"][b], t[f"{p}_precision_al"][b], *pr]
                w.writerow(["" if isinstance(v, float) and not np.isfinite(v) else
                            (f"{v:.6g}" if isinstance(v, (float, np.floating)) else v) for v in row]
                           + ["" if v is None else v for v in setting.values()])
    write_atomic(out_file(args.out, ".csv"), table.getvalue())


def _fmt(v, nd=2):
    return "-" if v is None or not np.isfinite(v) else f"{v:.{nd}f}"


def _print(c: dict) -> None:
    args, edges, t, tt = c["args"], c["edges"], c["tables"]["all"], c["tables"]["test"]
    bins = [f"[{a:.2f},{b:.2f}{']' if i == len(edges) - 2 else ')'}"
            for i, (a, b) in enumerate(zip(edges[:-1], edges[1:]))]
    print(f"\nSequence-normalized AL per {args.level} edit-norm bin, all examples: corpus (mean per example). "
          f"k_ngram={args.k_ngram}, k_eagle={args.k_eagle}, n-gram n in [{args.min_n},{args.max_n}], "
          f"EAGLE rates {args.eagle_rates} (AL {c['al_eagle']:.2f}; "
          f"{_rates_source(args)}). "
          f"Tokenizer: {c['tok_desc']}.\n")
    print("| bin | n | mean e | tokens | ngram | eagle | prefer-ngram | tree |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for b, name in enumerate(bins):
        cells = [f"{_fmt(t[f'{p}_al'][b])} ({_fmt(t[f'{p}_al_mean'][b])})" for p in POLICIES]
        print(f"| {name} | {t['n'][b]} | {_fmt(t['mean_e'][b], 3)} | {_fmt(t['mean_tokens'][b], 0)} | "
              + " | ".join(cells) + " |")
    for p in MODELED:
        print(f"\nHeld-out half, {p}: measured corpus AL and each model's prediction\n")
        print("| bin | n | mean e | measured | " + " | ".join(MODELS) + " |")
        print("|---|---:|---:|---:|" + "---:|" * len(MODELS))
        for b, name in enumerate(bins):
            print(f"| {name} | {tt['n'][b]} | {_fmt(tt['mean_e'][b], 3)} | {_fmt(tt[f'{p}_al'][b])} | "
                  + " | ".join(_fmt(c["preds"][p][m][b]) for m in MODELS) + " |")
    print("\nHeld-out error per model; fitted parameters with 95% bootstrap CI\n")
    print("| policy | model | params | MAE | RMSE | max abs | mean rel |")
    print("|---|---|---|---:|---:|---:|---:|")
    for p in MODELED:
        for n, f in c["fits"][p].items():
            ps = ", ".join(f"{k}={v:.3g}" + (f" [{f.ci[k][0]:.3g}, {f.ci[k][1]:.3g}]" if k in f.ci else "")
                           for k, v in f.params.items())
            er = c["errors"][p][n]
            print(f"| {p} | {n} | {ps} | {_fmt(er['mae'], 3)} | {_fmt(er['rmse'], 3)} | {_fmt(er['max_abs'], 3)} | "
                  f"{_fmt(er['mean_rel'], 3)} |")
    print(f"\nEdit structure measured on the fit half's diffs: {c['structure']}; parameters without CI are fixed.")


if __name__ == "__main__":
    sys.exit(main())
