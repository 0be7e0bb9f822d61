"""DraftingLedger: whether drafting pays for this pair, judged across many requests.

Within a request the length policy pauses drafting that loses time and probes again (it never gives
up), but every request still pays the draft's prompt read and its probes. A pair whose draft never
agrees with the target loses that on every request: gemma-3-270m (a base model) drafting for
Qwen2.5-Coder-1.5B-Instruct ran at 0.84x the target alone on HumanEval, 0.94x on QMSum and
CNN/DailyMail. The ledger exists for such a pair, and only for it: it skips drafting only on
evidence from many requests, never after one or two bad prompts. (The previous ledger smoothed over
about five requests and skipped while the smoothed saving was negative: on 10 HumanEval prompts
with the default pair it ran the target alone on 6, including prompts where drafting kept 74% of
its tokens.)

Terms, per request that drafted:
- *target step*: the target's single-token pass, as its engine's cost model measured it
  (`policies.costs.EngineCosts`, fed by the scheduler);
- *saving*: (new tokens - 1) target steps, what the target alone would have spent after its first
  token, minus what the request spent there: the draft's prompt read, drafting, translating and
  verifying. Negative when drafting made the request slower;
- *share*: the saving over what the target alone would have taken (prefill + those steps);
- *evidence*: the last `window` requests that drafted. The pair is *losing* when at least
  `min_requests` are in it, their summed saving is below `losing_share` of their summed
  target-alone time (a long request weighs more: the aim is total time), and at most
  `max_paying_share` of them saved time at all. Then requests run without the draft model (no prompt
  read, no model rounds; the prompt-lookup drafter still proposes where the text repeats itself),
  and one request now and then drafts anyway (an exploration): the wait doubles from `first_wait`
  skipped requests up to `longest_wait` while explorations lose, and resets when one pays. Its
  outcome joins the evidence like any other, so a pair turns back on once enough of them pay.

Every request may consult it: greedy and sampling alike, the output is the target's own whether
the request drafts or not (sampling: the keyed verifier, `verifiers.sampling`), so a seed gives the
same text whatever ran before it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from anypair.policies.adaptive import PairMemory


@dataclass(frozen=True)
class RequestOutcome:
    """What one drafting request cost and saved (see the module's terms)."""

    saving_s: float
    target_alone_s: float

    @property
    def share(self) -> float:
        return self.saving_s / self.target_alone_s if self.target_alone_s > 0 else 0.0

    @classmethod
    def measure(cls, new_tokens: int, prefill_s: float, spent_after_first_token_s: float,
                target_step_s: Optional[float]) -> Optional[RequestOutcome]:
        """From a finished request and the target's one-row step (its engine's measured cost, None:
        not measured): None when it says nothing (no round ran)."""
        step = target_step_s
        if step is None or new_tokens < 2:
            return None
        plain_decode_s = (new_tokens - 1) * step
        return cls(plain_decode_s - spent_after_first_token_s, prefill_s + plain_decode_s)


@dataclass(frozen=True)
class LedgerDecision:
    draft: bool
    exploring: bool = False  # drafting although the ledger says it has been losing
    recent_share: Optional[float] = None  # the ledger's smoothed share when it decided

    def skip_note(self) -> Optional[str]:
        """Why this request runs the target alone (None: it drafts)."""
        if self.draft:
            return None
        return (f"drafting lost {-100 * (self.recent_share or 0.0):.0f}% of the time on most of this generator's "
                "recent requests: this one ran without the draft model (prompt lookup only; drafting is retried "
                "every few requests)")


class DraftingLedger:
    """Across requests of one kind (drafter, greedy or sampling): draft, explore or skip.

    `decide()` before a request (it counts a skipped request), `record()` after one that drafted."""

    def __init__(self, window: int = 16, min_requests: int = 6, losing_share: float = -0.03,
                 max_paying_share: float = 0.25, first_wait: int = 4, longest_wait: int = 32) -> None:
        if not 1 <= min_requests <= window:
            raise ValueError(f"need 1 <= min_requests <= window, got {min_requests} and {window}")
        if not 0 <= max_paying_share < 1:
            raise ValueError(f"max_paying_share must be in [0, 1), got {max_paying_share}")
        if not 1 <= first_wait <= longest_wait:
            raise ValueError(f"need 1 <= first_wait <= longest_wait, got {first_wait} and {longest_wait}")
        self.window = window
        self.min_requests = min_requests
        self.losing_share = losing_share
        self.max_paying_share = max_paying_share
        self.first_wait = first_wait
        self.longest_wait = longest_wait
        self.forget()

    @property
    def share(self) -> Optional[float]:
        """The share of time drafting saved over the evidence (None: nothing recorded yet)."""
        if not self.outcomes:
            return None
        alone = sum(o.target_alone_s for o in self.outcomes)
        return sum(o.saving_s for o in self.outcomes) / alone if alone > 0 else 0.0

    @property
    def losing(self) -> bool:
        """Drafting lost on most of many recent requests, and in total."""
        if len(self.outcomes) < self.min_requests:
            return False
        paying = sum(o.saving_s > 0 for o in self.outcomes) / len(self.outcomes)
        share = self.share
        return share is not None and share < self.losing_share and paying <= self.max_paying_share

    def forget(self) -> None:
        """As new: the next requests draft as if they were the first."""
        self.outcomes: deque[RequestOutcome] = deque(maxlen=self.window)
        self.wait = self.first_wait  # the skipped request after which the next one explores
        self.skipped = 0  # requests skipped since drafting last ran

    def decide(self) -> LedgerDecision:
        if not self.losing:
            return LedgerDecision(draft=True, recent_share=self.share)
        if self.skipped >= self.wait:
            self.skipped = 0
            return LedgerDecision(draft=True, exploring=True, recent_share=self.share)
        self.skipped += 1
        return LedgerDecision(draft=False, recent_share=self.share)

    def record(self, outcome: RequestOutcome, exploring: bool) -> None:
        self.outcomes.append(outcome)
        if exploring:
            self.wait = self.first_wait if outcome.saving_s > 0 else min(self.longest_wait, 2 * self.wait)


@dataclass
class DraftingHistory:
    """What earlier requests of one kind (drafter, greedy or sampled) measured of drafting: whether it
    paid (the ledger) and the pair's step costs and the draft's calibration (the length policy's memory,
    `policies.adaptive.PairMemory`). A generator keeps one per kind."""

    ledger: DraftingLedger = field(default_factory=DraftingLedger)
    memory: PairMemory = field(default_factory=PairMemory)
