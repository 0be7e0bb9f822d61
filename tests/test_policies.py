"""Draft-length policies (anypair.policies): the schedules, the expected-rate and confidence-stop
policies, their cost models, probe schedule and calibration, and how `num_draft_tokens` reaches
them. No models: rounds are described by hand as `RoundFeedback`."""
from __future__ import annotations

import pytest

from anypair.policies import (
    AdaptiveLength,
    ConfidenceStopLength,
    ConstantLength,
    DraftingLedger,
    ExpectedRateLength,
    HeuristicLength,
    EngineCosts,
    TimedCosts,
    RequestOutcome,
    RoundFeedback,
    StepCosts,
    best_length,
    draft_prompt_window,
    estimated_step_costs,
    make_policy,
)
from anypair.policies.adaptive import PROBE_DRAFT_STEPS


def flat(seconds: float):
    return lambda n_scored: seconds


def step(n_scored: int) -> float:
    """Verification seconds on a CPU where each token scored adds 0.05 s to 0.25 s for one."""
    return 0.2 + 0.05 * n_scored


def plain_round(draft_step_seconds: float | None = 0.05) -> RoundFeedback:
    """A round the policy paused: no drafting, one token scored."""
    return RoundFeedback(0, 0, 0, 0.0, step(1), draft_step_seconds)


def test_heuristic_schedule():
    p = HeuristicLength(start=5)
    p.update(RoundFeedback(5, 5, 5, 0.1, 0.3, None))
    assert p.next_length() == 7
    p.update(RoundFeedback(7, 7, 2, 0.1, 0.3, None))
    assert p.next_length() == 6
    p.reset()
    assert p.next_length() == 5
    assert ConstantLength(3).next_length() == 3


def test_expected_rate_prefers_long_drafts_when_cheap_and_accurate():
    assert best_length(0.95, draft_step=0.01, verify=flat(0.3), minimum=0, maximum=12) >= 8
    assert best_length(0.2, draft_step=0.05, verify=flat(0.3), minimum=0, maximum=12) <= 2
    p = ExpectedRateLength(maximum=12)
    for _ in range(20):
        p.update(RoundFeedback(p.next_length(), 4, 0, 0.2, 0.3, 0.05))
    assert p.next_length() <= 2


def test_timed_costs_read_the_engines_cost_models_and_by_hand_learn_from_rounds():
    # a generator's policies read the engines' models, which the scheduler feeds: rounds add nothing
    target, draft = EngineCosts(), EngineCosts()
    shared = TimedCosts(target=target, draft=draft)
    for rows, seconds in ((1, 0.25), (5, 0.45)):
        target.observe(rows, seconds)
    draft.observe(1, 0.03)
    shared.observe(RoundFeedback(proposed=4, accepted=2, draft_steps=4, draft_seconds=0.2, verify_seconds=9.0,
                                 draft_step_seconds=0.05))
    assert shared.verify(1) == 0.25 and shared.verify(3) == pytest.approx(0.35) and shared.draft_step() == 0.03
    assert shared.verify_slope() == pytest.approx(0.05)
    # by hand (no scheduler): the rounds' own timings feed private models
    alone = TimedCosts()
    assert not alone.known and alone.draft_step() is None
    for n in (1, 5, 1, 5):
        alone.observe(RoundFeedback(proposed=n - 1, accepted=0, draft_steps=n - 1, draft_seconds=0.01 * (n - 1),
                                    verify_seconds=0.2 + 0.05 * n, draft_step_seconds=0.01 if n > 1 else None))
    assert alone.verify(1) == pytest.approx(0.25) and alone.verify(5) == pytest.approx(0.45)
    assert alone.draft_step() == pytest.approx(0.01)
    alone.reset()  # a new request: what was measured of the engines stays
    assert alone.verify(1) == pytest.approx(0.25)


