"""HeuristicLength: transformers' schedule for assisted generation: two steps more after a round
accepted in full, one less otherwise."""
from __future__ import annotations

from anypair.policies.base import DraftLengthPolicy
from anypair.types import RoundFeedback


class HeuristicLength(DraftLengthPolicy):
    name = "heuristic"

    def __init__(self, start: int = 5, minimum: int = 1, maximum: int = 20) -> None:
        if not 1 <= minimum <= maximum or start < 1:
            raise ValueError(f"need start >= 1 and 1 <= minimum <= maximum, got {start}, {minimum}, {maximum}")
        self.start, self.minimum, self.maximum = start, minimum, maximum
        self.k = start

    def reset(self, confidence_stopping: bool = False) -> None:
        self.k = self.start

    def next_length(self) -> int:
        return self.k

    def update(self, feedback: RoundFeedback) -> None:
        if feedback.proposed == 0:
            return
        if feedback.accepted == feedback.proposed:
            self.k = min(self.maximum, self.k + 2)
        else:
            self.k = max(self.minimum, self.k - 1)
