"""One request at a time per generator: a request made while a stream is open is refused with a
clear error (it used to corrupt the stream silently), and a stream that is exhausted, closed or
dropped releases the generator."""
from __future__ import annotations

import gc

import pytest

from anypair.errors import InputError

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPT = "def fibonacci(n):"
N_NEW = 12


@pytest.fixture(scope="module")
def gen(smol_alone_fp32):
    return smol_alone_fp32


@pytest.fixture(scope="module")
def reference(gen) -> str:
    return gen.generate(PROMPT, max_new_tokens=N_NEW).text


def test_second_request_while_a_stream_is_open_is_refused_and_the_stream_stays_right(gen, reference):
    stream = gen.stream(PROMPT, max_new_tokens=N_NEW)
    first = next(stream)
    with pytest.raises(InputError, match="still serving an open stream.*close"):
        gen.generate("The capital of France is", max_new_tokens=4)
    with pytest.raises(InputError, match="still serving"):
        next(gen.stream("The capital of France is", max_new_tokens=4))
    assert first + "".join(stream) == reference
    assert gen.generate(PROMPT, max_new_tokens=N_NEW).text == reference  # exhausted: released


def test_closed_stream_releases_the_generator(gen, reference):
    stream = gen.stream(PROMPT, max_new_tokens=N_NEW)
    next(stream)
    stream.close()
    assert gen.generate(PROMPT, max_new_tokens=N_NEW).text == reference


def test_dropped_stream_releases_the_generator(gen, reference):
    stream = gen.stream(PROMPT, max_new_tokens=N_NEW)
    next(stream)
    del stream
    gc.collect()
    assert gen.generate(PROMPT, max_new_tokens=N_NEW).text == reference


def test_failed_request_releases_the_generator(gen, reference):
    with pytest.raises(InputError):
        next(gen.stream("", max_new_tokens=N_NEW))
    assert gen.generate(PROMPT, max_new_tokens=N_NEW).text == reference
