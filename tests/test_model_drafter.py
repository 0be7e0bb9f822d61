"""ModelDrafter on the translated path (draft and target tokenizers differ): where a round that
stops by the draft's confidence ends. A scripted backend plays the draft model, real tokenizers
(SmolLM2's for the draft, Qwen2.5's for the target) do the translating."""
from __future__ import annotations

from typing import Sequence

import pytest
import torch

from anypair.backends.base import ModelBackend
from anypair.drafters import model as model_drafter
from anypair.drafters.base import DraftRequest
from anypair.drafters.model import ModelDrafter
from anypair.types import DraftBudget

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPT = "def factorial(n):\n    if n < 2:\n        return 1\n"
ANSWER = "    return n * factorial(n - 1)\n"


class ScriptedDraft(ModelBackend):
    """Predicts `script` after `prompt_length` tokens, each with `confidence` (two distractors
    share the rest)."""

    name = "scripted"
    max_context = 4096

    def __init__(self, vocab_size: int, prompt_length: int, script: list[int], confidence: float) -> None:
        self.vocab_size, self.prompt_length, self.script = vocab_size, prompt_length, script
        distractor = (1 - confidence) / 2
        self.gap = float(torch.log(torch.tensor(confidence / distractor)))  # logit of the scripted token over each distractor
        self.length = 0

    @property
    def cached_length(self) -> int:
        return self.length

    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        self.length += len(ids)
        logits = torch.full((self.vocab_size,), -1e4)
        position = self.length - self.prompt_length
        token = self.script[position] if 0 <= position < len(self.script) else self.script[-1]
        distractors = [t for t in (1000, 1001, 1002) if t != token][:2]
        logits[distractors] = 0.0
        logits[token] = self.gap
        return logits

    def crop(self, length: int) -> None:
        self.length = length

    def reset(self) -> None:
        self.length = 0


@pytest.fixture(scope="module")
def tokenizers(zoo_fetch):
    from anypair.zoo import load_tokenizer, resolve_model, tokenizer_path

    return load_tokenizer(str(resolve_model(SMOLLM2))), load_tokenizer(str(tokenizer_path("qwen2")))


def unsure_drafter(tokenizers, confidence: float) -> ModelDrafter:
    draft_tok, target_tok = tokenizers
    prompt_ids = draft_tok.encode(PROMPT)
    backend = ScriptedDraft(draft_tok.vocab_size, len(prompt_ids), draft_tok.encode(ANSWER), confidence)
    drafter = ModelDrafter(backend, draft_tok, target_tok, lambda request: list(prompt_ids))
    drafter.start(DraftRequest(target_tok.encode(PROMPT), prompt=PROMPT))
    return drafter


def test_an_unsure_translated_draft_still_proposes_a_target_token(tokenizers, monkeypatch):
    # every draft token at 0.36 under stop advice of 0.5: by confidence alone the round would end
    # before its first token, and a single new draft token leaves only an unstable target tail
    budget = DraftBudget(max_draft_steps=12, max_target_tokens=64, stop_confidence=0.5)
    proposal = unsure_drafter(tokenizers, confidence=0.36).propose(budget)
    target_tok = tokenizers[1]
    assert 1 <= len(proposal) <= model_drafter.MIN_TRANSLATED_DRAFT_TOKENS
    assert ANSWER.startswith(target_tok.decode(proposal.target_ids))
    # it stops right after the tokens it must write: an unsure draft does not run on
    assert len(proposal) < len(target_tok.encode(ANSWER)) - 2

    monkeypatch.setattr(model_drafter, "MIN_TRANSLATED_DRAFT_TOKENS", 0)  # the stop by confidence alone
    assert len(unsure_drafter(tokenizers, confidence=0.36).propose(budget)) == 0


def test_a_sure_translated_draft_runs_to_its_budget(tokenizers):
    budget = DraftBudget(max_draft_steps=6, max_target_tokens=64, stop_confidence=0.5)
    proposal = unsure_drafter(tokenizers, confidence=0.99).propose(budget)
    assert len(proposal) >= 4 and ANSWER.startswith(tokenizers[1].decode(proposal.target_ids))


