"""The draft-length policy interface: how many draft steps the next round may run, and when a
drafter that knows its own confidence should stop.

A policy's state changes only in `update()` (after each round) and `reset()` (new request):
`next_length()` and `stop_confidence()` only read it, so asking twice gives the same answer.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Optional

from anypair.types import RoundFeedback


class DraftLengthPolicy(ABC):
    name = "policy"

    @abstractmethod
    def next_length(self) -> int:
        """Draft steps for the next round; 0: no drafting (a plain target step)."""

    def stop_confidence(self) -> float:
        """Advice for drafters that stop by their own confidence: end the round once the chance that
        the whole proposal is right falls below this (0: no advice)."""
        return 0.0

    def stop_confidences(self) -> tuple[float, ...]:
        """`stop_confidence` for each proposal length 1, 2, ... (the last for longer ones): what
        `DraftBudget.stop_confidence` carries. Default: the one figure for every length."""
        return (self.stop_confidence(),)

    def branch_confidence(self) -> Optional[float]:
        """Advice for drafters that can add alternatives to their proposal (a tree of candidates,
        verified in the same forward): add one whose chance of being the target's is at least this.
        None (the default): chains only."""
        return None

    def row_price(self) -> Optional[float]:
        """What each extra row verified adds to a target step, where the policy is priced at fixed
        costs (drafters that price their own proposals, the hybrid's lookup, then use it); None (the
        default): the drafters use their own measured price."""
        return None

    def update(self, feedback: RoundFeedback) -> None:
        """Learn from the round just verified (called once after every round but the last)."""

    def remember(self, memory: object) -> None:
        """Keep what a pair's requests learn across them in `memory` (a `policies.adaptive.PairMemory`:
        not imported here, which would close an import cycle; the generator holds one per
        drafter kind and decoding): a policy that measures costs or calibrates its draft reads and
        updates it instead of starting from its priors on every request. Default: nothing kept."""

    def reset(self, confidence_stopping: bool = False) -> None:
        """A new request. `confidence_stopping`: the drafter ends rounds by itself when unsure
        (`Drafter.stops_by_confidence`), so the length is a cap and `stop_confidence` is the lever."""
