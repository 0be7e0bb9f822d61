"""The drafter interface: propose target tokens within a round's budget, then learn what was
committed.

A drafter only ever speaks target ids to the loop; whatever vocabulary it uses inside (a draft
model's own tokens, n-grams of target tokens) stays inside it. Everything the loop and the
draft-length policy need from a round travels in the returned `Proposal`.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generator, Optional, Sequence

import torch

from anypair.backends.base import Slot
from anypair.types import DraftBudget, Proposal


@dataclass
class DraftRequest:
    """What a drafter may know about a new request."""

    target_prompt_ids: list[int]
    prompt: Optional[str] = None  # raw-text prompt (completion mode)
    messages: Optional[list[dict]] = None  # chat mode: each model renders its own template
    tools: Optional[list[dict]] = None  # chat mode: tool definitions the templates render


@dataclass
class DraftCall:
    """A draft forward a drafter's proposal needs (`ModelDrafter.propose_steps`): `ids` appended to
    `slot` (its first call of a request reads the draft's prompt too); the driver (the batch
    scheduler, or `run_draft_calls`) sends back the last row's logits and sets `charged_seconds`,
    what the forward cost this request (its share of a shared forward)."""

    slot: Slot
    ids: list[int]
    charged_seconds: float = 0.0


def run_draft_calls(steps: Generator[DraftCall, torch.Tensor, Proposal]) -> Proposal:
    """A proposal whose draft forwards run one at a time on their own slots: a drafter used by hand
    (tools, tests). Requests never take this route: the scheduler runs their forwards."""
    reply: Optional[torch.Tensor] = None
    while True:
        try:
            call = steps.send(reply)
        except StopIteration as done:
            return done.value
        started = time.perf_counter()
        reply = call.slot.extend(call.ids)
        call.charged_seconds = time.perf_counter() - started


class Drafter(ABC):
    name: str = "drafter"

    @property
    def stops_by_confidence(self) -> bool:
        """Whether the drafter ends a round by itself once its probability that the whole proposal
        is right falls below `DraftBudget.stop_confidence`. Then an empty proposal is a normal
        answer, and the policy's length is a cap rather than a target."""
        return False

    @abstractmethod
    def start(self, request: DraftRequest) -> None:
        """Forget the previous request and prepare for this one."""

    @property
    def offers_free_proposals(self) -> bool:
        """Whether `free_proposal` may propose: the loop then starts the drafter before the first
        round even while the policy keeps the model from drafting."""
        return False

    def free_proposal(self, budget: DraftBudget) -> Proposal:
        """A proposal that costs no draft-model step (a prompt-lookup match), asked for before each
        round's model proposal and in rounds where the policy drafts nothing
        (`budget.max_draft_steps` is the policy's length then: 0). Empty: nothing free this round."""
        return Proposal([], source=self.name)

    @abstractmethod
    def propose(self, budget: DraftBudget) -> Proposal:
        """Propose at most `budget.max_target_tokens` target ids, running at most
        `budget.max_draft_steps` draft steps (the loop never asks with 0 steps). A drafter with a
        model runs its forwards here one by one (`run_draft_calls`): for use by hand."""

    def propose_steps(self, budget: DraftBudget) -> Generator[DraftCall, torch.Tensor, Proposal]:
        """What the loop calls, after `free_proposal` came back empty: the proposal, each draft-model
        forward it needs yielded as a `DraftCall` for the scheduler to run (the steps of every request
        in one forward of the draft's engine; send back the last row's logits). A drafter without a
        model of its own yields none: this one runs `propose`."""
        return self.propose(budget)
        yield  # unreachable: it makes this function a generator that yields no call

    @abstractmethod
    def commit(self, new_target_ids: Sequence[int]) -> None:
        """The target committed these ids (accepted proposal tokens plus its own next token)."""


class NoDrafter(Drafter):
    """Proposes nothing: the loop then runs the target alone, one token per round."""

    name = "none"

    def start(self, request: DraftRequest) -> None:
        pass

    def propose(self, budget: DraftBudget) -> Proposal:
        return Proposal([], source=self.name)

    def commit(self, new_target_ids: Sequence[int]) -> None:
        pass
