"""The hybrid ngram-eagle drafter: n-gram drafts when the context repeats, EAGLE otherwise."""

from __future__ import annotations

import torch

from hybridsd.drafters.base import Draft, Drafter, ProposeRequest
from hybridsd.drafters.tree import DraftTree

POLICIES = ("prefer-ngram", "tree")


class HybridDrafter(Drafter):
    """Combine a copy drafter (``ngram``) with a model drafter (``eagle``).

    ``prefer-ngram``: each step, the n-gram draft when there is one, else EAGLE's;
    with ``skip_eagle_on_hit`` (default) EAGLE does no drafting work on n-gram hits,
    while still observing every committed position, so its state stays exact.
    ``tree``: both proposals are verified in one target pass as one draft tree (n-gram
    first, merged where they share a prefix): the n-gram chain becomes one more branch
    of a tree drafter's tree (e.g. :class:`~hybridsd.drafters.eagle_tree.EagleTreeDrafter`).
    Each keeps its own size.
    """

    def __init__(self, ngram: Drafter, eagle: Drafter, policy: str = "prefer-ngram",
                 skip_eagle_on_hit: bool = True) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown hybrid policy {policy!r}; choose one of {POLICIES}")
        for role, child in (("ngram", ngram), ("eagle", eagle)):
            if not isinstance(child, Drafter):
                raise TypeError(f"HybridDrafter's {role} must be a hybridsd Drafter, got {type(child).__name__}")
        if ngram is eagle:  # one object would observe every position twice
            raise ValueError("HybridDrafter's ngram and eagle must be two drafter objects, got the same one twice")
        self.ngram, self.eagle = ngram, eagle
        self.policy = policy
        self.skip_eagle_on_hit = skip_eagle_on_hit
        self.name = f"{ngram.name}-{eagle.name}"
        self.hidden_layers = tuple(dict.fromkeys(ngram.hidden_layers + eagle.hidden_layers))
        # child -> positions of its layers in self.hidden_layers (None: all of them, in order)
        self._columns: dict[int, tuple[int, ...] | None] = {}
        for child in (ngram, eagle):
            cols = tuple(self.hidden_layers.index(i) for i in child.hidden_layers)
            self._columns[id(child)] = None if cols == tuple(range(len(self.hidden_layers))) and cols else cols

    @property
    def max_tokens(self) -> int:
        if self.policy == "tree":
            return self.ngram.max_tokens + self.eagle.max_tokens
        return max(self.ngram.max_tokens, self.eagle.max_tokens)

    @property
    def max_branches(self) -> int:
        if self.policy == "tree":
            return self.ngram.max_branches + self.eagle.max_branches
        return max(self.ngram.max_branches, self.eagle.max_branches)

    def check_target(self, model: torch.nn.Module) -> None:
        self.ngram.check_target(model)
        self.eagle.check_target(model)

    def reset(self, prompt_len: int) -> None:
        self.ngram.reset(prompt_len)
        self.eagle.reset(prompt_len)

    def observe(self, hidden: torch.Tensor | None, next_tokens: torch.Tensor) -> None:
        for child in (self.ngram, self.eagle):
            child.observe(self._slice(child, hidden), next_tokens)

    def _slice(self, child: Drafter, hidden: torch.Tensor | None) -> torch.Tensor | None:
        """The child's own layers out of ``hidden`` (``[m, len(self.hidden_layers) * H]``)."""
        cols = self._columns[id(child)]
        if hidden is None or cols == ():
            return None
        if cols is None:  # all layers, in the same order
            return hidden
        h = hidden.shape[-1] // len(self.hidden_layers)
        return torch.cat([hidden[:, c * h : (c + 1) * h] for c in cols], dim=-1)  # [m, len(cols)*H]

    def propose(self, request: ProposeRequest) -> list[Draft | DraftTree]:
        ngram = _parts(self.ngram.propose(request))
        if self.policy == "prefer-ngram" and ngram:
            if not self.skip_eagle_on_hit:
                self.eagle.propose(request)  # drafted and thrown away, as without the skip
            return ngram
        eagle = _parts(self.eagle.propose(request))
        return ngram + eagle if self.policy == "tree" else eagle


def _parts(proposal: list[Draft] | DraftTree) -> list[Draft | DraftTree]:
    """A child's proposal as a list of non-empty chains or trees."""
    parts = [proposal] if isinstance(proposal, DraftTree) else proposal
    return [d for d in parts if len(d) > 0]
