"""The decoding loop (anypair.generation.loop) in isolation: a scripted target whose logits we
choose per position and a scripted drafter. Whatever the drafter does (propose the right text,
wrong text, too much, ids the target does not have, nothing, or raise), the output must be the
target's own greedy output, the target's KV cache must hold exactly the committed tokens, and the
statistics must say what happened."""
from __future__ import annotations

from collections import Counter
from typing import Callable, Optional, Sequence

import pytest
import torch

from anypair.backends.base import ModelBackend
from anypair.drafters.base import DraftRequest, Drafter, NoDrafter
from anypair.generation.loop import MAX_EMPTY_ROUNDS, DecodeRequest, DecodeSession
from anypair.policies import ConstantLength, DraftLengthPolicy, make_policy
from anypair.tokenization.base import TableTokenizerAdapter
from anypair.types import DraftBudget, GenerationResult, Proposal, RoundFeedback
from anypair.verifiers.greedy import GreedyVerifier
from run_session import run_alone  # noqa: E402  (tests/ is on the path: conftest.py lives there)

LETTERS = 12  # ids 0..11 are the letters a..l
EOS = 12
TOKENIZER_ROWS = 13
LM_HEAD_ROWS = 16  # ids 13..15: padded LM-head rows, not tokens
PROMPT = [0, 1, 2]

Rule = Callable[[Sequence[int]], int]


class LetterTokenizer(TableTokenizerAdapter):
    def __init__(self) -> None:
        table = [bytes([ord("a") + i]) for i in range(LETTERS)] + [b""]
        super().__init__(name="letters", token_bytes_table=table, special_ids={EOS}, byte_fallback_ids=set(),
                         bos_id=None, eos_ids={EOS}, unk_id=None, pad_id=None)
        self.set_model_vocab_size(LM_HEAD_ROWS)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.encode_continuation(text)

    def encode_continuation(self, text: str) -> list[int]:
        return [ord(c) - ord("a") for c in text]


TOKENIZER = LetterTokenizer()


def letters_rule(ids: Sequence[int]) -> int:
    """The target's greedy choice after `ids`: depends on the last three tokens and the position,
    so a cache holding one token too many or too few changes what it writes."""
    return (sum(ids[-3:]) * 5 + len(ids)) % LETTERS


def eos_at(position: int) -> Rule:
    """letters_rule, then EOS once `position` tokens have been generated."""
    return lambda ids: EOS if len(ids) - len(PROMPT) == position else letters_rule(ids)


class ScriptedTarget(ModelBackend):
    """A target whose logits at each position come from `rule(ids up to there)`, computed from the
    ids actually in its cache. Padded rows score highest: the loop must mask them."""

    vocab_size = LM_HEAD_ROWS
    max_context = 4096
    name = "scripted target"

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.ids: list[int] = []
        self.extend_sizes: list[int] = []

    @property
    def cached_length(self) -> int:
        return len(self.ids)

    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        rows = []
        for token in ids:
            assert 0 <= token < self.vocab_size, f"the loop fed id {token}"
            self.ids.append(token)
            row = torch.zeros(self.vocab_size)
            row[TOKENIZER_ROWS:] = 5.0
            row[self.rule(self.ids)] = 1.0
            rows.append(row)
        self.extend_sizes.append(len(ids))
        logits = torch.stack(rows)
        return logits if all_logits else logits[-1]

    def crop(self, length: int) -> None:
        assert 0 <= length <= len(self.ids), f"crop to {length} of {len(self.ids)} cached"
        del self.ids[length:]

    def reset(self) -> None:
        self.ids = []


Script = Callable[[list[int], DraftBudget], list[int]]


def continuation(rule: Rule, context: Sequence[int], n: int) -> list[int]:
    ids = list(context)
    for _ in range(n):
        ids.append(rule(ids))
    return ids[len(context):]


def right(rule: Rule = letters_rule) -> Script:
    """The target's own continuation, as long as the budget allows."""
    return lambda context, budget: continuation(rule, context, min(budget.max_draft_steps, budget.max_target_tokens))


