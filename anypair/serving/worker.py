"""One generator, one thread, requests in arrival order.

On a small CPU a second model copy would only halve the speed of both, so the server runs every
request on one worker thread, off the event loop (which keeps answering /health and accepting
requests), from a bounded first-in-first-out queue: a request that finds it full is refused at once
(503 with Retry-After) rather than left waiting without end.

With `max_batch` > 1 (the GGUF engine), up to that many requests run at once by continuous batching
(`generation.batch`): each round the worker admits waiting requests into free slots, and one target
forward scores every running request's rows; each request's text is exactly the one it gets alone.
With `max_batch` 1 (or another engine), one request at a time, each streamed to its end.

The worker streams every request (`generator.stream`), and passes each verified piece of text to
the request's handler on the event loop. A handler whose client went away cancels its job: a
waiting job is skipped, a running one is closed after its next piece of text, which releases the
generator for the next request.
"""
from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Protocol, Union

from anypair.errors import InputError
from anypair.types import GenerationResult

logger = logging.getLogger("anypair.serving")


class ServedGenerator(Protocol):
    """What the server uses of an AnyPairGenerator (a test can stand in for one with these)."""

    last_result: Optional[GenerationResult]
    engines: str
    target: Any  # `.render(prompt, messages) -> ids`, `.has_chat_template`
    target_backend: Any  # `.max_context`

    def stream(self, prompt: Optional[str] = None, **arguments: Any) -> Iterator[str]: ...


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
    """One request on its way through the queue. `arguments` are `generator.stream`'s."""

    request_id: str
    arguments: dict[str, Any]
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
    """The thread that owns the generator. `submit` from the event loop; events come back on the job."""

    def __init__(self, generator: ServedGenerator, queue_size: int, max_batch: int = 1) -> None:
        if queue_size < 1:
            raise InputError(f"the queue size must be at least 1, got {queue_size}")
        if max_batch < 1:
            raise InputError(f"--max-batch must be at least 1 (requests that share each forward), got {max_batch}")
        self.generator = generator
        self.queue_size = queue_size
        self.max_batch = max_batch
        # continuous batching (made on the worker thread: the scheduler gives the engines their slots)
        self._scheduler: Any = None
        self.active = 0  # requests running now
        self._waiting: queue.Queue[Optional[Job]] = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name="anypair-generation", daemon=True)
        self._stopping = False
        self.running: Optional[Job] = None
        self.served = 0
        self.cancelled = 0
        # a moving average of how long a request holds the generator: how long until a slot frees
        self._mean_request_s: Optional[float] = None

    # -- the event loop's side ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what waits and what runs, and end the thread (it is a daemon: a round that does not
        end in time does not keep the process alive)."""
        self._stopping = True
        if self.running is not None:
            self.running.cancel()
        if self._scheduler is not None:
            for active in list(self._scheduler.active):
                active.sink.job.cancel()
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
    def _left_while_queued(self, job) -> bool:
        """A job whose client left before it started: counted, logged, and skipped by either worker loop."""
        if not job.cancelled.is_set():
            return False
        self.cancelled += 1
        logger.info("%s cancelled while queued (the client left)", job.request_id)
        return True

    def _run(self) -> None:
        if self.max_batch > 1:
            self._run_batched()
            return
        while True:
            job = self._waiting.get()
            if job is None or self._stopping:
                return
            if self._left_while_queued(job):
                continue
            self.running = job
            started = time.perf_counter()
            try:
                self._generate(job, queue_wait_s=started - job.enqueued_at)
            except Exception:  # the thread must outlive any one request, or every later one would hang
                logger.exception("%s: the worker could not report on the request", job.request_id)
            finally:
                self.running = None
                took = time.perf_counter() - started
                self._mean_request_s = took if self._mean_request_s is None else 0.8 * self._mean_request_s + 0.2 * took

    def _generate(self, job: Job, queue_wait_s: float) -> None:
        stream = self.generator.stream(**job.arguments)
        left = False
        try:
            for text in stream:
                if job.streams:
                    job.emit(Chunk(text))
                job.chunks_sent += 1
                if job.cancelled.is_set():
                    left = True
                    break
        except InputError as exc:
            param, code = self._blame(job)
            job.emit(Failed(exc, param, code))
            return
        except Exception as exc:  # a bug: the handler answers 500, the log keeps the traceback
            logger.exception("%s failed", job.request_id)
            job.emit(Failed(exc))
            return
        finally:
            stream.close()  # a stream left open would keep its claim on the generator
        if left:
            self.cancelled += 1
            logger.info("%s cancelled after %d chunks (the client left); the generator is free",
                        job.request_id, job.chunks_sent)
        else:
            self.served += 1
            job.emit(Finished(self.generator.last_result, queue_wait_s))

    def _run_batched(self) -> None:
        """Rounds of the batch scheduler; waiting jobs join whenever a slot is free."""
        scheduler = self._scheduler = self.generator.batch_scheduler(self.max_batch)
        try:
            while not self._stopping:
                while len(scheduler.active) + len(scheduler.waiting) < self.max_batch:
                    try:  # block only when nothing runs
                        job = self._waiting.get(block=not scheduler.busy)
                    except queue.Empty:
                        break
                    if job is None or self._stopping:
                        return
                    if self._left_while_queued(job):
                        continue
                    scheduler.submit(job.arguments, _JobSink(self, job))
                try:
                    scheduler.round()
                except Exception:  # the thread must outlive any round, or every later request would hang
                    logger.exception("anypair: a batch round failed")
                self.active = len(scheduler.active)
                self.running = scheduler.active[0].sink.job if scheduler.active else None
        finally:
            for active in scheduler.active:
                active.sink.job.emit(Failed(RuntimeError("the server is shutting down")))
            scheduler.close()

    def _blame(self, job: Job) -> tuple[str, Optional[str]]:
        """The field an InputError of the generator is about. The prompt's length is only measured
        here, on the error path, and on this thread (tokenizers are not shared across threads)."""
        args = job.arguments
        text_field = "messages" if args.get("messages") is not None else "prompt"
        try:
            prompt_tokens = len(self.generator.target.render(args.get("prompt"), args.get("messages")))
            context = self.generator.target_backend.max_context
        except Exception:  # the prompt itself cannot be rendered: that is the error
            return text_field, None
        if prompt_tokens >= context:
            return text_field, "context_length_exceeded"
        if prompt_tokens + args["max_new_tokens"] > context:
            return job.max_tokens_field, "context_length_exceeded"
        return text_field, None


class _JobSink:
    """A batched request's events, handed to its job (the scheduler's RequestSink)."""

    def __init__(self, worker: GenerationWorker, job: Job) -> None:
        self.worker = worker
        self.job = job
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
            param, code = self.worker._blame(self.job)
            self.job.emit(Failed(error, param, code))
        else:
            self.job.emit(Failed(error))

    def dropped(self) -> None:
        self.worker.cancelled += 1
        logger.info("%s cancelled after %d chunks (the client left); its slot is free", self.job.request_id,
                    self.job.chunks_sent)

    def cancelled(self) -> bool:
        return self.job.cancelled.is_set()
