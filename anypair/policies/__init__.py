"""Draft-length policies: how many draft steps the next round may run.

- `ConstantLength`: always k.
- `HeuristicLength`: transformers' schedule: +2 after a fully accepted round, -1 otherwise.
- `ExpectedRateLength`: the k that maximises expected committed tokens per unit of cost, from the
  acceptance estimate and a cost model; k = 0 (pause, with probes that back off and never stop)
  when drafting cannot pay.
- `ConfidenceStopLength`: for drafters that stop by their own confidence: a cap, a calibrated stop
  threshold, and a pause (with probes that back off and never stop) while drafting loses time.
- `AdaptiveLength` (the default): one of the two above, whichever the drafter can use. The default
  policy is one file, `adaptive.py`, with its parts (`AcceptanceEstimate`, `ProbeSchedule`).

Across requests, `ledger.DraftingLedger` remembers whether drafting paid on a generator's recent
requests; only when it lost on most of many of them does the generator run requests without the
draft model (prompt-lookup matches only), exploring now and then.
Within a batch (requests sharing each forward), `batch.plan_batch_drafts` caps every request's length
(to none under load) from the costs measured on the running engines.

Parts: `costs` (`EngineCosts`, the one cost model of an engine, measured by the scheduler; the
CostModel interface the length policies read: `TimedCosts` on the engines' costs, `FixedCosts`). `POLICIES` is the one list of the policies'
names (the CLI's --draft-length, the options' check and `make_policy` read it); `make_policy`
builds one from a name and `num_draft_tokens`.
"""
from __future__ import annotations

from typing import Callable, Optional, Union

from anypair.policies.adaptive import (
    AcceptanceEstimate,
    AdaptiveLength,
    ConfidenceCalibration,
    ConfidenceStopLength,
    ExpectedRateLength,
    ProbeSchedule,
    best_length,
)
from anypair.policies.base import DraftLengthPolicy
from anypair.policies.constant import ConstantLength
from anypair.policies.costs import (
    CostModel,
    EngineCosts,
    FixedCosts,
    StepCosts,
    TimedCosts,
    draft_prompt_window,
    estimated_step_costs,
)
from anypair.policies.heuristic import HeuristicLength
from anypair.policies.ledger import DraftingLedger, LedgerDecision, RequestOutcome
from anypair.types import RoundFeedback

#: a fixed length's default, and the heuristic's start, when num_draft_tokens is not given
DEFAULT_DRAFT_TOKENS = 5

#: the draft-length policies by name, the default first: each builds its policy from
#: `num_draft_tokens` (None: its default): the constant's length, the heuristic's start, or the
#: adaptive policy's cap (where it also starts)
POLICIES: dict[str, Callable[[Optional[int]], DraftLengthPolicy]] = {
    "adaptive": lambda k: AdaptiveLength() if k is None else AdaptiveLength(start=k, maximum=k),
    "heuristic": lambda k: HeuristicLength(start=DEFAULT_DRAFT_TOKENS if k is None else k),
    "constant": lambda k: ConstantLength(DEFAULT_DRAFT_TOKENS if k is None else k),
}


def make_policy(spec: Union[str, DraftLengthPolicy], num_draft_tokens: Optional[int] = None) -> DraftLengthPolicy:
    """A policy by name (`POLICIES`). A policy instance is returned as it is (e.g.
    `AdaptiveLength(fixed_costs=...)`, rounds priced without timings)."""
    if isinstance(spec, DraftLengthPolicy):
        return spec
    if spec not in POLICIES:
        raise ValueError(f"unknown draft-length policy {spec!r}: use one of {', '.join(POLICIES)} "
                         "or a DraftLengthPolicy")
    if num_draft_tokens is not None and num_draft_tokens < 1:
        raise ValueError(f"num_draft_tokens must be >= 1, got {num_draft_tokens} (the target alone: assisted=False)")
    return POLICIES[spec](num_draft_tokens)


__all__ = [
    "AcceptanceEstimate", "AdaptiveLength", "ConfidenceCalibration", "ConfidenceStopLength", "ConstantLength",
    "CostModel", "DraftingLedger", "DraftLengthPolicy", "ExpectedRateLength", "FixedCosts", "HeuristicLength",
    "LedgerDecision", "EngineCosts", "POLICIES",
    "ProbeSchedule", "RequestOutcome", "RoundFeedback", "StepCosts", "TimedCosts", "best_length",
    "draft_prompt_window", "estimated_step_costs", "make_policy",
]
