"""Speculative rejection sampling (Leviathan et al. 2023; Chen et al. 2023): the target keeps its
own sampling distribution whatever the draft proposed.

Position i of a proposal, drawn from the draft's q_i, is accepted with probability
min(1, p_i(t)/q_i(t)); the first rejected position is replaced by a sample from the normalised
residual max(0, p_i - q_i); when everything is accepted the target adds a bonus sample from
p_n. Each emitted token is then distributed exactly as p given the tokens before it.
A proposal without distributions (a deterministic drafter, e.g. prompt lookup) is a point mass:
q_i is one-hot at the proposed token, which the same rule handles.
"""
from __future__ import annotations

from typing import Optional

import torch

from anypair.sampling.warping import make_generator, sample_from_probs, warp_logits
from anypair.types import Proposal, SamplingConfig, VerifyOutcome
from anypair.verifiers.base import Verifier


class SamplingVerifier(Verifier):
    """Rejection-sampling verifier for one request; every draw goes through `generator`."""

    def __init__(self, cfg: SamplingConfig, generator: Optional[torch.Generator] = None) -> None:
        if not cfg.do_sample:
            raise ValueError("SamplingVerifier needs cfg.do_sample=True; use GreedyVerifier for greedy decoding")
        self.cfg = cfg
        self.generator = generator if generator is not None else make_generator(cfg.seed)

    def first_token(self, target_logits: torch.Tensor) -> int:
        return sample_from_probs(warp_logits(target_logits.reshape(-1), self.cfg), self.generator)

    def verify(self, target_logits: torch.Tensor, proposal: Proposal) -> VerifyOutcome:
        n = len(proposal.target_ids)
        if target_logits.dim() != 2 or target_logits.shape[0] < n + 1:
            raise ValueError(
                f"target logits must have shape [{n + 1}, V] for a proposal of {n} tokens, got {tuple(target_logits.shape)}"
            )
        target_rows = target_logits.shape[-1]
        check_draft_probs(proposal, target_rows)
        # rows are warped one at a time, only as far as the first rejection: a top-p sort of a
        # 150k-row vocabulary costs more than the rest of the round's bookkeeping
        for position, target_id in enumerate(proposal.target_ids):
            target_probs = warp_logits(target_logits[position], self.cfg)
            draft_probs = draft_row(proposal, position, target_rows)
            if self._accepts(target_probs[target_id], draft_probs[target_id]):
                continue
            return VerifyOutcome(position, sample_from_probs(residual(target_probs, draft_probs), self.generator))
        bonus_probs = warp_logits(target_logits[n], self.cfg)
        return VerifyOutcome(n, sample_from_probs(bonus_probs, self.generator))

    def _accepts(self, target_prob: torch.Tensor, draft_prob: torch.Tensor) -> bool:
        """True with probability min(1, p/q) (u < p/q, written without the division)."""
        if not float(draft_prob) > 0.0:
            raise ValueError("a proposed token has zero probability under the distribution it was drawn from: drafter bug")
        uniform = float(torch.rand(1, generator=self.generator, dtype=torch.float64))
        return uniform * float(draft_prob) < float(target_prob)


def check_draft_probs(proposal: Proposal, target_rows: int) -> None:
    if proposal.target_probs is None:
        return
    expected = (len(proposal.target_ids), target_rows)
    if tuple(proposal.target_probs.shape) != expected:
        raise ValueError(
            f"proposal.target_probs has shape {tuple(proposal.target_probs.shape)}, expected {expected}: "
            "the drafter must carry its distributions into the target's logit rows"
        )


def draft_row(proposal: Proposal, position: int, target_rows: int) -> torch.Tensor:
    """q at `position` in float64; one-hot at the proposed token for a deterministic proposal."""
    if proposal.target_probs is not None:
        return proposal.target_probs[position].to(torch.float64)
    point_mass = torch.zeros(target_rows, dtype=torch.float64)
    point_mass[proposal.target_ids[position]] = 1.0
    return point_mass


def residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """max(0, p - q), unnormalised (the sampler normalises). If rounding left it all zero
    (p == q, where a rejection has probability ~0 anyway) p itself is the right law."""
    leftover = (target_probs.to(torch.float64) - draft_probs).clamp_min_(0.0)
    if not float(leftover.sum()) > 0.0:
        return target_probs
    return leftover
