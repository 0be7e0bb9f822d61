"""Cost models: what one draft step and one verification pass cost, for policies that weigh a
round's expected gain against its cost. One small interface, two sources:

- `TimedCosts`: measured seconds (the drafter's own step timing, a line fitted to verification
  times: verification is not flat in the tokens scored on CPUs);
- `FixedCosts`: a line fixed in advance (e.g. from the models' sizes, `estimated_step_costs`), in
  units of one single-token target step: rounds planned the same way on a busy machine as on an idle
  one, for comparing drafters without timing noise and for tests that pin a decision on given costs.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional

from anypair.types import RoundFeedback


class CostModel(ABC):
    @property
    @abstractmethod
    def known(self) -> bool:
        """Whether `verify` can be asked yet (a timed model needs one observation)."""

    @abstractmethod
    def draft_step(self) -> Optional[float]:
        """One draft step's cost; None until known."""

    @abstractmethod
    def verify(self, n_scored: float) -> float:
        """Cost of one target pass scoring `n_scored` tokens (the last committed one included)."""

    @abstractmethod
    def verify_slope(self) -> float:
        """What each extra token scored adds to `verify`."""

    @abstractmethod
    def round_cost(self, feedback: RoundFeedback) -> float:
        """What drafting and verifying that round cost."""

    def observe(self, feedback: RoundFeedback) -> None:
        """Learn from a round's timings (a fixed model ignores them)."""

    def reset(self) -> None:
        """New request."""


@dataclass(frozen=True)
class StepCosts:
    """A cost model in units of one single-token target step: a draft step costs `draft_step`,
    verifying n tokens costs `1 + verify_slope * (n - 1)`."""

    draft_step: float
    verify_slope: float

    def __post_init__(self) -> None:
        if not (self.draft_step > 0 and self.verify_slope >= 0):
            raise ValueError(f"StepCosts needs draft_step > 0 and verify_slope >= 0, got {self}")


def layer_overhead_params(engine: str) -> float:
    """Per-layer overhead of a decode step (dispatch, norms, attention, threads waking), in
    parameters' worth of matrix work: the engine's declared figure (`anypair.backends.engines`, each
    fitted on 2 cores; torch's, the dearest, for an engine not registered). With torch's figure on
    every engine a 135M gguf draft looked half a target step (and sampling, then planned with these
    costs, never drafted)."""
    from anypair.backends.engines import layer_overhead_params as declared

    return declared(engine)


def estimated_step_costs(target_params: int, target_layers: int, draft_params: int, draft_layers: int,
                         multi_token_slope: float, target_engine: str = "torch",
                         draft_engine: str = "torch") -> StepCosts:
    """A timing-free cost model from model sizes: a decode step's time taken as proportional to
    its parameters plus a fixed overhead per layer of its engine (what dominates small drafts)."""
    target = target_params + layer_overhead_params(target_engine) * target_layers
    draft = draft_params + layer_overhead_params(draft_engine) * draft_layers
    return StepCosts(draft_step=draft / target, verify_slope=multi_token_slope)


#: the draft prompt window for a draft whose step costs at most REFERENCE_DRAFT_STEP target steps
FULL_DRAFT_WINDOW = 256
REFERENCE_DRAFT_STEP = 0.15
MIN_DRAFT_WINDOW = 64


def draft_prompt_window(draft_step: float) -> int:
    """How many of its prompt's last tokens a draft reads, from its estimated step cost (in target
    steps, `estimated_step_costs`): 256 for a draft of up to 0.15 of a target step, fewer in
    proportion for a dearer draft (the same read budget: about 6 target steps), in multiples of 32,
    at least 64. The read is paid on every request before any round; measured on 8 HumanEval and
    8 QMSum prompts with Qwen2.5-Coder-0.5B drafting for the 1.5B (estimated 0.44 of a step, ~1.9 ms
    a prompt token): median speedup windows 64/128/256: HumanEval 1.01/1.04/1.00x, QMSum
    0.97/0.97/0.94x; SmolLM2-135M (0.11) keeps 256, chosen over 512 and all on CNN/DailyMail and QMSum."""
    if not draft_step > 0:
        raise ValueError(f"draft_step must be > 0 target steps, got {draft_step}")
    tokens = FULL_DRAFT_WINDOW * min(1.0, REFERENCE_DRAFT_STEP / draft_step)
    return max(MIN_DRAFT_WINDOW, 32 * round(tokens / 32))


class FixedCosts(CostModel):
    """`StepCosts` behind the CostModel interface: timings are ignored on purpose."""

    def __init__(self, costs: StepCosts) -> None:
        self.costs = costs

    @property
    def known(self) -> bool:
        return True

    def draft_step(self) -> float:
        return self.costs.draft_step

    def verify(self, n_scored: float) -> float:
        return 1.0 + self.costs.verify_slope * (n_scored - 1)

    def verify_slope(self) -> float:
        return self.costs.verify_slope

    def round_cost(self, feedback: RoundFeedback) -> float:
        # a drafter that stops by confidence ran about one step past its proposal, not the whole budget
        steps = min(feedback.draft_steps, feedback.proposed + 1)
        return steps * self.costs.draft_step + self.verify(feedback.proposed + 1)


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
        return max(1e-6, mean_y + self.slope() * (items - mean_x))


class TimedCosts(CostModel):
    """Seconds as measured: a smoothed draft step and a fitted verification line."""

    def __init__(self, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self.reset()

    def reset(self) -> None:
        self._draft_step: Optional[float] = None
        # the drafter's latest own estimate of a step; it stands until the drafter reports again
        self._reported_step: Optional[float] = None
        self._verify = LinearCost()

    @property
    def known(self) -> bool:
        return self._verify.known

    def draft_step(self) -> Optional[float]:
        return self._draft_step

    def verify(self, n_scored: float) -> float:
        return self._verify(n_scored)

    def verify_slope(self) -> float:
        return self._verify.slope()

    def round_cost(self, feedback: RoundFeedback) -> float:
        # the draft's catch-up read after a pause is what pausing cost, not what this round's drafting costs
        return feedback.draft_seconds - feedback.catch_up_seconds + feedback.verify_seconds

    def observe(self, feedback: RoundFeedback) -> None:
        if feedback.draft_steps:
            self._reported_step = feedback.draft_step_seconds
            step = self._reported_step
            if step is None:  # a drafter that does not time its steps: the round's time spread over them
                step = feedback.draft_seconds / feedback.draft_steps
        else:
            # a round that did not draft measured no step, but the drafter's estimate still holds:
            # counting it keeps the smoothed value where the drafter's own measurements put it
            step = self._reported_step
        if step:
            s = self.smoothing
            self._draft_step = step if self._draft_step is None else (1 - s) * self._draft_step + s * step
        if feedback.verify_seconds > 0:
            self._verify.add(feedback.proposed + 1, feedback.verify_seconds)
