"""Saved results as pandas tables: spec_bench JSONL rows, the trace simulation, the speed benchmark (step times,
EAGLE draft cost, loop overhead, kernel profile, the zoo model end to end, HF generate, and the diagnostics: KV
capacity check, step conditions, the split-K matmul sweep) and the step-time ratios measured from it.

Corpus-level aggregates sum counters over rows before dividing (``sum tokens / sum passes``), never average
per-prompt ratios. pandas is an optional dependency (``pip install -e ".[plots]"``), imported inside functions.
"""

from __future__ import annotations

import glob
import gzip
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

from experiments import bandwidth_floor


def norm_bins(width: float, top: float = 0.6) -> list[float]:
    """Edges of equal edit-norm bins of ``width`` over [0, ``top``] (``width`` must divide ``top``)."""
    n = round(top / width) if width > 0 else 0
    if n < 1 or abs(n * width - top) > 1e-9:
        raise ValueError(f"--bin-width must divide {top} into whole bins, got {width}")
    return [round(top * i / n, 6) for i in range(n + 1)]


EDIT_BINS = tuple(norm_bins(0.05))  # 0.05-wide over [0, 0.6], as spec_bench --per-bin by default
ANALYSIS_BINS = tuple(norm_bins(0.075))  # the 8 bins the edit-norm sweep samples (16 each)
COARSE_BINS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 1.0)
HYBRIDS = ("ngram-eagle", "ngram-eagle3")
# the spec_bench config fields that load_runs' other columns do not show, each a column of its own, with the value
# that stands for rows written before the field existed (spec_bench's default)
CONFIG_DEFAULTS = {"prompt_lookup_min": 2, "prompt_lookup_max": 5, "change_request": "located", "min_distance": None,
                   "max_distance": None, "cuda_graphs": True, "check_lossless": False, "eagle_dir": None,
                   "dataset_path": None, "hf_split": "train", "dataset_digest": None, "compile": "none",
                   "tree_depth": 6, "tree_top_k": 10, "tree_nodes": 60, "tree_paths": None, "exact": 0,
                   "hf_shuffle": None, "checkpoint_embeddings": False}
# a speculative row and a plain row compare when these agree (the config minus the drafter's settings; the data
# set's identity too, since an hf data set's prompt ids are its row numbers)
MATCH_KEYS = ("model", "dataset", "dataset_path", "dataset_digest", "split", "hf_split", "change_request", "bos_mode",
              "chat_template", "temperature", "seed", "output_len", "device", "dtype", "example_id")
MATCH_BY = ("dataset", "variant", "k", "bos_mode", "device", "dtype")


def _paths(paths_or_globs) -> list[Path]:
    """Files named by paths, folders (their ``*.jsonl`` and ``*.jsonl.gz`` files) and glob patterns, in order;
    ``FileNotFoundError`` naming any of them that names no file (a missing path, a glob matching nothing, a folder
    without results files)."""
    items = [paths_or_globs] if isinstance(paths_or_globs, (str, Path)) else list(paths_or_globs)
    out: list[Path] = []
    for item in items:
        s = str(item)
        if any(c in s for c in "*?["):
            found = [Path(p) for p in sorted(glob.glob(s))]
            if not found:
                raise FileNotFoundError(f"no results files match {s}")
        elif Path(s).is_dir():
            found = sorted(p for p in Path(s).iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))
            if not found:
                raise FileNotFoundError(f"no results files (*.jsonl, *.jsonl.gz) in the folder {s}")
        elif Path(s).is_file():
            found = [Path(s)]
        else:
            raise FileNotFoundError(f"results file {s} not found")
        out.extend(found)
    if not out:
        raise FileNotFoundError(f"no results files match {items}")
    return list(dict.fromkeys(out))


def _eagle_kind(method: str) -> str | None:
    return "eagle3" if method.endswith("eagle3") else "eagle" if method.endswith("eagle") else None


def _k_label(method: str, kn, ke) -> str:
    if method == "none":
        return "-"
    if method in HYBRIDS:
        return str(kn) if kn == ke else f"{kn}/{ke}"
    return str(kn if method == "ngram" else ke)


def _frozen(value):
    """``value`` with its lists as tuples (a JSON list as a value pandas can group by)."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


COUNTERS = ("num_tokens", "num_target_steps", "num_drafts", "num_draft_tokens", "num_accepted")


def _count(value, least: int = 0) -> bool:
    """Whether ``value`` is a whole count: an int (not a bool, not a float such as NaN) >= ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _check_row(r: dict) -> None:
    """``ValueError`` naming the field of a spec_bench row that is not of its kind: the stats' counters whole
    counts (target passes >= 1: a real run's prefill is one), ``accepted_per_position`` a list of counts, the
    per-drafter counts objects of counts, ``config_key`` and ``example_id`` strings."""
    st = r["stats"]
    for name in COUNTERS:
        least = 1 if name == "num_target_steps" else 0
        if not _count(st[name], least):
            raise ValueError(f"{name} is {st[name]!r:.60}, not a whole count >= {least}")
    kinds = {"accepted_per_position": (list, []), "steps_by_drafter": (dict, {}), "accepted_by_drafter": (dict, {})}
    for name, (kind, empty) in kinds.items():
        v = st.get(name, empty)
        if not isinstance(v, kind) or not all(map(_count, v.values() if kind is dict else v)):
            raise ValueError(f"{name} is {v!r:.60}, not {'a list' if kind is list else 'an object'} of counts")
    for name in ("config_key", "example_id"):
        if not isinstance(r[name], str):
            raise ValueError(f"{name} is {r[name]!r:.60}, not a string")


