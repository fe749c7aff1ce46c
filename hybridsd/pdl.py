"""Programmatic dependent launch (PDL) of exact mode's Triton kernels on Hopper and later.

A kernel launched as a programmatic dependent of the kernel before it in the stream may start while that kernel
drains. Every kernel of ours that is launched so calls :func:`hybridsd.pdl_kernels.pdl_wait` first: it waits until
the kernel before has finished and its writes are visible, and only then lets the kernel after it launch. So when
a kernel starts, every kernel before its predecessor has finished; before its wait it reads only what no kernel of
the step writes (weights), and it reads and writes everything else after it.
"""

from __future__ import annotations

import functools

import torch


PDL_LEVEL = 2  # 1: each kernel waits for the one before; 2: and then lets the one after launch


def pdl_options(device: torch.device) -> dict:
    """Launch options of a kernel on ``device``: programmatic dependent launch (``PDL`` = :data:`PDL_LEVEL`,
    ``launch_pdl``) on a CUDA device of compute capability 9 or more whose Triton launches with it, else none
    (``PDL`` 0)."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 9 or not _pdl_launches():
        return {"PDL": 0}
    return {"PDL": PDL_LEVEL, "launch_pdl": True}


@functools.cache
def _pdl_launches() -> bool:
    """Whether Triton takes ``launch_pdl`` (the release that added it also added ``tl.extra.cuda.gdc_wait``)."""
    import triton.language as tl

    return hasattr(tl.extra.cuda, "gdc_wait")
