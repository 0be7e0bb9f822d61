"""A draft's head over part of its vocabulary: the GGUF engine scores only the kept rows, every other
logit is -inf (`QuantizedGGUFBackend.restrict_head`).

Why: a small draft's head is a large share of what its step reads (SmolLM2-135M: 49,152 x 576 Q8_0
rows, 30 of its 96 MB), and most of those tokens are rare. The draft's numbers never reach the output
(the target verifies every proposal; greedy output stays bitwise the target's, and the sampling
verifier keeps the target's own keyed samples, `verifiers/sampling.py`), so a reduced head costs only
acceptance: a token outside the head gets probability 0 and is never proposed, a valid proposal
distribution for every verifier (`sampling/draft.py` masks tokens with -inf the same way).

A kept row's logit is bitwise the full head's: the rows are copied block for block from the file and
the kernels compute each row in its own lane with the same arithmetic (tests check it).

Which tokens: the most frequent ones of the draft's tokenizer on code and prose
(`evaluation/draft_vocab.py` counts them and writes `data/draft_vocab/<vocab key>.npy`, the ids by
falling frequency), shared by every sequence, and each sequence's own: the tokens of its request's
prompt and of the text committed since (`keep_tokens`, called by the drafter), a few hundred rows of
their own. The frequent tokens alone lose what a request writes most and a general table ranks low,
its identifiers and names: 8,192 of them accepted 8% fewer tokens than the full head on HumanEval and
34% fewer on news summaries (default pair); with the request's own tokens beside them as many as the
full head (within 2%), for 0.91-0.96x its time a token (`evaluation/measured/draft_head_own_tokens_zen5.md`).
A draft whose vocabulary has no table keeps its full head.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

#: the ranked-id tables, one per draft vocabulary (file name: `vocab_key`)
TABLES = Path(__file__).parent / "data" / "draft_vocab"
#: the draft head's shared rows where a table exists (None: the full head); each sequence keeps its own
#: tokens beside them. The frequent tokens alone did not pay (Intel Xeon, 2 vCPUs, default pair, 10
#: HumanEval prompts, constant 4-token drafts: 16,384 rows 1.32x the target alone against the full
#: head's 1.35x, 8,192 rows 1.31x with 7% fewer tokens accepted); with the request's own tokens 8,192
#: do (module docstring)
DEFAULT_DRAFT_HEAD_ROWS: Optional[int] = 8192
#: overrides the default: a number of rows, or "full" (measurements)
HEAD_ROWS_ENV = "ANYPAIR_DRAFT_HEAD"
#: ids below this are always kept: byte-BPE vocabularies put their special tokens (EOS, chat markers) first
ALWAYS_KEPT = 32


def vocab_key(hf_tokenizer) -> str:
    """A short hash of a tokenizer's vocabulary (token -> id): names its table."""
    vocab = sorted(hf_tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]


def ranked_ids(hf_tokenizer) -> Optional[np.ndarray]:
    """The draft vocabulary's ids by falling frequency, or None where it has no table."""
    path = TABLES / f"{vocab_key(hf_tokenizer)}.npy"
    return np.load(path) if path.is_file() else None


def kept_ids(ranking: Sequence[int], rows: int, vocab: int) -> list[int]:
    """The head's rows: the first ALWAYS_KEPT ids, then the most frequent, then (past the table's
    end: tokens its corpus never held) the lowest ids, earlier BPE merges; `rows` in all, in id order."""
    kept = set(range(min(ALWAYS_KEPT, vocab)))
    for token in itertools.chain((int(t) for t in ranking), range(vocab)):
        if len(kept) >= rows:
            break
        if 0 <= token < vocab:
            kept.add(token)
    return sorted(kept)


def draft_head_rows(default: Optional[int] = DEFAULT_DRAFT_HEAD_ROWS) -> Optional[int]:
    """The draft head's size: ANYPAIR_DRAFT_HEAD ("full" or a number) else `default`; None: full."""
    value = os.environ.get(HEAD_ROWS_ENV, "").strip().lower()
    if value in ("full", "0", "none"):
        return None
    if value:
        from anypair.errors import InputError

        if not value.isdigit():
            raise InputError(f"{HEAD_ROWS_ENV} must be a number of rows or 'full', got {value!r}")
        return int(value)
    return default


