"""The verifier interface: given the target's logits over [last committed token, proposal...],
decide how many proposed target tokens to accept and which token the target adds itself."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

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


def walk_tree(proposal: Proposal, choose: Callable[[int, int], int]) -> VerifyOutcome:
    """A tree's verification (`Proposal.parents`): from the root (row 0, the last committed token),
    the target's own choice at a row (`choose(row, depth)`) moves to the child proposing it, until no
    child does; that choice is the token the target adds. Every emitted token is the target's choice
    at its row, and a row's logits are those of the same row in a chain: the text is the target's."""
    children: dict[int, list[int]] = {}
    for index, parent in enumerate(proposal.parents or ()):
        children.setdefault(parent, []).append(index)
    node, path = -1, []
    while True:
        token = choose(node + 1, len(path))
        node = next((c for c in children.get(node, ()) if proposal.target_ids[c] == token), None)
        if node is None:
            return VerifyOutcome(len(path), token, tuple(path))
        path.append(node)
