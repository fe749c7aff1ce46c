"""Trace simulation of speculative decoding without a model.

A reference output is replayed as if the target had generated it greedily after the prompt: the prefill
emits its first token; each later step drafts (n-gram: the real :func:`ngram_propose` on prompt +
output so far; EAGLE: a random number of accepted tokens drawn from measured per-position acceptance
rates), accepts draft tokens up to the first one that differs from the reference, and emits the
accepted tokens plus the target's own (clipped at the end of the reference, which stands in for EOS).

Assumptions: EAGLE's acceptance is independent of the text and of earlier steps, its accepted tokens
are the reference's, and the target's output does not depend on how it was drafted (greedy decoding).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from hybridsd.drafters.base import check_count
from hybridsd.drafters.ngram import ngram_propose
from hybridsd.metrics import SpecStats, StepRecord

POLICIES = ("ngram", "eagle", "prefer-ngram", "tree")


@dataclass(frozen=True)
class SimConfig:
    """What to simulate.

    ``policy``: ``"ngram"`` (n-gram alone), ``"eagle"`` (EAGLE alone), ``"prefer-ngram"`` (the n-gram
    draft when there is one, else EAGLE's: vLLM PR #24344) or ``"tree"`` (both verified together; the
    branch with more accepted tokens is kept, the n-gram one on ties). ``k_ngram``/``k_eagle``: draft
    lengths; ``min_n``/``max_n``: n-gram lengths to match. ``eagle_rates``: EAGLE's per-position
    acceptance rates ``r_i`` (non-increasing, in [0, 1], at least ``k_eagle`` of them; the first
    ``k_eagle`` are used). ``eagle_rates_novel`` (same form, or None): EAGLE's rates at the steps where
    n-gram drafting, run or not, would have no draft or a wrong first token (new text); given, ``eagle_rates``
    holds at the other steps (copied text). ``seed``: seeds the EAGLE draws.
    """

    policy: str = "prefer-ngram"
    k_ngram: int = 5
    k_eagle: int = 3
    min_n: int = 2
    max_n: int = 5
    eagle_rates: tuple[float, ...] = (0.65, 0.42, 0.25)
    eagle_rates_novel: tuple[float, ...] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        for name in ("k_ngram", "k_eagle", "min_n", "max_n"):
            check_count(name, getattr(self, name))
        check_count("seed", self.seed, least=0)
        if not 1 <= self.min_n <= self.max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={self.min_n}, max_n={self.max_n}")
        for name in ("eagle_rates", "eagle_rates_novel"):
            given = getattr(self, name)
            if given is None:
                continue
            if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
                raise TypeError(f"{name} must be a sequence of rates (numbers), got {given!r}")
            given = tuple(given)
            if any(isinstance(r, (bool, np.bool_)) or not isinstance(r, numbers.Real) for r in given):
                raise TypeError(f"{name} must be a sequence of rates (numbers), got {given!r}")
            rates = tuple(float(r) for r in given)
            object.__setattr__(self, name, rates)
            if self.uses_eagle:
                if len(rates) < self.k_eagle:
                    raise ValueError(f"{name} has {len(rates)} rates, k_eagle={self.k_eagle} needs as many")
                r = rates[: self.k_eagle]
                if any(not 0 <= x <= 1 for x in r) or any(b > a for a, b in zip(r, r[1:])):
                    raise ValueError(f"{name} must lie in [0, 1] and not increase, got {r}")

    @property
    def uses_ngram(self) -> bool:
        """Whether the policy drafts with n-gram."""
        return self.policy != "eagle"

    @property
    def uses_eagle(self) -> bool:
        """Whether the policy drafts with EAGLE."""
        return self.policy != "ngram"

    def eagle_accept_probs(self, novel: bool = False) -> np.ndarray:
        """``P(EAGLE accepts exactly j tokens)`` for ``j = 0..k_eagle``: ``r_{j-1} - r_j`` with ``r_{-1} = 1``
        and ``r_k = 0`` (equivalently, token ``i`` is accepted with probability ``r_i / r_{i-1}`` given
        the ones before it were); of ``eagle_rates_novel`` with ``novel`` (where given)."""
        rates = self.eagle_rates_novel if novel and self.eagle_rates_novel is not None else self.eagle_rates
        r = np.concatenate([[1.0], rates[: self.k_eagle], [0.0]])
        return np.clip(r[:-1] - r[1:], 0.0, None)


def _matched(draft: np.ndarray, ref: np.ndarray, pos: int) -> int:
    """How many leading tokens of ``draft`` equal the reference from ``pos`` on."""
    want = ref[pos : pos + draft.size]
    eq = draft[: want.size] == want
    return int(eq.size if eq.all() else eq.argmin())


def _ids(name: str, ids) -> np.ndarray:
    """Token ids as a 1-D int64 array; ``[1, T]`` (one sequence of a batch) is taken as ``[T]``."""
    a = np.asarray(ids)
    if a.ndim == 2 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D or [1, T] (one sequence), got shape {a.shape}")
    if a.size and a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids, got dtype {a.dtype}")
    return a.astype(np.int64)


def _check_config(config) -> None:
    """``TypeError`` unless ``config`` is a :class:`SimConfig`."""
    if not isinstance(config, SimConfig):
        raise TypeError(f"config must be a SimConfig, got {type(config).__name__}")


def simulate(prompt_ids: Sequence[int] | np.ndarray, reference_ids: Sequence[int] | np.ndarray,
             config: SimConfig, rng: np.random.Generator | None = None) -> SpecStats:
    """Counters of one simulated generation of ``reference_ids`` after ``prompt_ids``.

    ``rng`` (a ``np.random.Generator``) draws EAGLE's acceptances (default ``np.random.default_rng(config.seed)``).
    """
    _check_config(config)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be None or a numpy Generator (np.random.default_rng(seed)), got {rng!r}")
    prompt, ref = _ids("prompt_ids", prompt_ids), _ids("reference_ids", reference_ids)
    rng = np.random.default_rng(config.seed) if rng is None else rng
    full = np.concatenate([prompt, ref])
    n_prompt, n = prompt.size, ref.size
    stats = SpecStats()
    stats.record_prefill(1 if n else 0)
    if n == 0:
        return stats
    # One draw per possible step (at most n - 1 steps), made up front: the same seed gives the same draws
    # (the draws on new text after them, so that a config without novel rates draws as before).
    eagle = (rng.choice(config.k_eagle + 1, size=n, p=config.eagle_accept_probs())
             if config.uses_eagle else None)
    by_state = config.uses_eagle and config.eagle_rates_novel is not None
    eagle_novel = rng.choice(config.k_eagle + 1, size=n, p=config.eagle_accept_probs(novel=True)) if by_state else None
    pos, step = 1, 0
    while pos < n:
        left = n - pos
        budget = left - 1  # as the engine: drafts leave room for the target's own token, none at the last step
        k_e = min(config.k_eagle, budget)
        draft = (ngram_propose(full[: n_prompt + pos], config.min_n, config.max_n, min(config.k_ngram, budget))
                 if (config.uses_ngram or by_state) and budget > 0 else np.empty(0, dtype=np.int64))
        a_n = _matched(draft, ref, pos) if draft.size else 0
        novel = a_n == 0  # no n-gram draft, or its first token wrong
        if not config.uses_ngram:  # the n-gram draft only told the state
            draft = np.empty(0, dtype=np.int64)
        k_n = draft.size
        use_eagle = budget > 0 and (config.policy == "eagle" or config.policy == "tree"
                                    or (config.uses_eagle and not k_n))
        a_e = min(int((eagle_novel if by_state and novel else eagle)[step]), k_e) if use_eagle else 0
        if config.policy == "tree" and k_n:
            # as the engine's tree: the branches' common accepted tokens (the reference's) are one set of nodes,
            # so a tie ends on a shared node with both branches below it
            proposed: tuple[str, ...] = ("ngram", "eagle")
            if a_n >= a_e and a_n > 0:
                src, drafted, acc = "ngram", max(k_n, k_e) if a_n == a_e else k_n, a_n
            elif a_e > a_n:
                src, drafted, acc = "eagle", k_e, a_e
            else:
                src, drafted, acc = None, max(k_n, k_e), 0
            fed = k_n + k_e - min(a_n, a_e)
        elif use_eagle:
            proposed, drafted, acc, fed = ("eagle",), k_e, a_e, k_e
            src = "eagle" if acc else None
        elif k_n:
            proposed, drafted, acc, fed = ("ngram",), k_n, a_n, k_n
            src = "ngram" if acc else None
        else:
            proposed, drafted, acc, src, fed = (), 0, 0, None, 0
        emitted = acc + 1  # acc <= budget = left - 1
        stats.record_step(StepRecord(proposed=proposed, drafted=drafted, accepted=acc, emitted=emitted,
                                     source=src, tree_tokens=fed))
        pos += emitted
        step += 1
    return stats


def iter_simulate(pairs: Iterable[tuple[Sequence[int], Sequence[int]]], config: SimConfig) -> Iterator[SpecStats]:
    """:func:`simulate` over ``(prompt_ids, reference_ids)`` pairs, lazily; pair ``i`` draws from
    ``np.random.default_rng((config.seed, i))``, so results do not depend on batching."""
    _check_config(config)  # now, not at the first pair
    return (simulate(prompt, ref, config, np.random.default_rng((config.seed, i)))
            for i, (prompt, ref) in enumerate(pairs))


def simulate_batch(pairs: Iterable[tuple[Sequence[int], Sequence[int]]], config: SimConfig) -> list[SpecStats]:
    """:func:`iter_simulate` as a list; combine with ``SpecStats.combine`` for corpus-level ALs."""
    return list(iter_simulate(pairs, config))
