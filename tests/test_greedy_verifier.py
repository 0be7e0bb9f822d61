"""The greedy verifier (anypair.verifiers.greedy): the longest prefix equal to the target's argmax,
then the target's own token."""
from __future__ import annotations

import torch

from anypair.types import Proposal
from anypair.verifiers.greedy import GreedyVerifier


def test_greedy_verifier():
    v = GreedyVerifier()
    logits = torch.full((4, 10), -1.0)
    for row, best in enumerate([3, 4, 7, 2]):
        logits[row, best] = 1.0
    assert v.verify(logits, Proposal([3, 4, 5])).n_accepted == 2
    assert v.verify(logits, Proposal([3, 4, 5])).next_target_id == 7
    full = v.verify(logits, Proposal([3, 4, 7]))
    assert (full.n_accepted, full.next_target_id) == (3, 2)
    assert v.verify(logits[:1], Proposal([])).next_target_id == 3
    assert v.verify(logits, Proposal([9, 4, 7])).n_accepted == 0
