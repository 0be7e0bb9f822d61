"""The scheduler every request runs through: one request is a batch of one, and several requests
share each forward of the target (continuous batching), each still getting exactly the text it gets
alone.

`AnyPairGenerator.generate`, `stream` and `generate_many` and the server's worker all submit their
requests to a `BatchScheduler` and run its rounds.
Each request is a `DecodeSession` whose loop (`DecodeSession.steps`) yields the target calls it
needs instead of running them; its KV state lives in a slot of its own of the engines (the slot
interface of `backends.base.ModelBackend`: every engine has at least one slot, the GGUF engine as
many as memory holds). A round of `BatchScheduler.round()`:

1. drops the requests whose client left (their slots free at once) and admits waiting ones into free
   slots (a request joins at the next round, never mid-round);
2. gathers every active request's rows: its last token and its proposal, or the next chunk of its
   prompt. A joining prompt has priority: a round reads as many of its rows as keep the decoding
   requests' part of the round small (`policies.batch.prompt_rows`, from the measured row cost;
   a request alone reads its prompt in pieces of the engine's `prompt_rows_per_forward`), oldest
   prompt first, and the others draft nothing while it is read;
3. runs ONE forward over all those rows (`ModelBackend.forward_rows`): each row attends to its own
   slot only, and every row's logits are bitwise those it gets alone (the GGUF engine's kernels are
   batch-invariant per row; an engine of one slot only ever runs one request's rows);
4. plans the next round's drafts for the whole batch (`policies.batch.plan_batch_drafts`: one cap
   on every request's draft length, down to none, from what the engines measured a forward of n
   rows to cost) and hands each request its logits: it verifies, commits, streams its text and
   drafts its next proposal (within the cap) on its own draft slot, each draft step of every
   request again in one shared forward of the draft's engine (the drafts' steps run in lockstep
   before the target's forward), until it yields its next target call.

So a request's text is the one it gets alone, whatever else runs beside it: the same loop, the same
logits; only how much it drafts changes, and drafting never changes the text. Each request is
charged its share of the shared call (`row_share`: the call's base split among its requests, plus
the marginal cost of its own rows, at the slope measured on the engine), and its statistics say how
many rows its rounds shared (`GenerationStats.mean_rows_per_round`), how long a draft it was allowed
(`mean_draft_length`), in how many rounds the batch cut its draft, and why (`batch_draft_note`).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator, Optional, Protocol, Union

import torch

from anypair.backends.base import ModelBackend, SequenceRows
from anypair.drafters.base import DraftCall
from anypair.generation.loop import DecodeSession, Step, TargetCall
from anypair.generation.options import GenerationRequest
from anypair.policies.batch import BatchCosts, DraftingRequest, plan_batch_drafts, prompt_rows
from anypair.types import GenerationResult

#: a round that reads a joining prompt beside decoding requests reads at most this many of the
#: engine's prompt pieces: the bound on how long one round keeps the decoding requests waiting
MAX_PROMPT_PIECES_PER_ROUND = 4
#: prompt rows a round reads beside decoding requests, in steps of this at most: a prompt alone is read in
#: the engine's own larger pieces (the gguf engine's 256 rows: 0.87x the time of 64 at 1,024 tokens), but
#: 256 rows a round would hold every decoding request for seconds on 2 cores
PIECE_BESIDE_DECODING = 64


class QueueFull(Exception):
    """`BatchScheduler.submit` found the queue full."""


class RequestSink(Protocol):
    """Where a request's events go (the server's job, or a `CollectingSink`). The scheduler logs
    nothing: a failed request's error goes to its sink, which reports it (the server logs it, a
    caller in process gets it raised)."""

    def admitted(self) -> None:
        """The request got a slot: it runs from this round on."""

    def text(self, chunk: str) -> None: ...

    def finished(self, result: GenerationResult) -> None: ...

    def failed(self, error: Exception) -> None: ...

    def cancelled(self) -> bool: ...

    def dropped(self) -> None:
        """The request was ended because `cancelled()` said so."""


def row_share(seconds: float, rows: list[int], slope: float) -> list[float]:
    """Each request's share of a shared call of `seconds` over its requests' `rows`: a call of R rows
    costs a one-row step t1 times (1 + slope (R - 1)); the one-row part every call pays, t1 (1 - slope),
    is split evenly, and each row adds t1 * slope to the request it belongs to. The shares sum to
    `seconds`; alone, a request's share is the whole call."""
    total = sum(rows)
    one_row = seconds / (1.0 + slope * (total - 1))
    return [one_row * ((1.0 - slope) / len(rows) + slope * r) for r in rows]


