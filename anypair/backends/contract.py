"""The target engine's contract, checked on a real model in the shapes verification uses: scoring k
tokens in one pass after a cached context gives the same choices, and logits within fp32 rounding
noise, as k single-token passes after that context.

Verification scores [last token, *proposal] in one pass (2 to 13 rows for the adaptive policy's
proposals of 1 to 12 tokens) after a cached context that grows through the request, while the target
alone scores one token a step. If an engine's logits for a token depended on the tokens scored beside
it (a per-call activation scale, a GEMM or attention kernel picked by the number of rows or by the
cached length, each with its own rounding), the target's verdict on a draft token would not be the
verdict it reaches alone, and greedy output could drift from the target's own. Kernel libraries do
pick by shape: on an H100, a bf16 target whose 4-row pass after one 60-token context matched its
single-token passes bit for bit (the only shape checked then) wrote another greedy text than its own
once verification scored 5 and 9 rows after longer contexts (a probe run on an H100 with random-weight
Qwen2.5 models and the real tokenizer). The
load-time check therefore scores several row counts after cached contexts of several lengths
(`ContractShapes`), on the member's own device and weights.

An engine that fails this check never serves as an exact target ("auto" falls back; see
`backends.torch_engine`). An engine that declares `bitwise_batch_invariant` (the GGUF engine) is
held to exact equality: zero difference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from anypair.backends.base import ModelBackend

#: logit differences up to this (relative to the largest |logit|) count as fp32 rounding noise;
#: fp16-weight fbgemm on Qwen2.5-1.5B measured ~1e-6 relative, int8 dynamic ~1e-2
RELATIVE_TOLERANCE = 1e-4

#: the probe: ordinary code and prose, long enough (about 400 tokens in the zoo's tokenizers) for the
#: longest cached context of `VERIFICATION_SHAPES` and the rows scored after it
PROBE_TEXT = (
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
    "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "The capital of France is Paris, and the capital of Italy is Rome. "
    "Rivers carried goods between the two long before railways did: grain, wine and salt went "
    "downstream on barges, and cloth, tools and letters came back up.\n\n"
    "class Inventory:\n    def __init__(self):\n        self.items = {}\n\n"
    "    def add(self, name, count=1):\n        self.items[name] = self.items.get(name, 0) + count\n\n"
    "    def remove(self, name, count=1):\n        if self.items.get(name, 0) < count:\n"
    "            raise ValueError(f\"not enough {name}\")\n        self.items[name] -= count\n\n"
    "A cache keeps the results of work already done so that asking again costs little. Its hard "
    "parts are knowing when an entry has gone stale and deciding which entries to drop when memory "
    "runs short; the simplest policy drops the entry used least recently.\n\n"
    "import json\n\ndef load_settings(path):\n    with open(path) as handle:\n"
    "        settings = json.load(handle)\n    settings.setdefault(\"retries\", 3)\n"
    "    settings.setdefault(\"timeout\", 10.0)\n    return settings\n\n"
    "In the spring the village held a market in the square, where farmers sold early vegetables, "
    "honey and cheese, and children ran between the stalls while their parents talked about the "
    "weather, the price of seed and the new bridge over the river."
)


@dataclass(frozen=True)
class ContractShapes:
    """The passes the check compares with single-token passes: each of `rows` tokens scored in one
    pass after each of `contexts` cached positions (contexts longer than the probe or the model
    allows are left out)."""

    contexts: tuple[int, ...]
    rows: tuple[int, ...]


#: what verification meets: [last token, *proposal] for proposals of 1, 2, 3, 4, 7, 8 and 12 tokens
#: (the adaptive policy's cap; each side of the powers of two where GEMM libraries switch kernels), after
#: a short, a middling and a long cached context (attention kernels switch with the cached length too)
VERIFICATION_SHAPES = ContractShapes(contexts=(16, 100, 300), rows=(2, 3, 4, 5, 8, 9, 13))
#: an engine that promises bitwise invariance keeps one fixed reduction order for any number of rows
#: by construction (its tests check every k from 1 to 16 at contexts up to 4,000); at load a smaller
#: set catches a broken build of its kernels: 2 and 5 rows (the AVX-512 tiles' two-row and odd tails)
#: after 60 positions, so the rows at 60-64 end inside an 8-key block and cross the attention's
#: 64-position value block. One context, not two (16 and 64, as before): the second cost a prefill and
#: seven forwards more, 2.4-2.7 s against 1.6 s at gemma-2-9b's shape on 2 cores (Zen 5), the largest
#: part of that target's first load after its tokenizer's conversion
BITWISE_ENGINE_SHAPES = ContractShapes(contexts=(60,), rows=(2, 5))


@dataclass(frozen=True)
class InvarianceReport:
    """Scoring `k` tokens together vs one at a time, after the same `context` cached positions."""

    k: int
    max_abs_diff: float  # largest |logit(together) - logit(alone)| over the k positions
    max_abs_logit: float
    argmax_agrees: bool  # the top token is the same at every position
    bitwise_required: bool = False  # the engine promises identical bits
    context: Optional[int] = None  # cached positions before the k tokens

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
        after = "" if self.context is None else f" after {self.context} cached tokens"
        return (f"batch invariance {verdict} at k={self.k}{after}: max |diff| {self.max_abs_diff:.2e} "
                f"({self.relative_diff:.1e} of the largest logit), argmax {'same' if self.argmax_agrees else 'DIFFERS'}")


@dataclass(frozen=True)
class ContractReport:
    """Every shape checked at load; the contract holds when each one does."""

    checks: tuple[InvarianceReport, ...]

    @property
    def holds(self) -> bool:
        return all(check.holds for check in self.checks)

    @property
    def worst(self) -> InvarianceReport:
        """The first shape that fails, else the one with the largest relative difference."""
        failing = [check for check in self.checks if not check.holds]
        return failing[0] if failing else max(self.checks, key=lambda check: check.relative_diff)

    def describe(self) -> str:
        rows = sorted({check.k for check in self.checks})
        contexts = sorted({check.context for check in self.checks if check.context is not None})
        shapes = f"{', '.join(map(str, rows))} rows after {', '.join(map(str, contexts))} cached tokens"
        worst = self.worst
        if self.holds:
            verdict = "holds bitwise" if worst.bitwise_required else "holds"
            return (f"batch invariance {verdict} for {shapes}: max |diff| {worst.max_abs_diff:.2e} "
                    f"({worst.relative_diff:.1e} of the largest logit)")
        failing = sum(not check.holds for check in self.checks)
        return f"{worst.describe()} ({failing} of {len(self.checks)} shapes fail; checked {shapes})"


def _compare(together: torch.Tensor, alone: torch.Tensor, context: int, bitwise: bool) -> InvarianceReport:
    n = min(together.shape[-1], alone.shape[-1])
    together, alone = together[:, :n], alone[:, :n]
    return InvarianceReport(
        k=together.shape[0], max_abs_diff=float((together - alone).abs().max()),
        max_abs_logit=float(alone.abs().max()),
        argmax_agrees=bool(torch.equal(together.argmax(-1), alone.argmax(-1))),
        bitwise_required=bitwise, context=context)


def _reports_at(backend: ModelBackend, ids: Sequence[int], context: int, rows: Sequence[int]) -> list[InvarianceReport]:
    """With at least `context` positions of `ids` cached: each of `rows` tokens (ids[context:]) scored in
    one pass against the same tokens scored one at a time, all after the first `context` positions."""
    backend.crop(context)
    following = list(ids[context:context + max(rows)])
    alone = torch.stack([backend.extend([token], all_logits=True)[-1].clone() for token in following])
    reports = []
    for k in rows:
        backend.crop(context)
        together = backend.extend(following[:k], all_logits=True)
        reports.append(_compare(together, alone[:k], context, backend.bitwise_batch_invariant))
    return reports


def check_contract(backend: ModelBackend, probe_ids: Sequence[int],
                   shapes: ContractShapes = VERIFICATION_SHAPES) -> ContractReport:
    """The contract in `shapes`: the probe's longest usable context is read in one prefill (as a
    prompt is), and each shorter context crops back into it."""
    widest = max(shapes.rows)
    usable = min(len(probe_ids), backend.max_context)
    contexts = sorted({c for c in shapes.contexts if 1 <= c and c + widest <= usable}, reverse=True)
    if not contexts and usable - widest >= 1:  # a model of a short context: the longest it allows
        contexts = [usable - widest]
    if not contexts:
        raise ValueError(f"the contract's probe has {len(probe_ids)} tokens (model context {backend.max_context}): "
                         f"too few for a cached context and {widest} rows after it")
    ids = list(probe_ids)
    backend.prefill(ids[:contexts[0]])
    try:
        return ContractReport(tuple(report for context in contexts
                                    for report in _reports_at(backend, ids, context, shapes.rows)))
    finally:
        backend.reset()


def contract_shapes(backend: ModelBackend) -> ContractShapes:
    """The shapes the load-time check uses for `backend` (a smaller set where bitwise invariance is
    promised by construction and tested exhaustively)."""
    return BITWISE_ENGINE_SHAPES if backend.bitwise_batch_invariant else VERIFICATION_SHAPES


def check_batch_invariance(backend: ModelBackend, prefix_ids: Sequence[int], probe_ids: Sequence[int]) -> InvarianceReport:
    """Score `probe_ids` after `prefix_ids` in one pass and one token at a time; compare."""
    if not prefix_ids or not probe_ids:
        raise ValueError("check_batch_invariance needs a non-empty prefix and probe")
    backend.prefill(list(prefix_ids))
    try:
        return _reports_at(backend, [*prefix_ids, *probe_ids], len(prefix_ids), (len(probe_ids),))[0]
    finally:
        backend.reset()


def check_every_batch_size(backend: ModelBackend, prefix_ids: Sequence[int], probe_ids: Sequence[int]) -> list[InvarianceReport]:
    """The contract for each k = 1..len(probe_ids): the first k probe tokens scored together against
    each scored alone (an engine may pick its kernels by row count, so every k is checked). The
    prefix is filled once and the single-token run made once; each k then rolls back and scores."""
    if not prefix_ids or not probe_ids:
        raise ValueError("check_every_batch_size needs a non-empty prefix and probe")
    backend.prefill(list(prefix_ids))
    try:
        return _reports_at(backend, [*prefix_ids, *probe_ids], len(prefix_ids), range(1, len(probe_ids) + 1))
    finally:
        backend.reset()
