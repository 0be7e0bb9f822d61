"""The target engine's contract, checked on a real model: scoring k tokens in one pass gives the
same choices, and logits within fp32 rounding noise, as k single-token passes.

Verification scores [last token, *proposal] in one pass, while the target alone scores one token a
step. If an engine's logits for a token depended on the tokens scored beside it (a per-call
activation scale, a GEMM path picked by row count with other rounding), the target's verdict on a
draft token would not be the verdict it reaches alone, and greedy output could drift from the
target's own. An engine that fails this check never serves as a target ("auto" falls back). An engine that
declares `bitwise_batch_invariant` (the GGUF engine) is held to exact equality: zero difference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from anypair.backends.base import ModelBackend

#: logit differences up to this (relative to the largest |logit|) count as fp32 rounding noise;
#: fp16-weight fbgemm on Qwen2.5-1.5B measured ~1e-6 relative, int8 dynamic ~1e-2
RELATIVE_TOLERANCE = 1e-4

#: the probe: ordinary code and prose, long enough for the attention to span a few hundred positions
PROBE_TEXT = (
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
    "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "The capital of France is Paris, and the capital of Italy is Rome. "
)


@dataclass(frozen=True)
class InvarianceReport:
    """Scoring `k` tokens together vs one at a time, after the same prefix."""

    k: int
    max_abs_diff: float  # largest |logit(together) - logit(alone)| over the k positions
    max_abs_logit: float
    argmax_agrees: bool  # the top token is the same at every position
    bitwise_required: bool = False  # the engine promises identical bits

    @property
    def relative_diff(self) -> float:
        return self.max_abs_diff / max(self.max_abs_logit, 1e-6)

    @property
    def holds(self) -> bool:
        if self.bitwise_required:
            return self.argmax_agrees and self.max_abs_diff == 0.0
        return self.argmax_agrees and self.relative_diff <= RELATIVE_TOLERANCE

    def describe(self) -> str:
        verdict = ("holds bitwise" if self.bitwise_required else "holds") if self.holds else "FAILS"
        return (f"batch invariance {verdict} at k={self.k}: max |diff| {self.max_abs_diff:.2e} "
                f"({self.relative_diff:.1e} of the largest logit), argmax {'same' if self.argmax_agrees else 'DIFFERS'}")


def check_batch_invariance(backend: ModelBackend, prefix_ids: Sequence[int], probe_ids: Sequence[int]) -> InvarianceReport:
    """Score `probe_ids` after `prefix_ids` in one pass and one token at a time; compare."""
    if not prefix_ids or not probe_ids:
        raise ValueError("check_batch_invariance needs a non-empty prefix and probe")
    backend.prefill(list(prefix_ids))
    start = backend.cached_length
    together = backend.extend(list(probe_ids), all_logits=True).clone()
    backend.crop(start)
    alone = torch.stack([backend.extend([token], all_logits=True)[-1].clone() for token in probe_ids])
    backend.reset()
    n = min(together.shape[-1], alone.shape[-1])
    together, alone = together[:, :n], alone[:, :n]
    return InvarianceReport(
        k=len(probe_ids),
        max_abs_diff=float((together - alone).abs().max()),
        max_abs_logit=float(alone.abs().max()),
        argmax_agrees=bool(torch.equal(together.argmax(-1), alone.argmax(-1))),
        bitwise_required=backend.bitwise_batch_invariant,
    )


def check_every_batch_size(backend: ModelBackend, prefix_ids: Sequence[int], probe_ids: Sequence[int]) -> list[InvarianceReport]:
    """The contract for each k = 1..len(probe_ids): the first k probe tokens scored together against
    each scored alone (an engine may pick its kernels by row count, so every k is checked). The
    prefix is filled once and the single-token run made once; each k then rolls back and scores."""
    if not prefix_ids or not probe_ids:
        raise ValueError("check_every_batch_size needs a non-empty prefix and probe")
    backend.prefill(list(prefix_ids))
    start = backend.cached_length
    alone = torch.stack([backend.extend([token], all_logits=True)[-1].clone() for token in probe_ids])
    reports = []
    for k in range(1, len(probe_ids) + 1):
        backend.crop(start)
        together = backend.extend(list(probe_ids[:k]), all_logits=True)
        n = min(together.shape[-1], alone.shape[-1])
        first_k = alone[:k, :n]
        reports.append(InvarianceReport(
            k=k, max_abs_diff=float((together[:, :n] - first_k).abs().max()), max_abs_logit=float(first_k.abs().max()),
            argmax_agrees=bool(torch.equal(together[:, :n].argmax(-1), first_k.argmax(-1))),
            bitwise_required=backend.bitwise_batch_invariant))
    backend.reset()
    return reports
