"""One interleaved runner for every benchmark: `anypair bench`, evaluation/bench_sampling.py and
evaluation/bench_policies.py run on it; evaluation/run.py (which resumes and records per example)
shares its order and warm-up.

A job is one prompt decoded one way. On each job the baseline (the first method) runs first, since
the others are compared with it, and the others follow in an order that rotates from job to job, so
slow drift of the machine falls on all of them alike. Every method is warmed up on the first job
before anything is timed. Greedy outputs are compared with the baseline's token for token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, TypeVar

from anypair.benchmarking.methods import AnyPairMethod, Decoding, Method, MethodOutput
from anypair.benchmarking.prompts import BenchPrompt
from anypair.benchmarking.report import RunFigures

T = TypeVar("T")


@dataclass(frozen=True)
class Job:
    """One prompt, decoded one way, by every method."""

    example: int  # the prompt's index: repeats of a prompt share it, and speedups pair runs by it
    prompt: BenchPrompt
    decoding: Decoding


@dataclass
class JobRuns:
    """One finished job; both lists follow the order the methods were given, not the order they ran."""

    job: Job
    runs: list[RunFigures]
    outputs: list[MethodOutput]


class OutputMismatch(Exception):
    """A greedy method wrote other tokens than the baseline: for a lossless method, a bug."""


# called after each timed generation, untimed: (job, output) -> the target's mean log-probability
TargetLogprob = Callable[[Job, MethodOutput], Optional[float]]


def interleaved_order(methods: Sequence[T], position: int) -> list[T]:
    """The baseline (the first method) first, the rest rotated by `position`."""
    baseline, others = list(methods[:1]), list(methods[1:])
    if others:
        shift = position % len(others)
        others = others[shift:] + others[:shift]
    return baseline + others


def warm_up(methods: Sequence[Method], prompt: BenchPrompt, decoding: Decoding) -> None:
    """One untimed generation per method: first calls pay for allocations and kernel choices. anypair
    then forgets what that request measured of drafting (it would count as drafting that lost)."""
    for method in methods:
        method.generate(prompt, decoding)
        if isinstance(method, AnyPairMethod):
            method.generator.forget_drafting_history()


def run_interleaved(methods: Sequence[Method], jobs: Sequence[Job], *, progress: bool = True,
                    description: str = "benchmarking", target_logprob: Optional[TargetLogprob] = None,
                    after_job: Optional[Callable[[JobRuns], None]] = None,
                    stop_on_mismatch: bool = False) -> list[JobRuns]:
    """Every job through every method, interleaved; `methods[0]` is the baseline. `after_job` sees
    each finished job (to print it or save what was measured so far); `stop_on_mismatch` raises
    `OutputMismatch` as soon as an output that must be the baseline's differs from it."""
    from rich.progress import track

    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise ValueError(f"methods need distinct names, got {names}")
    if not methods or not jobs:
        return []
    warm_up(methods, jobs[0].prompt, jobs[0].decoding)
    results = []
    for position, job in track(list(enumerate(jobs)), description=description, disable=not progress):
        greedy = not job.decoding.do_sample
        figures: dict[str, RunFigures] = {}
        outputs: dict[str, MethodOutput] = {}
        baseline_ids: list[int] = []
        for method in interleaved_order(methods, position):
            output = outputs[method.name] = method.generate(job.prompt, job.decoding)
            is_baseline = method is methods[0]
            if is_baseline:
                baseline_ids = output.target_ids
            # greedy: every method must write the target's text; sampling: anypair's keyed sampler
            # gives the target's own text for a seed with or without drafting (other engines sample
            # with generators of their own, so their texts are not comparable)
            comparable = greedy or (method.keyed_sampling and methods[0].keyed_sampling)
            identical = output.target_ids == baseline_ids if comparable and not is_baseline else None
            if stop_on_mismatch and identical is False:
                raise OutputMismatch(f"{method.name} changed the output of example {job.example}: "
                                     "that is a bug, not a figure")
            logprob = target_logprob(job, output) if target_logprob is not None else None
            figures[method.name] = RunFigures.of(method.name, job.example, output, identical, logprob)
        done = JobRuns(job, [figures[name] for name in names], [outputs[name] for name in names])
        results.append(done)
        if after_job is not None:
            after_job(done)
    return results