def test_expected_rate_stops_drafting_when_verification_grows_with_k_and_probes_again():
    p = ExpectedRateLength(maximum=12, probe_every=4)
    steep = lambda n: 0.25 + 0.1 * n  # scoring 4 tokens costs 2.1x one token
    assert best_length(0.35, draft_step=0.035, verify=steep, minimum=0, maximum=12) == 0
    assert best_length(0.35, draft_step=0.035, verify=flat(0.35), minimum=0, maximum=12) >= 1  # flat cost would draft
    assert best_length(0.9, draft_step=0.01, verify=steep, minimum=0, maximum=12) >= 3
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
    p.reset(confidence_stopping=False)
    assert p.stop_confidence() == 0.0  # no advice for drafters that cannot use it
    p.reset(confidence_stopping=True)
    assert p.next_length() == 10
    assert p.stop_confidence() == p.confidence_stop.prior_stop_confidence
    for n in (1, 3, 5, 2, 4):
        p.update(RoundFeedback(10, n - 1, n - 1, 0.03 * n, step(n), 0.03))
    # a token costs a draft step plus the slope (0.08 s) and is worth a step (0.25 s) over the tokens the
    # rounds commit a step (up to 5 in 0.6 s: ~2)
    rate = p.confidence_stop.rate.per_step
    assert 1.5 < rate < 2.5
    assert p.stop_confidence() == pytest.approx(0.08 / 0.25 * rate, rel=0.1)


def test_a_token_is_worth_the_time_a_token_takes_at_the_requests_rate():
    """Rounds that commit 3 tokens a target step make a token worth a third of a step: proposing one
    more pays only where its chance is three times what pays beside the target alone (the rate is what
    is maximised); the request's rounds decide it, and a new request starts again from one a step."""
    costs = StepCosts(draft_step=0.02, verify_slope=0.04)
    fast, slow = AdaptiveLength(fixed_costs=costs), AdaptiveLength(fixed_costs=costs)
    for p in (fast, slow):
        p.reset(confidence_stopping=True)
    for _ in range(30):  # 8 of 8 kept (9 tokens for 9 draft steps and 9 rows), or none of 1 (1 token, 1.08 steps)
        fast.update(RoundFeedback(12, 8, 8, 0.0, 0.0, None, predicted_confidence=1.0))
        slow.update(RoundFeedback(12, 1, 0, 0.0, 0.0, None, predicted_confidence=0.0))
    assert fast.confidence_stop.rate.per_step == pytest.approx(9 / (9 * 0.02 + 1.32), rel=0.02)
    assert slow.confidence_stop.rate.per_step == 1.0  # below one a step drafting loses: the pause decides
    ratio = fast.confidence_stop.calibration.ratio / slow.confidence_stop.calibration.ratio
    rate = fast.confidence_stop.rate.per_step
    assert fast.stop_confidence() == pytest.approx(slow.stop_confidence() * rate / ratio)
    assert fast.branch_confidence() == pytest.approx(slow.branch_confidence() * rate / ratio)
    fast.reset(confidence_stopping=True)
    assert fast.confidence_stop.rate.per_step == 1.0


def test_rows_dearer_than_the_slope_raise_the_stop_confidence_for_the_tokens_that_need_them():
    """A verification whose rows 9-13 cost 0.11 of a step each where rows 2-8 cost 0.04 (a second tile
    of 8 rows, gemma-2-9b's shape on 2 cores): a token that makes the proposal 8 tokens or longer needs
    a likelier whole proposal than one within the cheap rows; priced by a line, every length gets one."""
    from anypair.policies import FixedCosts

    curve = ((1, 1.0), (2, 1.04), (4, 1.12), (8, 1.28), (9, 1.39), (13, 1.83))
    kneed = StepCosts(draft_step=0.02, verify_slope=0.04, verify_rows=curve)
    assert FixedCosts(kneed).verify(6) == pytest.approx(1.20) and FixedCosts(kneed).verify(11) == pytest.approx(1.61)
    assert FixedCosts(kneed).verify(15) == pytest.approx(2.05)  # past the last count: its segment's rows
    p = AdaptiveLength(maximum=12, fixed_costs=kneed)
    p.reset(confidence_stopping=True)
    stops = p.stop_confidences()
    assert len(stops) == 12 and stops[0] == pytest.approx(p.stop_confidence())
    # the 8th token adds row 9 (0.11 + a draft step 0.02): 0.13; up to the 7th, the slope's 0.06
    assert all(s == pytest.approx(0.06) for s in stops[:7]) and all(s == pytest.approx(0.13) for s in stops[7:])
    line = AdaptiveLength(maximum=12, fixed_costs=StepCosts(draft_step=0.02, verify_slope=0.04))
    line.reset(confidence_stopping=True)
    assert all(s == pytest.approx(line.stop_confidence()) for s in line.stop_confidences())
    fresh = AdaptiveLength()  # nothing measured: the prior, one figure
    fresh.reset(confidence_stopping=True)
    assert fresh.stop_confidences() == (fresh.stop_confidence(),)


