"""The model-backend interface: what speculative decoding needs from a model, for one request and
for several sharing each forward.

One sequence (the request's KV cache):

    extend(ids)   append tokens to the KV cache, return logits for the new positions
    crop(length)  drop cached positions past `length` (rollback after a rejection)
    reset()       forget everything (new request)

Slots (the batch scheduler, `generation.batch`, drives every request through these): an engine
holds `slots` sequences; `sequence(slot)` is one of them as a backend of its own, and
`forward_rows` scores the rows of several sequences (`SequenceRows`) in one forward. Every engine
is at least a one-slot engine: these defaults give it one sequence (itself) and one call a forward.
An engine that holds several (the GGUF engine) says so with `max_slots` and overrides them.

An engine needs only the three single-sequence members above (plus its shape and cost figures);
everything about slots has a one-slot default, which is what lets an OpenVINO or IPEX backend slot
in beside plain torch.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import torch

from anypair.errors import InputError

#: which logits a sequence's rows of a forward give back: every row's, the last row's, or none
#: (a prompt chunk before the prompt's last: only the cache matters)
RowLogits = Literal["all", "last", "none"]


@dataclass(frozen=True)
class SequenceRows:
    """One sequence's part of a forward: `ids` appended to slot `slot`, and which logits come back."""

    slot: int
    ids: Sequence[int]
    logits: RowLogits = "all"


class ModelBackend(ABC):
    #: rows of the LM head (may exceed the tokenizer's vocab: padded vocabulary)
    vocab_size: int
    #: longest context (prompt + generated) the model accepts
    max_context: int
    name: str = "backend"
    #: the engine promises bitwise batch invariance (a token's logits are the same bits alone or
    #: scored with others); the contract then allows no difference at all, not fp32 noise
    bitwise_batch_invariant: bool = False
    #: the most sequences `set_slots` accepts (None: as many as memory holds); 1: one request at a time
    max_slots: Optional[int] = 1
    #: prompt rows one `forward_rows` call should read (None: a whole prompt, the engine chunks it
    #: inside); the scheduler feeds a long prompt in pieces of at most this
    prompt_rows_per_forward: Optional[int] = None

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

    # -- slots: the sequences the engine holds at once --------------------------------------------
    @property
    def slots(self) -> int:
        """Sequences whose KV state the engine holds now (a one-slot engine: its own)."""
        return 1

    @property
    def kv_bytes_per_slot(self) -> int:
        """The most one slot's KV state takes, for sizing a batch (0: a one-slot engine adds none)."""
        return 0

    def set_slots(self, slots: int) -> None:
        """Hold `slots` sequences from now on; every sequence is forgotten. A one-slot engine holds one."""
        if slots != 1:
            raise InputError(f"{self.name} holds one sequence at a time, not {slots}: "
                             "run one request at a time (max_batch 1), or use the gguf engine")
        self.reset()

    def sequence(self, slot: int) -> ModelBackend:
        """Slot `slot` as a backend of its own (extend/crop/reset on that sequence only); a one-slot
        engine's one sequence is the engine itself."""
        self._check_slot(slot)
        return self

    def forward_rows(self, calls: Sequence[SequenceRows]) -> list[Optional[torch.Tensor]]:
        """One forward over the rows of several sequences (at most one call per slot), each appended
        to its own slot's cache: per call the logits it asks for ([len(ids), V] "all", [V] "last",
        or None). A one-slot engine runs its one call as an `extend`."""
        if len({c.slot for c in calls}) != len(calls):
            raise ValueError("forward_rows: one call per slot (a sequence's rows go together, in order)")
        outputs: list[Optional[torch.Tensor]] = []
        for call in calls:
            logits = self.sequence(call.slot).extend(call.ids, all_logits=call.logits == "all")
            outputs.append(None if call.logits == "none" else logits)
        return outputs

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.slots:
            raise ValueError(f"{self.name}: slot {slot} of {self.slots}")