def test_the_tokens_a_healed_tail_allows_are_exactly_those_starting_with_it(tokenizers):
    """Token healing's allowed set, found by bisecting the vocabulary sorted by bytes, against a scan
    of every real draft token: tails of one byte, of a word, of UTF-8 lead bytes, and one no token has."""
    drafter = unsure_drafter(tokenizers, confidence=0.9)
    pieces = tokenizers[0].all_token_bytes()[: drafter._n_real]
    for tail in (b" ", b"    ", b"def", b" return", b"\n", b"\xe4", b"\xe4\xb8", b"(n", b"zzzzqqqq\xff"):
        expected = [i for i, piece in enumerate(pieces) if piece.startswith(tail)]
        assert drafter._tokens_starting_with(tail).tolist() == expected, tail
        assert drafter._tokens_starting_with(tail).tolist() == expected  # and again, from its cache
    assert len(drafter._tokens_starting_with(b" ")) > 1000


def test_a_dearer_row_ends_the_proposal_where_its_stop_confidence_rises(tokenizers):
    """Each draft token at ~0.93 with a stop figure of 0.05 for proposals of up to 3 tokens and 0.9 for
    longer ones: the proposal ends after 3 draft tokens where one figure of 0.05 runs to the budget."""
    from anypair.types import DraftBudget

    cheap = DraftBudget(max_draft_steps=6, max_target_tokens=64, stop_confidence=0.05)
    kneed = DraftBudget(max_draft_steps=6, max_target_tokens=64, stop_confidence=(0.05, 0.05, 0.05, 0.9))
    assert kneed.stop_at(1) == 0.05 and kneed.stop_at(4) == kneed.stop_at(9) == 0.9 and cheap.stop_at(5) == 0.05
    long_drafter, short_drafter = unsure_drafter(tokenizers, 0.93), unsure_drafter(tokenizers, 0.93)
    long_drafter.propose(cheap)
    short_drafter.propose(kneed)
    assert len(long_drafter._proposed_draft_ids) == 6 and len(short_drafter._proposed_draft_ids) == 3


def test_a_prompt_longer_than_the_drafts_context_slides_its_window_and_still_drafts(tokenizers):
    """The draft reads a window of its own: a prompt (and then committed text) past its context is read
    again from position 0, its last part kept, and the proposals go on (never a refusal)."""
    draft_tok, target_tok = tokenizers
    long_prompt = PROMPT * 40  # ~1,000 draft tokens
    prompt_ids = draft_tok.encode(long_prompt)
    word = draft_tok.encode(" value")
    backend = ScriptedDraft(draft_tok.vocab_size, 0, word * 4096, 0.99)  # " value" at every position
    backend.max_context = 256
    drafter = ModelDrafter(backend, draft_tok, target_tok, lambda request: list(prompt_ids))
    drafter.start(DraftRequest(target_tok.encode(long_prompt), prompt=long_prompt))
    budget = DraftBudget(max_draft_steps=6, max_target_tokens=64, stop_confidence=0.5)
    committed: list[int] = []
    slides = 0
    for _ in range(150):
        before = backend.length
        proposal = drafter.propose(budget)
        slides += backend.length < before
        assert len(proposal) >= 1 and target_tok.decode(proposal.target_ids).startswith(" value")
        assert backend.length <= backend.max_context
        drafter.commit(proposal.target_ids[:3])
        committed += proposal.target_ids[:3]
    assert slides >= 2  # the window slid more than once, and drafting went on
    # the draft's context is the end of the whole text (the prompt, then what was committed), the
    # held-back tail aside: its last part, in order
    text = draft_tok.decode_bytes(prompt_ids) + target_tok.decode_bytes(committed)
    kept = draft_tok.decode_bytes(drafter._context_ids)
    assert text[: len(text) - len(drafter.sync.pending)].endswith(kept) and len(kept) < len(text) // 2
