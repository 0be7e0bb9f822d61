"""Batching that pays: the batch plans its drafts from what the running engines measured (rows of a
shared forward that stop being nearly free turn drafting down, to none), a joining prompt is read
ahead of the others' drafts in chunks sized from the measured row cost, and every answer stays the
request's own alone.

The scheduler-level tests wrap the real GGUF engines in engines whose forwards take a known extra
time (per row, or per forward): the plan reads only what it measures, so the two wrappers must lead
to opposite plans on the same requests."""
from __future__ import annotations

import time
from typing import Optional, Sequence

import pytest
import torch

from anypair.backends.base import ModelBackend, SequenceRows
from anypair.generation.options import GenerationRequest
from anypair.policies.batch import BatchCosts, DraftingRequest, expected_tokens, plan_batch_drafts, prompt_rows
from anypair.policies.costs import EngineCosts

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def costs_of(per_call: float, per_row: float, counts: Sequence[int] = (1, 4, 16, 64)) -> EngineCosts:
    costs = EngineCosts()
    for rows in counts:
        costs.observe(rows, per_call + per_row * rows)
    return costs


# -- the measured cost of a forward by rows --------------------------------------------------------


def test_row_costs_read_between_and_past_what_was_measured():
    costs = EngineCosts(prior_slope=0.1)
    assert not costs.known
    with pytest.raises(ValueError, match="nothing measured"):
        costs.seconds(1)
    costs.observe(8, 0.08)
    assert costs.seconds(4) == pytest.approx(0.08 * 1.3 / 1.7)  # one count: the prior slope's line through it
    costs.observe(16, 0.12)
    assert costs.seconds(12) == pytest.approx(0.10)  # between two counts: their line
    assert costs.seconds(24) == pytest.approx(0.16)  # past the largest: the last segment's rows
    assert costs.seconds(4) == pytest.approx(0.06)  # below the smallest: the first segment carries on
    assert costs.seconds(1) == pytest.approx(0.045)
    assert costs.row(10) == pytest.approx(0.005)
    costs.observe(16, 0.22)  # smoothed, not replaced
    assert 0.12 < costs.seconds(16) < 0.22
    stalled = EngineCosts()
    stalled.observe(1, 0.1)
    stalled.observe(1, 10.0)  # one forward stalled by the machine moves the figure at most 3x's share
    assert stalled.seconds(1) == pytest.approx(0.7 * 0.1 + 0.3 * 0.3)
    assert costs.relative_slope(8) == costs.prior_slope == 0.1  # no one-row forward measured yet: the prior
    costs.observe(1, 0.03)
    assert costs.relative_slope(8) == pytest.approx((0.08 / 0.03 - 1) / 7)


# -- the batch's draft plan ------------------------------------------------------------------------


def test_a_request_alone_plans_with_its_own_policy():
    target, draft = costs_of(0.02, 0.005), costs_of(0.003, 0.0005)
    assert plan_batch_drafts([DraftingRequest(5, 0.7)], target, draft).cap is None


def test_rows_that_cost_turn_drafting_off_under_load_and_say_why():
    # this machine's shape: 4 rows 1.35x one, 16 rows 3.5x (issue 44), a draft step 0.15 of a target's
    target, draft = costs_of(0.020, 0.0035, (1, 4, 16, 64, 128)), costs_of(0.003, 0.0003)
    eight = [DraftingRequest(12, 0.55)] * 8  # the default pair accepts ~0.54 on HumanEval
    plan = plan_batch_drafts(eight, target, draft)
    assert plan.cap == 0
    assert plan.reason.startswith("drafting off under load: 8 requests share each forward")
    # the same requests where rows are nearly free: they draft (as long as a shared draft step pays
    # for itself at this acceptance), and drafts the target keeps more often may run to their length
    free = costs_of(0.020, 0.00002, (1, 4, 16, 64, 128))
    assert plan_batch_drafts(eight, free, draft).cap >= 1
    assert plan_batch_drafts([DraftingRequest(5, 0.9)] * 8, free, draft).cap is None


