"""The batch's view of drafting: when several requests share each forward of the target, how many
draft tokens each may propose (down to none), and how many rows of a joining prompt a round reads.

A request's own policy prices a round as if it ran alone. Beside others its rows are no longer
nearly free: a forward of n rows costs what the running engine measured for n rows (`RowCosts`,
fed by every shared forward, never a constant: the kernels change under it), and a draft step of
every drafting request is one more shared forward of the draft's engine. `plan_batch_drafts` picks
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

#: a round that reads a joining prompt gives the decoding requests' rows at most this share of its
#: time, so the prompt is read at (1 - share) of its speed alone: 0.25 keeps the joining request's
#: first token within ~1.33x of its time alone
DECODE_SHARE_WHILE_READING = 0.25


class RowCosts:
    """Seconds of one forward by its number of rows, as measured on the running engine: a smoothed
    figure per row count seen, and between two counts the line through them. Past the largest count
    seen a row costs what the last segment's rows cost; below the smallest, the first segment's line
    carries on down (never below the smallest's share per row). With one count only, a forward
    costs its share per row: the dearest guess for more rows and the cheapest for fewer, so the
    batch tries the smaller forward and measures it."""

    def __init__(self, smoothing: float = 0.3) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self._seconds: dict[int, float] = {}

    @property
    def known(self) -> bool:
        return bool(self._seconds)

    def observe(self, rows: int, seconds: float) -> None:
        if rows < 1 or not seconds > 0:
            return
        old = self._seconds.get(rows)
        self._seconds[rows] = seconds if old is None else (1 - self.smoothing) * old + self.smoothing * seconds

    def seconds(self, rows: float) -> float:
        """What a forward of `rows` rows costs (needs `known`)."""
        if not self._seconds:
            raise ValueError("RowCosts: nothing measured yet")
        counts = sorted(self._seconds)
        if len(counts) == 1:
            return self._seconds[counts[0]] * rows / counts[0]
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

    def relative_slope(self, rows: int) -> Optional[float]:
        """A forward of `rows` rows costs a one-row forward times (1 + slope (rows - 1)): the slope
        measured here (None: not measured at both sizes yet)."""
        if rows <= 1 or 1 not in self._seconds or max(self._seconds) < 2:
            return None
        one = self._seconds[1]
        return max(0.0, (self.seconds(rows) / one - 1.0) / (rows - 1))


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


def plan_batch_drafts(requests: Sequence[DraftingRequest], target: RowCosts, draft: RowCosts,
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


def prompt_rows(decode_rows: int, target: RowCosts, overhead_s: float, smallest: int, largest: int) -> int:
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

    def __init__(self) -> None:
        self.target = RowCosts()
        self.draft = RowCosts()
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
