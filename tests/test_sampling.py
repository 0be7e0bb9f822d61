"""Lossless sampling at the unit level: the keyed verifier's output is the target's own sample at
every position, whatever was proposed, and its law is the target's p.

Distributions live on real-sized vocabularies (Qwen2's 151,936 logit rows with 271 padded rows,
a 49,152-token draft with padded rows of its own). Each distribution check is a chi-square
goodness-of-fit test against the exactly known p at false-alarm rate ALPHA = 1e-3 (seeds are
fixed, so runs are deterministic). The same statistic must reject deliberately broken verifiers,
and the identity check (same key, same tokens as the target alone) must reject a verifier that
reads the wrong position's noise: that is what shows the checks can fail.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from anypair.sampling import PositionNoise, keyed_sample, make_generator, sample_draft_token, warp_logits
from anypair.sampling.draft import IdentityMap
from anypair.types import Proposal, SamplingConfig, VerifyOutcome
from anypair.verifiers.sampling import SamplingVerifier
from test_sampling_stats import ALPHA, chi_square_p_value, total_variation

QWEN_ROWS, QWEN_TOKENS = 151_936, 151_665  # Qwen2.5 LM-head rows / tokenizer ids
DRAFT_ROWS, DRAFT_TOKENS = 49_216, 49_152  # a SmolLM2-sized draft, padded to a multiple of 64
POSITIONS = 4  # first tokens checked per sample (the first is the target's, the rest verified)


@dataclass
class VocabMapStandIn:
    """Index tensors shaped like the translator's VocabMap (the real one is used in test_sampling_e2e)."""

    draft_to_target: torch.Tensor
    target_to_draft: torch.Tensor


@dataclass
class SyntheticPair:
    target_logits: torch.Tensor  # [POSITIONS + 1, target rows]
    draft_logits: torch.Tensor  # [POSITIONS, draft rows]
    vocab_map: VocabMapStandIn


def make_vocab_map(target_rows, target_tokens, draft_rows, draft_tokens, shared, generator) -> VocabMapStandIn:
    """`shared` draft ids get distinct target twins; two extra draft ids spell the same bytes as an
    already shared one (SentencePiece `<0xNN>` twins); padded rows map nowhere."""
    draft_to_target = torch.full((draft_rows,), -1, dtype=torch.long)
    target_to_draft = torch.full((target_rows,), -1, dtype=torch.long)
    draft_ids = torch.randperm(draft_tokens, generator=generator)[:shared]
    target_ids = torch.randperm(target_tokens, generator=generator)[:shared]
    draft_to_target[draft_ids] = target_ids
    target_to_draft[target_ids] = draft_ids
    free = torch.nonzero(draft_to_target[:draft_tokens] < 0).flatten()[:2]
    draft_to_target[free] = target_ids[0]
    return VocabMapStandIn(draft_to_target, target_to_draft)


