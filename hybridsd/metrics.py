"""Exact speculative-decoding counters: acceptance lengths, per-position acceptance, drafter shares."""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepRecord:
    """One target forward pass after prefill.

    ``proposed``: the drafters whose nodes were verified in this pass (empty when
    the step had no draft). ``drafted``: the depth of the deepest draft node below the
    last accepted one (a chain's length; for a tree, the longest path through the
    accepted path, or the tree's depth when nothing was accepted). ``accepted``: draft
    tokens accepted and kept (the accepted path's depth). ``emitted``: tokens appended to
    the output (``accepted`` plus the target's own token, unless EOS among the accepted
    tokens ended the sequence first). ``source``: the drafter of the last accepted node,
    i.e. the branch the accepted path came from (``None`` when none was accepted).
    ``tree_tokens``: draft nodes verified in the pass (the tree's size). Counts are ints (not bools) >= 0;
    ``proposed`` is a tuple of drafter names.
    """

    proposed: tuple[str, ...]
    drafted: int
    accepted: int
    emitted: int
    source: str | None
    tree_tokens: int = 0  # draft nodes fed to the target in this pass (all branches)

    def __post_init__(self) -> None:
        if not isinstance(self.proposed, tuple) or not all(isinstance(p, str) for p in self.proposed):
            raise TypeError(f"proposed must be a tuple of drafter names, got {self.proposed!r}")
        for name in ("drafted", "accepted", "emitted", "tree_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {v!r}")
            if v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")
        if not 0 <= self.accepted <= self.drafted:
            raise ValueError(f"accepted={self.accepted} outside [0, drafted={self.drafted}]")
        if self.tree_tokens and self.drafted > self.tree_tokens:
            raise ValueError(f"drafted={self.drafted} exceeds the tree's {self.tree_tokens} nodes")
        if not max(self.accepted, 1) <= self.emitted <= self.accepted + 1:
            raise ValueError(f"emitted={self.emitted} must be accepted or accepted + 1, and >= 1")
        if self.drafted and not self.proposed:
            raise ValueError(f"drafted={self.drafted} but no drafter proposed")
        if (self.source is not None) != (self.accepted > 0) or (self.accepted and self.source not in self.proposed):
            raise ValueError(f"source={self.source!r} must name a proposed drafter {self.proposed} exactly when "
                             f"tokens were accepted (accepted={self.accepted})")


