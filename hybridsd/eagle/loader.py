"""Read and write EAGLE heads in the public checkpoint layouts.

EAGLE-1 (e.g. ``yuhuili/EAGLE-LLaMA3.1-Instruct-8B``): ``fc.weight [h, 2h]`` (+ ``fc.bias``),
``layers.0.self_attn.{q,k,v,o}_proj.weight``, ``layers.0.mlp.{gate,up,down}_proj.weight``,
``layers.0.post_attention_layernorm.weight``, optionally ``embed_tokens.weight [V, h]``.
EAGLE-3 (e.g. ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``): ``d2t [Vd]``, ``t2d [V]``,
``fc.weight [h, 3h]``, ``midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight``,
``midlayer.self_attn.*`` (q/k/v read ``2h``), ``midlayer.mlp.*``, ``norm.weight``,
``lm_head.weight [Vd, h]``, optionally ``embed_tokens.weight``.
Both come with a Llama-style ``config.json`` (``num_hidden_layers`` 1; EAGLE-3 adds
``draft_vocab_size``; no ``rope_theta`` means 10000).

This module reads and checks files; :meth:`hybridsd.eagle.model.EagleHead.from_pretrained` and
``save_pretrained`` build and save heads with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from hybridsd.checkpoint_files import inside, json_object, weight_files
from hybridsd.eagle.config import EagleConfig

OPTIONAL_KEYS = ("embed_tokens.weight",)
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # non-persistent buffers some old checkpoints carry
DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
REQUIRED_KEYS = ("num_attention_heads", "intermediate_size")  # config.json keys with no default
EMBEDDING_TOLERANCE = 0.05  # relative difference above which a shipped embedding is another model's


def resolve(path_or_hub_id: str | Path, revision: str | None = None) -> Path:
    """A local folder holding the checkpoint: ``path_or_hub_id`` itself, or a Hub snapshot of it."""
    p = Path(path_or_hub_id).expanduser()
    if p.is_dir():
        return p
    s = str(path_or_hub_id)
    if p.exists() or s.count("/") != 1 or s.startswith((".", "/", "~")):
        raise FileNotFoundError(f"no checkpoint folder at {s!r} (and it does not look like a Hub id owner/name)")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(s, revision=revision,
                                      allow_patterns=["*.json", "*.safetensors", "*.bin"]))
    except Exception as e:  # network, auth, offline mode, missing repo: all end here
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""  # one line, as checkpoint.resolve's
        raise OSError(f"could not fetch the EAGLE head {s!r} from the Hugging Face Hub "
                      f"({type(e).__name__}: {first[:160]}); download it elsewhere and pass the local folder") from e


def read_state_dict(folder: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint folder (safetensors first, then ``pytorch_model.bin``; sharded or not; every
    file inside the folder: :func:`hybridsd.checkpoint_files.weight_files`)."""
    sd: dict[str, torch.Tensor] = {}
    for file in weight_files(folder):
        sd.update(_read_file(file))
    return sd


def _read_file(file: Path) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise FileNotFoundError(f"no weights file {file}")
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            sd = load_file(str(file), device="cpu")
        else:
            sd = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated, corrupt or unsafe files raise many types; all name the file
        raise ValueError(f"cannot read the weights file {file} ({type(e).__name__}: {e}); is it truncated or "
                         "corrupt?") from e
    if not isinstance(sd, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sd.items()):
        raise ValueError(f"the weights file {file} holds a {type(sd).__name__}, not a state dict (tensor names to "
                         "tensors)")
    return sd


