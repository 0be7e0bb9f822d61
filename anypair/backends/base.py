"""The model-backend interface: the three things speculative decoding needs from a model.

    extend(ids)   append tokens to the KV cache, return logits for the new positions
    crop(length)  drop cached positions past `length` (rollback after a rejection)
    reset()       forget everything (new request)

Keeping it this small is what lets an OpenVINO or IPEX backend slot in beside plain torch.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import torch


class ModelBackend(ABC):
    #: rows of the LM head (may exceed the tokenizer's vocab: padded vocabulary)
    vocab_size: int
    #: longest context (prompt + generated) the model accepts
    max_context: int
    name: str = "backend"
    #: the engine promises bitwise batch invariance (a token's logits are the same bits alone or
    #: scored with others); the contract then allows no difference at all, not fp32 noise
    bitwise_batch_invariant: bool = False

    @property
    @abstractmethod
    def cached_length(self) -> int:
        """Number of positions currently in the KV cache."""

    @abstractmethod
    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        """Feed `ids` after the cached positions. Returns float32 logits of shape [len(ids), V]
        when `all_logits`, else [V] for the last position only."""

    @abstractmethod
    def crop(self, length: int) -> None:
        """Keep only the first `length` cached positions."""

    @abstractmethod
    def reset(self) -> None: ...

    def prefill(self, ids: Sequence[int]) -> torch.Tensor:
        """Reset, then feed a whole prompt; returns the last position's logits [V]."""
        self.reset()
        return self.extend(ids, all_logits=False)
