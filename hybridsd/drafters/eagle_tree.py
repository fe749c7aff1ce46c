"""EAGLE draft trees: EAGLE-2's dynamic tree, or a static tree given as paths of child ranks.

Dynamic (Li et al. 2024, EAGLE-2): the root's ``top_k`` likeliest tokens form the first frontier; at
each further depth the head runs the whole frontier in one forward (a tree mask over its own KV:
each node sees the committed pairs and its ancestors), every frontier node proposes its ``top_k``
children, and the ``top_k`` children with the highest joint draft probability (product along the
path) become the next frontier. After ``depth`` levels the ``nodes`` candidates with the highest joint
probability are kept, a tie going to the candidate drafted first; a child never scores above its parent, so
they form an ancestor-closed tree.

Static: the tree of vLLM's ``speculative_token_tree`` (``[(0,), (1,), (0, 0), ...]``: the path of
child ranks from the root); a node of rank r is its parent's (r+1)-th likeliest token under the head.

Nodes are the head's top-ranked tokens, not samples, so they are deterministic for the verifier at
every temperature.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from hybridsd.drafters.base import ProposeRequest, check_count
from hybridsd.drafters.eagle import EagleDrafter, _GraphedDraft, check_head
from hybridsd.drafters.tree import DraftTree, leaf_count, paths_to_parents
from hybridsd.eagle.model import EagleHead


class EagleTreeDrafter(EagleDrafter):
    """Proposes a :class:`~hybridsd.drafters.tree.DraftTree` with an :class:`EagleHead`.

    ``depth``: levels of the tree; ``top_k``: children per expanded node and frontier width;
    ``nodes``: nodes kept for verification (EAGLE-2's total tokens; defaults 6, 10, 60). ``paths``
    (vLLM's ``speculative_token_tree`` format) makes the tree static instead. Catch-up of committed
    pairs is the chain drafter's (one head forward); a dynamic tree costs ``depth - 1`` more head
    forwards and one host read, a static one ``depth - 1`` forwards and no read.

    With ``cuda_graphs`` (a head on CUDA, a dynamic tree of full depth), the catch-up of ``m`` queued pairs
    and the tree's construction are one CUDA graph per ``m`` (``m <= MAX_GRAPHED_PAIRS``) and KV bucket.
    ``compile`` (True or a ``torch.compile`` mode without CUDA graphs) compiles a dynamic tree's level step
    (the head on the frontier and its log-probabilities; static shapes, one compilation per KV bucket).
    """

    def __init__(self, head: EagleHead, depth: int = 6, top_k: int = 10, nodes: int = 60, *,
                 paths: Sequence[Sequence[int]] | None = None, cuda_graphs: bool = True,
                 compile: bool | str = False) -> None:
        check_head(type(self).__name__, head)
        for name, v in (("depth", depth), ("top_k", top_k), ("nodes", nodes)):
            check_count(name, v)
        depth, top_k, nodes = int(depth), int(top_k), int(nodes)
        if not isinstance(compile, (bool, str)) or compile in ("reduce-overhead", "max-autotune"):
            raise ValueError(f"compile must be a bool or a torch.compile mode without CUDA graphs, got {compile!r}")
        self._level = self._head_level
        if compile:
            mode = compile if isinstance(compile, str) else None
            self._level = torch.compile(self._head_level, mode=mode, dynamic=False)
        self.paths = paths
        if paths is not None:
            order, self._parents, self._ranks = paths_to_parents(paths)
            depth, nodes = max(len(p) for p in order), len(order)
            self._static_plan()
        elif nodes > top_k + (depth - 1) * top_k * top_k:
            raise ValueError(f"nodes={nodes} exceeds the {top_k + (depth - 1) * top_k * top_k} candidates of "
                             f"depth={depth}, top_k={top_k}")
        if paths is None and top_k > head.config.out_vocab_size:
            raise ValueError(f"top_k={top_k} exceeds the head's vocabulary ({head.config.out_vocab_size})")
        if paths is not None and max(self._ranks) >= head.config.out_vocab_size:
            raise ValueError(f"paths use child rank {max(self._ranks)}, but the head's vocabulary has only "
                             f"{head.config.out_vocab_size} tokens")
        super().__init__(head, k=depth, cuda_graphs=cuda_graphs)
        self.depth, self.top_k, self.nodes = depth, top_k, nodes

    @property
    def max_tokens(self) -> int:
        return self.nodes

    @property
    def max_branches(self) -> int:
        if self.paths is not None:  # the static tree's leaves
            return leaf_count(self._parents)
        return self.nodes  # a dynamic tree's shape varies: each kept node may be a leaf

    def _slots(self, depth: int) -> int:
        """Speculative head-cache slots a tree of ``depth`` levels writes."""
        if self.paths is not None:
            return sum(len(level) for level in self._expand[: depth - 1])
        return self.top_k * (depth - 1)

    def reset(self, prompt_len: int) -> None:
        super().reset(prompt_len)
        self._ensure_capacity(prompt_len + self._slots(self.depth) + 1)

    @torch.no_grad()
    def propose(self, request: ProposeRequest) -> list | DraftTree:
        depth = min(self.depth, request.budget)
        if depth < 1:
            return []
        if (self._pending and self.cuda_graphs and self.paths is None and depth == self.depth
                and self.head.fc.weight.is_cuda):
            m = sum(int(t.shape[0]) for _, t in self._pending)
            if m <= self.MAX_GRAPHED_PAIRS:
                return self._assemble(self._graphed_tree(m), request.device)
        if self._pending:
            self._catch_up(self._slots(depth))
        if self._last is None:
            return []  # nothing observed yet
        p = self.committed
        self._ensure_capacity(p + self._slots(depth))
        if self.paths is not None:
            return self._static(depth, p, request.device)
        return self._dynamic(depth, p, request.device)

    def _step(self, feats, tokens, position, slots, mask, level=None):
        """The head on one level's nodes (``[E]`` tokens, all at ``position``, an int or a ``[1]`` tensor):
        outputs ``[1, E, h]`` and log-probabilities ``[E, Vout]``. A depth-d node sits at position p + d - 1.
        ``level``: the function that runs it (default :meth:`_head_level`)."""
        positions = torch.zeros_like(slots) + position  # [E]
        return (level or self._head_level)(feats, tokens, positions, slots, mask)

    def _head_level(self, feats, tokens, positions, slots, mask):
        """:meth:`_step` at ``positions`` ``[E]`` (what ``compile`` compiles)."""
        out = self.head(feats, tokens[None], positions, self.cache, slots=slots, attn_mask=mask,
                        kv_len=mask.shape[-1])  # [1, E, h]
        return out, torch.log_softmax(self.head.logits(out)[0].float(), dim=-1)

    def _dynamic(self, depth: int, p: int, device: torch.device) -> DraftTree:
        start = torch.tensor([p], device=self._last.device)  # [1]
        kv_len = self.cache.span(p + self.top_k * (depth - 1))
        return self._assemble(self._build(self._last, start, depth, kv_len), device)

    def _build(self, last: torch.Tensor, p: torch.Tensor, depth: int, kv_len: int) -> torch.Tensor:
        """An EAGLE-2 tree from the head output ``last`` (``[1, 1, h]``) with the first speculative slot at ``p``
        (``[1]``, a device tensor: no host value, so it can be captured in a CUDA graph).

        Returns ``[3N]``: the kept candidates' pool indices (ascending, so parents come first), their
        parents' pool indices (-1 = root) and their target token ids.
        """
        head, K = self.head, self.top_k
        dev = last.device
        scores, idx = torch.log_softmax(head.logits(last)[0, -1].float(), -1).topk(K)  # [K], [K]
        tokens = head.to_target(idx)  # [K] frontier tokens
        all_scores, all_tokens, all_parents = [scores], [tokens], [torch.full((K,), -1, device=dev)]
        frontier = torch.arange(K, device=dev)  # [K] pool index of each frontier node
        feats = last.expand(1, K, -1)  # [1, K, h] the output each frontier node continues
        mask = (torch.arange(kv_len, device=dev) < p).expand(K, -1).clone()  # [K, kv_len] committed slots
        rows = torch.arange(K, device=dev)
        size = K
        for d in range(1, depth):
            slots = p + K * (d - 1) + rows  # [K]
            mask.scatter_(1, slots[:, None], True)  # each node sees itself besides its ancestors
            out, logp = self._step(feats, tokens, p + d - 1, slots, mask, self._level)
            s, ix = logp.topk(K, dim=-1)  # [K, K] each frontier node's K children
            cand = (scores[:, None] + s).flatten()  # [K*K] joint log-probability of each child
            cand_tokens = head.to_target(ix.flatten())  # [K*K]
            all_scores.append(cand)
            all_tokens.append(cand_tokens)
            all_parents.append(frontier.repeat_interleave(K))
            best = cand.topk(K).indices  # [K] the next frontier
            up = best // K  # [K] its parents' rows in this level
            scores, tokens, frontier = cand[best], cand_tokens[best], size + best
            feats, mask = out[:, up], mask[up]
            size += K * K
        pool = torch.cat(all_scores)  # [M] pool indices: parents before children
        # the best N; a stable sort ranks a tie by pool index, so a child tying its parent comes after it
        best = pool.sort(descending=True, stable=True).indices[: self.nodes]  # [N]
        keep = best.sort().values  # [N] parents before children
        return torch.cat([keep, torch.cat(all_parents)[keep], torch.cat(all_tokens)[keep]])

    def _assemble(self, packed: torch.Tensor, device: torch.device) -> DraftTree:
        """The :class:`DraftTree` of :meth:`_build`'s output, read on the host."""
        packed = packed.tolist()  # host sync: the tree's shape
        n = len(packed) // 3
        index: dict[int, int] = {}  # pool index -> node
        parents, toks = [], []
        for i in range(n):
            par = packed[n + i]
            if par >= 0 and par not in index:
                continue  # only a NaN score (a broken head) ranks a child above its parent
            index[packed[i]] = len(parents)
            parents.append(-1 if par < 0 else index[par])
            toks.append(packed[2 * n + i])
        return DraftTree(torch.tensor(toks, dtype=torch.long).to(device, non_blocking=True), tuple(parents),
                         (self.name,) * len(parents))

    def _graphed_tree(self, m: int) -> torch.Tensor:
        """Catch up on the ``m`` queued pairs and build a dynamic tree by one graph replay: :meth:`_build`'s output."""
        return self._replay(_GraphedTree, m, self._slots(self.depth))  # read by the caller before any other replay

    def _static_plan(self) -> None:
        """Per level: the nodes that have children (expanded), their slots and their children's ranks."""
        parents = self._parents
        n = len(parents)
        has_children = sorted({q for q in parents if q >= 0})
        slot = {v: j for j, v in enumerate(has_children)}  # expanded node -> speculative slot offset
        depth = np.zeros(n, dtype=np.int64)
        for i, q in enumerate(parents):
            depth[i] = 1 if q < 0 else depth[q] + 1
        anc = np.zeros((len(has_children), len(has_children)), dtype=bool)  # [E, E] over expanded nodes
        for v in has_children:
            if parents[v] >= 0:
                anc[slot[v]] = anc[slot[parents[v]]]
            anc[slot[v], slot[v]] = True
        self._anc = torch.as_tensor(anc)
        self._depths = depth
        self._expand = [[v for v in has_children if depth[v] == d] for d in range(1, int(depth.max()))]

    def _static(self, depth: int, p: int, device: torch.device) -> DraftTree:
        head = self.head
        dev = self._last.device
        parents, ranks = self._parents, self._ranks
        keep = [i for i in range(len(parents)) if self._depths[i] <= depth]
        toks = torch.zeros(len(parents), dtype=torch.long, device=dev)  # [n]
        e_total = self._slots(depth)
        anc = self._anc[:e_total, :e_total].to(dev)
        base = 0
        logp = torch.log_softmax(head.logits(self._last)[0].float(), -1)  # [1, Vout] the root
        outs = {-1: self._last[:, 0]}  # node -> head output [1, h] its children continue
        level = [-1]
        for d in range(1, depth + 1):
            kids = [i for i in keep if self._depths[i] == d]
            r = max(ranks[i] for i in kids) + 1
            ix = logp.topk(r, dim=-1).indices  # [E, r]
            row = {v: j for j, v in enumerate(level)}
            sel = torch.tensor([row[parents[i]] * r + ranks[i] for i in kids], device=dev)
            toks[kids] = head.to_target(ix.flatten()[sel])
            if d == depth or d > len(self._expand):
                break
            level = self._expand[d - 1]
            E = len(level)
            slots = torch.arange(p + base, p + base + E, device=dev)  # [E]
            mask = torch.zeros(E, p + e_total, dtype=torch.bool, device=dev)
            mask[:, :p] = True
            mask[:, p:] = anc[base:base + E]
            feats = torch.stack([outs[parents[v]] for v in level], dim=1)  # [1, E, h]
            out, logp = self._step(feats, toks[level], p + d - 1, slots, mask)
            outs.update({v: out[:, j] for j, v in enumerate(level)})
            base += E
        new = {o: i for i, o in enumerate(keep)}
        return DraftTree(toks[keep].to(device), tuple(-1 if parents[o] < 0 else new[parents[o]] for o in keep),
                         (self.name,) * len(keep))


class _GraphedTree(_GraphedDraft):
    """Catch-up of ``m`` pairs and an EAGLE-2 tree as one CUDA graph (the chain drafter's buffers and loading)."""

    def __init__(self, drafter: EagleTreeDrafter, m: int, kv_len: int) -> None:
        super().__init__(drafter, m, kv_len)
        head, cache = drafter.head, drafter.cache
        arange = torch.arange(m, device=self.tokens.device)  # [m]

        def step():
            out = head(self.hidden[None], self.tokens[None], self.start + arange, cache, kv_len=kv_len)  # [1, m, h]
            last = out[:, -1:]  # [1, 1, h]
            return last, drafter._build(last, self.start + m, drafter.depth, kv_len)  # [1, 1, h], [3N]

        self.step = step
