"""Translator tests on the real tokenizers of the published heterogeneous pairs (fetched by the zoo).

Pairs: Gemma <-> Llama-2 SentencePiece, Llama-2 SPM <-> StarCoder2, Phi-3 <-> Qwen2, and the real
model pairs Qwen2.5 <-> SmolLM2 and Qwen2.5 <-> Gemma-3. Each pair is simulated round by round in
both directions: a target that writes its own tokenization of a real text, a draft that proposes
the next draft tokens of that text with some of them corrupted, and the translator and sync in
between. Invariants checked every round: the committed text is never altered, the draft context's
bytes equal the committed text minus `pending`, the translated proposal decodes to exactly the
proposed bytes it claims to cover, and the realignment drops no more than it must.
"""
from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import anypair.translator.translate as translate_module
from anypair.inspect_pair import DEFAULT_SAMPLE_TEXT, HARD_STRINGS
from anypair.tokenization.base import TokenizerAdapter
from anypair.translator import DraftRealignment, DraftSync, Translation, Translator, VocabMap
from anypair.translator.utf8 import incomplete_tail_length

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _tokenizer_location(name: str) -> Path:
    from anypair.zoo import resolve_model, tokenizer_path

    if name in ("llama-spm", "phi-3", "starcoder"):
        return tokenizer_path("llama-cpp-vocab") / f"ggml-vocab-{name}.gguf"
    if name == "smollm2":
        return Path(resolve_model(SMOLLM2))
    return tokenizer_path(name)


@functools.lru_cache(maxsize=None)
def tokenizer(name: str) -> TokenizerAdapter:
    from anypair.zoo import load_tokenizer

    return load_tokenizer(str(_tokenizer_location(name)))


@functools.lru_cache(maxsize=None)
def vocab_map(target: str, draft: str) -> VocabMap:
    return VocabMap(tokenizer(target), tokenizer(draft))


PAIRS = [
    ("gemma", "llama-spm"),
    ("llama-spm", "starcoder"),
    ("phi-3", "qwen2"),
    ("qwen2", "smollm2"),
    ("qwen2", "gemma3"),
]
DIRECTED_PAIRS = PAIRS + [(draft, target) for target, draft in PAIRS]


def _pair_id(pair: tuple[str, str]) -> str:
    return f"{pair[0]}<-{pair[1]}"


# real text: this package's own source (tabs-free code), prose, CJK, emoji, and the hard strings
def _real_text() -> str:
    source = Path(translate_module.__file__).read_text(encoding="utf-8")
    source = source[source.index("class DraftSync"):][:2500]
    return "\n".join([DEFAULT_SAMPLE_TEXT, source, *HARD_STRINGS, "  \t  mixed\t\twhitespace  \n\n\n end"])


def _encode_bytes(tok: TokenizerAdapter, data: bytes) -> list[int]:
    """Any byte string as ids (valid UTF-8 via encode_continuation, other bytes as byte tokens)."""
    return DraftSync(tok).encode_bytes(data)


