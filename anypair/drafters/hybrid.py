"""HybridDrafter: the prompt-lookup continuation when the current suffix has a long n-gram match
(free, and on code and summaries often right), the draft model otherwise. Both stay in sync."""
from __future__ import annotations

from typing import Optional, Sequence

from anypair.drafters.base import DraftRequest, Drafter
from anypair.drafters.lookup import PromptLookupDrafter
from anypair.types import Proposal


class HybridDrafter(Drafter):
    name = "hybrid"

    def __init__(self, model_drafter: Drafter, lookup: Optional[PromptLookupDrafter] = None,
                 min_match: int = 3, lookup_tokens: int = 10) -> None:
        self.model_drafter = model_drafter
        self.lookup = lookup or PromptLookupDrafter(max_ngram=max(3, min_match))
        self.min_match = min_match
        self.lookup_tokens = lookup_tokens  # a lookup proposal costs no drafting: propose generously

    def start(self, request: DraftRequest) -> None:
        self.lookup.start(request)
        self.model_drafter.start(request)

    def propose(self, max_draft_steps: int, max_target_tokens: int) -> Proposal:
        proposal = self.lookup.propose(max(self.lookup_tokens, max_draft_steps), max_target_tokens,
                                       min_match=self.min_match)
        if len(proposal):
            return proposal
        return self.model_drafter.propose(max_draft_steps, max_target_tokens)

    def commit(self, new_target_ids: Sequence[int]) -> None:
        self.lookup.commit(new_target_ids)
        self.model_drafter.commit(new_target_ids)

    def step_cost_hint(self) -> Optional[float]:
        return self.model_drafter.step_cost_hint()

    @property
    def stops_by_confidence(self) -> bool:
        return self.model_drafter.stops_by_confidence

    def set_stop_confidence(self, threshold: float) -> None:
        self.model_drafter.set_stop_confidence(threshold)

    @property
    def translate_seconds(self) -> float:
        return getattr(self.model_drafter, "translate_seconds", 0.0)
