"""Transformers-on-torch backend: a causal LM with a persistent KV cache that can be rolled back.

One `DynamicCache` lives across rounds. Sliding-window layers (Gemma-3) normally discard states
older than the window, which would make a rollback past the window impossible; past recording keeps
them until the next `crop`, and every rollback goes through `crop`, so rollbacks stay exact.
"""
from __future__ import annotations

import logging
import warnings
from typing import Sequence

import torch

from anypair.backends.base import ModelBackend
from anypair.errors import InputError


class _RenamedArgumentNotice(logging.Filter):
    """Drops transformers' "`past_key_values`/`cache_params` are deprecated" notice: the argument
    still works, anypair passes it on purpose (older transformers know no other), and a user cannot
    act on it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "are deprecated. Use `cache` instead" not in record.getMessage()


logging.getLogger("transformers.utils.generic").addFilter(_RenamedArgumentNotice())


def model_vocab_rows(model) -> int:
    """Rows of the LM head: the model's real vocabulary size (may exceed the tokenizer's)."""
    head = model.get_output_embeddings()
    if head is not None and hasattr(head, "out_features"):
        return int(head.out_features)  # nn.Linear, or a packed fp16/int8 head (backends.weights)
    return int(model.config.get_text_config().vocab_size)


def model_max_context(model) -> int:
    config = model.config.get_text_config()
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1 << 30


class TorchBackend(ModelBackend):
    """A Hugging Face causal LM on torch (CPU or CUDA) behind extend/crop/reset."""

    def __init__(self, model, name: str = "torch") -> None:
        self.model = model.eval()
        self.name = name
        self.vocab_size = model_vocab_rows(model)
        self.max_context = model_max_context(model)
        self.device = next(model.parameters()).device
        self._cache = None
        self._length = 0

    @property
    def cached_length(self) -> int:
        return self._length

    def reset(self) -> None:
        from transformers import DynamicCache

        self._cache = DynamicCache(config=self.model.config)
        self._cache.activate_past_recording()
        self._length = 0

    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        if not ids:
            raise ValueError("extend() needs at least one token")
        if self._cache is None:
            self.reset()
        if self._length + len(ids) > self.max_context:
            raise InputError(
                f"{self.name}: context of {self._length + len(ids)} tokens exceeds the model's "
                f"maximum of {self.max_context}; shorten the prompt or lower max_new_tokens"
            )
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        # transformers 5.2x warns on every call that `past_key_values` will be renamed; the argument
        # still works and a user cannot act on the warning, so this one is silenced here
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated", category=FutureWarning)
            out = self.model(
                input_ids=input_ids,
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=0 if all_logits else 1,
            )
        self._cache = out.past_key_values
        self._length += len(ids)
        logits = out.logits[0].float()
        return logits if all_logits else logits[-1]

    def crop(self, length: int) -> None:
        if length < 0 or length > self._length:
            raise ValueError(f"cannot crop a cache of {self._length} positions to {length}")
        if self._cache is not None:
            # transformers 5 takes the number of positions to remove as a negative count; crop(0)
            # also trims sliding-window layers back to the window.
            self._cache.crop(length - self._length)
        self._length = length
