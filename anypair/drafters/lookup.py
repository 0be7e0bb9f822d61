"""Prompt-lookup drafting: propose the tokens that followed the latest earlier occurrence of the
current n-gram, in the prompt or in the output so far. No model at all.

An index from n-gram to its last end position is updated incrementally as tokens are committed,
so a round costs the same whether 10 or 10,000 tokens came before.
"""
from __future__ import annotations

from typing import Optional, Sequence

from anypair.drafters.base import DraftRequest, Drafter
from anypair.types import DraftBudget, Proposal


class PromptLookupDrafter(Drafter):
    name = "lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._ids: list[int] = []
        # ngram -> index just past its most recent occurrence whose continuation is known
        self._index: dict[tuple[int, ...], int] = {}

    def start(self, request: DraftRequest) -> None:
        self._ids = []
        self._index = {}
        self._append(request.target_prompt_ids)

    def commit(self, new_target_ids: Sequence[int]) -> None:
        self._append(new_target_ids)

    def _append(self, ids: Sequence[int]) -> None:
        for token in ids:
            # before appending, the n-grams ending at the current end get `token` as continuation
            end = len(self._ids)
            for n in range(self.min_ngram, self.max_ngram + 1):
                if end >= n:
                    self._index[tuple(self._ids[end - n : end])] = end
            self._ids.append(token)

    def match(self) -> tuple[int, int]:
        """(length of the longest n-gram match of the current suffix, position its continuation starts), or (0, -1)."""
        ids = self._ids
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(ids) < n:
                continue
            start = self._index.get(tuple(ids[-n:]))
            if start is not None:
                return n, start
        return 0, -1

    def propose(self, budget: DraftBudget, min_match: Optional[int] = None) -> Proposal:
        """The continuation of the longest match (at least `min_match` long, if given), as many
        tokens as the budget has draft steps: a lookup step costs next to nothing."""
        n, start = self.match()
        if n == 0 or (min_match is not None and n < min_match):
            return Proposal([], source=self.name)
        limit = min(budget.max_target_tokens, max(budget.max_draft_steps, 1))
        return Proposal(self._ids[start : start + limit], source=self.name)