def make_pair(seed: int, target_rows=QWEN_ROWS, target_tokens=QWEN_TOKENS, draft_rows=DRAFT_ROWS,
              draft_tokens=DRAFT_TOKENS, shared=30_000, support=40, in_intersection=30) -> SyntheticPair:
    """Peaked target rows (a `support`-token head, some of it outside the intersection, over a
    long tail) and draft rows that like an overlapping but different set, with differently
    ordered preferences, so p and q differ a lot and every verifier path is taken."""
    generator = torch.Generator().manual_seed(seed)
    vocab_map = make_vocab_map(target_rows, target_tokens, draft_rows, draft_tokens, shared, generator)
    shared_draft = torch.nonzero(vocab_map.draft_to_target >= 0).flatten()
    outside_draft = torch.nonzero(vocab_map.draft_to_target[:draft_tokens] < 0).flatten()
    outside_target = torch.nonzero(vocab_map.target_to_draft[:target_tokens] < 0).flatten()

    target_logits = 0.5 * torch.randn(POSITIONS + 1, target_rows, generator=generator)
    target_logits[:, target_tokens:] = float("-inf")  # padded rows: the loop masks them
    draft_logits = 0.5 * torch.randn(POSITIONS, draft_rows, generator=generator)
    draft_logits[:, draft_tokens:] = 13.0  # padded draft rows must never be proposed
    for row in range(POSITIONS + 1):
        pick = shared_draft[torch.randperm(shared_draft.numel(), generator=generator)[: in_intersection + 10]]
        head_shared = vocab_map.draft_to_target[pick[:in_intersection]]
        head_outside = outside_target[torch.randperm(outside_target.numel(), generator=generator)[: support - in_intersection]]
        head = torch.cat([head_shared, head_outside])
        target_logits[row, head] = 13.0 + 1.5 * torch.randn(head.numel(), generator=generator)
        if row < POSITIONS:
            # the draft roughly agrees with the target on the shared head, and also likes tokens the target does not
            draft_logits[row, pick[:in_intersection]] = target_logits[row, head_shared] + torch.randn(in_intersection, generator=generator)
            draft_logits[row, pick[in_intersection:]] = 12.0 + torch.randn(10, generator=generator)
            draft_only = outside_draft[torch.randperm(outside_draft.numel(), generator=generator)[:10]]
            draft_logits[row, draft_only] = 13.0  # mass the intersection mask must remove
    return SyntheticPair(target_logits, draft_logits, vocab_map)


def noise_row(key: int, position: int, rows: int) -> torch.Tensor:
    noise = PositionNoise()
    noise.rekey(key)
    return noise.exponential(position, rows)


def draft_distributions(pair: SyntheticPair, draft_cfg: SamplingConfig) -> list:
    """q per position in target ids, from sample_draft_token itself (None: drafter declines)."""
    rows = pair.target_logits.shape[1]
    picks = [sample_draft_token(pair.draft_logits[j], pair.vocab_map, draft_cfg, noise_row(0, j, rows))
             for j in range(POSITIONS)]
    return [None if pick is None else pick.target_probs for pick in picks]


def speculative_counts(pair: SyntheticPair, target_cfg: SamplingConfig, draft_probs: list, n_samples: int,
                       seed: int, verifier_cls=SamplingVerifier, drafts: str = "coupled", reference: bool = False):
    """Token counts [POSITIONS, target rows] of the first POSITIONS emitted tokens over n_samples
    requests (the first token the target's own, then propose-verify rounds), plus the acceptance
    rate, and each request's emitted tokens. Rows are context-free, so the emitted tokens are
    independent and position j must follow p_j = warp(target_logits[j]).

    drafts: "coupled" (q's keyed sample with the request's own noise, what the intersection drafter
    proposes), "independent" (a draw from q with other randomness), "argmax" (q's mode, a
    deterministic drafter). reference=True: no proposals, the target alone."""
    verifier = verifier_cls(target_cfg, make_generator(seed))
    draft_generator = make_generator(seed + 1_000_000)  # the independent drafts' own randomness
    rows = pair.target_logits.shape[1]
    draft_cdfs = [None if q is None else torch.cumsum(q.to(torch.float64), 0) for q in draft_probs]
    counts = torch.zeros(POSITIONS, rows, dtype=torch.long)
    requests: list[list[int]] = []
    proposed = accepted = 0
    for _ in range(n_samples):
        emitted = [verifier.first_token(pair.target_logits[0])]
        while len(emitted) < POSITIONS:
            start = len(emitted)
            target_ids = []
            for j in range(start, POSITIONS):
                if reference or draft_probs[j] is None:
                    break
                if drafts == "argmax":
                    target_ids.append(int(draft_probs[j].argmax()))
                elif drafts == "coupled":
                    target_ids.append(keyed_sample(draft_probs[j], verifier.noise.exponential(j, rows)))
                else:
                    threshold = torch.rand(1, generator=draft_generator, dtype=torch.float64) * draft_cdfs[j][-1]
                    target_ids.append(int(torch.searchsorted(draft_cdfs[j], threshold, right=True)))
            outcome = verifier.verify(pair.target_logits[start : start + len(target_ids) + 1], Proposal(target_ids))
            proposed += len(target_ids)
            accepted += outcome.n_accepted
            emitted += target_ids[: outcome.n_accepted] + [outcome.next_target_id]
        counts[torch.arange(POSITIONS), torch.tensor(emitted[:POSITIONS])] += 1
        requests.append(emitted[:POSITIONS])
    return counts, accepted / max(proposed, 1), requests


