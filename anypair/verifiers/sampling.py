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

import torch

from anypair.sampling.warping import make_generator, sample_from_probs, warp_logits
from anypair.types import Proposal, SamplingConfig, VerifyOutcome
from anypair.verifiers.base import Verifier


class SamplingVerifier(Verifier):
    """Rejection-sampling verifier for one request; every draw goes through `generator`."""

    def __init__(self, cfg: SamplingConfig, generator: torch.Generator | None = None) -> None:
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
        target_probs = warp_logits(target_logits[: n + 1], self.cfg)
        if n == 0:
            return VerifyOutcome(0, sample_from_probs(target_probs[0], self.generator))

        draft_probs = self._draft_probs(proposal, target_probs.shape[-1])
        n_accepted = self._count_accepted(target_probs[:n], draft_probs, proposal.target_ids)
        if n_accepted == n:
            return VerifyOutcome(n, sample_from_probs(target_probs[n], self.generator))
        residual = self._residual(target_probs[n_accepted], draft_probs[n_accepted])
        return VerifyOutcome(n_accepted, sample_from_probs(residual, self.generator))

    @staticmethod
    def _draft_probs(proposal: Proposal, target_rows: int) -> torch.Tensor:
        """q as float64 [n, target_rows]; one-hot rows for a deterministic proposal."""
        n = len(proposal.target_ids)
        if proposal.target_probs is None:
            one_hot = torch.zeros(n, target_rows, dtype=torch.float64)
            one_hot[torch.arange(n), torch.tensor(proposal.target_ids)] = 1.0
            return one_hot
        draft_probs = proposal.target_probs
        if draft_probs.shape != (n, target_rows):
            raise ValueError(
                f"proposal.target_probs has shape {tuple(draft_probs.shape)}, expected ({n}, {target_rows}): "
                "the drafter must carry its distributions into the target's logit rows"
            )
        return draft_probs.to(torch.float64)

    def _count_accepted(self, target_probs: torch.Tensor, draft_probs: torch.Tensor, target_ids: list[int]) -> int:
        n = len(target_ids)
        rows = torch.arange(n)
        ids = torch.tensor(target_ids, dtype=torch.long)
        p_token = target_probs[rows, ids].to(torch.float64)
        q_token = draft_probs[rows, ids]
        if bool((q_token <= 0).any()):
            raise ValueError("a proposed token has zero probability under the distribution it was drawn from: drafter bug")
        uniforms = torch.rand(n, generator=self.generator, dtype=torch.float64)
        # u < p/q, written without the division: accepts with probability min(1, p/q)
        accepted = uniforms * q_token < p_token
        return int(accepted.to(torch.int64).cumprod(0).sum())

    @staticmethod
    def _residual(target_row: torch.Tensor, draft_row: torch.Tensor) -> torch.Tensor:
        """max(0, p - q), unnormalised (multinomial normalises). If rounding left it all zero
        (p == q, where a rejection has probability ~0 anyway) p itself is the right law."""
        residual = (target_row.to(torch.float64) - draft_row).clamp_min_(0.0)
        if not float(residual.sum()) > 0.0:
            return target_row
        return residual