# -- round-by-round simulation ------------------------------------------------------------------
def simulate(target_tok: TokenizerAdapter, draft_tok: TokenizerAdapter, text: str, *, k: int, corrupt: float,
             seed: int, partial_verify: bool = False) -> dict[str, int]:
    rng = random.Random(seed)
    translator, sync = Translator(target_tok, draft_tok), DraftSync(draft_tok)
    full = text.encode("utf-8")
    target_script = _encode_bytes(target_tok, full)  # what the (greedy) target writes
    assert target_tok.decode_bytes(target_script) == full
    draft_context: list[int] = []
    committed = b""
    position = 0
    proposed_draft_ids: list[int] = []
    rounds = accepted_total = 0
    while position < len(target_script):
        # verification: accept the longest matching prefix of the proposal, then the target's own token
        if proposed_draft_ids:
            proposal_bytes = sync.strip_pending(draft_tok.decode_bytes(proposed_draft_ids))
        else:
            proposal_bytes = None
        target_ids: list[int] = []
        if proposal_bytes:
            proposal = translator.draft_to_target(proposal_bytes, draft_finished=rng.random() < 0.1)
            check_proposal(target_tok, proposal_bytes, proposal)
            target_ids = proposal.target_ids if partial_verify else proposal.target_ids[: proposal.n_stable]
        accepted = 0
        while (accepted < len(target_ids) and position + accepted < len(target_script)
               and target_ids[accepted] == target_script[position + accepted]):
            accepted += 1
        new_target_ids = target_script[position : position + accepted + 1]
        position += len(new_target_ids)
        accepted_total += accepted
        newly_committed = target_tok.decode_bytes(new_target_ids)
        previous_committed, committed = committed, committed + newly_committed
        assert committed == full[: len(committed)], "committed text was altered"

        uncovered = committed[len(draft_tok.decode_bytes(draft_context)) :]
        draft_context += proposed_draft_ids  # the drafter appended them while drafting
        realignment = sync.commit(newly_committed, proposed_draft_ids)
        check_minimal_realignment(draft_tok, uncovered, proposed_draft_ids, realignment)
        del draft_context[len(draft_context) - realignment.n_drop :]
        draft_context += realignment.append_draft_ids
        assert draft_tok.decode_bytes(draft_context) == committed[: len(committed) - len(sync.pending)]
        assert incomplete_tail_length(sync.pending) == len(sync.pending)
        assert previous_committed == committed[: len(previous_committed)]

        # the draft proposes its next k tokens of the true text, some corrupted
        context_bytes = draft_tok.decode_bytes(draft_context)
        upcoming = _encode_bytes(draft_tok, full[len(context_bytes) : len(context_bytes) + 8 * k])[:k]
        proposed_draft_ids = [rng.randrange(draft_tok.vocab_size) if rng.random() < corrupt else i for i in upcoming]
        rounds += 1
    assert committed == full
    return {"rounds": rounds, "accepted": accepted_total}


def check_proposal(target_tok: TokenizerAdapter, proposed: bytes, proposal: Translation) -> None:
    assert target_tok.decode_bytes(proposal.target_ids) == proposed[: proposal.n_bytes]
    assert 0 <= proposal.n_stable <= len(proposal.target_ids)
    assert not set(proposal.target_ids) & set(target_tok.special_ids)


def check_minimal_realignment(draft_tok: TokenizerAdapter, uncovered: bytes, proposed_draft_ids: list[int],
                              realignment: DraftRealignment) -> None:
    """Kept draft tokens spell a prefix of the uncovered committed bytes, and the first dropped one
    does not continue it: no smaller rollback was possible."""
    n_keep = len(proposed_draft_ids) - realignment.n_drop
    assert 0 <= n_keep <= len(proposed_draft_ids)
    kept = draft_tok.decode_bytes(proposed_draft_ids[:n_keep])
    assert uncovered.startswith(kept)
    if realignment.n_drop:
        next_bytes = draft_tok.token_bytes(proposed_draft_ids[n_keep])
        assert not next_bytes or not uncovered.startswith(kept + next_bytes)


@pytest.mark.parametrize("pair", DIRECTED_PAIRS, ids=_pair_id)
def test_rounds_keep_committed_text_and_draft_context_aligned(pair):
    target_tok, draft_tok = tokenizer(pair[0]), tokenizer(pair[1])
    text = _real_text()
    perfect = simulate(target_tok, draft_tok, text, k=6, corrupt=0.0, seed=1)
    noisy = simulate(target_tok, draft_tok, text, k=6, corrupt=0.2, seed=2, partial_verify=True)
    # a draft that proposes the true text gets most of it accepted; a noisy one gets less
    n_target_tokens = len(_encode_bytes(target_tok, text.encode()))
    assert perfect["accepted"] > 0.5 * n_target_tokens
    assert noisy["accepted"] < perfect["accepted"]


# -- translation details --------------------------------------------------------------------------
@pytest.mark.parametrize("pair", PAIRS, ids=_pair_id)
def test_utf8_split_edges(pair):
    target_tok, draft_tok = tokenizer(pair[0]), tokenizer(pair[1])
    translator = Translator(target_tok, draft_tok)
    emoji = "😀".encode()  # 4 bytes
    # the target already wrote the first byte: the rest arrives as continuation bytes
    proposal = translator.draft_to_target(emoji[1:] + b" ok")
    assert target_tok.decode_bytes(proposal.target_ids) == emoji[1:] + b" ok"
    assert proposal.target_ids[:3] == [target_tok.byte_token_id(b) for b in emoji[1:]]
    # an unfinished trailing character is left out
    proposal = translator.draft_to_target(b"ab " + emoji[:2])
    assert proposal.n_bytes == 3 and target_tok.decode_bytes(proposal.target_ids) == b"ab "
    assert translator.draft_to_target(emoji[:3]) == Translation([], 0, 0)
    assert translator.draft_to_target(b"") == Translation([], 0, 0)


