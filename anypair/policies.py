"""Draft-length policies: how many draft steps to run in the next round.

- ConstantLength: always k.
- HeuristicLength: transformers' schedule: +2 after a fully accepted round, -1 otherwise.
- AdaptiveLength: estimates the per-token acceptance rate online and picks the k that maximises
  expected committed tokens per second, from the measured cost of a draft step and of verifying
  n tokens (a fitted line: verification is not flat in n on CPUs); k = 0 when drafting cannot pay.
  With `fixed_costs` (seeded sampling) it uses a cost model estimated from the models' sizes
  instead of timings, so that its choices, and the text sampled, follow the outcomes only.
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
    # the drafter's own probability that the whole proposal was right (model drafters), if any
    predicted_confidence: float | None = None


@dataclass(frozen=True)
class StepCosts:
    """A cost model in units of one single-token target step: a draft step costs `draft_step`,
    verifying n tokens costs `1 + verify_slope * (n - 1)`."""

    draft_step: float
    verify_slope: float

    def __post_init__(self) -> None:
        if not (self.draft_step > 0 and self.verify_slope >= 0):
            raise ValueError(f"StepCosts needs draft_step > 0 and verify_slope >= 0, got {self}")


# per-layer Python/dispatch overhead of a decode step, in parameters' worth of matrix work; fitted
# on this project's 2-core CPU in fp32 (SmolLM2-135M step 55 ms, Qwen2.5-1.5B step 270 ms)
LAYER_OVERHEAD_PARAMS = 7.4e6


def estimated_step_costs(target_params: int, target_layers: int, draft_params: int, draft_layers: int,
                         multi_token_slope: float) -> StepCosts:
    """A timing-free cost model from model sizes: a decode step's time taken as proportional to
    its parameters plus a fixed overhead per layer (what dominates small drafts)."""
    target = target_params + LAYER_OVERHEAD_PARAMS * target_layers
    draft = draft_params + LAYER_OVERHEAD_PARAMS * draft_layers
    return StepCosts(draft_step=draft / target, verify_slope=multi_token_slope)


class FixedLinearCost:
    """LinearCost's interface over a fixed line: cost(n) = 1 + slope * (n - 1)."""

    known = True

    def __init__(self, slope: float) -> None:
        self._slope = slope

    def add(self, items: float, seconds: float) -> None:  # timings are ignored on purpose
        pass

    def slope(self) -> float:
        return self._slope

    def __call__(self, items: float) -> float:
        return 1.0 + self._slope * (items - 1)


class DraftLengthPolicy(ABC):
    name = "policy"

    @abstractmethod
    def next_length(self) -> int: ...

    def update(self, feedback: RoundFeedback) -> None:
        pass

    def reset(self) -> None:
        pass

    def stop_confidence(self) -> float:
        """Advice for drafters that know their own confidence: stop the round once the chance that
        the whole proposal is right falls below this (0: no advice)."""
        return 0.0

    def use_confidence_stopping(self, enabled: bool) -> None:
        """Told at the start of a request whether the drafter follows `stop_confidence`."""


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


class LinearCost:
    """cost(n) = base + per_item * n, fitted online by exponentially weighted least squares.

    Verification is not flat in the number of tokens scored: on a CPU in fp32 scoring 4 tokens
    measured ~1.9x one token (skinny kernel) and ~3.7x (torch's kernel). A flat-cost model then
    asks for long drafts that cannot pay.
    """

    def __init__(self, smoothing: float = 0.2) -> None:
        self.smoothing = smoothing
        self.n = self.x = self.y = self.xx = self.xy = 0.0

    def add(self, items: float, seconds: float) -> None:
        if self.n == 0:
            self.n, self.x, self.y, self.xx, self.xy = 1.0, items, seconds, items * items, items * seconds
            return
        keep = 1 - self.smoothing
        self.n = keep * self.n + self.smoothing
        self.x = keep * self.x + self.smoothing * items
        self.y = keep * self.y + self.smoothing * seconds
        self.xx = keep * self.xx + self.smoothing * items * items
        self.xy = keep * self.xy + self.smoothing * items * seconds

    @property
    def known(self) -> bool:
        return self.n > 0

    def slope(self) -> float:
        mean_x, mean_y = self.x / self.n, self.y / self.n
        variance = self.xx / self.n - mean_x * mean_x
        if variance < 0.25:  # all observations at about one size: no slope to learn yet
            return 0.0
        return max(0.0, (self.xy / self.n - mean_x * mean_y) / variance)

    def __call__(self, items: float) -> float:
        mean_x, mean_y = self.x / self.n, self.y / self.n
        slope = self.slope()
        return max(1e-6, mean_y + slope * (items - mean_x))