def right_then_wrong(n_right: int) -> Script:
    def script(context, budget):
        ids = continuation(letters_rule, context, n_right + 1)
        return ids[:n_right] + [(ids[n_right] + 1) % LETTERS]
    return script


def too_long(context, budget):
    """Ignores max_target_tokens: six tokens more than its steps."""
    return continuation(letters_rule, context, budget.max_draft_steps + 6)


class ScriptedDrafter(Drafter):
    """Proposes what `script(committed ids, budget)` returns; records budgets; raises in
    `raise_in` ("start", "propose" or "commit") on that method's `raise_on_call`-th call."""

    name = "scripted"

    def __init__(self, script: Script, *, stops_by_confidence: bool = False, raise_in: Optional[str] = None,
                 raise_on_call: int = 1, confidence: Optional[float] = None,
                 draft_step_seconds: Optional[float] = None, translate_seconds: float = 0.0) -> None:
        self.script = script
        self._stops_by_confidence = stops_by_confidence
        self.raise_in, self.raise_on_call = raise_in, raise_on_call
        self.confidence = confidence
        self.draft_step_seconds = draft_step_seconds
        self.translate_seconds = translate_seconds
        self.calls: Counter[str] = Counter()
        self.budgets: list[DraftBudget] = []
        self.context: list[int] = []

    @property
    def stops_by_confidence(self) -> bool:
        return self._stops_by_confidence

    def _called(self, method: str) -> None:
        self.calls[method] += 1
        if method == self.raise_in and self.calls[method] == self.raise_on_call:
            raise RuntimeError(f"scripted {method} failure")

    def start(self, request: DraftRequest) -> None:
        self._called("start")
        self.context = list(request.target_prompt_ids)

    def propose(self, budget: DraftBudget) -> Proposal:
        self._called("propose")
        self.budgets.append(budget)
        return Proposal(self.script(self.context, budget), source=self.name, confidence=self.confidence,
                        translate_seconds=self.translate_seconds, draft_step_seconds=self.draft_step_seconds)

    def commit(self, new_target_ids: Sequence[int]) -> None:
        self._called("commit")
        self.context.extend(new_target_ids)


def target_alone(rule: Rule, max_new_tokens: int) -> list[int]:
    """The target's greedy output, straight from the rule (no loop involved)."""
    ids = list(PROMPT)
    while len(ids) - len(PROMPT) < max_new_tokens:
        ids.append(rule(ids))
        if ids[-1] == EOS:
            break
    return ids[len(PROMPT):]


def run(drafter: Drafter, *, rule: Rule = letters_rule, max_new_tokens: int = 40, stop: Sequence[str] = (),
        policy: Optional[DraftLengthPolicy] = None) -> tuple[GenerationResult, ScriptedTarget]:
    target = ScriptedTarget(rule)
    request = DecodeRequest(list(PROMPT), max_new_tokens, frozenset({EOS}), stop, DraftRequest(list(PROMPT)))
    session = DecodeSession(target, TOKENIZER, drafter, GreedyVerifier(), policy or ConstantLength(4), request)
    return run_alone(session), target


def check_against_target_alone(result: GenerationResult, target: ScriptedTarget, rule: Rule = letters_rule,
                               max_new_tokens: int = 40) -> None:
    assert result.target_ids == target_alone(rule, max_new_tokens)
    # the cache holds every committed token but the last, which the next round would feed (and,
    # when EOS or a stop string ended a round, what the target accepted after them)
    committed_but_last = (PROMPT + result.target_ids)[:-1]
    assert target.ids[: len(committed_but_last)] == committed_but_last
    if result.finish_reason == "length":
        assert target.ids == committed_but_last
    stats = result.stats
    assert stats.new_tokens == len(result.target_ids)
    assert stats.draft_tokens_accepted <= stats.draft_tokens_proposed
    # the prefill writes the first token, each round its accepted tokens and one of the target's
    # own; EOS, a stop string or the length may end the last round early
    assert 1 + stats.rounds <= stats.new_tokens <= 1 + stats.rounds + stats.draft_tokens_accepted


