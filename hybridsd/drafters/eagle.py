"""EAGLE-1 / EAGLE-3 chain drafting with a lazily caught-up head KV cache."""

from __future__ import annotations

import torch

from hybridsd.cuda_graph import capture
from hybridsd.drafters.base import Draft, Drafter, ProposeRequest, check_count
from hybridsd.eagle.model import EagleHead
from hybridsd.kv_cache import StaticKVCache
from hybridsd.sampling import warp


def check_head(drafter: str, head) -> None:
    """``TypeError`` naming ``drafter`` unless ``head`` is an :class:`EagleHead`."""
    if not isinstance(head, EagleHead):
        raise TypeError(f"{drafter} takes an EagleHead, got {type(head).__name__}; load one from a folder or Hub id "
                        "with EagleHead.from_pretrained(path, target=model)")


class EagleDrafter(Drafter):
    """Proposes one chain of up to ``k`` tokens with an :class:`EagleHead`.

    ``observe`` only queues the committed pairs (target state ``f_i``, next token
    ``t_{i+1}``); the next ``propose`` runs them through the head in one forward
    (committing their keys/values at slots = positions), then drafts autoregressively,
    feeding back the head's own outputs and writing speculative slots that the next
    catch-up overwrites. Steps where the caller does not ask for an EAGLE draft cost
    nothing. Observed tensors are read at the next ``propose``, so callers must not
    overwrite them in between.

    With ``cuda_graphs`` (a head on CUDA, greedy drafting of ``k`` tokens), the catch-up
    of ``m`` queued pairs and the whole chain are one CUDA graph per ``m``
    (``m <= MAX_GRAPHED_PAIRS``) and KV bucket: a proposal costs one graph launch.
    """

    MAX_GRAPHED_PAIRS = 64

    def __init__(self, head: EagleHead, k: int = 3, *, cuda_graphs: bool = True) -> None:
        check_head(type(self).__name__, head)
        check_count("k", k)
        self.head = head
        self.k = k
        self.cuda_graphs = cuda_graphs
        self._graphs: dict[tuple[int, int], _GraphedDraft] = {}  # by (caught-up pairs, slots attended)
        self.name = head.config.kind  # "eagle1" or "eagle3", in stats as everywhere
        self.hidden_layers = head.config.target_layers
        self.cache: StaticKVCache | None = None
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # ([m, F], [m]) queued pairs
        self._last: torch.Tensor | None = None  # [1, 1, h] head output at the newest committed pair

    @property
    def max_tokens(self) -> int:
        return self.k

    @property
    def committed(self) -> int:
        """Pairs whose keys/values sit in the head's cache (slots ``[0, committed)``)."""
        return self.cache.length if self.cache is not None else 0

    def check_target(self, model: torch.nn.Module) -> None:
        """The head must draft over ``model``'s vocabulary and embedding and read its hidden size and layers."""
        from hybridsd.eagle.loader import EMBEDDING_TOLERANCE, embedding_difference

        self.head.check_fits(model)
        emb = model.get_input_embeddings().weight
        borrowed = self.head._target[0].weight
        if self.head.embed_tokens is None and borrowed is not emb and not (borrowed.is_meta or emb.is_meta):
            diff = embedding_difference(borrowed, emb)
            if diff > EMBEDDING_TOLERANCE:
                raise ValueError(f"the EAGLE head was built on another model's embedding (relative difference "
                                 f"{diff:.3f}); load it for this target: EagleHead.from_pretrained(path, target=model)")

    def reset(self, prompt_len: int) -> None:
        self._pending = []
        self._last = None
        self._ensure_capacity(prompt_len + self.k + 1)
        self.cache.rewind(0)

    def observe(self, hidden: torch.Tensor | None, next_tokens: torch.Tensor) -> None:
        if hidden is None:
            raise ValueError("EagleDrafter needs the target's hidden states")
        F = self.head.config.feature_size
        if hidden.ndim != 2 or hidden.shape[1] != F or hidden.shape[0] != next_tokens.shape[0]:
            raise ValueError(f"observe expects hidden [m, {F}] and next_tokens [m], got "
                             f"{tuple(hidden.shape)} and {tuple(next_tokens.shape)}")
        if next_tokens.shape[0]:
            self._pending.append((hidden, next_tokens))

    @torch.no_grad()
    def propose(self, request: ProposeRequest) -> list[Draft]:
        n = min(self.k, request.budget)
        if n < 1:
            return []
        head = self.head
        if self._pending and self.cuda_graphs and n == self.k and request.temperature == 0 and head.fc.weight.is_cuda:
            m = sum(int(t.shape[0]) for _, t in self._pending)
            if m <= self.MAX_GRAPHED_PAIRS:
                return [Draft(tokens=self._graphed(m).to(request.device), source=self.name)]
        if self._pending:
            self._catch_up(n)
        if self._last is None:
            return []  # nothing observed yet
        p = self.committed  # position of the first speculative pair
        self._ensure_capacity(p + n)
        dev = self._last.device
        positions = torch.arange(p, p + n, device=dev)  # [n]
        feat = self._last  # [1, 1, h]
        tokens, rows = [], []
        for j in range(n):
            logits = head.logits(feat)[0, -1].float()  # [Vout]
            if request.temperature > 0:
                probs = warp(logits, request.temperature, request.top_k, request.top_p)  # [Vout]
                idx = torch.multinomial(probs, 1, generator=request.generator)  # [1]
                rows.append(head.target_probs(probs))  # [V]
            else:
                idx = logits.argmax(-1, keepdim=True)  # [1]
            tok = head.to_target(idx)  # [1] target id
            tokens.append(tok)
            if j + 1 < n:
                # attention over slots [0, p + n); the mask hides those past the position
                feat = head(feat, tok.view(1, 1), positions[j:j + 1], self.cache, kv_len=p + n)  # [1, 1, h]
        out = torch.cat(tokens).to(request.device)  # [n] int64
        probs = torch.stack(rows).to(request.device) if rows else None  # [n, V]
        return [Draft(tokens=out, source=self.name, probs=probs)]

    def _catch_up(self, n: int) -> None:
        """Run all queued pairs through the head in one forward and commit them."""
        head = self.head
        hidden = torch.cat([h for h, _ in self._pending])  # [m, F]
        toks = torch.cat([t for _, t in self._pending])  # [m]
        self._pending = []
        dev = head.fc.weight.device
        p, m = self.committed, hidden.shape[0]
        self._ensure_capacity(p + m + n)
        positions = torch.arange(p, p + m, device=dev)  # [m]
        out = head(hidden.to(dev)[None], toks.to(dev)[None], positions, self.cache, kv_len=p + m)  # [1, m, h]
        self.cache.rewind(p + m)
        self._last = out[:, -1:]  # [1, 1, h]

    def _graphed(self, m: int) -> torch.Tensor:
        """Catch up on the ``m`` queued pairs and draft ``k`` tokens greedily by one graph replay: ``[k]`` ids."""
        return self._replay(_GraphedDraft, m, self.k).clone()  # the graph's output buffer is reused

    def _replay(self, make, m: int, slots: int) -> torch.Tensor:
        """Catch up on the ``m`` queued pairs and draft by one replay of the graph ``make(self, m, kv_len)``
        captured for this (m, KV bucket), using ``slots`` draft slots past them: the graph's output buffer."""
        p = self.committed
        self._ensure_capacity(p + m + slots)
        kv_len = self.cache.span(p + m + slots)  # a bucket: the same graph serves many steps
        g = self._graphs.get((m, kv_len))
        if g is None:
            g = self._graphs[(m, kv_len)] = make(self, m, kv_len)
        g.load(self._pending, p)
        self._pending = []
        last, out = g(next((o.graph for o in self._graphs.values() if o.graph is not None), None))
        self.cache.rewind(p + m)
        self._last = last  # [1, 1, h] valid until this graph's next replay, which first sets a new _last
        return out

    def _ensure_capacity(self, need: int) -> None:
        """Allocate the head cache, or grow it (doubling, committed slots kept) to hold ``need`` slots."""
        old = self.cache
        w = self.head.fc.weight
        if old is not None and old.capacity >= need and old.keys[0].device == w.device and old.keys[0].dtype == w.dtype:
            return
        cap = max(2048, need) if old is None else max(2 * old.capacity, need)
        cap = -(-cap // 256) * 256
        new = self.head.alloc_cache(cap)
        if old is not None:
            n = old.length
            for layer in range(old.num_layers):
                new.keys[layer][:, :, :n] = old.keys[layer][:, :, :n]
                new.values[layer][:, :, :n] = old.values[layer][:, :, :n]
            new.rewind(n)
        self.cache = new
        self._graphs.clear()  # they captured the old cache's tensors


class _GraphedDraft:
    """Catch-up of ``m`` pairs and a greedy chain of ``k`` tokens as one CUDA graph over static buffers."""

    def __init__(self, drafter: EagleDrafter, m: int, kv_len: int) -> None:
        head, cache, k = drafter.head, drafter.cache, drafter.k
        w = head.fc.weight
        self.hidden = torch.zeros(m, head.config.feature_size, dtype=w.dtype, device=w.device)  # [m, F]
        self.tokens = torch.zeros(m, dtype=torch.long, device=w.device)  # [m]
        self.start = torch.zeros(1, dtype=torch.long, device=w.device)  # [1] slot of the first pair
        self.host_start = torch.zeros(1, dtype=torch.long).pin_memory()
        arange = torch.arange(m, device=w.device)  # [m]

        def step():
            out = head(self.hidden[None], self.tokens[None], self.start + arange, cache, kv_len=kv_len)  # [1, m, h]
            feat = last = out[:, -1:]  # [1, 1, h]
            drafted = []
            for j in range(k):
                tok = head.to_target(head.logits(feat)[0, -1].argmax(-1, keepdim=True))  # [1]
                drafted.append(tok)
                if j + 1 < k:
                    feat = head(feat, tok.view(1, 1), self.start + (m + j), cache, kv_len=kv_len)  # [1, 1, h]
            return last, torch.cat(drafted)  # [1, 1, h], [k]

        self.step = step
        self.graph: torch.cuda.CUDAGraph | None = None

    def load(self, pending: list[tuple[torch.Tensor, torch.Tensor]], start: int) -> None:
        """Copy the queued pairs and the start slot into the static buffers (no host sync)."""
        o = 0
        for hidden, tokens in pending:
            n = tokens.shape[0]
            self.hidden[o:o + n].copy_(hidden)
            self.tokens[o:o + n].copy_(tokens)
            o += n
        self.host_start[0] = start
        self.start.copy_(self.host_start, non_blocking=True)

    def __call__(self, share: torch.cuda.CUDAGraph | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay (capturing first, into ``share``'s memory pool): ``(last committed output, drafted ids)``."""
        if self.graph is None:
            self.graph, self.out = capture(self.step, self.hidden.device, share)
        self.graph.replay()
        return self.out
