"""Measure speculative decoding on any HF target: AL, acceptance, TPOT, per prompt, resumable JSONL.

Flags follow vLLM's ``examples/offline_inference/spec_decode.py`` (``--model-dir``, ``--eagle-dir``,
``--method``, ``--num-spec-tokens``, ``--num-speculative-tokens-per-method``, ``--prompt_lookup_min/max``,
``--dataset-name hf --dataset-path``, ``--hf-output-len``, ...). A real model and a Hub dataset:

    python -m experiments.spec_bench --model-dir meta-llama/Llama-3.1-8B-Instruct \\
        --eagle-dir yuhuili/EAGLE-LLaMA3.1-Instruct-8B --method ngram-eagle \\
        --num-speculative-tokens-per-method '{"ngram": 5, "eagle": 3}' --prompt_lookup_max 5 --prompt_lookup_min 2 \\
        --tp 1 --dataset-name hf --dataset-path vdaita/edit_5k_char --num-prompts 90 --hf-output-len 2048 \\
        --blazedit-min-distance 0.01 --blazedit-max-distance 0.25 --no-oversample --output OUT.jsonl

Without ``--model-dir`` the zoo's tiny-coder runs offline with its own heads, on the project's JSONL sets
(``--dataset-name code-edits|editeval|mt-bench``). Each row carries its full config, the load time and peak
memory (``run_info``); rerunning the same command skips rows already written. A user mistake (a model, head or
dataset that cannot be reached or does not fit, a bad flag) is one line on stderr and exit code 2, before any
weights are read.

Data parallel, one shard of the prompts per process (GPU ``cuda:{LOCAL_RANK}`` when ``--device cuda``):

    torchrun --nproc_per_node=4 -m experiments.spec_bench --method ngram-eagle ... --output OUT.jsonl

Each rank writes ``OUT.jsonl.rank{r}.part``; rank 0 then merges them into OUT.jsonl in the prompts' order,
so the file holds the rows a one-process run writes (timings and run_info aside).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import hybridsd as hsd
from hybridsd import checkpoint, data, prompts
from experiments import provenance
from hybridsd.checkpoint_files import read_tensor, weight_files
from hybridsd.drafters.tree import leaf_count, paths_to_parents
from hybridsd.edit_distance import edit_norm
from hybridsd.target import EXACT_BRANCHES, context_length

from experiments import distributed as dp
from experiments import results
from experiments.cli import TOKENIZER_VOCABULARIES, Parser
from experiments.speed_loop import accepted_continuation

METHODS = ("none", "ngram", "eagle", "eagle3", "ngram-eagle", "ngram-eagle3", "replay")
HYBRIDS = ("ngram-eagle", "ngram-eagle3")
METHOD_ALIASES = {"vanilla": "none"}
DATASETS = ("code-edits", "editeval", "mt-bench", "hf")
DEFAULT_K = {"ngram": 5, "eagle": 3, "eagle3": 3}
COMPILE = {"none": False, "true": True, "auto": "auto"}
HEAD_KIND = {"eagle": "eagle1", "eagle3": "eagle3"}
# vLLM's examples/offline_inference/spec_decode.py defaults for its default target
VLLM_HEADS = {"meta-llama/Llama-3.1-8B-Instruct": {"eagle1": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                                                   "eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}}
HF_SOURCES = {"blazedit": "blazedit", "mt_bench": "mt-bench", "instructcoder": "instructcoder"}
DATA_FILES = {"code-edits": "code_edits_dev.jsonl", "editeval": "editeval.jsonl", "mt-bench": "mt_bench.jsonl"}
# hybridsd.data.local_digest of the project's sets (shared/data): the rows made from them carry no digest
PROJECT_DIGESTS = {"code-edits": "3f79ec3847ae", "editeval": "a6b351b21aac", "mt-bench": "25f9c35c7ba2"}


@dataclass(frozen=True)
class BenchConfig:
    """Everything that defines one run's rows. ``model``: a zoo name, model folder or Hub id; ``eagle_dir``:
    the EAGLE head (folder or Hub id; default: the zoo's heads beside the model); ``dataset_path``: the Hub
    dataset or local copy for ``dataset_name="hf"``; ``dataset_digest``: the local data read, as
    :func:`data_digest`; ``compile``: ``generate(compile=...)`` as
    ``none``/``true``/``auto``; ``hf_shuffle``: True when the ``hf`` dataset's rows are taken in the order vLLM's
    benchmarks read them (streamed and shuffled with ``seed``), None in the dataset's order.
    ``method="replay"`` drafts the plain greedy output (full acceptance)."""

    method: str = "ngram-eagle"
    model: str = "tiny-coder"
    k: dict = field(default_factory=lambda: dict(DEFAULT_K))
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 5
    hybrid_policy: str = "prefer-ngram"
    dataset_name: str = "code-edits"
    split: str = "eval"
    change_request: str = "located"
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
    eagle_dir: str | None = None
    dataset_path: str | None = None
    hf_split: str = "train"
    compile: str = "none"
    tree: str = "none"
    tree_depth: int = 6
    tree_top_k: int = 10
    tree_nodes: int = 60
    tree_paths: tuple | None = None
    exact: int = 0
    dataset_digest: str | None = None
    hf_shuffle: bool | None = None
    checkpoint_embeddings: bool = False  # draft with the head's own shipped embedding, not the target's

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"--method must be one of {METHODS}, got {self.method!r}")
        if self.dataset_name not in DATASETS:
            raise ValueError(f"--dataset-name must be one of {DATASETS}, got {self.dataset_name!r}")
        if self.dataset_name == "hf" and not self.dataset_path:
            raise ValueError("--dataset-name hf needs --dataset-path (a Hub dataset id or a local copy)")
        if not isinstance(self.checkpoint_embeddings, bool):
            raise TypeError(f"checkpoint_embeddings must be a bool, got {self.checkpoint_embeddings!r}")
        if self.checkpoint_embeddings and self.method not in EAGLE_METHODS:
            raise ValueError(f"--use-checkpoint-embeddings: --method {self.method} has no EAGLE head")
        if self.hf_shuffle not in (None, True) or (self.hf_shuffle and self.dataset_name != "hf"):
            raise ValueError(f"hf_shuffle is True (a shuffled --dataset-name hf) or None, got {self.hf_shuffle!r}")
        bad = {m: v for m, v in self.k.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1}
        if bad:
            raise ValueError(f"--num-speculative-tokens: every count must be an integer >= 1, got {bad}")
        if self.prompt_lookup_min < 1:
            raise ValueError(f"--prompt-lookup-min must be >= 1, got {self.prompt_lookup_min}")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(f"--prompt-lookup-min ({self.prompt_lookup_min}) must be <= --prompt-lookup-max "
                             f"({self.prompt_lookup_max})")
        if self.output_len < 1:
            raise ValueError(f"--output-len must be >= 1, got {self.output_len}")
        bounds = (self.min_distance, self.max_distance)
        if any(v is not None and not math.isfinite(v) for v in bounds):
            raise ValueError(f"--blazedit-min/max-distance must be finite numbers, got {bounds}")
        if None not in bounds and self.min_distance > self.max_distance:
            raise ValueError(f"--blazedit-min-distance ({self.min_distance}) must be <= --blazedit-max-distance "
                             f"({self.max_distance})")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"--temperature must be a finite number >= 0, got {self.temperature}")
        if self.bos_mode not in prompts.BOS_MODES:
            raise ValueError(f"bos_mode must be one of {prompts.BOS_MODES}, got {self.bos_mode!r}")
        if self.bos_mode == "doubled" and not self.chat_template:
            raise ValueError("--double-bos doubles the BOS that the chat template writes; --skip-chat-template "
                             "leaves the template out")
        if self.change_request not in data.CHANGE_REQUESTS:
            raise ValueError(f"--change-request must be one of {data.CHANGE_REQUESTS}, got {self.change_request!r}")
        if self.split not in SPLITS:
            raise ValueError(f"--split must be one of {SPLITS}, got {self.split!r}")
        if self.dtype not in checkpoint.DTYPES:
            raise ValueError(f"--dtype must be one of {checkpoint.DTYPES}, got {self.dtype!r}")
        if self.compile not in COMPILE:
            raise ValueError(f"--compile must be one of {tuple(COMPILE)}, got {self.compile!r}")
        if self.hybrid_policy not in ("prefer-ngram", "tree"):
            raise ValueError(f"--hybrid-policy must be 'prefer-ngram' or 'tree', got {self.hybrid_policy!r}")
        if self.tree not in TREES:
            raise ValueError(f"--tree must be one of {TREES}, got {self.tree!r}")
        if self.tree != "none" and self.method not in ("eagle", "eagle3", "ngram-eagle", "ngram-eagle3"):
            raise ValueError(f"--tree {self.tree} needs an EAGLE method, got --method {self.method}")
        if self.tree == "static" and not self.tree_paths:
            raise ValueError("--tree static needs --tree-paths (vLLM's speculative_token_tree, e.g. '[[0],[1],[0,0]]')")
        if self.tree_paths is not None and self.tree != "static":
            raise ValueError(f"--tree-paths shapes only --tree static, got --tree {self.tree}")
        if self.tree_paths:
            try:
                paths_to_parents(self.tree_paths)
            except ValueError as e:
                raise ValueError(f"--tree-paths: {e}") from None
        defaults = {f.name: f.default for f in fields(self)}
        for name in ("tree_depth", "tree_top_k", "tree_nodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
            if self.tree != "dynamic" and getattr(self, name) != defaults[name]:
                raise ValueError(f"--{name.replace('_', '-')} shapes only --tree dynamic, got --tree {self.tree}")
        kind = self.method.split("-")[-1]
        if self.tree != "none" and self.k.get(kind, DEFAULT_K.get(kind)) != DEFAULT_K.get(kind):
            raise ValueError(f"--tree {self.tree}: the EAGLE tree's size is --tree-depth and --tree-nodes (dynamic) or "
                             f"--tree-paths (static), not k ({kind}: {self.k[kind]})")
        if self.exact < 0:
            raise ValueError(f"--exact must be a number of rows >= 1, got {self.exact}")
        if self.exact and self.tree == "dynamic":
            raise ValueError("--exact verifies at most 2 draft branches a step; --tree dynamic proposes up to "
                             "--tree-nodes (use a chain method, --hybrid-policy tree, or a static tree of 2 leaves)")
        if self.exact:
            rows, branches = self.draft_shape()
            if branches > EXACT_BRANCHES:
                raise ValueError(f"--exact verifies at most {EXACT_BRANCHES} draft branches a step; this draft has "
                                 f"{branches} (--tree-paths' leaves, plus the n-gram chain with --hybrid-policy tree)")
            if self.exact < 1 + rows:
                raise ValueError(f"--exact {self.exact}: every step is a block of {self.exact} rows, but --method "
                                 f"{self.method} verifies up to {rows} draft tokens plus the newest one; pass "
                                 f"--exact {1 + rows} or more")

    def draft_shape(self) -> tuple[int, int]:
        """The most draft tokens one step verifies and the most branches of a draft, as the method's drafter
        reports them (``max_tokens``, ``max_branches``); exact mode checks its rows against them."""
        if self.method == "none":
            return 0, 1
        if self.method in ("ngram", "replay"):
            return self.k.get(self.method, DEFAULT_K["eagle"]), 1
        if self.tree == "static":
            _, parents, _ = paths_to_parents(self.tree_paths)
            eagle = len(parents), leaf_count(parents)  # nodes, leaves
        elif self.tree == "dynamic":
            eagle = self.tree_nodes, self.tree_nodes
        else:
            eagle = self.k[self.method.split("-")[-1]], 1
        if not self.method.startswith("ngram-"):
            return eagle
        ngram = self.k["ngram"], 1
        if self.hybrid_policy == "tree":
            return ngram[0] + eagle[0], ngram[1] + eagle[1]
        return max(ngram[0], eagle[0]), max(ngram[1], eagle[1])

    def key(self) -> str:
        """A short hash naming this config in results rows (fields left at their defaults since they were
        added do not enter it, so older rows keep their keys)."""
        d = asdict(self)
        for f in fields(self):
            if f.name in ADDED_FIELDS and d[f.name] == f.default:
                del d[f.name]
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


SPLITS = ("eval", "validation", "all")  # code edits: the zoo's held-out split, the validation repositories', all
ADDED_FIELDS = ("eagle_dir", "dataset_path", "hf_split", "compile", "tree", "tree_depth", "tree_top_k", "tree_nodes",
                "tree_paths", "exact", "change_request", "dataset_digest", "hf_shuffle", "checkpoint_embeddings")
TREES = ("none", "dynamic", "static")


def data_digest(dataset_name: str, dataset_path: str | None) -> str | None:
    """:func:`hybridsd.data.local_digest` of the local data a run reads (an ``hf`` file or folder; else the set's
    file in ``dataset_path`` or in the default data folder), so that other data at one path is another config;
    ``None`` for a Hub id and for the project's own sets (:data:`PROJECT_DIGESTS`), wherever they lie."""
    if dataset_name == "hf":
        return data.local_digest(dataset_path) if dataset_path else None
    try:
        folder = Path(dataset_path) if dataset_path else data.default_data_dir()
    except FileNotFoundError:  # no data folder: load_examples names it
        return None
    digest = data.local_digest(folder / DATA_FILES[dataset_name])
    return None if digest == PROJECT_DIGESTS[dataset_name] else digest


def vllm_lacks(cfg: BenchConfig) -> str | None:
    """The draft of ``cfg`` that vLLM has no ``--speculative-config`` for, in words (None: it has one, or the
    method drafts nothing vLLM would: plain decoding, ``replay``)."""
    if cfg.tree == "dynamic":
        return "the dynamic EAGLE-2 tree"
    if cfg.method in HYBRIDS and cfg.tree != "none":
        return "a hybrid with a tree"
    if cfg.method in HYBRIDS and cfg.hybrid_policy == "tree":
        return "a hybrid verifying both drafts as a tree"
    return None


def vllm_speculative_config(cfg: BenchConfig, head_path: str = "<eagle head folder>") -> dict | None:
    """vLLM's ``--speculative-config`` for the same method (``ngram-eagle`` is vLLM PR #24344's; a static EAGLE
    tree is vLLM's ``speculative_token_tree``); ``None`` for plain decoding, ``replay`` and what :func:`vllm_lacks`
    names."""
    lookup = {"prompt_lookup_min": cfg.prompt_lookup_min, "prompt_lookup_max": cfg.prompt_lookup_max}
    if cfg.method in ("none", "replay") or vllm_lacks(cfg):
        return None
    if cfg.method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": cfg.k["ngram"], **lookup}
    if cfg.method in ("eagle", "eagle3") and cfg.tree == "static":  # vLLM: one token per node of the tree
        paths = [tuple(path) for path in cfg.tree_paths]
        return {"method": cfg.method, "model": head_path, "num_speculative_tokens": len(paths),
                "speculative_token_tree": str(paths)}
    if cfg.method in ("eagle", "eagle3"):
        return {"method": cfg.method, "model": head_path, "num_speculative_tokens": cfg.k[cfg.method]}
    eagle = cfg.method.split("-", 1)[1]
    return {"method": cfg.method, "model": head_path,
            "num_speculative_tokens_per_method": {"ngram": cfg.k["ngram"], eagle: cfg.k[eagle]}, **lookup}


def make_drafter(cfg: BenchConfig, heads: dict) -> hsd.Drafter | None:
    """The drafter a method names, built from the loaded heads (``replay``: made per prompt in :func:`run`)."""
    def ngram():
        return hsd.NgramDrafter(k=cfg.k["ngram"], min_n=cfg.prompt_lookup_min, max_n=cfg.prompt_lookup_max)

    def eagle(kind):
        key = HEAD_KIND[kind]
        if key not in heads:
            raise ValueError(f"--method {cfg.method} needs an {key} head; loaded: {sorted(heads) or 'none'}")
        if cfg.tree == "dynamic":
            return hsd.EagleTreeDrafter(heads[key], depth=cfg.tree_depth, top_k=cfg.tree_top_k, nodes=cfg.tree_nodes)
        if cfg.tree == "static":
            return hsd.EagleTreeDrafter(heads[key], paths=[tuple(p) for p in cfg.tree_paths])
        return hsd.EagleDrafter(heads[key], k=cfg.k[kind])

    if cfg.method in ("none", "replay"):
        return None
    if cfg.method == "ngram":
        return ngram()
    if cfg.method in ("eagle", "eagle3"):
        return eagle(cfg.method)
    return hsd.HybridDrafter(ngram(), eagle(cfg.method.split("-", 1)[1]), policy=cfg.hybrid_policy)


def eagle_kind(method: str) -> str | None:
    """``"eagle1"``/``"eagle3"``: the head kind a method drafts with (``None``: it needs no head)."""
    return HEAD_KIND.get(method.rsplit("-", 1)[-1]) if "eagle" in method else None


def head_source(cfg: BenchConfig) -> str | Path | None:
    """Where the method's EAGLE head comes from: ``--eagle-dir``, else the zoo's head beside the model, else
    vLLM's default head for its default target; ``ValueError`` when there is none."""
    kind = eagle_kind(cfg.method)
    if kind is None:
        return None
    if cfg.eagle_dir:
        return cfg.eagle_dir
    if cfg.model in VLLM_HEADS:
        return VLLM_HEADS[cfg.model][kind]
    found = checkpoint.zoo_heads(checkpoint.resolve(cfg.model)) if cfg.model in hsd.zoo.names() else {}
    if kind not in found:
        raise ValueError(f"--method {cfg.method} needs an {kind} head: pass --eagle-dir (folder or Hub id)")
    return found[kind]


def is_local(model: str) -> bool:
    """Whether ``--model-dir`` names a zoo model or a folder on this machine (else a Hub id)."""
    return model in hsd.zoo.names() or Path(model).expanduser().exists()


def preflight(cfg: BenchConfig) -> None:
    """Check, before loading weights, that the target and EAGLE head can be reached and fit each other (their
    config files only); ``ValueError`` with one line naming what is wrong."""
    from hybridsd.eagle import loader

    folder = checkpoint.resolve(cfg.model)
    target_cfg = checkpoint.read_config(folder)
    if is_local(cfg.model):  # a Hub id's weights: not fetched yet
        try:
            weight_files(folder)
        except (FileNotFoundError, ValueError) as e:
            raise ValueError(f"--model-dir {cfg.model!r}: {e}") from None
    check_tokenizer(cfg, folder)
    check_attention(cfg, folder)
    src = head_source(cfg)
    if src is None:
        return
    try:
        head_folder = loader.resolve(src)
    except (OSError, FileNotFoundError) as e:
        raise ValueError(f"--eagle-dir: {e}") from None
    if not (head_folder / "config.json").is_file():
        raise ValueError(f"--eagle-dir {str(src)!r} is not an EAGLE head folder (no config.json)")
    head = checkpoint.read_config(head_folder)
    kind = "eagle3" if "draft_vocab_size" in head or any("Eagle3" in a for a in head.get("architectures") or []) \
        else "eagle1"
    if kind != eagle_kind(cfg.method):
        raise ValueError(f"--eagle-dir {str(src)!r} holds an {kind} head; --method {cfg.method} needs an "
                         f"{eagle_kind(cfg.method)} head")
    text = target_cfg.get("text_config", target_cfg)
    for key in ("hidden_size", "vocab_size"):
        if key in head and key in text and head[key] != text[key]:
            raise ValueError(f"--eagle-dir {str(src)!r} does not fit --model-dir {cfg.model!r}: {key} "
                             f"{head[key]} vs the target's {text[key]}")
    load_heads(cfg, shell_target(cfg.model))  # the head's weights against a weightless target: the loader's checks


def check_attention(cfg: BenchConfig, folder: Path) -> None:
    """``ValueError`` with one line when the target's attention cannot run ``cfg``'s draft (from its config alone):
    ALiBi biases that follow the cache slots (MPT, BLOOM, Falcon with ``alibi``) with a draft tree."""
    from transformers import AutoConfig

    from hybridsd.target import alibi

    config = AutoConfig.from_pretrained(folder)
    if alibi(config) is not None and cfg.draft_shape()[1] > 1:
        raise ValueError(f"--model-dir {cfg.model!r}: model type {config.model_type!r} adds ALiBi biases by cache "
                         f"slot, so --method {cfg.method} (a draft tree) would not be verified exactly; use a chain")


def check_tokenizer(cfg: BenchConfig, folder: Path) -> None:
    """The target's tokenizer, before its weights: it must load (a local folder's from its own files, a Hub id's
    tokenizer files fetched alone) and, unless ``--skip-chat-template``, have a chat template; ``ValueError`` with
    one line naming ``--model-dir`` otherwise (a folder of weights alone, an EAGLE head, a base model's tokenizer)."""
    from transformers import AutoTokenizer

    local = is_local(cfg.model)
    if local and not any((folder / name).is_file() for name in TOKENIZER_VOCABULARIES):
        raise ValueError(f"--model-dir {cfg.model!r} has no tokenizer (none of {', '.join(TOKENIZER_VOCABULARIES)}): "
                         "a target folder holds its tokenizer's files beside config.json")
    try:
        tok = AutoTokenizer.from_pretrained(folder if local else cfg.model, local_files_only=local)
    except Exception as e:  # noqa: BLE001 - missing, broken or unsupported tokenizer files raise many types
        first = (str(e).strip().splitlines() or [""])[0]
        raise ValueError(f"--model-dir {cfg.model!r}: cannot load its tokenizer ({type(e).__name__}: "
                         f"{first[:160]})") from None
    if cfg.chat_template and getattr(tok, "chat_template", None) is None:
        raise ValueError(f"--model-dir {cfg.model!r}: its tokenizer has no chat template (a base model?); pass "
                         "--skip-chat-template to run the raw prompts")
    if cfg.bos_mode == "doubled" and tok.encode("a") == tok.encode("a", add_special_tokens=False):
        raise ValueError(f"--double-bos: the tokenizer of --model-dir {cfg.model!r} adds no BOS, so the prompts "
                         "would be the single-BOS ones")


def shell_target(model: str) -> torch.nn.Module:
    """The target built from its config on the meta device, its shapes without weights, for the head's checks; a
    local folder's input embedding is read alone from its safetensors files, so that a head's shipped copy of
    another model's embedding is found before the target loads."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = checkpoint.resolve(model)
    with torch.device("meta"):
        shell = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    if is_local(model):  # a Hub id's weights: not fetched here
        embedding = shell.get_input_embeddings()
        name = next(n for n, p in shell.named_parameters() if p is embedding.weight)
        weight = read_tensor(folder, name)
        if weight is not None and weight.shape == embedding.weight.shape:
            embedding.weight = torch.nn.Parameter(weight, requires_grad=False)
    return shell


class WeightsMismatch(ValueError):
    """Weights that do not fit, found when loading them: an EAGLE head's against the target, or a target
    checkpoint's against its own config (weights it lacks)."""


def load_target(cfg: BenchConfig, device: str) -> checkpoint.LoadedTarget:
    """``cfg``'s target on ``device``; :class:`WeightsMismatch` when its checkpoint lacks weights (found once read)."""
    try:
        return checkpoint.load_target(cfg.model, device=device, dtype=cfg.dtype)
    except ValueError as e:
        raise WeightsMismatch(f"--model-dir {cfg.model!r}: {e}") from None


def load_heads(cfg: BenchConfig, model) -> dict:
    """The method's EAGLE head, ``{kind: head}`` (empty when the method needs none), on the target's device
    and dtype; the loader's shape and vocabulary checks raise ``ValueError`` naming the weight."""
    src = head_source(cfg)
    if src is None:
        return {}
    try:
        head = hsd.EagleHead.from_pretrained(src, target=model, use_checkpoint_embeddings=cfg.checkpoint_embeddings)
    except ValueError as e:
        msg = str(e).replace("use_checkpoint_embeddings=True", "--use-checkpoint-embeddings")
        raise WeightsMismatch(f"--eagle-dir {str(src)!r} does not fit --model-dir {cfg.model!r}: {msg}") from None
    return {eagle_kind(cfg.method): head.eval()}


def load_examples(cfg: BenchConfig, data_dir: str | None, num_prompts: int | None,
                  per_bin: int | None = None, oversample: bool = True, bin_width: float = 0.05) -> list[data.Example]:
    """The run's prompts in a deterministic order (code edits: ``cfg.split``, the zoo's held-out split by default;
    ``per_bin``: at most that many from each ``bin_width``-wide edit-norm bin over [0, 0.6], 0: every prompt inside
    the bins; without it, an ``hf`` dataset is read no further than its first ``num_prompts`` prompts, as vLLM
    reads it). ``num_prompts`` beyond the dataset adds prompts drawn from it with replacement, as vLLM does
    (``random.Random(seed).choice`` once per missing prompt; a prompt's repeats get ids ``#2``, ``#3``, ..., past
    any the dataset has itself), unless
    ``oversample`` is false. ``ValueError`` when two prompts read have one id (results rows are keyed by it)."""
    file = Path(data_dir) / DATA_FILES[cfg.dataset_name] if data_dir and cfg.dataset_name != "hf" else None
    if cfg.dataset_name == "hf":
        exs = data.load_hf(cfg.dataset_path, min_distance=cfg.min_distance, max_distance=cfg.max_distance,
                           split=cfg.hf_split, shuffle_seed=cfg.seed if cfg.hf_shuffle else None,
                           limit=num_prompts if per_bin is None and (num_prompts or 0) >= 1 else None)
    elif cfg.dataset_name == "mt-bench":
        exs = data.load_mt_bench(file)
    elif cfg.dataset_name == "editeval":
        exs = data.load_editeval(file, min_distance=cfg.min_distance, max_distance=cfg.max_distance)
    else:
        keep = None
        if cfg.split == "eval" and cfg.model in hsd.zoo.names():
            keep = set(json.loads((hsd.zoo.path(cfg.model) / "eval_split.json").read_text())["ids"])
        exs = data.load_code_edits(file, min_distance=cfg.min_distance, max_distance=cfg.max_distance,
                                   change_request=cfg.change_request, ids=keep)
        if cfg.split == "validation":
            from experiments.edit_corpus import VALIDATION_REPOS

            exs = [e for e in exs if e.meta.get("repo") in VALIDATION_REPOS]
    seen = set()
    for e in exs:
        if e.id in seen:
            raise ValueError(f"{cfg.dataset_path or file or DATA_FILES[cfg.dataset_name]}: two prompts have the id "
                             f"{e.id!r} (results rows are keyed by their prompt's id: give each its own)")
        seen.add(e.id)
    if per_bin is not None:
        if per_bin < 0:
            raise ValueError(f"--per-bin must be >= 0 (0: every prompt inside the bins), got {per_bin}")
        exs = data.resample_by_bins(exs, results.norm_bins(bin_width), per_bin or sys.maxsize, seed=cfg.seed)
    if num_prompts is not None and num_prompts < 1:
        raise ValueError(f"--num-prompts must be >= 1, got {num_prompts}")
    if not exs:
        raise ValueError(f"no prompts left in {cfg.dataset_path or cfg.dataset_name} after the filters")
    if num_prompts and num_prompts > len(exs) and oversample:  # as vLLM: random.seed(seed), random.choice a prompt
        base, rng, times = exs, random.Random(cfg.seed), Counter(e.id for e in exs)
        exs, taken = list(base), {e.id for e in base}
        for _ in range(num_prompts - len(base)):
            e = rng.choice(base)
            times[e.id] += 1
            while f"{e.id}#{times[e.id]}" in taken:  # a dataset id of that form already: the next free one
                times[e.id] += 1
            taken.add(f"{e.id}#{times[e.id]}")
            exs.append(replace(e, id=f"{e.id}#{times[e.id]}"))
    return exs[:num_prompts] if num_prompts else exs


def check_results_file(out: Path) -> None:
    """``ValueError`` unless rows can be appended to ``out``: a plain (not gzip) file that is missing, empty, or
    holds results rows (a killed run's torn last line is repaired when the run starts), with no compressed copy
    ``<out>.gz`` beside it (a run would make its rows again beside that copy's). Any other file (a dataset, notes, a
    compressed record) is refused rather than moved aside row by row as damaged."""
    if out.name.endswith(".gz"):
        raise ValueError(f"{out}: rows are appended to a plain .jsonl file; a .gz one cannot be appended "
                         "(compress it once the run is done)")
    if (packed := out.with_name(out.name + ".gz")).exists():
        raise ValueError(f"{out}: {packed.name} beside it holds its rows compressed; decompress it (gunzip) "
                         "to continue that run, or name another file")
    if not out.is_file() or not out.stat().st_size:
        return
    data = out.read_bytes()
    lines = data.split(b"\n")  # one line without a newline: a first row torn by a kill, repaired as damaged
    if data.startswith(b"\x1f\x8b") or (len(lines) > 1 and not any(dp.row_key(line) for line in lines)):
        raise ValueError(f"{out}: an existing file that holds no results rows; name a new file, or one "
                         "an earlier run of spec_bench wrote")


def done_keys(path: Path) -> set[tuple[str, str]]:
    """(config key, example id) of rows already in ``path``; a torn last line is ignored."""
    return {key for key, _ in dp.keyed_rows(path)}


def rows_there(out: Path) -> tuple[set, set]:
    """(config key, example id) of the rows in ``out``, and of those only in the shards an earlier run left beside
    it (a sharded run or a rerun merges them into ``out``)."""
    have = done_keys(out)
    return have, set().union(*(done_keys(p) for p in dp.shard_paths(out))) - have


def peak_memory_gb(device: str) -> float:
    """Peak memory of this process: allocated on the GPU, else the host's resident set."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def timed_generate(model, ids: list[int], drafter, kw: dict, cuda: bool):
    """``generate``'s result and its wall seconds (the device idle at the start and done at the end)."""
    if cuda:
        torch.cuda.synchronize()  # host sync: the timer starts with an idle device
    t0 = time.perf_counter()
    res = hsd.generate(model, ids, drafter=drafter, **kw)
    if cuda:
        torch.cuda.synchronize()  # host sync: the timer stops when the device is done
    return res, time.perf_counter() - t0


def replay_timing(model, ids: list[int], res, first_wall: float, drafter, kw: dict, cfg: BenchConfig,
                  repeats: int = 7) -> dict:
    """For a replay row on CUDA: the graphed forward of 1 token (``decode_ms``) and of a verify block of k+1
    (``verify_ms``) at the run's middle context, measured apart, and the tokens/s they predict
    (``seq_normalized_al / verify_ms``, i.e. AL x decode/verify step time x the plain decode rate; and with the
    prompt's measured prefill) against the measured ``tokens_per_s``: the median over ``repeats`` more timed
    runs of the same generation with a fresh copy of ``drafter`` (the row's own run, ``first_wall`` seconds, the
    first after the replay's warm-up, is kept apart as ``first_run_tokens_per_s``)."""
    from experiments.speed_steps import ours_ms  # bench_speed's step timing

    from hybridsd.target import target_for

    k = cfg.k.get("replay", DEFAULT_K["eagle"])
    ctx = len(ids) + len(res.tokens) // 2
    graphs = cfg.cuda_graphs and next(model.parameters()).device.type == "cuda"  # as generate's None
    target = target_for(model, ctx + k + 2, cuda_graphs=graphs, compile=COMPILE[cfg.compile])  # generate's
    fwd = ours_ms(target, ctx, [1, k + 1])
    al = res.stats.seq_normalized_al
    pre = prefill_ms(model, ids, cfg)
    run_ms = pre + (res.stats.num_target_steps - 1) * fwd[f"chain_q{k + 1}"]  # the prefill, then verify steps
    walls = [timed_generate(model, ids, hsd.ReplayDrafter(drafter.continuation, drafter.k), kw, True)[1]
             for _ in range(repeats)]
    return {"k": k, "context": ctx, "decode_ms": fwd["chain_q1"], "verify_ms": fwd[f"chain_q{k + 1}"],
            "prefill_ms": pre, "seq_normalized_al": al, "repeats": repeats,
            "predicted_tokens_per_s": 1e3 * al / fwd[f"chain_q{k + 1}"],
            "predicted_with_prefill_tokens_per_s": 1e3 * len(res.tokens) / run_ms,
            "decode_tokens_per_s": 1e3 / fwd["chain_q1"],
            "tokens_per_s": len(res.tokens) / float(np.median(walls)),
            "tokens_per_s_spread": [len(res.tokens) / max(walls), len(res.tokens) / min(walls)],
            "first_run_tokens_per_s": len(res.tokens) / first_wall}


@torch.inference_mode()
def prefill_ms(model, ids: list[int], cfg: BenchConfig, repeats: int = 5) -> float:
    """Median wall time of the prompt's prefill pass as ``generate`` runs it (first run excluded: warm-up)."""
    from hybridsd.target import target_for

    prompt = torch.tensor(ids, device=next(model.parameters()).device)
    cuda = prompt.device.type == "cuda"
    target = target_for(model, len(ids) + 1, cuda_graphs=cfg.cuda_graphs and cuda, compile=COMPILE[cfg.compile])
    times = []
    for _ in range(repeats + 1):
        if cuda:
            torch.cuda.synchronize()  # host sync: time the pass alone
        t0 = time.perf_counter()
        target.forward(prompt, 0, last_logits_only=True)
        if cuda:
            torch.cuda.synchronize()  # host sync: the pass is done
        times.append(1e3 * (time.perf_counter() - t0))
    return float(np.median(times[1:]))


def run(cfg: BenchConfig, examples: list[data.Example], out: Path, *, progress: bool = True,
        print_output: bool = False, failed: list[str] | None = None, there: dict | None = None) -> int:
    """Generate for every example not yet in ``out``; append one JSON row each. Returns the rows this run made
    (every rank's); the ids of prompts whose generation raised (no row: a rerun retries them) are appended to
    ``failed``; ``there`` gets this run's rows (config and prompt) found under the lock before any was made:
    ``"before"`` in ``out``, ``"carried"`` only in an earlier run's shards.

    Under torchrun (``WORLD_SIZE`` > 1) rank r decodes ``todo[r::world]`` into its shard ``<out>.rank{r}.part``
    (row by row, resumable like ``out``); after all ranks finish, rank 0 merges the shards into ``out`` in
    ``examples``' order (see :func:`distributed.merge`). Shards a crashed run left are counted as done and merged,
    also by a one-process rerun (their rows are not counted as made). ``print_output``: print
    each prompt's output text, as vLLM's ``--print-output``. The run (its rank 0) holds ``out``'s lock
    throughout: :class:`distributed.Busy` at once, before any loading, while another run holds it.
    """
    rank, world = dp.init(cfg.device)
    with dp.exclusive_for_all(out):  # every rank stops, before any loading, when rank 0 has no lock
        return _run(cfg, examples, out, rank, world, progress, print_output, failed, there)


def _run(cfg: BenchConfig, examples: list[data.Example], out: Path, rank: int, world: int, progress: bool,
         print_output: bool, failed: list[str] | None, there: dict | None) -> int:
    """:func:`run`'s work, under the lock."""
    shards = dp.shard_paths(out)
    sharded = world > 1 or bool(shards)
    device = dp.local_device(cfg.device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    loaded = load_target(cfg, device)
    model, tok = loaded.model, loaded.tokenizer
    heads = load_heads(cfg, model)
    if rank == 0:
        print(f"spec_bench: loaded {cfg.model} ({loaded.dtype}, {device}) in {loaded.load_s:.1f} s", file=sys.stderr)
    drafter = make_drafter(cfg, heads)
    eos = loaded.eos_ids
    shared = dp.gpu_sharing(device)
    info = {**provenance.run_info(device), "load_s": loaded.load_s, "model_folder": str(loaded.folder),
            "model_dtype": loaded.dtype, **({"ranks_per_gpu": shared} if shared > 1 else {})}  # timings shared
    have, carried = rows_there(out)
    key = cfg.key()
    if there is not None:  # of this run's rows (its config, its prompts): other configs' rows may share the file
        mine = {(key, e.id) for e in examples}
        there.update(before=len(have & mine), carried=len(carried & mine))
    seen = have | carried
    label = examples[0].source if examples else ""
    dataset = HF_SOURCES.get(label, label) if cfg.dataset_name == "hf" else cfg.dataset_name
    todo = [e for e in examples if (key, e.id) not in seen]
    dest = out
    if sharded:
        todo, dest = todo[rank::world], dp.shard_path(out, rank)
        dp.barrier()  # every rank has read the files (and so agrees on todo) before any rank writes
    dp.repair_tail(dest)  # a row torn by a crash is dropped (and made again), not glued to the next one
    out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    cuda = device.startswith("cuda")
    context = context_length(model)  # None: the config sets none (BLOOM's ALiBi)
    with dest.open("a") as f:
        for ex in tqdm(todo, desc=f"{cfg.method}", disable=not progress or rank != 0):
            ids = prompts.build_prompt_ids(tok, ex.prompt, chat=cfg.chat_template, bos_mode=cfg.bos_mode)
            limit = cfg.output_len if context is None else context - len(ids)
            if limit < 1:  # no row, as for a failed generation: named, and the run exits 1
                print(f"FAILED {cfg.method} {ex.id}: its prompt's {len(ids)} tokens fill the model's context "
                      f"({context})", file=sys.stderr, flush=True)
                if failed is not None:
                    failed.append(ex.id)
                continue
            n_out = min(cfg.output_len, limit)
            kw = dict(max_new_tokens=n_out, temperature=cfg.temperature, eos_token_id=eos, seed=cfg.seed,
                      cuda_graphs=None if cfg.cuda_graphs else False,  # None: graphs on a CUDA device only
                      compile=COMPILE[cfg.compile], on_double_bos="ignore",
                      exact=cfg.exact or False)
            if cfg.method == "replay":
                k = cfg.k.get("replay", DEFAULT_K["eagle"])
                drafter = hsd.ReplayDrafter(accepted_continuation(model, ids, k, rounds=8, **kw), k)
            try:
                res, wall = timed_generate(model, ids, drafter, kw, cuda)
            except Exception:  # noqa: BLE001 - one failing prompt must not end a sweep; no row, so a rerun retries
                print(f"FAILED {cfg.method} {ex.id}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
                if failed is not None:
                    failed.append(ex.id)
                continue
            res.stats.check()
            text = tok.decode(res.tokens, skip_special_tokens=True)
            if print_output:
                print(f"--- {ex.id}\n{text}", flush=True)
            row = {
                "config_key": key, "example_id": ex.id, "dataset": dataset,
                "ref_edit_norm": ex.edit_norm, "prompt_tokens": len(ids),
                "max_new_tokens": n_out,  # --output-len, or less where the prompt leaves less room in the context
                "output_edit_norm": edit_norm(ex.input_text, text) if ex.input_text else None,
                "stats": res.stats.summary(), "tokens": res.tokens,
                "trace": [[s.source, s.drafted, s.accepted] for s in res.stats.trace],
                "wall_s": wall, "tpot_ms": 1e3 * wall / len(res.tokens),
                "config": asdict(cfg), "run_info": {**info, "peak_mem_gb": peak_memory_gb(device)},
            }
            if cfg.method == "replay" and cuda:
                row["replay"] = replay_timing(model, ids, res, wall, drafter, kw, cfg)
            if cfg.check_lossless and drafter is not None:
                plain = hsd.generate(model, ids, **kw)
                row["lossless"] = plain.tokens == res.tokens
            f.write(json.dumps(finite(row), allow_nan=False) + "\n")
            f.flush()  # row by row: a crash loses at most the row being made
            written += 1
    if rank == 0:
        print(f"spec_bench: peak memory {peak_memory_gb(device):.2f} GiB", file=sys.stderr)
    if not sharded:
        return written
    dp.barrier()  # every shard is complete
    merged = dp.merge(out, [e.id for e in examples]) if rank == 0 else None
    return dp.broadcast(merged) - len(carried)  # the merge is done before any rank moves on


def finite(obj):
    """``obj`` (JSON-like) with every NaN or infinite float replaced by ``None``, so that results rows are standard
    JSON (MT-Bench's edit norm and plain decoding's precision AL are null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def fail(message: str) -> None:
    """A user mistake: one line on stderr, exit code 2, no traceback (:meth:`Parser.error`: one write, so that
    torchrun's ranks sharing a stderr pipe do not splice their lines)."""
    Parser(prog="spec_bench").error(message)


def per_method(text: str) -> dict:
    """``--num-speculative-tokens-per-method`` JSON, e.g. '{"ngram": 5, "eagle": 3}'."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"not JSON: {text!r}") from None
    if not isinstance(d, dict) or not set(d) <= {"ngram", "eagle", "eagle1", "eagle3"}:
        raise argparse.ArgumentTypeError(f'want a JSON object over ngram/eagle/eagle3, e.g. \'{{"ngram": 5, '
                                         f'"eagle": 3}}\', got {text!r}')
    return d


def tree_paths(text: str) -> tuple:
    """``--tree-paths`` JSON, vLLM's speculative_token_tree (e.g. '[[0],[1],[0,0]]'), as a tuple of tuples (its
    shape as a tree: :class:`BenchConfig`)."""
    try:
        paths = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"not JSON: {text!r}") from None
    if not isinstance(paths, list) or not all(isinstance(p, list) for p in paths):
        raise argparse.ArgumentTypeError(f"want a JSON list of paths (lists of child ranks), e.g. '[[0],[1],[0,0]]', "
                                         f"got {text!r}")
    return tuple(tuple(p) for p in paths)


def spec_token_tree(text: str) -> tuple:
    """vLLM's ``--spec-token-tree`` (a Python list of tuples, e.g. '[(0,), (1,), (0, 0)]') as :func:`tree_paths`'
    tuple of tuples, ordered as vLLM orders it (by depth, then path)."""
    try:
        paths = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        paths = None
    if not isinstance(paths, list | tuple) or not all(isinstance(q, tuple | list) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in q) for q in paths):
        raise argparse.ArgumentTypeError(f"want a list of tuples of child ranks, e.g. '[(0,), (1,), (0, 0)]', "
                                         f"got {text!r}")
    return tuple(sorted((tuple(q) for q in paths), key=lambda q: (len(q), q)))


def speculative_tokens(method: str, k: int | None, per: dict | None) -> dict:
    """The config's ``k`` from vLLM's ``num_speculative_tokens`` (every drafter of the method) and
    ``num_speculative_tokens_per_method`` (wins; ``eagle`` also sets ``eagle3`` for an EAGLE-3 method)."""
    out = dict(DEFAULT_K)
    if k is not None:
        out = {m: k for m in out}
    for m, v in (per or {}).items():
        m = "eagle" if m == "eagle1" else m
        out[m] = v
        if m == "eagle" and method.endswith("eagle3") and "eagle3" not in per:
            out["eagle3"] = v
    if method == "replay":
        out["replay"] = k if k is not None else DEFAULT_K["eagle"]
    return out


EAGLE_METHODS = ("eagle", "eagle3", "ngram-eagle", "ngram-eagle3")
NGRAM_METHODS = ("ngram", "ngram-eagle", "ngram-eagle3")
# the methods that read a flag (with its default) and a --num-speculative-tokens-per-method key
FLAG_METHODS = {"--eagle-dir": ("eagle_dir", None, EAGLE_METHODS),
                "--num-speculative-tokens": ("k", None, tuple(m for m in METHODS if m != "none")),
                "--prompt-lookup-min": ("lookup_min", 2, NGRAM_METHODS),
                "--prompt-lookup-max": ("lookup_max", 5, NGRAM_METHODS),
                "--hybrid-policy": ("hybrid_policy", "prefer-ngram", HYBRIDS),
                "--use-checkpoint-embeddings": ("checkpoint_embeddings", False, EAGLE_METHODS),
                "--check-lossless": ("check_lossless", False, tuple(m for m in METHODS if m != "none"))}
KEY_METHODS = {"ngram": NGRAM_METHODS, "eagle": EAGLE_METHODS, "eagle3": ("eagle3", "ngram-eagle3")}
# the datasets that read a flag (the project's JSONL sets have no splits; MT-Bench has no edit norm)
FLAG_DATASETS = {"--hf-split": ("hf_split", "train", ("hf",)),
                 "--disable-shuffle": ("disable_shuffle", False, ("hf",)),
                 "--split": ("split", "eval", ("code-edits",)),
                 "--change-request": ("change_request", "located", ("code-edits",)),
                 "--per-bin": ("per_bin", None, ("hf", "code-edits", "editeval")),
                 "--blazedit-min-distance": ("blazedit_min_distance", None, ("hf", "code-edits", "editeval")),
                 "--blazedit-max-distance": ("blazedit_max_distance", None, ("hf", "code-edits", "editeval"))}


# vLLM's spec_decode.py takes these with any method and ignores them where the method does not read them
VLLM_IGNORES = ("--eagle-dir", "--num-speculative-tokens", "--prompt-lookup-min", "--prompt-lookup-max",
                "--num-speculative-tokens-per-method")


def unused_flags(a: argparse.Namespace, method: str) -> list[tuple[str, str, Callable[[], None]]]:
    """The flags and ``--num-speculative-tokens-per-method`` keys given a value other than their default that
    ``method`` (or ``--dataset-name``) does not read: (flag, a message naming the methods or datasets that read
    it, a call that sets ``a``'s value back to the default)."""
    out = []
    for option, table, chosen in (("--method", FLAG_METHODS, method),
                                  ("--dataset-name", FLAG_DATASETS, a.dataset_name)):
        for flag, (dest, default, users) in table.items():
            if chosen not in users and getattr(a, dest) != default:
                value = "" if isinstance(default, bool) else f" {getattr(a, dest)}"
                out.append((flag, f"{flag}{value}: {option} {chosen} does not use it (used by {', '.join(users)})",
                            lambda dest=dest, default=default: setattr(a, dest, default)))
    per = a.num_speculative_tokens_per_method or {}
    for key, v in per.items():
        name = "eagle" if key == "eagle1" else key
        users = KEY_METHODS[name]
        if name == "eagle" and "eagle3" in per:  # eagle3's own count wins over eagle's for EAGLE-3 methods
            users = ("eagle", "ngram-eagle")
        if method not in users and v != DEFAULT_K[name]:
            out.append(("--num-speculative-tokens-per-method",
                        (f"--num-speculative-tokens-per-method {json.dumps({key: v})}: --method {method} does not use "
                        f"it (used by {', '.join(users)})"),
                        lambda key=key: setattr(a, "num_speculative_tokens_per_method",
                                                {m: n for m, n in a.num_speculative_tokens_per_method.items()
                                                 if m != key})))
    return out


def parser() -> argparse.ArgumentParser:
    """The command line, in vLLM's ``examples/offline_inference/spec_decode.py`` spelling where it has one."""
    p = Parser(prog="spec_bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default="ngram-eagle", choices=METHODS + tuple(METHOD_ALIASES))
    p.add_argument("--model-dir", "--model", dest="model", default="tiny-coder",
                   help="target: a zoo name, a model folder or a Hub id (default: the zoo's tiny-coder)")
    p.add_argument("--eagle-dir", default=None, help="EAGLE head (folder or Hub id) for eagle, eagle3 and the "
                   "hybrids; default: the zoo's heads beside a zoo model")
    for flag in ("--num-speculative-tokens", "--num-spec-tokens", "--num_spec_tokens"):
        p.add_argument(flag, dest="k", type=int, default=None, help="k for every drafter of the method")
    p.add_argument("--num-speculative-tokens-per-method", type=per_method, default=None,
                   help='JSON, e.g. \'{"ngram": 5, "eagle": 3}\'')
    p.add_argument("--prompt-lookup-min", "--prompt_lookup_min", dest="lookup_min", type=int, default=2)
    p.add_argument("--prompt-lookup-max", "--prompt_lookup_max", dest="lookup_max", type=int, default=5)
    p.add_argument("--hybrid-policy", default="prefer-ngram", choices=("prefer-ngram", "tree"))
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size: 1 only (torchrun gives data parallel)")
    p.add_argument("--max-num-seqs", type=int, default=1, help="batch size: 1 only")
    p.add_argument("--dataset-name", default="code-edits", choices=DATASETS)
    p.add_argument("--dataset-path", default=None, help="hf: a Hub dataset id, a save_to_disk folder, parquet or "
                   "JSONL file(s); otherwise the folder with the project's JSONL files (default ../shared/data)")
    p.add_argument("--hf-split", default="train")
    p.add_argument("--split", default="eval", choices=SPLITS,
                   help="code edits: eval (a zoo target's held-out split; every row for other models), validation "
                   "(the rows of the zoo's validation repositories) or all")
    p.add_argument("--change-request", default="located", choices=data.CHANGE_REQUESTS,
                   help="code-edits prompts: located (the commit subject, then the places, scopes and sizes of the "
                   "change; the zoo target's format), or the commit subject alone")
    p.add_argument("--blazedit-min-distance", type=float, default=None)
    p.add_argument("--blazedit-max-distance", type=float, default=None)
    p.add_argument("--num-prompts", type=int, default=None)
    p.add_argument("--no-oversample", action="store_true",
                   help="with --num-prompts beyond the dataset, run what there is (default: draw more, as vLLM)")
    p.add_argument("--per-bin", type=int, default=None,
                   help="at most N prompts per edit-norm bin (--bin-width; 0: every prompt inside the bins)")
    p.add_argument("--bin-width", type=float, default=0.05, help="width of the --per-bin bins over [0, 0.6]")
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--hf-output-len", type=int, default=None, help="output length (wins over --output-len)")
    p.add_argument("--temperature", "--temp", dest="temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--disable-shuffle", action="store_true", help="--dataset-name hf: take the prompts in the "
                   "dataset's order (default: as vLLM's benchmarks, streamed and shuffled with --seed)")
    p.add_argument("--skip-chat-template", action="store_true")
    p.add_argument("--double-bos", action="store_true", help="reproduce the doubled-BOS bug")
    p.add_argument("--device", default=BenchConfig.device)
    p.add_argument("--dtype", default="auto", choices=checkpoint.DTYPES,
                   help="auto: the checkpoint's dtype on a GPU, fp32 on CPU")
    p.add_argument("--no-cuda-graphs", "--enforce-eager", dest="no_cuda_graphs", action="store_true",
                   help="eager steps, without CUDA graphs (vLLM's --enforce-eager)")
    p.add_argument("--top-p", type=float, default=1.0, help="taken and ignored, as vLLM's spec_decode.py ignores it")
    p.add_argument("--top-k", type=int, default=-1, help="taken and ignored, as vLLM's spec_decode.py ignores it")
    p.add_argument("--enable-chunked-prefill", action="store_true",
                   help="taken and ignored: one sequence's prefill is one pass")
    p.add_argument("--compile", default="none", choices=tuple(COMPILE), help="generate(compile=...)")
    p.add_argument("--tree", default="none", choices=TREES,
                   help="EAGLE drafts a tree: EAGLE-2's dynamic tree or a static one (--tree-paths)")
    p.add_argument("--tree-depth", type=int, default=6)
    p.add_argument("--tree-top-k", type=int, default=10)
    p.add_argument("--tree-nodes", type=int, default=60)
    p.add_argument("--tree-paths", type=tree_paths, default=None,
                   help="static tree as vLLM's speculative_token_tree, e.g. '[[0],[1],[0,0]]'")
    p.add_argument("--spec-token-tree", type=spec_token_tree, default=None,
                   help="vLLM's spelling of a static tree, e.g. '[(0,), (1,), (0, 0)]': --tree static --tree-paths "
                   "of it (--num-spec-tokens, when given, must be its size, as vLLM asserts)")
    p.add_argument("--exact", type=int, nargs="?", const=16, default=0, metavar="ROWS",
                   help="exact mode: every step a block of ROWS (16) rows, bf16 output identical to plain decoding")
    p.add_argument("--check-lossless", action="store_true", help="also decode plainly and compare tokens")
    p.add_argument("--use-checkpoint-embeddings", dest="checkpoint_embeddings", action="store_true",
                   help="draft with the input embedding the EAGLE head ships, where it is not the target's")
    p.add_argument("--print-output", action="store_true", help="print each output text")
    p.add_argument("--print-vllm-config", action="store_true", help="print vLLM's --speculative-config and exit")
    p.add_argument("--output", type=Path, default=None)
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    a = p.parse_args(argv)
    if a.tp != 1:
        fail(f"--tp {a.tp}: only 1 is supported (one GPU per process; torchrun runs data parallel)")
    if a.max_num_seqs != 1:
        fail(f"--max-num-seqs {a.max_num_seqs}: only 1 is supported (batch 1)")
    if a.num_prompts is not None and a.num_prompts < 1:
        fail(f"--num-prompts must be >= 1, got {a.num_prompts}")
    if a.hf_output_len is not None and a.hf_output_len < 1:
        fail(f"--hf-output-len must be >= 1, got {a.hf_output_len}")
    if a.per_bin is None and a.bin_width != p.get_default("bin_width"):
        fail(f"--bin-width {a.bin_width}: only --per-bin reads it")
    p.check_device(a.device)
    method = METHOD_ALIASES.get(a.method, a.method)
    if a.spec_token_tree is not None:  # vLLM's spelling of --tree static --tree-paths
        if a.tree != "none" or a.tree_paths is not None:
            fail("--spec-token-tree is a static tree: give it or --tree/--tree-paths, not both")
        if a.k is not None and a.k != len(a.spec_token_tree):
            fail(f"--spec-token-tree has {len(a.spec_token_tree)} nodes but --num-spec-tokens is {a.k}; vLLM "
                 "requires them equal")
        a.tree, a.tree_paths, a.k = "static", a.spec_token_tree, None
    for flag, given in (("--top-p", a.top_p != 1.0), ("--top-k", a.top_k != -1),
                        ("--enable-chunked-prefill", a.enable_chunked_prefill)):
        if given:  # vLLM's script samples with the temperature alone; chunking does not change one sequence
            print(f"spec_bench: {flag}: ignored, as vLLM's spec_decode.py ignores it", file=sys.stderr)
    for flag, message, to_default in unused_flags(a, method):  # vLLM's flags as vLLM takes them; our own refused
        if flag not in VLLM_IGNORES:
            fail(message)
        print(f"spec_bench: {message}; ignored, as vLLM's script ignores it", file=sys.stderr)
        to_default()  # the run's config (and key) is the one without the flag
    try:
        cfg = BenchConfig(method=method, model=a.model,
                          k=speculative_tokens(method, a.k, a.num_speculative_tokens_per_method),
                          prompt_lookup_min=a.lookup_min, prompt_lookup_max=a.lookup_max,
                          hybrid_policy=a.hybrid_policy, dataset_name=a.dataset_name, split=a.split,
                          change_request=a.change_request,
                          min_distance=a.blazedit_min_distance, max_distance=a.blazedit_max_distance,
                          output_len=a.hf_output_len or a.output_len, temperature=a.temperature, seed=a.seed,
                          chat_template=not a.skip_chat_template, bos_mode="doubled" if a.double_bos else "single",
                          device=a.device, dtype=a.dtype, cuda_graphs=not a.no_cuda_graphs,
                          check_lossless=a.check_lossless, eagle_dir=a.eagle_dir,
                          dataset_path=a.dataset_path if a.dataset_name == "hf" else None, hf_split=a.hf_split,
                          compile=a.compile, tree=a.tree, tree_depth=a.tree_depth, tree_top_k=a.tree_top_k,
                          tree_nodes=a.tree_nodes, tree_paths=a.tree_paths, exact=a.exact,
                          dataset_digest=data_digest(a.dataset_name, a.dataset_path),
                          hf_shuffle=True if a.dataset_name == "hf" and not a.disable_shuffle else None,
                          checkpoint_embeddings=a.checkpoint_embeddings)
    except (ValueError, TypeError) as e:
        fail(str(e))
    if a.print_vllm_config:
        if (lacks := vllm_lacks(cfg)) is not None:
            print(f"spec_bench: vLLM has no counterpart of {lacks}; no --speculative-config", file=sys.stderr)
        print(json.dumps(vllm_speculative_config(cfg, cfg.eagle_dir or "<eagle head folder>")))
        return
    stem = cfg.dataset_name if cfg.dataset_name != "hf" else Path(str(cfg.dataset_path)).name
    out = a.output or Path("experiments/results/runs") / f"{stem}-{cfg.method}-{cfg.key()}.jsonl"
    p.check_output(out, flag="--output")
    try:
        check_results_file(out)
    except ValueError as e:
        fail(f"--output {e}")
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()  # no "Retrying in Ns" lines before an unreachable Hub id's one-line error
    if a.dataset_name == "hf":
        import datasets

        datasets.disable_progress_bars()  # small local reads; a user mistake stays one line
        # the JSON builder logs its own "Failed to load JSON" line (ERROR) before raising: the one line is ours
        datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:  # mistakes in the model, head or data: one line, before the target's weights are read
        preflight(cfg)
        examples = load_examples(cfg, None if a.dataset_name == "hf" else a.dataset_path, a.num_prompts,
                                 a.per_bin, oversample=not a.no_oversample, bin_width=a.bin_width)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    if a.num_prompts and len(examples) < a.num_prompts and os.environ.get("RANK", "0") == "0":  # before dp.init
        print(f"spec_bench: --num-prompts {a.num_prompts} but the dataset has {len(examples)} prompts after the "
              f"filters; running {len(examples)} (--no-oversample)", file=sys.stderr)
    failed, found = [], {"before": 0, "carried": 0}
    try:
        n = run(cfg, examples, out, print_output=a.print_output, failed=failed, there=found)
    except (WeightsMismatch, dp.Busy) as e:  # weights, checked once they are read; another run
        fail(str(e))
    if dp.rank() == 0:
        there = [f"{found['before']} there before"] if found["before"] else []
        if found["carried"]:
            there.append(f"{found['carried']} merged from an earlier run's shards")
        print(f"wrote {n} new row{'s' * (n != 1)} to {out}" + (f" ({'; '.join(there)})" if there else ""),
              file=sys.stderr)
    dp.finish()
    if failed:  # their tracebacks are above (FAILED ...); the rows that succeeded are written
        print(f"spec_bench: {len(failed)} prompt(s) failed, no rows for them (a rerun retries them): "
              f"{', '.join(failed[:5])}{' ...' if len(failed) > 5 else ''}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
