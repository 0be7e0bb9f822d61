"""ExpectedRateLength: the length that maximises expected committed tokens per unit of cost.

With per-token acceptance a, E[tokens | k] = (1 - a^(k+1)) / (1 - a) (accepted draft tokens plus
the target's own) and cost(k) = k * draft_step + verify(k + 1). k = 0 (no drafting: a plain target
step) is chosen when no draft length pays for itself; the probe schedule then drafts one round now
and then so the acceptance estimate can recover (never stopping: see `ProbeSchedule`).
"""
from __future__ import annotations

from typing import Callable, Optional

from anypair.policies.acceptance import AcceptanceEstimate
from anypair.policies.base import DraftLengthPolicy
from anypair.policies.costs import CostModel, TimedCosts
from anypair.policies.probes import ProbeSchedule
from anypair.types import RoundFeedback


def best_length(acceptance: float, draft_step: float, verify: Callable[[float], float],
                minimum: int, maximum: int) -> int:
    """The k in [minimum, maximum] with the most expected tokens per cost (`verify(n)`: the cost
    of scoring n tokens)."""
    a = min(max(acceptance, 1e-3), 0.999)
    best_k, best_rate = minimum, -1.0
    for k in range(minimum, maximum + 1):
        expected = (1 - a ** (k + 1)) / (1 - a)
        rate = expected / (k * draft_step + verify(k + 1))
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


class ExpectedRateLength(DraftLengthPolicy):
    name = "expected-rate"

    def __init__(self, costs: Optional[CostModel] = None, start: int = 5, minimum: int = 0, maximum: int = 12,
                 smoothing: float = 0.3, prior_acceptance: float = 0.7, probe_every: int = 8,
                 first_probe_after: int = 2) -> None:
        if not 0 <= minimum <= maximum or maximum < 1:
            raise ValueError(f"need 0 <= minimum <= maximum and maximum >= 1, got {minimum} and {maximum}")
        self.costs = costs if costs is not None else TimedCosts(smoothing)
        self.start, self.minimum, self.maximum = start, minimum, maximum
        self.acceptance = AcceptanceEstimate(prior_acceptance, smoothing)
        self.probes = ProbeSchedule(first_probe_after, probe_every)
        self.remembers = False  # costs shared across requests (AdaptiveLength.remember)
        self.reset()

    def reset(self, confidence_stopping: bool = False) -> None:
        if not self.remembers:  # costs kept across requests in a PairMemory are not reset
            self.costs.reset()
        self.acceptance.reset()
        self.probes.reset()
        self.k = self.start

    def next_length(self) -> int:
        if self.k == 0 and self.probes.due():
            return max(1, self.minimum)
        return self.k

    def update(self, feedback: RoundFeedback) -> None:
        probed = self.k == 0 and self.probes.record_paused_round()
        if feedback.draft_steps:  # a free round (a lookup match, no draft step) says nothing of the draft
            self.acceptance.observe(feedback)
        self.costs.observe(feedback)
        draft_step = self.costs.draft_step()
        if draft_step is not None and self.costs.known:
            self.k = best_length(self.acceptance.rate, draft_step, self.costs.verify, self.minimum, self.maximum)
        if probed:
            self.probes.after_probe(drafting_resumed=self.k > 0)
