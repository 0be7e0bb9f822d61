"""Turns committed target-token bytes into text: exact UTF-8 across split characters, stop
strings, and streaming chunks that never show half a character or half a stop string."""
from __future__ import annotations

import codecs
from typing import TYPE_CHECKING, Generator, Iterator, Optional, Sequence

if TYPE_CHECKING:
    from anypair.types import GenerationResult


class TextAssembler:
    def __init__(self, stop_strings: Optional[Sequence[str]] = None) -> None:
        self.stop_strings = [s for s in (stop_strings or []) if s]
        self._hold = max((len(s) for s in self.stop_strings), default=1) - 1
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""  # all decoded text so far (complete characters only)
        self._emitted = 0  # characters already handed out by `take_new`
        self.stopped = False

    @property
    def text(self) -> str:
        return self._text

    def feed(self, data: bytes) -> bool:
        """Add bytes; returns True when a stop string has appeared (text is cut before it)."""
        if self.stopped:
            return True
        before = len(self._text)
        self._text += self._decoder.decode(data)
        if self.stop_strings:
            search_from = max(0, before - self._hold)
            cut = min((i for i in (self._text.find(s, search_from) for s in self.stop_strings) if i >= 0), default=-1)
            if cut >= 0:
                self._text = self._text[:cut]
                self.stopped = True
        return self.stopped

    def finish(self) -> None:
        if not self.stopped:
            self._text += self._decoder.decode(b"", final=True)

    def take_new(self, final: bool = False) -> str:
        """Text not yet handed out, minus a tail that could still become a stop string."""
        end = len(self._text) if (final or self.stopped) else max(self._emitted, len(self._text) - self._hold)
        chunk = self._text[self._emitted:end]
        self._emitted = end
        return chunk


class TextStream(Iterator[str]):
    """`AnyPairGenerator.stream`'s text, piece by piece as it is verified; `result` is the request's
    `GenerationResult` once the stream is exhausted (None before). `close()` ends it early."""

    def __init__(self, pieces: Generator[str, None, "GenerationResult"]) -> None:
        self._pieces = pieces
        self.result: Optional[GenerationResult] = None

    def __iter__(self) -> TextStream:
        return self

    def __next__(self) -> str:
        try:
            return next(self._pieces)
        except StopIteration as done:
            self.result = done.value
            raise StopIteration from None

    def close(self) -> None:
        self._pieces.close()
