"""Cost models: what a forward of an engine costs, and what one draft step and one verification
pass cost for policies that weigh a round's expected gain against its cost.

- `EngineCosts`: THE cost model of one engine: seconds of a forward by its rows, as measured on the
  running engine (the batch scheduler feeds it every forward), the engine's declared slope its prior
  until two sizes are measured. A generator keeps one for its target and one for its draft; the
  length policy (through `TimedCosts`), the ledger, the batch plan and each request's share of a
  shared forward all read these two.
- `TimedCosts`: the policy's view of the two engines' `EngineCosts` (by hand, without a scheduler,
  the rounds' own timings feed private ones);
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

    def probe_extra(self, feedback: RoundFeedback) -> float:
        """What a probe's round cost over a plain target step, in plain steps: its draft steps, the
        draft's catch-up read (a probe pays it) and the extra rows verified."""
        plain = self.verify(1)
        return (self.round_cost(feedback) - plain) / plain

    def observe(self, feedback: RoundFeedback) -> None:
        """Learn from a round's timings (a fixed model ignores them)."""

    def reset(self) -> None:
        """New request."""


@dataclass(frozen=True)
class StepCosts:
    """A cost model in units of one single-token target step: a draft step costs `draft_step`,
    verifying n tokens costs `1 + verify_slope * (n - 1)`, or, where `verify_rows` is given ((rows,
    cost) pairs, one row at 1.0), the line through those (as `EngineCosts` draws it): a measured
    target's curve, whose rows past its cheap ones may cost more than the slope says."""

    draft_step: float
    verify_slope: float
    verify_rows: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if not (self.draft_step > 0 and self.verify_slope >= 0) or any(rows < 1 or not cost > 0
                                                                       for rows, cost in self.verify_rows):
            raise ValueError(f"StepCosts needs draft_step > 0, verify_slope >= 0 and rows' costs > 0, got {self}")


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
FULL_DRAFT_WINDOW = 640
REFERENCE_DRAFT_STEP = 0.15
#: a dearer draft's window at REFERENCE_DRAFT_STEP, shrinking in proportion above it
DEAR_DRAFT_WINDOW = 256
MIN_DRAFT_WINDOW = 64


def draft_prompt_window(draft_step: float) -> int:
    """How many of its prompt's last tokens a draft reads, from its estimated step cost (in target
    steps, `estimated_step_costs`): 640 for a draft of up to 0.15 of a target step; above it 256 at
    0.15 and fewer in proportion (the same read budget: about 6 target steps), in multiples of 32, at
    least 64. The read is paid on every request before any round.
    Dearer drafts, measured on 8 HumanEval and 8 QMSum prompts with Qwen2.5-Coder-0.5B drafting for the
    1.5B (estimated 0.44 of a step, ~1.9 ms a prompt token): median speedup windows 64/128/256: HumanEval
    1.01/1.04/1.00x, QMSum 0.97/0.97/0.94x (96 now). SmolLM2-135M beside the 1.5B target (0.11), the
    default pair alternating per prompt on 10 CNN/DailyMail prompts (`window_ab_default_pair_zen5.md`):
    640 / 1,024 / all took 0.87x / 0.93x / 0.92x the time a token of 256 (the window before, chosen when
    the draft's step cost three times what it costs now), every output the same; beside gemma-2-9b's
    shape (0.02), priced with one curve, 512 and all beat 256 by 4% and tie (`price_lengths.py`). 640
    bounds the read on long prompts where more did not pay."""
    if not draft_step > 0:
        raise ValueError(f"draft_step must be > 0 target steps, got {draft_step}")
    if draft_step <= REFERENCE_DRAFT_STEP:
        return FULL_DRAFT_WINDOW
    tokens = DEAR_DRAFT_WINDOW * REFERENCE_DRAFT_STEP / draft_step
    return max(MIN_DRAFT_WINDOW, 32 * round(tokens / 32))


class FixedCosts(CostModel):
    """`StepCosts` behind the CostModel interface: timings are ignored on purpose."""

    def __init__(self, costs: StepCosts) -> None:
        self.costs = costs
        self._curve: Optional[EngineCosts] = None
        if costs.verify_rows:
            self._curve = EngineCosts(smoothing=1.0, prior_slope=costs.verify_slope)
            for rows, cost in costs.verify_rows:
                self._curve.observe(rows, cost)

    @property
    def known(self) -> bool:
        return True

    def draft_step(self) -> float:
        return self.costs.draft_step

    def verify(self, n_scored: float) -> float:
        if self._curve is not None:
            return self._curve.seconds(n_scored)
        return 1.0 + self.costs.verify_slope * (n_scored - 1)

    def verify_slope(self) -> float:
        return self.costs.verify_slope

    def round_cost(self, feedback: RoundFeedback) -> float:
        # a drafter that stops by confidence ran about one step past its proposal, not the whole budget
        steps = min(feedback.draft_steps, feedback.proposed + 1)
        return steps * self.costs.draft_step + self.verify(feedback.proposed + 1)


#: the most one timed forward may move an engine's smoothed figure up, as a multiple of it
MAX_JUMP = 3.0


