"""hybridsd: speculative decoding on HuggingFace causal LMs with n-gram, EAGLE-1/3 and hybrid drafters.

    import hybridsd as hsd
    drafter = hsd.HybridDrafter(hsd.NgramDrafter(k=5), hsd.EagleDrafter(head, k=3))
    res = hsd.generate(model, input_ids, drafter=drafter, max_new_tokens=256)
    res.tokens, res.stats.seq_normalized_al
"""

import importlib

# public name -> module that defines it; imported on first use, so `import hybridsd.analytic`
# stays free of torch and importing the package has no side effects
_EXPORTS = {
    "Draft": "hybridsd.drafters.base",
    "Drafter": "hybridsd.drafters.base",
    "ProposeRequest": "hybridsd.drafters.base",
    "EagleDrafter": "hybridsd.drafters.eagle",
    "HybridDrafter": "hybridsd.drafters.hybrid",
    "NgramConfig": "hybridsd.drafters.ngram",
    "NgramDrafter": "hybridsd.drafters.ngram",
    "ngram_propose": "hybridsd.drafters.ngram",
    "EagleConfig": "hybridsd.eagle.model",
    "EagleHead": "hybridsd.eagle.model",
    "GenerateResult": "hybridsd.generate",
    "generate": "hybridsd.generate",
    "SpecStats": "hybridsd.metrics",
    "StepRecord": "hybridsd.metrics",
}
_SUBMODULES = {"zoo", "analytic", "simulate", "data", "prompts", "metrics", "edit_distance", "provenance"}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"hybridsd.{name}")
    raise AttributeError(f"module 'hybridsd' has no attribute {name!r}")


__all__ = [
    "Draft",
    "Drafter",
    "EagleConfig",
    "EagleDrafter",
    "EagleHead",
    "GenerateResult",
    "HybridDrafter",
    "NgramConfig",
    "NgramDrafter",
    "ProposeRequest",
    "SpecStats",
    "StepRecord",
    "generate",
    "ngram_propose",
    "zoo",
]
__version__ = "0.1.0"