def _flatten(r: dict, file: str, trace: bool) -> dict:
    _check_row(r)
    cfg, st, info = r["config"], r["stats"], r.get("run_info", {})
    m = cfg["method"]
    kd = cfg.get("k", {})
    kn = kd.get("ngram") if m == "ngram" or m in HYBRIDS else None
    ke = kd.get(_eagle_kind(m)) if _eagle_kind(m) else None
    policy = cfg.get("hybrid_policy", "prefer-ngram") if m in HYBRIDS else None
    tree = cfg.get("tree", "none")  # EAGLE's own draft: a chain, or an EAGLE-2 dynamic / static tree
    dtype = cfg.get("dtype", "auto")
    if dtype == "auto":  # hybridsd.zoo.load's default
        dtype = "bf16" if str(cfg.get("device", "cpu")).startswith("cuda") else "fp32"
    out = {
        "file": file, "config_key": r["config_key"], "method": m, "policy": policy,
        "variant": m + (" tree" if policy == "tree" else "") + (f" ({tree} eagle tree)" if tree != "none" else ""),
        "tree": tree, "k": _k_label(m, kn, ke),
        "k_ngram": kn, "k_eagle": ke, "bos_mode": cfg.get("bos_mode", "single"),
        "temperature": cfg.get("temperature", 0.0), "output_len": cfg.get("output_len"),
        "dataset": r.get("dataset", cfg.get("dataset_name")), "split": cfg.get("split"), "model": cfg.get("model"),
        "seed": cfg.get("seed"), "chat_template": cfg.get("chat_template", True),
        "device": cfg.get("device"), "dtype": dtype,
        **{c: _frozen(cfg.get(c, default)) for c, default in CONFIG_DEFAULTS.items()},
        "setting": f"{'GPU' if str(cfg.get('device', 'cpu')).startswith('cuda') else 'CPU'} {dtype}, "
                   f"<= {cfg.get('output_len')} tokens",
        "example_id": r["example_id"], "ref_edit_norm": _num(r.get("ref_edit_norm")),
        "output_edit_norm": _num(r.get("output_edit_norm")), "prompt_tokens": r.get("prompt_tokens"),
        "max_new_tokens": r.get("max_new_tokens", cfg.get("output_len")),
        "tokens": st["num_tokens"], "passes": st["num_target_steps"], "drafts": st["num_drafts"],
        "draft_tokens": st["num_draft_tokens"], "accepted": st["num_accepted"],
        "accepted_per_position": list(st.get("accepted_per_position", [])),
        "steps_by_drafter": dict(st.get("steps_by_drafter", {})),
        "accepted_by_drafter": dict(st.get("accepted_by_drafter", {})),
        "seq_al": st["num_tokens"] / st["num_target_steps"],
        "precision_al": 1 + st["num_accepted"] / st["num_drafts"] if st["num_drafts"] else math.nan,
        "tpot_ms": r.get("tpot_ms"), "wall_s": r.get("wall_s"), "ranks_per_gpu": info.get("ranks_per_gpu", 1),
        "output_tokens": r.get("tokens"), "lossless": r.get("lossless"),
        "run_device": info.get("device"), "commit": info.get("commit"),
        "torch": info.get("torch"), "transformers": info.get("transformers"),
    }
    if trace:
        out["trace"] = r.get("trace")
    return out


def load_runs(paths_or_globs, *, trace: bool = False, on_bad_line=None):
    """One row per spec_bench JSONL row of the given files (paths, folders or glob patterns; ``.gz``: gzip-compressed).

    Columns: the config (``method``, ``policy`` (hybrids only, else missing), ``variant`` (method, plus " tree"
    for the tree policy, plus " (dynamic eagle tree)" when EAGLE drafts a tree), ``tree``, ``k`` (a label: "-" for
    plain, "5/3" for a hybrid with k_ngram 5 and k_eagle 3),
    ``k_ngram``, ``k_eagle``, ``bos_mode``, ``temperature``, ``output_len``, ``dataset``, ``device``,
    ``dtype`` ("auto" resolved as the zoo loader does: bf16 on CUDA, fp32 on CPU), ``setting`` (a label such
    as "CPU fp32, <= 128 tokens"), the other config fields of :data:`CONFIG_DEFAULTS` (``change_request``,
    ``prompt_lookup_min``, ``tree_depth``, ``exact``, ...; lists as tuples), ...), the prompt
    (``example_id``, ``ref_edit_norm``, ``output_edit_norm``, ``max_new_tokens``: the row's cap, ``output_len`` or
    less where the prompt left less room in the model's context), the counters (``tokens``, ``passes``,
    ``drafts``, ``draft_tokens``, ``accepted``, ``accepted_per_position``, ``steps_by_drafter``), per-row
    ``seq_al`` and ``precision_al``, ``tpot_ms`` (timed on a GPU that ``ranks_per_gpu`` processes shared),
    ``output_tokens`` (None in rows that did not store them),
    and provenance (``run_device``, ``commit``, ``torch``, ``transformers``, ``file``). ``trace=True`` adds
    the per-step trace. A torn last line (an interrupted run) is skipped. Any other line that is not a results
    row (one without target passes too) raises ``ValueError`` naming the file and line, or, with ``on_bad_line``
    (a function taking that message), is reported to it and skipped. A file that cannot be read as
    (gzip-compressed) UTF-8 text raises ``ValueError`` naming it.
    """
    import pandas as pd

    rows = []
    for p in _paths(paths_or_globs):
        try:  # a file that is not (gzip-compressed) UTF-8 text: ValueError naming it
            with gzip.open(p, "rt") if p.suffix == ".gz" else p.open() as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError, EOFError) as e:  # gzip.BadGzipFile is an OSError
            raise ValueError(f"{p}: not a readable results file ({type(e).__name__}: {e})") from None
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rows.append(_flatten(json.loads(line), str(p), trace))
            except (ValueError, KeyError, TypeError, AttributeError) as e:  # ValueError: JSONDecodeError too
                if i == len(lines) - 1 and isinstance(e, json.JSONDecodeError):
                    continue  # torn by an interrupted run
                msg = f"{p} line {i + 1}: not a spec_bench row ({type(e).__name__}: {e})"
                if on_bad_line is None:
                    raise ValueError(msg) from None
                on_bad_line(msg + "; skipped")
    return pd.DataFrame(rows)


def repeated_prompt(df) -> str | None:
    """A prompt that :func:`load_runs`' rows ``df`` hold more than once under one config (a file read twice, or a
    file and its ``.gz`` copy), in words naming its variant and files; None when there is none."""
    twice = df[df.duplicated(["config_key", "example_id"], keep=False)]
    if twice.empty:
        return None
    first = twice.iloc[0]
    files = twice.file[(twice.config_key == first.config_key) & (twice.example_id == first.example_id)]
    return (f"variant {first.variant!r} holds prompt {first.example_id!r} more than once in config "
            f"{first.config_key} (files {', '.join(dict.fromkeys(files))})")


def bin_edit_norm(df, bins: Sequence[float] = EDIT_BINS, column: str = "ref_edit_norm"):
    """A copy of ``df`` with ``bin`` (ordered labels "[lo, hi)", the last bin closed; NaN outside the bins or
    for a missing value), ``bin_lo``, ``bin_hi`` and ``bin_mid`` from ``column``, as
    :func:`hybridsd.data.bin_index` bins."""
    import numpy as np
    import pandas as pd

    from hybridsd.data import bin_index

    edges = [float(b) for b in bins]
    labels = bin_labels(list(zip(edges[:-1], edges[1:])))
    idx = bin_index(pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float), edges)
    ok = idx >= 0
    lo = np.where(ok, np.asarray(edges)[np.clip(idx, 0, None)], np.nan)
    hi = np.where(ok, np.asarray(edges)[np.clip(idx + 1, 0, None)], np.nan)
    cat = pd.Categorical.from_codes(np.where(ok, idx, -1), categories=labels, ordered=True)
    return df.assign(bin=cat, bin_lo=lo, bin_hi=hi, bin_mid=(lo + hi) / 2)


def _group(df, by):
    return df.groupby(list(by), observed=True, dropna=False, sort=True)


