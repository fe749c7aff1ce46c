"""hybridsd: speculative decoding on HuggingFace causal LMs with n-gram, EAGLE-1/3 and hybrid drafters.

    import hybridsd as hsd
    drafter = hsd.HybridDrafter(hsd.NgramDrafter(k=5), hsd.EagleDrafter(head, k=3))
    res = hsd.generate(model, input_ids, drafter=drafter, max_new_tokens=256)
    res.tokens, res.stats.seq_normalized_al

Names are imported on first use (``import hybridsd`` loads neither torch nor scipy), so scripts that need only
the analytic models or the data helpers start fast.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

# public name -> the module that defines it
_NAMES = {
    "Draft": "hybridsd.drafters.base",
    "Drafter": "hybridsd.drafters.base",
    "ProposeRequest": "hybridsd.drafters.base",
    "EagleDrafter": "hybridsd.drafters.eagle",
    "EagleTreeDrafter": "hybridsd.drafters.eagle_tree",
    "DraftTree": "hybridsd.drafters.tree",
    "HybridDrafter": "hybridsd.drafters.hybrid",
    "NgramConfig": "hybridsd.drafters.ngram",
    "NgramDrafter": "hybridsd.drafters.ngram",
    "ngram_propose": "hybridsd.drafters.ngram",
    "ReplayDrafter": "hybridsd.drafters.replay",
    "EagleConfig": "hybridsd.eagle.config",
    "EagleHead": "hybridsd.eagle.model",
    "GenerateResult": "hybridsd.generate",
    "generate": "hybridsd.generate",
    "SpecStats": "hybridsd.metrics",
    "StepRecord": "hybridsd.metrics",
}
_SUBMODULES = ("analytic", "data", "edit_distance", "fit", "metrics", "prompts", "simulate", "zoo")

__all__ = sorted(_NAMES) + ["zoo"]
__version__ = "0.1.0"

if TYPE_CHECKING:  # what static tools see; at run time __getattr__ imports these on first use
    from hybridsd import analytic, data, edit_distance, fit, metrics, prompts, simulate, zoo  # noqa: F401
    from hybridsd.drafters.base import Draft, Drafter, ProposeRequest  # noqa: F401
    from hybridsd.drafters.eagle import EagleDrafter  # noqa: F401
    from hybridsd.drafters.eagle_tree import EagleTreeDrafter  # noqa: F401
    from hybridsd.drafters.tree import DraftTree  # noqa: F401
    from hybridsd.drafters.hybrid import HybridDrafter  # noqa: F401
    from hybridsd.drafters.ngram import NgramConfig, NgramDrafter, ngram_propose  # noqa: F401
    from hybridsd.drafters.replay import ReplayDrafter  # noqa: F401
    from hybridsd.eagle.config import EagleConfig  # noqa: F401
    from hybridsd.eagle.model import EagleHead  # noqa: F401
    from hybridsd.generate import GenerateResult, generate  # noqa: F401
    from hybridsd.metrics import SpecStats, StepRecord  # noqa: F401


def __getattr__(name: str):
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"hybridsd.{name}")
    else:
        raise AttributeError(f"module 'hybridsd' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES) | set(_SUBMODULES))


class _Package(types.ModuleType):
    """The package module; importing the submodule ``hybridsd.generate`` leaves ``hybridsd.generate`` the
    function (the import system binds each submodule on its package)."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in _NAMES and value.__name__ == _NAMES[name]:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
