"""AdaptiveLength, the default policy: `ConfidenceStopLength` when the drafter stops by its own
confidence, `ExpectedRateLength` otherwise, chosen at each request's reset. Both price rounds with
measured timings, or with `fixed_costs` (see `policies.costs`).

What a step of the target and of the draft cost, and how far the draft's own confidence is from how
often the target keeps its proposals, are facts of the pair on this machine, not of one request:
`PairMemory` keeps them across a generator's requests (`remember`), so a request's first rounds are
priced and stopped with what earlier requests measured instead of priors (a new request started at a
stop confidence of 0.3 and unknown costs, and its first rounds' timings decided its pause). Within a
request the acceptance estimate, the pause and the probes still start afresh: predictability is the
text's."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from anypair.policies.base import DraftLengthPolicy
from anypair.policies.confidence_stop import ConfidenceCalibration, ConfidenceStopLength
from anypair.policies.costs import CostModel, FixedCosts, StepCosts, TimedCosts
from anypair.policies.expected_rate import ExpectedRateLength
from anypair.types import RoundFeedback


@dataclass
class PairMemory:
    """What a pair's requests measured, kept across them: the step costs and the draft's calibration."""

    costs: TimedCosts = field(default_factory=TimedCosts)
    calibration: ConfidenceCalibration = field(default_factory=ConfidenceCalibration)


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
        self.fixed = fixed_costs is not None

    def remember(self, memory: PairMemory) -> None:
        if not self.fixed:  # fixed costs ignore timings on purpose
            self.expected_rate.costs = self.confidence_stop.costs = memory.costs
        self.confidence_stop.calibration = memory.calibration
        self.expected_rate.remembers = self.confidence_stop.remembers = True

    def reset(self, confidence_stopping: bool = False) -> None:
        self.active = self.confidence_stop if confidence_stopping else self.expected_rate
        self.active.reset(confidence_stopping)

    def next_length(self) -> int:
        return self.active.next_length()

    def stop_confidence(self) -> float:
        return self.active.stop_confidence()

    def update(self, feedback: RoundFeedback) -> None:
        self.active.update(feedback)
