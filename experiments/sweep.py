"""Run spec_bench over the project's grid of methods, draft lengths, datasets and BOS modes, one JSONL per config.

    python -m experiments.sweep --preset cpu-small --device cpu     # this CPU, about 10 minutes
    python -m experiments.sweep --preset gpu-full                   # the H200 (resumable: rerun to continue)
    python -m experiments.sweep --preset cpu-small --dry-run        # list the configs and prompt counts
    torchrun --nproc_per_node=4 -m experiments.sweep --preset gpu-full   # 4 GPUs, each config's prompts sharded
    torchrun --nproc_per_node=16 -m experiments.sweep --preset edit-norm  # 16 ranks on one GPU (the zoo; with MPS)

Grid, per dataset (code-edits: the zoo's held-out split, or ``--split``'s rows, resampled to ``per_bin`` prompts per
``bin_width`` edit-norm bin over [0, 0.6]; editeval and mt-bench: ``num_prompts`` prompts evenly spaced through the
file, so MT-Bench covers its categories):

- ``none`` (plain decoding), with single and doubled BOS (the doubled plain run is the reference for the
  doubled speculative runs' outputs);
- for each k in ``ks`` (the same k for every drafter of a method): ngram, eagle, eagle3, ngram-eagle,
  ngram-eagle3, and ngram-eagle with the ``tree`` policy; eagle and eagle3 again with doubled BOS;
- for each (k_ngram, k_eagle) in ``hybrid_ks``: the three hybrid configs with those mixed draft lengths
  (vLLM PR #24344 used 5 / 3).

Rows go to ``experiments/results/sweeps/<preset>/<dataset>__<method>__k<k>[__bos-doubled].jsonl``; spec_bench
skips rows already written, so an interrupted sweep continues where it stopped (a config file kept compressed,
``.jsonl.gz``, is refused: decompress it to continue). ``sweep.json`` beside them
records each call (command, run_info, seconds and rows per config, and the prompts that have no row yet), from its
start, replaced atomically after each config; a sweep that leaves prompts without a row exits with code 1. Under
torchrun every config's prompts are split over the ranks (see spec_bench) and only rank 0 prints and writes
``sweep.json``; ranks beyond the GPUs share them, which pays for the zoo's small models under NVIDIA's MPS (timed
by ``bench_sweep_ranks``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from experiments import distributed as dp
from experiments import spec_bench as sb
from experiments.cli import Parser
from experiments.provenance import run_info
from hybridsd.data import default_data_dir

REPO = Path(__file__).resolve().parents[1]
SPEC_METHODS = ("ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle3")
HYBRIDS = ("ngram-eagle", "ngram-eagle3")
DATASETS = tuple(d for d in sb.DATASETS if d != "hf")  # the project's JSONL sets (no Hub dataset)


@dataclass(frozen=True)
class Preset:
    """Sizes of one sweep."""

    ks: tuple[int, ...]
    output_len: dict = field(default_factory=dict)  # per dataset
    per_bin: int = 1  # code-edits prompts per edit-norm bin (0: every prompt in the bins) ...
    bin_width: float = 0.05  # ... of this width over [0, 0.6]
    num_prompts: dict = field(default_factory=dict)  # editeval / mt-bench prompts
    hybrid_ks: tuple[tuple[int, int], ...] = ()  # extra (k_ngram, k_eagle) hybrid configs
    datasets: tuple[str, ...] = DATASETS
    pr_grid: bool = False  # only the PR's configurations (n-gram k 5, EAGLE k 3, hybrids 5/3, trees)
    change_request: str = "located"  # code-edits change requests: located (the zoo target's format) or subject

    def __post_init__(self):
        if self.per_bin < 0:
            raise ValueError(f"per_bin must be >= 0 (0: every prompt in the bins), got {self.per_bin}")


PRESETS = {
    # About 24 prompts x 54 configs x 128 tokens; about 10 minutes on 2 CPU cores (fp32).
    "cpu-small": Preset(ks=(3, 5), output_len={"code-edits": 128, "editeval": 128, "mt-bench": 128},
                        per_bin=1, num_prompts={"editeval": 6, "mt-bench": 6}),
    # Sized for one 10-minute H200 call (estimated from the zoo runs' 1-1.5 ms per token, not yet timed):
    # k 3 and 5, the PR's 5/3 hybrid, 24 code edits + 8 EditEval + 8 MT-Bench, up to 512 tokens.
    "gpu-one-call": Preset(ks=(3, 5), output_len={"code-edits": 512, "editeval": 512, "mt-bench": 256},
                           per_bin=2, num_prompts={"editeval": 8, "mt-bench": 8}, hybrid_ks=((5, 3),)),
    # About 55 prompts x 111 configs, up to 1024 tokens (bf16 on CUDA): one to two hours of H200 time by the
    # same estimate, so several calls (rerun to continue) or --datasets / --methods to trim it.
    # AL against edit norm on the zoo's held-out edits (located requests): the PR's configurations and EAGLE-3's
    # dynamic tree, up to 16 prompts per 0.075 edit-norm bin (the analysis' 8 bins), output capped at 1536 tokens.
    "edit-norm": Preset(ks=(), output_len={"code-edits": 1536}, per_bin=16, bin_width=0.075, datasets=("code-edits",),
                        pr_grid=True),
    "gpu-full": Preset(ks=(1, 3, 5, 8), output_len={"code-edits": 1024, "editeval": 1024, "mt-bench": 768},
                       per_bin=2, num_prompts={"editeval": 16, "mt-bench": 16}, hybrid_ks=((5, 3),)),
}


def grid(preset: Preset, split: str = "eval", **common) -> list[tuple[str, sb.BenchConfig]]:
    """(file stem, config) for every run of the preset; ``split`` goes to the code-edits configs (the only dataset
    with splits), ``common`` to every BenchConfig (device, dtype)."""
    out = []

    def add(stem, **kw):
        out.append((stem, sb.BenchConfig(**common, **kw)))

    for ds in preset.datasets:
        base = dict(dataset_name=ds, output_len=preset.output_len[ds], change_request=preset.change_request,
                    **({"split": split} if ds == "code-edits" else {}))
        if preset.pr_grid:
            pr = {"ngram": 5, "eagle": 3, "eagle3": 3}
            add(f"{ds}__none", method="none", **base)
            for m in SPEC_METHODS:
                add(f"{ds}__{m}__pr", method=m, k=pr, **base)
            add(f"{ds}__ngram-eagle-tree__pr", method="ngram-eagle", hybrid_policy="tree", k=pr, **base)
            add(f"{ds}__eagle3-dynamic-tree", method="eagle3", tree="dynamic", k=pr, **base)
            add(f"{ds}__ngram-eagle3-dynamic-tree", method="ngram-eagle3", hybrid_policy="tree", tree="dynamic", k=pr,
                **base)
            continue
        add(f"{ds}__none", method="none", **base)
        add(f"{ds}__none__bos-doubled", method="none", bos_mode="doubled", **base)
        for k in preset.ks:
            kk = {"ngram": k, "eagle": k, "eagle3": k}
            for m in SPEC_METHODS:
                add(f"{ds}__{m}__k{k}", method=m, k=kk, **base)
            add(f"{ds}__ngram-eagle-tree__k{k}", method="ngram-eagle", hybrid_policy="tree", k=kk, **base)
            for m in ("eagle", "eagle3"):
                add(f"{ds}__{m}__k{k}__bos-doubled", method=m, k=kk, bos_mode="doubled", **base)
        for kn, ke in preset.hybrid_ks:
            kk = {"ngram": kn, "eagle": ke, "eagle3": ke}
            for m in HYBRIDS:
                add(f"{ds}__{m}__k{kn}-{ke}", method=m, k=kk, **base)
            add(f"{ds}__ngram-eagle-tree__k{kn}-{ke}", method="ngram-eagle", hybrid_policy="tree", k=kk, **base)
    return out


def select_examples(cfg: sb.BenchConfig, preset: Preset, data_dir: str) -> list:
    """The preset's prompts for ``cfg``'s dataset (deterministic)."""
    if cfg.dataset_name == "code-edits":
        return sb.load_examples(cfg, data_dir, None, per_bin=preset.per_bin, bin_width=preset.bin_width)
    exs = sb.load_examples(cfg, data_dir, None)
    n = min(preset.num_prompts[cfg.dataset_name], len(exs))
    return [exs[i * len(exs) // n] for i in range(n)]


def record_call(path: Path, call: dict) -> None:
    """Put ``call`` into the sweep's manifest ``path`` (replacing its earlier record), atomically.

    A manifest torn by an older version's crash is reported, kept as ``<path>.damaged`` and started afresh: the
    rows themselves are in the JSONL files, so only the records of earlier calls are lost from it.
    """
    doc = dp.read_json(path, {"calls": []})
    if not isinstance(doc, dict) or not isinstance(doc.get("calls"), list):
        keep = path.with_name(path.name + ".damaged")
        os.replace(path, keep)
        print(f"{path}: not a sweep manifest; kept as {keep.name}, starting a new one", file=sys.stderr)
        doc = {"calls": []}
    doc["calls"] = [c for c in doc["calls"] if not isinstance(c, dict) or c.get("started") != call["started"]]
    doc["calls"].append(call)
    dp.write_atomic(path, json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", required=True, choices=sorted(PRESETS))
    p.add_argument("--device", default=sb.BenchConfig.device)
    p.add_argument("--dtype", default="auto", choices=("auto", "bf16", "fp16", "fp32"))
    p.add_argument("--dataset-path", default=None, help="folder with the jsonl files (default ../shared/data)")
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=None, help="only these datasets")
    p.add_argument("--methods", nargs="+", choices=sb.METHODS, default=None, help="only these methods")
    p.add_argument("--split", default=None, choices=sb.SPLITS,
                   help="code edits: the zoo's held-out split (eval, the default), the validation repositories' "
                        "rows, or all")
    p.add_argument("--per-bin", type=int, default=None,
                   help="code edits: prompts per edit-norm bin instead of the preset's (0: every prompt in the bins)")
    p.add_argument("--out-dir", type=Path, default=None, help="default experiments/results/sweeps/<preset>")
    p.add_argument("--dry-run", action="store_true", help="list the configs and prompt counts, run nothing")
    a = p.parse_args(argv)
    p.check_device(a.device)
    out_dir = a.out_dir or REPO / "experiments" / "results" / "sweeps" / a.preset
    if not a.dry_run:  # a dry run writes nothing
        p.check_output(out_dir, "--out-dir", folder=True)
    preset = PRESETS[a.preset]
    if a.per_bin is not None:
        try:  # Preset checks the count
            preset = replace(preset, per_bin=a.per_bin)
        except ValueError as e:
            p.error(f"--per-bin: {e}")
    whole = grid(preset, device=a.device, dtype=a.dtype, split=a.split or "eval")
    runs = [(s, c) for s, c in whole
            if (a.datasets is None or c.dataset_name in a.datasets) and (a.methods is None or c.method in a.methods)]
    if not runs:  # filters that leave nothing of the preset's grid: a mistake, not an empty sweep
        asked = [f"--{name} {' '.join(v)}" for name, v in (("datasets", a.datasets), ("methods", a.methods)) if v]
        p.error(f"--preset {a.preset} has no config for {' and '.join(asked)}; it runs datasets "
                f"{', '.join(sorted({c.dataset_name for _, c in whole}))} and methods "
                f"{', '.join(sorted({c.method for _, c in whole}))}")
    if not any(c.dataset_name == "code-edits" for _, c in runs):  # code edits' own options, given for nothing
        for flag, value in (("--split", a.split), ("--per-bin", a.per_bin)):
            if value is not None:
                p.error(f"{flag} {value}: only code-edits reads it, and this sweep runs "
                        f"{', '.join(sorted({c.dataset_name for _, c in runs}))}")
    if not a.dry_run:  # every config's file takes rows (spec_bench's --output check), before any work
        try:
            for stem, _ in runs:
                sb.check_results_file(out_dir / f"{stem}.jsonl")
        except ValueError as e:
            p.error(f"--out-dir: {e}")
    examples = {}
    try:  # a missing data folder or file is one line, before any process group or model
        data_dir = str(a.dataset_path or default_data_dir())
        for _, cfg in runs:
            if cfg.dataset_name not in examples:
                examples[cfg.dataset_name] = select_examples(cfg, preset, data_dir)
        # the data read enters every config's key as in spec_bench (none for the project's own sets)
        runs = [(stem, replace(c, dataset_digest=sb.data_digest(c.dataset_name, a.dataset_path))) for stem, c in runs]
    except (OSError, ValueError) as e:
        p.error(f"{'--dataset-path: ' if a.dataset_path else ''}{e}")
    try:  # the model and every EAGLE head the grid drafts with (their config files and shapes), before any config
        for cfg in {(c.model, sb.eagle_kind(c.method), c.eagle_dir): c for _, c in runs}.values():
            sb.preflight(cfg)
    except (OSError, ValueError) as e:
        p.error(str(e))
    rank, world = dp.init(a.device)
    lead = rank == 0  # prints, and writes sweep.json
    if lead:
        print(f"{len(runs)} configs; prompts per config: " + ", ".join(f"{d} {len(e)}" for d, e in examples.items()),
              file=sys.stderr)
    if a.dry_run:
        for stem, cfg in runs if lead else ():
            print(f"{stem}.jsonl  key={cfg.key()}  k={cfg.k}  output_len={cfg.output_len}")
        dp.finish()
        return
    lock = contextlib.ExitStack()  # the lead holds sweep.json's lock: a second sweep into the folder stops at once
    try:  # (every rank of it)
        lock.enter_context(dp.exclusive_for_all(out_dir / "sweep.json"))
    except dp.Busy as e:
        p.error(str(e))
    with lock:
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        shared = dp.gpu_sharing(a.device)
        launcher = f"torchrun --nproc_per_node={os.environ.get('LOCAL_WORLD_SIZE', world)}" if world > 1 else "python"
        args = sys.argv[1:] if argv is None else argv
        call = {"started": started, "command": f"{launcher} -m experiments.sweep " + " ".join(args),
                "preset": a.preset, "preset_spec": asdict(preset), "data_dir": data_dir, "run_info": run_info(a.device),
                **({"world_size": world} if world > 1 else {}), **({"ranks_per_gpu": shared} if shared > 1 else {}),
                "configs": []}
        if lead:  # a call killed in its first config is on record too
            record_call(out_dir / "sweep.json", call)
        t_all = time.perf_counter()
        missing = 0
        for stem, cfg in tqdm(runs, desc=f"sweep {a.preset}", unit="config", position=0, disable=not lead):
            t = time.perf_counter()
            path = out_dir / f"{stem}.jsonl"
            try:
                n = sb.run(cfg, examples[cfg.dataset_name], path)  # all ranks: sharded, merged by rank 0
            except dp.Busy as e:  # a spec_bench run writing the same file
                p.error(str(e))
            if not lead:
                continue
            done = sb.done_keys(path)
            left = [e.id for e in examples[cfg.dataset_name] if (cfg.key(), e.id) not in done]
            missing += len(left)
            call["configs"].append({"file": path.name, "config_key": cfg.key(),
                                    "prompts": len(examples[cfg.dataset_name]), "rows_written": n,
                                    "seconds": round(time.perf_counter() - t, 2),
                                    **({"prompts_without_row": left} if left else {})})
            call["seconds"] = round(time.perf_counter() - t_all, 1)
            record_call(out_dir / "sweep.json", call)
        if lead:
            size = sum(f.stat().st_size for f in out_dir.glob("*.jsonl"))
            print(f"done in {time.perf_counter() - t_all:.0f}s; {size / 1e6:.2f} MB under {out_dir}", file=sys.stderr)
    dp.finish()
    if missing:  # their prompts failed (tracebacks above) or did not fit the model's context; a rerun retries them
        print(f"sweep: {missing} prompt(s) have no row (prompts_without_row in {out_dir / 'sweep.json'}); "
              "a rerun retries them", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
