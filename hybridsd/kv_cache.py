"""A preallocated key/value cache addressed by slot, with rollback by rewinding the length.

Slots at or past ``length`` hold stale entries from rejected drafts; attention masks
never let a query see them, and the next write overwrites them, so rolling back costs
nothing. ``move`` compacts the accepted branch of a tree into consecutive slots.
"""

from __future__ import annotations

import torch

from hybridsd.cuda_graph import capture


SLOT_ALIGN = 64  # capacities are rounded up to a multiple of this many slots


def bucket(n: int) -> int:
    """``n`` slots rounded up to a multiple of 256 (to 1024), 512 (to 4096) or 1024: the attention spans."""
    step = 256 if n <= 1024 else 512 if n <= 4096 else 1024
    return -(-n // step) * step


class StaticKVCache:
    """Keys and values of ``num_layers`` attention layers, ``[B, Hkv, S, D]`` each.

    ``capacity`` is the requested one rounded up to a multiple of :data:`SLOT_ALIGN`, so every span a step
    attends over (:meth:`span`) is one too: whole key tiles, and mask rows that start aligned. On the 8B shape
    a span of 2283 slots made a 9-token step 0.4 ms slower than one of 2112
    (``experiments/results/speed/launch.json``, ``capacity_check``).
    """

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        capacity: int,
        *,
        batch_size: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"KV cache capacity must be >= 1, got {capacity}")
        capacity = -(-capacity // SLOT_ALIGN) * SLOT_ALIGN
        shape = (batch_size, num_kv_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.capacity = capacity
        self.length = 0  # committed slots [0, length) hold the real sequence
        self._moves: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # CUDA: move's graph per slot count

    @property
    def num_layers(self) -> int:
        return len(self.keys)

    def write(
        self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` (``[B, Hkv, q, D]``) at ``slots`` (``[q]``); return the layer's full cache."""
        self.keys[layer].index_copy_(2, slots, k.to(self.keys[layer].dtype))
        self.values[layer].index_copy_(2, slots, v.to(self.values[layer].dtype))
        return self.keys[layer], self.values[layer]

    def span(self, n: int) -> int:
        """Slots a step using slots ``[0, n)`` attends over: ``n`` rounded up to a multiple of 256 (to 1024),
        512 (to 4096) or 1024, at most the capacity; few distinct shapes, so few graphs and compilations."""
        return min(self.capacity, bucket(n))

    def rewind(self, length: int) -> None:
        """Declare slots ``[0, length)`` the committed sequence; later slots become free."""
        if not 0 <= length <= self.capacity:
            raise ValueError(f"cannot rewind to {length}: capacity is {self.capacity}")
        self.length = length

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy the entries at slots ``src`` (``[n]``) to slots ``dst`` (``[n]``) in every layer. On CUDA the copies
        are one CUDA graph per ``n`` (one launch, not four per layer)."""
        if not self.keys[0].is_cuda:
            return self._move(src, dst)
        n = int(src.shape[0])
        if n not in self._moves:
            with torch.inference_mode(False):  # a plain buffer: written in and out of inference mode
                index = torch.arange(n, device=src.device).repeat(2, 1)  # [2, n] src, dst: slots onto themselves
            self._moves[n] = capture(lambda: self._move(index[0], index[1]), src.device)[0], index
        graph, index = self._moves[n]
        index[0].copy_(src)
        index[1].copy_(dst)
        graph.replay()

    def _move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        for cache in (*self.keys, *self.values):
            cache.index_copy_(2, dst, cache.index_select(2, src))
