"""One generator, one thin worker thread running the batch scheduler's rounds.

On a small CPU a second model copy would only halve the speed of both, so the server runs every
request on one worker thread, off the event loop (which keeps answering /health and accepting
requests). The thread owns the generator's scheduler (`generation.batch`, made once with the
server's `max_batch` and queue size) and only runs its rounds: each round moves waiting requests into
free slots, and one target forward scores every running request's rows; each request's text is
exactly the one it gets alone. With `max_batch` 1 (an engine of one slot), one request at a time.

The queue is the scheduler's (first in, first out, bounded): a request that finds it full is refused
at once (503 with Retry-After) rather than left waiting without end. Each verified piece of text goes
to the request's handler on the event loop through the request's sink (`_JobSink`). A handler whose
client went away cancels its job (a flag the scheduler polls, its one way to cancel): a waiting job
is skipped, a running one ends after its next piece of text, and its slot is free for the next.
"""
from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol, Union

from anypair.errors import InputError
from anypair.generation.batch import QueueFull as SchedulerQueueFull
from anypair.generation.options import GenerationRequest
from anypair.types import GenerationResult

if TYPE_CHECKING:
    from anypair.generation.batch import BatchScheduler

logger = logging.getLogger("anypair.serving")


class ServedGenerator(Protocol):
    """What the server uses of an AnyPairGenerator (a test can stand in for one with these)."""

    engines: str
    target: Any  # `.has_chat_template`, `.renders_tools`, `.hf_tokenizer`, `.tokenizer`

    def batch_scheduler(self, max_batch: int, queue_size: Optional[int] = None) -> "BatchScheduler": ...


@dataclass(frozen=True)
class Chunk:
    """A piece of verified text."""

    text: str


@dataclass(frozen=True)
class Finished:
    result: GenerationResult
    queue_wait_s: float


@dataclass(frozen=True)
class Failed:
    """The generator refused the request (`InputError`, with the field to blame) or broke."""

    error: Exception
    param: Optional[str] = None
    code: Optional[str] = None


Event = Union[Chunk, Finished, Failed]