@pytest.mark.parametrize("pair", PAIRS, ids=_pair_id)
def test_special_looking_text_is_plain_text(pair):
    target_tok, draft_tok = tokenizer(pair[0]), tokenizer(pair[1])
    text = b"<|im_end|><s></s><bos><|endoftext|><start_of_turn>"
    proposal = Translator(target_tok, draft_tok).draft_to_target(text, draft_finished=True)
    assert target_tok.decode_bytes(proposal.target_ids) == text
    assert proposal.n_stable == len(proposal.target_ids)


def test_unstable_tail_is_detected_and_finished_text_is_stable():
    target_tok, draft_tok = tokenizer("qwen2"), tokenizer("gemma3")
    translator = Translator(target_tok, draft_tok)
    # " retur" is a cut word: its last token must be counted out
    cut = translator.draft_to_target(b"x = retur")
    assert cut.n_stable < len(cut.target_ids)
    assert cut.target_ids[: cut.n_stable] == target_tok.encode_continuation("x = retur")[: cut.n_stable]
    # the same text when the draft has finished: everything stable
    finished = translator.draft_to_target(b"x = retur", draft_finished=True)
    assert finished.n_stable == len(finished.target_ids)
    # a trailing run of spaces may become " " + " next": unstable
    spaces = translator.draft_to_target(b"a   ")
    assert spaces.n_stable < len(spaces.target_ids)
    # a token that no continuation can change stays: "(" after "f" then "x" -> "f(x" ... the part
    # before the last token of a long line is stable
    line = translator.draft_to_target(b"def f(x):\n    return x + 1\n")
    assert line.n_stable >= len(line.target_ids) - 1


# -- draft sync -------------------------------------------------------------------------------------
def test_sync_holds_back_an_unfinished_character_and_finishes_it():
    draft_tok = tokenizer("gemma3")
    sync = DraftSync(draft_tok)
    char = "中".encode()
    first = sync.commit(b"hi " + char[:2], [])
    assert first.n_drop == 0 and draft_tok.decode_bytes(first.append_draft_ids) == b"hi "
    assert sync.pending == char[:2]
    # the draft must first write the pending bytes; only what follows is a proposal
    assert sync.strip_pending(char + b" there") == char[2:] + b" there"
    assert sync.strip_pending(char[:1]) == b""
    assert sync.strip_pending(b"x") is None
    proposed = draft_tok.encode_continuation("中 there")
    second = sync.commit(char[2:] + b" the", proposed)
    kept = proposed[: len(proposed) - second.n_drop]
    assert draft_tok.decode_bytes(kept + second.append_draft_ids) == char + b" the"
    assert sync.pending == b""
    sync.reset()
    assert sync.pending == b""


def test_sync_holds_back_the_last_token_for_healing():
    """Token healing: the draft's last token of the committed text becomes `pending`, so the draft
    re-writes that tail its own way; nothing is held back while something is already pending."""
    draft_tok = tokenizer("smollm2")
    sync = DraftSync(draft_tok)
    text = b"def add(a, b):\n    return"
    realignment = sync.commit(text, [], hold_back_last_token=True)
    appended = draft_tok.decode_bytes(realignment.append_draft_ids)
    assert sync.pending and appended + sync.pending == text
    assert sync.pending == draft_tok.decode_bytes(draft_tok.encode_continuation(text.decode())[-1:])
    # the held-back token is named (the drafter keeps it among the request's own tokens)
    assert realignment.append_draft_ids + [realignment.held_back_id] == draft_tok.encode_continuation(text.decode())
    # the draft's next tokens must start with the held-back bytes; what follows is its proposal
    assert sync.strip_pending(sync.pending + b" a + b") == b" a + b"
    char = "中".encode()
    unfinished = sync.commit(b" " + char[:2], [], hold_back_last_token=True)
    assert sync.pending == char[:2]  # an unfinished character pends; no token is held back with it
    assert unfinished.held_back_id is None
    assert DraftSync(draft_tok).commit(text, []).append_draft_ids == draft_tok.encode_continuation(text.decode())


def test_sync_keeps_the_longest_matching_prefix():
    draft_tok = tokenizer("smollm2")
    sync = DraftSync(draft_tok)
    sync.commit(b"def", [])
    proposed = draft_tok.encode_continuation(" add(a, b):\n    return a - b")
    committed = b" add(a, b):\n    return a + b"
    realignment = sync.commit(committed, proposed)
    kept = proposed[: len(proposed) - realignment.n_drop]
    assert draft_tok.decode_bytes(kept) == b" add(a, b):\n    return a"
    assert draft_tok.decode_bytes(realignment.append_draft_ids) == b" + b"
    # a special token (no text) in the proposal is never kept
    eos = next(iter(draft_tok.eos_ids))
    realignment = sync.commit(b"!", draft_tok.encode_continuation("!") + [eos])
    assert realignment.n_drop == 1 and realignment.append_draft_ids == []


# -- hypothesis: random text cut at random byte offsets ---------------------------------------------
TEXT_ALPHABET = st.sampled_from(list("ab xyz_().:\t\n  09") + ["  ", "中", "文", "é", "e\u0301", "😀", "👍🏽", "<|im_end|>", "<s>", "\u00a0"])
random_text = st.lists(TEXT_ALPHABET, min_size=1, max_size=40).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=random_text, data=st.data(), pair=st.sampled_from(DIRECTED_PAIRS))
def test_random_cut_translation_concatenates_back(text, data, pair):
    target_tok, draft_tok = tokenizer(pair[0]), tokenizer(pair[1])
    full = text.encode("utf-8")
    cut = data.draw(st.integers(0, len(full)), label="committed bytes")
    end = data.draw(st.integers(cut, len(full)), label="end of proposal")
    committed_ids = _encode_bytes(target_tok, full[:cut])
    proposed = full[cut:end]
    proposal = Translator(target_tok, draft_tok).draft_to_target(proposed, draft_finished=data.draw(st.booleans()))
    check_proposal(target_tok, proposed, proposal)
    # the committed text is untouched and the pieces concatenate back to the text
    assert target_tok.decode_bytes(committed_ids + proposal.target_ids) == full[: cut + proposal.n_bytes]
    # only an unfinished trailing character is left out
    assert proposal.n_bytes == len(proposed) - incomplete_tail_length(proposed) or proposal.target_ids == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=random_text, data=st.data(), pair=st.sampled_from(DIRECTED_PAIRS))
def test_random_commits_keep_draft_context_equal_to_committed_text(text, data, pair):
    target_tok, draft_tok = tokenizer(pair[0]), tokenizer(pair[1])
    full = text.encode("utf-8")
    sync = DraftSync(draft_tok)
    draft_context: list[int] = []
    committed = 0
    while committed < len(full):
        step = data.draw(st.integers(1, len(full) - committed), label="committed this round")
        context_bytes = len(draft_tok.decode_bytes(draft_context))
        truth = _encode_bytes(draft_tok, full[context_bytes:])
        proposed = data.draw(st.lists(st.sampled_from(truth) | st.integers(0, draft_tok.vocab_size - 1), max_size=6)
                             if truth else st.just([]), label="proposed draft ids")
        uncovered = full[context_bytes : committed + step]
        draft_context += proposed
        realignment = sync.commit(full[committed : committed + step], proposed)
        check_minimal_realignment(draft_tok, uncovered, proposed, realignment)
        del draft_context[len(draft_context) - realignment.n_drop :]
        draft_context += realignment.append_draft_ids
        committed += step
        assert draft_tok.decode_bytes(draft_context) == full[: committed - len(sync.pending)]
    assert sync.pending == b""


# -- vocabulary map ----------------------------------------------------------------------------------
def test_vocab_map_identity_for_the_same_tokenizer_also_padded():
    tok = tokenizer("qwen2")
    padded = load_fresh("qwen2")
    padded.set_model_vocab_size(151_936)  # Qwen2.5's LM head rows
    mapping = VocabMap(tok, padded)
    assert mapping.identity
    assert mapping.draft_to_target.shape == (151_936,) and mapping.target_to_draft.shape == (tok.model_vocab_size,)
    plain = [i for i in range(tok.vocab_size) if i not in tok.special_ids and tok.token_bytes(i)]
    assert torch.equal(mapping.draft_to_target[plain], torch.tensor(plain))
    assert (mapping.draft_to_target[tok.vocab_size :] == -1).all()
    assert (mapping.draft_to_target[sorted(tok.special_ids)] == -1).all()
    assert mapping.size == len(plain)