def embedding_difference(a: torch.Tensor, b: torch.Tensor, rows: int = 4096) -> float:
    """Relative difference ``|a - b| / |b|`` of two ``[V, h]`` embeddings over up to ``rows`` evenly spaced
    rows (fp32 on the host): about 0 for copies of one embedding in any dtype, about 1 or more for two models'."""
    step = max(1, a.shape[0] // rows)
    x, y = a[::step].detach().float().cpu(), b[::step].detach().float().cpu()  # host copies of the sampled rows
    return float((x - y).norm() / y.norm().clamp_min(1e-12))


def detect_kind(keys) -> str:
    """``"eagle3"`` for ``midlayer.*``/``d2t`` keys, ``"eagle1"`` for ``layers.0.*`` keys."""
    keys = list(keys)
    if any(k.startswith("midlayer.") or k == "d2t" for k in keys):
        return "eagle3"
    if any(k.startswith("layers.0.") for k in keys):
        return "eagle1"
    raise ValueError(f"not an EAGLE checkpoint: no 'midlayer.*'/'d2t' (EAGLE-3) or 'layers.0.*' (EAGLE-1) keys "
                     f"among {sorted(keys)[:8]}...")


def config_from_json(raw: dict, kind: str, target: nn.Module, state_dict: dict | None = None) -> EagleConfig:
    """The head's config from a checkpoint ``config.json`` dict, with sizes taken from ``target``.

    Hidden size and vocabulary come from the target (they must fit; the weights are
    checked against them); the rest from the checkpoint config.
    """
    V, h = target.get_input_embeddings().weight.shape
    for key, have in (("hidden_size", h), ("vocab_size", V)):
        if key in raw and raw[key] != have:
            raise ValueError(f"{key}: the checkpoint config says {raw[key]}, the target has {have}")
    heads = raw["num_attention_heads"]
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ValueError(f"num_attention_heads must be a positive int, got {heads!r}")
    rs = raw.get("rope_scaling") or raw.get("rope_parameters")
    theta = raw.get("rope_theta") or (rs or {}).get("rope_theta") or 10000.0
    sd = state_dict or {}
    if kind == "eagle3":
        L = target.config.num_hidden_layers
        ids = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        layers = tuple(ids) if ids else (2, L // 2, L - 3)
        if not all(isinstance(i, int) and -(L + 1) <= i <= L for i in layers):  # hidden_states has L + 1
            raise ValueError(f"eagle_aux_hidden_state_layer_ids: the checkpoint config says {list(layers)}, the "
                             f"target's hidden states are indexed 0..{L} (it has {L} layers)")
        vd = raw.get("draft_vocab_size") or (sd["d2t"].shape[0] if "d2t" in sd else V)
    else:
        layers, vd = (-1,), None
    bias = raw.get("bias")
    if bias is not None and not isinstance(bias, bool):
        raise ValueError(f"bias must be true or false, got {bias!r}")
    return EagleConfig(
        kind=kind,
        hidden_size=h,
        intermediate_size=raw["intermediate_size"],
        num_attention_heads=heads,
        num_key_value_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw.get("head_dim") or raw.get("hidden_size", h) // heads,
        vocab_size=V,
        target_layers=layers,
        rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling=rs,
        draft_vocab_size=vd,
        bias=("fc.bias" in sd if bias is None else bias) if kind == "eagle1" else False,
        max_position_embeddings=raw.get("max_position_embeddings", 2048),
    )


def check_state_dict(sd: dict[str, torch.Tensor], expected: dict[str, torch.Size]) -> None:
    """Raise one ``ValueError`` naming every unexpected, wrongly shaped and missing tensor (with its shapes)."""
    problems = []
    for k, t in sd.items():
        if k.endswith(IGNORED_SUFFIXES):
            continue
        if k not in expected:
            problems.append(f"unexpected key {k!r} with shape {list(t.shape)} in the checkpoint")
        elif tuple(t.shape) != tuple(expected[k]):
            problems.append(f"{k!r}: the checkpoint has shape {list(t.shape)}, "
                            f"a head for this target needs {list(expected[k])}")
    for k, shape in expected.items():
        if k not in sd and k not in OPTIONAL_KEYS:
            problems.append(f"missing key {k!r} (shape {list(shape)}) in the checkpoint")
    if problems:
        more = f"; and {len(problems) - 12} more" if len(problems) > 12 else ""
        raise ValueError("; ".join(problems[:12]) + more)


def check_draft_vocab(d2t: torch.Tensor, t2d: torch.Tensor | None, vocab_size: int
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``d2t [Vd]`` as int64 and ``t2d [V]`` as bool, checked: integer offsets mapping the draft ids to
    increasing target ids in ``[0, vocab_size)`` (the public layout), and ``t2d`` marking exactly those ids;
    else ``ValueError`` naming the tensor."""
    if d2t.ndim != 1 or d2t.dtype.is_floating_point or d2t.dtype.is_complex or d2t.dtype == torch.bool:
        raise ValueError(f"'d2t' must be a 1-D integer tensor, got {d2t.dtype} of shape {list(d2t.shape)}")
    d2t = d2t.to(torch.int64)
    ids = torch.arange(d2t.shape[0], device=d2t.device) + d2t  # [Vd] target ids of the draft ids
    if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):  # host check at load time only
        raise ValueError(f"'d2t' maps draft ids outside the target vocabulary [0, {vocab_size})")
    if (ids[1:] <= ids[:-1]).any():
        raise ValueError("'d2t' must map the draft ids to increasing target ids (draft id + d2t)")
    if t2d is None:
        return d2t, None
    if t2d.ndim != 1 or t2d.dtype.is_floating_point or t2d.dtype.is_complex or not ((t2d == 0) | (t2d == 1)).all():
        raise ValueError(f"'t2d' must be a 1-D bool (or 0/1) tensor, got {t2d.dtype} of shape {list(t2d.shape)}")
    t2d = t2d.bool()
    if not torch.equal(t2d.nonzero().flatten().to(ids.device), ids):
        raise ValueError(f"'t2d' marks {int(t2d.sum())} target ids, not the {len(ids)} that 'd2t' maps the draft "
                         "ids to")
    return d2t, t2d


def read_checkpoint(path_or_hub_id: str | Path, target: nn.Module, revision: str | None = None
                    ) -> tuple[Path, EagleConfig, dict[str, torch.Tensor]]:
    """The folder, head config and tensors of the checkpoint at ``path_or_hub_id`` (a folder or Hub id) for the
    HF causal LM ``target``; the kind is detected from the keys. Every error names the file or key: a non-JSON
    ``config.json`` or one without a required key, a weight file or shard index entry outside the folder, a
    truncated weights file, an ``fc.weight`` for another hidden size."""
    folder = resolve(path_or_hub_id, revision)
    _finish_save(folder)  # a save of ours that a kill cut short
    cfg_file = folder / "config.json"
    if not cfg_file.exists():
        raise FileNotFoundError(f"no config.json in {folder}")
    raw = json_object(inside(folder, "config.json"), *REQUIRED_KEYS)
    sd = {k: v for k, v in read_state_dict(folder).items() if not k.endswith(IGNORED_SUFFIXES)}
    kind = detect_kind(sd)
    h = target.get_input_embeddings().weight.shape[1]
    # shapes first, so that a checkpoint for another target fails on a named weight
    fc = sd.get("fc.weight")
    want_in = 2 * h if kind == "eagle1" else 3 * h
    if fc is not None and tuple(fc.shape) != (h, want_in):
        raise ValueError(f"'fc.weight': the checkpoint has shape {list(fc.shape)}, "
                         f"a head for this target (hidden size {h}) needs {[h, want_in]}")
    return folder, config_from_json(raw, kind, target, sd), sd


def check_weights(folder: Path, sd: dict[str, torch.Tensor], expected: dict[str, torch.Size],
                  embedding: torch.Tensor, use_checkpoint_embeddings: bool) -> torch.Tensor | None:
    """Check the tensors ``sd`` read from ``folder`` against a head's ``expected`` shapes and the target's
    ``embedding [V, h]`` (EAGLE-3's ``d2t``/``t2d`` with :func:`check_draft_vocab`, stored back as int64/bool);
    pop and return the checkpoint's own ``embed_tokens.weight`` when ``use_checkpoint_embeddings`` (else None).
    Without that flag a shipped embedding must equal the target's
    (up to dtype rounding), or the head was made for another model: ``ValueError``."""
    V, h = embedding.shape
    check_state_dict(sd, dict(expected) | {"embed_tokens.weight": torch.Size((V, h))})
    if "d2t" in sd:  # stored as int64 / bool whatever the file's dtypes (a float d2t would round in bf16)
        sd["d2t"], t2d = check_draft_vocab(sd["d2t"], sd.get("t2d"), V)
        if t2d is not None:
            sd["t2d"] = t2d
    own = sd.pop("embed_tokens.weight", None)
    if own is not None and not use_checkpoint_embeddings and not embedding.is_meta:
        diff = embedding_difference(own, embedding)
        if diff > EMBEDDING_TOLERANCE:
            raise ValueError(f"'embed_tokens.weight' in {folder} is not the target's input embedding (relative "
                             f"difference {diff:.3f}): the head was trained for another model; pass "
                             "use_checkpoint_embeddings=True to draft with the checkpoint's copy anyway")
    return own if use_checkpoint_embeddings else None


def config_json(c: EagleConfig, dtype: torch.dtype) -> dict:
    """The Llama-style ``config.json`` dict of a head with config ``c`` and weights in ``dtype`` (as the public
    checkpoints write it)."""
    out = {
        "architectures": ["LlamaForCausalLM" if c.kind == "eagle1" else "LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "num_hidden_layers": 1,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling,
        "max_position_embeddings": c.max_position_embeddings,
        "vocab_size": c.vocab_size,
        "tie_word_embeddings": False,
        "torch_dtype": DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch.")),
    }
    if c.kind == "eagle1":
        out["bias"] = c.bias
    else:
        out["draft_vocab_size"] = c.draft_vocab_size
        out["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(c.target_layers)}
    return out


SAVED = ("model.safetensors", "config.json")  # what write_checkpoint writes, in the order it renames them


def write_checkpoint(path: str | Path, config: dict, state_dict: dict[str, torch.Tensor]) -> None:
    """Write ``model.safetensors`` (the tensors in their dtypes) and ``config.json`` into the folder ``path`` as one
    change: each to a temporary file in the folder (synced), then a marker file saying both are complete, then
    both renamed over the old ones. A kill leaves the old pair, or the new one once the next write or load has
    done the renames (:func:`_finish_save`). The files and marker of a save carry its own random token."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _finish_save(path, writer=True)
    sd = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}  # host copies
    token = os.urandom(6).hex()
    weights, cfg = (_temporary(path, name, token) for name in SAVED)
    save_file(sd, str(weights), metadata={"format": "pt"})
    cfg.write_text(json.dumps(config, indent=2) + "\n")
    for f in (weights, cfg):
        _sync(f)
    (path / f".save.{token}.pending").touch()
    _finish_save(path)


def _finish_save(folder: Path, writer: bool = False) -> None:
    """Complete every :func:`write_checkpoint` into ``folder`` that a kill cut short after its marker: rename that
    save's files in place, then remove its marker. A call that found a marker only touches that save's files
    (its token), so a late one beside a writer leaves the writer's next save alone. ``writer`` (a writer owns the
    folder): also delete the temporary files of saves killed before their marker. A load from a folder it cannot
    finish a save in (read-only) is an OSError naming it, not a mixed pair."""
    for marker in sorted(folder.glob(".save.*.pending")):
        token = marker.name.split(".")[2]
        for name in SAVED:
            try:
                os.replace(_temporary(folder, name, token), folder / name)
            except FileNotFoundError:  # renamed already
                pass
            except OSError as e:
                raise OSError(f"{folder}: a save of this EAGLE head was cut short ({marker.name}), and finishing it "
                              f"failed ({e.strerror or type(e).__name__}); load it once from a writable copy") from e
        marker.unlink(missing_ok=True)
    if writer:
        for name in SAVED:
            for f in folder.glob(f".{name}.*.tmp"):
                f.unlink(missing_ok=True)


def _temporary(folder: Path, name: str, token: str) -> Path:
    return folder / f".{name}.{token}.tmp"


def _sync(file: Path) -> None:
    with open(file, "rb+") as f:
        os.fsync(f.fileno())
