"""Lossless sampling pieces shared by drafters, verifiers and `anypair inspect`.

    warp_logits                  the target's (or draft's) temperature / top-k / top-p, as transformers does it
    keyed_sample, PositionNoise  the target's sample at a position: argmax p / Exp(1) noise fixed by (request key, position)
    sample_draft_token           one draft sample restricted to the vocabulary intersection, carried to target ids
    pair_vocab_map               the intersection map of a tokenizer pair, built once per pair
    intersection_probability_mass  how much target probability the intersection covers (inspect's estimate)

The verifier that uses them is `anypair.verifiers.sampling.SamplingVerifier` (verifiers/ builds on this
package, never the other way round).
"""
from anypair.sampling.draft import DraftSample, pair_vocab_map, sample_draft_token
from anypair.sampling.keyed import PositionNoise, draw_request_key, keyed_sample
from anypair.sampling.mass import intersection_probability_mass
from anypair.sampling.warping import make_generator, warp_logits


__all__ = [
    "DraftSample",
    "PositionNoise",
    "draw_request_key",
    "intersection_probability_mass",
    "keyed_sample",
    "make_generator",
    "pair_vocab_map",
    "sample_draft_token",
    "warp_logits",
]