def min_p_value(pair: SyntheticPair, target_cfg: SamplingConfig, counts: torch.Tensor) -> float:
    return min(chi_square_p_value(counts[j], warp_logits(pair.target_logits[j], target_cfg)) for j in range(POSITIONS))


class AcceptEveryDraftToken(SamplingVerifier):
    """Broken on purpose: trusts the draft blindly (output follows q, not p)."""

    def _keeps(self, proposed_id: int, sampled_id: int) -> bool:
        return True


class FreshDrawAfterDisagreement(SamplingVerifier):
    """Broken on purpose, the classic bug: where the proposal is not the target's sample, emit a
    new draw from p (other noise) instead of that sample, so the proposed token wins twice."""

    def verify(self, target_logits: torch.Tensor, proposal: Proposal) -> VerifyOutcome:
        outcome = super().verify(target_logits, proposal)
        if outcome.n_accepted == len(proposal):
            return outcome
        other = self.target_sample(target_logits[outcome.n_accepted], 10**9 + self.position)
        return VerifyOutcome(outcome.n_accepted, other)


class RoundKeyedNoise(SamplingVerifier):
    """Broken on purpose: reads the noise of the round's first position for every row of the round,
    so the text depends on how the proposals cut it into rounds (each position's law is still p)."""

    def verify(self, target_logits: torch.Tensor, proposal: Proposal) -> VerifyOutcome:
        round_start, sample = self.position, self.target_sample
        self.target_sample = lambda row, position: sample(row, round_start)  # type: ignore[method-assign]
        try:
            return super().verify(target_logits, proposal)
        finally:
            del self.target_sample


T1 = SamplingConfig(do_sample=True, temperature=1.0)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def qwen_sized_pair():
    return make_pair(seed=1)


@pytest.fixture(scope="module")
def qwen_sized_draft_probs(qwen_sized_pair):
    return draft_distributions(qwen_sized_pair, T1)


def test_fixture_is_discriminating(qwen_sized_pair, qwen_sized_draft_probs):
    """p and q must differ a lot, and part of p must lie outside the intersection, else the
    distribution checks below would be weak."""
    for j in range(POSITIONS):
        p = warp_logits(qwen_sized_pair.target_logits[j], T1)
        q = qwen_sized_draft_probs[j]
        assert total_variation(p, q) > 0.3
        outside = qwen_sized_pair.vocab_map.target_to_draft < 0
        assert float(p[outside].sum()) > 0.03
        assert float(q[outside].sum()) == 0.0


def test_output_follows_target_distribution(qwen_sized_pair, qwen_sized_draft_probs):
    counts, acceptance, _ = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=800, seed=11)
    # every path taken: acceptances, disagreements, bonus tokens
    assert 0.15 < acceptance < 0.85, acceptance
    assert min_p_value(qwen_sized_pair, T1, counts) > ALPHA / POSITIONS  # Bonferroni over positions


@pytest.mark.parametrize("drafts", ["coupled", "independent", "argmax"])
def test_every_request_is_the_target_alone_with_the_same_key(qwen_sized_pair, qwen_sized_draft_probs, drafts):
    """The defining property: whatever is proposed, each request emits exactly the tokens the target
    writes alone with the same seed."""
    alone = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=60, seed=15, reference=True)
    drafted = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=60, seed=15, drafts=drafts)
    assert drafted[1] > 0.02  # proposals were kept: the rounds really were cut differently
    assert drafted[2] == alone[2]
    assert len({tuple(request) for request in alone[2]}) > 30  # and the keys do differ between requests


def test_coupled_drafts_are_kept_more_often_than_independent_ones(qwen_sized_pair, qwen_sized_draft_probs):
    """Reading the target's noise is what the intersection drafter gains: where q is near p the two
    races are won by the same token."""
    _, coupled, _ = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=300, seed=16)
    _, independent, _ = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=300, seed=16,
                                           drafts="independent")
    assert coupled > independent + 0.1, (coupled, independent)