@dataclass
class Job:
    """One request on its way through the queue: its typed request, built and checked at the door."""

    request_id: str
    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    max_tokens_field: str = "max_tokens"  # the body's name of max_new_tokens, for errors
    # a non-streamed answer needs no pieces: every hand-over wakes the event loop's thread, which
    # on a 2-core CPU preempts one of the kernels' threads mid-step (serving cost 12% of tok/s)
    streams: bool = True
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    enqueued_at: float = field(default_factory=time.perf_counter)
    chunks_sent: int = 0

    def emit(self, event: Event) -> None:
        """Hand an event to the handler (called from the worker thread)."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    def cancel(self) -> None:
        """The client is gone: skip the job if it waits, stop it after its next piece if it runs."""
        self.cancelled.set()


class QueueFull(Exception):
    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class GenerationWorker:
    """The thread that owns the generator. `submit` from the event loop; events come back on the job.

    The generator's scheduler is made here, so a `max_batch` it refuses fails when the server is
    made, not on the thread."""

    def __init__(self, generator: ServedGenerator, queue_size: int, max_batch: int = 1) -> None:
        if queue_size < 1:
            raise InputError(f"the queue size must be at least 1, got {queue_size}")
        self.queue_size = queue_size
        self.max_batch = max_batch
        # the one queue is the scheduler's: `queue_size` requests may wait beyond the free slots
        self._scheduler = generator.batch_scheduler(max_batch, queue_size=queue_size)
        self._thread = threading.Thread(target=self._run, name="anypair-generation", daemon=True)
        self._stopping = False
        self.served = 0
        self.cancelled = 0
        # a moving average of how long a request holds a slot: how long until a slot frees
        self._mean_request_s: Optional[float] = None

    def _running_jobs(self) -> list[Job]:
        """The jobs in a slot now, in order of admission (read from the scheduler's requests)."""
        sinks = [active.sink for active in list(self._scheduler.active)]  # a copy: the thread changes it
        return [sink.job for sink in sinks if isinstance(sink, _JobSink)]

    @property
    def active(self) -> int:
        """Requests running now."""
        return len(self._running_jobs())

    @property
    def running(self) -> Optional[Job]:
        """The longest-running request (None: none runs)."""
        jobs = self._running_jobs()
        return jobs[0] if jobs else None

    @property
    def waiting(self) -> int:
        return len(self._scheduler.waiting)

    # -- the event loop's side ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what waits and what runs, and end the thread (it is a daemon: a round that does not
        end in time does not keep the process alive). Each job still waiting or running is told the
        server is shutting down when the thread closes the scheduler."""
        self._stopping = True
        self._scheduler.wake()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        else:  # never started: nothing else will close it
            self._scheduler.close()

    def submit(self, job: Job) -> None:
        """Queue a job, or raise QueueFull with the seconds after which a retry may find room."""
        if self._stopping:
            raise QueueFull(self.retry_after_s())
        try:
            self._scheduler.submit(job.request, _JobSink(self, job))
        except SchedulerQueueFull:
            raise QueueFull(self.retry_after_s()) from None

    def retry_after_s(self) -> int:
        # a slot frees when a running request ends: at most about one request's time away, sooner
        # when several run at once
        return max(1, math.ceil((self._mean_request_s or 1.0) / self.max_batch))

    # -- the worker thread ----------------------------------------------------------------------
    def _run(self) -> None:
        """The scheduler's rounds while it has requests; asleep on its queue while it has none."""
        scheduler = self._scheduler
        try:
            while not self._stopping:
                if not scheduler.wait_for_work(timeout_s=1.0):
                    continue
                try:
                    scheduler.round()
                except Exception:  # the thread must outlive any round, or every later request would hang
                    logger.exception("anypair: a round of the scheduler failed")
        finally:
            scheduler.close()

    @staticmethod
    def _blame(job: Job, error: InputError) -> tuple[str, Optional[str]]:
        """The body's field an InputError of the generator names (its name in the body: max_tokens or
        max_completion_tokens), and its code; an error naming none blames the prompt."""
        text_field = "messages" if job.request.messages is not None else "prompt"
        field = {"max_new_tokens": job.max_tokens_field, None: text_field}.get(error.field, error.field)
        return field, error.code


class _JobSink:
    """A request's events, handed to its job (the scheduler's RequestSink)."""

    def __init__(self, worker: GenerationWorker, job: Job) -> None:
        self.worker = worker
        self.job = job
        self.admitted_at = time.perf_counter()

    def admitted(self) -> None:
        self.admitted_at = time.perf_counter()

    def text(self, chunk: str) -> None:
        if self.job.streams:
            self.job.emit(Chunk(chunk))
        self.job.chunks_sent += 1

    def finished(self, result: GenerationResult) -> None:
        worker = self.worker
        worker.served += 1
        took = time.perf_counter() - self.admitted_at
        worker._mean_request_s = took if worker._mean_request_s is None else 0.8 * worker._mean_request_s + 0.2 * took
        self.job.emit(Finished(result, self.admitted_at - self.job.enqueued_at))

    def failed(self, error: Exception) -> None:
        if isinstance(error, InputError):
            param, code = self.worker._blame(self.job, error)
            self.job.emit(Failed(error, param, code))
        else:  # a bug: the handler answers 500, the log keeps the traceback
            logger.error("%s failed", self.job.request_id, exc_info=error)
            self.job.emit(Failed(error))

    def dropped(self) -> None:
        if not self.job.cancelled.is_set():  # the scheduler closed with the request in it: the server stops
            self.job.emit(Failed(RuntimeError("the server is shutting down")))
            return
        self.worker.cancelled += 1
        logger.info("%s cancelled after %d chunks (the client left); its slot is free", self.job.request_id,
                    self.job.chunks_sent)

    def cancelled(self) -> bool:
        return self.job.cancelled.is_set()