# -- what the drafter proposes ---------------------------------------------------------------------


@pytest.mark.parametrize("script, accepted_share", [
    (right(), 1.0),
    (right_then_wrong(0), 0.0),
    (right_then_wrong(2), 2 / 3),
])
def test_output_is_the_targets_own_whatever_the_proposals(script, accepted_share):
    result, target = run(ScriptedDrafter(script))
    check_against_target_alone(result, target)
    stats = result.stats
    assert not stats.draft_failed and stats.draft_tokens_proposed > 0
    # accepted_share is per round; the last round may be cut short by max_new_tokens
    assert abs(stats.acceptance_rate - accepted_share) < 0.1
    assert stats.proposals_by_source == {"scripted": stats.draft_tokens_proposed}


def test_the_target_alone_through_the_loop():
    result, target = run(NoDrafter())
    check_against_target_alone(result, target)
    assert result.stats.draft_tokens_proposed == 0 and not result.stats.draft_failed
    assert set(target.extend_sizes[1:]) == {1}


def test_eos_ends_generation_even_inside_an_accepted_proposal():
    rule = eos_at(9)
    drafter = ScriptedDrafter(right(rule))  # proposes EOS and what the rule writes past it
    result, target = run(drafter, rule=rule)
    check_against_target_alone(result, target, rule)
    assert result.target_ids[-1] == EOS and len(result.target_ids) == 10
    assert result.finish_reason == "eos"



def test_without_end_of_sequence_ids_the_loop_writes_past_eos_to_the_length():
    """What `ignore_eos=True` asks of the loop (benchmarks whose lengths must hold): the target's EOS
    is committed like any token and generation ends only at max_new_tokens."""
    rule = eos_at(9)
    target = ScriptedTarget(rule)
    request = DecodeRequest(list(PROMPT), 20, frozenset(), (), DraftRequest(list(PROMPT)))
    result = run_alone(DecodeSession(target, TOKENIZER, ScriptedDrafter(right(rule)), GreedyVerifier(),
                                     ConstantLength(4), request))
    assert len(result.target_ids) == 20 and result.finish_reason == "length"
    assert result.target_ids[9] == EOS

def test_stop_string_cuts_the_text_and_ends_generation():
    reference = target_alone(letters_rule, 40)
    text = TOKENIZER.decode(reference)
    stop = text[12:15]
    cut = text.find(stop)
    for drafter in (ScriptedDrafter(right()), NoDrafter()):
        result, _ = run(drafter, stop=[stop])
        assert result.finish_reason == "stop_string"
        assert result.text == text[:cut]
        # one letter per token: generation ends with the token that completes the stop string
        assert result.target_ids == reference[: cut + len(stop)]


@pytest.mark.parametrize("max_new_tokens", [1, 2, 7, 10])
def test_max_length_and_a_too_long_proposal_is_cut_to_the_room_left(max_new_tokens):
    drafter = ScriptedDrafter(too_long)
    result, target = run(drafter, max_new_tokens=max_new_tokens)
    check_against_target_alone(result, target, max_new_tokens=max_new_tokens)
    assert len(result.target_ids) == max_new_tokens and result.finish_reason == "length"
    assert not result.stats.draft_failed
    # every round: the last committed token plus at most the room the budget gave
    for scored, budget in zip(target.extend_sizes[1:], drafter.budgets, strict=True):
        assert scored - 1 == budget.max_target_tokens
    if max_new_tokens > 1:
        assert drafter.budgets[0].max_target_tokens == max_new_tokens - 2  # the room after the first token


def test_truncated_keeps_the_first_tokens_and_the_rest_of_the_proposal():
    proposal = Proposal([0, 1, 2, 3], source="x", confidence=0.5, draft_step_seconds=0.1)
    cut = proposal.truncated(2)
    assert cut.target_ids == [0, 1]
    assert (cut.source, cut.confidence, cut.draft_step_seconds) == ("x", 0.5, 0.1)


