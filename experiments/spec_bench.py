"""Measure speculative decoding on a zoo model: AL, acceptance, TPOT, per prompt, resumable JSONL.

Flags follow vLLM's ``benchmarks`` where they exist. Example:

    python experiments/spec_bench.py --method ngram-eagle \\
        --num-speculative-tokens-per-method '{"ngram": 5, "eagle": 3}' \\
        --dataset-name code-edits --split eval --num-prompts 64 --output-len 1024 \\
        --output experiments/results/runs/ngram-eagle.jsonl

Each row carries its full config; rerunning the same command skips rows already written.

Data parallel, one shard of the prompts per process (GPU ``cuda:{LOCAL_RANK}`` when ``--device cuda``):

    torchrun --nproc_per_node=4 experiments/spec_bench.py --method ngram-eagle ... --output OUT.jsonl

Each rank writes ``OUT.jsonl.rank{r}.part``; rank 0 then merges them into OUT.jsonl in the prompts' order,
so the file holds the rows a one-process run writes (timings and run_info aside).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

import hybridsd as hsd
from hybridsd import data, prompts, provenance
from hybridsd.edit_distance import edit_norm

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import distributed as dp  # noqa: E402  (experiments/distributed.py)

METHODS = ("none", "ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle3")
DATASETS = ("code-edits", "editeval", "mt-bench")
DEFAULT_K = {"ngram": 5, "eagle": 3, "eagle3": 3}


@dataclass(frozen=True)
class BenchConfig:
    """Everything that defines one run's rows."""

    method: str = "ngram-eagle"
    model: str = "tiny-coder"
    k: dict = field(default_factory=lambda: dict(DEFAULT_K))
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 5
    hybrid_policy: str = "prefer-ngram"
    dataset_name: str = "code-edits"
    split: str = "eval"
    min_distance: float | None = None
    max_distance: float | None = None
    output_len: int = 512
    temperature: float = 0.0
    seed: int = 0
    chat_template: bool = True
    bos_mode: str = "single"
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    dtype: str = "auto"
    cuda_graphs: bool = True
    check_lossless: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"--method must be one of {METHODS}, got {self.method!r}")
        if self.dataset_name not in DATASETS:
            raise ValueError(f"--dataset-name must be one of {DATASETS}, got {self.dataset_name!r}")
        if any(v < 1 for v in self.k.values()):
            raise ValueError(f"every speculative token count must be >= 1, got {self.k}")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("--prompt-lookup-min must be <= --prompt-lookup-max")
        if self.output_len < 1:
            raise ValueError("--output-len must be >= 1")
        if self.split not in ("eval", "all"):
            raise ValueError("--split must be 'eval' or 'all'")

    def key(self) -> str:
        """A short hash naming this config in results rows."""
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def vllm_speculative_config(cfg: BenchConfig, head_path: str = "<eagle head folder>") -> dict | None:
    """vLLM's ``--speculative-config`` for the same method (``ngram-eagle`` is vLLM PR #24344's)."""
    lookup = {"prompt_lookup_min": cfg.prompt_lookup_min, "prompt_lookup_max": cfg.prompt_lookup_max}
    if cfg.method == "none":
        return None
    if cfg.method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": cfg.k["ngram"], **lookup}
    if cfg.method in ("eagle", "eagle3"):
        return {"method": cfg.method, "model": head_path, "num_speculative_tokens": cfg.k[cfg.method]}
    eagle = cfg.method.split("-", 1)[1]
    return {"method": cfg.method, "model": head_path,
            "num_speculative_tokens_per_method": {"ngram": cfg.k["ngram"], eagle: cfg.k[eagle]}, **lookup}


def make_drafter(cfg: BenchConfig, heads: dict) -> hsd.Drafter | None:
    """The drafter a method names, built from the zoo's heads."""
    def ngram():
        return hsd.NgramDrafter(k=cfg.k["ngram"], min_n=cfg.prompt_lookup_min, max_n=cfg.prompt_lookup_max)

    def eagle(kind):
        key = "eagle1" if kind == "eagle" else "eagle3"
        if key not in heads:
            raise ValueError(f"the model has no {key} head; available: {sorted(heads)}")
        return hsd.EagleDrafter(heads[key], k=cfg.k[kind])

    if cfg.method == "none":
        return None
    if cfg.method == "ngram":
        return ngram()
    if cfg.method in ("eagle", "eagle3"):
        return eagle(cfg.method)
    return hsd.HybridDrafter(ngram(), eagle(cfg.method.split("-", 1)[1]), policy=cfg.hybrid_policy)


