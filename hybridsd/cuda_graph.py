"""Capturing a step function as a CUDA graph (all graphs of a device share one memory pool)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_POOLS: dict = {}


def graph_pool(device: torch.device):
    """The memory pool shared by every graph captured on ``device``."""
    if device not in _POOLS:
        _POOLS[device] = torch.cuda.graph_pool_handle()
    return _POOLS[device]


def capture(step: Callable[[], Any], device: torch.device, warmup: int = 2) -> tuple[torch.cuda.CUDAGraph, Any]:
    """Run ``step`` ``warmup`` times on a side stream, then capture it: ``(graph, step's outputs)``.

    ``step`` reads and writes only static tensors; put the first call's inputs in its
    buffers before capturing, so the warm-up runs write what the real call would.
    The returned outputs are overwritten by every ``graph.replay()``.
    """
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # outside the graph: allocator warm-up, lazy inits, compilation
        for _ in range(warmup):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=graph_pool(device)):
        out = step()
    return graph, out