@pytest.mark.parametrize("bad_id", [TOKENIZER_ROWS, LM_HEAD_ROWS - 1, 10**9, -1])
def test_ids_outside_the_target_vocabulary_disable_the_drafter(bad_id):
    drafter = ScriptedDrafter(lambda context, budget: [letters_rule(context), bad_id])
    result, target = run(drafter)
    check_against_target_alone(result, target)
    assert result.stats.draft_failed and "outside the target vocabulary" in result.stats.draft_failure_reason
    assert drafter.calls["propose"] == 1  # never asked again
    assert result.stats.draft_tokens_proposed == 0  # the bad proposal never reached the target


def test_a_drafter_that_keeps_proposing_nothing_is_disabled():
    drafter = ScriptedDrafter(lambda context, budget: [])
    result, target = run(drafter)
    check_against_target_alone(result, target)
    assert result.stats.draft_failed and "nothing usable" in result.stats.draft_failure_reason
    assert drafter.calls["propose"] == MAX_EMPTY_ROUNDS


def test_an_empty_proposal_is_a_normal_answer_from_a_drafter_that_stops_by_confidence():
    drafter = ScriptedDrafter(lambda context, budget: [], stops_by_confidence=True)
    result, target = run(drafter)
    check_against_target_alone(result, target)
    assert not result.stats.draft_failed
    assert drafter.calls["propose"] == result.stats.rounds > MAX_EMPTY_ROUNDS


@pytest.mark.parametrize("method, call", [("start", 1), ("propose", 1), ("propose", 3), ("commit", 1), ("commit", 3)])
def test_a_drafter_that_raises_leaves_the_target_to_finish(method, call):
    """commit's first call is the prefill's token, right after start."""
    drafter = ScriptedDrafter(right_then_wrong(1), raise_in=method, raise_on_call=call)
    result, target = run(drafter)
    check_against_target_alone(result, target)
    assert result.stats.draft_failed
    assert f"drafter {method} raised RuntimeError: scripted {method} failure" == result.stats.draft_failure_reason
    assert drafter.calls[method] == call  # a disabled drafter is never called again


# -- the round contract: budget in, proposal out, feedback to the policy ----------------------------


class RecordingPolicy(ConstantLength):
    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.feedback: list[RoundFeedback] = []
        self.resets: list[bool] = []

    def reset(self, confidence_stopping: bool = False) -> None:
        self.resets.append(confidence_stopping)

    def update(self, feedback: RoundFeedback) -> None:
        self.feedback.append(feedback)


def test_the_policy_learns_from_the_proposal_the_outcome_and_the_loops_clock():
    drafter = ScriptedDrafter(right_then_wrong(2), stops_by_confidence=True, confidence=0.25,
                              draft_step_seconds=0.01, translate_seconds=0.002)
    policy = RecordingPolicy(4)
    result, target = run(drafter, policy=policy)
    check_against_target_alone(result, target)
    assert policy.resets == [True]  # told the drafter stops by confidence
    assert len(policy.feedback) == result.stats.rounds - 1  # no update after the last round
    for feedback in policy.feedback:
        assert (feedback.draft_steps, feedback.proposed, feedback.accepted) == (4, 3, 2)
        assert (feedback.predicted_confidence, feedback.draft_step_seconds) == (0.25, 0.01)
        assert feedback.draft_seconds >= 0 and feedback.verify_seconds > 0
    assert result.stats.time_translating_s == pytest.approx(0.002 * drafter.calls["propose"])


class PlainSteps(DraftLengthPolicy):
    def next_length(self) -> int:
        return 0


def test_a_round_the_policy_does_not_draft_never_calls_the_drafter():
    drafter = ScriptedDrafter(right())
    result, target = run(drafter, policy=PlainSteps())
    check_against_target_alone(result, target)
    assert drafter.calls["propose"] == 0 and result.stats.draft_tokens_proposed == 0
    # a request that never drafts (a batch under load) never pays the draft's prompt read
    assert drafter.calls["start"] == 0 and drafter.calls["commit"] == 0


