"""One generator, one worker thread running the batch scheduler's rounds, requests in arrival order.

On a small CPU a second model copy would only halve the speed of both, so the server runs every
request on one worker thread, off the event loop (which keeps answering /health and accepting
requests). The thread owns the generator's scheduler (`generation.batch`, made once with the
server's `max_batch`): each round it moves waiting requests into free slots, and one target forward
scores every running request's rows; each request's text is exactly the one it gets alone. With
`max_batch` 1 (an engine of one slot), that is one request at a time, each run to its end.

Requests wait for a slot in a bounded first-in-first-out queue: one that finds it full is refused at
once (503 with Retry-After) rather than left waiting without end. Each verified piece of text goes to
the request's handler on the event loop. A handler whose client went away cancels its job: a waiting
job is skipped, a running one ends after its next piece of text, and its slot is free for the next.
"""
from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol, Union

from anypair.errors import InputError
from anypair.generation.options import GenerationRequest
from anypair.types import GenerationResult

if TYPE_CHECKING:
    from anypair.generation.batch import BatchScheduler

logger = logging.getLogger("anypair.serving")


class ServedGenerator(Protocol):
    """What the server uses of an AnyPairGenerator (a test can stand in for one with these)."""

    engines: str
    target: Any  # `.render(prompt, messages) -> ids`, `.has_chat_template`
    target_backend: Any
    max_positions: int  # the most positions (prompt + new tokens) one request may hold

    def batch_scheduler(self, max_batch: int) -> "BatchScheduler": ...


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
        self.generator = generator
        self.queue_size = queue_size
        self.max_batch = max_batch
        self._scheduler = generator.batch_scheduler(max_batch)
        self._running: list[Job] = []  # the jobs in a slot now, in order of admission
        self._waiting: queue.Queue[Optional[Job]] = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name="anypair-generation", daemon=True)
        self._stopping = False
        self.served = 0
        self.cancelled = 0
        # a moving average of how long a request holds a slot: how long until a slot frees
        self._mean_request_s: Optional[float] = None

    @property
    def active(self) -> int:
        """Requests running now."""
        return len(self._running)

    @property
    def running(self) -> Optional[Job]:
        """The longest-running request (None: none runs)."""
        jobs = list(self._running)  # a copy: the worker thread changes the list meanwhile
        return jobs[0] if jobs else None

    # -- the event loop's side ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what waits and what runs, and end the thread (it is a daemon: a round that does not
        end in time does not keep the process alive)."""
        self._stopping = True
        for job in list(self._running):
            job.cancel()
        while True:
            try:
                job = self._waiting.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.emit(Failed(RuntimeError("the server is shutting down")))
        try:
            self._waiting.put_nowait(None)
        except queue.Full:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def submit(self, job: Job) -> None:
        """Queue a job, or raise QueueFull with the seconds after which a retry may find room."""
        if self._stopping:
            raise QueueFull(self.retry_after_s())
        try:
            self._waiting.put_nowait(job)
        except queue.Full:
            raise QueueFull(self.retry_after_s()) from None

    @property
    def waiting(self) -> int:
        return self._waiting.qsize()

    def retry_after_s(self) -> int:
        # a slot frees when a running request ends: at most about one request's time away, sooner
        # when several run at once
        return max(1, math.ceil((self._mean_request_s or 1.0) / self.max_batch))

    # -- the worker thread ----------------------------------------------------------------------
    def _run(self) -> None:
        """Rounds of the scheduler; waiting jobs join whenever a slot is free, and the thread sleeps
        on the queue only when nothing runs."""
        scheduler = self._scheduler
        try:
            while not self._stopping:
                while len(scheduler.active) + len(scheduler.waiting) < self.max_batch:
                    try:
                        job = self._waiting.get(block=not scheduler.busy)
                    except queue.Empty:
                        break
                    if job is None or self._stopping:
                        return
                    if job.cancelled.is_set():
                        self.cancelled += 1
                        logger.info("%s cancelled while queued (the client left)", job.request_id)
                        continue
                    scheduler.submit(job.request, _JobSink(self, job))
                try:
                    scheduler.round()
                except Exception:  # the thread must outlive any round, or every later request would hang
                    logger.exception("anypair: a round of the scheduler failed")
        finally:
            for job in self._running:
                job.emit(Failed(RuntimeError("the server is shutting down")))
            scheduler.close()

    def _ended(self, job: Job) -> None:
        """The job left its slot (finished, failed or dropped)."""
        if job in self._running:
            self._running.remove(job)

    def _blame(self, job: Job) -> tuple[str, Optional[str]]:
        """The field an InputError of the generator is about. The prompt's length is only measured
        here, on the error path, and on this thread (tokenizers are not shared across threads)."""
        request = job.request
        text_field = "messages" if request.messages is not None else "prompt"
        try:
            prompt_tokens = len(self.generator.target.render(request.prompt, request.messages))
            context = self.generator.max_positions
        except Exception:  # the prompt itself cannot be rendered: that is the error
            return text_field, None
        if prompt_tokens >= context:
            return text_field, "context_length_exceeded"
        if prompt_tokens + request.max_new_tokens > context:
            return job.max_tokens_field, "context_length_exceeded"
        return text_field, None


class _JobSink:
    """A request's events, handed to its job (the scheduler's RequestSink)."""

    def __init__(self, worker: GenerationWorker, job: Job) -> None:
        self.worker = worker
        self.job = job
        self.admitted_at = time.perf_counter()

    def admitted(self) -> None:
        self.admitted_at = time.perf_counter()
        self.worker._running.append(self.job)

    def text(self, chunk: str) -> None:
        if self.job.streams:
            self.job.emit(Chunk(chunk))
        self.job.chunks_sent += 1

    def finished(self, result: GenerationResult) -> None:
        worker = self.worker
        worker._ended(self.job)
        worker.served += 1
        took = time.perf_counter() - self.admitted_at
        worker._mean_request_s = took if worker._mean_request_s is None else 0.8 * worker._mean_request_s + 0.2 * took
        self.job.emit(Finished(result, self.admitted_at - self.job.enqueued_at))

    def failed(self, error: Exception) -> None:
        self.worker._ended(self.job)
        if isinstance(error, InputError):
            param, code = self.worker._blame(self.job)
            self.job.emit(Failed(error, param, code))
        else:  # a bug: the handler answers 500, the log keeps the traceback
            logger.error("%s failed", self.job.request_id, exc_info=error)
            self.job.emit(Failed(error))

    def dropped(self) -> None:
        self.worker._ended(self.job)
        self.worker.cancelled += 1
        logger.info("%s cancelled after %d chunks (the client left); its slot is free", self.job.request_id,
                    self.job.chunks_sent)

    def cancelled(self) -> bool:
        return self.job.cancelled.is_set()
