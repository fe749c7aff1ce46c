"""An oracle drafter: the next tokens of a known continuation.

For upper bounds and benchmarks: fed the target's own output it drafts what the verifier will
accept, so a run measures the engine at full acceptance (e.g. the loop's cost outside the
forward passes when every step drafts and accepts ``k`` tokens).
"""

from __future__ import annotations

import torch

from hybridsd.drafters.base import Draft, Drafter, ProposeRequest, check_count, token_array


class ReplayDrafter(Drafter):
    """Proposes the next ``k`` tokens of ``continuation`` (the tokens generated after the prompt)."""

    name = "replay"

    def __init__(self, continuation: list[int], k: int) -> None:
        check_count("k", k)
        self.continuation, self.k = token_array("continuation", continuation).tolist(), k
        self.prompt_len = 0

    @property
    def max_tokens(self) -> int:
        return self.k

    def reset(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len

    def position(self, request: ProposeRequest) -> int:
        """Index into the continuation of the next token to draft."""
        return len(request.tokens) - self.prompt_len

    def propose(self, request: ProposeRequest) -> list[Draft]:
        pos = self.position(request)
        d = self.continuation[pos : pos + min(self.k, request.budget)]
        return [Draft(torch.tensor(d, dtype=torch.long, device=request.device), self.name)] if d else []
