"""HybridDrafter: the prompt-lookup continuation when the current suffix has an n-gram match (free to
draft, and on code and summaries often right), the draft model otherwise. Both stay in sync.

The lookup half is the drafter's `free_proposal`: the loop asks for it every round, also in rounds
where the length policy keeps the model from drafting, so a stretch that repeats earlier text (the
answer to HumanEval/9 writes `rolling_max_list` four times) is proposed even while the model's
drafting is paused. Before, the lookup ran only inside a round the policy let draft, and on
HumanEval/9 it never proposed once the policy had paused.

A lookup proposal costs no drafting but is not free to verify: where scoring n tokens costs
1 + verify_slope x (n - 1) target steps, ten wrong tokens cost 1 + 9 x slope steps for one. So the
lookup's length follows its own acceptance in this request (`best_length` with a draft step of ~0).
While the model may draft and the lookup's acceptance is at most the slope, the model drafts
instead; while the model may not, a match is always proposed (one token or more: its row costs a
slope's share of a step, its chance of being kept is the lookup's acceptance).

With no model (`model_drafter=None`) the drafter is the lookup half
alone: what a request runs when the ledger keeps the draft model off (`policies.ledger`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Generator, Optional, Sequence

import torch

from anypair.drafters.base import DraftCall, DraftRequest, Drafter
from anypair.drafters.lookup import PromptLookupDrafter
from anypair.drafters.model import ModelDrafter
from anypair.policies.adaptive import AcceptanceEstimate
from anypair.policies.adaptive import best_length
from anypair.types import DraftBudget, Proposal

#: what a lookup "step" is priced at, in target steps (an index lookup per round, no model)
LOOKUP_STEP_COST = 1e-3


class HybridDrafter(Drafter):
    name = "hybrid"

    def __init__(self, model_drafter: Optional[ModelDrafter], lookup: Optional[PromptLookupDrafter] = None,
                 min_match: int = 3, lookup_tokens: int = 10, verify_slope: float = 0.05,
                 prior_lookup_acceptance: float = 0.7) -> None:
        if verify_slope < 0:
            raise ValueError(f"verify_slope must be >= 0, got {verify_slope}")
        self.model_drafter = model_drafter
        self.lookup = lookup or PromptLookupDrafter(max_ngram=max(3, min_match))
        self.min_match = min_match
        self.lookup_tokens = lookup_tokens  # the longest lookup proposal (or the policy's length, if longer)
        self.verify_slope = verify_slope  # what each extra token scored adds, in target steps
        self.lookup_acceptance = AcceptanceEstimate(prior_lookup_acceptance)
        self._lookup_proposed: list[int] = []  # the last round's lookup proposal, until it is committed

    @property
    def stops_by_confidence(self) -> bool:
        return self.model_drafter is not None and self.model_drafter.stops_by_confidence

    @property
    def offers_free_proposals(self) -> bool:
        return True

    def start(self, request: DraftRequest) -> None:
        self.lookup.start(request)
        self.lookup_acceptance.reset()
        self._lookup_proposed = []
        if self.model_drafter is not None:
            self.model_drafter.start(request)

    def lookup_length(self, budget: DraftBudget) -> int:
        """Tokens a lookup proposal may have now (0: let the model draft): the most expected target
        tokens per verification cost at the lookup's acceptance so far."""
        rate = self.lookup_acceptance.rate
        slope = budget.row_price if budget.row_price is not None else self.verify_slope  # a fixed-cost policy's price
        model_may_draft = budget.max_draft_steps > 0 and self.model_drafter is not None
        if rate <= slope and model_may_draft:  # one proposed token would not pay for its verification
            return 0
        longest = max(self.lookup_tokens, budget.max_draft_steps)
        return best_length(rate, LOOKUP_STEP_COST, lambda scored: 1 + slope * (scored - 1), 1, longest)

    def free_proposal(self, budget: DraftBudget) -> Proposal:
        self._lookup_proposed = []
        length = self.lookup_length(budget)
        proposal = (self.lookup.propose(replace(budget, max_draft_steps=length), min_match=self.min_match)
                    if length else Proposal([], source=self.lookup.name))
        if not len(proposal):
            return proposal
        self._lookup_proposed = list(proposal.target_ids)
        # the policy prices draft steps at the model's cost: a free lookup round must not make the model look cheaper
        step = self.model_drafter.step_seconds if self.model_drafter is not None else None
        return replace(proposal, draft_step_seconds=step)

    def propose(self, budget: DraftBudget) -> Proposal:
        proposal = self.free_proposal(budget)
        if len(proposal) or self.model_drafter is None:
            return proposal
        return self.model_drafter.propose(budget)

    def propose_steps(self, budget: DraftBudget) -> Generator[DraftCall, torch.Tensor, Proposal]:
        """The model's proposal, its forwards yielded for the batch scheduler to run (beside the other
        requests' draft steps, measured and planned like them). The loop asks `free_proposal` (the
        lookup) before this, every round: it is not asked twice."""
        if self.model_drafter is None:
            return Proposal([], source=self.name)
        return (yield from self.model_drafter.propose_steps(budget))

    def commit(self, new_target_ids: Sequence[int]) -> None:
        if self._lookup_proposed:
            proposed = self._lookup_proposed
            kept = next((i for i, (p, t) in enumerate(zip(proposed, new_target_ids)) if p != t),
                        min(len(proposed), len(new_target_ids)))
            self.lookup_acceptance.observe_counts(kept, len(proposed))
            self._lookup_proposed = []
        self.lookup.commit(new_target_ids)
        if self.model_drafter is not None:
            self.model_drafter.commit(new_target_ids)