def test_confidence_stopping_pauses_drafting_while_it_loses_time():
    p = ConfidenceStopLength(maximum=10, probe_every=4, first_probe_after=4, min_rounds=3)
    # rounds that cost a draft step and save nothing: after min_rounds of them drafting pauses (k = 0) ...
    for n in (2, 1, 2):
        assert not p.paused  # one or two bad rounds are no evidence
        p.update(RoundFeedback(p.next_length(), n - 1, 0, 0.06, step(n), 0.05))
    assert p.net_saving < 0 and p.paused
    lengths = []
    for _ in range(4):
        lengths.append(p.next_length())
        if lengths[-1] == 0:
            p.update(plain_round())
    assert lengths == [0, 0, 0, PROBE_DRAFT_STEPS]  # ... and probes every 4th round, a few steps long
    # a probe that pays (5 tokens accepted) switches drafting back on
    p.update(RoundFeedback(10, 5, 5, 0.3, step(6), 0.05))
    assert p.net_saving > 0 and p.next_length() == 10


def test_a_probe_is_judged_without_the_drafts_catch_up_read():
    """The read of what was committed during a pause is what pausing cost; a probe whose drafting
    pays resumes although that read made the round as a whole lose."""
    p = ConfidenceStopLength(maximum=10, probe_every=2, first_probe_after=2)
    for _ in range(3):
        p.update(RoundFeedback(p.next_length(), 1, 0, 0.06, step(2), 0.05))
    assert p.paused
    while p.next_length() == 0:
        p.update(plain_round())
    # 3 of 3 kept (0.75 s of target steps saved for 0.1 s of drafting), after a 1.0 s catch-up read
    p.update(RoundFeedback(10, 3, 3, 1.1, step(4), 0.05, catch_up_seconds=1.0))
    assert not p.paused and p.next_length() == 10


def test_probe_that_pays_resumes_drafting_at_once():
    p = ConfidenceStopLength(maximum=10, probe_every=3, first_probe_after=3)
    for _ in range(3):  # a losing streak: a strongly negative average
        p.update(RoundFeedback(10, 1, 0, 0.3, step(2), 0.05))
    assert p.net_saving < -0.2
    lengths = [p.next_length()]
    while lengths[-1] == 0 and len(lengths) <= 3:
        p.update(plain_round())
        lengths.append(p.next_length())
    assert lengths[0] == 0 and lengths[-1] == PROBE_DRAFT_STEPS  # paused, then a (short) probe
    # one probe saving a little is enough: smoothing it into the old average would pause again
    p.update(RoundFeedback(10, 2, 2, 0.1, step(3), 0.05))
    assert p.net_saving > 0 and p.next_length() == 10