def test_the_cap_maximises_the_batchs_expected_tokens_per_second():
    target, draft = costs_of(0.020, 0.0012, (1, 8, 32, 128)), costs_of(0.002, 0.0002)
    requests = [DraftingRequest(8, 0.8), DraftingRequest(8, 0.8), DraftingRequest(3, 0.4)]
    plan = plan_batch_drafts(requests, target, draft, overhead_s=0.002)

    def rate(cap: int) -> float:
        lengths = [min(r.wanted, cap) for r in requests]
        seconds = target.seconds(sum(1 + k for k in lengths)) + 0.002
        seconds += sum(draft.seconds(sum(k >= s for k in lengths)) for s in range(1, cap + 1))
        return sum(expected_tokens(r.acceptance, k) for r, k in zip(requests, lengths)) / seconds

    best = max(range(9), key=lambda cap: (rate(cap), -cap))
    assert (plan.cap if plan.cap is not None else 8) == best
    assert 0 < best < 8  # a real trade-off: neither extreme


def test_while_a_prompt_is_read_the_others_draft_nothing():
    target, draft = costs_of(0.02, 0.00002), costs_of(0.003, 0.0003)
    plan = plan_batch_drafts([DraftingRequest(5, 0.9)], target, draft, reading_prompt=True)
    assert plan.cap == 0 and "prompt is read" in plan.reason
    assert plan_batch_drafts([], target, draft, reading_prompt=True).cap is None


def test_prompt_chunks_grow_with_what_the_decoding_rows_cost():
    cheap = costs_of(0.020, 0.0001)
    assert prompt_rows(8, cheap, 0.0, 64, 256) == 64  # decode rows nearly free: the engine's piece
    dear = costs_of(0.020, 0.004)
    assert prompt_rows(8, dear, 0.01, 64, 256) == 64  # 8 rows beside 64: an eighth of the round
    rows = prompt_rows(24, dear, 0.05, 64, 256)  # 24 rows and their requests' work: a third of it
    assert 64 < rows < 256 and rows % 64 == 0
    added = dear.seconds(24 + rows) - dear.seconds(rows) + 0.05
    assert added <= 0.25 * (dear.seconds(rows) + added)  # the decoders' part of the round: at most a quarter
    assert prompt_rows(64, dear, 0.5, 64, 256) == 256  # bounded: the decoders wait at most one such round
    assert prompt_rows(0, dear, 0.0, 64, 256) == 64
    assert prompt_rows(8, EngineCosts(), 0.0, 64, 256) == 64  # nothing measured: the engine's piece


def test_batch_costs_keep_a_requests_work_without_its_one_off_draft_prompt_read():
    costs = BatchCosts()
    assert costs.request_work_s == 0.0
    costs.observe_request_work(4, 0.008)
    assert costs.request_work_s == pytest.approx(0.002)
    costs.observe_request_work(1, 0.5)  # one request read its draft's prompt in this hand-out
    assert costs.request_work_s < 0.003


# -- the scheduler on real engines whose forwards cost what the test says --------------------------