def corpus_al(df, by: Sequence[str] = ("dataset", "variant", "k", "bos_mode")):
    """Corpus-level ALs per group: ``n`` rows, summed ``tokens``, ``passes``, ``drafts``, ``accepted``;
    ``seq_al = tokens / passes`` (prefill included), ``precision_al = 1 + accepted / drafts`` (NaN without
    drafts), ``tpot_ms`` (median over rows), ``mean_ref_edit_norm`` and ``mean_output_edit_norm``
    (means over rows), and per-position acceptance ``r1, r2, ...`` = drafts whose i-th
    token was accepted / drafts (NaN past the longest draft in the group), so ``precision_al = 1 + sum r_i``."""
    import pandas as pd

    width = max((len(a) for a in df["accepted_per_position"]), default=0)
    pos = [f"_a{i + 1}" for i in range(width)]
    wide = pd.DataFrame([list(a) + [0] * (width - len(a)) for a in df["accepted_per_position"]],
                        index=df.index, columns=pos, dtype=float)
    cols = ["tokens", "passes", "drafts", "accepted", "tpot_ms", "ref_edit_norm", "output_edit_norm"]
    work = pd.concat([df[list(by)], df[cols].apply(pd.to_numeric, errors="coerce"), wide], axis=1)
    work["_len"] = df["accepted_per_position"].map(len)
    g = _group(work, by)
    out = g[["tokens", "passes", "drafts", "accepted", *pos]].sum()
    out.insert(0, "n", g.size())
    out["seq_al"] = out.tokens / out.passes
    drafts = out.drafts.where(out.drafts > 0)
    out["precision_al"] = 1 + out.accepted / drafts
    out["tpot_ms"] = g["tpot_ms"].median()
    out["mean_ref_edit_norm"] = g["ref_edit_norm"].mean()
    out["mean_output_edit_norm"] = g["output_edit_norm"].mean()
    longest = g["_len"].max()
    for i, c in enumerate(pos):
        out[f"r{i + 1}"] = (out.pop(c) / drafts).where(longest > i)
    return out.reset_index()


def position_rates(df, by: Sequence[str] = ("dataset", "variant", "k", "bos_mode")):
    """:func:`corpus_al`'s per-position acceptance in long form: ``by`` columns, ``position`` (1-based),
    ``rate``; positions past a group's longest draft are left out."""
    al = corpus_al(df, by)
    cols = [c for c in al.columns if c.startswith("r") and c[1:].isdigit()]
    long = al.melt(id_vars=list(by), value_vars=cols, var_name="position", value_name="rate")
    long["position"] = long["position"].str[1:].astype(int)
    return long.dropna(subset=["rate"]).sort_values([*by, "position"]).reset_index(drop=True)


def drafter_steps(df, by: Sequence[str] = ("dataset", "variant", "k")):
    """Verification steps by the drafter(s) that proposed them, per group: ``by`` columns, ``drafter``
    ("none" for a step without a draft, "ngram+eagle" for a tree step with both), ``steps``, ``share`` of
    the group's steps."""
    import pandas as pd

    recs = []
    for key, part in _group(df, by):
        key = key if isinstance(key, tuple) else (key,)
        total: dict[str, int] = {}
        for d in part["steps_by_drafter"]:
            for name, n in d.items():
                total[name] = total.get(name, 0) + n
        steps = sum(total.values())
        for name, n in sorted(total.items()):
            recs.append({**dict(zip(by, key)), "drafter": name, "steps": n, "share": n / steps if steps else math.nan})
    return pd.DataFrame(recs)


def match_rows(df, keys: Sequence[str] = MATCH_KEYS):
    """Speculative rows beside the plain run (method "none") of the same prompt, data and config (``keys``):
    ``same`` says whether the outputs are equal, ``compared_by`` how it was decided: "tokens" when both
    rows stored their output tokens, else "length+edit_norm" (output length and output edit norm against
    the input, a weaker proxy for rows written before tokens were stored). Rows without a plain partner are
    left out."""
    import numpy as np

    keys = list(keys)
    plain = df[df.method == "none"].drop_duplicates(keys)[keys + ["output_tokens", "tokens", "output_edit_norm"]]
    m = df[df.method != "none"].merge(plain, on=keys, how="inner", suffixes=("", "_plain"))
    by_tokens = m.output_tokens.map(lambda t: isinstance(t, list)) & m.output_tokens_plain.map(
        lambda t: isinstance(t, list))
    same_tokens = [a == b for a, b in zip(m.output_tokens, m.output_tokens_plain)]
    e, ep = m.output_edit_norm.astype(float), m.output_edit_norm_plain.astype(float)
    same_proxy = (m.tokens == m.tokens_plain) & (np.isclose(e, ep) | (e.isna() & ep.isna()))
    return m.assign(same=np.where(by_tokens, same_tokens, same_proxy).astype(bool),
                    compared_by=np.where(by_tokens, "tokens", "length+edit_norm"))


def match_rate(df, by: Sequence[str] = MATCH_BY, keys: Sequence[str] = MATCH_KEYS):
    """Share of prompts whose output equals the plain run's (see :func:`match_rows`), per group: ``n``
    prompts compared, ``n_same``, ``match_rate``, ``compared_by`` ("tokens", "length+edit_norm" or "mixed")."""
    m = match_rows(df, keys)
    g = _group(m, by)
    out = g["same"].agg(n="size", n_same="sum")
    out["match_rate"] = out.n_same / out.n
    out["compared_by"] = g["compared_by"].agg(lambda s: s.iloc[0] if s.nunique() == 1 else "mixed")
    return out.reset_index()


def bos_pairs(df):
    """Prompts run with single and with doubled BOS under an otherwise equal config, one row each: the config
    and prompt columns, ``tokens``, ``passes``, ``drafts``, ``accepted``, ``seq_al``, ``output_tokens`` with
    suffixes ``_single`` / ``_doubled``, and ``same_output`` (whether the outputs are equal; None when a side
    stored no tokens)."""
    keys = [c for c in MATCH_KEYS if c != "bos_mode"] + ["method", "variant", "k", "setting"]
    vals = ["tokens", "passes", "drafts", "accepted", "seq_al", "output_tokens"]
    single = df[df.bos_mode == "single"].drop_duplicates(keys)[keys + vals]
    doubled = df[df.bos_mode == "doubled"].drop_duplicates(keys)[keys + vals]
    m = single.merge(doubled, on=keys, suffixes=("_single", "_doubled"))
    same = [a == b if isinstance(a, list) and isinstance(b, list) else None
            for a, b in zip(m.output_tokens_single, m.output_tokens_doubled)]
    return m.assign(same_output=_objects(same, m.index))


def _objects(values, index):
    """A Series of Python objects (keeps None and bools as they are)."""
    import pandas as pd

    return pd.Series(values, index=index, dtype=object)


