"""Draft-length policies: how many draft steps to run in the next round.

- ConstantLength: always k.
- HeuristicLength: transformers' schedule: +2 after a fully accepted round, -1 otherwise.
- AdaptiveLength: estimates the per-token acceptance rate online and picks the k that maximises
  expected committed tokens per second, from the measured cost of a draft step and of a
  verification pass.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class RoundFeedback:
    draft_steps: int  # draft steps the drafter was allowed
    proposed: int  # target tokens proposed
    accepted: int  # target tokens accepted
    draft_seconds: float
    verify_seconds: float
    draft_step_seconds: float | None  # the drafter's own measurement of one step, if any


class DraftLengthPolicy(ABC):
    name = "policy"

    @abstractmethod
    def next_length(self) -> int: ...

    def update(self, feedback: RoundFeedback) -> None:
        pass

    def reset(self) -> None:
        pass


class ConstantLength(DraftLengthPolicy):
    name = "constant"

    def __init__(self, k: int = 5) -> None:
        if k < 1:
            raise ValueError("draft length must be >= 1")
        self.k = k

    def next_length(self) -> int:
        return self.k


class HeuristicLength(DraftLengthPolicy):
    name = "heuristic"

    def __init__(self, start: int = 5, minimum: int = 1, maximum: int = 20) -> None:
        self.start, self.minimum, self.maximum = start, minimum, maximum
        self.k = start

    def reset(self) -> None:
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


class AdaptiveLength(DraftLengthPolicy):
    """Pick k maximising E[tokens | k] / cost(k), where with per-token acceptance a,
    E[tokens | k] = (1 - a^(k+1)) / (1 - a) (accepted draft tokens plus the target's own), and
    cost(k) = k * draft_step + verify."""

    name = "adaptive"

    def __init__(self, start: int = 5, minimum: int = 1, maximum: int = 12, smoothing: float = 0.3,
                 prior_acceptance: float = 0.7) -> None:
        self.start, self.minimum, self.maximum = start, minimum, maximum
        self.smoothing = smoothing
        self.prior_acceptance = prior_acceptance
        self.reset()

    def reset(self) -> None:
        self.acceptance = self.prior_acceptance
        self.draft_step = None
        self.verify = None
        self.k = self.start

    def next_length(self) -> int:
        return self.k

    def update(self, feedback: RoundFeedback) -> None:
        s = self.smoothing
        if feedback.proposed > 0:
            # per-token acceptance from "accepted of proposed, stopping at the first rejection":
            # the maximum-likelihood estimate of a geometric process
            rejected = 1 if feedback.accepted < feedback.proposed else 0
            trials = feedback.accepted + rejected
            if trials:
                observed = feedback.accepted / trials
                self.acceptance = (1 - s) * self.acceptance + s * observed
        step = feedback.draft_step_seconds
        if step is None and feedback.draft_steps:
            step = feedback.draft_seconds / feedback.draft_steps
        if step:
            self.draft_step = step if self.draft_step is None else (1 - s) * self.draft_step + s * step
        if feedback.verify_seconds > 0:
            self.verify = feedback.verify_seconds if self.verify is None else (1 - s) * self.verify + s * feedback.verify_seconds
        if self.draft_step is None or self.verify is None:
            return
        self.k = self.best_length(self.acceptance, self.draft_step, self.verify)

    def best_length(self, acceptance: float, draft_step: float, verify: float) -> int:
        a = min(max(acceptance, 1e-3), 0.999)
        best_k, best_rate = self.minimum, -1.0
        for k in range(self.minimum, self.maximum + 1):
            expected = (1 - a ** (k + 1)) / (1 - a)
            rate = expected / (k * draft_step + verify)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k


def make_policy(spec, k: int | None = None) -> DraftLengthPolicy:
    if isinstance(spec, DraftLengthPolicy):
        return spec
    if spec == "constant":
        return ConstantLength(k or 5)
    if spec == "heuristic":
        return HeuristicLength(start=k or 5)
    if spec == "adaptive":
        return AdaptiveLength(start=k or 5)
    raise ValueError(f"unknown draft-length policy {spec!r}: use 'constant', 'heuristic', 'adaptive' or a DraftLengthPolicy")