@dataclass
class SpecStats:
    """Counters of one generation; every field is exact, not estimated.

    Identities (checked by :meth:`check`):
    ``num_tokens = prefill_tokens + sum(step.emitted)``,
    ``num_target_steps = num_sequences + len(trace)`` (one prefill per sequence),
    ``num_accepted = sum(accepted_per_position) = sum(step.accepted)``,
    ``num_draft_tokens = sum(step.drafted)``, ``num_drafts = #steps with drafted > 0``,
    ``num_tree_tokens = sum(step.tree_tokens)``, ``sum(steps_won_by) = #steps with accepted > 0``.
    """

    num_tokens: int = 0
    num_target_steps: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    steps_by_drafter: Counter = field(default_factory=Counter)
    accepted_by_drafter: Counter = field(default_factory=Counter)
    steps_won_by: Counter = field(default_factory=Counter)  # steps whose accepted path came from each drafter
    num_tree_tokens: int = 0  # draft nodes verified, all steps
    trace: list[StepRecord] = field(default_factory=list)
    prefill_tokens: int = 0
    num_sequences: int = 0  # prefill passes (one per generated sequence)

    def __repr__(self) -> str:
        return (f"SpecStats(num_tokens={self.num_tokens}, num_target_steps={self.num_target_steps}, "
                f"seq_normalized_al={self.seq_normalized_al:.3f}, precision_al={self.precision_al:.3f}, "
                f"num_drafts={self.num_drafts}, num_accepted={self.num_accepted}, trace=<{len(self.trace)} steps>)")

    def record_prefill(self, emitted: int) -> None:
        """Count the prefill pass and the token(s) it produced (0 or 1)."""
        self.num_sequences += 1
        self.num_target_steps += 1
        self.prefill_tokens += emitted
        self.num_tokens += emitted

    def record_step(self, step: StepRecord) -> None:
        """Count one verification pass (a :class:`StepRecord`; anything else raises ``TypeError``, counting nothing)."""
        if not isinstance(step, StepRecord):
            raise TypeError(f"SpecStats.record_step takes a StepRecord, got {type(step).__name__}")
        self.trace.append(step)
        self.num_target_steps += 1
        self.num_tokens += step.emitted
        self.num_accepted += step.accepted
        self.num_draft_tokens += step.drafted
        key = "+".join(step.proposed) if step.proposed else "none"
        self.steps_by_drafter[key] += 1
        if step.drafted > 0:
            self.num_drafts += 1
        self.num_tree_tokens += step.tree_tokens
        if step.accepted > 0:
            self.accepted_by_drafter[step.source] += step.accepted
            self.steps_won_by[step.source] += 1
        if len(self.accepted_per_position) < step.drafted:
            self.accepted_per_position.extend([0] * (step.drafted - len(self.accepted_per_position)))
        for i in range(step.accepted):
            self.accepted_per_position[i] += 1

    @property
    def seq_normalized_al(self) -> float:
        """Generated tokens per target forward pass, prefill included."""
        return self.num_tokens / self.num_target_steps if self.num_target_steps else math.nan

    @property
    def precision_al(self) -> float:
        """vLLM's ``1 + accepted / drafts`` over steps that had a draft (NaN when none had)."""
        return 1.0 + self.num_accepted / self.num_drafts if self.num_drafts else math.nan

    @property
    def acceptance_rates(self) -> list[float]:
        """Per-position acceptance ``r_i = accepted_per_position[i] / num_drafts``."""
        if not self.num_drafts:
            return []
        return [a / self.num_drafts for a in self.accepted_per_position]

    @property
    def draft_share(self) -> float:
        """Share of verification passes that had a draft."""
        return self.num_drafts / len(self.trace) if self.trace else math.nan

    @classmethod
    def combine(cls, stats: Iterable[SpecStats]) -> SpecStats:
        """Counters of several generations together (corpus-level ALs)."""
        out = cls()
        for s in stats:
            out.num_sequences += s.num_sequences
            out.num_target_steps += s.num_sequences
            out.prefill_tokens += s.prefill_tokens
            out.num_tokens += s.prefill_tokens
            for step in s.trace:
                out.record_step(step)
        return out

    def check(self) -> None:
        """Raise AssertionError when an identity between the counters fails."""
        t = self.trace
        assert self.num_target_steps == self.num_sequences + len(t), "target steps"
        assert self.num_tokens == self.prefill_tokens + sum(s.emitted for s in t), "tokens"
        assert self.num_accepted == sum(s.accepted for s in t) == sum(self.accepted_per_position), "accepted"
        assert self.num_draft_tokens == sum(s.drafted for s in t), "draft tokens"
        assert self.num_drafts == sum(1 for s in t if s.drafted > 0), "drafts"
        assert sum(self.steps_by_drafter.values()) == len(t), "steps by drafter"
        assert sum(self.accepted_by_drafter.values()) == self.num_accepted, "accepted by drafter"
        assert sum(self.steps_won_by.values()) == sum(1 for s in t if s.accepted > 0), "steps won"
        assert self.num_tree_tokens == sum(s.tree_tokens for s in t), "tree tokens"
        app = self.accepted_per_position
        assert all(a >= b for a, b in zip(app, app[1:])), "per-position acceptance must not increase"
        assert not app or app[0] <= self.num_drafts, "first position accepted more than drafts"

    def summary(self) -> dict:
        """Plain-dict view for results rows and printing."""
        return {
            "num_tokens": self.num_tokens,
            "num_target_steps": self.num_target_steps,
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted": self.num_accepted,
            "seq_normalized_al": self.seq_normalized_al,
            "precision_al": self.precision_al,
            "accepted_per_position": list(self.accepted_per_position),
            "acceptance_rates": self.acceptance_rates,
            "steps_by_drafter": dict(self.steps_by_drafter),
            "accepted_by_drafter": dict(self.accepted_by_drafter),
            "steps_won_by": dict(self.steps_won_by),
            "num_tree_tokens": self.num_tree_tokens,
        }