def compare_bos(df, by: Sequence[str] = ("dataset", "variant", "k", "setting"), same_output_only: bool = False):
    """Corpus ALs with single vs doubled BOS per group, over the prompts run both ways (:func:`bos_pairs`):
    ``n`` prompts, ``n_same_output``, ``seq_al_single``, ``seq_al_doubled``, ``precision_al_single``,
    ``precision_al_doubled``, and the losses ``seq_loss = single - doubled``, ``seq_loss_rel = seq_loss /
    single`` (same for precision). ``same_output_only``: only prompts whose output the doubled BOS left
    unchanged, so both ALs are measured on the same text."""
    import pandas as pd

    p = bos_pairs(df)
    if same_output_only:
        p = p[p.same_output.map(lambda v: v is True)]
    g = _group(p.assign(_same=p.same_output.map(lambda v: v is True)), by)
    sums = g[[f"{c}_{m}" for c in ("tokens", "passes", "drafts", "accepted") for m in ("single", "doubled")]].sum()
    out = pd.DataFrame({"n": g.size(), "n_same_output": g["_same"].sum()})
    for m in ("single", "doubled"):
        out[f"seq_al_{m}"] = sums[f"tokens_{m}"] / sums[f"passes_{m}"]
        drafts = sums[f"drafts_{m}"].where(sums[f"drafts_{m}"] > 0)
        out[f"precision_al_{m}"] = 1 + sums[f"accepted_{m}"] / drafts
    for m in ("seq", "precision"):
        out[f"{m}_loss"] = out[f"{m}_al_single"] - out[f"{m}_al_doubled"]
        out[f"{m}_loss_rel"] = out[f"{m}_loss"] / out[f"{m}_al_single"]
    return out.reset_index()


def bos_output_match(df, by: Sequence[str] = ("dataset", "variant", "k")):
    """Does a doubled BOS change the output? Per group: ``n`` prompts run with both BOS modes (same config
    otherwise) and both outputs stored, ``n_same`` whose output tokens are equal, ``share``."""
    p = bos_pairs(df)
    p = p[p.same_output.notna()].assign(same=lambda d: d.same_output.astype(bool))
    out = _group(p, by)["same"].agg(n="size", n_same="sum")
    out["share"] = out.n_same / out.n
    return out.reset_index()


def provenance(df):
    """Where each file's rows were made: file, run device, dtype, commit, torch, transformers, rows."""
    cols = ["file", "run_device", "dtype", "commit", "torch", "transformers"]
    return _group(df, cols).size().rename("rows").reset_index()


def bin_labels(edges: Sequence[Sequence[float]]) -> list[str]:
    """``[a, b)`` per bin (the last closed: ``[a, b]``), with two decimals or as many more as the edges need
    (0.075-wide bins: three)."""
    vals = [v for e in edges for v in e]
    d = next((d for d in range(2, 7) if all(abs(round(v, d) - v) < 1e-9 for v in vals)), 6)
    return [f"[{a:.{d}f}, {b:.{d}f}{']' if i == len(edges) - 1 else ')'}" for i, (a, b) in enumerate(edges)]


def load_simulation(path: str | Path) -> dict:
    """``experiments/results/simulation/simulate_al.json`` as tables: ``bins`` (split, bin, bin_lo, bin_hi, n, mean_e,
    mean_tokens, policy, al (corpus), al_mean, precision_al), ``predictions`` (held-out half: policy, model,
    bin, mean_e, measured, predicted, error = predicted - measured), ``errors`` (policy, model, mae, rmse,
    max_abs, mean_rel, n, params), and ``run_info``, ``config``, ``models`` (descriptions) as stored."""
    import pandas as pd

    doc = json.loads(Path(path).read_text())
    edges = doc["bins"]
    labels = bin_labels(edges)
    nan = lambda v: math.nan if v is None else v  # noqa: E731
    bins, preds, errs = [], [], []
    policies = [k[: -len("_al_mean")] for k in doc["tables"]["all"] if k.endswith("_al_mean")]
    for split, t in doc["tables"].items():
        for b, lab in enumerate(labels):
            for p in policies:
                bins.append({"split": split, "bin": lab, "bin_lo": edges[b][0], "bin_hi": edges[b][1],
                             "n": t["n"][b], "mean_e": nan(t["mean_e"][b]), "mean_tokens": nan(t["mean_tokens"][b]),
                             "policy": p, "al": nan(t[f"{p}_al"][b]), "al_mean": nan(t[f"{p}_al_mean"][b]),
                             "precision_al": nan(t[f"{p}_precision_al"][b])})
    test = doc["tables"]["test"]
    for p, models in doc["test_predictions"].items():
        for model, values in models.items():
            for b, lab in enumerate(labels):
                meas, pred = nan(test[f"{p}_al"][b]), nan(values[b])
                preds.append({"policy": p, "model": model, "bin": lab, "bin_lo": edges[b][0],
                              "mean_e": nan(test["mean_e"][b]), "n": test["n"][b], "measured": meas,
                              "predicted": pred, "error": pred - meas})
            fit = doc["fits"][p][model]
            errs.append({"policy": p, "model": model, **doc["test_errors"][p][model],
                         "params": ", ".join(f"{k}={v:.3g}" for k, v in fit["params"].items())})
    cat = lambda s: pd.Categorical(s, categories=labels, ordered=True)  # noqa: E731
    bins_df, preds_df = pd.DataFrame(bins), pd.DataFrame(preds)
    bins_df["bin"], preds_df["bin"] = cat(bins_df["bin"]), cat(preds_df["bin"])
    return {"bins": bins_df, "predictions": preds_df, "errors": pd.DataFrame(errs),
            "run_info": doc["run_info"], "config": doc["config"], "models": doc["models"]}


_SPEED_IMPL = {"hf_eager": "HF eager", "hf_static_compiled": "HF static cache + compile", "eager": "eager",
               "graph": "CUDA graph", "graph_compiled": "CUDA graph + compile",
               "graph_autotune": "CUDA graph + compile (max-autotune)",
               "graph_auto": "CUDA graph + compile (auto: max-autotune decode, default blocks)",
               "graph_compiled_sdpa": "CUDA graph + compile, SDPA attention",
               "graph_compiled_hf": "CUDA graph + compiled HF model"}
# our target's configurations (bench_speed --configs), as opposed to HF's baselines and the EAGLE head
OUR_CONFIGS = ("eager", "graph", "graph_compiled", "graph_autotune", "graph_auto", "graph_compiled_sdpa",
               "graph_compiled_hf")
SPEED_COLUMNS = ("run", "context", "name", "config", "impl", "layout", "block", "step", "ms", "x_floor", "floor_ms",
                 "error", "device", "commit")


def _speed_name(name: str) -> tuple[str, str, str, int | None, str]:
    """(config, impl, layout, block, step) of a bench_speed entry: "hf_eager_decode" -> ("hf_eager", "HF eager",
    "decode", 1, "decode q1"), "graph_chain_q4" -> ("graph", "CUDA graph", "chain", 4, "chain q4"),
    "graph_autotune_tree_q9" -> ("graph_autotune", "CUDA graph + compile (max-autotune)", "tree", 9, "tree q9"),
    "hf_static_compiled_q8" -> ("hf_static_compiled", ..., "chain", 8, "chain q8"), "eagle1_graph_per_draft_token"
    -> ("eagle1_graph", "EAGLE-1 head (graph)", "draft", None, "per_draft_token"); an unknown name -> (name, name,
    "", None, name)."""
    if name == "hf_eager_decode":
        return "hf_eager", "HF eager", "decode", 1, "decode q1"
    m = re.fullmatch(r"eagle(\d)_(graph|eager)_(.+)", name)
    if m:
        return f"eagle{m.group(1)}_{m.group(2)}", f"EAGLE-{m.group(1)} head ({m.group(2)})", "draft", None, m.group(3)
    m = re.fullmatch(r"(.+?)_(?:(chain|tree)_)?q(\d+)", name)
    if not m:
        return name, name, "", None, name
    config, layout, q = m.groups()
    layout = layout or "chain"
    return config, _SPEED_IMPL.get(config, config), layout, int(q), f"{layout} q{q}"


