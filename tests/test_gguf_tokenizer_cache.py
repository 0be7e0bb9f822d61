"""A GGUF's tokenizer converted by transformers is kept (backends/sources.py: tokenizer_of_gguf): a second
load reads the same tokenizer back (same vocabulary, added tokens and their flags, encodings) without
converting; a GGUF edited in place, or an entry that does not load, is converted again. The conversion
goes straight to the class AutoTokenizer picks (skipping its parse of the whole metadata): the same
tokenizer AutoTokenizer builds, and AutoTokenizer itself for an architecture not listed."""
from __future__ import annotations

import os

import pytest

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TEXTS = ["def add(a, b):\n    return a + b\n", "  héllo  wörld 你好 🙂\t\n", "<|im_start|>user\nhi<|im_end|>", ""]


@pytest.fixture()
def lone_gguf(zoo_fetch, tmp_path, monkeypatch):
    """SmolLM2's GGUF in a folder without tokenizer files (so its tokenizer is converted from the GGUF),
    with $ANYPAIR_HOME a folder of the test's own."""
    from anypair.zoo import ZOO_MODELS
    from anypair.zoo.gguf_assembly import gguf_path

    lone = tmp_path / "lone" / "smol.gguf"
    lone.parent.mkdir()
    lone.symlink_to(gguf_path(ZOO_MODELS[SMOL]))
    monkeypatch.setenv("ANYPAIR_HOME", str(tmp_path / "home"))
    return lone


@pytest.fixture()
def conversions(monkeypatch):
    """Counts transformers' conversions of a GGUF's vocabulary (each one real)."""
    from anypair.backends import sources

    calls = []
    convert = sources._convert_tokenizer
    monkeypatch.setattr(sources, "_convert_tokenizer", lambda gguf: calls.append(gguf.name) or convert(gguf))
    return calls


@pytest.fixture()
def stand_in(monkeypatch):
    """Counts conversions and answers each with a small stand-in (the cache's logic, without the seconds
    a real conversion takes)."""
    from anypair.backends import sources

    calls = []
    monkeypatch.setattr(sources, "_convert_tokenizer", lambda gguf: calls.append(gguf.name) or {"converted": len(calls)})
    return calls


def _same(first, second) -> None:
    from anypair.tokenization import from_hf

    assert type(first) is type(second) and first.get_vocab() == second.get_vocab()
    assert first.added_tokens_decoder == second.added_tokens_decoder  # the `special` flags included
    assert first.special_tokens_map == second.special_tokens_map and first.chat_template == second.chat_template
    for text in TEXTS:
        assert first(text)["input_ids"] == second(text)["input_ids"]
    assert from_hf(first).special_ids == from_hf(second).special_ids


def test_a_converted_tokenizer_is_kept_and_read_back_the_same(lone_gguf, conversions, tmp_path):
    from anypair.backends.sources import tokenizer_of_gguf

    converted = tokenizer_of_gguf(lone_gguf)
    assert conversions == ["smol.gguf"]
    kept = list((tmp_path / "home" / "gguf-tokenizers").iterdir())
    assert [path.suffix for path in kept] == [".pickle"]
    _same(converted, tokenizer_of_gguf(lone_gguf))
    assert conversions == ["smol.gguf"]  # read back, not converted


def test_a_damaged_entry_or_an_edited_gguf_is_converted_again(lone_gguf, stand_in, tmp_path):
    from anypair.backends.sources import tokenizer_of_gguf

    assert tokenizer_of_gguf(lone_gguf) == tokenizer_of_gguf(lone_gguf) == {"converted": 1}
    (kept,) = (tmp_path / "home" / "gguf-tokenizers").iterdir()
    kept.write_bytes(b"not a pickle")
    assert tokenizer_of_gguf(lone_gguf) == tokenizer_of_gguf(lone_gguf) == {"converted": 2}
    real = lone_gguf.resolve()
    status = real.stat()
    try:
        os.utime(real, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000))
        assert tokenizer_of_gguf(lone_gguf) == {"converted": 3}
    finally:
        os.utime(real, ns=(status.st_atime_ns, status.st_mtime_ns))  # the zoo's own stamp of the file
    assert tokenizer_of_gguf(lone_gguf) == {"converted": 2}  # the first stamp's entry again
    assert len(stand_in) == 3 and len(list(kept.parent.iterdir())) == 2


def test_an_unwritable_home_still_gives_the_tokenizer(lone_gguf, stand_in, tmp_path, monkeypatch):
    from anypair.backends.sources import tokenizer_of_gguf

    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("ANYPAIR_HOME", str(blocker))
    assert tokenizer_of_gguf(lone_gguf) == {"converted": 1} and tokenizer_of_gguf(lone_gguf) == {"converted": 2}


def test_the_conversion_is_the_tokenizer_autotokenizer_builds(lone_gguf):
    from transformers import AutoTokenizer

    from anypair.backends.sources import _convert_tokenizer, _tokenizer_class_of

    assert _tokenizer_class_of(lone_gguf) is not None  # a llama file: the class read from its header
    ours = _convert_tokenizer(lone_gguf)
    theirs = AutoTokenizer.from_pretrained(str(lone_gguf.parent), gguf_file=lone_gguf.name)
    _same(ours, theirs)
    assert ours.backend_tokenizer.to_str() == theirs.backend_tokenizer.to_str()
    assert ours.init_kwargs == theirs.init_kwargs


def test_an_architecture_not_listed_is_left_to_autotokenizer(lone_gguf, monkeypatch):
    from transformers import AutoTokenizer

    from anypair.backends import sources

    monkeypatch.setattr(sources, "_GGUF_MODEL_TYPES", {})
    calls = []
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *args, **kwargs: calls.append(kwargs["gguf_file"]))
    assert sources._tokenizer_class_of(lone_gguf) is None
    sources._convert_tokenizer(lone_gguf)
    assert calls == ["smol.gguf"]
