"""Typed records that cross module boundaries: the sampling config, the round contract (budget,
proposal, verification outcome, policy feedback) and generation results. Target-token ids and
draft-token ids never share a field: every id list is named for the vocabulary it belongs to.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional, Union


from anypair.errors import InputError


#: the seeds a request's generator takes (torch.Generator.manual_seed's range: 64 bits, either sign)
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


@dataclass(frozen=True)
class SamplingConfig:
    """How the *target's* next-token distribution is shaped. `do_sample=False` is greedy."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        if self.do_sample and not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise InputError(f"temperature must be a finite number > 0 when sampling, got {self.temperature!r}: "
                             "lower values sample closer to greedy; for greedy itself turn sampling off")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise InputError(f"top_k must be an integer >= 0, got {self.top_k!r} (0 turns it off)")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r} (1 turns it off)")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not SEED_MIN <= self.seed <= SEED_MAX):
            raise InputError(f"seed must be an integer from {SEED_MIN} to {SEED_MAX} (64 bits), got {self.seed!r}: "
                             "any one of them fixes the text; leave it unset for a fresh sample")


# -- one round: the loop gives the drafter a budget, the drafter answers with a proposal, the
# verifier with an outcome, and the policy learns from the feedback built out of all three.


@dataclass(frozen=True)
class DraftBudget:
    """What the drafter may spend on one round."""

    max_draft_steps: int  # draft forward steps (the policy's length; a lookup treats it as a token count)
    max_target_tokens: int  # room left before max_new_tokens, less the token the target adds itself
    # stop once the drafter's probability that its whole proposal is right would fall below this
    # (0: never); only drafters that declare `stops_by_confidence` read it (`stop_at`). Several: one for
    # each proposal length 1, 2, ..., the last for longer ones (a token whose row is dearer, past the
    # verification's cheap rows, must be likelier); kept as a tuple
    stop_confidence: Union[float, tuple[float, ...]] = 0.0
    # a tree of candidates (`Proposal.parents`) is welcome: the drafter may add an alternative to its
    # proposal where its probability of being the target's (with the tokens before it) is at least
    # this; None: a chain only (the target's engine scores chains, or trees are off)
    branch_confidence: Optional[float] = None
    # what each extra row of the verification adds to a target step, where the policy prices rounds
    # at fixed costs (a replay at another target's size); None: the drafter's own measured price
    row_price: Optional[float] = None

    def __post_init__(self) -> None:
        stops = self.stop_confidence if isinstance(self.stop_confidence, tuple) else (self.stop_confidence,)
        object.__setattr__(self, "stop_confidence", tuple(float(s) for s in stops) or (0.0,))
        if self.max_draft_steps < 0 or self.max_target_tokens < 0 or not all(0 <= s < 1 for s in self.stop_confidence) \
                or not (self.branch_confidence is None or 0 <= self.branch_confidence < 1) \
                or not (self.row_price is None or self.row_price >= 0):
            raise ValueError(f"a draft budget needs non-negative limits and prices, and confidences in [0, 1): {self}")

    def stop_at(self, length: int) -> float:
        """The stop confidence for a proposal growing to `length` tokens."""
        return self.stop_confidence[min(max(length, 1), len(self.stop_confidence)) - 1]


