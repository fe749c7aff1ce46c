"""Draft trees: nodes continuing the committed sequence, each with a parent, verified in one target pass.

A tree of ``n`` nodes lies after the root (the newest committed token, not yet fed to the target):
node ``i`` continues its parent ``parents[i]`` (``-1`` = the root) and parents come first
(``parents[i] < i``). Siblings are candidates for the same position, tried in index order by the
verifier. A node is *deterministic* (its token chosen without randomness given the context, e.g. an
n-gram copy or a top-k child) or *sampled* from ``probs[i]``, a distribution over the target's
vocabulary; the verifier treats a deterministic node as a one-hot proposal, which keeps
rejection sampling lossless for both kinds.

A chain (:class:`~hybridsd.drafters.base.Draft`) is a tree whose node ``i`` has parent ``i - 1``;
:meth:`DraftTree.join` lays several chains and trees side by side under the root and merges
deterministic siblings that carry the same token, so branches sharing a prefix share its nodes.
Sampled nodes are never merged: they are independent draws, and merging two would change the
proposal the verifier must account for.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from hybridsd.drafters.base import Draft


@dataclass(frozen=True)
class DraftTree:
    """Draft nodes under the root; see the module docstring."""

    tokens: torch.Tensor  # [n] int64, on the target's device
    parents: tuple[int, ...]  # [n] parent node index, -1 for the root
    sources: tuple[str, ...]  # [n] name of the drafter that proposed each node
    probs: torch.Tensor | None = None  # [n, V] proposal of each sampled node (other rows unused), or None
    sampled: tuple[bool, ...] = ()  # [n] whether node i was drawn from probs[i]; () = all when probs is given

    def __post_init__(self) -> None:
        n = len(self.parents)
        if not all(type(p) is int for p in self.parents):  # the drafters' own trees skip this (a step's hot path)
            if any(isinstance(p, bool) or not isinstance(p, numbers.Integral) for p in self.parents):
                raise TypeError(f"DraftTree.parents must be node indices (ints), got {self.parents}")
            object.__setattr__(self, "parents", tuple(int(p) for p in self.parents))
        elif type(self.parents) is not tuple:
            object.__setattr__(self, "parents", tuple(self.parents))
        if not isinstance(self.tokens, torch.Tensor):
            raise TypeError(f"DraftTree.tokens must be a tensor of token ids, got {type(self.tokens).__name__}")
        if self.tokens.ndim != 1 or self.tokens.shape[0] != n:
            raise ValueError(f"DraftTree.tokens must be 1-D with one entry per parent, got shape "
                             f"{tuple(self.tokens.shape)} for {n} parents")
        if any(not -1 <= p < i for i, p in enumerate(self.parents)):
            raise ValueError(f"DraftTree.parents must satisfy -1 <= parents[i] < i, got {self.parents}")
        if len(self.sources) != n:
            raise ValueError(f"DraftTree.sources must name one drafter per node, got {len(self.sources)} for {n}")
        if not self.sampled:
            object.__setattr__(self, "sampled", (self.probs is not None,) * n)
        if len(self.sampled) != n:
            raise ValueError(f"DraftTree.sampled must have one flag per node, got {len(self.sampled)} for {n}")
        if any(self.sampled) and (self.probs is None or self.probs.shape[0] != n):
            raise ValueError("DraftTree.probs must have one row per node when any node is sampled")

    def __len__(self) -> int:
        return len(self.parents)

    @classmethod
    def chain(cls, draft: Draft) -> DraftTree:
        """The chain ``draft`` as a tree (node i's parent is node i - 1)."""
        k = len(draft)
        return cls(draft.tokens, tuple(range(-1, k - 1)), (draft.source,) * k, draft.probs)

    @classmethod
    def join(cls, parts: Sequence[Draft | DraftTree] | Draft | DraftTree | None) -> DraftTree | None:
        """All ``parts`` under one root, deterministic siblings with equal tokens merged (None if no node).

        Nodes keep their part's order (the first part's siblings are tried first); a merged node keeps the
        source of its first occurrence. Merging reads the tokens on the host; a single part is returned as is.
        """
        if parts is None:
            return None
        if isinstance(parts, (Draft, DraftTree)):
            parts = [parts]
        trees = [p if isinstance(p, DraftTree) else cls.chain(p) for p in parts if len(p) > 0]
        if not trees:
            return None
        if len(trees) == 1:
            return trees[0]
        tokens, parents, sources, sampled, rows = [], [], [], [], []
        seen: dict[tuple[int, int], int] = {}  # (parent, token) -> node, deterministic nodes only
        for t, tree in enumerate(trees):
            index = []  # this part's node -> joined node
            for i, (tok, par) in enumerate(zip(tree.tokens.tolist(), tree.parents)):  # host sync: the tokens
                parent = -1 if par < 0 else index[par]
                key = (parent, tok)
                if not tree.sampled[i] and key in seen:
                    index.append(seen[key])
                    continue
                index.append(len(tokens))
                if not tree.sampled[i]:
                    seen[key] = len(tokens)
                tokens.append(tok)
                parents.append(parent)
                sources.append(tree.sources[i])
                sampled.append(tree.sampled[i])
                rows.append((t, i))
        probs = None
        if any(sampled):
            ref = next(tr.probs for tr in trees if tr.probs is not None)
            zero = ref.new_zeros(ref.shape[-1])
            probs = torch.stack([trees[t].probs[i] if trees[t].probs is not None else zero for t, i in rows])
        device = trees[0].tokens.device
        return cls(torch.tensor(tokens, dtype=torch.long, device=device), tuple(parents), tuple(sources), probs,
                   tuple(sampled))

    @cached_property
    def _structure(self) -> tuple[np.ndarray, np.ndarray]:
        if self.is_chain():  # the common case (every chain drafter), without structure()'s pass per level
            n = len(self)
            return np.arange(1, n + 1, dtype=np.int64), np.tri(n, dtype=bool)
        return structure(self.parents)

    @property
    def depths(self) -> np.ndarray:
        """``[n]`` depth of each node (1 for the root's children)."""
        return self._structure[0]

    @property
    def ancestors(self) -> np.ndarray:
        """``[n, n]`` bool: ``[i, j]`` when node j is node i or one of its ancestors."""
        return self._structure[1]

    def is_chain(self) -> bool:
        """Whether the nodes form one chain in order (node i's parent is node i - 1)."""
        return self.parents == tuple(range(-1, len(self) - 1))

    def path(self, node: int) -> list[int]:
        """Nodes from the root's child down to ``node`` (empty for the root, ``-1``)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def reach(self, node: int) -> int:
        """Depth of the deepest node in ``node``'s subtree (the whole tree's for the root, ``-1``)."""
        if node < 0:
            return int(self.depths.max())
        return int(self.depths[self.ancestors[:, node]].max())

    def clip(self, depth: int) -> DraftTree | None:
        """The nodes at depth ``<= depth`` (None when none are)."""
        keep = np.flatnonzero(self.depths <= depth)
        if len(keep) == len(self):
            return self
        if len(keep) == 0:
            return None
        new = {int(o): i for i, o in enumerate(keep)}
        index = torch.as_tensor(keep, device=self.tokens.device)
        return DraftTree(self.tokens.index_select(0, index), tuple(-1 if self.parents[o] < 0 else new[self.parents[o]]
                                                                    for o in keep),
                         tuple(self.sources[o] for o in keep),
                         None if self.probs is None else self.probs.index_select(0, index),
                         tuple(self.sampled[o] for o in keep))

    def layout(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions ``[1 + n]`` and visibility ``[1 + n, 1 + n]`` of the root (at ``start``) and the nodes."""
        return _layout(self.depths, self.ancestors, start)


