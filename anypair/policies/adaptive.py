"""The default draft-length policy, whole: `AdaptiveLength` and the parts it is made of.

Its terms, each round: the acceptance estimate (`AcceptanceEstimate`) or the draft's own confidence
(calibrated across vocabularies, `ConfidenceCalibration`), the measured costs of this target and
draft (`policies.costs`), and the probe schedule while drafting pauses (`ProbeSchedule`).

## AdaptiveLength

The default policy: `ConfidenceStopLength` when the drafter stops by its own
confidence, `ExpectedRateLength` otherwise, chosen at each request's reset. Both price rounds with
measured timings, or with `fixed_costs` (see `policies.costs`).

What a step of the target and of the draft cost, and how far the draft's own confidence is from how
often the target keeps its proposals, are facts of the pair on this machine, not of one request:
`PairMemory` keeps them across a generator's requests (`remember`), so a request's first rounds are
priced and stopped with what earlier requests measured instead of priors (a new request started at a
stop confidence of 0.3 and unknown costs, and its first rounds' timings decided its pause). Within a
request the acceptance estimate, the pause and the probes still start afresh: predictability is the
text's.

## ExpectedRateLength

The length that maximises expected committed tokens per unit of cost.

With per-token acceptance a, E[tokens | k] = (1 - a^(k+1)) / (1 - a) (accepted draft tokens plus
the target's own) and cost(k) = k * draft_step + verify(k + 1). k = 0 (no drafting: a plain target
step) is chosen when no draft length pays for itself; the probe schedule then drafts one round now
and then so the acceptance estimate can recover (never stopping: see `ProbeSchedule`).

## ConfidenceStopLength

For drafters that stop by their own confidence. The length is only a cap; the policy's lever is the
stopping point, and pausing drafting while it loses time.

One more draft token is worth proposing while the draft's probability that everything so far is
right, times the value of a token, exceeds what the token costs (a draft step plus its row in the
verification). A token is worth the time a token takes at the rate the request's drafting rounds
commit them (`TokenRate`): what is maximised is tokens per second, and a token that adds p expected
tokens for a cost c raises that rate only where p / c beats it. Valued at a whole target step (the
time saved against the target alone), tokens were overpriced by the speedup itself: beside a 9B
target, where rounds commit ~2 tokens a step, rounds ran longer than paid. Priced at gemma-2-9b's
shape with one measured curve of its forwards (`evaluation/price_lengths.py`, 10 HumanEval prompts,
2 Zen 5 cores), valued at a step: rounds of 7.4-7.6 rows, 46.9 and 50.2 ms a token with two curves
of the machine; valued at the rate: 6.2-6.4 rows, 46.2 and 47.1 (constant 6-step drafts 47.9 and
52.1); on the real default pair 0.97x the time a token, every output the same. Acceptance per
round is far from geometric (boilerplate runs, then hard spots) and the draft's own confidence tells
the two apart, where one averaged acceptance rate cannot.

Each round still pays at least one draft step, so the policy also keeps the net time each drafting
round saved against a plain target step; while that average is negative after at least
`min_rounds` drafting rounds of the request (a pause needs evidence: the first rounds of a request,
its prompt's restatement, are often the hardest to predict) it pauses drafting (length 0) and
probes again (see `ProbeSchedule`: probes back off but never stop); a probe that pays resumes
drafting at once. A probe is judged without the draft's catch-up read of what was committed while
it paused: that read is the price of having paused, not of drafting from here on.

A small draft is often right with little confidence on text the target writes (code boilerplate
in another model's style), so the advice is calibrated online (`ConfidenceCalibration`).

Where the target's engine scores a tree of candidates in one forward, the drafter may add choices
the draft has scored already (its second choice at a step, its first where it stopped): such an
alternative costs no draft step, only its row, so its advice (`branch_confidence`) is the
verification slope over a target step, calibrated the same way.

## ProbeSchedule

While a policy has paused drafting (length 0), one round now and then drafts anyway (a probe), so the
policy notices when the text becomes predictable again.

Probes back off but never stop: the first comes after `first_after` paused rounds, each probe that
fails doubles the wait up to `longest_wait`, and one that resumes drafting resets it. The text of one
request changes predictability many times (a function header, then a loop body that repeats names),
so a request that stopped probing after a few early misses ran the rest as the target alone: on
HumanEval/9 (Qwen2.5-Coder-1.5B, SmolLM2-135M) the policy that gave up after 3 failed probes
proposed 6 tokens in 127 rounds, while a constant 4-token draft kept 69% of its 120 proposed tokens
and took 44 rounds.

What a probe costs bounds the wait: a probe's round costs its draft steps (on the translated path
at least three: the healed tail and two new tokens), the draft's catch-up read of the tokens
committed since it last drafted, and the verification's extra rows. The schedule measures that cost
(in single target steps, smoothed over the request's probes) and waits long enough that
probes spend at most `PROBE_BUDGET` of the paused rounds' time: the longest wait is
cost / PROBE_BUDGET rounds, at least `longest_wait` and at most `LONGEST_PROBE_WAIT` (a longer wait
finds a predictable stretch later: the cap bounds that). A probe of the confidence-stopped policy
drafts at most `PROBE_DRAFT_STEPS` steps: it asks whether the text is predictable again. On summaries
(Qwen2.5-Coder-1.5B, SmolLM2-135M, 2 cores) a probe cost ~0.7 target steps (three ~8 ms draft steps
and a ~10 ms catch-up against a 46 ms step): a probe every ninth round spent ~7% of a request where
drafting never paid again (CNN/DailyMail prompts at 0.91-0.95x the target alone). The cross-request
ledger (`policies.ledger`) is what stops a pair that never pays.

## TokenRate

Tokens a request's drafting rounds commit per target step they cost (accepted proposals plus the
target's own token, over the round's draft steps and verification), smoothed over rounds, from a
prior of one token a step (the target alone's rate, where the value of a token is one step).

## AcceptanceEstimate

The per-token acceptance estimate: the chance the target keeps the next proposed token, given it kept
the ones before (the rate of a geometric process), smoothed over rounds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from anypair.policies.base import DraftLengthPolicy
from anypair.policies.costs import CostModel, FixedCosts, StepCosts, TimedCosts
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


class TokenRate:
    def __init__(self, smoothing: float = 0.3) -> None:
        self.keep = 1 - smoothing / 2  # a ratio of smoothed sums: a lucky round moves it little
        self.reset()

    def reset(self) -> None:
        self.tokens = self.steps = 1.0  # a prior of one round at the target alone's rate

    def observe(self, tokens: int, steps: float) -> None:
        """A drafting round committed `tokens` and cost `steps` plain target steps."""
        self.tokens = self.keep * self.tokens + tokens
        self.steps = self.keep * self.steps + max(steps, 1e-9)

    @property
    def per_step(self) -> float:
        """Tokens a target step, at least one: below it drafting loses and the pause decides."""
        return max(1.0, self.tokens / self.steps)


#: the share of the paused rounds' time that probes may spend (see ProbeSchedule)
PROBE_BUDGET = 0.05
#: the longest wait between probes, however dear a probe is: a predictable stretch is found at most
#: this many rounds late (32 on HumanEval: a prompt at 0.96x its target where a 6-token draft gave 1.3x)
LONGEST_PROBE_WAIT = 16
#: the draft steps of a probe of the confidence-stopped policy (it drafts up to its cap otherwise)
PROBE_DRAFT_STEPS = 4
#: the advice for alternatives before a request's costs are measured (a row at ~5% of a step)
PRIOR_BRANCH_CONFIDENCE = 0.05


class ProbeSchedule:
    def __init__(self, first_after: int = 2, longest_wait: int = 8) -> None:
        if not 1 <= first_after <= longest_wait:
            raise ValueError(f"need 1 <= first_probe_after <= probe_every, got {first_after} and {longest_wait}")
        self.first_after = first_after
        self.longest_wait = longest_wait
        self.probe_cost: Optional[float] = None  # a probe's round over a plain step, in target steps (smoothed)
        self.reset()

    @property
    def wait_cap(self) -> int:
        """The longest wait: `longest_wait`, or longer where a probe costs more than the budget allows."""
        if self.probe_cost is None:
            return self.longest_wait
        return min(LONGEST_PROBE_WAIT, max(self.longest_wait, math.ceil(self.probe_cost / PROBE_BUDGET)))

    def reset(self) -> None:
        self.idle_rounds = 0  # paused rounds since the last probe
        self.wait = self.first_after  # the paused round that probes
        self.failed_in_a_row = 0

    def due(self) -> bool:
        """Whether the next paused round is a probe."""
        return self.idle_rounds + 1 >= self.wait

    def record_paused_round(self) -> bool:
        """A paused round went by; returns whether it was the probe."""
        if self.due():
            self.idle_rounds = 0
            return True
        self.idle_rounds += 1
        return False

    def after_probe(self, drafting_resumed: bool, extra_steps: Optional[float] = None) -> None:
        """A probe ran: whether it resumed drafting, and what its round cost over a plain step (in
        target steps; None: not known)."""
        if extra_steps is not None:
            extra = max(0.0, extra_steps)
            self.probe_cost = extra if self.probe_cost is None else 0.7 * self.probe_cost + 0.3 * extra
        self.wait = self.first_after if drafting_resumed else min(self.wait_cap, 2 * self.wait)
        self.failed_in_a_row = 0 if drafting_resumed else self.failed_in_a_row + 1


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
            self.probes.after_probe(drafting_resumed=self.k > 0,
                                    extra_steps=self.costs.probe_extra(feedback) if self.costs.known else None)


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
        self.rate = TokenRate(smoothing)
        self.probes = ProbeSchedule(first_probe_after, probe_every)
        self.min_rounds = min_rounds
        self.remembers = False  # costs and calibration shared across requests (AdaptiveLength.remember)
        self.reset()

    def reset(self, confidence_stopping: bool = False) -> None:
        if not self.remembers:  # costs and calibration kept across requests in a PairMemory are not reset
            self.costs.reset()
            self.calibration.reset()
        self.rate.reset()  # the text's: a request starts from the target alone's rate
        self.probes.reset()
        self.net_saving: Optional[float] = None  # what a drafting round saved vs a plain target step (smoothed)
        self.drafting_rounds = 0

    @property
    def paused(self) -> bool:
        return self.net_saving is not None and self.net_saving < 0 and self.drafting_rounds >= self.min_rounds

    def next_length(self) -> int:
        if not self.paused:
            return self.maximum
        # a probe asks whether the text is predictable again: a few tokens answer that (a confident but
        # wrong draft probing with the whole cap drafted 10 tokens for 1 kept, ~1.7 target steps)
        return min(self.maximum, PROBE_DRAFT_STEPS) if self.probes.due() else 0

    def token_value(self) -> float:
        """What one more committed token is worth (see the module's docstring): the time a token takes
        at the request's rate, a target step over its tokens a step."""
        return self.costs.verify(1) / self.rate.per_step

    def stop_confidence(self) -> float:
        draft_step = self.costs.draft_step()
        if draft_step is None or not self.costs.known:
            return self.prior_stop_confidence
        token_cost = draft_step + self.costs.verify_slope()
        return min(0.9, max(0.03, token_cost / self.token_value() / self.calibration.ratio))

    def stop_confidences(self) -> tuple[float, ...]:
        """`stop_confidence` for each proposal length up to the cap, raised where that length's own row
        costs more than the slope of 1-5 rows says: a verification's cost is no line (at gemma-2-9b's
        shape on 2 Zen 5 cores rows 9-16 cost ~0.11 of a step each against ~0.04 for rows 2-8, the
        second tile of 8), and priced by the slope alone the rounds ran to 13 rows and took 1.12x the
        time a token of a constant 6-step draft took (replayed, 8 prompts in one quiet hour)."""
        base = self.stop_confidence()
        draft_step = self.costs.draft_step()
        if draft_step is None or not self.costs.known:
            return (base,)
        value = self.token_value() * self.calibration.ratio
        verify = [self.costs.verify(rows) for rows in range(1, self.maximum + 2)]
        # a proposal of n tokens is verified in n + 1 rows: its n-th token adds row n + 1
        return tuple(min(0.9, max(base, (draft_step + max(0.0, verify[n] - verify[n - 1])) / value))
                     for n in range(1, self.maximum + 1))

    def branch_confidence(self) -> Optional[float]:
        """An alternative the draft already scored (a second choice, its first where it stopped)
        costs no draft step, only its row in the verification: worth it where its chance times a
        token's value beats that row's cost."""
        if not self.costs.known:
            return PRIOR_BRANCH_CONFIDENCE
        row_cost = self.costs.verify_slope()
        return min(0.9, max(0.01, row_cost / self.token_value() / self.calibration.ratio))

    def update(self, feedback: RoundFeedback) -> None:
        probed = self.paused and self.probes.record_paused_round()
        self.costs.observe(feedback)
        self.calibration.observe(feedback)
        if feedback.draft_steps > 0 and self.costs.known:
            plain_step, cost = self.costs.verify(1), self.costs.round_cost(feedback)
            saved = feedback.accepted * plain_step - (cost - plain_step)
            self.rate.observe(feedback.accepted + 1, cost / plain_step)
            self.drafting_rounds += 1
            if self.net_saving is None or (probed and saved > 0):
                self.net_saving = saved  # a probe that pays decides: the text got predictable
            else:
                self.net_saving = (1 - self.smoothing) * self.net_saving + self.smoothing * saved
        if probed:
            self.probes.after_probe(drafting_resumed=not self.paused,
                                    extra_steps=self.costs.probe_extra(feedback) if self.costs.known else None)


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

    def stop_confidences(self) -> tuple[float, ...]:
        return self.active.stop_confidences()

    def branch_confidence(self) -> Optional[float]:
        return self.active.branch_confidence()

    def row_price(self) -> Optional[float]:
        return self.active.costs.verify_slope() if self.fixed else None

    def update(self, feedback: RoundFeedback) -> None:
        self.active.update(feedback)
