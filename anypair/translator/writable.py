"""Text a tokenizer cannot write: SmolLM2, for one, has no token for bytes 0x04, 0x1d, 0xc0, ...
Such characters are cut out so the rest of the text is still translated (draft -> target) and
synced (target -> draft): drafting goes on around them instead of stopping for the whole request.
Used only after a whole-text encode failed, so the per-character probes cost nothing normally."""
from __future__ import annotations

from anypair.errors import TokenizerError
from anypair.tokenization.base import TokenizerAdapter


class WritableText:
    """Which characters one tokenizer can write exactly, and its ids for the text around the rest."""

    def __init__(self, tok: TokenizerAdapter) -> None:
        self.tok = tok
        self._writable_chars: dict[str, bool] = {}

    def can_write(self, char: str) -> bool:
        known = self._writable_chars.get(char)
        if known is None:
            try:
                known = self.tok.decode_bytes(self.tok.encode_continuation(char)) == char.encode("utf-8")
            except TokenizerError:
                known = False
            self._writable_chars[char] = known
        return known

    def prefix_length(self, text: str) -> int:
        """Characters before the first one the tokenizer cannot write (len(text) if none)."""
        return next((i for i, char in enumerate(text) if not self.can_write(char)), len(text))

    def encode_prefix(self, text: str) -> tuple[list[int], str]:
        """(ids, the prefix they spell) for the longest prefix of `text` that encodes exactly."""
        end = self.prefix_length(text)
        while end > 0:
            ids = self._exact_ids(text[:end])
            if ids is not None:
                return ids, text[:end]
            end -= 1  # a normalizer that rewrites across characters ("e" + combining accent): shorter
        return [], ""

    def encode_around(self, text: str) -> list[int]:
        """Ids for `text` with the characters the tokenizer cannot write left out."""
        ids: list[int] = []
        start = 0
        for i, char in enumerate(text):
            if not self.can_write(char):
                ids += self._segment_ids(text[start:i])
                start = i + 1
        return ids + self._segment_ids(text[start:])

    def _segment_ids(self, segment: str) -> list[int]:
        ids = self._exact_ids(segment)
        if ids is None:  # every character is writable alone, not together: one at a time
            ids = [i for char in segment for i in self._exact_ids(char) or []]
        return ids

    def _exact_ids(self, text: str) -> list[int] | None:
        if not text:
            return []
        try:
            ids = self.tok.encode_continuation(text)
        except TokenizerError:
            return None
        return ids if self.tok.decode_bytes(ids) == text.encode("utf-8") else None
