"""Unit tests of the loop's small pieces: prompt lookup, draft-length policies, text assembly,
the greedy verifier. No models."""
from __future__ import annotations

import random

import pytest
import torch

from anypair.drafters.base import DraftRequest
from anypair.drafters.lookup import PromptLookupDrafter
from anypair.generation.text import TextAssembler
from anypair.policies import AdaptiveLength, ConstantLength, HeuristicLength, LinearCost, RoundFeedback
from anypair.types import Proposal
from anypair.verifiers.greedy import GreedyVerifier


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
        proposal = d.propose(4, 3)
        assert proposal.target_ids == (ids[start:start + 3] if n else [])


def test_lookup_proposes_the_continuation():
    d = PromptLookupDrafter()
    d.start(DraftRequest([1, 2, 3, 4, 5, 6, 9, 1, 2]))
    d.commit([3])
    assert d.propose(8, 8).target_ids == [4, 5, 6, 9, 1, 2, 3]


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


def test_heuristic_schedule():
    p = HeuristicLength(start=5)
    p.update(RoundFeedback(5, 5, 5, 0.1, 0.3, None))
    assert p.next_length() == 7
    p.update(RoundFeedback(7, 7, 2, 0.1, 0.3, None))
    assert p.next_length() == 6
    assert ConstantLength(3).next_length() == 3


def test_adaptive_prefers_long_drafts_when_cheap_and_accurate():
    p = AdaptiveLength(maximum=12)
    assert p.best_length(0.95, draft_step=0.01, verify=0.3) >= 8
    assert p.best_length(0.2, draft_step=0.05, verify=0.3) <= 2
    for _ in range(20):
        p.update(RoundFeedback(p.next_length(), 4, 0, 0.2, 0.3, 0.05))
    assert p.next_length() <= 2


def test_linear_cost_learns_the_verification_slope():
    cost = LinearCost()
    cost.add(3, 0.35)
    assert cost(1) == cost(8) == 0.35  # one size seen: no slope yet
    for n in (1, 2, 4, 8, 3, 6, 1, 5):
        cost.add(n, 0.2 + 0.05 * n)
    assert abs(cost.slope() - 0.05) < 0.01
    assert abs(cost(1) - 0.25) < 0.03 and abs(cost(8) - 0.6) < 0.03


def test_adaptive_stops_drafting_when_verification_grows_with_k_and_probes_again():
    p = AdaptiveLength(maximum=12, probe_every=4)
    steep = lambda n: 0.25 + 0.1 * n  # scoring 4 tokens costs 2.1x one token
    assert p.best_length(0.35, draft_step=0.035, verify=steep) == 0
    assert p.best_length(0.35, draft_step=0.035, verify=0.35) >= 1  # a flat-cost model would draft
    assert p.best_length(0.9, draft_step=0.01, verify=steep) >= 3
    # rounds where drafting fails: the policy settles on k = 0 (plain target steps) ...
    for n_scored, accepted in [(6, 0), (1, 0), (4, 0), (2, 0), (5, 1), (3, 0)]:
        k = p.next_length()
        p.update(RoundFeedback(k, n_scored - 1, accepted, 0.03 * k, steep(n_scored), 0.03))
    assert p.k == 0
    # ... but drafts again every `probe_every` rounds to notice when the text gets predictable
    lengths = []
    for _ in range(8):
        k = p.next_length()
        lengths.append(k)
        p.update(RoundFeedback(k, k, 0, 0.03 * k, steep(k + 1), 0.03))
    assert lengths.count(0) >= 5 and any(k >= 1 for k in lengths)


def test_adaptive_with_confidence_stopping_caps_length_and_advises_a_threshold():
    p = AdaptiveLength(maximum=10)
    assert p.stop_confidence() == 0.0  # no advice for drafters that cannot use it
    p.use_confidence_stopping(True)
    assert p.next_length() == 10
    assert p.stop_confidence() == p.prior_stop_confidence
    for n in (1, 3, 5, 2, 4):
        p.update(RoundFeedback(10, n - 1, n - 1, 0.03 * n, 0.2 + 0.05 * n, 0.03))
    # a token is worth one target step (0.25 s) and costs a draft step plus the slope (0.08 s)
    assert abs(p.stop_confidence() - 0.08 / 0.25) < 0.03