def _speed_docs(paths_or_globs) -> list[tuple[str, dict]]:
    """(run, document) of each bench_speed JSON file named (paths or glob patterns); run = the file's stem, or
    "folder/stem" for files whose stems the call names more than once (two runs' ``steps_and_baselines.json``
    from different folders loaded together), so no two files share a run."""
    paths = _paths(paths_or_globs)
    stems = [p.stem for p in paths]
    return [(f"{p.parent.name}/{p.stem}" if stems.count(p.stem) > 1 else p.stem, json.loads(p.read_text()))
            for p in paths]


def _frame(rows: list[dict], columns: Sequence[str], ints: Sequence[str] = ()):
    """A DataFrame of ``rows`` with ``columns`` in this order (the columns even when there are no rows); the
    ``ints`` columns as nullable integers (<NA> where a value is missing)."""
    import pandas as pd

    out = pd.DataFrame(rows, columns=list(columns))
    return out.astype({c: "Int64" for c in ints})


def _ms(value) -> float:
    """A stored time in ms, NaN for the error text stored instead of a time."""
    return float(value) if isinstance(value, (int, float)) else math.nan


def load_speed(paths_or_globs):
    """Per-context step times of one or more ``experiments/bench_speed.py`` JSON files, concatenated in long form.

    One row per stored entry: ``run`` (file stem), ``context``, ``name`` (the stored key), ``config`` (the key's
    configuration prefix: our target's "graph", "graph_compiled", "graph_autotune", "graph_auto", "graph_compiled_sdpa",
    "graph_compiled_hf", "eager" (see :data:`OUR_CONFIGS`), HF's "hf_eager", "hf_static_compiled", the head's
    "eagle1_graph", "eagle1_eager"), ``impl`` (its label: "CUDA graph", "CUDA graph + compile", "CUDA graph +
    compile (max-autotune)", "CUDA graph + compile, SDPA attention", "CUDA graph + compiled HF model", "eager",
    "HF eager", "HF static cache + compile", "EAGLE-1 head (graph)", "EAGLE-1 head (eager)"), ``layout``
    ("decode", "chain", "tree"; "draft" for the EAGLE head), ``block`` (tokens per target pass; missing (<NA>) for
    the head), ``step`` ("chain q4", ...; for the head "catchup4_k1", "catchup4_k3" (catch-up over 4 committed
    tokens plus a k-token draft) or "per_draft_token" ((k=3 - k=1) / 2)), ``ms``, ``x_floor`` (ms / ``floor_ms``),
    ``floor_ms`` (that file's floor at that context, :func:`experiments.bandwidth_floor.step_floor_ms`),
    ``error`` (the text stored instead of a time when a variant failed, else missing), and the file's ``device`` and
    ``commit``. "graph_compiled" and its SDPA/HF variants use torch.compile's default mode unless the run's
    ``args.compile_mode`` says otherwise (:func:`load_speed_runs`)."""
    rows = []
    for run, doc in _speed_docs(paths_or_globs):
        info = doc["run_info"]
        for ctx, times in doc["contexts"].items():
            floor = bandwidth_floor.step_floor_ms(doc, int(ctx))
            for name, value in times.items():
                config, impl, layout, q, step = _speed_name(name)
                ms = _ms(value)
                rows.append({"run": run, "context": int(ctx), "name": name, "config": config, "impl": impl,
                             "layout": layout, "block": q, "step": step, "ms": ms, "x_floor": ms / floor,
                             "floor_ms": floor, "error": None if ms == ms else str(value),
                             "device": info.get("device"), "commit": info.get("commit")})
    return _frame(rows, SPEED_COLUMNS, ints=["block"])


SPEED_SECTIONS = ("hf_generate_ms_per_token", "profile", "loop_overhead", "zoo", "step_conditions", "capacity_check",
                  "loop_profile", "rows")


def _sections(doc: dict) -> list[str]:
    """The parts of a results file besides its step times, in :data:`SPEED_SECTIONS` order, each
    ``loop_overhead_<config>`` section after ``loop_overhead``; empty ones left out."""
    out = []
    for s in SPEED_SECTIONS:
        out += [k for k in ([s] + (sorted(k for k in doc if k.startswith("loop_overhead_"))
                                   if s == "loop_overhead" else [])) if doc.get(k)]
    return out


def load_speed_runs(paths_or_globs):
    """One row per results file: ``run``, ``device``, ``commit``, ``date``, ``torch``, ``transformers``,
    ``floors_ms`` (its floor at each context it holds, a dict; :mod:`experiments.bandwidth_floor`),
    ``matrices_floor_ms`` (the weight matrices' bytes alone over its bandwidth: the matmuls' floor),
    ``copy_bandwidth_TBps``, ``weight_GB``, ``layers``, ``contexts`` (the contexts it holds, sorted),
    ``configs`` (our target configurations it timed, from ``args``), ``compile_mode`` (``args.compile_mode``:
    torch.compile's mode for "graph_compiled" and its variants; None = the default mode), ``sections`` (the other
    parts it holds, of :data:`SPEED_SECTIONS` and the ``loop_overhead_<config>`` sections; "rows" is
    the split-K matmul table), ``conditions`` (the stored note on the host's state) and ``args`` (the
    command-line arguments, a dict, in files that store them); missing when absent (the split-K matmul files have
    no floor and no contexts)."""
    rows = []
    for run, doc in _speed_docs(paths_or_globs):
        info, args = doc["run_info"], doc.get("args")
        rows.append({"run": run, "device": info.get("device"), "commit": info.get("commit"),
                     "date": info.get("date"), "torch": info.get("torch"), "transformers": info.get("transformers"),
                     "floors_ms": bandwidth_floor.floors_ms(doc) if "weight_GB" in doc else None,
                     "matrices_floor_ms": bandwidth_floor.matrices_floor_ms(doc) if "weight_GB" in doc else None,
                     "copy_bandwidth_TBps": doc.get("copy_bandwidth_TBps"),
                     "weight_GB": doc.get("weight_GB"), "layers": doc.get("layers"),
                     "contexts": sorted(int(c) for c in doc.get("contexts") or {}),
                     "configs": args.get("configs") if args else None,
                     "compile_mode": args.get("compile_mode") if args else None,
                     "sections": _sections(doc), "conditions": doc.get("conditions"), "args": args})
    return _frame(rows, ["run", "device", "commit", "date", "torch", "transformers", "floors_ms", "matrices_floor_ms",
                         "copy_bandwidth_TBps", "weight_GB", "layers", "contexts", "configs", "compile_mode",
                         "sections", "conditions", "args"])