class AdaptiveLength(DraftLengthPolicy):
    """Pick k maximising E[tokens | k] / cost(k), where with per-token acceptance a,
    E[tokens | k] = (1 - a^(k+1)) / (1 - a) (accepted draft tokens plus the target's own), and
    cost(k) = k * draft_step + verify(k + 1), verify fitted as a line in the tokens scored.

    k = 0 (no drafting: a plain target step) is chosen when no draft length pays for itself; after
    some such rounds one round drafts again (a probe) so the acceptance estimate can recover. Probes
    back off: the first comes after `first_probe_after` idle rounds, each probe that fails doubles
    the wait up to `probe_every`, and one that resumes drafting resets it. A failed probe costs about
    one draft step, a missed predictable stretch costs all its savings, and one unlucky round at the
    start of a generation must not silence the draft for a dozen rounds of a short output.

    With a drafter that stops by its own confidence, the length is only a cap (`maximum`) and the
    policy's job is the stopping point instead: one more draft token is worth proposing while the
    draft's probability that everything so far is right, times the value of a token (one target
    step, verify(1)), exceeds what the token costs (a draft step plus the verification slope).
    Acceptance per round is far from geometric (boilerplate runs, then hard spots) and the draft's
    own confidence tells the two apart, where one averaged acceptance rate cannot. Each round still
    pays at least one draft step, so the policy also keeps the measured net time each drafting round
    saved against a plain target step; while that average is negative it pauses drafting (k = 0)
    and probes again (with the same back-off); a probe that pays resumes drafting at once.

    A small draft is often right with little confidence on text the target writes (code
    boilerplate in another model's style), so the advice is calibrated online: the share of rounds
    whose proposal was accepted in full, over the draft's own predicted probability of that. An
    under-confident draft gets a proportionally lower stop threshold (and an over-confident one a
    higher), within [1/`max_calibration`, `max_calibration`].

    `fixed_costs` replaces every timing with a cost model (see `estimated_step_costs`): seeded
    sampling needs it, since the number of random draws per round, and so the sampled text, must
    not depend on how busy the machine was.
    """

    name = "adaptive"

    def __init__(self, start: int = 5, minimum: int = 0, maximum: int = 12, smoothing: float = 0.3,
                 prior_acceptance: float = 0.7, probe_every: int = 12, prior_stop_confidence: float = 0.3,
                 max_calibration: float = 3.0, fixed_costs: StepCosts | None = None,
                 first_probe_after: int = 2) -> None:
        if not 1 <= first_probe_after <= probe_every:
            raise ValueError(f"need 1 <= first_probe_after <= probe_every, got {first_probe_after} and {probe_every}")
        self.start, self.minimum, self.maximum = start, minimum, maximum
        self.smoothing = smoothing
        self.prior_acceptance = prior_acceptance
        self.probe_every = probe_every
        self.first_probe_after = first_probe_after
        self.prior_stop_confidence = prior_stop_confidence
        self.max_calibration = max_calibration
        self.fixed_costs = fixed_costs
        self.confidence_stopping = False
        self.reset()

    def reset(self) -> None:
        self.acceptance = self.prior_acceptance
        if self.fixed_costs is None:
            self.draft_step = None
            self.verify = LinearCost()
        else:
            self.draft_step = self.fixed_costs.draft_step
            self.verify = FixedLinearCost(self.fixed_costs.verify_slope)
        self.k = self.start
        self._idle_rounds = 0
        self._probe_wait = self.first_probe_after  # idle rounds before the next probe
        self._probing = False
        self.net_saving = None  # seconds a drafting round saved vs a plain target step (smoothed)
        # smoothed rounds accepted in full and the draft's predicted probability of it; the prior
        # (two rounds' worth, calibrated) keeps a few lucky rounds from swinging the threshold
        self._full_observed = 2.0
        self._full_predicted = 2.0

    @property
    def calibration(self) -> float:
        """How much more often the draft's proposals are right in full than it predicts."""
        ratio = self._full_observed / self._full_predicted
        return min(self.max_calibration, max(1.0 / self.max_calibration, ratio))

    def use_confidence_stopping(self, enabled: bool) -> None:
        self.confidence_stopping = enabled

    def stop_confidence(self) -> float:
        if not self.confidence_stopping:
            return 0.0
        if self.draft_step is None or not self.verify.known:
            return self.prior_stop_confidence
        token_value = self.verify(1)
        token_cost = self.draft_step + self.verify.slope()
        return min(0.9, max(0.03, token_cost / token_value / self.calibration))

    def next_length(self) -> int:
        if self.confidence_stopping:
            if self.net_saving is None or self.net_saving >= 0:
                return self.maximum
            if self._probe_due():
                return self.maximum
            return 0
        if self.k == 0 and self._probe_due():
            return max(1, self.minimum)
        return self.k

    def _probe_due(self) -> bool:
        self._idle_rounds += 1
        if self._idle_rounds < self._probe_wait:
            return False
        self._idle_rounds = 0
        self._probing = True
        return True

    def _after_probe(self) -> None:
        drafting = (self.net_saving is None or self.net_saving >= 0) if self.confidence_stopping else self.k > 0
        self._probe_wait = self.first_probe_after if drafting else min(self.probe_every, 2 * self._probe_wait)

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
        if step and self.fixed_costs is None:
            self.draft_step = step if self.draft_step is None else (1 - s) * self.draft_step + s * step
        if feedback.verify_seconds > 0:
            self.verify.add(feedback.proposed + 1, feedback.verify_seconds)
        if feedback.proposed > 0 and feedback.predicted_confidence is not None:
            keep = 1 - s / 2  # slower than the other estimates: one round says little
            full = 1.0 if feedback.accepted >= feedback.proposed else 0.0
            self._full_observed = keep * self._full_observed + full
            self._full_predicted = keep * self._full_predicted + feedback.predicted_confidence
        if feedback.draft_steps > 0 and self.verify.known:
            plain_step = self.verify(1)
            if self.fixed_costs is None:
                spent = feedback.draft_seconds + feedback.verify_seconds - plain_step
            else:  # a drafter that stops by confidence ran about one step past its proposal
                steps = min(feedback.draft_steps, feedback.proposed + 1)
                spent = steps * self.draft_step + self.verify(feedback.proposed + 1) - plain_step
            saved = feedback.accepted * plain_step - spent
            if self.net_saving is None or (self._probing and saved > 0):
                self.net_saving = saved  # a probe that pays decides: the text got predictable
            else:
                self.net_saving = (1 - s) * self.net_saving + s * saved
        probed, self._probing = self._probing, False
        if self.draft_step is not None and self.verify.known:
            self.k = self.best_length(self.acceptance, self.draft_step, self.verify)
        if probed:
            self._after_probe()

    def best_length(self, acceptance: float, draft_step: float, verify) -> int:
        """`verify` is the seconds to score n tokens: a callable of n, or a number (flat cost)."""
        cost = verify if callable(verify) else (lambda n, flat=float(verify): flat)
        a = min(max(acceptance, 1e-3), 0.999)
        best_k, best_rate = self.minimum, -1.0
        for k in range(self.minimum, self.maximum + 1):
            expected = (1 - a ** (k + 1)) / (1 - a)
            rate = expected / (k * draft_step + cost(k + 1))
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