def test_failed_probes_back_off_and_a_paying_probe_resets_the_wait():
    p = ConfidenceStopLength(maximum=10, probe_every=12, first_probe_after=2)
    losing = lambda k: RoundFeedback(k, 1, 0, 0.3, step(2), 0.05)
    for _ in range(3):  # the first rounds lose time: paused
        p.update(losing(p.next_length()))
    assert p.paused

    def wait_for_probe() -> int:
        idle = 0
        while p.next_length() == 0:
            p.update(plain_round())
            idle += 1
            assert idle < 50, "the policy never probes"
        return idle

    waits = []
    for _ in range(5):  # every probe fails: the wait doubles, capped at probe_every (cheap probes: see below)
        waits.append(wait_for_probe())
        p.update(RoundFeedback(10, 1, 0, 0.02, step(2), 0.05))  # 0.28 plain steps over one: within the budget
    assert waits == [1, 3, 7, 11, 11]  # idle rounds before probes after 2, 4, 8, 12, 12
    # a probe that pays resumes drafting and resets the wait for the next pause
    wait_for_probe()
    p.update(RoundFeedback(10, 5, 5, 0.3, step(6), 0.05))
    assert p.next_length() == 10
    while p.net_saving >= 0:
        p.update(losing(10))
    assert wait_for_probe() == 1


def test_a_pair_memory_carries_costs_and_calibration_into_the_next_request():
    """A request's first rounds are priced and stopped with what earlier requests of the pair measured;
    its pause and acceptance still start afresh."""
    from anypair.policies.adaptive import PairMemory

    memory = PairMemory()
    first = AdaptiveLength()
    first.remember(memory)
    first.reset(confidence_stopping=True)
    assert first.stop_confidence() == 0.3  # nothing measured yet: the prior
    for _ in range(6):  # cheap draft steps, a steep verification, proposals kept in full though the draft was unsure
        first.update(RoundFeedback(10, 4, 4, 0.02, 0.25 + 0.05 * 5, 0.005, predicted_confidence=0.1))
    learnt = first.stop_confidence()
    second = AdaptiveLength()
    second.remember(memory)
    second.reset(confidence_stopping=True)
    assert second.stop_confidence() == learnt != 0.3
    assert second.confidence_stop.net_saving is None and second.confidence_stop.drafting_rounds == 0
    forgetful = AdaptiveLength()
    forgetful.reset(confidence_stopping=True)
    assert forgetful.stop_confidence() == 0.3


def test_next_length_only_reads_the_state():
    """Asking twice gives the same answer: only `update` moves a paused policy towards its probe."""
    confident = ConfidenceStopLength(maximum=10, probe_every=4, first_probe_after=2)
    for _ in range(3):
        confident.update(RoundFeedback(10, 1, 0, 0.3, step(2), 0.05))
    expecting = ExpectedRateLength(maximum=12, probe_every=4)
    steep = lambda n: 0.25 + 0.1 * n
    for n_scored in (6, 1, 4, 2, 5, 3):
        k = expecting.next_length()
        expecting.update(RoundFeedback(k, n_scored - 1, 0, 0.03 * k, steep(n_scored), 0.03))
    for policy in (confident, expecting, AdaptiveLength(), HeuristicLength()):
        answers = {(policy.next_length(), policy.stop_confidence()) for _ in range(30)}
        assert len(answers) == 1, policy.name
    assert confident.paused and expecting.k == 0  # both paused: the answers above are the pauses' own


def test_probe_settings_are_checked():
    with pytest.raises(ValueError):
        AdaptiveLength(probe_every=4, first_probe_after=5)
    with pytest.raises(ValueError):
        AdaptiveLength(first_probe_after=0)


