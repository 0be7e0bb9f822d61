"""The draft's reduced head (backends/reduced_head.py): its kept rows' logits are bitwise the full
head's, every other logit is -inf, it is the default draft's head, and greedy output with it stays the
target's own."""
from __future__ import annotations

import random

import pytest
import torch

QWEN05 = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _smol(zoo_fetch):
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.zoo.registry import ZOO_MODELS
    from anypair.zoo.served_gguf import gguf_file

    return QuantizedGGUFBackend(gguf_file(ZOO_MODELS[SMOL], progress=False), name=SMOL, threads=2, context=512)


def test_kept_ids_take_the_specials_then_the_most_frequent_then_the_lowest_ids():
    from anypair.backends.reduced_head import ALWAYS_KEPT, kept_ids

    ranking = [500, 40, 999, 7, 12345]
    kept = kept_ids(ranking, ALWAYS_KEPT + 3, vocab=1000)  # 12345 lies outside the vocabulary
    assert kept == sorted(set(range(ALWAYS_KEPT)) | {500, 40, 999})
    filled = kept_ids(ranking, ALWAYS_KEPT + 5, vocab=1000)  # past the table: the lowest ids not kept yet
    assert filled == sorted(set(range(ALWAYS_KEPT)) | {500, 40, 999, ALWAYS_KEPT, ALWAYS_KEPT + 1})


def test_a_reduced_heads_rows_are_the_full_heads_bitwise_and_the_rest_minus_inf(zoo_fetch):
    backend = _smol(zoo_fetch)
    ids = [random.Random(0).randrange(backend.vocab_size) for _ in range(64)]
    full = backend.extend(ids, all_logits=True).clone()
    kept = sorted(random.Random(1).sample(range(backend.vocab_size), 1003))  # not a multiple of 16 rows
    backend.restrict_head(kept)
    assert backend.head_bytes < backend.embedding.nbytes
    for rows in (1, 3, 7):  # the kept rows' bits whatever the number of rows in the step
        backend.crop(len(ids) - rows)
        reduced = backend.extend(ids[-rows:], all_logits=True)
        assert torch.equal(reduced[:, kept], full[-rows:, kept])
        others = torch.ones(backend.vocab_size, dtype=torch.bool)
        others[kept] = False
        assert bool((reduced[:, others] == float("-inf")).all())
    backend.restrict_head(None)  # the full head again
    backend.crop(len(ids) - 1)
    assert torch.equal(backend.extend(ids[-1:]), full[-1])


def test_the_env_variable_sets_the_draft_heads_size(monkeypatch):
    from anypair.backends.reduced_head import DEFAULT_DRAFT_HEAD_ROWS, HEAD_ROWS_ENV, draft_head_rows

    monkeypatch.delenv(HEAD_ROWS_ENV, raising=False)
    assert draft_head_rows() == DEFAULT_DRAFT_HEAD_ROWS
    monkeypatch.setenv(HEAD_ROWS_ENV, "full")
    assert draft_head_rows() is None
    monkeypatch.setenv(HEAD_ROWS_ENV, "8192")
    assert draft_head_rows() == 8192


def test_greedy_output_with_the_reduced_draft_head_is_the_targets_own(zoo_fetch, monkeypatch):
    from anypair.backends.reduced_head import HEAD_ROWS_ENV
    from anypair.generation.generator import AnyPairGenerator

    monkeypatch.setenv(HEAD_ROWS_ENV, "4096")  # small, so that the draft meets tokens outside its head
    gen = AnyPairGenerator(QWEN05, SMOL, threads=2, engine="gguf", draft_engine="gguf", num_draft_tokens=4,
                           draft_length="constant", skip_losing_drafts=False)
    head = gen.draft.backend.reduced_head
    assert head is not None and len(head.ids) == 4096  # SmolLM2's vocabulary has a table
    for prompt in ("def fibonacci(n):", "Write a Python function that reverses a string."):
        drafted = gen.generate(prompt, max_new_tokens=24)
        alone = gen.generate(prompt, max_new_tokens=24, assisted=False)
        assert drafted.target_ids == alone.target_ids
        assert drafted.stats.draft_tokens_proposed > 0
