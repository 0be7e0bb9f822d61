"""ConfidenceStopLength: for drafters that stop by their own confidence. The length is only a cap;
the policy's lever is the stopping point, and pausing drafting while it loses time.

One more draft token is worth proposing while the draft's probability that everything so far is
right, times the value of a token (one target step, verify(1)), exceeds what the token costs (a
draft step plus the verification slope). Acceptance per round is far from geometric (boilerplate
runs, then hard spots) and the draft's own confidence tells the two apart, where one averaged
acceptance rate cannot.

Each round still pays at least one draft step, so the policy also keeps the net time each drafting
round saved against a plain target step; while that average is negative after at least
`min_rounds` drafting rounds of the request (a pause needs evidence: the first rounds of a request,
its prompt's restatement, are often the hardest to predict) it pauses drafting (length 0) and
probes again (see `ProbeSchedule`: probes back off but never stop); a probe that pays resumes
drafting at once. A probe is judged without the draft's catch-up read of what was committed while
it paused: that read is the price of having paused, not of drafting from here on.

A small draft is often right with little confidence on text the target writes (code boilerplate
in another model's style), so the advice is calibrated online (`ConfidenceCalibration`).
"""
from __future__ import annotations

from typing import Optional

from anypair.policies.base import DraftLengthPolicy
from anypair.policies.costs import CostModel, TimedCosts
from anypair.policies.probes import ProbeSchedule
from anypair.types import RoundFeedback


class ConfidenceCalibration:
    """The share of rounds whose proposal was accepted in full, over the draft's own predicted
    probability of that, within [1/`max_ratio`, `max_ratio`]. An under-confident draft gets a
    proportionally lower stop threshold, an over-confident one a higher."""

    def __init__(self, smoothing: float = 0.3, max_ratio: float = 3.0) -> None:
        self.keep = 1 - smoothing / 2  # slower than the other estimates: one round says little
        self.max_ratio = max_ratio
        self.reset()

    def reset(self) -> None:
        # a prior of two rounds' worth, calibrated, keeps a few lucky rounds from swinging it
        self.full_observed = 2.0
        self.full_predicted = 2.0

    def observe(self, feedback: RoundFeedback) -> None:
        if feedback.proposed == 0 or feedback.predicted_confidence is None:
            return
        full = 1.0 if feedback.accepted >= feedback.proposed else 0.0
        self.full_observed = self.keep * self.full_observed + full
        self.full_predicted = self.keep * self.full_predicted + feedback.predicted_confidence

    @property
    def ratio(self) -> float:
        """How much more often the draft's proposals are right in full than it predicts."""
        ratio = self.full_observed / self.full_predicted
        return min(self.max_ratio, max(1.0 / self.max_ratio, ratio))


class ConfidenceStopLength(DraftLengthPolicy):
    name = "confidence-stop"

    def __init__(self, costs: Optional[CostModel] = None, maximum: int = 12, smoothing: float = 0.3,
                 prior_stop_confidence: float = 0.3, max_calibration: float = 3.0, probe_every: int = 8,
                 first_probe_after: int = 2, min_rounds: int = 3) -> None:
        if maximum < 1:
            raise ValueError(f"the draft length cap must be >= 1, got {maximum}")
        self.costs = costs if costs is not None else TimedCosts(smoothing)
        self.maximum = maximum
        self.smoothing = smoothing
        self.prior_stop_confidence = prior_stop_confidence
        self.calibration = ConfidenceCalibration(smoothing, max_calibration)
        self.probes = ProbeSchedule(first_probe_after, probe_every)
        self.min_rounds = min_rounds
        self.remembers = False  # costs and calibration shared across requests (AdaptiveLength.remember)
        self.reset()

    def reset(self, confidence_stopping: bool = False) -> None:
        if not self.remembers:  # costs and calibration kept across requests in a PairMemory are not reset
            self.costs.reset()
            self.calibration.reset()
        self.probes.reset()
        self.net_saving: Optional[float] = None  # what a drafting round saved vs a plain target step (smoothed)
        self.drafting_rounds = 0

    @property
    def paused(self) -> bool:
        return self.net_saving is not None and self.net_saving < 0 and self.drafting_rounds >= self.min_rounds

    def next_length(self) -> int:
        return self.maximum if not self.paused or self.probes.due() else 0

    def stop_confidence(self) -> float:
        draft_step = self.costs.draft_step()
        if draft_step is None or not self.costs.known:
            return self.prior_stop_confidence
        token_value = self.costs.verify(1)
        token_cost = draft_step + self.costs.verify_slope()
        return min(0.9, max(0.03, token_cost / token_value / self.calibration.ratio))

    def update(self, feedback: RoundFeedback) -> None:
        probed = self.paused and self.probes.record_paused_round()
        self.costs.observe(feedback)
        self.calibration.observe(feedback)
        if feedback.draft_steps > 0 and self.costs.known:
            plain_step = self.costs.verify(1)
            saved = feedback.accepted * plain_step - (self.costs.round_cost(feedback) - plain_step)
            self.drafting_rounds += 1
            if self.net_saving is None or (probed and saved > 0):
                self.net_saving = saved  # a probe that pays decides: the text got predictable
            else:
                self.net_saving = (1 - self.smoothing) * self.net_saving + self.smoothing * saved
        if probed:
            self.probes.after_probe(drafting_resumed=not self.paused)