def load_examples(cfg: BenchConfig, data_dir: str | None, num_prompts: int | None,
                  per_bin: int | None = None) -> list[data.Example]:
    """The run's prompts in a deterministic order (code edits: the zoo's held-out split unless --split all;
    ``per_bin``: at most that many from each 0.05-wide edit-norm bin over [0, 0.6])."""
    if cfg.dataset_name == "mt-bench":
        exs = data.load_mt_bench(Path(data_dir) / "mt_bench.jsonl" if data_dir else None)
    elif cfg.dataset_name == "editeval":
        exs = data.load_editeval(Path(data_dir) / "editeval.jsonl" if data_dir else None,
                                 min_distance=cfg.min_distance, max_distance=cfg.max_distance)
    else:
        exs = data.load_code_edits(Path(data_dir) / "code_edits_dev.jsonl" if data_dir else None,
                                   min_distance=cfg.min_distance, max_distance=cfg.max_distance)
        if cfg.split == "eval":
            split = json.loads((hsd.zoo.path(cfg.model) / "eval_split.json").read_text())
            keep = set(split["ids"])
            exs = [e for e in exs if e.id in keep]
    if per_bin:
        bins = [round(0.05 * i, 2) for i in range(13)]  # 12 bins over [0, 0.6]
        exs = data.resample_by_bins(exs, bins, per_bin, seed=cfg.seed)
    return exs[:num_prompts] if num_prompts else exs


def done_keys(path: Path) -> set[tuple[str, str]]:
    """(config key, example id) of rows already in ``path``; a torn last line is ignored."""
    return {key for key, _ in dp.keyed_rows(path)}


