"""The distribution a sampled token is drawn from: the logits warped as HF's ``generate`` warps them.

:func:`sampling_params` reads ``do_sample``/``temperature``/``top_k``/``top_p`` as HF users write them;
:func:`warp` turns logits into those probabilities: divided by the temperature, then top-k, then top-p
(transformers' own ``TopKLogitsWarper`` and ``TopPLogitsWarper``), in HF's order.
Speculative sampling verifies drafts against these warped probabilities, so its output is distributed as
plain sampling with the same settings.
"""

from __future__ import annotations

import math
import numbers
import warnings

import torch

SAMPLING_EPS = 1e-5  # temperatures below this decode greedily, as in vLLM (whose sampler names it _SAMPLING_EPS)


def sampling_params(do_sample, temperature, top_k, top_p) -> tuple[float, int | None, float | None]:
    """``(temperature, top_k, top_p)`` for the verifier and drafters: temperature 0 means greedy (top-k and top-p
    then None); top_k / top_p are None where they keep every token.

    Sampling is on when ``do_sample`` is True, or when it is None and ``temperature > 0`` (``temperature``
    None: 1.0 when sampling; HF's ``generate`` would decode that greedily unless its generation config samples).
    ``do_sample=False`` decodes greedily whatever the temperature, and so does a temperature below
    :data:`SAMPLING_EPS` (1e-5), greedy decoding's limit, as vLLM treats it (dividing logits by a temperature near
    1e-38 would overflow float32 mid-run). Errors name the argument: ``do_sample=True``
    with ``temperature=0`` (ValueError), a ``top_k`` below 0 or a ``top_p`` outside (0, 1] (ValueError), a value
    of the wrong type (TypeError). A ``top_k`` or ``top_p`` given for greedy decoding is ignored with a warning,
    as HF does.
    """
    if do_sample is not None and not isinstance(do_sample, bool):
        raise TypeError(f"do_sample must be True, False or None, got {do_sample!r}")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
            raise TypeError(f"temperature must be a number, got {temperature!r}")
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral)):
        raise TypeError(f"top_k must be an integer, got {top_k!r}")
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 keeps every token), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, numbers.Real)):
        raise TypeError(f"top_p must be a number, got {top_p!r}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1] (1 keeps every token), got {top_p!r}")
    if do_sample and temperature == 0:
        raise ValueError("temperature=0 with do_sample=True: give a temperature > 0 to sample, or do_sample=False "
                         "for greedy decoding")
    sample = do_sample if do_sample is not None else temperature is not None and temperature > 0
    if sample and temperature is not None and temperature < SAMPLING_EPS:
        return 0.0, None, None  # sampling's limit as the temperature falls; no top-k/top-p warning: nothing misread
    if not sample:
        if top_k or (top_p is not None and top_p < 1):
            warnings.warn("top_k and top_p apply only when sampling (do_sample=True or temperature > 0); decoding "
                          "greedily", stacklevel=4)  # the caller of generate (under its inference_mode wrapper)
        return 0.0, None, None
    return (1.0 if temperature is None else float(temperature), int(top_k) if top_k else None,
            float(top_p) if top_p is not None and top_p < 1 else None)


def warp(logits: torch.Tensor, temperature: float, top_k: int | None = None,
         top_p: float | None = None) -> torch.Tensor:
    """Sampling probabilities ``[..., V]`` (in the logits' dtype) of ``logits`` ``[..., V]`` at ``temperature``
    > 0, restricted to the ``top_k`` most likely tokens and then to the smallest set whose probability reaches
    ``top_p`` (None: no restriction; at least one token always stays), as HF's logits warpers compute them."""
    x = logits / temperature
    if top_k is not None or top_p is not None:
        from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

        shape = x.shape
        x = x.reshape(-1, shape[-1])  # [rows, V]: the warpers take a batch of rows
        if top_k is not None:
            x = TopKLogitsWarper(top_k)(None, x)
        if top_p is not None:
            x = TopPLogitsWarper(top_p)(None, x)
        x = x.view(shape)
    return torch.softmax(x, dim=-1)