def restrict_draft_head(backend, hf_tokenizer) -> Optional[int]:
    """The draft's head on `backend` (a QuantizedGGUFBackend): the table's most frequent tokens where
    a size is set (ANYPAIR_DRAFT_HEAD or the default) and its vocabulary has a table. Returns the rows
    kept, None where the head stays full."""
    rows = draft_head_rows()
    ranking = ranked_ids(hf_tokenizer) if rows is not None else None
    if ranking is None or rows >= backend.vocab_size:
        return None
    backend.restrict_head(kept_ids(ranking, rows, backend.vocab_size))
    return rows


def _rows_of(head_weight, ids: torch.Tensor):
    """The head's rows `ids` as a matrix of their own: the file's own blocks (a copy: the interleaved
    layout groups 16 kept rows)."""
    from anypair.kernels import LinearGroup, QuantWeight

    rows = np.ascontiguousarray(head_weight.data[ids.numpy()])
    return LinearGroup([QuantWeight(head_weight.ggml_type, len(ids), head_weight.cols, rows, None,
                                    head_weight.type_name)])


class ReducedHead:
    """The head's rows `ids` as a matrix of their own, and per sequence the rows of its own tokens
    (`keep_tokens`); called like the full head, it returns the full vocabulary's logits with -inf
    outside the rows a row's sequence keeps."""

    def __init__(self, head_weight, ids: Sequence[int], vocab: int) -> None:
        self.ids = torch.tensor(sorted(set(int(i) for i in ids)), dtype=torch.int64)
        if len(self.ids) == 0 or int(self.ids[0]) < 0 or int(self.ids[-1]) >= vocab:
            raise ValueError(f"a reduced head's ids must lie in 0..{vocab - 1}")
        self.vocab = vocab
        self._head_weight = head_weight
        self._shared = frozenset(self.ids.tolist())
        self.group = _rows_of(head_weight, self.ids)
        self.weight = self.group.weights[0]
        self._own: dict[int, tuple[torch.Tensor, object]] = {}  # slot -> (ids, rows) beyond the shared ones

    @property
    def nbytes(self) -> int:
        """Bytes a step reads: the shared rows (a sequence's own rows are a few hundred more)."""
        return self.weight.nbytes

    def keep_tokens(self, slot: int, ids) -> None:
        """Sequence `slot`'s logits score `ids` too from now on (replacing what it kept before; empty:
        the shared rows only). Their rows are copied once here, not at every step."""
        own = sorted({int(i) for i in ids if 0 <= int(i) < self.vocab} - self._shared)
        if not own:
            self._own.pop(slot, None)
            return
        own_ids = torch.tensor(own, dtype=torch.int64)
        self._own[slot] = (own_ids, _rows_of(self._head_weight, own_ids))

    def forget(self) -> None:
        """Every sequence's own rows dropped (the engine's sequences were made anew)."""
        self._own.clear()

    def logits(self, normed: torch.Tensor, threads: int, finish=None,
               row_slots: Optional[Sequence[int]] = None) -> torch.Tensor:
        """[M, vocab] logits: the kept rows' (through `finish`, e.g. a soft-cap, before the -inf
        fill, since a cap would turn -inf into a finite value), -inf elsewhere. `row_slots`: each
        row's sequence, whose own rows it scores too (None: the shared rows only)."""
        part = self.group(normed, threads)[0]
        if finish is not None:
            finish(part)
        out = torch.full((normed.shape[0], self.vocab), float("-inf"), dtype=torch.float32)
        out[:, self.ids] = part
        for slot in sorted(set(row_slots or ()) & self._own.keys()):
            rows = torch.tensor([r for r, s in enumerate(row_slots) if s == slot], dtype=torch.int64)
            own_ids, own_rows = self._own[slot]
            extra = own_rows(normed[rows].contiguous(), threads)[0]
            if finish is not None:
                finish(extra)
            out[rows.unsqueeze(1), own_ids.unsqueeze(0)] = extra
        return out
