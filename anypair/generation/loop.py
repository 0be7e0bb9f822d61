"""The speculative decoding loop: prefill, then rounds of propose -> verify -> commit.

Per round the policy sets the drafter's `DraftBudget`; the drafter returns a `Proposal`; the target
scores [last committed token, *proposal] in ONE forward pass; the verifier decides how many
proposed tokens to keep and adds the target's own next token; the target's KV cache is cropped to
what was kept; the drafter learns what was committed and the policy gets the round's
`RoundFeedback`. Nothing re-encodes the context. If the drafter raises, proposes ids outside the
target's vocabulary, or keeps proposing nothing, the loop goes on with the target alone (the
output is the same, only slower) and the statistics say why.

A proposal may be a tree of candidates (`Proposal.parents`; asked for by `DraftBudget.branch_confidence`
where the target's engine scores trees and the request has no grammar): its rows go in the same one
forward, each attending to its own ancestors; the verifier walks it (`verifiers.base.walk_tree`) and
the target's cache keeps the accepted path (`Slot.keep_path`).

A request may carry a grammar (`DecodeRequest.constraint`, structured output): a proposal is cut at
the first token it rejects, and every row of the target's logits is masked in the grammar's state
at that row's position before the verifier chooses, as the target alone masks it; and may ask for
log-probabilities (`top_logprobs`): each emitted token's, from the row that verified it, yielded
with the text piece that holds it (`VerifiedText`) and kept in the result.

The loop itself (`DecodeSession.steps`) never calls the target's forward: it yields a `TargetCall`
(and, for a drafter with a draft model, each `DraftCall`, its draft's prompt read included) and is
sent the logits back.
The batch scheduler (`generation.batch`) runs every session, alone or beside others: it gathers the
calls of every active session into one shared forward. There is no other path, so a request's text
is the same alone or in company.

What the rounds measured is recorded beside the loop, at the end of this file (`RoundRecorder`): the
loop names its stages (budget, proposal, verification, commit) and hands each stage's figures there
in one call; the `GenerationStats` of its result is filled in there only.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Generator, Optional, Sequence, Union

import torch

from anypair.backends.base import ModelBackend, Slot, slot_of
from anypair.drafters.base import DraftCall, Drafter, DraftRequest, NoDrafter
from anypair.generation.text import TextAssembler
from anypair.policies import DraftLengthPolicy
from anypair.policies.adaptive import AcceptanceEstimate
from anypair.tokenization.base import TokenizerAdapter
from anypair.types import (
    DraftBudget,
    GenerationResult,
    GenerationStats,
    Proposal,
    RoundFeedback,
    TokenLogprob,
    VerifiedText,
    VerifyOutcome,
)
from anypair.verifiers.base import Verifier
from anypair.verifiers.constraints import TokenConstraint

logger = logging.getLogger("anypair")

#: consecutive empty proposals after which the drafter is considered useless for this request
MAX_EMPTY_ROUNDS = 16


@dataclass
class DecodeRequest:
    target_prompt_ids: list[int]
    max_new_tokens: int
    eos_ids: frozenset[int]
    stop_strings: Sequence[str] = ()
    draft_request: Optional[DraftRequest] = None
    # why this request runs the target alone although it asked for drafting (the generator's
    # DraftingLedger), for its statistics; None: it drafts as planned
    drafting_skipped: Optional[str] = None
    # the target's log-probability of each emitted token and this many alternatives (0-20) per
    # position, from the verification forward; None: none are computed
    top_logprobs: Optional[int] = None
    # a grammar the emitted tokens follow (structured output): its mask is applied to the target's
    # logits before the verifier chooses, as the target alone applies it (`verifiers.constraints`)
    constraint: Optional[TokenConstraint] = None
    # the drafter may add alternatives to a proposal (a tree, scored in the same forward) where the
    # target's engine scores trees; False: chains only
    candidate_trees: bool = False


@dataclass
class TargetCall:
    """A forward the loop needs from the target: `ids` after its cached positions (`prefill`: a new
    sequence, its cache reset first; the last position's logits) and the logits sent back.

    The driver sets `charged_seconds`, the time the call costs this request: the call's own time
    alone; in a shared call, its share (`generation.batch.row_share`): the base split among the
    requests, each row's marginal cost to the request that drafted it. `batch_size`: the requests
    sharing the call; `rows`: the rows of the whole forward."""

    ids: list[int]
    all_logits: bool
    prefill: bool = False
    parents: Optional[list[int]] = None  # a tree of candidates: each row's parent row (`SequenceRows`)
    charged_seconds: float = 0.0
    batch_size: int = 1
    rows: int = 0


#: what `DecodeSession.steps` yields: a forward it needs (answered with its logits), or verified text
Step = Union[TargetCall, DraftCall, str]


class DecodeSession:
    """One request's loop (`steps`), run by the batch scheduler (`generation.batch`); `result`
    afterwards."""

    def __init__(self, target: Union[Slot, ModelBackend], target_tok: TokenizerAdapter, drafter: Drafter,
                 verifier: Verifier, policy: DraftLengthPolicy, request: DecodeRequest) -> None:
        self.target = slot_of(target)  # the request's sequence of the target (by hand: a one-slot engine's)
        self.target_tok = target_tok
        self.drafter = drafter
        self.verifier = verifier
        self.policy = policy
        self.request = request
        self.stats = GenerationStats(prompt_tokens=len(request.target_prompt_ids),
                                     drafting_skipped=request.drafting_skipped)
        self.record = RoundRecorder(self.stats)  # the rounds' timings and counts, kept beside the loop
        self.generated: list[int] = []
        self.text = TextAssembler(request.stop_strings)
        # log-probabilities of the emitted tokens (when asked for), and those not yet in a yielded piece
        self.logprobs: Optional[list[TokenLogprob]] = [] if request.top_logprobs is not None else None
        self._unsent_logprobs = 0
        self.finish_reason = "length"
        self.result: Optional[GenerationResult] = None
        # padded LM-head rows are not tokens: the target never chooses them, with or without a draft
        self._n_real = min(target_tok.vocab_size, self.target.vocab_size)
        #: the batch's cap on this request's draft length for its next round (None: its policy's
        #: length stands) and why, set by the scheduler from the whole batch's measured costs
        #: (`policies.batch.plan_batch_drafts`) before it hands the request its logits
        self.draft_cap: Optional[int] = None
        self.draft_cap_reason: Optional[str] = None
        #: the per-token acceptance of this request's proposals, for the batch's plan (whatever its
        #: own policy estimates, or not)
        self.acceptance = AcceptanceEstimate()
        # the round's running state: the drafter started (it reads its prompt then), the target's last
        # committed token (the first row of the next forward), proposals in a row with nothing usable
        self._draft_started = False
        self._last_target_id = -1
        self._empty_rounds = 0

    @property
    def drafter_off(self) -> bool:
        """The request runs the target alone (it never drafted, or its drafter was disabled)."""
        return isinstance(self.drafter, NoDrafter)

    # -- helpers ------------------------------------------------------------------------------
    def _mask_padding(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] > self._n_real:
            with torch.inference_mode():  # backends return inference tensors
                logits[..., self._n_real:] = float("-inf")
        return logits

    def _record_logprobs(self, rows: torch.Tensor, target_ids: Sequence[int]) -> None:
        """The target's log-probabilities of `target_ids`, row i of `rows` for the i-th. Each row is
        copied and reduced on its own, so the figures are bitwise the target alone's, whose rows
        come one forward at a time (the engine's rows are bitwise the same either way)."""
        if self.logprobs is None:
            return
        top = self.request.top_logprobs or 0
        with torch.inference_mode():
            for row, token in zip(rows, target_ids):
                logprobs = torch.log_softmax(row.float().clone(), dim=-1)
                best = torch.topk(logprobs, top) if top else None
                alternatives = tuple(zip(best.indices.tolist(), best.values.tolist())) if best is not None else ()
                self.logprobs.append(TokenLogprob(int(token), float(logprobs[token]), alternatives))

    def _piece(self, text: str) -> VerifiedText:
        """A piece of text to yield, with the log-probabilities recorded since the previous piece."""
        if self.logprobs is None:
            return VerifiedText(text)
        # tokens past the one that ended the request (an end id or a stop string inside a round's
        # accepted tokens) were never emitted
        emitted = self.logprobs[self._unsent_logprobs:len(self.generated)]
        self._unsent_logprobs += len(emitted)
        return VerifiedText(text, tuple(emitted))

    def _disable_drafter(self, reason: str) -> None:
        if not self.stats.draft_failed:
            logger.warning("anypair: drafting disabled, finishing with the target alone: %s", reason)
        self.stats.draft_failed = True
        self.stats.draft_failure_reason = reason
        self.drafter = NoDrafter()

    def _commit(self, new_target_ids: list[int]) -> bool:
        """Append verified ids; returns True when generation must stop."""
        for token in new_target_ids:
            self.generated.append(token)
            if token in self.request.eos_ids:
                self.finish_reason = "eos"
                return True
            if self.text.feed(self.target_tok.token_bytes(token)):
                self.finish_reason = "stop_string"
                return True
            if len(self.generated) >= self.request.max_new_tokens:
                self.finish_reason = "length"
                return True
        return False

    def _drafter_call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # a broken draft must never break generation
            logger.debug("drafter %s failed", what, exc_info=True)
            self._disable_drafter(f"drafter {what} raised {type(exc).__name__}: {exc}")
            return None

    def _round_proposal(self, budget: DraftBudget) -> Generator[DraftCall, torch.Tensor, tuple[Proposal, DraftBudget]]:
        """This round's proposal and the budget it was made within: the drafter's free proposal (a
        prompt-lookup match, no draft step) when it has one, asked for even when the policy chose a
        plain target step; else the drafter's proposal within `budget`. Cut to the room left; empty
        (the drafter disabled) when the drafter raised or proposed ids the target does not have."""
        if self.drafter.offers_free_proposals and not self.drafter_off:
            free = self._drafter_call("free_proposal", self.drafter.free_proposal, budget)
            if free is not None and len(free):
                return self._checked(free, budget), replace(budget, max_draft_steps=0)
        if budget.max_draft_steps == 0:
            return Proposal([]), budget
        try:  # the draft model's forwards (a DraftCall each) go to the scheduler, beside other requests'
            proposal = yield from self.drafter.propose_steps(budget)
        except Exception as exc:  # a broken draft must never break generation
            logger.debug("drafter propose failed", exc_info=True)
            self._disable_drafter(f"drafter propose raised {type(exc).__name__}: {exc}")
            proposal = None
        return self._checked(proposal, budget), budget

    def _checked(self, proposal: Optional[Proposal], budget: DraftBudget) -> Proposal:
        if proposal is None:
            return Proposal([])
        if proposal.parents is not None and budget.branch_confidence is None:
            proposal = proposal.main_chain()  # a tree where none was asked for: its main chain
        if len(proposal) > budget.max_target_tokens:
            proposal = proposal.truncated(budget.max_target_tokens)
        outside = [t for t in proposal.target_ids if not 0 <= t < self._n_real]
        if outside:
            self._disable_drafter(f"drafter proposed ids outside the target vocabulary: {outside[:5]}")
            return Proposal([])
        return proposal

    # -- the loop -----------------------------------------------------------------------------
    def steps(self) -> Generator[Step, Optional[torch.Tensor], None]:
        """The loop, step by step: yields each `TargetCall` (send its logits back) and each piece of
        verified text (send None); `result` is set when it ends. Prefill, then rounds until done."""
        started = time.perf_counter()
        done = yield from self._prefill(started)
        self.policy.reset(confidence_stopping=self.drafter.stops_by_confidence)
        while not done:
            done = yield from self._round()
        self.text.finish()
        tail = self.text.take_new(final=True)
        if tail:
            yield self._piece(tail)
        self.record.finished(len(self.generated), time.perf_counter() - started)
        logprobs = self.logprobs[:len(self.generated)] if self.logprobs is not None else None
        self.result = GenerationResult(self.text.text, list(self.generated), self.stats, self.finish_reason, logprobs)

    def _prefill(self, started: float) -> Generator[Step, Optional[torch.Tensor], bool]:
        """The prompt read, and the target's first token (chosen like every later one: masked by the
        request's grammar, by the verifier). Returns whether the request is done already."""
        logits = yield TargetCall(list(self.request.target_prompt_ids), all_logits=False, prefill=True)
        logits = self._mask_padding(logits)
        constraint = self.request.constraint
        raw_logits = logits.clone() if constraint is not None and self.logprobs is not None else logits
        if constraint is not None:
            constraint.mask_rows(logits.view(1, -1), [])
        first_target_id = self.verifier.first_token(logits)
        self._record_logprobs(raw_logits.view(1, -1), [first_target_id])
        if constraint is not None:
            constraint.commit([first_target_id])
        self.record.prefilled(time.perf_counter() - started)
        self._last_target_id = first_target_id
        done = self._commit([first_target_id])
        chunk = self.text.take_new(final=done)
        if chunk:
            yield self._piece(chunk)
        return done

    def _round(self) -> Generator[Step, Optional[torch.Tensor], bool]:
        """One round: the budget (the policy's length, the batch's cap), the proposal, the target's
        forward over [last committed token, *proposal], the verifier's choice, the commit; then the
        drafter and the policy learn from it. Returns whether the request is done."""
        budget = self._budget()
        t0 = time.perf_counter()
        proposal, budget = yield from self._round_proposal(budget)
        constraint = self.request.constraint
        if constraint is not None and len(proposal):
            # a token the grammar rejects can never be the target's: the proposal ends before it (a
            # chain: a request with a grammar asks for no tree, `_budget`, and `_checked` keeps to that)
            proposal = proposal.truncated(constraint.allowed_prefix(proposal.target_ids))
        t1 = time.perf_counter()
        self.record.proposed(t1 - t0, proposal)
        outcome, raw_scores, verify_s = yield from self._verify(proposal, budget)
        new_target_ids = outcome.accepted_ids(proposal) + [outcome.next_target_id]
        self._record_logprobs(raw_scores[outcome.scored_rows()], new_target_ids)
        if constraint is not None:
            constraint.commit(new_target_ids)
        self.record.committed(proposal, outcome)
        self.acceptance.observe_counts(outcome.kept_of_main_chain(proposal), proposal.chain_length)
        done = self._commit(new_target_ids)
        chunk = self.text.take_new(final=done)
        if chunk:
            yield self._piece(chunk)
        if not done:
            self._last_target_id = outcome.next_target_id
            self._learn(budget, proposal, outcome, new_target_ids, t1 - t0, verify_s)
        return done

    def _budget(self) -> DraftBudget:
        """This round's draft budget (the policy's length, the batch's cap); starts the drafter before
        the first round that may propose (a request the batch keeps from drafting never starts it; a
        model drafter reads its prompt in its first proposal's first step, counted as catch-up)."""
        room = self.request.max_new_tokens - len(self.generated) - 1  # the target adds one token of its own
        length = wanted = self.policy.next_length()
        capped = self.draft_cap is not None and self.draft_cap < wanted and not self.drafter_off
        if capped:
            length = self.draft_cap
        if (length > 0 or self.drafter.offers_free_proposals) and not self._draft_started and not self.drafter_off:
            self._draft_started = True
            t0 = time.perf_counter()
            draft_request = self.request.draft_request or DraftRequest(list(self.request.target_prompt_ids))
            self._drafter_call("start", self.drafter.start, draft_request)
            self._drafter_call("commit", self.drafter.commit, list(self.generated))
            self.record.drafter_work(time.perf_counter() - t0)
        if not self.drafter_off:
            self.record.budgeted(length, self.draft_cap_reason if capped else None)
        trees = self.request.candidate_trees and self.request.constraint is None and self.target.engine.scores_trees
        return DraftBudget(length, room, self.policy.stop_confidences(), self.policy.branch_confidence() if trees else None,
                           self.policy.row_price())

    def _verify(self, proposal: Proposal, budget: DraftBudget
                ) -> Generator[Step, Optional[torch.Tensor], tuple[VerifyOutcome, torch.Tensor, float]]:
        """The target's forward over [last committed token, *proposal] and the verifier's choice; the
        target's cache cropped to what was kept. Returns the outcome, the rows as the target scored
        them (for log-probabilities) and the seconds it cost this request."""
        constraint = self.request.constraint
        t1 = time.perf_counter()
        cached = self.target.cached_length
        call = TargetCall([self._last_target_id, *proposal.target_ids], all_logits=True, parents=proposal.row_parents())
        scores = yield call
        # what the call cost this request: its own time alone, its share of a shared call
        outside = call.charged_seconds - (time.perf_counter() - t1)
        scores = self._mask_padding(scores)
        raw_scores = scores.clone() if constraint is not None and self.logprobs is not None else scores
        if constraint is not None:
            constraint.mask_rows(scores, proposal.target_ids)
        outcome = self.verifier.verify(scores, proposal)
        if proposal.parents is not None:
            self.target.keep_path(outcome.scored_rows())
        else:
            self.target.crop(cached + 1 + outcome.n_accepted)
        verify_s = time.perf_counter() + outside - t1
        undrafted_in_a_batch = call.batch_size > 1 and budget.max_draft_steps == 0 and not self.drafter_off
        self.record.verified(verify_s, call.batch_size, call.rows or len(call.ids), undrafted_in_a_batch)
        return outcome, raw_scores, verify_s

    def _learn(self, budget: DraftBudget, proposal: Proposal, outcome: VerifyOutcome, new_target_ids: list[int],
               draft_s: float, verify_s: float) -> None:
        """After a round that did not end the request: the drafter learns what was committed, the policy
        the round's feedback; a drafter that keeps proposing nothing usable is disabled."""
        if self._draft_started:  # a drafter not started yet gets everything generated when it starts
            t0 = time.perf_counter()
            self._drafter_call("commit", self.drafter.commit, new_target_ids)
            self.record.drafter_work(time.perf_counter() - t0)
        self.policy.update(RoundFeedback.of_round(budget, proposal, outcome, draft_s, verify_s))
        # an empty proposal is a normal answer from a drafter that stops when unsure
        nothing_usable = not len(proposal) and budget.max_draft_steps > 0 and not self.drafter.stops_by_confidence
        self._empty_rounds = self._empty_rounds + 1 if nothing_usable else 0
        if self._empty_rounds >= MAX_EMPTY_ROUNDS and not self.drafter_off:
            self._disable_drafter(f"the drafter proposed nothing usable in {MAX_EMPTY_ROUNDS} consecutive rounds")


class RoundRecorder:
    """What one request's rounds measured: one call a stage of the loop, into its `GenerationStats`."""

    def __init__(self, stats: GenerationStats) -> None:
        self.stats = stats

    def prefilled(self, seconds: float) -> None:
        """The prompt read and the first token chosen."""
        self.stats.time_prefill_s = self.stats.time_to_first_token_s = seconds

    def budgeted(self, length: int, capped_by: Optional[str]) -> None:
        """A round that may draft `length` steps (0: none), cut by the batch for `capped_by` (None: not cut)."""
        stats = self.stats
        if capped_by is not None:
            stats.draft_capped_rounds += 1
            stats.batch_draft_note = capped_by
        stats.draft_length_sum += length
        stats.draft_rounds += length > 0

    def drafter_work(self, seconds: float) -> None:
        """The drafter's work outside a proposal (its start, its commits)."""
        self.stats.time_drafting_s += seconds

    def proposed(self, seconds: float, proposal: Proposal) -> None:
        """The round's proposal took `seconds`, its translation included."""
        self.stats.time_translating_s += proposal.translate_seconds
        self.stats.time_drafting_s += seconds - proposal.translate_seconds

    def verified(self, seconds: float, batch_size: int, rows: int, undrafted_in_a_batch: bool) -> None:
        """The verification forward cost this request `seconds`; it scored `rows` rows of `batch_size`
        requests."""
        stats = self.stats
        stats.time_verifying_s += seconds
        stats.batch_size_sum += batch_size
        stats.rows_sum += rows
        stats.batch_size_max = max(stats.batch_size_max, batch_size)
        stats.undrafted_shared_rounds += undrafted_in_a_batch

    def committed(self, proposal: Proposal, outcome: VerifyOutcome) -> None:
        """A round ended: what was proposed, by whom, and what was kept."""
        stats = self.stats
        stats.rounds += 1
        stats.draft_tokens_proposed += len(proposal)
        stats.draft_tokens_accepted += outcome.n_accepted
        stats.round_log.append((1 + len(proposal), outcome.n_accepted))
        if len(proposal):
            source = proposal.source
            stats.proposals_by_source[source] = stats.proposals_by_source.get(source, 0) + len(proposal)
            stats.accepted_by_source[source] = stats.accepted_by_source.get(source, 0) + outcome.n_accepted

    def finished(self, new_tokens: int, seconds: float) -> None:
        self.stats.new_tokens = new_tokens
        self.stats.total_time_s = seconds
