"""ConstantLength: every round drafts the same number of steps."""
from __future__ import annotations

from anypair.policies.base import DraftLengthPolicy


class ConstantLength(DraftLengthPolicy):
    name = "constant"

    def __init__(self, k: int = 5) -> None:
        if k < 1:
            raise ValueError("draft length must be >= 1")
        self.k = k

    def next_length(self) -> int:
        return self.k