def test_round_keyed_noise_is_caught(qwen_sized_pair, qwen_sized_draft_probs):
    alone = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=60, seed=17, reference=True)
    broken = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=60, seed=17,
                                verifier_cls=RoundKeyedNoise)
    assert broken[2] != alone[2]


def test_accept_everything_verifier_is_caught(qwen_sized_pair, qwen_sized_draft_probs):
    counts, _, _ = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=300, seed=12,
                                      verifier_cls=AcceptEveryDraftToken, drafts="independent")
    assert min_p_value(qwen_sized_pair, T1, counts) < ALPHA / POSITIONS


def test_fresh_draw_after_disagreement_is_caught(qwen_sized_pair, qwen_sized_draft_probs):
    counts, _, _ = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=600, seed=13,
                                      verifier_cls=FreshDrawAfterDisagreement, drafts="argmax")
    assert min_p_value(qwen_sized_pair, T1, counts) < ALPHA / POSITIONS


def test_deterministic_proposals_are_lossless(qwen_sized_pair, qwen_sized_draft_probs):
    """A lookup drafter proposes without a distribution; a greedy draft proposes its mode."""
    counts, acceptance, _ = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=400, seed=14,
                                               drafts="argmax")
    assert acceptance > 0.02
    assert min_p_value(qwen_sized_pair, T1, counts) > ALPHA / POSITIONS


WARPS = [
    # (target cfg, draft cfg): the draft's own warping may differ from the target's; top-p over the
    # full vocabulary is checked end to end in test_sampling_e2e
    (SamplingConfig(do_sample=True, temperature=0.7), SamplingConfig(do_sample=True, temperature=0.7)),
    (SamplingConfig(do_sample=True, temperature=1.3, top_k=20), SamplingConfig(do_sample=True, temperature=1.3, top_k=20)),
]


@pytest.mark.parametrize("target_cfg,draft_cfg", WARPS, ids=["T0.7", "T1.3-k20"])
def test_warped_output_follows_warped_target(target_cfg, draft_cfg):
    # a Llama-2-sized vocabulary keeps the top-p sorts cheap
    pair = make_pair(seed=2, target_rows=32_064, target_tokens=32_000, draft_rows=32_000, draft_tokens=32_000, shared=20_000)
    draft_probs = draft_distributions(pair, draft_cfg)
    counts, acceptance, _ = speculative_counts(pair, target_cfg, draft_probs, n_samples=500, seed=21)
    assert acceptance > 0.05
    assert min_p_value(pair, target_cfg, counts) > ALPHA / POSITIONS
    broken, _, _ = speculative_counts(pair, target_cfg, draft_probs, n_samples=300, seed=22,
                                      verifier_cls=AcceptEveryDraftToken, drafts="independent")
    assert min_p_value(pair, target_cfg, broken) < ALPHA / POSITIONS


def test_small_intersection_declines_or_stays_lossless():
    """A draft sharing 1% of its vocabulary: positions where the intersection holds almost none of
    the draft's mass propose nothing (one target sample), others propose from what is left."""
    pair = make_pair(seed=3, shared=500, in_intersection=3, support=40)
    generator = torch.Generator().manual_seed(5)
    hopeless = pair.draft_logits[0].clone()
    hopeless[pair.vocab_map.draft_to_target < 0] += 30.0  # all the draft's mass is off the intersection
    pair.draft_logits[0] = hopeless
    draft_probs = draft_distributions(pair, T1)
    assert draft_probs[0] is None and draft_probs[1] is not None
    counts, _, _ = speculative_counts(pair, T1, draft_probs, n_samples=400, seed=31)
    assert min_p_value(pair, T1, counts) > ALPHA / POSITIONS
    del generator


# -- sample_draft_token ----------------------------------------------------------------------


