"""How much of the target's probability the vocabulary intersection covers on a sample text.

The draft can only ever propose intersection tokens, so this share (at temperature 1, averaged
over the positions of a text) bounds how often sampled drafts can be accepted: `anypair inspect`
prints it as an estimate of how well sampling will accelerate for a pair.
"""
from __future__ import annotations

from typing import Any

import torch

from anypair.errors import InputError
from anypair.sampling.draft import VocabMapLike


def target_logits_for_text(target_model: Any, target_ids: list[int]) -> torch.Tensor:
    """Logits [len(ids), V] from a `ModelBackend` (has `extend`) or a transformers causal LM."""
    if hasattr(target_model, "extend") and hasattr(target_model, "reset"):
        target_model.reset()
        logits = target_model.extend(target_ids, all_logits=True)
        target_model.reset()
        return logits.to(torch.float32)
    with torch.inference_mode():
        input_ids = torch.tensor([target_ids], dtype=torch.long, device=target_model.device)
        return target_model(input_ids=input_ids).logits[0].to(torch.float32).cpu()


def intersection_probability_mass(target_model: Any, target_tok: Any, vocab_map: VocabMapLike, text: str) -> float:
    """Mean over the positions of `text` of the target's probability (temperature 1) on target
    tokens that some draft token spells with identical bytes."""
    target_ids = target_tok.encode(text)
    if len(target_ids) < 1:
        raise InputError("the sample text for the intersection mass is empty: give a few sentences of text")
    logits = target_logits_for_text(target_model, target_ids)
    target_rows = logits.shape[-1]
    in_intersection = torch.zeros(target_rows, dtype=torch.bool)
    shared = vocab_map.target_to_draft[:target_rows] >= 0
    in_intersection[: shared.shape[0]] = shared
    probs = torch.softmax(logits, dim=-1)
    return float(probs[:, in_intersection].sum(dim=-1).mean())