class Priced(ModelBackend):
    """A slotted engine whose forwards take `per_call` + `per_row` x rows seconds more (the rows'
    logits are the engine's own: only the time changes)."""

    def __init__(self, engine: ModelBackend, per_call: float, per_row: float,
                 piece: Optional[int] = None) -> None:
        self.engine = engine
        self.per_call, self.per_row = per_call, per_row
        self.vocab_size, self.max_context, self.name = engine.vocab_size, engine.max_context, engine.name
        self.prompt_rows_per_forward = piece or engine.prompt_rows_per_forward
        self.bitwise_batch_invariant = engine.bitwise_batch_invariant
        self.max_slots = engine.max_slots
        self.row_counts: list[int] = []

    @property
    def cached_length(self) -> int:
        return self.engine.cached_length

    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        return self.engine.extend(ids, all_logits)

    def crop(self, length: int) -> None:
        self.engine.crop(length)

    def reset(self) -> None:
        self.engine.reset()

    @property
    def slots(self) -> int:
        return self.engine.slots

    # its slots are its own (a request's session and draft hold them, so their forwards come here),
    # their state the engine's
    def slot_length(self, slot: int) -> int:
        return self.engine.slot_length(slot)

    def crop_slot(self, slot: int, length: int) -> None:
        self.engine.crop_slot(slot, length)

    def extend_slot(self, slot: int, ids: Sequence[int], all_logits: bool) -> torch.Tensor:
        return self.engine.extend_slot(slot, ids, all_logits)

    def forward_rows(self, calls: Sequence[SequenceRows]) -> list[Optional[torch.Tensor]]:
        rows = sum(len(c.ids) for c in calls)
        self.row_counts.append(rows)
        time.sleep(self.per_call + self.per_row * rows)
        return self.engine.forward_rows(calls)


@pytest.fixture(scope="module")
def pair(zoo_fetch):
    """SmolLM2 drafting for itself with a fixed length of 4: each request always wants 4 draft tokens,
    so what it drafts beside others is the batch's plan alone."""
    from anypair import AnyPairGenerator

    return AnyPairGenerator(SMOL, SMOL, threads=2, context=512, draft_length="constant", num_draft_tokens=4)


PROMPTS = ["def is_prime(n):", "The capital of France is", "Once upon a time, in a small village,",
           "import numpy as np\n\ndef softmax(x):", "Q: What is 17 * 3?\nA:", "Dear Sir or Madam,"]
SAMPLING = dict(do_sample=True, temperature=1.0, max_new_tokens=20)  # a draft the target sometimes overrules


def run_batch(pair, target_cost: tuple[float, float], draft_cost: tuple[float, float]):
    from anypair.generation.batch import BatchScheduler, CollectingSink, run_rounds

    scheduler = pair.batch_scheduler(len(PROMPTS))
    target = Priced(pair.target_backend, *target_cost)
    draft = Priced(pair.draft_backend, *draft_cost)
    with pytest.MonkeyPatch.context() as patch:  # the requests' slots are the priced engines'
        patch.setattr(pair, "target_backend", target)
        patch.setattr(pair, "draft_backend", draft)
        scheduler = BatchScheduler(target, len(PROMPTS), pair._batch_session,
                                   costs=BatchCosts(scheduler.costs.target.prior_slope), draft_engine=draft)
        sinks = [CollectingSink() for _ in PROMPTS]
        for i, (prompt, sink) in enumerate(zip(PROMPTS, sinks)):
            scheduler.submit(GenerationRequest.of(prompt, seed=100 + i, **SAMPLING), sink)
        for _ in run_rounds(scheduler):
            pass
    assert all(sink.error is None for sink in sinks)
    return [sink.result for sink in sinks], target