def run(cfg: BenchConfig, examples: list[data.Example], out: Path, *, progress: bool = True) -> int:
    """Generate for every example not yet in ``out``; append one JSON row each. Returns rows written.

    Under torchrun (``WORLD_SIZE`` > 1) rank r decodes ``todo[r::world]`` into its shard ``<out>.rank{r}.part``
    (row by row, resumable like ``out``); after all ranks finish, rank 0 merges the shards into ``out`` in
    ``examples``' order (see :func:`distributed.merge`), and every rank returns the rows added to ``out``. Shards
    a crashed run left are counted as done and merged, also by a one-process rerun.
    """
    rank, world = dp.init(cfg.device)
    shards = dp.shard_paths(out)
    sharded = world > 1 or bool(shards)
    dtype = {"auto": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[cfg.dtype]
    model, tok, heads = hsd.zoo.load(cfg.model, device=dp.local_device(cfg.device), dtype=dtype)
    drafter = make_drafter(cfg, heads)
    eos = [t for t in {tok.convert_tokens_to_ids("<|eot_id|>"), tok.eos_token_id} if t is not None and t >= 0]
    info = provenance.run_info()
    seen = done_keys(out).union(*(done_keys(p) for p in shards))
    key = cfg.key()
    todo = [e for e in examples if (key, e.id) not in seen]
    dest = out
    if sharded:
        todo, dest = todo[rank::world], dp.shard_path(out, rank)
        dp.barrier()  # every rank has read the files (and so agrees on todo) before any rank writes
    dp.repair_tail(dest)  # a row torn by a crash is dropped (and made again), not glued to the next one
    out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    cuda = cfg.device.startswith("cuda")
    with dest.open("a") as f:
        for ex in tqdm(todo, desc=f"{cfg.method}", disable=not progress or rank != 0):
            ids = prompts.build_prompt_ids(tok, ex.prompt, chat=cfg.chat_template, bos_mode=cfg.bos_mode)
            limit = model.config.max_position_embeddings - len(ids)
            if limit < 1:
                continue  # the prompt alone fills the context
            n_out = min(cfg.output_len, limit)
            kw = dict(max_new_tokens=n_out, temperature=cfg.temperature, eos_token_id=eos, seed=cfg.seed,
                      cuda_graphs=cfg.cuda_graphs, on_double_bos="ignore")
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                res = hsd.generate(model, ids, drafter=drafter, **kw)
                if cuda:
                    torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - one failing prompt must not end a sweep; no row, so a rerun retries
                print(f"FAILED {cfg.method} {ex.id}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
                continue
            wall = time.perf_counter() - t0
            res.stats.check()
            text = tok.decode(res.tokens, skip_special_tokens=True)
            row = {
                "config_key": key, "example_id": ex.id, "dataset": cfg.dataset_name,
                "ref_edit_norm": ex.edit_norm, "prompt_tokens": len(ids),
                "output_edit_norm": edit_norm(ex.input_text, text) if ex.input_text else None,
                "stats": res.stats.summary(), "tokens": res.tokens,
                "trace": [[s.source, s.drafted, s.accepted] for s in res.stats.trace],
                "wall_s": wall, "tpot_ms": 1e3 * wall / len(res.tokens),
                "config": asdict(cfg), "run_info": info,
            }
            if cfg.check_lossless and drafter is not None:
                plain = hsd.generate(model, ids, **kw)
                row["lossless"] = plain.tokens == res.tokens
            f.write(json.dumps(row) + "\n")
            f.flush()  # row by row: a crash loses at most the row being made
            written += 1
    if not sharded:
        return written
    dp.barrier()  # every shard is complete
    merged = dp.merge(out, [e.id for e in examples]) if rank == 0 else None
    return dp.broadcast(merged)  # the merge is done before any rank moves on


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default="ngram-eagle", choices=METHODS)
    p.add_argument("--model", default="tiny-coder", help="zoo model name")
    p.add_argument("--num-speculative-tokens", type=int, help="k for every method")
    p.add_argument("--num-speculative-tokens-per-method", type=json.loads, default=None,
                   help='JSON, e.g. \'{"ngram": 5, "eagle": 3}\'')
    p.add_argument("--prompt-lookup-min", type=int, default=2)
    p.add_argument("--prompt-lookup-max", type=int, default=5)
    p.add_argument("--hybrid-policy", default="prefer-ngram", choices=("prefer-ngram", "tree"))
    p.add_argument("--dataset-name", default="code-edits", choices=DATASETS)
    p.add_argument("--dataset-path", default=None, help="folder with the jsonl files (default ../shared/data)")
    p.add_argument("--split", default="eval", choices=("eval", "all"))
    p.add_argument("--blazedit-min-distance", type=float, default=None)
    p.add_argument("--blazedit-max-distance", type=float, default=None)
    p.add_argument("--num-prompts", type=int, default=None)
    p.add_argument("--per-bin", type=int, default=None, help="at most N prompts per 0.05 edit-norm bin")
    p.add_argument("--output-len", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-chat-template", action="store_true")
    p.add_argument("--double-bos", action="store_true", help="reproduce the doubled-BOS bug")
    p.add_argument("--device", default=BenchConfig.device)
    p.add_argument("--dtype", default="auto", choices=("auto", "bf16", "fp16", "fp32"))
    p.add_argument("--no-cuda-graphs", action="store_true")
    p.add_argument("--check-lossless", action="store_true", help="also decode plainly and compare tokens")
    p.add_argument("--print-vllm-config", action="store_true", help="print vLLM's --speculative-config and exit")
    p.add_argument("--output", type=Path, default=None)
    a = p.parse_args(argv)
    k = dict(DEFAULT_K)
    if a.num_speculative_tokens is not None:
        k = {m: a.num_speculative_tokens for m in k}
    if a.num_speculative_tokens_per_method:
        k.update({("eagle" if m == "eagle1" else m): int(v) for m, v in a.num_speculative_tokens_per_method.items()})
    cfg = BenchConfig(method=a.method, model=a.model, k=k, prompt_lookup_min=a.prompt_lookup_min,
                      prompt_lookup_max=a.prompt_lookup_max, hybrid_policy=a.hybrid_policy,
                      dataset_name=a.dataset_name, split=a.split, min_distance=a.blazedit_min_distance,
                      max_distance=a.blazedit_max_distance, output_len=a.output_len, temperature=a.temperature,
                      seed=a.seed, chat_template=not a.skip_chat_template,
                      bos_mode="doubled" if a.double_bos else "single", device=a.device, dtype=a.dtype,
                      cuda_graphs=not a.no_cuda_graphs, check_lossless=a.check_lossless)
    if a.print_vllm_config:
        print(json.dumps(vllm_speculative_config(cfg)))
        return
    out = a.output or Path("experiments/results/runs") / f"{cfg.dataset_name}-{cfg.method}-{cfg.key()}.jsonl"
    n = run(cfg, load_examples(cfg, a.dataset_path, a.num_prompts, a.per_bin), out)
    if dp.rank() == 0:
        print(f"wrote {n} rows to {out}", file=sys.stderr)
    dp.finish()


if __name__ == "__main__":
    main()
