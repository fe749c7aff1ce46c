"""hybridsd: speculative decoding on HuggingFace causal LMs with n-gram, EAGLE-1/3 and hybrid drafters.

    import hybridsd as hsd
    drafter = hsd.HybridDrafter(hsd.NgramDrafter(k=5), hsd.EagleDrafter(head, k=3))
    res = hsd.generate(model, input_ids, drafter=drafter, max_new_tokens=256)
    res.tokens, res.stats.seq_normalized_al
"""

from hybridsd import analytic, data, edit_distance, metrics, prompts, provenance, simulate, zoo
from hybridsd.drafters.base import Draft, Drafter, ProposeRequest
from hybridsd.drafters.eagle import EagleDrafter
from hybridsd.drafters.eagle_tree import EagleTreeDrafter
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramConfig, NgramDrafter, ngram_propose
from hybridsd.drafters.replay import ReplayDrafter
from hybridsd.drafters.tree import DraftTree
from hybridsd.eagle.model import EagleConfig, EagleHead
from hybridsd.generate import GenerateResult, generate
from hybridsd.metrics import SpecStats, StepRecord

__all__ = [
    "Draft",
    "DraftTree",
    "Drafter",
    "EagleConfig",
    "EagleDrafter",
    "EagleHead",
    "EagleTreeDrafter",
    "GenerateResult",
    "HybridDrafter",
    "NgramConfig",
    "NgramDrafter",
    "ReplayDrafter",
    "ProposeRequest",
    "SpecStats",
    "StepRecord",
    "generate",
    "ngram_propose",
    "zoo",
]
__version__ = "0.1.0"