def test_dear_rows_turn_drafting_off_for_the_batch_and_cheap_rows_keep_it(pair):
    pair.forget_drafting_history()
    alone = [pair.generate(prompt, seed=100 + i, **SAMPLING) for i, prompt in enumerate(PROMPTS)]
    # each row of the target's forward costs 6 ms: eight rows are far from free
    dear, target = run_batch(pair, (0.0, 0.006), (0.004, 0.0))
    pair.forget_drafting_history()
    # the target's forward costs 60 ms whatever its rows: rows are free, and drafting pays
    cheap, _ = run_batch(pair, (0.06, 0.0), (0.001, 0.0))
    for result, own in zip(dear + cheap, alone + alone):  # drafting or not, each text is its own alone
        assert result.target_ids == own.target_ids
    proposed_dear = sum(r.stats.draft_tokens_proposed for r in dear)
    proposed_cheap = sum(r.stats.draft_tokens_proposed for r in cheap)
    assert proposed_dear < 0.5 * proposed_cheap, (proposed_dear, proposed_cheap)
    notes = [r.stats.batch_draft_note or "" for r in dear]
    assert any(note.startswith("drafting off under load") for note in notes), notes
    def drafting_share(results) -> float:
        return sum(r.stats.draft_rounds for r in results) / sum(r.stats.rounds for r in results)

    assert drafting_share(cheap) > 2 * drafting_share(dear), (drafting_share(cheap), drafting_share(dear))
    assert max(r.stats.draft_capped_rounds for r in dear) > 0
    assert all(r.stats.mean_rows_per_round >= 1 for r in dear)
    assert sum(r.stats.mean_draft_length for r in dear) < sum(r.stats.mean_draft_length for r in cheap)
    # under load the forwards carry about one row per request
    assert sorted(target.row_counts)[len(target.row_counts) // 2] <= len(PROMPTS) + 2


def test_a_joining_prompt_is_read_in_chunks_sized_from_the_row_cost(pair):
    """Five requests decode; a sixth joins with a long prompt: it is read in chunks larger than the
    engine's piece (16 rows here; the decoders' rows are dear beside so small a piece, so fewer,
    larger rounds), the decoders draft nothing meanwhile, and every answer is its own alone."""
    from anypair.generation.batch import BatchScheduler, CollectingSink

    long_prompt = "Summarise: " + " ".join(f"item {i} is {i * i}." for i in range(16))
    alone = pair.generate(long_prompt, max_new_tokens=6)
    base = pair.batch_scheduler(6)
    target = Priced(pair.target_backend, 0.0, 0.004, piece=16)
    scheduler = BatchScheduler(target, 6, pair._batch_session,
                               costs=BatchCosts(base.costs.target.prior_slope), draft_engine=pair.draft_backend)
    sinks = [CollectingSink() for _ in range(6)]
    for prompt, sink in zip(PROMPTS[:5], sinks):
        scheduler.submit(GenerationRequest.of(prompt, max_new_tokens=40), sink)
    for _ in range(4):  # they decode
        scheduler.round()
    # each decoder's own work between forwards (verify, commit: Python, ~0.1-3 ms by machine and load)
    # priced like a row here, so that what the decoders add to a round does not hang on this machine's
    # speed: their 5 rows and 5 requests' work beside a 16-row piece are more than a quarter of it
    for _ in range(8):
        scheduler.costs.observe_request_work(5, 5 * 0.004)
    before = len(target.row_counts)
    scheduler.submit(GenerationRequest.of(long_prompt, max_new_tokens=6), sinks[5])
    joining = pair.target.render(long_prompt, None)
    assert len(joining) > 4 * 16
    rounds_to_first_token = 0
    while not sinks[5].chunks and rounds_to_first_token < 20:
        scheduler.round()
        rounds_to_first_token += 1
        reading = any(a.reading_prompt for a in scheduler.active)
        if reading:  # the decoders' next drafts wait for the prompt
            assert all(a.session.draft_cap == 0 for a in scheduler.active if not a.reading_prompt)
    prompt_rounds = target.row_counts[before:before + rounds_to_first_token]
    assert max(prompt_rounds) > 16 + 5  # more than one engine piece beside the decoders' rows
    # one piece a round would take a round per piece plus the round in flight when it joined; the
    # chunks' size comes from measured times, so one chunk of two pieces is all this can ask for
    assert rounds_to_first_token <= -(-len(joining) // 16)
    while scheduler.busy:
        scheduler.round()
    assert sinks[5].result.target_ids == alone.target_ids
    for prompt, sink in zip(PROMPTS[:5], sinks):
        assert sink.result.target_ids == pair.generate(prompt, max_new_tokens=40).target_ids
