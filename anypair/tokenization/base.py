"""The tokenizer adapter interface: one small surface over HF fast tokenizers, SentencePiece,
tiktoken and GGUF vocabularies.

Everything above this layer (translator, drafters, generation loop) speaks bytes and ids only
through `TokenizerAdapter`, so a new tokenizer family needs one adapter and nothing else.
`TableTokenizerAdapter` is the shared implementation: every concrete adapter computes its
id -> bytes table once at construction, so decoding is a list lookup.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

from anypair.errors import TokenizerError


class TokenizerAdapter(ABC):
    """A tokenizer seen as a map between byte strings and token ids.

    Contract:
    - `token_bytes(i)` is the exact byte string token `i` stands for in running text (byte-level
      BPE characters, `▁` word prefixes and `<0xNN>` byte-fallback pieces mapped to real bytes).
      Special/control tokens (BOS, EOS, chat markers) have `b""` and are listed in `special_ids`.
    - `encode_continuation(text)` tokenizes `text` as it would appear in the middle of running
      text right after a token boundary: no BOS, no SentencePiece dummy-prefix space, and text
      that merely looks like a special token ("<|im_end|>") is encoded as plain text.
      Invariant: b"".join(token_bytes(i) for i in ids) == text.encode("utf-8").
    - `encode(text, add_special_tokens=True)` is the model's own tokenization of a whole prompt
      (BOS per the model's policy).
    """

    name: str
    #: number of ids the tokenizer defines (including added/special tokens)
    vocab_size: int
    #: rows of the model's embedding / LM head when larger than vocab_size (padded vocab), else vocab_size
    model_vocab_size: int
    bos_id: int | None
    eos_ids: frozenset[int]
    unk_id: int | None
    pad_id: int | None
    special_ids: frozenset[int]

    @abstractmethod
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    @abstractmethod
    def encode_continuation(self, text: str) -> list[int]: ...

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes: ...

    def all_token_bytes(self) -> list[bytes]:
        """Bytes of every id in [0, vocab_size); specials are b""."""
        return [self.token_bytes(i) for i in range(self.vocab_size)]

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        return b"".join(self.token_bytes(i) for i in ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def byte_token_id(self, byte: int) -> int | None:
        """Id of the token that is exactly the single byte `byte` (byte-level BPE char or
        `<0xNN>` byte-fallback piece), or None when the vocabulary has none."""
        return None

    def set_model_vocab_size(self, rows: int) -> None:
        """Record the model's LM-head rows (may exceed vocab_size: padded vocabulary)."""
        self.model_vocab_size = max(int(rows), self.vocab_size)


class TableTokenizerAdapter(TokenizerAdapter):
    """Adapter whose id -> bytes table is computed once; subclasses supply the encoders.

    Ids in [vocab_size, model_vocab_size) are padding rows of the model's LM head: they decode
    to b"" and count as special, so nothing above this layer ever proposes them.
    """

    def __init__(
        self,
        *,
        name: str,
        token_bytes_table: list[bytes],
        special_ids: set[int],
        byte_fallback_ids: set[int],
        bos_id: int | None,
        eos_ids: set[int],
        unk_id: int | None,
        pad_id: int | None,
    ) -> None:
        self.name = name
        self.vocab_size = len(token_bytes_table)
        self.model_vocab_size = self.vocab_size
        self._table = token_bytes_table
        self._tokenizer_special_ids = frozenset(special_ids)
        self.special_ids = self._tokenizer_special_ids
        self.bos_id = bos_id
        self.eos_ids = frozenset(eos_ids)
        self.unk_id = unk_id
        self.pad_id = pad_id
        self._byte_ids = _single_byte_ids(token_bytes_table, self.special_ids, byte_fallback_ids)

    def token_bytes(self, token_id: int) -> bytes:
        try:
            return self._table[token_id]
        except (IndexError, TypeError):
            raise TokenizerError(
                f"token id {token_id!r} is outside {self.name}'s vocabulary of "
                f"{self.model_vocab_size} ids; was it produced by a different tokenizer?"
            ) from None

    def all_token_bytes(self) -> list[bytes]:
        return self._table[: self.vocab_size]

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        try:
            return b"".join([self._table[i] for i in ids])
        except (IndexError, TypeError):
            bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < len(self._table)]
            raise TokenizerError(
                f"token ids {bad[:5]} are outside {self.name}'s vocabulary of {len(self._table)} ids"
            ) from None

    def byte_token_id(self, byte: int) -> int | None:
        return self._byte_ids[byte]

    def set_model_vocab_size(self, rows: int) -> None:
        super().set_model_vocab_size(rows)
        del self._table[self.vocab_size :]
        padding = range(self.vocab_size, self.model_vocab_size)
        self._table.extend(b"" for _ in padding)
        self.special_ids = self._tokenizer_special_ids | frozenset(padding)

    def _require_unicode(self, text: str) -> None:
        """Every adapter refuses text that has no UTF-8 bytes (lone surrogates) the same way:
        tiktoken would silently turn them into U+FFFD, breaking the byte-exact contract, and the
        other libraries raise their own TypeError/RuntimeError."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TokenizerError(
                f"{self.name} cannot encode {text[max(0, exc.start - 10):exc.start + 10]!r}: U+{ord(text[exc.start]):04X} "
                "is a lone surrogate, which has no UTF-8 bytes; pass valid Unicode text"
            ) from None
        except AttributeError:
            raise TokenizerError(f"{self.name} encodes str, got {type(text).__name__}") from None

    def _check_round_trip(self, text: str, ids: list[int]) -> list[int]:
        if self.decode_bytes(ids) != text.encode("utf-8"):
            raise TokenizerError(
                f"{self.name} cannot encode {text[:40]!r} losslessly (its normalizer changes the "
                "text, or its vocabulary has no token for some of these bytes); this text cannot "
                "be drafted with this tokenizer"
            )
        return ids


def _single_byte_ids(
    table: list[bytes], special_ids: frozenset[int], byte_fallback_ids: set[int]
) -> list[int | None]:
    """For each byte value, the id of the token that is exactly that byte.

    A regular piece ("A") is preferred over its `<0x41>` byte-fallback twin, because it is what
    the model's own tokenizer produces for that character.
    """
    ids: list[int | None] = [None] * 256
    for token_id, piece in enumerate(table):
        if len(piece) != 1 or token_id in special_ids:
            continue
        current = ids[piece[0]]
        if current is None or (current in byte_fallback_ids and token_id not in byte_fallback_ids):
            ids[piece[0]] = token_id
    return ids
