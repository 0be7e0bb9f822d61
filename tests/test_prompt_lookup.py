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


class FakeModelDrafter:
    """Stands in for the draft model in a HybridDrafter: proposes [99] and counts its calls."""

    stops_by_confidence = False
    step_seconds = 0.003

    def __init__(self):
        self.proposals = 0

    def start(self, request):
        pass

    def propose(self, budget):
        from anypair.types import Proposal

        self.proposals += 1
        return Proposal([99], source="model")

    def commit(self, ids):
        pass


def test_hybrid_lookup_length_follows_its_acceptance_and_its_verification_cost():
    from anypair.drafters.hybrid import HybridDrafter

    budget = DraftBudget(max_draft_steps=5, max_target_tokens=100)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] * 3 + [1, 2, 3]  # "1 2 3" continues "4 5 6 ..."

    model = FakeModelDrafter()
    dear = HybridDrafter(model, verify_slope=0.25)  # the gguf engine on a CPU: 10 tokens cost 3.25 steps
    dear.start(DraftRequest(prompt))
    first = dear.propose(budget)
    assert first.source == "lookup" and first.target_ids == [4, 5]  # the prior acceptance 0.7 pays for 2
    # the target disagrees at once, round after round: once the lookup's acceptance is at most the
    # slope, a lookup token would not pay for its verification and the model drafts instead
    proposal = first
    for wrong in range(50, 56):
        dear.commit([wrong])
        dear.lookup.commit([1, 2, 3])  # the suffix matches again (only the lookup's index sees these)
        proposal = dear.propose(budget)
        if proposal.source == "model":
            break
    assert proposal.source == "model" and dear.lookup_acceptance.rate <= 0.25 and model.proposals == 1

    cheap = HybridDrafter(FakeModelDrafter(), verify_slope=0.05)  # scoring ten tokens costs 1.45 steps
    cheap.start(DraftRequest(prompt))
    lengths = []
    for own in range(50, 54):
        proposal = cheap.propose(budget)
        lengths.append(len(proposal))
        cheap.commit(list(proposal.target_ids) + [own])  # all kept, then the target's own token
        cheap.lookup.commit([1, 2, 3])
    assert lengths[0] >= 4 and lengths[-1] == 10  # the cap: lookup_tokens (over the policy's 5)


def test_hybrid_prices_its_lookup_rows_at_the_policys_fixed_price():
    """A policy priced at fixed costs (a replay at a 9B target's size) hands its row price to the
    hybrid's lookup through the budget: the lookup's length follows that price, not the drafter's own."""
    from anypair.drafters.hybrid import HybridDrafter
    from anypair.policies import AdaptiveLength
    from anypair.policies.costs import StepCosts

    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] * 3 + [1, 2, 3]
    assert AdaptiveLength().row_price() is None  # timed costs: the drafter's own measured price
    assert AdaptiveLength(fixed_costs=StepCosts(draft_step=0.02, verify_slope=0.4)).row_price() == 0.4
    lengths = {}
    for price in (None, 0.4):
        hybrid = HybridDrafter(FakeModelDrafter(), verify_slope=0.05)
        hybrid.start(DraftRequest(prompt))
        lengths[price] = len(hybrid.propose(DraftBudget(max_draft_steps=0, max_target_tokens=100, row_price=price)))
    assert lengths[None] > lengths[0.4] >= 1
