"""Greedy exact-match verification: accept the longest prefix of the proposal that equals the
target's own argmax, then add the target's argmax at the first disagreement (or after the end); a
tree's longest path of the target's argmaxes (`walk_tree`)."""
from __future__ import annotations

import torch

from anypair.types import Proposal, VerifyOutcome
from anypair.verifiers.base import Verifier, walk_tree


class GreedyVerifier(Verifier):
    def verify(self, target_logits: torch.Tensor, proposal: Proposal) -> VerifyOutcome:
        target_choice = target_logits.argmax(dim=-1)
        if proposal.parents is not None:
            return walk_tree(proposal, lambda row, depth: int(target_choice[row]))
        n = len(proposal.target_ids)
        if n == 0:
            return VerifyOutcome(0, int(target_choice[0]))
        proposed = torch.tensor(proposal.target_ids, dtype=target_choice.dtype, device=target_choice.device)
        agree = (target_choice[:n] == proposed).to(torch.int64)
        n_accepted = int(agree.cumprod(0).sum())
        return VerifyOutcome(n_accepted, int(target_choice[n_accepted]))

    def first_token(self, target_logits: torch.Tensor) -> int:
        return int(target_logits.argmax(dim=-1))
