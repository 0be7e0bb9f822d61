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
falling frequency). A draft whose vocabulary has no table keeps its full head.
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
#: the draft head's default size where a table exists; None: the full head. Measured on an Intel Xeon
#: (2 vCPUs, default pair, 10 HumanEval prompts, constant 4-token drafts, interleaved per prompt): the
#: full head 1.35x the target alone (median), 16,384 rows 1.32x (draft time -12%, accepted tokens
#: -2%), 8,192 rows 1.31x (accepted -7%, one prompt 0.40x): it does not pay there, so it is opt-in
#: (README, "The draft at its floor").
DEFAULT_DRAFT_HEAD_ROWS: Optional[int] = None
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


class ReducedHead:
    """The head's rows `ids` as a matrix of their own; called like the full head, it returns the full
    vocabulary's logits with -inf outside `ids`."""

    def __init__(self, head_weight, ids: Sequence[int], vocab: int) -> None:
        from anypair.kernels import LinearGroup, QuantWeight

        self.ids = torch.tensor(sorted(set(int(i) for i in ids)), dtype=torch.int64)
        if len(self.ids) == 0 or int(self.ids[0]) < 0 or int(self.ids[-1]) >= vocab:
            raise ValueError(f"a reduced head's ids must lie in 0..{vocab - 1}")
        self.vocab = vocab
        # the file's own blocks of those rows (a copy: the interleaved layout groups 16 kept rows)
        rows = np.ascontiguousarray(head_weight.data[self.ids.numpy()])
        self.weight = QuantWeight(head_weight.ggml_type, len(self.ids), head_weight.cols, rows, None,
                                  head_weight.type_name)
        self.group = LinearGroup([self.weight])

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes

    def logits(self, normed: torch.Tensor, threads: int, finish=None) -> torch.Tensor:
        """[M, vocab] logits: the kept rows' (through `finish`, e.g. a soft-cap, before the -inf
        fill, since a cap would turn -inf into a finite value), -inf elsewhere."""
        part = self.group(normed, threads)[0]
        if finish is not None:
            finish(part)
        out = torch.full((normed.shape[0], self.vocab), float("-inf"), dtype=torch.float32)
        out[:, self.ids] = part
        return out
