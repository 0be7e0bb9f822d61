"""Prompt-lookup drafting (anypair.drafters.lookup): the n-gram index against a brute-force search,
and the proposal it makes within a round's budget."""
from __future__ import annotations

import random

from anypair.drafters.base import DraftRequest
from anypair.drafters.lookup import PromptLookupDrafter
from anypair.types import DraftBudget


def brute_force_match(ids, max_n, min_n):
    for n in range(max_n, min_n - 1, -1):
        if len(ids) < n:
            continue
        suffix = ids[-n:]
        for end in range(len(ids) - 1, n - 1, -1):  # latest earlier occurrence with a continuation
            if ids[end - n:end] == suffix:
                return n, end
    return 0, -1


def test_lookup_matches_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        ids = [rng.randrange(6) for _ in range(rng.randrange(1, 40))]
        d = PromptLookupDrafter(max_ngram=3, min_ngram=1)
        d.start(DraftRequest(ids[:5]))
        d.commit(ids[5:])
        assert d.match() == brute_force_match(ids, 3, 1)
        n, start = d.match()
        proposal = d.propose(DraftBudget(max_draft_steps=4, max_target_tokens=3))
        assert proposal.target_ids == (ids[start:start + 3] if n else [])


def test_lookup_proposes_the_continuation():
    d = PromptLookupDrafter()
    d.start(DraftRequest([1, 2, 3, 4, 5, 6, 9, 1, 2]))
    d.commit([3])
    assert d.propose(DraftBudget(8, 8)).target_ids == [4, 5, 6, 9, 1, 2, 3]


def test_lookup_min_match_refuses_short_matches():
    d = PromptLookupDrafter(max_ngram=3)
    d.start(DraftRequest([1, 2, 3, 4, 5, 9, 2, 3]))
    assert d.match()[0] == 2
    assert d.propose(DraftBudget(8, 8), min_match=3).target_ids == []
    assert d.propose(DraftBudget(8, 8), min_match=2).target_ids == [4, 5, 9, 2, 3]
