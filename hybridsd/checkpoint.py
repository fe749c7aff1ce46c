"""Load a target model by Hugging Face Hub id, local folder or zoo name: model, tokenizer, EOS ids.

    >>> from hybridsd import checkpoint
    >>> folder = checkpoint.resolve("meta-llama/Llama-3.1-8B-Instruct")   # config only: cheap, checks access
    >>> t = checkpoint.load_target(folder, device="cuda")                 # bf16 (the checkpoint's), on the GPU
    >>> t.model, t.tokenizer, t.eos_ids                                    # eos: <|eot_id|> and <|end_of_text|>

:func:`resolve` fails with one line naming the id (``ValueError``) for a hub id that cannot be reached (offline
without a cached copy, missing, gated) and for a folder that is not a model, before any weights are read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from hybridsd import zoo
from hybridsd.checkpoint_files import json_object, weight_files

DTYPES = ("auto", "bf16", "fp16", "fp32")
# what a target needs from a Hub repository (not the original/ consolidated weights, not .bin copies)
HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.model", "*.tiktoken", "*.txt"]


@dataclass
class LoadedTarget:
    """A loaded target: ``model`` (eval mode), ``tokenizer``, ``eos_ids`` (from the generation config),
    ``folder`` it was read from, ``dtype`` name, ``load_s`` seconds spent loading."""

    model: object
    tokenizer: object
    eos_ids: list[int]
    folder: Path
    dtype: str
    load_s: float


def _is_hub_id(s: str) -> bool:
    return s.count("/") == 1 and not s.startswith((".", "/", "~")) and all(s.split("/"))


def resolve(name_or_path: str | Path, *, weights: bool = False) -> Path:
    """The local folder of a target: a zoo name's folder, an existing folder, or the Hub snapshot of an id
    (``weights=False``: only ``config.json``, to check the id before a large download; ``True``: the files a
    target needs). ``ValueError`` naming it when it is none of these or cannot be reached."""
    s = str(name_or_path)
    if s in zoo.names():
        return zoo.path(s)
    p = Path(s).expanduser()
    if p.exists():
        if not p.is_dir():
            raise ValueError(f"--model-dir {s!r} is a file, not a model folder")
        if not (p / "config.json").is_file():
            raise ValueError(f"--model-dir {s!r} is not a model folder (no config.json)")
        return p
    if not _is_hub_id(s):
        raise ValueError(f"--model-dir {s!r}: no such folder, zoo model ({', '.join(zoo.names())}) "
                         "or Hub id owner/name")
    from huggingface_hub import hf_hub_download, snapshot_download

    try:
        if weights:
            return Path(snapshot_download(s, allow_patterns=HUB_PATTERNS))
        return Path(hf_hub_download(s, "config.json")).parent
    except Exception as e:  # offline without a cached copy, missing or gated repository: all end here
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(f"cannot reach model {s!r} on the Hugging Face Hub ({type(e).__name__}: {first[:160]}); "
                         "log in, go online, or pass a local folder") from e


def read_config(folder: Path) -> dict:
    """``config.json`` of a model folder as a dict; ``ValueError`` naming the file when it is not a JSON object
    (:func:`hybridsd.checkpoint_files.json_object`)."""
    return json_object(folder / "config.json")


def torch_dtype(name: str, folder: Path, device) -> "torch.dtype":  # noqa: F821 - torch imported lazily
    """The dtype for ``name``: ``auto`` = the checkpoint's own (``dtype``/``torch_dtype`` in its config) on a
    GPU, float32 on CPU (half-precision matmuls are slow there and the CPU tests compare in fp32)."""
    import torch

    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {name!r}")
    if name != "auto":
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]
    if torch.device(device).type == "cpu":
        return torch.float32
    cfg = read_config(folder)
    own = cfg.get("dtype") or cfg.get("torch_dtype") or "float32"
    return getattr(torch, own) if isinstance(own, str) and isinstance(getattr(torch, own, None), torch.dtype) \
        else torch.float32


def eos_ids(model, tokenizer) -> list[int]:
    """Ids that end a sequence: the generation config's ``eos_token_id`` (Llama-3.1: ``<|eot_id|>``,
    ``<|end_of_text|>`` and ``<|eom_id|>``), else the tokenizer's EOS and ``<|eot_id|>`` where it has one."""
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen is not None:
        ids = [gen] if isinstance(gen, int) else list(gen)
    else:
        eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
        ids = [t for t in (tokenizer.eos_token_id, eot if eot != tokenizer.unk_token_id else None) if t is not None]
    return sorted({int(t) for t in ids if t is not None and int(t) >= 0})


def check_loaded(folder: Path, info: dict) -> None:
    """``ValueError`` naming ``folder`` and the tensors when transformers' loading ``info`` lists weights of the model
    that the checkpoint does not hold (transformers initializes them at random and only logs them)."""
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise ValueError(f"{folder}: the checkpoint lacks {len(missing)} of the weights its config.json describes "
                         f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}); they would be random")


def load_target(name_or_path: str | Path, *, device="cpu", dtype: str = "auto") -> LoadedTarget:
    """Load a target (zoo name, folder or Hub id) in ``dtype`` (see :func:`torch_dtype`) straight onto
    ``device``, with its tokenizer (and the tokenizer's own chat template) and :func:`eos_ids`. A weight file
    outside the folder (:func:`hybridsd.checkpoint_files.weight_files`) is refused before any is read, and a
    checkpoint that lacks some of the model's weights (which transformers would initialize at random) once read
    (:func:`check_loaded`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    folder = resolve(name_or_path, weights=True)
    weight_files(folder)  # every weight file inside the folder (transformers follows an index's names as written)
    dt = torch_dtype(dtype, folder, device)
    with torch.device(device):  # weights are materialized on the device, not copied there from the host
        model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=dt, local_files_only=True,
                                                           output_loading_info=True)
    check_loaded(folder, info)
    model = model.to(device).eval()  # a no-op unless a buffer was created elsewhere
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dt, str(dt))
    return LoadedTarget(model, tokenizer, eos_ids(model, tokenizer), folder, name, time.perf_counter() - t0)


def zoo_heads(folder: Path) -> dict[str, Path]:
    """EAGLE head folders shipped beside a target in the zoo's layout (:func:`hybridsd.zoo.head_folders`)."""
    return zoo.head_folders(folder)
