"""DraftingLedger: whether drafting has paid on a generator's recent requests.

Within a request the length policy pauses drafting that loses time, but by then the request has
paid the draft's prompt read and a few rounds. A pair whose draft rarely agrees with the target on
the requests it gets loses that on every request: gemma-3-270m (a base model) drafting for
Qwen2.5-Coder-1.5B-Instruct on chat prompts ran at 0.84x the target alone on HumanEval, 0.94x on
QMSum and CNN/DailyMail, although its policy stopped drafting within each request.

The ledger keeps, across requests, the share of time drafting saved: the savings of recent requests
over what the target alone would have taken for them, both smoothed (a long request weighs more
than a short one: the aim is total time). While that share is negative, requests run the target
alone (no prompt read, no rounds); now and then one drafts anyway (an exploration) so the ledger
notices when drafting pays again: the wait doubles after each exploration that loses, up to
`longest_wait` requests, and one that pays resumes drafting at once.

Terms, per request that drafted:
- *target step*: the target's single-token pass, measured in that request (`target_step_estimate`);
- *saving*: (new tokens - 1) target steps, what the target alone would have spent after its first
  token, minus what the request spent there: the draft's prompt read, drafting, translating and
  verifying. Negative when drafting made the request slower;
- *share*: the saving over what the target alone would have taken (prefill + those steps).

Every request may consult it: greedy and sampling alike, the output is the target's own whether
the request drafts or not (sampling: the keyed verifier, `verifiers.sampling`), so a seed gives the
same text whatever ran before it.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional, Sequence


def target_step_estimate(passes: Sequence[tuple[int, float]], verify_slope: float) -> Optional[float]:
    """The target's single-token step from a request's scoring passes (`(tokens scored, seconds)`):
    the median of its single-token passes when it has two or more (rounds that did not draft),
    else each pass scaled down by the engine's known slope (a pass of n tokens costs about
    1 + verify_slope x (n - 1) steps) and the median of those. None without passes."""
    single = [seconds for scored, seconds in passes if scored == 1]
    if len(single) >= 2:
        return statistics.median(single)
    if not passes:
        return None
    return statistics.median(seconds / (1 + verify_slope * (scored - 1)) for scored, seconds in passes)


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
                passes: Sequence[tuple[int, float]], verify_slope: float) -> Optional[RequestOutcome]:
        """From a finished request: None when it says nothing (no round ran)."""
        step = target_step_estimate(passes, verify_slope)
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
        return (f"drafting lost {-100 * (self.recent_share or 0.0):.0f}% of the time on this generator's recent "
                "requests: this one ran the target alone (drafting is retried every few requests)")


class DraftingLedger:
    """Across requests of one kind (drafter, greedy or sampling): draft, explore or skip.

    `decide()` before a request (it counts a skipped request), `record()` after one that drafted."""

    # smoothing 0.2, a memory of about five requests: with 0.5 (about two) one losing code prompt after
    # two that won turned drafting off for the next two, which ran at 1.68x and 1.53x with it (anypair
    # bench, 10 HumanEval prompts: median 1.03x against 1.25x drafting on every request)
    def __init__(self, smoothing: float = 0.2, first_wait: int = 2, longest_wait: int = 16) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        if not 1 <= first_wait <= longest_wait:
            raise ValueError(f"need 1 <= first_wait <= longest_wait, got {first_wait} and {longest_wait}")
        self.smoothing = smoothing
        self.first_wait = first_wait
        self.longest_wait = longest_wait
        self.forget()

    @property
    def share(self) -> Optional[float]:
        """The share of time drafting saved on recent requests (None: nothing recorded yet)."""
        if not self.recorded:
            return None
        return self.saving_s / self.target_alone_s if self.target_alone_s > 0 else 0.0

    @property
    def losing(self) -> bool:
        share = self.share
        return share is not None and share < 0

    def forget(self) -> None:
        """As new: the next request drafts as if it were the first."""
        # smoothed sums over recorded requests: seconds saved, and what the target alone would have taken
        self.saving_s = self.target_alone_s = 0.0
        self.recorded = False
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
        keep = 1 - self.smoothing
        if not self.recorded or (exploring and outcome.saving_s > 0):
            keep = 0.0  # an exploration that pays decides: these requests got predictable
        self.saving_s = keep * self.saving_s + outcome.saving_s
        self.target_alone_s = keep * self.target_alone_s + outcome.target_alone_s
        self.recorded = True
        if exploring:
            self.wait = self.first_wait if not self.losing else min(self.longest_wait, 2 * self.wait)
