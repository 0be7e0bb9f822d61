"""The verifier interface: given the target's logits over [last committed token, proposal...],
decide how many proposed target tokens to accept and which token the target adds itself."""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from anypair.types import Proposal, VerifyOutcome


class Verifier(ABC):
    @abstractmethod
    def verify(self, target_logits: torch.Tensor, proposal: Proposal) -> VerifyOutcome:
        """`target_logits` has shape [len(proposal) + 1, V]: row i predicts the token after
        position i of [last committed token, *proposal.target_ids]."""

    @abstractmethod
    def first_token(self, target_logits: torch.Tensor) -> int:
        """The target's own choice from one row of logits (no proposal)."""
