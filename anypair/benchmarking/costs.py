"""Step costs measured on a loaded backend: what scoring k new tokens in one pass costs the target
(what speculative decoding's verification pays) and what one draft step costs. `anypair bench`
records both beside its figures."""
from __future__ import annotations

import statistics
import time
from typing import Sequence

from anypair.backends.base import ModelBackend


def verification_costs(backend: ModelBackend, prompt_ids: Sequence[int],
                       ks: Sequence[int] = (1, 2, 3, 4, 6, 8, 12, 16), repeats: int = 5) -> dict[int, float]:
    """Median ms to score k new tokens in one pass after `prompt_ids`, per k (the cache is cropped back each time)."""
    backend.prefill(list(prompt_ids))
    start = backend.cached_length
    filler = list(prompt_ids[-16:]) * 2
    costs = {}
    for k in ks:
        samples = []
        for _ in range(repeats + 1):  # the first call of each k is not counted: it may allocate
            t0 = time.perf_counter()
            backend.extend(filler[:k], all_logits=True)
            samples.append(time.perf_counter() - t0)
            backend.crop(start)
        costs[k] = 1000 * statistics.median(samples[1:])
    backend.reset()
    return costs


def verification_costs_by_context(backends: dict, text_ids: Sequence[int], contexts: Sequence[int],
                                  ks: Sequence[int] = (1, 2, 4, 8, 16), repeats: int = 5) -> dict:
    """{context: {engine name: {k: ms}}}: each backend scores k tokens after the same `context` ids
    (real text, repeated as needed), engines interleaved per context so drift falls on both."""
    table: dict = {}
    for context in contexts:
        prompt = (list(text_ids) * (context // max(len(text_ids), 1) + 1))[:context]
        table[context] = {name: verification_costs(backend, prompt, ks, repeats) for name, backend in backends.items()}
    return table


def draft_step_ms(backend: ModelBackend, prompt_ids: Sequence[int], steps: int = 16) -> float:
    """Median ms of one single-token draft step after `prompt_ids`."""
    backend.prefill(list(prompt_ids))
    samples = []
    token = int(prompt_ids[-1])
    for _ in range(steps):
        t0 = time.perf_counter()
        backend.extend([token])
        samples.append(time.perf_counter() - t0)
    backend.reset()
    return 1000 * statistics.median(samples[2:])
