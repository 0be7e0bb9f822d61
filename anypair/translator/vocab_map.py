"""The vocabulary intersection of a target and a draft tokenizer: which draft id and which target
id stand for exactly the same bytes.

Token-level drafting and lossless sampling over the shared tokens work on this map; it is built
once per pair (one dictionary pass over each vocabulary) and then used as two index tensors, so a
round never loops over the vocabulary in Python.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from anypair.errors import InputError
from anypair.tokenization.base import TokenizerAdapter

NO_TOKEN = -1


def _plain_token_bytes(tok: TokenizerAdapter) -> list[bytes]:
    """Bytes of every id; specials (and any other empty token) are b"" and so never shared."""
    all_bytes = tok.all_token_bytes()
    for special_id in tok.special_ids:
        if 0 <= special_id < len(all_bytes):
            all_bytes[special_id] = b""
    return all_bytes


def _canonical_id_by_bytes(tok: TokenizerAdapter, all_bytes: Sequence[bytes]) -> dict[bytes, int]:
    """bytes -> the id that stands for them. When several ids share the bytes (SentencePiece's `▁`
    and its `<0x20>` byte-fallback twin), pick the one the tokenizer itself produces for them, so
    that a translated token is the one the target would have written."""
    ids_by_bytes: dict[bytes, list[int]] = defaultdict(list)
    for token_id, data in enumerate(all_bytes):
        if data:
            ids_by_bytes[data].append(token_id)
    canonical: dict[bytes, int] = {}
    for data, ids in ids_by_bytes.items():
        canonical[data] = ids[0] if len(ids) == 1 else _preferred_duplicate(tok, data, ids)
    return canonical


def _preferred_duplicate(tok: TokenizerAdapter, data: bytes, candidate_ids: list[int]) -> int:
    try:
        encoded = tok.encode_continuation(data.decode("utf-8"))
    except UnicodeDecodeError:
        encoded = []
    if len(encoded) == 1 and encoded[0] in candidate_ids:
        return encoded[0]
    byte_id = tok.byte_token_id(data[0]) if len(data) == 1 else None
    return byte_id if byte_id in candidate_ids else candidate_ids[0]


def _map_rows(from_bytes: Sequence[bytes], rows: int, to_ids: dict[bytes, int]) -> torch.Tensor:
    mapping = torch.full((rows,), NO_TOKEN, dtype=torch.long)
    pairs = [(i, to_ids[data]) for i, data in enumerate(from_bytes) if data and data in to_ids]
    if pairs:
        index = torch.tensor(pairs, dtype=torch.long)
        mapping[index[:, 0]] = index[:, 1]
    return mapping


class VocabMap:
    """draft id <-> target id for every token whose bytes both vocabularies have (specials excluded).

    `draft_to_target` has one row per draft model row (`draft_tok.model_vocab_size`, padded rows
    included) and `target_to_draft` one per target model row; NO_TOKEN (-1) marks ids with no twin.
    When both tokenizers are the same vocabulary the map is the identity on non-special ids.
    """

    def __init__(self, target_tok: TokenizerAdapter, draft_tok: TokenizerAdapter):
        from anypair.tokenization import same_vocabulary

        self.identity = bool(same_vocabulary(target_tok, draft_tok))
        if self.identity:
            self.draft_to_target, self.target_to_draft = self._identity_maps(target_tok, draft_tok)
        else:
            self.draft_to_target, self.target_to_draft = self._intersection_maps(target_tok, draft_tok)
        shared = self.draft_to_target >= 0
        #: the shared tokens as aligned id lists (sorted by draft id): draft_ids[i] <-> target_ids[i]
        self.shared_draft_ids = torch.nonzero(shared).flatten()
        self.shared_target_ids = self.draft_to_target[self.shared_draft_ids]
        self.size = int(self.shared_draft_ids.numel())

    @staticmethod
    def _identity_maps(target_tok: TokenizerAdapter, draft_tok: TokenizerAdapter) -> tuple[torch.Tensor, torch.Tensor]:
        token_lengths = torch.tensor([len(data) for data in _plain_token_bytes(target_tok)], dtype=torch.long)
        ids = torch.arange(target_tok.vocab_size, dtype=torch.long)
        ids[token_lengths == 0] = NO_TOKEN
        draft_to_target = torch.full((draft_tok.model_vocab_size,), NO_TOKEN, dtype=torch.long)
        target_to_draft = torch.full((target_tok.model_vocab_size,), NO_TOKEN, dtype=torch.long)
        draft_to_target[: ids.numel()] = ids
        target_to_draft[: ids.numel()] = ids
        return draft_to_target, target_to_draft

    @staticmethod
    def _intersection_maps(target_tok: TokenizerAdapter, draft_tok: TokenizerAdapter) -> tuple[torch.Tensor, torch.Tensor]:
        target_bytes = _plain_token_bytes(target_tok)
        draft_bytes = _plain_token_bytes(draft_tok)
        target_id_by_bytes = _canonical_id_by_bytes(target_tok, target_bytes)
        draft_id_by_bytes = _canonical_id_by_bytes(draft_tok, draft_bytes)
        draft_to_target = _map_rows(draft_bytes, draft_tok.model_vocab_size, target_id_by_bytes)
        target_to_draft = _map_rows(target_bytes, target_tok.model_vocab_size, draft_id_by_bytes)
        return draft_to_target, target_to_draft

    def target_coverage(self, target_ids: Sequence[int] | torch.Tensor) -> float:
        """Share of `target_ids` whose bytes some draft token has too (0.0 for no ids)."""
        ids = torch.as_tensor(target_ids, dtype=torch.long).flatten()
        if ids.numel() == 0:
            return 0.0
        if int(ids.min()) < 0 or int(ids.max()) >= self.target_to_draft.numel():
            raise InputError(
                f"target ids must lie in [0, {self.target_to_draft.numel()}); got ids from "
                f"{int(ids.min())} to {int(ids.max())}: pass ids of the target tokenizer this map was built for"
            )
        return float((self.target_to_draft[ids] >= 0).float().mean())

    def __repr__(self) -> str:
        return (
            f"VocabMap(size={self.size}, identity={self.identity}, draft_rows={self.draft_to_target.numel()}, "
            f"target_rows={self.target_to_draft.numel()})"
        )
