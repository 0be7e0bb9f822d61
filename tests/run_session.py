"""A session made by hand (not by a generator), run as a batch of one: the tests' way to drive the
loop (`generation.loop.DecodeSession`) on stand-in models without a generator."""
from __future__ import annotations

from anypair.generation.batch import BatchScheduler, CollectingSink, run_rounds
from anypair.generation.loop import DecodeSession
from anypair.types import GenerationResult


def run_alone(session: DecodeSession) -> GenerationResult:
    """`session` run to its end as a batch of one on its own target; its result."""
    scheduler = BatchScheduler(session.target.engine, 1, lambda slot, request: (session, lambda finished: None))
    sink = CollectingSink()
    scheduler.submit(None, sink)  # the session is made already: the scheduler's request is not read
    for _ in run_rounds(scheduler):
        pass
    if sink.error is not None:
        raise sink.error
    assert sink.result is not None
    return sink.result
