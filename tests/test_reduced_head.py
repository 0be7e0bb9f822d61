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


def test_a_sequence_keeps_its_own_tokens_bitwise_beside_the_shared_rows(zoo_fetch):
    """Slot by slot: a sequence's own tokens (its request's) are scored with the full head's bits, in
    one forward beside a sequence without them; replacing or dropping them takes effect at once."""
    from anypair.backends.base import SequenceRows

    backend = _smol(zoo_fetch)
    ids = [random.Random(2).randrange(backend.vocab_size) for _ in range(24)]
    full = backend.extend(ids, all_logits=True).clone()
    shared = sorted(random.Random(3).sample(range(backend.vocab_size), 2000))
    own = sorted(set(random.Random(4).sample(range(backend.vocab_size), 37)) - set(shared))  # not 16 rows
    backend.restrict_head(shared)
    backend.set_slots(2)
    backend.sequence(0).keep_head_tokens(own)
    for slot in (0, 1):
        backend.forward_rows([SequenceRows(slot, ids[:-3], "none")])
    both = backend.forward_rows([SequenceRows(0, ids[-3:], "all"), SequenceRows(1, ids[-3:], "last")])
    assert torch.equal(both[0][:, shared + own], full[-3:, shared + own])
    assert torch.equal(both[1][shared], full[-1, shared])
    assert bool((both[1][own] == float("-inf")).all())  # slot 1 keeps the shared rows only
    others = torch.ones(backend.vocab_size, dtype=torch.bool)
    others[shared + own] = False
    assert bool((both[0][:, others] == float("-inf")).all())
    backend.sequence(0).keep_head_tokens([])  # dropped: the shared rows only
    backend.crop_slot(0, len(ids) - 1)
    alone = backend.forward_rows([SequenceRows(0, ids[-1:], "last")])[0]
    assert torch.equal(alone[shared], full[-1, shared]) and bool((alone[own] == float("-inf")).all())


def test_the_drafter_keeps_its_requests_prompt_and_committed_tokens(zoo_fetch):
    """The default draft's head: the shared rows and, for the request, every draft token of its prompt
    and of what was committed; a new request starts from its own prompt."""
    from anypair.generation.generator import AnyPairGenerator

    gen = AnyPairGenerator(QWEN05, SMOL, threads=2, engine="gguf", draft_engine="gguf")
    head = gen.draft.backend.reduced_head
    assert head is not None and len(head.ids) == 8192  # the default, SmolLM2's vocabulary has a table
    prompt = "def frobnicate_quuxifier(zyzzyva_count):"
    out = gen.generate(prompt, max_new_tokens=24)
    own = head._own[0][0].tolist()
    prompt_ids = set(gen.draft.hf_tokenizer(prompt, add_special_tokens=False)["input_ids"])
    shared = set(head.ids.tolist())
    assert prompt_ids - shared and (prompt_ids - shared) <= set(own)
    drafter = gen._greedy_drafters[0]  # the request's drafter (greedy: kept per slot)
    assert out.stats.draft_tokens_accepted > 0 and set(drafter._context_ids) <= shared | set(own)
    gen.generate("Name a colour.", max_new_tokens=4)
    assert not (prompt_ids - shared) & set(head._own.get(0, (torch.tensor([]),))[0].tolist())
