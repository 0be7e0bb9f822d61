"""The model-backend interface: what speculative decoding needs from a model, for one request and
for several sharing each forward.

One sequence (the request's KV cache):

    extend(ids)   append tokens to the KV cache, return logits for the new positions
    crop(length)  drop cached positions past `length` (rollback after a rejection)
    reset()       forget everything (new request)

Two declared types (the batch scheduler, `generation.batch`, drives every request through them):

- the engine (`ModelBackend`) owns the weights and the forwards: `forward_rows` scores the rows of
  several sequences (`SequenceRows`) in one forward, each appended to its own slot;
- a `Slot` (`engine.sequence(i)`) is one sequence the engine holds: it owns only its length and its
  crop. A request's session and its draft hold slots, never engines; their forwards go to the
  scheduler, which runs them on the slot's engine, several requests' in one call.

Every engine is at least a one-slot engine: the slot members below (`slot_length`, `crop_slot`,
`extend_slot`, `forward_rows`) default to the engine's single sequence. An engine that holds several
(the GGUF engine) says so with `max_slots` and overrides them, which is what lets an OpenVINO or
IPEX backend slot in beside plain torch with only the three single-sequence members.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal, Optional, Sequence, Union

import torch

from anypair.errors import InputError

#: which logits a sequence's rows of a forward give back: every row's, the last row's, or none
#: (a prompt chunk before the prompt's last: only the cache matters)
RowLogits = Literal["all", "last", "none"]


@dataclass(frozen=True)
class SequenceRows:
    """One sequence's part of a forward: `ids` appended to slot `slot`, and which logits come back.

    `parents` (engines that score trees, `scores_trees`): per row, the earlier row of `ids` it follows,
    -1 for the first row (it follows the cached positions); None: a chain. A tree's row sits at the
    position of its depth and attends to its ancestors only; afterwards `keep_path_slot` keeps one
    root-to-leaf path as the sequence's next positions."""

    slot: int
    ids: Sequence[int]
    logits: RowLogits = "all"
    parents: Optional[Sequence[int]] = None


class ModelBackend(ABC):
    #: rows of the LM head (may exceed the tokenizer's vocab: padded vocabulary)
    vocab_size: int
    #: longest context (prompt + generated) the model accepts
    max_context: int
    name: str = "backend"
    #: the engine promises bitwise batch invariance (a token's logits are the same bits alone or
    #: scored with others); the contract then allows no difference at all, not fp32 noise
    bitwise_batch_invariant: bool = False
    #: `forward_rows` scores a tree of rows (`SequenceRows.parents`), each row's logits bitwise those
    #: of the same row in a chain of its ancestors; the others score chains only
    scores_trees: bool = False
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

    @property
    def mapped_weight_bytes(self) -> int:
        """Weight bytes read from a file's mapping (page cache): the OS counts them as memory still
        available (MemAvailable), so a memory budget taken after loading must leave them out."""
        return 0

    def set_slots(self, slots: int) -> None:
        """Hold `slots` sequences from now on; every sequence is forgotten. A one-slot engine holds one."""
        if slots != 1:
            raise InputError(f"{self.name} holds one sequence at a time, not {slots}: "
                             "run one request at a time (max_batch 1), or use the gguf engine")
        self.reset()

    def sequence(self, slot: int) -> Slot:
        """Slot `slot`: one sequence of this engine (its length and crop; its forwards are the engine's)."""
        self._check_slot(slot)
        return Slot(self, slot)

    # a slot's state by index: a one-slot engine's one sequence is its own (engines of several override)
    def slot_length(self, slot: int) -> int:
        """Positions cached in slot `slot`."""
        return self.cached_length

    def crop_slot(self, slot: int, length: int) -> None:
        """Keep the first `length` positions of slot `slot` (0: forget it)."""
        if length == 0:
            self.reset()
        else:
            self.crop(length)

    def keep_path_slot(self, slot: int, rows: Sequence[int]) -> None:
        """After a tree forward on slot `slot`: keep the tree's rows `rows` (its root, row 0, then one
        child after another) as the positions after those cached before it, and drop the rest."""
        raise InputError(f"{self.name} scores chains only, not trees of rows: use the gguf engine")

    def keep_head_tokens_slot(self, slot: int, ids: Sequence[int]) -> None:
        """Slot `slot`'s logits score `ids` whatever else the head leaves out (a draft's reduced head,
        backends/reduced_head.py); replaces what the slot kept before. A full head scores every token."""

    def extend_slot(self, slot: int, ids: Sequence[int], all_logits: bool) -> torch.Tensor:
        """A forward of slot `slot`'s rows alone (a long prompt chunked as the engine chunks it)."""
        return self.extend(ids, all_logits=all_logits)

    def forward_rows(self, calls: Sequence[SequenceRows]) -> list[Optional[torch.Tensor]]:
        """One forward over the rows of several sequences (at most one call per slot), each appended
        to its own slot's cache: per call the logits it asks for ([len(ids), V] "all", [V] "last",
        or None). A one-slot engine runs its one call as an `extend`."""
        if len({c.slot for c in calls}) != len(calls):
            raise ValueError("forward_rows: one call per slot (a sequence's rows go together, in order)")
        if any(c.parents is not None for c in calls):
            raise InputError(f"{self.name} scores chains only, not trees of rows: use the gguf engine")
        outputs: list[Optional[torch.Tensor]] = []
        for call in calls:
            self._check_slot(call.slot)
            logits = self.extend_slot(call.slot, call.ids, call.logits == "all")
            outputs.append(None if call.logits == "none" else logits)
        return outputs

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.slots:
            raise ValueError(f"{self.name}: slot {slot} of {self.slots}")


class Slot:
    """One sequence an engine holds (`ModelBackend.sequence`): its cached length and its crop. On a
    request's path it runs no forward of its own: the scheduler runs its rows on `engine`
    (`forward_rows`) beside other slots'. `extend` and `prefill` (a forward of this slot alone) are
    for benchmarks, tools and tests."""

    def __init__(self, engine: ModelBackend, index: int) -> None:
        self.engine = engine
        self.index = index
        self.vocab_size = engine.vocab_size
        self.max_context = engine.max_context
        self.name = engine.name if engine.max_slots == 1 else f"{engine.name} slot {index}"

    @property
    def cached_length(self) -> int:
        return self.engine.slot_length(self.index)

    def crop(self, length: int) -> None:
        self.engine.crop_slot(self.index, length)

    def reset(self) -> None:
        self.engine.crop_slot(self.index, 0)

    def keep_path(self, rows: Sequence[int]) -> None:
        """After a tree forward: keep its rows `rows` (root first) as this sequence's next positions."""
        self.engine.keep_path_slot(self.index, rows)

    def keep_head_tokens(self, ids: Sequence[int]) -> None:
        """This sequence's logits score `ids` (its request's own tokens) even where the engine's head
        is reduced to the most frequent tokens; replaces what it kept before."""
        self.engine.keep_head_tokens_slot(self.index, ids)

    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        return self.engine.extend_slot(self.index, ids, all_logits)

    def prefill(self, ids: Sequence[int]) -> torch.Tensor:
        """Reset, then read a whole prompt; the last position's logits [V]."""
        self.reset()
        return self.extend(ids)


def slot_of(sequence: Union[ModelBackend, Slot]) -> Slot:
    """A slot as given, or a one-slot engine's one slot (a session or drafter made by hand on an engine)."""
    return sequence if isinstance(sequence, Slot) else sequence.sequence(0)
