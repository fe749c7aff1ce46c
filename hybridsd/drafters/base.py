"""The drafter protocol: drafters propose, the verifier decides.

A drafter sees the sequence through three calls made by `hybridsd.generate`:

1. ``reset(prompt_len)`` before a new sequence;
2. ``observe(hidden, next_tokens)`` each time target positions are committed
   (after prefill, then after every verification step), with the target's hidden
   states at those positions and the token that followed each one;
3. ``propose(request)`` before each target step, returning zero, one or more
   draft chains that all continue from the last committed token, or a
   :class:`~hybridsd.drafters.tree.DraftTree` (chains are trees of one branch;
   several are joined into one tree, merged where they share a prefix).

Every drafter gets the target's hidden states from the start, even if it ignores
them (``hidden_layers == ()`` means it needs none and receives ``None``).
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from hybridsd.drafters.tree import DraftTree


def check_count(name: str, value, least: int = 1) -> None:
    """``TypeError`` unless ``value`` is an int (numpy's too, not a bool), ``ValueError`` unless it is >= ``least``;
    each naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value}")


def token_array(name: str, ids) -> np.ndarray:
    """``ids`` (a sequence of ints, or an integer numpy array or tensor) as a 1-D int64 array; ``TypeError`` naming
    ``name`` for ids that are not integers (floats would be truncated, bools are not ids), ``ValueError`` for ids
    not 1-D or beyond int64."""
    a = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if a.size and a.dtype.kind not in "iu":  # bools and floats; an empty list reads as float64
        raise TypeError(f"{name} must hold integer token ids, got {a.dtype} values")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: token id {int(a.max())} is beyond int64")
    return np.ascontiguousarray(a, dtype=np.int64)


@dataclass(frozen=True)
class Draft:
    """One chain of draft tokens that continues the committed sequence.

    ``probs`` is the distribution each token was drawn from, over the target's
    vocabulary (``[k, V]``); ``None`` means the draft is deterministic (one-hot),
    as for n-gram or greedy EAGLE drafting.
    """

    tokens: torch.Tensor  # [k] int64, on the target's device
    source: str  # name of the drafter that proposed it
    probs: torch.Tensor | None = None  # [k, V] float, or None for one-hot

    def __post_init__(self) -> None:
        if self.tokens.ndim != 1:
            raise ValueError(f"Draft.tokens must be 1-D, got shape {tuple(self.tokens.shape)}")
        if self.probs is not None and self.probs.shape[0] != self.tokens.shape[0]:
            raise ValueError("Draft.probs must have one row per draft token")

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


@dataclass(frozen=True)
class ProposeRequest:
    """What a drafter may look at when proposing.

    ``tokens`` holds the whole committed sequence (prompt and generated tokens,
    the last one not yet fed to the target) on the host. ``budget`` is the most
    draft tokens the step can accept (deeper nodes are cut off). ``temperature`` (0: greedy), ``top_k`` and
    ``top_p`` are the target's sampling settings; a drafter that samples may draw from its distribution
    warped the same way (:func:`hybridsd.sampling.warp`), which the verifier's rejection sampling rewards.
    """

    tokens: np.ndarray  # [T] int64, host
    budget: int  # the most draft tokens on any root-to-leaf path
    device: torch.device = torch.device("cpu")  # where Draft.tokens must live
    temperature: float = 0.0
    generator: torch.Generator | None = None
    top_k: int | None = None
    top_p: float | None = None


class Drafter(ABC):
    """Base class of every drafter; see the module docstring for the call order."""

    #: name recorded in stats for the drafts it proposes
    name: str = "drafter"
    #: indices into HF ``hidden_states`` (0 = embeddings, -1 = final-normed output)
    #: that ``observe`` receives, concatenated along the last dimension
    hidden_layers: tuple[int, ...] = ()

    @property
    @abstractmethod
    def max_tokens(self) -> int:
        """Most nodes of one proposal, all branches together (sizes the KV cache headroom)."""

    @property
    def max_branches(self) -> int:
        """Most root-to-leaf paths of one proposal (1: a chain drafter); exact mode verifies a bounded number."""
        return 1

    def check_target(self, model: torch.nn.Module) -> None:
        """Raise ``ValueError`` if this drafter cannot draft for ``model`` (e.g. a head made for another
        vocabulary); ``generate`` calls it before any work."""

    def reset(self, prompt_len: int) -> None:
        """Forget the previous sequence."""

    def observe(self, hidden: torch.Tensor | None, next_tokens: torch.Tensor) -> None:
        """Take newly committed target positions.

        ``hidden``: ``[m, len(hidden_layers) * H]`` target states at the m committed
        positions (``None`` when ``hidden_layers`` is empty); ``next_tokens``: ``[m]``
        int64, the token that follows each position (the last one is the newest token).
        """

    @abstractmethod
    def propose(self, request: ProposeRequest) -> list[Draft] | DraftTree:
        """Draft chains (or one tree) continuing ``request.tokens``; empty list or empty drafts mean none. Token ids
        are integer tensors on ``request.device`` (``generate`` raises TypeError or ValueError naming the drafter
        otherwise) in ``[0, vocab)`` (checked for host ids, i.e. on a CPU model; ids on CUDA are not checked, and one
        out of range fails in the target's embedding)."""