@dataclass(frozen=True)
class Proposal:
    """What a drafter proposes for one round, already in the target's id space, with what the
    policy needs to know about how it was made."""

    target_ids: list[int]  # [n]
    source: str = "model"  # which drafter produced it ("model", "lookup", ...)
    # the drafter's own probability that every proposed token is kept (model drafters)
    confidence: Optional[float] = None
    # part of the propose call spent translating draft text into target ids (in statistics apart)
    translate_seconds: float = 0.0
    # the drafter's estimate of one draft step's cost, if it measures one (the policy's cost model)
    draft_step_seconds: Optional[float] = None
    # part of the propose call the draft spent reading tokens committed since it last drafted (its
    # catch-up after a paused stretch): a cost of the pause, not of drafting from here on
    catch_up_seconds: float = 0.0
    # a tree of candidates: per proposed token, the earlier proposed token it follows (-1: the last
    # committed one); its first tokens are the main chain (each following the one before), the
    # alternatives come after. None: a chain. Scored in one forward, each token attending to its
    # ancestors only (`ModelBackend.scores_trees`)
    parents: Optional[tuple[int, ...]] = None
    # a tree's main chain: its first this many tokens (what the drafter proposes alone: the policy's
    # length and calibration count these); None: the leading tokens that each follow the one before
    main_length: Optional[int] = None

    def __len__(self) -> int:
        return len(self.target_ids)

    def truncated(self, n_tokens: int) -> Proposal:
        """The first `n_tokens` proposed tokens (a tree's: its main chain first), everything else kept."""
        parents = self.parents[:n_tokens] if self.parents is not None else None
        main = min(self.main_length, n_tokens) if self.main_length is not None else None
        if parents is not None and all(p == i - 1 for i, p in enumerate(parents)) and main in (None, len(parents)):
            parents = main = None  # what is left is a chain
        return replace(self, target_ids=self.target_ids[:n_tokens], parents=parents, main_length=main)

    @property
    def chain_length(self) -> int:
        """Tokens of the main chain (all of a chain's)."""
        if self.parents is None:
            return len(self.target_ids)
        if self.main_length is not None:
            return self.main_length
        return next((i for i, p in enumerate(self.parents) if p != i - 1), len(self.parents))

    def main_chain(self) -> Proposal:
        """The main chain alone (what an engine of chains, or a grammar's check, scores)."""
        return self.truncated(self.chain_length)

    def row_parents(self) -> Optional[list[int]]:
        """For the rows [last committed token, *target_ids]: each row's parent row (None: a chain)."""
        return None if self.parents is None else [-1, *(p + 1 for p in self.parents)]


@dataclass(frozen=True)
class VerifyOutcome:
    """How many proposed target tokens the target accepted, and the token it adds itself."""

    n_accepted: int
    next_target_id: int
    # the accepted proposed tokens' indices in a tree (None: a chain's first n_accepted)
    path: Optional[tuple[int, ...]] = None

    def accepted_ids(self, proposal: Proposal) -> list[int]:
        """The proposed target ids kept, in order."""
        if self.path is None:
            return list(proposal.target_ids[:self.n_accepted])
        return [proposal.target_ids[i] for i in self.path]

    def scored_rows(self) -> list[int]:
        """The rows of [last committed token, *proposal] that chose each emitted token, in order."""
        return [0, *(i + 1 for i in self.path)] if self.path is not None else list(range(self.n_accepted + 1))

    def kept_of_main_chain(self, proposal: Proposal) -> int:
        """The tokens kept, counted against the main chain (what the policies learn from: a tree's
        alternatives are rows the verification pays for, their tokens kept count as the chain's)."""
        return min(self.n_accepted, proposal.chain_length)


@dataclass(frozen=True)
class RoundFeedback:
    """What a draft-length policy learns from one round (see `RoundFeedback.of_round`)."""

    draft_steps: int  # draft steps the budget allowed (0: the round did not draft)
    proposed: int  # target tokens proposed
    accepted: int  # target tokens accepted
    draft_seconds: float  # the propose call by the loop's clock, translation included
    verify_seconds: float  # the target's scoring pass and the verifier
    draft_step_seconds: Optional[float]  # the drafter's own measurement of one step, if any
    # the drafter's own probability that the whole proposal was right (model drafters), if any
    predicted_confidence: Optional[float] = None
    catch_up_seconds: float = 0.0  # part of draft_seconds spent catching up on committed tokens

    @classmethod
    def of_round(cls, budget: DraftBudget, proposal: Proposal, outcome: VerifyOutcome,
                 draft_seconds: float, verify_seconds: float) -> RoundFeedback:
        return cls(budget.max_draft_steps, proposal.chain_length, outcome.kept_of_main_chain(proposal), draft_seconds,
                   verify_seconds, proposal.draft_step_seconds, proposal.confidence, proposal.catch_up_seconds)


