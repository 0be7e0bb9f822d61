"""The batch's view of drafting: when several requests share each forward of the target, how many
draft tokens each may propose (down to none), and how many rows of a joining prompt a round reads.

A request's own policy prices a round as if it ran alone. Beside others its rows are no longer
nearly free: a forward of n rows costs what the running engine measured for n rows (its
`policies.costs.EngineCosts`, fed by every forward, never a constant: the kernels change under
it), and a draft step of every drafting request is one more shared forward of the draft's engine. `plan_batch_drafts` picks
the one cap on the draft length that gives the batch the most expected tokens per second of a
round (each request keeps its own length below the cap); 0 turns drafting off under load, and each
response's statistics say so.

A joining prompt gets priority (`prompt_rows`): while it is read the others draft nothing (their
draft steps are not shared with the prompt and would stretch every round that carries it), and a
round reads enough of the prompt that the decoding requests' part of the round stays a small share
of it, so the new request's first token comes about as soon as it would alone; the decoding
requests wait at most one such round per prompt chunk.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from anypair.policies.costs import EngineCosts

#: a round that reads a joining prompt gives the decoding requests' rows at most this share of its
#: time, so the prompt is read at (1 - share) of its speed alone: 0.25 keeps the joining request's
#: first token within ~1.33x of its time alone
DECODE_SHARE_WHILE_READING = 0.25


@dataclass(frozen=True)
class DraftingRequest:
    """One decoding request as the batch plans it: the draft length its own policy wants this round
    and its per-token acceptance estimate."""

    wanted: int
    acceptance: float


@dataclass(frozen=True)
class BatchDraftPlan:
    """The cap on every request's draft length for the next round (None: no cap), and why."""

    cap: Optional[int]
    reason: Optional[str] = None


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a round commits with k proposed tokens at per-token acceptance a: the accepted run
    plus the target's own token, (1 - a^(k+1)) / (1 - a)."""
    a = min(max(acceptance, 1e-3), 0.999)
    return (1 - a ** (k + 1)) / (1 - a)


def plan_batch_drafts(requests: Sequence[DraftingRequest], target: EngineCosts, draft: EngineCosts,
                      overhead_s: float = 0.0, reading_prompt: bool = False) -> BatchDraftPlan:
    """The cap K on every request's draft length that gives the most expected tokens per second of
    a round: a round of cap K scores sum(1 + min(wanted, K)) rows in one target forward and runs K
    shared draft forwards (the s-th over the requests still drafting), plus `overhead_s` (what the
    requests' own work between forwards measured). Alone, or before the target's rows were measured,
    no cap: a request alone plans with its own policy. `reading_prompt`: a joining prompt is read in
    the next round, and the decoding requests draft nothing meanwhile (see the module's docstring)."""
    if len(requests) < 2 and not reading_prompt:
        return BatchDraftPlan(None)
    wanted = max((r.wanted for r in requests), default=0)
    if wanted == 0:
        return BatchDraftPlan(None)
    if reading_prompt:
        return BatchDraftPlan(0, "drafting off while a joining request's prompt is read (its first token first)")
    if not target.known or not draft.known:
        return BatchDraftPlan(None)
    best_cap, best_rate = 0, -1.0
    for cap in range(wanted + 1):
        lengths = [min(r.wanted, cap) for r in requests]
        seconds = target.seconds(sum(1 + k for k in lengths)) + overhead_s
        for step in range(1, cap + 1):
            drafting = sum(k >= step for k in lengths)
            if drafting:
                seconds += draft.seconds(drafting)
        tokens = sum(expected_tokens(r.acceptance, k) for r, k in zip(requests, lengths))
        rate = tokens / seconds
        if rate > best_rate * (1 + 1e-9):  # ties go to the shorter draft: the same rate for less work
            best_cap, best_rate = cap, rate
    if best_cap >= wanted:
        return BatchDraftPlan(None)
    n = len(requests)
    measured = (f"{n} requests share each forward (measured: {n} rows {1000 * target.seconds(n):.1f} ms, one "
                f"{1000 * target.seconds(1):.1f} ms, a shared draft step {1000 * draft.seconds(n):.1f} ms; "
                f"acceptance {sum(r.acceptance for r in requests) / n:.2f})")
    if best_cap == 0:
        return BatchDraftPlan(0, f"drafting off under load: {measured}: draft tokens would cost the batch more "
                                 "than they save")
    return BatchDraftPlan(best_cap, f"drafts capped at {best_cap} tokens under load: {measured}")


def prompt_rows(decode_rows: int, target: EngineCosts, overhead_s: float, smallest: int, largest: int) -> int:
    """Rows of a joining prompt one round reads beside `decode_rows` rows of decoding requests (whose
    own work between forwards measured `overhead_s`): the fewest, in steps of `smallest` (the
    engine's own piece: a prompt alone is read that fast), for which what the decoding requests add
    to the round is at most DECODE_SHARE_WHILE_READING of it (measured costs), and at most `largest`
    (the bound on how long one round may keep the decoding requests waiting)."""
    if decode_rows == 0 or not target.known:
        return smallest
    rows = smallest
    while rows < largest:
        added = target.seconds(decode_rows + rows) - target.seconds(rows) + overhead_s
        if added <= DECODE_SHARE_WHILE_READING * (target.seconds(rows) + added):
            break
        rows += smallest
    return min(rows, largest)


class BatchCosts:
    """What the scheduler measured on the running engines, kept across its rounds (and across the
    schedulers of one generator): the target's forwards by rows, the draft's shared steps by rows
    (the forward and each request's work on its logits), and each request's own work between two
    target forwards (verifying, committing, streaming: paid once a round whatever the draft length)."""

    def __init__(self, target_slope: float = 0.0, draft_slope: float = 0.0) -> None:
        """`target_slope`, `draft_slope`: the engines' declared slopes, their cost models' priors."""
        self.target = EngineCosts(prior_slope=target_slope)
        self.draft = EngineCosts(prior_slope=draft_slope)
        self._request_s: Optional[float] = None

    def observe_request_work(self, requests: int, seconds: float) -> None:
        if requests < 1 or not seconds >= 0:
            return
        sample = seconds / requests
        if self._request_s is not None:
            # a round where a request read its draft's prompt (once per request) is not the usual work
            sample = min(sample, 2 * self._request_s)
        self._request_s = sample if self._request_s is None else 0.8 * self._request_s + 0.2 * sample

    @property
    def request_work_s(self) -> float:
        """A request's own work between two target forwards (0 until measured)."""
        return self._request_s or 0.0
