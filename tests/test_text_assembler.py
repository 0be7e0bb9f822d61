"""TextAssembler (anypair.generation.text): UTF-8 split across tokens, stop strings, and streamed
chunks that never show half a stop string."""
from __future__ import annotations

from anypair.generation.text import TextAssembler


def test_text_assembler_split_utf8_and_stop():
    t = TextAssembler(["STOP"])
    snowman = "☃".encode()
    assert not t.feed(b"ab" + snowman[:1])
    assert t.take_new() == ""  # 'ab' held back: could start a stop string
    t.feed(snowman[1:] + b"cdefg")
    assert t.text == "ab☃cdefg"
    assert t.feed(b"xxST")  is False
    assert t.feed(b"OPzz")
    assert t.text == "ab☃cdefgxx"
    assert t.take_new() + "" == "ab☃cdefgxx"