class DraftsFromRound(DraftLengthPolicy):
    """No drafting for the first `plain` rounds, then 3 tokens a round."""

    def __init__(self, plain: int) -> None:
        self.plain, self.rounds = plain, 0

    def next_length(self) -> int:
        return 0 if self.rounds < self.plain else 3

    def update(self, feedback: RoundFeedback) -> None:
        self.rounds += 1


def test_a_drafter_started_late_reads_the_prompt_and_everything_generated_since():
    drafter = ScriptedDrafter(right())
    result, target = run(drafter, policy=DraftsFromRound(5))
    check_against_target_alone(result, target)
    assert drafter.calls["start"] == 1
    # in step from its first round: every proposal of the "right" script is kept
    assert result.stats.draft_tokens_proposed > 0
    assert result.stats.draft_tokens_accepted == result.stats.draft_tokens_proposed
    assert result.stats.draft_rounds == result.stats.rounds - 5


def test_num_draft_tokens_caps_what_a_confidence_stopping_drafter_is_asked():
    """`-k 3` with the default adaptive policy: the drafter that stops by its own confidence gets
    at most 3 steps and the policy's stop advice (before, the cap was always 12)."""
    drafter = ScriptedDrafter(right(), stops_by_confidence=True, confidence=0.9, draft_step_seconds=0.001)
    result, target = run(drafter, policy=make_policy("adaptive", 3))
    check_against_target_alone(result, target)
    steps = {budget.max_draft_steps for budget in drafter.budgets}
    assert max(steps) == 3
    assert all(budget.stop_at(1) > 0 for budget in drafter.budgets)


def test_a_drafter_without_confidence_stopping_gets_no_stop_advice():
    drafter = ScriptedDrafter(right())
    run(drafter, policy=make_policy("adaptive"))
    assert drafter.budgets and all(budget.stop_confidence == (0.0,) for budget in drafter.budgets)


class FreeProposals(ScriptedDrafter):
    """Offers the script's tokens as free proposals (no draft step, like a prompt-lookup match) every
    third round, and its model proposals otherwise."""

    @property
    def offers_free_proposals(self) -> bool:
        return True

    def free_proposal(self, budget: DraftBudget) -> Proposal:
        self._called("free_proposal")
        if self.calls["free_proposal"] % 3:
            return Proposal([], source="lookup")
        return Proposal(self.script(self.context, DraftBudget(6, budget.max_target_tokens)), source="lookup")


def test_free_proposals_are_verified_even_in_rounds_the_policy_keeps_from_drafting():
    """A paused policy (length 0) still lets a free proposal through: on HumanEval/9 the hybrid's lookup
    never proposed once the policy had paused, though the answer repeats a name four times. The
    drafter starts for it, the model is never asked, the round reports no draft step, and the output
    stays the target's own."""
    drafter = FreeProposals(right())
    feedback: list[RoundFeedback] = []

    class Paused(ConstantLength):
        def update(self, fb: RoundFeedback) -> None:
            feedback.append(fb)

    result, target = run(drafter, policy=Paused(0))
    check_against_target_alone(result, target)
    assert drafter.calls["start"] == 1 and drafter.calls["propose"] == 0
    assert result.stats.proposals_by_source["lookup"] > 0
    assert result.stats.accepted_by_source["lookup"] == result.stats.proposals_by_source["lookup"]
    assert all(fb.draft_steps == 0 for fb in feedback)
    assert result.stats.rounds < 40 - 1  # the free rounds wrote several tokens each


def test_a_model_proposal_follows_when_no_free_one_is_offered():
    drafter = FreeProposals(right())
    result, target = run(drafter, policy=ConstantLength(3))
    check_against_target_alone(result, target)
    assert drafter.calls["propose"] > 0 and set(result.stats.proposals_by_source) == {"lookup", "scripted"}