class EngineCosts:
    """Seconds of one forward of an engine by its number of rows, as measured on the running engine:
    a smoothed figure per row count seen, and between two counts the line through them. Past the
    largest count seen a row costs what the last segment's rows cost; below the smallest, the first
    segment's line carries on down (never below the smallest's share per row). With one count only,
    the line through it at `prior_slope`. Verification is not flat in the rows
    scored on a CPU (4 rows measured 1.1-1.9x one on the kernels here): a flat model asks for drafts
    that cannot pay. `prior_slope`: what each row adds, as a share of a one-row forward, until
    both one row and more are measured (the engine's declared figure, `backends.engines`)."""

    def __init__(self, smoothing: float = 0.3, prior_slope: float = 0.0) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self.prior_slope = prior_slope
        self._seconds: dict[int, float] = {}

    @property
    def known(self) -> bool:
        return bool(self._seconds)

    def measured(self, rows: int) -> bool:
        """Whether a forward of exactly `rows` rows has been timed."""
        return rows in self._seconds

    def observe(self, rows: int, seconds: float) -> None:
        if rows < 1 or not seconds > 0:
            return
        old = self._seconds.get(rows)
        if old is not None:
            # one forward stalled by the machine (another process, a page fault storm) counts as at most 3x
            # the smoothed figure: its one sample would otherwise make a step look dear for many requests,
            # and the ledger and the policies read this model; a real slow-down still arrives in a few steps
            seconds = min(seconds, MAX_JUMP * old)
        self._seconds[rows] = seconds if old is None else (1 - self.smoothing) * old + self.smoothing * seconds

    def seconds(self, rows: float) -> float:
        """What a forward of `rows` rows costs (needs `known`)."""
        if not self._seconds:
            raise ValueError("EngineCosts: nothing measured yet")
        counts = sorted(self._seconds)
        if len(counts) == 1:  # one count: the prior's line through it
            only = counts[0]
            return self._seconds[only] * (1 + self.prior_slope * (rows - 1)) / (1 + self.prior_slope * (only - 1))
        if rows <= counts[0]:
            low, high = counts[0], counts[1]
            per_row = max(0.0, (self._seconds[high] - self._seconds[low]) / (high - low))
            return max(self._seconds[low] - per_row * (low - rows), self._seconds[low] * rows / low)
        for low, high in zip(counts, counts[1:]):
            if rows <= high:
                share = (rows - low) / (high - low)
                return self._seconds[low] + share * (self._seconds[high] - self._seconds[low])
        last, before = counts[-1], counts[-2]
        per_row = max(0.0, (self._seconds[last] - self._seconds[before]) / (last - before))
        return self._seconds[last] + per_row * (rows - last)

    def row(self, rows: float) -> float:
        """What one more row adds to a forward of `rows` rows."""
        return max(0.0, self.seconds(rows + 1) - self.seconds(rows))

    def relative_slope(self, rows: int) -> float:
        """A forward of `rows` rows costs a one-row forward times (1 + slope (rows - 1)): the slope
        measured here, the prior until one row and more have both been timed."""
        if rows <= 1 or 1 not in self._seconds or max(self._seconds) < 2:
            return self.prior_slope
        return max(0.0, (self.seconds(rows) / self._seconds[1] - 1.0) / (rows - 1))


class TimedCosts(CostModel):
    """Seconds as measured on the engines: a verification pass of n rows is the target's `EngineCosts`
    for n rows, a draft step the draft's for one row (the drafter's own report until the draft's
    engine has timed a one-row step). A generator's policies read the engines' costs its scheduler
    feeds; made by hand (`target`/`draft` None), the rounds' own timings feed private ones."""

    def __init__(self, smoothing: float = 0.3, target: Optional[EngineCosts] = None,
                 draft: Optional[EngineCosts] = None) -> None:
        self.smoothing = smoothing
        self._fed_by_rounds = target is None  # no scheduler times the forwards: the rounds do
        self.target = target if target is not None else EngineCosts(smoothing)
        self.draft = draft if draft is not None else EngineCosts(smoothing)
        self._reported_step: Optional[float] = None

    def reset(self) -> None:
        """New request: what was measured of the engines stays (it is about them, not the request)."""

    @property
    def known(self) -> bool:
        return self.target.known

    def draft_step(self) -> Optional[float]:
        return self.draft.seconds(1) if self.draft.measured(1) else self._reported_step

    def verify(self, n_scored: float) -> float:
        return self.target.seconds(n_scored)

    def verify_slope(self) -> float:
        """Seconds each extra row adds, over the drafts' usual lengths (1 to 5 rows)."""
        return max(0.0, (self.target.seconds(5) - self.target.seconds(1)) / 4)

    def round_cost(self, feedback: RoundFeedback) -> float:
        # the draft's catch-up read after a pause is what pausing cost, not what this round's drafting costs
        return feedback.draft_seconds - feedback.catch_up_seconds + feedback.verify_seconds

    def probe_extra(self, feedback: RoundFeedback) -> float:
        plain = self.verify(1)
        return (feedback.draft_seconds + feedback.verify_seconds - plain) / plain

    def observe(self, feedback: RoundFeedback) -> None:
        step = feedback.draft_step_seconds
        if feedback.draft_steps and step is None:  # a drafter that does not time its steps: spread the round's
            step = feedback.draft_seconds / feedback.draft_steps
        if step:
            self._reported_step = step
        if not self._fed_by_rounds:
            return
        if feedback.draft_steps and step:
            self.draft.observe(1, step)
        if feedback.verify_seconds > 0:
            self.target.observe(feedback.proposed + 1, feedback.verify_seconds)
