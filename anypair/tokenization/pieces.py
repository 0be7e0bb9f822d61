"""How vocabulary pieces spell bytes: GPT-2's byte-to-unicode alphabet, SentencePiece's `▁`
word marker and `<0xNN>` byte-fallback pieces."""
from __future__ import annotations

import functools
import re

SENTENCEPIECE_SPACE = "\u2581"
_BYTE_FALLBACK_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.cache
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (as in openai/gpt-2 encoder.py)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    shift = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shift)
            shift += 1
    return {byte: chr(char) for byte, char in zip(printable, chars)}


@functools.cache
def unicode_to_byte() -> dict[str, int]:
    return {char: byte for byte, char in byte_to_unicode().items()}


@functools.cache
def _byte_level_translation() -> dict[int, int]:
    """For str.translate: each character of GPT-2's alphabet to the character of its byte (U+0000-U+00FF),
    every other character below U+0100 to U+FFFF, so that encoding the result as latin-1 fails exactly
    when the piece holds a character outside the alphabet."""
    table = {ord(char): byte for char, byte in unicode_to_byte().items()}
    for code in range(256):
        table.setdefault(code, 0xFFFF)
    return table


def byte_level_piece_bytes(piece: str) -> bytes:
    """Bytes of a byte-level BPE piece ("Ġhello" -> b" hello"), in C (translate, encode): a vocabulary's
    table is 150,000 of these."""
    try:
        return piece.translate(_byte_level_translation()).encode("latin-1")
    except UnicodeEncodeError:
        # Pieces outside GPT-2's alphabet (added tokens written in plain text) stand for themselves.
        return piece.encode("utf-8")


def byte_fallback_value(piece: str) -> int | None:
    """255 for "<0xFF>", None for any other piece."""
    if not piece.startswith("<0x"):  # nearly every piece: a prefix test is ~5x cheaper than the regex
        return None
    match = _BYTE_FALLBACK_PIECE.fullmatch(piece)
    return int(match.group(1), 16) if match else None


def sentencepiece_piece_bytes(piece: str, byte_fallback: bool = True) -> bytes:
    """Bytes of a SentencePiece-style piece ("▁hello" -> b" hello", "<0x0A>" -> b"\\n")."""
    if byte_fallback:
        value = byte_fallback_value(piece)
        if value is not None:
            return bytes([value])
    return piece.replace(SENTENCEPIECE_SPACE, " ").encode("utf-8")
