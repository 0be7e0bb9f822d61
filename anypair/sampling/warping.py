"""Logits -> sampling probabilities, exactly as `transformers.generate(do_sample=True)` shapes them.

The warpers are transformers' own (`TemperatureLogitsWarper`, `TopKLogitsWarper`,
`TopPLogitsWarper`), applied in transformers' order and only when transformers would apply them,
so the set of tokens top-k / top-p keeps (ties included) is the one transformers keeps.
"""
from __future__ import annotations

from typing import Optional

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from anypair.types import SamplingConfig


def logits_warpers(cfg: SamplingConfig) -> LogitsProcessorList:
    """transformers' sampling warpers for `cfg`, in the order `generate` builds them."""
    warpers = LogitsProcessorList()
    if cfg.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(float(cfg.temperature)))
    if cfg.top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=int(cfg.top_k), min_tokens_to_keep=1))
    if cfg.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=float(cfg.top_p), min_tokens_to_keep=1))
    return warpers


def warp_logits(logits: torch.Tensor, cfg: SamplingConfig, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Probabilities [..., V] from raw logits [..., V] after temperature, top-k and top-p.

    Computed in float32 by default because that is what `generate` feeds its warpers: a top-p cut
    decided in another precision could keep a different set of tokens. float64 is allowed for
    callers that want it; filtered tokens get probability exactly 0.
    """
    if logits.dim() == 0:
        raise ValueError("warp_logits needs logits with a vocabulary dimension, got a scalar")
    vocab_rows = logits.shape[-1]
    # the top-p warper scatters along dim 1, so it wants [rows, V]
    scores = logits.detach().reshape(-1, vocab_rows).to(dtype)
    scores = logits_warpers(cfg)(None, scores)
    return torch.softmax(scores, dim=-1).reshape(logits.shape)


def make_generator(seed: Optional[int]) -> torch.Generator:
    """The one CPU generator every random draw of a request goes through; `None` seeds it from the OS."""
    generator = torch.Generator(device="cpu")
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator
