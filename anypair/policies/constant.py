"""ConstantLength: every round drafts the same number of steps (0: never with a model; a drafter's
free proposals, prompt-lookup matches, are still verified: what a request the ledger keeps from
drafting runs)."""
from __future__ import annotations

from anypair.policies.base import DraftLengthPolicy


class ConstantLength(DraftLengthPolicy):
    name = "constant"

    def __init__(self, k: int = 5) -> None:
        if k < 0:
            raise ValueError("draft length must be >= 0")
        self.k = k

    def next_length(self) -> int:
        return self.k