def speed_vs_baselines(speed):
    """``speed`` (:func:`load_speed`) with each row's HF baselines from the same run and context: ``hf_eager_ms``
    (HF's eager 1-token decode), ``hf_static_ms`` (HF static cache + compile at the same block size; block 9 against
    its block 8, the largest it times, which favours HF by a token), ``x_hf_eager`` and ``x_hf_static`` (ms / those);
    missing where the run lacks the baseline or the row has no block (the EAGLE head)."""
    import pandas as pd

    key = ["run", "context"]
    eager = speed[speed.config == "hf_eager"].groupby(key).ms.first()
    static = speed[speed.config == "hf_static_compiled"]
    static = static.assign(block=static.block.replace({8: 9})).groupby([*key, "block"]).ms.first()
    idx = pd.MultiIndex.from_arrays([speed.run, speed.context])
    blocks = speed.block.replace({8: 9}).astype("float").fillna(-1).astype(int)
    out = speed.assign(hf_eager_ms=eager.reindex(idx).to_numpy(),
                       hf_static_ms=static.reindex(pd.MultiIndex.from_arrays([speed.run, speed.context, blocks]))
                       .to_numpy())
    return out.assign(x_hf_eager=out.ms / out.hf_eager_ms, x_hf_static=out.ms / out.hf_static_ms)


LOOP_COLUMNS = ("steps", "tokens", "drafted", "accepted", "wall_ms_per_step", "forward_ms_per_step",
                "outside_ms_per_step", "outside_forward")
IN_LOOP_COLUMNS = ("steps", "wall_ms", "forward_ms", "host_forward_ms", "outside_ms", "outside_forward")


def _num(value) -> float:
    """A stored number as a float, NaN for None (a field the run did not measure)."""
    return math.nan if value is None else float(value)


def load_loop_overhead(paths_or_globs):
    """The loop-overhead sections (``loop_overhead``, and ``loop_overhead_<config>`` in newer files): one row per
    file, section and drafter, ``run``, ``section`` (the key), ``config`` (the target's configuration the section
    names: "graph", "graph_compiled", ...), ``context``, ``drafter`` ("plain"; "replay_k8": 8 drafted tokens a step
    replayed from the engine's own output, all accepted; "ngram_k8" in older files), ``steps``, ``tokens``,
    ``drafted`` and ``accepted`` (draft tokens proposed and accepted over the run; <NA> in files that do not store
    them), then two measures of the share of a step spent outside the forward passes:

    - against forwards timed apart: ``wall_ms_per_step`` (a ``generate()`` run's wall time per step),
      ``forward_ms_per_step`` (the same block sizes' forward medians, timed apart), ``outside_ms_per_step``
      (wall - forward) and ``outside_forward`` (1 - forward / wall); NaN where the run did not time every block
      size apart (the compiled configurations' drafting steps);
    - from inside the run (the ``in_loop`` dict, newer files; NaN/<NA> elsewhere): ``in_loop_steps`` (steps after
      the prefill), ``in_loop_wall_ms`` (median host time from one target pass's call to the next's),
      ``in_loop_forward_ms`` (median of CUDA events around each pass: host work, launch and device work),
      ``in_loop_host_forward_ms`` (median host time inside the call), ``in_loop_outside_ms`` (median of wall -
      forward) and ``in_loop_outside_forward`` (1 - sum of forward / sum of wall over the steps).

    Files without a section add no rows. A file's ``conditions`` may say a section is not valid
    (:func:`load_speed_runs`): this loader does not judge."""
    rows = []
    for run, doc in _speed_docs(paths_or_globs):
        for key in [k for k in doc if k.startswith("loop_overhead")]:
            sec = doc.get(key) or {}
            for drafter, r in sec.items():
                if isinstance(r, dict):
                    inner = r.get("in_loop") or {}
                    rows.append({"run": run, "section": key, "config": sec.get("config"), "context": sec.get("ctx"),
                                 "drafter": drafter, **{c: r.get(c) for c in LOOP_COLUMNS[:4]},
                                 **{c: _num(r.get(c)) for c in LOOP_COLUMNS[4:]},
                                 "in_loop_steps": inner.get("steps"),
                                 **{f"in_loop_{c}": _num(inner.get(c)) for c in IN_LOOP_COLUMNS[1:]}})
    return _frame(rows, ["run", "section", "config", "context", "drafter", *LOOP_COLUMNS,
                         *(f"in_loop_{c}" for c in IN_LOOP_COLUMNS)],
                  ints=["steps", "tokens", "drafted", "accepted", "in_loop_steps"])


def load_speed_profile(paths_or_globs):
    """The ``profile`` sections (``bench_speed --profile``: kernel time of un-graphed steps, by kind): one row per
    file, profiled step and kind, ``run``, ``context``, ``block`` (tokens per pass), ``kind`` ("matmul",
    "attention", "other", as bench_speed classified the kernels by name), ``ms_per_step`` (device time of that
    kind's kernels per step), ``share`` (of the step's kernel time), ``kernel_ms`` (all kernels of the step), and
    the run's ``profile_config`` as ``compile`` (torch.compile's mode, or True/False) and ``attention``."""
    rows = []
    for run, doc in _speed_docs(paths_or_globs):
        cfg = doc.get("profile_config") or {}
        for p in doc.get("profile") or []:
            kinds = p["ms_per_step_by_kind"]
            total = sum(kinds.values())
            rows += [{"run": run, "context": p["ctx"], "block": p["q"], "kind": kind, "ms_per_step": ms,
                      "share": ms / total, "kernel_ms": total, "compile": cfg.get("compile"),
                      "attention": cfg.get("attention")} for kind, ms in kinds.items()]
    return _frame(rows, ["run", "context", "block", "kind", "ms_per_step", "share", "kernel_ms", "compile",
                         "attention"], ints=["context", "block"])


def load_speed_profile_top(paths_or_globs):
    """The profiles' top kernels: one row per file, profiled step and kernel, ``run``, ``context``, ``block``,
    ``rank`` (1 = the most device time), ``name`` (the kernel's name, cut at 120 characters by bench_speed),
    ``ms_per_step``, ``calls_per_step``, ``share`` (of the step's kernel time, all kernels)."""
    rows = []
    for run, doc in _speed_docs(paths_or_globs):
        for p in doc.get("profile") or []:
            total = sum(p["ms_per_step_by_kind"].values())
            rows += [{"run": run, "context": p["ctx"], "block": p["q"], "rank": i + 1, "name": k["name"],
                      "ms_per_step": k["ms_per_step"], "calls_per_step": k["calls_per_step"],
                      "share": k["ms_per_step"] / total} for i, k in enumerate(p.get("top", []))]
    return _frame(rows, ["run", "context", "block", "rank", "name", "ms_per_step", "calls_per_step", "share"],
                  ints=["context", "block", "rank"])


