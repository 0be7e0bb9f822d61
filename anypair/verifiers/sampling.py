"""Position-keyed speculative sampling: the target keeps its own samples, token for token.

Terms. p_n: the target's warped distribution (temperature, top-k, top-p, as transformers shapes
them) at generated position n, given the tokens before it. E_n: the request's Exp(1) noise for
position n (`sampling.keyed.PositionNoise`, fixed by the request's key and n alone). The target's
sample at n is x_n = argmax_v p_n(v) / E_n(v), which follows p_n exactly (`sampling.keyed`).

Rule. For a proposal d_1..d_k scored in one pass starting at position n: d_j is accepted iff
d_j = x_{n+j-1}; at the first j where it is not, the target's x_{n+j-1} is emitted instead and the
round ends; when all k are accepted, x_{n+k} (the bonus token) is emitted too. So every emitted token
is the target's own keyed sample: the text equals what the target alone writes with the same seed,
whatever was proposed and however the proposal was made (a draft's distributions, its confidence
stop, a lookup, nothing at all; a tree of candidates, where each row's x picks the child followed). A proposal is kept with the target's probability of it when the
draft's guess is independent of the noise (p(d) for a greedy draft: what rejection sampling keeps
of a point mass), and more often when the draft reads the same noise (`sample_draft_token`).
"""
from __future__ import annotations

from typing import Optional

import torch

from anypair.sampling.keyed import PositionNoise, draw_request_key, keyed_sample
from anypair.sampling.warping import make_generator, warp_logits
from anypair.types import Proposal, SamplingConfig, VerifyOutcome
from anypair.verifiers.base import Verifier, walk_tree


class SamplingVerifier(Verifier):
    """Keyed-sampling verifier. `first_token` starts a request: it draws the request's noise key
    from `generator` (seeded: the same key, so the same text) and sets the position to 0; each
    `verify` then continues from the position after the last token it emitted.

    `noise` is shared with a drafter that couples its proposals to the target's noise."""

    def __init__(self, cfg: SamplingConfig, generator: Optional[torch.Generator] = None,
                 noise: Optional[PositionNoise] = None) -> None:
        if not cfg.do_sample:
            raise ValueError("SamplingVerifier needs cfg.do_sample=True; use GreedyVerifier for greedy decoding")
        self.cfg = cfg
        self.generator = generator if generator is not None else make_generator(cfg.seed)
        self.noise = noise if noise is not None else PositionNoise()
        self.position = 0  # the generated position the next emitted token takes

    def target_sample(self, target_logits_row: torch.Tensor, position: int) -> int:
        """x_position: the target's keyed sample from one row of its logits."""
        probs = warp_logits(target_logits_row.reshape(-1), self.cfg)
        return keyed_sample(probs, self.noise.exponential(position, probs.shape[0], probs.device))

    def first_token(self, target_logits: torch.Tensor) -> int:
        self.noise.rekey(draw_request_key(self.generator))
        self.position = 1
        return self.target_sample(target_logits, 0)

    def verify(self, target_logits: torch.Tensor, proposal: Proposal) -> VerifyOutcome:
        if self.noise.key is None:
            raise RuntimeError("SamplingVerifier.verify before first_token: a request starts with the target's first token")
        n = len(proposal.target_ids)
        if target_logits.dim() != 2 or target_logits.shape[0] < n + 1:
            raise ValueError(
                f"target logits must have shape [{n + 1}, V] for a proposal of {n} tokens, got {tuple(target_logits.shape)}"
            )
        if proposal.parents is not None:  # a tree: the child holding the target's keyed sample, row after row
            outcome = walk_tree(proposal, lambda row, depth: self.target_sample(target_logits[row], self.position + depth))
            self.position += outcome.n_accepted + 1
            return outcome
        # rows are warped one at a time, only as far as the first disagreement: a top-p sort of a
        # 150k-row vocabulary costs more than the rest of the round's bookkeeping
        for offset, proposed_id in enumerate(proposal.target_ids):
            sampled = self.target_sample(target_logits[offset], self.position + offset)
            if not self._keeps(proposed_id, sampled):
                self.position += offset + 1
                return VerifyOutcome(offset, sampled)
        bonus = self.target_sample(target_logits[n], self.position + n)
        self.position += n + 1
        return VerifyOutcome(n, bonus)

    def _keeps(self, proposed_id: int, sampled_id: int) -> bool:
        """A proposed token is kept iff it is the target's own sample at its position."""
        return proposed_id == sampled_id
