"""The tokenizer adapter interface: one small surface over HF fast tokenizers, SentencePiece,
tiktoken and GGUF vocabularies.

Everything above this layer (translator, drafters, generation loop) speaks bytes and ids only
through `TokenizerAdapter`, so a new tokenizer family needs one adapter and nothing else.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence


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