def load_fresh(name: str) -> TokenizerAdapter:
    from anypair.zoo import load_tokenizer

    return load_tokenizer(str(_tokenizer_location(name)))


@pytest.mark.parametrize("pair", PAIRS, ids=_pair_id)
def test_vocab_map_pairs_tokens_with_identical_bytes(pair):
    target_tok, draft_tok = tokenizer(pair[0]), tokenizer(pair[1])
    mapping = vocab_map(*pair)
    assert not mapping.identity
    assert mapping.draft_to_target.shape == (draft_tok.model_vocab_size,)
    assert mapping.target_to_draft.shape == (target_tok.model_vocab_size,)
    target_bytes = {target_tok.token_bytes(i) for i in range(target_tok.vocab_size) if i not in target_tok.special_ids} - {b""}
    draft_with_twin = [i for i in range(draft_tok.vocab_size)
                       if i not in draft_tok.special_ids and draft_tok.token_bytes(i) in target_bytes]
    assert mapping.size == len(draft_with_twin)
    shared_draft = mapping.shared_draft_ids.tolist()
    assert shared_draft == draft_with_twin
    for draft_id, target_id in zip(shared_draft[::997], mapping.shared_target_ids[::997].tolist()):
        assert draft_tok.token_bytes(draft_id) == target_tok.token_bytes(target_id)
    for special in draft_tok.special_ids:
        if special < mapping.draft_to_target.numel():
            assert int(mapping.draft_to_target[special]) == -1
    # every target row that maps points back at a draft token with the same bytes
    mapped_targets = torch.nonzero(mapping.target_to_draft >= 0).flatten()[::991].tolist()
    for target_id in mapped_targets:
        draft_id = int(mapping.target_to_draft[target_id])
        assert draft_tok.token_bytes(draft_id) == target_tok.token_bytes(target_id)


def test_vocab_map_known_shared_tokens_and_coverage():
    qwen, llama = tokenizer("qwen2"), tokenizer("llama-spm")
    mapping = vocab_map("phi-3", "qwen2")  # target Phi-3 (Llama-2 pieces), draft Qwen2
    phi = tokenizer("phi-3")
    # "\n" is a byte-fallback piece <0x0A> in Llama-2/Phi-3 and the byte-level char "Ċ" in Qwen2
    (qwen_newline,) = qwen.encode_continuation("\n")
    assert int(mapping.draft_to_target[qwen_newline]) == phi.byte_token_id(ord("\n"))
    (qwen_the,) = qwen.encode_continuation(" the")
    (phi_the,) = phi.encode_continuation(" the")
    assert int(mapping.draft_to_target[qwen_the]) == phi_the
    assert int(mapping.target_to_draft[phi_the]) == qwen_the
    # coverage: common English is covered, and the share is of the given tokens
    ids = phi.encode_continuation("the cat sat on the mat")
    assert mapping.target_coverage(ids) == 1.0
    assert mapping.target_coverage([]) == 0.0
    assert llama.vocab_size == 32_000 and phi.vocab_size == 32_064


# -- text a tokenizer has no token for (item 6 of issue 14) ------------------------------------------
# SmolLM2 has no token for bytes 0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2, 0xf5-0xff
def test_translation_stops_before_a_character_the_target_cannot_write():
    translator = Translator(tokenizer("smollm2"), tokenizer("o200k"))
    proposal = translator.draft_to_target(b"x = 1\x1d y")
    assert tokenizer("smollm2").decode_bytes(proposal.target_ids) == b"x = 1"
    assert proposal.n_bytes == 5
    # past it, translation is whole again
    assert tokenizer("smollm2").decode_bytes(translator.draft_to_target(b" y = 2").target_ids) == b" y = 2"


def test_sync_leaves_out_what_the_draft_cannot_write_and_goes_on():
    draft_tok = tokenizer("smollm2")
    sync = DraftSync(draft_tok)
    first = sync.commit("x = 1\x1d y\x04 = é\n".encode() + b"\xff" + b"z", [])
    assert first.n_drop == 0 and sync.pending == b""
    assert draft_tok.decode_bytes(first.append_draft_ids) == "x = 1 y = é\nz".encode()
    # the next round syncs as usual: a right proposal is kept whole
    proposed = draft_tok.encode_continuation(" = 3\n")
    second = sync.commit(b" = 3\n", proposed)
    assert second.n_drop == 0 and second.append_draft_ids == []