def test_stop_threshold_follows_the_drafts_calibration():
    def policy_after(full_accepted: bool, predicted: float) -> ConfidenceStopLength:
        p = ConfidenceStopLength(maximum=10)
        for n in (1, 3, 5, 2, 4, 3, 2, 4, 3, 5):
            proposed = n - 1 or 1
            accepted = proposed if full_accepted else 0
            p.update(RoundFeedback(10, proposed, accepted, 0.03 * n, step(proposed + 1), 0.03, predicted))
        return p

    uncalibrated = ConfidenceStopLength(maximum=10)
    for n in (1, 3, 5, 2, 4):
        uncalibrated.update(RoundFeedback(10, n - 1, n - 1, 0.03 * n, step(n), 0.03))
    def at_one_token_a_step(p: ConfidenceStopLength) -> float:  # the rounds' rate apart (its own test)
        return p.stop_confidence() / p.rate.per_step

    base = at_one_token_a_step(uncalibrated)
    # proposals the draft gave 40% that were all accepted: it is under-confident, stop later
    shy = policy_after(True, 0.4)
    assert shy.calibration.ratio > 1.8 and at_one_token_a_step(shy) < base / 1.8
    # proposals it gave 90% that were all rejected: over-confident, stop sooner
    bold = policy_after(False, 0.9)
    assert bold.calibration.ratio < 0.5 and at_one_token_a_step(bold) > base * 1.8
    # a draft that is right as often as it says keeps the cost-based threshold
    honest = ConfidenceStopLength(maximum=10)
    for i, n in enumerate((1, 3, 5, 2, 4, 3, 2, 4, 3, 5)):
        accepted = n if i % 2 else 0
        honest.update(RoundFeedback(10, n, accepted, 0.03 * n, step(n), 0.03, 0.5))
    assert 0.7 < honest.calibration.ratio < 1.4


def test_fixed_costs_make_the_adaptive_policy_ignore_timings():
    """Seeded sampling plans with a cost model: the same outcomes must give the same lengths
    and stop thresholds however long the rounds took."""

    def lengths(seconds_scale: float) -> list[tuple[int, float]]:
        policy = AdaptiveLength(fixed_costs=StepCosts(draft_step=0.2, verify_slope=0.22))
        policy.reset(confidence_stopping=True)
        seen = []
        for accepted, proposed in [(3, 3), (0, 2), (1, 4), (0, 1), (0, 3), (2, 2)] * 4:
            k = policy.next_length()
            seen.append((k, round(policy.stop_confidence(), 9)))
            if k:
                policy.update(RoundFeedback(k, proposed, accepted, 0.05 * seconds_scale * k,
                                            0.3 * seconds_scale, 0.05 * seconds_scale, 0.5))
            else:
                policy.update(RoundFeedback(0, 0, 0, 0.0, 0.25 * seconds_scale, 0.05 * seconds_scale))
        return seen

    seen = lengths(1.0)
    assert seen == lengths(7.0)
    assert {k for k, _ in seen} == {0, PROBE_DRAFT_STEPS, 12}  # it drafted, paused and probed: all compared


def test_fixed_costs_pause_drafting_that_cannot_pay():
    policy = AdaptiveLength(fixed_costs=StepCosts(draft_step=0.2, verify_slope=0.22), first_probe_after=12,
                            probe_every=12)
    policy.reset(confidence_stopping=True)
    for _ in range(6):
        k = policy.next_length()
        policy.update(RoundFeedback(k, 2, 0, 1.0, 1.0, None, 0.5) if k else plain_round(None))
    assert policy.next_length() == 0


def test_estimated_step_costs_weigh_parameters_and_each_engines_layer_overhead():
    """Fixed model sizes and the engines' declared per-layer overheads (how fast any machine runs
    them is the benchmarks' business): a step costs its parameters plus its engine's overhead per
    layer, so a draft on a lighter engine is cheaper, and an engine nobody registered is priced as
    the dearest (torch)."""
    from anypair.backends.engines import engine_named

    target_params, target_layers, draft_params, draft_layers = 10**9, 28, 10**8, 30

    def draft_step(target_engine: str, draft_engine: str) -> float:
        costs = estimated_step_costs(target_params, target_layers, draft_params, draft_layers,
                                     multi_token_slope=0.25, target_engine=target_engine, draft_engine=draft_engine)
        assert costs.verify_slope == 0.25
        return costs.draft_step

    for target_engine, draft_engine in [("gguf", "gguf"), ("gguf", "llama.cpp"), ("torch", "torch")]:
        target = target_params + engine_named(target_engine).layer_overhead_params * target_layers
        draft = draft_params + engine_named(draft_engine).layer_overhead_params * draft_layers
        assert draft_step(target_engine, draft_engine) == pytest.approx(draft / target)
    assert draft_step("gguf", "gguf") < draft_step("gguf", "llama.cpp") < draft_step("gguf", "torch")
    assert draft_step("gguf", "no-such-engine") == draft_step("gguf", "torch")
    with pytest.raises(ValueError):
        estimated_step_costs(1, 1, 0, 0, multi_token_slope=-1.0)


