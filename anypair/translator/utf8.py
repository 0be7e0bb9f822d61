"""Byte-level UTF-8 facts the translator needs at the edges of a chunk of text.

Tokens may split a UTF-8 character, so a chunk of generated text can start with the continuation
bytes of a character begun earlier and end with the first bytes of one that is not finished yet.
These helpers find those edges in O(1) (they look at no more than four bytes) and split the rest
into runs a tokenizer's `encode_continuation(str)` can take.
"""
from __future__ import annotations

from dataclasses import dataclass

#: the longest UTF-8 character, in bytes
MAX_CHAR_BYTES = 4


def is_continuation_byte(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def char_length_from_lead(byte: int) -> int:
    """Bytes in the character that starts with `byte`; 0 when `byte` cannot start a character."""
    if byte < 0x80:
        return 1
    if 0xC2 <= byte <= 0xDF:
        return 2
    if 0xE0 <= byte <= 0xEF:
        return 3
    if 0xF0 <= byte <= 0xF4:
        return 4
    return 0


def leading_continuation_count(data: bytes) -> int:
    """Continuation bytes at the start of `data` (the end of a character begun before it); at most 3."""
    count = 0
    while count < len(data) and count < MAX_CHAR_BYTES - 1 and is_continuation_byte(data[count]):
        count += 1
    return count


def incomplete_tail_length(data: bytes) -> int:
    """Length of the unfinished character at the end of `data` (a lead byte followed by fewer
    continuation bytes than it announces), or 0 when `data` ends on a character boundary."""
    for back in range(1, min(MAX_CHAR_BYTES, len(data)) + 1):
        byte = data[-back]
        if is_continuation_byte(byte):
            continue
        needed = char_length_from_lead(byte)
        return back if needed > back else 0
    return 0


@dataclass(frozen=True)
class Utf8Run:
    """A piece of a byte string: either valid UTF-8 text or bytes that are not (`text is None`)."""

    data: bytes
    text: str | None


def split_valid_runs(data: bytes) -> list[Utf8Run]:
    """Cut `data` into maximal valid-UTF-8 runs and the invalid bytes between them, in order."""
    runs: list[Utf8Run] = []
    start = 0
    while start < len(data):
        try:
            runs.append(Utf8Run(data[start:], data[start:].decode("utf-8")))
            break
        except UnicodeDecodeError as error:
            if error.start:
                valid = data[start : start + error.start]
                runs.append(Utf8Run(valid, valid.decode("utf-8")))
            bad_end = start + max(error.end, error.start + 1)
            runs.append(Utf8Run(data[start + error.start : bad_end], None))
            start = bad_end
    return runs


def valid_prefix_length(data: bytes) -> int:
    """Length of the longest prefix of `data` that is valid, complete UTF-8."""
    try:
        data.decode("utf-8")
        return len(data)
    except UnicodeDecodeError as error:
        return error.start