def test_text_assembler_split_utf8_and_stop():
    t = TextAssembler(["STOP"])
    snowman = "☃".encode()
    assert not t.feed(b"ab" + snowman[:1])
    assert t.take_new() == ""  # 'ab' held back: could start a stop string
    t.feed(snowman[1:] + b"cdefg")
    assert t.text == "ab☃cdefg"
    assert t.feed(b"xxST")  is False
    assert t.feed(b"OPzz")
    assert t.text == "ab☃cdefgxx"
    assert t.take_new() + "" == "ab☃cdefgxx"


def test_confidence_stopping_pauses_drafting_while_it_loses_time():
    p = AdaptiveLength(maximum=10, probe_every=4, first_probe_after=4)
    p.use_confidence_stopping(True)
    step = lambda n: 0.2 + 0.05 * n
    # rounds that cost a draft step and save nothing: drafting pauses (k = 0) ...
    for n in (1, 2, 1, 2, 1):
        k = p.next_length()
        p.update(RoundFeedback(k, n - 1, 0, 0.06, step(n), 0.05))
    assert p.net_saving < 0
    lengths = [p.next_length() for _ in range(4)]
    assert lengths[:3] == [0, 0, 0] and lengths[3] == 10  # ... and probes every 4th round
    # a probe that pays (5 tokens accepted) switches drafting back on
    p.update(RoundFeedback(10, 5, 5, 0.3, step(6), 0.05))
    assert p.net_saving > 0 and p.next_length() == 10


def test_probe_that_pays_resumes_drafting_at_once():
    p = AdaptiveLength(maximum=10, probe_every=3, first_probe_after=3)
    p.use_confidence_stopping(True)
    step = lambda n: 0.2 + 0.05 * n
    for _ in range(8):  # long losing streak: a strongly negative average
        k = p.next_length()
        p.update(RoundFeedback(k, 1, 0, 0.3, step(2), 0.05))
    assert p.net_saving < -0.2
    lengths = [p.next_length()]
    while lengths[-1] == 0 and len(lengths) <= 3:
        lengths.append(p.next_length())
    assert lengths[0] == 0 and lengths[-1] == 10  # paused, then a probe
    # one probe saving a little is enough: smoothing it into the old average would pause again
    p.update(RoundFeedback(10, 2, 2, 0.1, step(3), 0.05))
    assert p.net_saving > 0 and p.next_length() == 10


def test_failed_probes_back_off_and_a_paying_probe_resets_the_wait():
    p = AdaptiveLength(maximum=10, probe_every=12, first_probe_after=2)
    p.use_confidence_stopping(True)
    step = lambda n: 0.2 + 0.05 * n
    losing = lambda k: RoundFeedback(k, 1, 0, 0.3, step(2), 0.05)
    p.update(losing(p.next_length()))  # the first round loses time: paused
    assert p.net_saving < 0

    def wait_for_probe() -> int:
        idle = 0
        while p.next_length() == 0:
            idle += 1
            assert idle < 50, "the policy never probes"
        return idle

    waits = []
    for _ in range(5):  # every probe fails: the wait doubles, capped at probe_every
        waits.append(wait_for_probe())
        p.update(losing(10))
    assert waits == [1, 3, 7, 11, 11]  # idle rounds before probes after 2, 4, 8, 12, 12
    # a probe that pays resumes drafting and resets the wait for the next pause
    wait_for_probe()
    p.update(RoundFeedback(10, 5, 5, 0.3, step(6), 0.05))
    assert p.next_length() == 10
    while p.net_saving >= 0:
        p.update(losing(10))
    assert wait_for_probe() == 1


def test_probe_settings_are_checked():
    with pytest.raises(ValueError):
        AdaptiveLength(probe_every=4, first_probe_after=5)
    with pytest.raises(ValueError):
        AdaptiveLength(first_probe_after=0)