def load_capacity_check(paths_or_globs):
    """The ``capacity_check`` sections (``bench_speed --conditions``: the graphed steps of targets that differ only
    in KV capacity, timed in turn A B A B): one row per file, configuration, round, capacity and step, ``run``,
    ``config``, ``round``, ``capacity`` (the cache's slots), ``kv_len`` (the span a step attends over), ``step``
    ("chain_q1", "chain_q9", "tree_q9"), ``layout``, ``block``, ``ms``."""
    rows = []
    for run, doc in _speed_docs(paths_or_globs):
        for config, recs in (doc.get("capacity_check") or {}).items():
            for r in recs:
                for step, ms in r.items():
                    m = re.fullmatch(r"(chain|tree)_q(\d+)", step)
                    if m:
                        rows.append({"run": run, "config": config, "round": r.get("round"),
                                     "capacity": r.get("capacity"), "kv_len": r.get("kv_len"), "step": step,
                                     "layout": m.group(1), "block": int(m.group(2)), "ms": _ms(ms)})
    return _frame(rows, ["run", "config", "round", "capacity", "kv_len", "step", "layout", "block", "ms"],
                  ints=["round", "capacity", "kv_len", "block"])


STEP_CONDITIONS = ("fixed", "advancing", "host_gap", "fresh_tokens", "verify_after", "host_ms", "replay_ms",
                   "replay2_ms")


def load_step_conditions(paths_or_globs):
    """The ``step_conditions`` sections (``bench_speed --conditions``: the graphed step as ``generate()`` gets it,
    under one condition of the loop at a time): one row per file, configuration and block, ``run``, ``config``,
    ``block``, ``compile``, ``capacity`` (<NA> in files that do not store it), the medians in ms ``fixed`` (same
    start slot each call), ``advancing`` (start moves by the block), ``host_gap`` (host work before each call),
    ``fresh_tokens`` (the block made from a host list each call), ``verify_after`` (verification and its host read
    after each call), and, in newer files, the graph launch: ``host_ms`` (host time of one replay call),
    ``replay_ms`` and ``replay2_ms`` (device time of one and of two back-to-back replays); NaN when absent."""
    rows = [{"run": run, "config": config, "block": r.get("q"), "compile": r.get("compile"),
             "capacity": r.get("capacity"), **{c: _num(r.get(c)) for c in STEP_CONDITIONS}}
            for run, doc in _speed_docs(paths_or_globs)
            for config, recs in (doc.get("step_conditions") or {}).items() for r in recs]
    return _frame(rows, ["run", "config", "block", "compile", "capacity", *STEP_CONDITIONS],
                  ints=["block", "capacity"])


LINEAR_COLUMNS = ("shape", "n", "k", "rows", "kind", "us", "TBps", "rel_err", "block_n", "block_k", "splits",
                  "num_warps", "num_stages")


def load_bench_linear(paths_or_globs):
    """The split-K matmul benchmark's files (a split-K Triton matmul against ``F.linear`` per weight matrix of the
    8B shape): one row per stored row, ``run``, ``shape`` ("qkv", "o", "gate_up", "down", "lm_head"), ``n``, ``k``
    (the weight's out and in features), ``rows`` (tokens), ``kind`` ("F.linear"; "splitk": one kernel
    configuration of the sweep; "splitk_plan": the configuration the kernel's own plan picks), ``us`` (median
    time), ``TBps`` (weight bytes / time), ``rel_err`` (against F.linear; missing for F.linear), and the split-K
    configuration ``block_n``, ``block_k``, ``splits``, ``num_warps``, ``num_stages`` (missing where not stored)."""
    rows = [{"run": run, **{c: r.get(c) for c in LINEAR_COLUMNS}}
            for run, doc in _speed_docs(paths_or_globs) for r in doc.get("rows") or []]
    return _frame(rows, ["run", *LINEAR_COLUMNS],
                  ints=["n", "k", "rows", "block_n", "block_k", "splits", "num_warps", "num_stages"])


def linear_vs_splitk(linear):
    """Per run, weight matrix and row count of :func:`load_bench_linear`: ``flinear_us``, ``plan_us`` (the split-K
    kernel's own plan), ``best_us`` (the fastest split-K configuration timed) and its ``best_config``
    ("block_n x block_k, splits s"), ``best_over_flinear`` and ``plan_over_flinear`` (< 1: split-K faster), and
    ``flinear_TBps``."""
    import pandas as pd

    recs = []
    for (run, shape, nrows), g in linear.groupby(["run", "shape", "rows"], sort=False):
        fl, plan, sk = (g[g.kind == k] for k in ("F.linear", "splitk_plan", "splitk"))
        best = sk.loc[sk.us.idxmin()] if len(sk) else None
        f_us = float(fl.us.iloc[0]) if len(fl) else math.nan
        p_us = float(plan.us.iloc[0]) if len(plan) else math.nan
        b_us = float(best.us) if best is not None else math.nan
        recs.append({"run": run, "shape": shape, "rows": int(nrows), "flinear_us": f_us, "plan_us": p_us,
                     "best_us": b_us, "best_config": None if best is None else
                     f"{best.block_n} x {best.block_k}, splits {best.splits}",
                     "best_over_flinear": b_us / f_us, "plan_over_flinear": p_us / f_us,
                     "flinear_TBps": float(fl.TBps.iloc[0]) if len(fl) else math.nan})
    return pd.DataFrame(recs, columns=["run", "shape", "rows", "flinear_us", "plan_us", "best_us", "best_config",
                                       "best_over_flinear", "plan_over_flinear", "flinear_TBps"])


STEP_RATIO_TEXT = {"decode": "decode step / floor", "verify": "verify step (k+1 <= 9) / floor",
                   "draft": "EAGLE-1 draft token / decode step", "tree": "tree of 9 / chain of 9",
                   "outside": "time outside the forward passes / step"}


