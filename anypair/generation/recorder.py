"""What one request's rounds measured, recorded beside its loop (`loop.DecodeSession`): the loop
names its stages (budget, proposal, verification, commit) and hands each stage's figures here in
one call; the `GenerationStats` of its result is filled in here only."""
from __future__ import annotations

from typing import Optional

from anypair.types import GenerationStats, Proposal, VerifyOutcome


class RoundRecorder:
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
        if len(proposal):
            source = proposal.source
            stats.proposals_by_source[source] = stats.proposals_by_source.get(source, 0) + len(proposal)
            stats.accepted_by_source[source] = stats.accepted_by_source.get(source, 0) + outcome.n_accepted

    def finished(self, new_tokens: int, seconds: float) -> None:
        self.stats.new_tokens = new_tokens
        self.stats.total_time_s = seconds
