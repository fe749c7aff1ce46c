"""The model zoo: small target models (and their EAGLE heads) trained for this project, stored in the repository.

Each model is a folder under ``hybridsd/models/`` holding a HuggingFace checkpoint (``config.json``, safetensors
shards, tokenizer files) and optionally EAGLE draft heads in ``eagle1/`` and ``eagle3/`` subfolders. Loading
never touches the network.

    >>> from hybridsd import zoo
    >>> zoo.names()
    ['tiny-coder']
    >>> model, tokenizer, heads = zoo.load()          # fp32 on CPU; heads: {"eagle1": ..., "eagle3": ...}
"""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "models"
DEFAULT = "tiny-coder"
HEAD_KINDS = ("eagle1", "eagle3")
DTYPE_NAMES = ("auto", "bf16", "fp16", "fp32", "bfloat16", "float16", "float32")  # the names load takes


def names() -> list[str]:
    """Names of the models in the zoo: folders under ``hybridsd/models`` with a ``config.json``, sorted."""
    if not MODELS_DIR.is_dir():
        return []
    return sorted(p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file())


def path(name: str | None = None) -> Path:
    """The folder of model ``name`` (default ``tiny-coder``); ValueError for an unknown name."""
    name = name or DEFAULT
    available = names()
    if name not in available:
        raise ValueError(f"unknown model {name!r}; the zoo has: {', '.join(available) or '(none)'}")
    return MODELS_DIR / name


def head_folders(folder: Path) -> dict[str, Path]:
    """The EAGLE head folders beside a target in the zoo's layout: ``eagle1/`` and ``eagle3/`` holding a
    ``config.json``."""
    return {k: folder / k for k in HEAD_KINDS if (folder / k / "config.json").is_file()}


def load(name: str | None = None, device="cpu", dtype=None):
    """Load a zoo model: ``(model, tokenizer, heads)``.

    ``model`` is an ``AutoModelForCausalLM`` in eval mode on ``device``, in ``dtype`` (default: float32 on CPU,
    bfloat16 on CUDA, which ``"auto"`` also gives; a floating ``torch.dtype`` or one of :data:`DTYPE_NAMES`);
    ``tokenizer`` the model's tokenizer; ``heads`` maps ``"eagle1"`` / ``"eagle3"`` to an
    ``hybridsd.eagle.model.EagleHead`` for each head folder it has (:func:`head_folders`; absent keys: no such head).
    Everything is read from the repository (``local_files_only=True``).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = path(name)
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise (ValueError if isinstance(e, RuntimeError) else TypeError)(
            f"device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
    if isinstance(dtype, str) and dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype must be a floating torch.dtype or one of {DTYPE_NAMES}, got {dtype!r}")
    if dtype is None or dtype == "auto":
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    elif isinstance(dtype, str):
        dtype = getattr(torch, {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype))
    elif not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype or one of {DTYPE_NAMES}, got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    model = model.to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    heads = {}
    for kind, sub in head_folders(folder).items():
        from hybridsd.eagle.model import EagleHead  # imported only when a head exists

        head = EagleHead.from_pretrained(sub, target=model)
        if isinstance(head, torch.nn.Module):
            head = head.to(device=device, dtype=dtype).eval()
        heads[kind] = head
    return model, tokenizer, heads
