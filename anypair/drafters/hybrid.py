"""HybridDrafter: the prompt-lookup continuation when the current suffix has a long n-gram match
(free, and on code and summaries often right), the draft model otherwise. Both stay in sync."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from anypair.drafters.base import DraftRequest, Drafter
from anypair.drafters.lookup import PromptLookupDrafter
from anypair.drafters.model import ModelDrafter
from anypair.types import DraftBudget, Proposal


class HybridDrafter(Drafter):
    name = "hybrid"

    def __init__(self, model_drafter: ModelDrafter, lookup: Optional[PromptLookupDrafter] = None,
                 min_match: int = 3, lookup_tokens: int = 10) -> None:
        self.model_drafter = model_drafter
        self.lookup = lookup or PromptLookupDrafter(max_ngram=max(3, min_match))
        self.min_match = min_match
        self.lookup_tokens = lookup_tokens  # a lookup proposal costs no drafting: propose generously

    @property
    def stops_by_confidence(self) -> bool:
        return self.model_drafter.stops_by_confidence

    def start(self, request: DraftRequest) -> None:
        self.lookup.start(request)
        self.model_drafter.start(request)

    def propose(self, budget: DraftBudget) -> Proposal:
        lookup_budget = replace(budget, max_draft_steps=max(self.lookup_tokens, budget.max_draft_steps))
        proposal = self.lookup.propose(lookup_budget, min_match=self.min_match)
        if len(proposal):
            # the policy prices draft steps at the model's cost: a free lookup round must not make
            # the model look cheaper
            return replace(proposal, draft_step_seconds=self.model_drafter.step_seconds)
        return self.model_drafter.propose(budget)

    def commit(self, new_target_ids: Sequence[int]) -> None:
        self.lookup.commit(new_target_ids)
        self.model_drafter.commit(new_target_ids)