@dataclass
class GenerationStats:
    rounds: int = 0
    draft_tokens_proposed: int = 0  # target tokens proposed to the verifier
    draft_tokens_accepted: int = 0
    new_tokens: int = 0
    prompt_tokens: int = 0
    time_prefill_s: float = 0.0
    time_drafting_s: float = 0.0
    time_translating_s: float = 0.0
    time_verifying_s: float = 0.0
    time_to_first_token_s: float = 0.0
    total_time_s: float = 0.0
    draft_failed: bool = False
    draft_failure_reason: Optional[str] = None
    # why the target ran alone although drafting was asked for (drafting lost time on recent requests)
    drafting_skipped: Optional[str] = None
    proposals_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    # continuous batching: requests per target call this request's rounds ran in (1 alone), summed
    # over its rounds, and the most; rounds in a shared call where the policy drafted nothing (a
    # drafted row's share of the shared call did not pay for the draft's own steps)
    batch_size_sum: int = 0
    batch_size_max: int = 0
    undrafted_shared_rounds: int = 0
    # the rows of the target forwards its rounds ran in (its own and the others'), summed; the draft
    # lengths its rounds were allowed, summed, and how many allowed one; the rounds in which the
    # batch cut its own policy's length (down to 0: drafting off under load) and the batch's reason
    rows_sum: int = 0
    draft_length_sum: int = 0
    draft_rounds: int = 0
    draft_capped_rounds: int = 0
    batch_draft_note: Optional[str] = None
    # each round's own rows (the last committed token and every proposed token, a tree's alternatives
    # too) and the proposed tokens kept: what `benchmarking.replay` re-runs at another target's size
    round_log: list[tuple[int, int]] = field(default_factory=list)

    @property
    def mean_rows_per_round(self) -> float:
        return self.rows_sum / self.rounds if self.rounds else 0.0

    @property
    def mean_draft_length(self) -> float:
        """The draft length its rounds were allowed, on average (0: it never drafted)."""
        return self.draft_length_sum / self.rounds if self.rounds else 0.0

    @property
    def mean_batch_size(self) -> float:
        return self.batch_size_sum / self.rounds if self.rounds else 1.0

    @property
    def acceptance_rate(self) -> float:
        return self.draft_tokens_accepted / self.draft_tokens_proposed if self.draft_tokens_proposed else 0.0

    @property
    def mean_accepted_per_round(self) -> float:
        return self.draft_tokens_accepted / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.total_time_s if self.total_time_s > 0 else 0.0


#: the most alternatives a request may ask for per position (OpenAI's top_logprobs limit)
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class TokenLogprob:
    """The target's own log-probability of one emitted token, from the forward that verified it:
    log_softmax of the target's logits at that position (before temperature, top-k/top-p and any
    grammar mask, as OpenAI and vLLM report them), and the `top` most probable tokens there."""

    target_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (target id, log-probability), most probable first


@dataclass
class GenerationResult:
    text: str
    target_ids: list[int]  # generated target-token ids (prompt excluded)
    stats: GenerationStats
    finish_reason: str  # "length" | "eos" | "stop_string"
    # one per target id, when the request asked for log-probabilities (None: it did not)
    logprobs: Optional[list[TokenLogprob]] = None


class VerifiedText(str):
    """A piece of verified text as a stream yields it, with the log-probabilities of the tokens
    verified since the previous piece (empty unless the request asked for them). It is a `str`, so
    every consumer of a stream's text reads it as text."""

    logprobs: tuple[TokenLogprob, ...]

    def __new__(cls, text: str, logprobs: tuple[TokenLogprob, ...] = ()) -> VerifiedText:
        piece = super().__new__(cls, text)
        piece.logprobs = logprobs
        return piece
