"""Typed records that cross module boundaries: configs, proposals, verification outcomes and
generation results. Target-token ids and draft-token ids never share a field: every id list is
named for the vocabulary it belongs to.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from anypair.errors import InputError


@dataclass(frozen=True)
class SamplingConfig:
    """How the *target's* next-token distribution is shaped. `do_sample=False` is greedy."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        if self.do_sample and not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise InputError(f"temperature must be a finite number > 0 when sampling, got {self.temperature!r}: "
                             "lower values sample closer to greedy; for greedy itself turn sampling off")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise InputError(f"top_k must be an integer >= 0, got {self.top_k!r} (0 turns it off)")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r} (1 turns it off)")


@dataclass
class Proposal:
    """What a drafter proposes for one round, already in the target's id space.

    `target_probs[i]` (sampling only) is the full distribution over target ids that the drafter
    sampled `target_ids[i]` from, after its own temperature/top-k/top-p; shape [n, target_vocab].
    """

    target_ids: list[int]
    target_probs: Optional[torch.Tensor] = None
    source: str = "model"  # which drafter produced it ("model", "lookup", ...)
    # the drafter's own estimate of the probability that every proposed token is kept (model drafters)
    confidence: Optional[float] = None

    def __len__(self) -> int:
        return len(self.target_ids)


@dataclass(frozen=True)
class VerifyOutcome:
    """How many proposed target tokens the target accepted, and the token it adds itself."""

    n_accepted: int
    next_target_id: int


@dataclass
class GenerationStats:
    rounds: int = 0
    draft_tokens_proposed: int = 0  # target tokens proposed to the verifier
    draft_tokens_accepted: int = 0
    new_tokens: int = 0
    prompt_tokens: int = 0
    time_prefill_s: float = 0.0
    time_drafting_s: float = 0.0
    time_translating_s: float = 0.0
    time_verifying_s: float = 0.0
    time_to_first_token_s: float = 0.0
    total_time_s: float = 0.0
    draft_failed: bool = False
    draft_failure_reason: Optional[str] = None
    proposals_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.draft_tokens_accepted / self.draft_tokens_proposed if self.draft_tokens_proposed else 0.0

    @property
    def mean_accepted_per_round(self) -> float:
        return self.draft_tokens_accepted / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.total_time_s if self.total_time_s > 0 else 0.0


@dataclass
class GenerationResult:
    text: str
    target_ids: list[int]  # generated target-token ids (prompt excluded)
    stats: GenerationStats
    finish_reason: str  # "length" | "eos" | "stop_string"
