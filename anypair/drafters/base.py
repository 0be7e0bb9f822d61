"""The drafter interface: propose target tokens for a round, then learn what was committed.

A drafter only ever speaks target ids to the loop; whatever vocabulary it uses inside (a draft
model's own tokens, n-grams of target tokens) stays inside it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Optional, Sequence

from anypair.types import Proposal


@dataclass
class DraftRequest:
    """What a drafter may know about a new request."""

    target_prompt_ids: list[int]
    prompt: Optional[str] = None  # raw-text prompt (completion mode)
    messages: Optional[list[dict]] = None  # chat mode: each model renders its own template
    prompt_bytes: bytes = b""  # the prompt as the target sees it (text of target_prompt_ids)
    extra: dict = field(default_factory=dict)


class Drafter(ABC):
    name: str = "drafter"
    #: whether the drafter ends a round by itself once it is no longer confident (see set_stop_confidence)
    stops_by_confidence: bool = False

    @abstractmethod
    def start(self, request: DraftRequest) -> None:
        """Forget the previous request and prepare for this one."""

    @abstractmethod
    def propose(self, max_draft_steps: int, max_target_tokens: int) -> Proposal:
        """Propose up to `max_target_tokens` target ids, running at most `max_draft_steps` draft steps."""

    @abstractmethod
    def commit(self, new_target_ids: Sequence[int]) -> None:
        """The target committed these ids (accepted proposal tokens plus its own next token)."""

    def step_cost_hint(self) -> Optional[float]:
        """Seconds one draft step costs, if the drafter measures it (for adaptive draft lengths)."""
        return None

    def set_stop_confidence(self, threshold: float) -> None:
        """The draft-length policy's advice for the next round: stop once the drafter's probability
        that its whole proposal so far is right falls below `threshold`. Ignored by drafters that
        have no such probability."""


class NoDrafter(Drafter):
    """Proposes nothing: the loop then runs the target alone, one token per round."""

    name = "none"

    def start(self, request: DraftRequest) -> None:
        pass

    def propose(self, max_draft_steps: int, max_target_tokens: int) -> Proposal:
        return Proposal([], source=self.name)

    def commit(self, new_target_ids: Sequence[int]) -> None:
        pass