def test_draft_sample_follows_the_distribution_it_reports(qwen_sized_pair):
    """Over many keys the keyed pick follows q; twins of one target id are one token."""
    cfg = SamplingConfig(do_sample=True, temperature=0.9, top_k=30)
    logits = qwen_sized_pair.draft_logits[0]
    picks = [sample_draft_token(logits, qwen_sized_pair.vocab_map, cfg, noise_row(key, 0, QWEN_ROWS))
             for key in range(600)]
    reported = picks[0].target_probs
    assert all(torch.equal(pick.target_probs, reported) for pick in picks[:20])
    assert abs(float(reported.sum()) - 1.0) < 1e-5
    for pick in picks:
        assert int(qwen_sized_pair.vocab_map.draft_to_target[pick.draft_id]) == pick.target_id
    counts = torch.bincount(torch.tensor([pick.target_id for pick in picks]), minlength=QWEN_ROWS)
    assert chi_square_p_value(counts, reported) > ALPHA


def test_draft_sample_is_the_race_the_noise_decides(qwen_sized_pair):
    """The same noise row gives the same pick: the draft's pick is q's keyed sample, the one the
    target's race picks too wherever q and p agree."""
    logits = qwen_sized_pair.draft_logits[1]
    row = noise_row(7, 3, QWEN_ROWS)
    pick = sample_draft_token(logits, qwen_sized_pair.vocab_map, T1, row)
    assert pick.target_id == keyed_sample(pick.target_probs, row)
    again = sample_draft_token(logits, qwen_sized_pair.vocab_map, T1, row.clone())
    assert (again.draft_id, again.target_id) == (pick.draft_id, pick.target_id)


def test_draft_never_leaves_the_intersection_nor_picks_padded_rows(qwen_sized_pair):
    vocab_map = qwen_sized_pair.vocab_map
    for j in range(POSITIONS):
        pick = sample_draft_token(qwen_sized_pair.draft_logits[j], vocab_map, T1, noise_row(42, j, QWEN_ROWS))
        outside = vocab_map.target_to_draft < 0
        assert float(pick.target_probs[outside].sum()) == 0.0
        assert pick.draft_id < DRAFT_TOKENS and pick.target_id >= 0


def test_twin_draft_tokens_add_up_on_their_target_id():
    """Two draft ids with the same bytes (a piece and its byte-fallback twin) are one target token;
    the draft continues with the likelier twin."""
    draft_to_target = torch.tensor([0, 1, 1, -1])
    vocab_map = VocabMapStandIn(draft_to_target, torch.tensor([0, 1, -1]))
    logits = torch.log(torch.tensor([0.2, 0.3, 0.4, 0.1]))
    pick = sample_draft_token(logits, vocab_map, T1, noise_row(0, 0, 3))
    assert torch.allclose(pick.target_probs, torch.tensor([0.2 / 0.9, 0.7 / 0.9, 0.0]))
    picks = [sample_draft_token(logits, vocab_map, T1, noise_row(key, 0, 3)) for key in range(40)]
    assert {p.draft_id for p in picks if p.target_id == 1} == {2}


def test_draft_declines_when_intersection_holds_no_mass():
    vocab_map = VocabMapStandIn(torch.tensor([-1, -1, 0, 1]), torch.tensor([2, 3]))
    row = noise_row(0, 0, 2)
    logits = torch.tensor([10.0, 10.0, -20.0, float("-inf")])
    assert sample_draft_token(logits, vocab_map, T1, row) is None
    logits = torch.tensor([10.0, 10.0, float("-inf"), float("-inf")])
    assert sample_draft_token(logits, vocab_map, T1, row) is None
    logits = torch.tensor([1.0, 1.0, 1.0, float("-inf")])
    assert sample_draft_token(logits, vocab_map, T1, row).target_id == 0


def test_identity_map_for_same_vocabulary():
    logits = torch.randn(QWEN_ROWS, generator=torch.Generator().manual_seed(0))
    row = noise_row(0, 0, QWEN_ROWS)
    pick = sample_draft_token(logits, None, T1, row)
    assert pick.draft_id == pick.target_id
    assert torch.allclose(pick.target_probs, torch.softmax(logits, dim=0))
    pick2 = sample_draft_token(logits, IdentityMap(QWEN_ROWS), T1, row)
    assert pick2.draft_id == pick.draft_id and torch.equal(pick2.target_probs, pick.target_probs)