def step_ratios(speed, overhead=None):
    """The step-time ratios: one row per measure, run, context and configuration of ours (:data:`OUR_CONFIGS`)
    that ``speed`` (:func:`load_speed`) holds, plus one per row of ``overhead`` (:func:`load_loop_overhead`).

    Measures (:data:`STEP_RATIO_TEXT`): ``decode`` (the config's 1-token step / the run's floor), ``verify`` (the
    config's largest chain step of 2-9 tokens measured / floor), ``draft`` (the run's graphed EAGLE-1
    ``per_draft_token`` / the config's 1-token step of the same run and context; only runs that timed the head),
    ``tree`` (the config's 2-branch tree of 9 / its chain of 9), ``outside`` (per loop-overhead row, its ``config``
    and ``drafter``: the share of a step outside the forward passes, ``in_loop_outside_forward`` (timed inside the
    run) where the row has it, else ``outside_forward`` (against forwards timed apart); ``detail`` says which; a
    row with neither is skipped).
    Columns: ``measure``, ``run``, ``context``, ``config``, ``impl`` (its label), ``drafter`` (outside rows only),
    ``measured``, ``detail`` (the numbers it is made of, as text)."""
    import pandas as pd

    rows = []

    def add(measure, run, ctx, config, measured, detail, drafter=None):
        rows.append({"measure": measure, "run": run, "context": int(ctx), "config": config,
                     "impl": _SPEED_IMPL.get(config, config), "drafter": drafter, "measured": float(measured),
                     "detail": detail})

    ok = speed[speed.ms.notna()]
    for (run, ctx), t in ok.groupby(["run", "context"], sort=False):
        ms = t.set_index("name").ms
        floor = float(t.floor_ms.iloc[0])
        draft = ms.get("eagle1_graph_per_draft_token")
        for config in [c for c in dict.fromkeys(t.config) if c in OUR_CONFIGS]:
            one = ms.get(f"{config}_chain_q1")
            if one is not None:
                add("decode", run, ctx, config, one / floor, f"{one:.2f} ms / floor {floor:.2f} ms")
            chain = t[(t.config == config) & (t.layout == "chain") & t.block.between(2, 9)]
            if len(chain):
                worst = chain.loc[chain.ms.idxmax()]
                which = f"largest of q={chain.block.min()}-{chain.block.max()}: " if len(chain) > 1 else ""
                add("verify", run, ctx, config, worst.ms / floor,
                    f"{which}q={worst.block}, {worst.ms:.2f} ms / floor {floor:.2f} ms")
            if draft is not None and one is not None:
                add("draft", run, ctx, config, draft / one, f"{draft:.3f} ms / {one:.2f} ms")
            tree, nine = ms.get(f"{config}_tree_q9"), ms.get(f"{config}_chain_q9")
            if tree is not None and nine is not None:
                add("tree", run, ctx, config, tree / nine, f"{tree:.2f} / {nine:.2f} ms")
    if overhead is not None:
        for r in overhead.itertuples():
            if pd.notna(getattr(r, "in_loop_outside_forward", math.nan)):
                add("outside", r.run, r.context, r.config, r.in_loop_outside_forward,
                    f"in_loop (timed inside generate()): medians wall {r.in_loop_wall_ms:.2f}, forward "
                    f"{r.in_loop_forward_ms:.2f}, outside {r.in_loop_outside_ms:.2f} ms/step over {r.in_loop_steps} "
                    f"steps", drafter=r.drafter)
            elif pd.notna(r.outside_forward):
                add("outside", r.run, r.context, r.config, r.outside_forward,
                    f"forward timed apart: wall {r.wall_ms_per_step:.2f} - forward {r.forward_ms_per_step:.2f} = "
                    f"{r.outside_ms_per_step:.2f} ms/step over {r.steps} steps", drafter=r.drafter)
    cols = ["measure", "run", "context", "config", "impl", "drafter", "measured", "detail"]
    return pd.DataFrame(rows, columns=cols)


def step_ratio_summary(ratios, by: Sequence[str] = ("measure", "config", "drafter")):
    """Per group of :func:`step_ratios` rows: ``n`` (runs x contexts measured), ``lowest`` and ``highest``."""
    g = ratios.groupby(list(by), sort=False, dropna=False)
    return g.agg(n=("measured", "size"), lowest=("measured", "min"), highest=("measured", "max")).reset_index()


ZOO_COLUMNS = ("tokens_per_s", "seq_normalized_al", "tokens", "step_ms", "forward_ms_per_step", "speedup",
               "forward_only_speedup")


def load_zoo_speed(paths_or_globs):
    """The ``zoo`` sections (tiny-coder end to end): one row per file and method, ``run``, ``method`` ("plain",
    "ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle-tree", ...), ``tokens_per_s``, ``seq_normalized_al``,
    ``tokens``, ``step_ms`` (wall time per target pass, drafting included), ``forward_ms_per_step`` (the graphed
    forward times of the steps' block sizes), ``other_ms_per_step`` (step_ms - forward_ms_per_step: drafting and
    host work), ``speedup`` (tokens/s over plain's), ``forward_only_speedup`` (AL x 1-token forward / forward per
    step: the speedup if drafting and the host were free), ``error`` (the text stored for a failed method, else
    missing; its numbers NaN)."""
    rows = []
    for run, doc in _speed_docs(paths_or_globs):
        for method, r in (doc.get("zoo") or {}).items():
            if method == "forward_ms":
                continue
            ok = isinstance(r, dict)
            vals = {c: (r.get(c, math.nan) if ok else math.nan) for c in ZOO_COLUMNS}
            rows.append({"run": run, "method": method, **vals,
                         "other_ms_per_step": vals["step_ms"] - vals["forward_ms_per_step"],
                         "error": None if ok else str(r)})
    return _frame(rows, ["run", "method", *ZOO_COLUMNS, "other_ms_per_step", "error"])


def load_zoo_forward(paths_or_globs):
    """The zoo's graphed forward times per block size (``zoo.forward_ms``): ``run``, ``layout`` ("chain",
    "tree"), ``block``, ``ms``."""
    rows = []
    for run, doc in _speed_docs(paths_or_globs):
        for name, ms in ((doc.get("zoo") or {}).get("forward_ms") or {}).items():
            layout, q = name.split("_q")
            rows.append({"run": run, "layout": layout, "block": int(q), "ms": _ms(ms)})
    return _frame(rows, ["run", "layout", "block", "ms"])


def load_hf_generate(paths_or_globs):
    """HF ``generate()`` wall time per new token (``hf_generate_ms_per_token``): ``run``, ``mode`` ("greedy",
    "prompt_lookup_10"), ``ms_per_token``."""
    rows = [{"run": run, "mode": mode, "ms_per_token": _ms(ms)}
            for run, doc in _speed_docs(paths_or_globs)
            for mode, ms in (doc.get("hf_generate_ms_per_token") or {}).items()]
    return _frame(rows, ["run", "mode", "ms_per_token"])


def bin_table(df, edges, column: str, n_boot: int, seed: int = 0, ci: float = 0.95) -> list[dict]:
    """Per (variant, bin of ``column``): n, mean edit norm, mean tokens, corpus seq AL and precision AL with
    percentile CIs over ``n_boot`` resamplings of the bin's rows (prompts)."""
    import numpy as np

    df = bin_edit_norm(df, edges, column)
    rng = np.random.default_rng(seed)
    q = [(1 - ci) / 2 * 100, (1 + ci) / 2 * 100]
    out = []
    for (variant, b), part in df.dropna(subset=["bin"]).groupby(["variant", "bin"], observed=True, sort=True):
        tok, pas = part["tokens"].to_numpy(float), part["passes"].to_numpy(float)
        dr, acc = part["drafts"].to_numpy(float), part["accepted"].to_numpy(float)
        draw = rng.integers(0, len(part), size=(n_boot, len(part)))
        seq = tok[draw].sum(1) / pas[draw].sum(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            prec = 1 + acc[draw].sum(1) / dr[draw].sum(1)
        prec = prec[np.isfinite(prec)]
        out.append({"binning": column, "variant": variant, "bin": str(b), "bin_lo": float(part["bin_lo"].iloc[0]),
                    "bin_hi": float(part["bin_hi"].iloc[0]), "n": int(len(part)),
                    "mean_e": float(part[column].mean()), "mean_tokens": float(tok.mean()),
                    "seq_al": tok.sum() / pas.sum(), "seq_al_ci": list(np.percentile(seq, q)) if n_boot else None,
                    "precision_al": 1 + acc.sum() / dr.sum() if dr.sum() else float("nan"),
                    "precision_al_ci": list(np.percentile(prec, q)) if n_boot and prec.size else None})
    return out