@dataclass
class _Active:
    """A request in a slot: its session's loop, the call it waits on, and how much of its prompt is in."""

    slot: int
    session: DecodeSession
    steps: Generator[Step, Optional[torch.Tensor], None]
    sink: RequestSink
    on_finish: Callable[[DecodeSession], None]
    call: Union[TargetCall, DraftCall, None] = None
    fed: int = 0  # rows of `call` already fed (a prompt read over several forwards)

    @property
    def reading_prompt(self) -> bool:
        """Whether this request waits on its prompt's forward (a draft step or none: it does not)."""
        return isinstance(self.call, TargetCall) and self.call.prefill

    @property
    def decoding(self) -> bool:
        """Whether this request waits on a verification forward of the target."""
        return isinstance(self.call, TargetCall) and not self.call.prefill


@dataclass
class _Waiting:
    request: GenerationRequest
    sink: RequestSink
    enqueued_at: float = field(default_factory=time.perf_counter)


SessionMaker = Callable[[int, GenerationRequest], tuple[DecodeSession, Callable[[DecodeSession], None]]]


class BatchScheduler:
    """Rounds of one shared target forward over every active request (see the module's docstring).

    `make_session(slot, request)` builds a request's session on slot `slot` of the engines and a
    callback for when it ends (the generator's `_batch_session`); `engine` is the target's engine,
    holding at least `max_batch` slots (`AnyPairGenerator.batch_scheduler` checks `max_batch` and
    gives the engines their slots); `costs`: the target's and the draft's cost models, fed by every
    forward here and read by the batch's plan and the row shares (`row_share`) (a generator keeps
    one for all its schedulers, its policies and ledger read them too; None: new ones);
    `draft_engine`: the draft model's engine, whose costs those are (a `DraftCall` runs on its
    slot's engine, this one or a user drafter's own); `queue_size`: see `submit`."""

    def __init__(self, engine: ModelBackend, max_batch: int, make_session: SessionMaker,
                 costs: Optional[BatchCosts] = None, draft_engine: Optional[ModelBackend] = None,
                 queue_size: Optional[int] = None) -> None:
        self.engine = engine
        self.draft_engine = draft_engine
        self.max_batch = max_batch
        self.make_session = make_session
        self.costs = costs if costs is not None else BatchCosts()
        # the one queue: requests wait here for a slot, at most `queue_size` beyond the free slots
        # (None: no bound); `submit` may come from another thread (the server's event loop)
        self.queue_size = queue_size
        self.waiting: deque[_Waiting] = deque()
        self.active: list[_Active] = []
        self.rounds = 0
        self._queue_lock = threading.Condition()

    @property
    def busy(self) -> bool:
        return bool(self.active or self.waiting)

    def submit(self, request: GenerationRequest, sink: RequestSink) -> None:
        """Queue a request (checked once, at its door; from any thread); it joins at the next round
        with a free slot. Raises `QueueFull` when `queue_size` requests wait beyond the free slots."""
        with self._queue_lock:
            free = max(0, self.max_batch - len(self.active))
            if self.queue_size is not None and len(self.waiting) >= self.queue_size + free:
                raise QueueFull(f"{len(self.waiting)} requests already wait for a slot")
            self.waiting.append(_Waiting(request, sink))
            self._queue_lock.notify_all()

    def wait_for_work(self, timeout_s: float) -> bool:
        """Sleep until a request is active or waiting, at most `timeout_s`; whether one is."""
        with self._queue_lock:
            return self._queue_lock.wait_for(lambda: self.busy, timeout_s)

    def wake(self) -> None:
        """End a `wait_for_work` now (the server stops)."""
        with self._queue_lock:
            self._queue_lock.notify_all()

    def close(self) -> None:
        """End every request, running or waiting: each sink is told `dropped()`."""
        with self._queue_lock:
            waiting = list(self.waiting)
            self.waiting.clear()
        for active in list(self.active):
            self._drop(active)
        for queued in waiting:
            queued.sink.dropped()

    # -- a round ------------------------------------------------------------------------------------
    def round(self) -> None:
        """Admit, run one shared forward, plan the next drafts, hand out the logits (a no-op when
        nothing is active)."""
        self._drop_cancelled()
        self._admit()
        while any(isinstance(a.call, DraftCall) for a in self.active):
            self._draft_round()
        if not self.active:
            return
        calls, feeds = self._gather()
        rows = [len(c.ids) for c in calls]
        started = time.perf_counter()
        try:
            outputs = self.engine.forward_rows(calls)
        except Exception as exc:  # a bug or a broken engine: no request of the round can go on
            for active, _ in feeds:
                self._end(active, exc)
            return
        seconds = time.perf_counter() - started
        self.costs.target.observe(sum(rows), seconds)
        shares = row_share(seconds, rows, self.costs.target.relative_slope(sum(rows)))
        self.rounds += 1
        advancing = [(active, logits) for (active, done), logits in zip(feeds, outputs) if done]
        self._plan_drafts([active for active, _ in advancing])
        for (active, _), share in zip(feeds, shares):
            call = active.call
            assert call is not None
            call.charged_seconds += share
            call.batch_size = len(calls)
            call.rows = sum(rows)
        started = time.perf_counter()
        for active, logits in advancing:
            self._advance(active, logits)
        self.costs.observe_request_work(len(advancing), time.perf_counter() - started)

    def _plan_drafts(self, advancing: list[_Active]) -> None:
        """The whole batch's draft plan for the rounds the requests in `advancing` are about to draft
        (`policies.batch.plan_batch_drafts`), set on each session as its cap."""
        reading = any(a.reading_prompt and a not in advancing for a in self.active) \
            or (bool(self.waiting) and len(self.active) < self.max_batch)
        requests = [DraftingRequest(a.session.policy.next_length(), a.session.acceptance.rate) for a in advancing
                    if not a.session.drafter_off]
        plan = plan_batch_drafts(requests, self.costs.target, self.costs.draft,
                                 self.costs.request_work_s * len(advancing), reading_prompt=reading)
        for active in advancing:
            active.session.draft_cap, active.session.draft_cap_reason = plan.cap, plan.reason

    def _draft_round(self) -> None:
        """One draft forward per engine: the next draft step of every request drafting now. A step
        that reads a draft's prompt reads at most the engine's prompt piece a forward; the rest
        waits for the next draft forward, and the request its logits."""
        drafting = [a for a in self.active if isinstance(a.call, DraftCall)]
        engines: dict[int, list[_Active]] = {}
        for active in drafting:  # a user's ModelDrafter may run on an engine of its own
            engines.setdefault(id(active.call.slot.engine), []).append(active)
        for group in engines.values():
            self._draft_forward(group[0].call.slot.engine, group)

    def _draft_forward(self, engine: ModelBackend, drafting: list[_Active]) -> None:
        piece = engine.prompt_rows_per_forward or None
        calls, done = [], []
        for active in drafting:
            ids = active.call.ids[active.fed:active.fed + piece] if piece else active.call.ids[active.fed:]
            active.fed += len(ids)
            done.append(active.fed == len(active.call.ids))
            calls.append(SequenceRows(active.call.slot.index, ids, "last" if done[-1] else "none"))
        rows = [len(c.ids) for c in calls]
        started = time.perf_counter()
        try:
            outputs = engine.forward_rows(calls)
        except Exception as exc:
            for active in drafting:
                self._end(active, exc)
            return
        forward_s = time.perf_counter() - started
        costs = self.costs.draft if engine is self.draft_engine else None  # a user drafter's engine: unmeasured
        slope = costs.relative_slope(sum(rows)) if costs is not None else 0.0
        for active, logits, share, finished in zip(drafting, outputs, row_share(forward_s, rows, slope), done):
            active.call.charged_seconds += share
            if finished:
                self._advance(active, logits)
        # a draft step costs the batch its forward and each request's work on its logits (picking,
        # translating): both grow with the requests drafting
        if costs is not None:
            costs.observe(sum(rows), time.perf_counter() - started)

    def _prompt_rows(self) -> Optional[int]:
        """Prompt rows this round reads over all requests (None: no bound). Alone, the engine's own
        piece (a one-slot engine, always alone, reads a whole prompt in one call as `prefill` does,
        and chunks it inside: its numerics may depend on the chunks). Beside decoding requests, the
        rows that keep their part of the round small (`policies.batch.prompt_rows`), in pieces of
        the engine's own or PIECE_BESIDE_DECODING rows, the smaller, at most MAX_PROMPT_PIECES_PER_ROUND
        of them."""
        own = self.engine.prompt_rows_per_forward
        if len(self.active) == 1 or own is None:
            return own
        piece = min(own, PIECE_BESIDE_DECODING)
        decoding = [a.call for a in self.active if a.decoding]
        decode_rows = sum(len(c.ids) for c in decoding)
        return prompt_rows(decode_rows, self.costs.target, self.costs.request_work_s * len(decoding), piece,
                           MAX_PROMPT_PIECES_PER_ROUND * piece)

    def _gather(self) -> tuple[list[SequenceRows], list[tuple[_Active, bool]]]:
        """Each active request's rows of this round (a prefill gets what remains of `_prompt_rows`)."""
        calls: list[SequenceRows] = []
        feeds: list[tuple[_Active, bool]] = []
        prefill_rows = self._prompt_rows()
        for active in self.active:
            call = active.call
            assert call is not None
            if not call.prefill:
                calls.append(SequenceRows(active.slot, call.ids, "all" if call.all_logits else "last", call.parents))
                feeds.append((active, True))
                continue
            if prefill_rows == 0:
                continue
            end = len(call.ids) if prefill_rows is None else active.fed + prefill_rows
            piece = call.ids[active.fed:end]
            if active.fed == 0:
                self.engine.crop_slot(active.slot, 0)
            active.fed += len(piece)
            if prefill_rows is not None:
                prefill_rows -= len(piece)
            done = active.fed == len(call.ids)
            calls.append(SequenceRows(active.slot, piece, "last" if done else "none"))
            feeds.append((active, done))
        return calls, feeds

    def _advance(self, active: _Active, reply: Optional[torch.Tensor]) -> None:
        """Run the request's loop with `reply` until it needs the target again or ends."""
        try:
            while True:
                step = active.steps.send(reply)
                if isinstance(step, (TargetCall, DraftCall)):
                    active.call, active.fed = step, 0
                    return
                reply = None
                active.sink.text(step)
                if active.sink.cancelled():  # its text is going nowhere: free the slot now
                    self._drop(active)
                    return
        except StopIteration:
            self._end(active, None, finished=True)
        except Exception as exc:
            self._end(active, exc)

    def _end(self, active: _Active, error: Optional[Exception], finished: bool = False) -> None:
        if active in self.active:
            self.active.remove(active)
        active.steps.close()
        if finished and active.session.result is not None:
            active.on_finish(active.session)
            active.sink.finished(active.session.result)
        elif error is not None:
            active.sink.failed(error)

    def _drop(self, active: _Active) -> None:
        """End a request that is not finished (cancelled, or the scheduler closes); its sink is told."""
        self._end(active, None)
        active.sink.dropped()

    def _drop_cancelled(self) -> None:
        """The one way a request is cancelled: its sink says so (`cancelled()`), polled here at each
        round's start and after each piece of its text."""
        for active in [a for a in self.active if a.sink.cancelled()]:
            self._drop(active)
        with self._queue_lock:
            gone = [w for w in self.waiting if w.sink.cancelled()]
            for waiting in gone:
                self.waiting.remove(waiting)
        for waiting in gone:
            waiting.sink.dropped()

    def _next_waiting(self) -> Optional[_Waiting]:
        with self._queue_lock:
            return self.waiting.popleft() if self.waiting else None

    def _admit(self) -> None:
        used = {a.slot for a in self.active}
        free = [s for s in range(self.max_batch) if s not in used]
        while free:
            waiting = self._next_waiting()
            if waiting is None:
                break
            slot = free.pop(0)
            try:
                session, on_finish = self.make_session(slot, waiting.request)
            except Exception as exc:  # a bad request: refused alone (InputError), the others go on
                waiting.sink.failed(exc)
                free.insert(0, slot)
                continue
            active = _Active(slot, session, session.steps(), waiting.sink, on_finish)
            self.active.append(active)
            waiting.sink.admitted()
            self._advance(active, None)  # up to its prefill call
            if active not in self.active:  # it ended at once
                free.insert(0, slot)


class CollectingSink:
    """A RequestSink that keeps what comes: the text not yet taken, the result, or the error."""

    def __init__(self) -> None:
        self.chunks: deque[str] = deque()
        self.result: Optional[GenerationResult] = None
        self.error: Optional[Exception] = None

    def admitted(self) -> None:
        pass

    def text(self, chunk: str) -> None:
        self.chunks.append(chunk)

    def finished(self, result: GenerationResult) -> None:
        self.result = result

    def failed(self, error: Exception) -> None:
        self.error = error

    def cancelled(self) -> bool:
        return False

    def dropped(self) -> None:
        pass


def run_rounds(scheduler: BatchScheduler, streamed: Optional[CollectingSink] = None) -> Iterator[str]:
    """Rounds until every submitted request has ended, yielding `streamed`'s text as each round
    verifies it; the scheduler is closed at the end, or when the caller stops reading (its requests
    then end where they are). A request's error is its sink's to raise."""
    try:
        while scheduler.busy:
            scheduler.round()
            while streamed is not None and streamed.chunks:
                yield streamed.chunks.popleft()
    finally:
        scheduler.close()