def test_the_draft_prompt_window_follows_the_drafts_cost():
    # the zoo's drafts over Qwen2.5-Coder-1.5B on the gguf engine, as the generator estimates them
    target_params = 1_117_320_768 // 4
    smollm2 = estimated_step_costs(target_params, 28, 96_436_224 // 4, 30, 0.25, "gguf", "gguf")
    gemma = estimated_step_costs(target_params, 28, 253_113_024 // 4, 18, 0.25, "gguf", "llama.cpp")
    qwen05 = estimated_step_costs(target_params, 28, 485_983_232 // 4, 24, 0.25, "gguf", "gguf")
    windows = [draft_prompt_window(c.draft_step) for c in (smollm2, gemma, qwen05)]
    assert windows == [640, 128, 96]
    assert draft_prompt_window(0.15) == 640 and draft_prompt_window(0.16) == 256  # the two measured regimes
    assert draft_prompt_window(0.02) == 640  # beside a 9B target: bounded, where more did not pay
    assert draft_prompt_window(5.0) == 64   # a draft dearer than its target still reads some context
    assert all(draft_prompt_window(step / 100) % 32 == 0 for step in range(1, 300))
    with pytest.raises(ValueError):
        draft_prompt_window(0.0)


# -- num_draft_tokens: the constant length, the heuristic's start, the adaptive policy's cap -------


def test_num_draft_tokens_is_the_adaptive_cap_with_a_confidence_stopping_drafter():
    policy = make_policy("adaptive", 3)
    policy.reset(confidence_stopping=True)
    assert policy.next_length() == 3
    for _ in range(10):  # rounds accepted in full never lift it past the cap
        policy.update(RoundFeedback(policy.next_length(), 3, 3, 0.01, 0.3, 0.01, 0.9))
        assert policy.next_length() == 3


def test_num_draft_tokens_caps_the_expected_rate_length():
    policy = make_policy("adaptive", 3)
    policy.reset(confidence_stopping=False)
    assert policy.next_length() == 3
    for _ in range(10):  # cheap, accurate drafts would ask for 12 uncapped
        policy.update(RoundFeedback(policy.next_length(), 3, 3, 0.01, 0.3, 0.01))
    assert policy.next_length() == 3
    uncapped = make_policy("adaptive")
    for _ in range(10):
        uncapped.update(RoundFeedback(uncapped.next_length(), 3, 3, 0.01, 0.3, 0.01))
    assert uncapped.next_length() > 3


def test_num_draft_tokens_for_the_schedules():
    assert make_policy("constant", 7).next_length() == 7
    assert make_policy("heuristic", 2).next_length() == 2
    assert make_policy("constant").next_length() == 5
    with pytest.raises(ValueError, match="assisted=False"):
        make_policy("constant", 0)
    with pytest.raises(ValueError):
        make_policy("adaptive", 0)
    with pytest.raises(ValueError):
        make_policy("best")


@pytest.mark.parametrize("make", [lambda: ConfidenceStopLength(maximum=10, probe_every=8, first_probe_after=2),
                                  lambda: ExpectedRateLength(maximum=10, probe_every=8, first_probe_after=2)])
def test_probing_backs_off_but_never_stops(make):
    """The text of one request changes predictability many times: a request that stopped probing
    after three misses ran its predictable stretches as the target alone (HumanEval/9: 6 tokens
    proposed in 127 rounds against 69% kept by a constant 4-token draft). Failed probes only lengthen
    the wait, up to probe_every paused rounds (longer only where a probe is dear: at most
    LONGEST_PROBE_WAIT)."""
    from anypair.policies.adaptive import LONGEST_PROBE_WAIT

    def drafting_rounds(losing) -> list[int]:
        p = make()
        p.reset()
        lengths = []
        for _ in range(200):
            k = p.next_length()
            lengths.append(k)
            p.update(losing(k) if k else plain_round())
        return [i for i, k in enumerate(lengths) if k > 0]

    # cheap probes (a few ms of draft and rows over a 0.25 s step): a probe every 9th round at most
    cheap = drafting_rounds(lambda k: RoundFeedback(k, k, 0, 0.001 * k, 0.25 + 0.005 * k, 0.001))
    gaps = [b - a for a, b in zip(cheap, cheap[1:])]
    assert cheap[-1] >= 190 and max(gaps) <= 9  # still probing at the end
    assert 20 <= len(cheap) <= 40  # mostly paused: probes only
    # dear probes (each several target steps): further apart, never stopped
    dear = drafting_rounds(lambda k: RoundFeedback(k, k, 0, 0.03 * k, 0.25 + 0.2 * k, 0.03))
    gaps = [b - a for a, b in zip(dear, dear[1:])]
    assert dear[-1] >= 200 - LONGEST_PROBE_WAIT - 1 and max(gaps) <= LONGEST_PROBE_WAIT + 1
    assert 8 <= len(dear) < len(cheap)


def test_dear_probes_wait_longer_but_never_stop():
    """A probe that costs 0.8 target steps over a plain one (a translated draft's three steps and its
    catch-up beside a 1.5B target) every ninth round spends ~9% of a paused stretch: the wait grows until
    probes spend PROBE_BUDGET of it, and a cheap probe keeps the short schedule."""
    from anypair.policies import ProbeSchedule
    from anypair.policies.adaptive import LONGEST_PROBE_WAIT, PROBE_BUDGET

    def waits(extra_steps: float, probes: int = 7) -> list[int]:
        schedule, seen = ProbeSchedule(2, 8), []
        for _ in range(probes):
            paused = 1
            while not schedule.record_paused_round():
                paused += 1
            seen.append(paused)
            schedule.after_probe(drafting_resumed=False, extra_steps=extra_steps)
        return seen

    assert waits(0.1) == [2, 4, 8, 8, 8, 8, 8]
    dear = waits(0.8)
    assert dear[:3] == [2, 4, 8] and dear[-1] == round(0.8 / PROBE_BUDGET) and dear[-1] == dear[-2]
    assert waits(5.0)[-1] == LONGEST_PROBE_WAIT  # never longer: the text may still turn predictable
    schedule = ProbeSchedule(2, 8)
    schedule.after_probe(drafting_resumed=False, extra_steps=0.8)
    schedule.after_probe(drafting_resumed=True, extra_steps=0.8)
    assert schedule.wait == 2  # a probe that pays resumes drafting and the short schedule at once


def test_probe_schedule_settings_are_checked():
    from anypair.policies import ProbeSchedule

    with pytest.raises(ValueError, match="first_probe_after"):
        ProbeSchedule(9, 8)


# ---- across requests: the drafting ledger ------------------------------------------------------

def losing(share: float = -0.15) -> RequestOutcome:
    return RequestOutcome(saving_s=share * 10.0, target_alone_s=10.0)


def paying(share: float = 0.2) -> RequestOutcome:
    return RequestOutcome(saving_s=share * 10.0, target_alone_s=10.0)


def run_requests(ledger: DraftingLedger, outcomes: list[RequestOutcome]) -> str:
    """Feeds the outcome of each request that drafts; returns what each request did: D (drafted),
    E (explored) or . (ran the target alone)."""
    done = []
    for outcome in outcomes:
        decision = ledger.decide()
        done.append("." if not decision.draft else "E" if decision.exploring else "D")
        if decision.draft:
            ledger.record(outcome, decision.exploring)
    return "".join(done)


def test_a_ledger_of_a_pair_that_never_pays_skips_drafting_and_explores_with_backoff():
    """gemma-3-270m drafting for the Qwen coder lost on every task: after min_requests of such
    evidence the ledger runs requests without the draft model, exploring after 2, 4, 8, 8 skipped."""
    ledger = DraftingLedger(min_requests=4, first_wait=2, longest_wait=8)
    assert run_requests(ledger, [losing()] * 30) == "DDDD..E....E........E........E"
    decision = ledger.decide()
    assert not decision.draft and "lost 15% of the time" in decision.skip_note()


def test_one_or_two_bad_prompts_never_turn_drafting_off():
    """The previous ledger skipped the next prompts after one loser among winners (on 10 HumanEval
    prompts it ran the target alone on 6, prompts where drafting kept 74% among them)."""
    ledger = DraftingLedger(min_requests=4)
    outcomes = [paying(0.7), losing(-0.14), losing(-0.3), paying(0.01), losing(-0.2), losing(-0.1), paying(0.3)]
    assert run_requests(ledger, outcomes) == "DDDDDDD"
    # however bad in total, a pair that pays on more than a quarter of its requests keeps drafting
    ledger = DraftingLedger(min_requests=4)
    assert run_requests(ledger, [losing(-0.5), paying(0.1)] * 6) == "D" * 12
    assert ledger.share < 0 and not ledger.losing


def test_a_ledger_resumes_drafting_once_explorations_pay():
    ledger = DraftingLedger(window=8, min_requests=4, first_wait=2, longest_wait=8)
    assert run_requests(ledger, [losing()] * 6) == "DDDD.."
    # explorations that pay reset the wait, and as they join the evidence the pair is no longer losing
    assert run_requests(ledger, [paying()] * 3) == "E.."
    assert ledger.wait == 2
    assert run_requests(ledger, [paying()] * 4) == "EDDD" and not ledger.losing


def test_a_ledger_weighs_requests_by_their_length_and_can_forget():
    ledger = DraftingLedger(min_requests=4, max_paying_share=0.5, losing_share=-0.02)
    short_loss = RequestOutcome(saving_s=-0.3, target_alone_s=1.0)  # -30% of a short request
    long_gain = RequestOutcome(saving_s=1.0, target_alone_s=5.0)  # +20% of a five times longer one
    # 1.0 - 3 x 0.3 = +0.1 s over 8 s: a quarter of the requests paid, yet they saved time in total
    assert run_requests(ledger, [long_gain, short_loss, short_loss, short_loss]) == "DDDD"
    assert ledger.share > 0 and not ledger.losing
    assert run_requests(ledger, [short_loss]) == "D"  # -0.2 s in total: now losing
    assert ledger.losing and not ledger.decide().draft
    ledger.forget()
    assert ledger.share is None and ledger.decide().draft


def test_ledger_settings_are_checked():
    with pytest.raises(ValueError):
        DraftingLedger(min_requests=0)
    with pytest.raises(ValueError):
        DraftingLedger(window=4, min_requests=6)
    with pytest.raises(ValueError):
        DraftingLedger(max_paying_share=1.0)
    with pytest.raises(ValueError):
        DraftingLedger(first_wait=4, longest_wait=2)


def test_a_requests_saving_is_the_target_alones_steps_minus_what_drafting_spent():
    # 11 new tokens: the target alone would spend 10 steps of 0.1 s after its first token; drafting spent 0.7 s
    outcome = RequestOutcome.measure(11, prefill_s=0.5, spent_after_first_token_s=0.7, target_step_s=0.1)
    assert outcome.saving_s == pytest.approx(0.3) and outcome.target_alone_s == pytest.approx(1.5)
    assert outcome.share == pytest.approx(0.2)
    assert RequestOutcome.measure(1, 0.5, 0.0, 0.1) is None  # done at the first token: nothing learnt
