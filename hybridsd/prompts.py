"""Prompt token ids with exactly one BOS, and a check for the doubled-BOS pitfall.

Applying a chat template that starts with the BOS token and then tokenizing with
``add_special_tokens=True`` gives prompts that begin with two BOS tokens (it cost EAGLE-3 about 0.6 AL
on MT-Bench in vLLM's benchmarks). :func:`build_prompt_ids` applies the template once and tokenizes
without special tokens; :func:`check_bos` finds a doubled or missing BOS.

The tokenizer is duck-typed: ``apply_chat_template``, ``encode(text, add_special_tokens=...)`` returning
ids, and ``bos_token`` / ``bos_token_id`` / ``chat_template`` attributes, as HF tokenizers have.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping, Sequence

BOS_MODES = ("single", "doubled")


def _messages(text_or_messages, system: str | None) -> list[dict]:
    if isinstance(text_or_messages, str):
        messages = [{"role": "user", "content": text_or_messages}]
    else:
        messages = [dict(m) for m in text_or_messages]
        if not messages or any("role" not in m or "content" not in m for m in messages):
            raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    if system is not None:
        if messages[0]["role"] == "system":
            raise ValueError("system given twice: as an argument and as the first message")
        messages.insert(0, {"role": "system", "content": system})
    return messages


def _ids(encoded) -> list[int]:
    """Token ids from an ``encode`` result (a list, or an object with ``.ids``)."""
    return [int(t) for t in getattr(encoded, "ids", encoded)]


def _prompt_ids(ids) -> list[int]:
    """The token ids of one prompt: a list of ints, a 1-D tensor or array, or one sequence of a batch (``[1, T]``, as
    ``apply_chat_template(..., return_tensors="pt")`` gives), or an encoding holding them as ``input_ids``;
    ``TypeError`` for anything else."""
    if isinstance(ids, Mapping) and "input_ids" in ids:  # apply_chat_template's BatchEncoding (return_dict=True)
        ids = ids["input_ids"]
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"ids must be the token ids of one prompt, got {type(ids).__name__}")
    shape = getattr(ids, "shape", None)
    seq = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if isinstance(seq, list) and len(seq) == 1 and isinstance(seq[0], (list, tuple)):
        seq = list(seq[0])  # [1, T]
    if not isinstance(seq, list) or any(isinstance(t, bool) or not isinstance(t, numbers.Integral) for t in seq):
        what = f"shape {tuple(shape)}, dtype {getattr(ids, 'dtype', None)}" if shape is not None else str(ids)[:60]
        raise TypeError(f"ids must be integer token ids of one prompt (a list, a 1-D tensor or a [1, T] tensor), "
                        f"got {type(ids).__name__} {what}")
    return [int(t) for t in seq]


def build_prompt_ids(tokenizer, text_or_messages: str | Sequence[dict], *, chat: bool = True,
                     system: str | None = None, bos_mode: str = "single") -> list[int]:
    """Token ids of a prompt.

    ``chat=True``: the chat template (with the generation prompt) applied once to the user text (or
    the messages, after an optional ``system`` message), tokenized with ``add_special_tokens=False``,
    so the prompt holds exactly the BOS tokens the template writes. ``bos_mode="doubled"`` instead
    tokenizes the templated text with ``add_special_tokens=True``, reproducing the doubled-BOS bug for
    experiments. ``chat=False`` (``--skip-chat-template``): the plain text tokenized with the tokenizer's own
    special-token default (its BOS, where it adds one; vLLM's script encodes with ``add_special_tokens=False``).
    """
    if bos_mode not in BOS_MODES:
        raise ValueError(f"bos_mode must be one of {BOS_MODES}, got {bos_mode!r}")
    if not chat:
        if not isinstance(text_or_messages, str):
            raise ValueError("chat=False takes a plain text, not messages")
        if system is not None or bos_mode != "single":
            raise ValueError("system and bos_mode='doubled' need chat=True")
        return _ids(tokenizer.encode(text_or_messages))
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat template; use chat=False for a raw prompt")
    text = tokenizer.apply_chat_template(_messages(text_or_messages, system), tokenize=False,
                                         add_generation_prompt=True)
    return _ids(tokenizer.encode(text, add_special_tokens=bos_mode == "doubled"))


def _expects_bos(tokenizer) -> bool:
    """Whether prompts should start with BOS: the chat template writes it, or plain encoding adds it."""
    template = getattr(tokenizer, "chat_template", None)
    bos = getattr(tokenizer, "bos_token", None)
    if isinstance(template, str) and ("bos_token" in template or (bos and bos in template)):
        return True
    try:
        return _ids(tokenizer.encode("a"))[:1] == [tokenizer.bos_token_id]
    except Exception:  # a tokenizer that cannot encode plainly gives no evidence
        return False


def check_bos(ids: Sequence[int], tokenizer, on_error: str = "warn", expect_bos: bool | None = None) -> str | None:
    """Find a doubled BOS (two at the start) or a missing one in prompt ``ids`` (a list of ints, a 1-D tensor, or
    a ``[1, T]`` tensor or its encoding, as ``apply_chat_template(..., return_tensors="pt")`` returns).

    A BOS is expected when ``expect_bos`` says so, or (``None``) when the tokenizer's chat template
    writes it or its plain encoding adds it. Returns the problem (``None`` when there is none) after
    ``on_error``: ``"warn"`` (``warnings.warn``), ``"raise"`` (``ValueError``) or ``"ignore"``.
    Tokenizers without a BOS token pass.
    """
    if on_error not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_error must be 'warn', 'raise' or 'ignore', got {on_error!r}")
    ids = _prompt_ids(ids)
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return None
    problem = None
    if ids[:2] == [bos, bos]:
        problem = (f"prompt starts with a doubled BOS ({bos} {bos}): the chat template already wrote it and "
                   "tokenizing added another; tokenize templated text with add_special_tokens=False")
    elif ids[:1] != [bos] and (expect_bos if expect_bos is not None else _expects_bos(tokenizer)):
        problem = (f"prompt does not start with BOS ({bos}) although the tokenizer's template or encoding "
                   "uses it")
    if problem is not None:
        if on_error == "raise":
            raise ValueError(problem)
        if on_error == "warn":
            warnings.warn(problem, stacklevel=2)
    return problem
