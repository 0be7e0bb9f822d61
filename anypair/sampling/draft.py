"""One draft sample restricted to the tokens the target can also write, carried into target ids.

A draft token whose bytes are not a single target token cannot be proposed to the target one
token for one token, so the draft samples only inside the vocabulary intersection. The
distribution it samples from (intersection-masked, then the draft's own temperature / top-k /
top-p) is carried into target-id space (q), and the draft's pick is q's keyed sample with the
noise the target will use at that position (`sampling.keyed`): where q is close to the target's
p, the two races are usually won by the same token, so the target keeps the proposal more often
than a pick independent of its noise would be kept.
"""
from __future__ import annotations

import weakref
from typing import Any, NamedTuple, Optional, Protocol

import torch

from anypair.sampling.keyed import keyed_sample
from anypair.sampling.warping import warp_logits
from anypair.types import SamplingConfig

#: below this share of the draft's probability on the intersection the draft proposes nothing:
#: its guess would be a token it itself thinks unlikely, so a target sample is the better round
MIN_INTERSECTION_MASS = 1e-3


class VocabMapLike(Protocol):
    """What sampling needs from the translator's `VocabMap`."""

    #: [draft model rows] target id with identical bytes, -1 where none (padded rows too)
    draft_to_target: torch.Tensor
    #: [target model rows] a draft id with identical bytes, -1 where none
    target_to_draft: torch.Tensor


class DraftSample(NamedTuple):
    draft_id: int
    target_id: int
    #: [target model rows] q: the distribution `target_id` was drawn from (float32, sums to 1)
    target_probs: torch.Tensor


class IdentityMap:
    """Same vocabulary, same logit rows: every draft id is the target id. Prefer the translator's
    `VocabMap` (identity mode), which also knows padded rows and special tokens."""

    def __init__(self, rows: int) -> None:
        self.draft_to_target = torch.arange(rows, dtype=torch.long)
        self.target_to_draft = self.draft_to_target


#: target adapter -> draft adapter -> VocabMap; weak keys so a dropped tokenizer frees its map
_PAIR_MAPS: "weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary[Any, Any]]" = weakref.WeakKeyDictionary()


def pair_vocab_map(target_tok: Any, draft_tok: Any):
    """The translator's `VocabMap` for a pair of tokenizer adapters (identity mode when they are the
    same vocabulary), built once per pair: a 150k-token vocabulary takes about a second to map,
    which must not be paid again by every sampled request."""
    from anypair.translator import VocabMap

    by_draft = _PAIR_MAPS.setdefault(target_tok, weakref.WeakKeyDictionary())
    vocab_map = by_draft.get(draft_tok)
    if vocab_map is None:
        vocab_map = by_draft[draft_tok] = VocabMap(target_tok, draft_tok)
    return vocab_map


def intersection_mask(vocab_map: VocabMapLike, draft_rows: int) -> torch.Tensor:
    """Bool [draft_rows]: draft ids that have a target token with identical bytes."""
    draft_to_target = vocab_map.draft_to_target
    if draft_to_target.shape[0] < draft_rows:
        raise ValueError(
            f"vocab map covers {draft_to_target.shape[0]} draft ids but the draft model has {draft_rows} "
            "logit rows: build the VocabMap with the draft model's vocabulary size"
        )
    return draft_to_target[:draft_rows] >= 0


def intersection_share(draft_logits: torch.Tensor, in_intersection: torch.Tensor, cfg: SamplingConfig) -> float:
    """Probability the draft (at its temperature, before top-k/top-p) puts on the intersection."""
    scaled = draft_logits.to(torch.float32) / float(cfg.temperature)
    inside = torch.logsumexp(scaled.masked_fill(~in_intersection, float("-inf")), dim=-1)
    return float(torch.exp(inside - torch.logsumexp(scaled, dim=-1)))


def sample_draft_token(
    draft_logits: torch.Tensor,
    vocab_map: Optional[VocabMapLike],
    cfg: SamplingConfig,
    noise_row: torch.Tensor,
    min_intersection_mass: float = MIN_INTERSECTION_MASS,
) -> Optional[DraftSample]:
    """The draft's keyed sample among the tokens the target shares, decided by `noise_row` (the
    target's Exp(1) noise at the position proposed for, [target model rows]); None when the
    intersection holds less than `min_intersection_mass` of the draft's probability (then the round
    proposes nothing). `vocab_map=None` means draft ids are target ids over the same logit rows.
    """
    if draft_logits.dim() != 1:
        raise ValueError(f"sample_draft_token wants one row of draft logits [V], got shape {tuple(draft_logits.shape)}")
    if vocab_map is None:
        vocab_map = IdentityMap(draft_logits.shape[0])
    # the draft's pick is made where the vocabulary map lives (the CPU), whatever device ran the
    # draft: its numerics never reach the output, and `noise_row` holds the same values everywhere
    draft_logits = draft_logits.to(vocab_map.draft_to_target.device)
    in_intersection = intersection_mask(vocab_map, draft_logits.shape[0])
    if not intersection_share(draft_logits, in_intersection, cfg) >= min_intersection_mass:  # also catches NaN
        return None
    masked_logits = draft_logits.masked_fill(~in_intersection, float("-inf"))
    draft_probs = warp_logits(masked_logits, cfg)

    draft_to_target = vocab_map.draft_to_target[: draft_logits.shape[0]]
    target_rows = vocab_map.target_to_draft.shape[0]
    # several draft ids may spell the same bytes (a byte-fallback piece and a plain token): their
    # probabilities add up on the one target id they all stand for
    target_probs = torch.zeros(target_rows, dtype=draft_probs.dtype)
    target_probs.index_add_(0, draft_to_target[in_intersection], draft_probs[in_intersection])
    target_id = keyed_sample(target_probs, noise_row)
    # the draft continues with its likeliest id of those bytes (twins write the same text)
    draft_id = int(torch.argmax(draft_probs.masked_fill(draft_to_target != target_id, -1.0)))
    return DraftSample(draft_id, target_id, target_probs)
