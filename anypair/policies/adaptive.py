"""AdaptiveLength, the default policy: `ConfidenceStopLength` when the drafter stops by its own
confidence, `ExpectedRateLength` otherwise, chosen at each request's reset. Both price rounds with
measured timings, or with `fixed_costs` (see `policies.costs`)."""
from __future__ import annotations

from typing import Optional

from anypair.policies.base import DraftLengthPolicy
from anypair.policies.confidence_stop import ConfidenceStopLength
from anypair.policies.costs import CostModel, FixedCosts, StepCosts, TimedCosts
from anypair.policies.expected_rate import ExpectedRateLength
from anypair.types import RoundFeedback


class AdaptiveLength(DraftLengthPolicy):
    name = "adaptive"

    def __init__(self, start: int = 5, minimum: int = 0, maximum: int = 12, smoothing: float = 0.3,
                 prior_acceptance: float = 0.7, probe_every: int = 8, prior_stop_confidence: float = 0.3,
                 max_calibration: float = 3.0, fixed_costs: Optional[StepCosts] = None,
                 first_probe_after: int = 2) -> None:
        def costs() -> CostModel:
            return TimedCosts(smoothing) if fixed_costs is None else FixedCosts(fixed_costs)

        self.expected_rate = ExpectedRateLength(costs(), start, minimum, maximum, smoothing, prior_acceptance,
                                                probe_every, first_probe_after)
        self.confidence_stop = ConfidenceStopLength(costs(), maximum, smoothing, prior_stop_confidence,
                                                    max_calibration, probe_every, first_probe_after)
        self.active: DraftLengthPolicy = self.expected_rate

    def reset(self, confidence_stopping: bool = False) -> None:
        self.active = self.confidence_stop if confidence_stopping else self.expected_rate
        self.active.reset(confidence_stopping)

    def next_length(self) -> int:
        return self.active.next_length()

    def stop_confidence(self) -> float:
        return self.active.stop_confidence()

    def update(self, feedback: RoundFeedback) -> None:
        self.active.update(feedback)