def test_stop_threshold_follows_the_drafts_calibration():
    def policy_after(full_accepted: bool, predicted: float) -> AdaptiveLength:
        p = AdaptiveLength(maximum=10)
        p.use_confidence_stopping(True)
        for n in (1, 3, 5, 2, 4, 3, 2, 4, 3, 5):
            proposed = n - 1 or 1
            accepted = proposed if full_accepted else 0
            p.update(RoundFeedback(10, proposed, accepted, 0.03 * n, 0.2 + 0.05 * n, 0.03, predicted))
        return p

    uncalibrated = AdaptiveLength(maximum=10)
    uncalibrated.use_confidence_stopping(True)
    for n in (1, 3, 5, 2, 4):
        uncalibrated.update(RoundFeedback(10, n - 1, n - 1, 0.03 * n, 0.2 + 0.05 * n, 0.03))
    base = uncalibrated.stop_confidence()
    # proposals the draft gave 40% that were all accepted: it is under-confident, stop later
    shy = policy_after(True, 0.4)
    assert shy.calibration > 1.8 and shy.stop_confidence() < base / 1.8
    # proposals it gave 90% that were all rejected: over-confident, stop sooner
    bold = policy_after(False, 0.9)
    assert bold.calibration < 0.5 and bold.stop_confidence() > base * 1.8
    # a draft that is right as often as it says keeps the cost-based threshold
    honest = AdaptiveLength(maximum=10)
    honest.use_confidence_stopping(True)
    for i, n in enumerate((1, 3, 5, 2, 4, 3, 2, 4, 3, 5)):
        proposed = n
        accepted = proposed if i % 2 else 0
        honest.update(RoundFeedback(10, proposed, accepted, 0.03 * n, 0.2 + 0.05 * n, 0.03, 0.5))
    assert 0.7 < honest.calibration < 1.4


def test_fixed_costs_make_the_adaptive_policy_ignore_timings():
    """Seeded sampling plans with a cost model: the same outcomes must give the same lengths
    and stop thresholds however long the rounds took."""
    from anypair.policies import AdaptiveLength, RoundFeedback, StepCosts

    def lengths(seconds_scale: float) -> list[tuple[int, float]]:
        policy = AdaptiveLength(fixed_costs=StepCosts(draft_step=0.2, verify_slope=0.22))
        policy.use_confidence_stopping(True)
        seen = []
        for accepted, proposed in [(3, 3), (0, 2), (1, 4), (0, 1), (0, 3), (2, 2)] * 4:
            k = policy.next_length()
            seen.append((k, round(policy.stop_confidence(), 9)))
            if k:
                policy.update(RoundFeedback(k, proposed, accepted, 0.05 * seconds_scale * k,
                                            0.3 * seconds_scale, 0.05 * seconds_scale, 0.5))
        return seen

    assert lengths(1.0) == lengths(7.0)


def test_fixed_costs_pause_drafting_that_cannot_pay():
    from anypair.policies import AdaptiveLength, RoundFeedback, StepCosts

    policy = AdaptiveLength(fixed_costs=StepCosts(draft_step=0.2, verify_slope=0.22), first_probe_after=12)
    policy.use_confidence_stopping(True)
    for _ in range(6):
        k = policy.next_length()
        if k:
            policy.update(RoundFeedback(k, 2, 0, 1.0, 1.0, None, 0.5))
    assert policy.next_length() == 0


def test_estimated_step_costs_match_measured_draft_ratio():
    from anypair.policies import estimated_step_costs

    # SmolLM2-135M (30 layers) over Qwen2.5-1.5B (28 layers): measured 55 ms / 270 ms here
    costs = estimated_step_costs(1_543_714_304, 28, 134_515_008, 30, multi_token_slope=0.22)
    assert 0.15 < costs.draft_step < 0.25
    with pytest.raises(ValueError):
        estimated_step_costs(1, 1, 0, 0, multi_token_slope=-1.0)
