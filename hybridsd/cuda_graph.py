"""Capturing a step function as a CUDA graph."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import torch


def capture(step: Callable[[], Any], device: torch.device, share: torch.cuda.CUDAGraph | None = None,
            warmup: int = 2) -> tuple[torch.cuda.CUDAGraph, Any]:
    """Run ``step`` ``warmup`` times on a side stream, then capture it: ``(graph, step's outputs)``.

    ``step`` reads and writes only static tensors; put the first call's inputs in its
    buffers before capturing, so the warm-up runs write what the real call would.
    The returned outputs are overwritten by every ``graph.replay()``. ``share``: a live
    graph of the same owner whose memory pool this one joins (safe for graphs replayed
    one at a time; the pool lives as long as any of its graphs, so a stale handle is
    never reused). A step that cannot be captured raises ``RuntimeError`` naming ``cuda_graphs=False``.
    """
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # outside the graph: allocator warm-up, lazy inits, compilation
        for _ in range(warmup):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    # Python's cyclic GC must not run inside the capture: collecting an unreachable object that owns CUDA
    # graphs or graph-pool memory (an old Target, say) frees device memory mid-capture, which invalidates
    # the capture or aborts the allocator. The collector waits until the capture ends (a full collection
    # per capture would cost more than the capture).
    enabled = gc.isenabled()
    gc.disable()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=share.pool() if share is not None else None):
            out = step()
    except RuntimeError as e:  # the model's own code, most often: a host value copied in, or one read back
        raise RuntimeError(f"a step could not be captured as a CUDA graph: {e}. The model's forward does work a "
                           "graph cannot hold (a host-to-GPU copy or a read back to the host); run it without "
                           "graphs: cuda_graphs=False (spec_bench: --enforce-eager)") from e
    finally:
        if enabled:
            gc.enable()
    return graph, out
