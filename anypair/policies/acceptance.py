"""The per-token acceptance estimate: the chance the target keeps the next proposed token, given
it kept the ones before (the rate of a geometric process), smoothed over rounds."""
from __future__ import annotations

from anypair.types import RoundFeedback


class AcceptanceEstimate:
    def __init__(self, prior: float = 0.7, smoothing: float = 0.3) -> None:
        self.prior = prior
        self.smoothing = smoothing
        self.rate = prior

    def reset(self) -> None:
        self.rate = self.prior

    def observe(self, feedback: RoundFeedback) -> None:
        self.observe_counts(feedback.accepted, feedback.proposed)

    def observe_counts(self, accepted: int, proposed: int) -> None:
        """One round: the target kept the first `accepted` of `proposed` tokens."""
        if proposed == 0:
            return
        # "accepted of proposed, stopping at the first rejection": the maximum-likelihood estimate
        # of a geometric process counts the rejection as the one failed trial
        rejected = 1 if accepted < proposed else 0
        observed = accepted / (accepted + rejected)
        self.rate = (1 - self.smoothing) * self.rate + self.smoothing * observed