def structure(parents: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Depths ``[n]`` (1 for the root's children) and ancestors ``[n, n]`` (bool, ``[i, j]``: node j is node i or
    an ancestor of it) of nodes with ``parents`` (``-1`` = the root, parents first); one pass per tree level."""
    par = np.asarray(parents, dtype=np.int64).reshape(-1)
    n = len(par)
    depths = np.ones(n, dtype=np.int64)
    ancestors = np.eye(n, dtype=bool)
    rows, up = np.arange(n), par.copy()  # up[i]: the ancestor of node i reached so far (-1: past the root)
    while (live := up >= 0).any():
        ancestors[rows[live], up[live]] = True
        depths += live
        up = np.where(live, par[np.maximum(up, 0)], -1)
    return depths, ancestors


def _layout(depths: np.ndarray, ancestors: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`layout` from the nodes' :func:`structure`."""
    n = len(depths)
    positions = np.concatenate([[start], start + depths]).astype(np.int64)  # [1 + n]
    visible = np.zeros((1 + n, 1 + n), dtype=bool)
    visible[:, 0] = True
    visible[1:, 1:] = ancestors
    return positions, visible


def layout(parents: Sequence[int], start: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``[1 + n]`` and visibility ``[1 + n, 1 + n]`` (each row: the root, the node's ancestors and
    itself) of a root at position ``start`` followed by nodes with ``parents`` (``-1`` = the root)."""
    return _layout(*structure(parents), start)


def leaf_count(parents: Sequence[int]) -> int:
    """Leaves of a tree given each node's parent index (-1: a child of the root): its root-to-leaf paths."""
    return len(set(range(len(parents))) - set(parents))


def paths_to_parents(paths: Sequence[Sequence[int]]) -> tuple[list[tuple[int, ...]], list[int], list[int]]:
    """A static tree in vLLM's ``speculative_token_tree`` format (each node a tuple of child ranks from the
    root, e.g. ``[(0,), (1,), (0, 0)]``): the paths in breadth-first order, each node's parent and rank.

    Every prefix of a path must be a path of the tree; ranks are >= 0 and unique per node.
    """
    form = "a list of paths, each a tuple of child ranks such as [(0,), (1,), (0, 0)]"
    if isinstance(paths, (str, bytes)) or not isinstance(paths, Iterable):
        raise TypeError(f"paths must be {form}, got {paths!r}")
    paths = list(paths)
    if not paths:
        raise ValueError("a static tree needs at least one path")
    norm = []
    for p in paths:
        if isinstance(p, (str, bytes)) or not isinstance(p, Iterable):
            raise TypeError(f"paths must be {form}; it holds {p!r}")
        p = tuple(p)
        if not p or any(not isinstance(r, (int, np.integer)) or isinstance(r, bool) or r < 0 for r in p):
            raise ValueError(f"each tree path must be a non-empty tuple of ranks >= 0, got {p!r}")
        norm.append(tuple(int(r) for r in p))
    if len(set(norm)) != len(norm):
        raise ValueError("the tree repeats a path")
    order = sorted(norm, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(order)}
    parents = []
    for p in order:
        if len(p) > 1 and p[:-1] not in index:
            raise ValueError(f"tree path {p} has no parent path {p[:-1]}")
        parents.append(-1 if len(p) == 1 else index[p[:-1]])
    return order, parents, [p[-1] for p in order]