def test_draft_map_too_short_is_a_clear_error():
    vocab_map = VocabMapStandIn(torch.tensor([0, 1]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="draft model"):
        sample_draft_token(torch.zeros(5), vocab_map, T1, noise_row(0, 0, 2))


# -- warping, sampler, reproducibility --------------------------------------------------------


def test_top_k_keeps_every_token_tied_with_the_kth():
    """transformers' TopKLogitsWarper removes only scores strictly below the k-th: ties stay."""
    probs = warp_logits(torch.tensor([5.0, 4.0, 4.0, 4.0, 1.0]), SamplingConfig(do_sample=True, top_k=2))
    assert (probs > 0).tolist() == [True, True, True, True, False]


def test_top_p_keeps_the_smallest_head_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = warp_logits(logits, SamplingConfig(do_sample=True, top_p=0.75))
    assert (probs > 0).tolist() == [True, True, False, False]
    assert torch.allclose(probs[:2], torch.tensor([0.625, 0.375]))


def test_keyed_sampler_never_picks_zero_probability_and_matches_law():
    probs = torch.zeros(QWEN_ROWS)
    probs[[0, 5, 77_000, QWEN_ROWS - 1]] = torch.tensor([0.1, 0.2, 0.3, 0.4])
    noise = PositionNoise()
    noise.rekey(3)
    draws = torch.tensor([keyed_sample(probs, noise.exponential(position, QWEN_ROWS)) for position in range(4000)])
    counts = torch.bincount(draws, minlength=QWEN_ROWS)
    assert chi_square_p_value(counts, probs) > ALPHA
    with pytest.raises(ValueError, match="no positive probability"):
        keyed_sample(torch.zeros(QWEN_ROWS), noise.exponential(0, QWEN_ROWS))


def long_tail_head_counts(noise: PositionNoise, n_draws: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Counts of [token 8, token 7, every other token] over n_draws keyed samples from a law whose
    two head tokens hold 99.2% and whose other 151,934 tokens share the rest in tiny pieces, with
    the exact probabilities of those three bins."""
    logits = 2.5 * torch.randn(QWEN_ROWS, generator=torch.Generator().manual_seed(0))
    logits[7] += 20.0
    logits[8] += 19.0
    probs = torch.softmax(logits, dim=0)
    draws = torch.tensor([keyed_sample(probs, noise.exponential(position, QWEN_ROWS)) for position in range(n_draws)])
    counts = torch.tensor([int((draws == 8).sum()), int((draws == 7).sum()), int(((draws != 7) & (draws != 8)).sum())])
    bins = torch.stack([probs[8], probs[7], 1.0 - probs[8] - probs[7]])
    return counts, bins


def test_the_race_keeps_the_law_of_a_long_tail():
    """A real LM's law: a peaked head over ~150k tail tokens of probability 1e-10..1e-6. A tail
    token wins when its noise is about as small as its probability, so noise that is coarse near 0
    (numpy's float32 ziggurat: its small draws come from 23-bit integers) lets the tail win twice
    as often as it should; the test must see that."""
    noise = PositionNoise()
    noise.rekey(1)
    counts, bins = long_tail_head_counts(noise, 3000)
    assert chi_square_p_value(counts, bins) > ALPHA

    class Float32Ziggurat(PositionNoise):
        def exponential(self, position: int, rows: int, device="cpu") -> torch.Tensor:
            import numpy as np

            generator = np.random.Generator(np.random.SFC64(np.random.SeedSequence((self.key, position))))
            draws = generator.standard_exponential(rows, dtype=np.float32).astype(np.float64)
            return torch.from_numpy(np.maximum(draws, np.finfo(np.float64).tiny)).to(device)

    coarse = Float32Ziggurat()
    coarse.rekey(1)
    coarse_counts, _ = long_tail_head_counts(coarse, 3000)
    assert chi_square_p_value(coarse_counts, bins) < ALPHA


def test_position_noise_depends_on_key_and_position_only():
    first, second = PositionNoise(), PositionNoise()
    first.rekey(9)
    second.rekey(9)
    for position in (5, 0, 3):  # read in another order than the first
        first.exponential(position, 100)
    for position in (0, 3, 5):
        assert torch.equal(second.exponential(position, 100), first.exponential(position, 100))
    assert not torch.equal(first.exponential(0, 100), first.exponential(1, 100))
    second.rekey(10)
    assert not torch.equal(second.exponential(0, 100), first.exponential(0, 100))
    assert float(first.exponential(2, 100_000).mean()) == pytest.approx(1.0, abs=0.02)  # Exp(1)
    with pytest.raises(RuntimeError, match="rekey"):
        PositionNoise().exponential(0, 10)


def test_the_noise_is_drawn_on_the_cpu_and_copied_to_the_logits_device():
    noise = PositionNoise()
    noise.rekey(2**63 + 12345)
    # a key's draws at a position are pinned: a seed keeps its text across releases and across devices
    pinned = [0.15439319015705333, 1.5771726962938084, 0.29324972369090974, 0.07271743296684637]
    assert noise.exponential(7, 4).tolist() == pinned
    on_meta = noise.exponential(7, 4, "meta")
    assert on_meta.device.type == "meta" and on_meta.dtype == torch.float64 and on_meta.shape == (4,)
    assert noise.exponential(7, 4).tolist() == pinned  # the device copy left the CPU row as it was
    with pytest.raises(ValueError, match="ask PositionNoise.exponential for the probabilities' device"):
        keyed_sample(torch.ones(4, device="meta"), noise.exponential(7, 4))


def test_the_verifier_races_on_the_logits_device(monkeypatch):
    """A GPU's logits faked on the CPU (FakeTensorMode: tensors that say they are on cuda and fail as
    CUDA does when mixed with CPU tensors, as the keyed noise did on an H100): the whole race, warping
    (temperature: top-k and top-p write scalars, which fake tensors cannot) and the noise included, runs
    on the logits' device. Reading the winner back needs real data, so the race is recorded, not read."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from anypair.sampling import keyed
    from anypair.verifiers import sampling as verifier_module

    races = []

    def recorded_sample(probs: torch.Tensor, noise_row: torch.Tensor) -> int:
        race = keyed.keyed_race(probs, noise_row)
        races.append((probs.device, noise_row.device, race.device))
        return 0

    monkeypatch.setattr(verifier_module, "keyed_sample", recorded_sample)
    verifier = SamplingVerifier(SamplingConfig(do_sample=True, temperature=0.7, seed=3))
    verifier.noise.rekey(5)
    with FakeTensorMode(allow_non_fake_inputs=True):
        logits = torch.empty(QWEN_ROWS, device="cuda")
        verifier.target_sample(logits, 0)
        verifier.target_sample(logits.unsqueeze(0), 1)  # a [1, V] row, as a batch's forward gives
    cuda = torch.device("cuda", 0)
    assert races == [(cuda, cuda, cuda)] * 2


def test_same_seed_same_tokens_other_seed_other_tokens(qwen_sized_pair, qwen_sized_draft_probs):
    def run(seed):
        counts, _, _ = speculative_counts(qwen_sized_pair, T1, qwen_sized_draft_probs, n_samples=30, seed=seed)
        return counts

    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))


def test_verifier_rejects_greedy_config_bad_shapes_and_a_round_before_the_first_token():
    with pytest.raises(ValueError, match="GreedyVerifier"):
        SamplingVerifier(SamplingConfig(do_sample=False))
    verifier = SamplingVerifier(T1, make_generator(0))
    with pytest.raises(RuntimeError, match="first_token"):
        verifier.verify(torch.zeros(3, 10), Proposal([1, 2]))
    verifier.first_token(torch.zeros(10))
    with pytest.raises(ValueError, match="shape"):
        verifier.verify(torch.zeros(1, 10), Proposal([1, 2]))
