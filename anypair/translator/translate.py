"""One round's translation, both ways: what a round needs between the draft's and the target's tokens.

- `Translator` (draft text -> target ids): the bytes a draft proposed, as target ids, the unstable tail marked.
- `DraftSync` (target text -> draft ids): the draft's context kept in step with the committed text.
- `WritableText`: the characters a tokenizer cannot write, cut out so both directions go on around them.

## Draft text -> target tokens

The proposal continues the committed text right after a target-token boundary, so it is encoded
on its own with `encode_continuation` (cost bounded by the proposal, never by the text so far).

Which translated tokens are *stable*: the last few target tokens of a chunk may merge with text
that follows (" foo" + "bar" -> " foobar", "  " + "x" -> " " + " x", "\\n" + "\\n" -> "\\n\\n").
Rule used here: encode the chunk once alone and once followed by each of three probe
continuations -- a letter (the word goes on), a space (a run of spaces goes on / the space is
taken by the next word) and a newline (punctuation and newline runs merge with it); a token is
stable when every one of those encodings keeps it, i.e. `n_stable` = the shortest common prefix.
Measured with `evaluation/bench_translator.py` on HumanEval text (600 proposals of 6 draft tokens
per pair): these three probes catch nearly all tokens that real text then changed (e.g. 110 of 116
for Qwen2 <- Gemma-3) while dropping 30-55% fewer truly stable tokens than "always drop the last
token"; more probes (digits, punctuation, capitals, non-ASCII letters) caught almost nothing more
and dropped more. Note for the caller: under greedy verification a wrong tail token costs nothing
(the target rejects it and writes its own token at that place), so proposing the whole list is
never worse than proposing the stable part; n_stable matters to policies that must be exact.

## Target text -> draft tokens

Invariant after every `commit`: the bytes of the draft's generated context == the committed
generated text minus `pending`, where `pending` is the end of the committed text that the draft
has not been given as tokens: an unfinished UTF-8 character it cannot write yet, or (token healing,
see `drafters.model`) the bytes of its last token, held back so the draft re-writes them its own
way; and minus any character or invalid byte the draft has no token for at all (left out: the draft
reads the text around it and goes on drafting; only what the draft proposes is ever verified, so its
context may differ this way). Every call works on the bytes of one round only (the draft's proposal
and the newly committed bytes), never on the whole text.

## Text a tokenizer cannot write

SmolLM2, for one, has no token for bytes 0x04, 0x1d, 0xc0, ...
Such characters are cut out so the rest of the text is still translated (draft -> target) and
synced (target -> draft): drafting goes on around them instead of stopping for the whole request.
Used only after a whole-text encode failed, so the per-character probes cost nothing normally.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from anypair.errors import TokenizerError
from anypair.tokenization.base import TokenizerAdapter
from anypair.translator.utf8 import (
    incomplete_tail_length,
    is_continuation_byte,
    leading_continuation_count,
    split_valid_runs,
    valid_prefix_length,
)


class WritableText:
    """Which characters one tokenizer can write exactly, and its ids for the text around the rest."""

    def __init__(self, tok: TokenizerAdapter) -> None:
        self.tok = tok
        self._writable_chars: dict[str, bool] = {}

    def can_write(self, char: str) -> bool:
        known = self._writable_chars.get(char)
        if known is None:
            try:
                known = self.tok.decode_bytes(self.tok.encode_continuation(char)) == char.encode("utf-8")
            except TokenizerError:
                known = False
            self._writable_chars[char] = known
        return known

    def prefix_length(self, text: str) -> int:
        """Characters before the first one the tokenizer cannot write (len(text) if none)."""
        return next((i for i, char in enumerate(text) if not self.can_write(char)), len(text))

    def encode_prefix(self, text: str) -> tuple[list[int], str]:
        """(ids, the prefix they spell) for the longest prefix of `text` that encodes exactly."""
        end = self.prefix_length(text)
        while end > 0:
            ids = self._exact_ids(text[:end])
            if ids is not None:
                return ids, text[:end]
            end -= 1  # a normalizer that rewrites across characters ("e" + combining accent): shorter
        return [], ""

    def encode_around(self, text: str) -> list[int]:
        """Ids for `text` with the characters the tokenizer cannot write left out."""
        ids: list[int] = []
        start = 0
        for i, char in enumerate(text):
            if not self.can_write(char):
                ids += self._segment_ids(text[start:i])
                start = i + 1
        return ids + self._segment_ids(text[start:])

    def _segment_ids(self, segment: str) -> list[int]:
        ids = self._exact_ids(segment)
        if ids is None:  # every character is writable alone, not together: one at a time
            ids = [i for char in segment for i in self._exact_ids(char) or []]
        return ids

    def _exact_ids(self, text: str) -> list[int] | None:
        if not text:
            return []
        try:
            ids = self.tok.encode_continuation(text)
        except TokenizerError:
            return None
        return ids if self.tok.decode_bytes(ids) == text.encode("utf-8") else None


#: what may follow a proposal (see the module docstring for why these three)
STABILITY_PROBES: tuple[str, ...] = ("a", " ", "\n")


@dataclass(frozen=True)
class Translation:
    """Target tokens for draft-proposed bytes, starting exactly at the committed boundary (what
    a drafter then proposes to the loop is a `types.Proposal`: these ids, cut to the stable part)."""

    target_ids: list[int]
    #: the first n_stable ids won't change when more text follows; the rest is the unstable tail
    n_stable: int
    #: how many proposed bytes target_ids cover (an unfinished trailing UTF-8 character is left out)
    n_bytes: int


EMPTY_TRANSLATION = Translation(target_ids=[], n_stable=0, n_bytes=0)


def common_prefix_length(first: list[int], second: list[int]) -> int:
    length = 0
    for a, b in zip(first, second):
        if a != b:
            break
        length += 1
    return length


class Translator:
    """Translates draft-proposed bytes into target ids (see the module docstring for the rules)."""

    def __init__(self, target_tok: TokenizerAdapter, draft_tok: TokenizerAdapter,
                 stability_probes: tuple[str, ...] = STABILITY_PROBES):
        self.target_tok = target_tok
        self.draft_tok = draft_tok
        self.stability_probes = stability_probes
        self.writable = WritableText(target_tok)

    def draft_to_target(self, proposed: bytes, *, draft_finished: bool = False) -> Translation:
        """Translate NEWLY proposed bytes that continue right after the committed text.

        Leading UTF-8 continuation bytes (a character the target already started) become the
        target's single-byte tokens; without those the proposal is empty. Translation stops before
        an unfinished trailing character, before the first invalid byte, or before the first
        character the target has no token for (the target cannot write it either). Unless
        `draft_finished`, tokens a continuation could still change are counted out of n_stable.
        """
        lead_ids = self._continuation_byte_ids(proposed)
        if lead_ids is None:
            return EMPTY_TRANSLATION
        body = proposed[len(lead_ids):]
        body_end = valid_prefix_length(body)
        if body_end == 0:
            return Translation(target_ids=lead_ids, n_stable=len(lead_ids), n_bytes=len(lead_ids))
        text = body[:body_end].decode("utf-8")
        try:
            body_ids = self.target_tok.encode_continuation(text)
        except TokenizerError:  # a character the target has no token for: translate up to it
            body_ids, text = self.writable.encode_prefix(text)
            body_end = len(text.encode("utf-8"))
        if self.target_tok.decode_bytes(body_ids) != body[:body_end]:
            body_ids, body_end = self._round_tripping_prefix(body_ids, body[:body_end])
        if not body_ids:
            return Translation(target_ids=lead_ids, n_stable=len(lead_ids), n_bytes=len(lead_ids))
        n_body_stable = len(body_ids) if draft_finished else self.stable_prefix_length(text, body_ids)
        return Translation(
            target_ids=lead_ids + body_ids,
            n_stable=len(lead_ids) + n_body_stable,
            n_bytes=len(lead_ids) + body_end,
        )

    def _round_tripping_prefix(self, body_ids: list[int], body: bytes) -> tuple[list[int], int]:
        """The longest prefix of `body_ids` whose bytes start `body`: a tokenizer that breaks its
        round-trip contract (e.g. Unicode normalization) must not make us propose other text."""
        offset = 0
        for count, token_id in enumerate(body_ids):
            data = self.target_tok.token_bytes(token_id)
            if not body.startswith(data, offset):
                return body_ids[:count], offset
            offset += len(data)
        return body_ids, offset

    def _continuation_byte_ids(self, proposed: bytes) -> list[int] | None:
        ids = []
        for byte in proposed[: leading_continuation_count(proposed)]:
            token_id = self.target_tok.byte_token_id(byte)
            if token_id is None:
                return None
            ids.append(token_id)
        return ids

    def stable_prefix_length(self, text: str, target_ids: list[int]) -> int:
        """How many of `target_ids` (the encoding of `text`) every probe continuation keeps."""
        n_stable = len(target_ids)
        for probe in self.stability_probes:
            probed_ids = self.target_tok.encode_continuation(text + probe)
            n_stable = min(n_stable, common_prefix_length(target_ids, probed_ids))
            if n_stable == 0:
                break
        return n_stable


@dataclass(frozen=True)
class DraftRealignment:
    """How the drafter fixes its context after a verification."""

    #: draft tokens to drop from the END of the draft's generated context (crop its KV cache by this many)
    n_drop: int
    #: draft tokens to append after dropping (fed to the draft at its next step)
    append_draft_ids: list[int]
    #: the last of them, held back for the draft to re-write (token healing; its bytes are `pending`)
    held_back_id: Optional[int] = None


class DraftSync:
    """Keeps the draft's token view of the GENERATED text in step with the committed (verified) text."""

    def __init__(self, draft_tok: TokenizerAdapter):
        self.draft_tok = draft_tok
        self.pending: bytes = b""
        self.writable = WritableText(draft_tok)

    def reset(self) -> None:
        """New request: nothing generated yet."""
        self.pending = b""

    def strip_pending(self, draft_text: bytes) -> bytes | None:
        """The part of the draft's newly generated bytes after `pending`; None when they disagree.

        A draft that wrote fewer bytes than `pending` but agrees with it so far proposes nothing (b"").
        """
        if draft_text.startswith(self.pending):
            return draft_text[len(self.pending):]
        if self.pending.startswith(draft_text):
            return b""
        return None

    def commit(self, committed_bytes: bytes, proposed_draft_ids: Sequence[int], *,
               hold_back_last_token: bool = False) -> DraftRealignment:
        """Realign after a verification (see the class docstring; smallest rollback).

        `committed_bytes` are the newly committed bytes; `proposed_draft_ids` the draft ids the
        drafter appended to its context this round (empty on the first call of a request).
        `hold_back_last_token`: when nothing is pending, keep the last draft token to append out
        of the context and make its bytes `pending` instead (token healing).
        """
        uncovered = self.pending + committed_bytes
        n_keep, kept_bytes = self._matching_prefix(uncovered, proposed_draft_ids)
        remainder = uncovered[kept_bytes:]
        if remainder and is_continuation_byte(remainder[0]) and not self._has_byte_tokens(remainder):
            n_keep, kept_bytes = self._back_off_to_char_start(uncovered, proposed_draft_ids, n_keep, kept_bytes)
            remainder = uncovered[kept_bytes:]
        tail = incomplete_tail_length(remainder)
        to_encode = remainder[: len(remainder) - tail]
        self.pending = remainder[len(remainder) - tail:]
        append_draft_ids = self.encode_bytes(to_encode)
        held_back_id = None
        if hold_back_last_token and append_draft_ids and not self.pending:
            held_back = self.draft_tok.token_bytes(append_draft_ids[-1])
            if held_back:  # a special token carries no text to re-write
                held_back_id = append_draft_ids.pop()
                self.pending = held_back
        return DraftRealignment(len(proposed_draft_ids) - n_keep, append_draft_ids, held_back_id)

    def _matching_prefix(self, uncovered: bytes, proposed_draft_ids: Sequence[int]) -> tuple[int, int]:
        """(tokens, bytes) of the longest prefix of the proposal that `uncovered` starts with."""
        n_keep = offset = 0
        for draft_id in proposed_draft_ids:
            data = self.draft_tok.token_bytes(draft_id)
            if not data or not uncovered.startswith(data, offset):
                break  # a special token (b"") carries no text: never kept as text
            n_keep += 1
            offset += len(data)
        return n_keep, offset

    def _back_off_to_char_start(self, uncovered: bytes, proposed_draft_ids: Sequence[int],
                                n_keep: int, kept_bytes: int) -> tuple[int, int]:
        """Drop kept tokens until the rest starts on a character boundary (for a draft that has no
        single-byte token to finish a character that its own tokens began)."""
        while n_keep and kept_bytes < len(uncovered) and is_continuation_byte(uncovered[kept_bytes]):
            n_keep -= 1
            kept_bytes -= len(self.draft_tok.token_bytes(proposed_draft_ids[n_keep]))
        if kept_bytes < len(uncovered) and is_continuation_byte(uncovered[kept_bytes]):
            raise TokenizerError(
                f"draft tokenizer {self.draft_tok.name!r} has no single-byte tokens, so it cannot continue a "
                "UTF-8 character its context already began; use a draft with byte fallback or byte-level BPE"
            )
        return n_keep, kept_bytes

    def _has_byte_tokens(self, data: bytes) -> bool:
        return all(self.draft_tok.byte_token_id(byte) is not None
                   for byte in data[: leading_continuation_count(data)])

    def encode_bytes(self, data: bytes) -> list[int]:
        """Draft ids for `data`: valid UTF-8 runs through `encode_continuation`, any other byte as
        the draft's single-byte token; what the draft has no token for is left out (see the
        module docstring)."""
        draft_ids: list[int] = []
        for run in split_valid_runs(data):
            if run.text is not None:
                try:
                    run_ids = self.draft_tok.encode_continuation(run.text)
                except TokenizerError:
                    run_ids = None
                if run_ids is None or self.draft_tok.decode_bytes(run_ids) != run.data:
                    run_ids = self.writable.encode_around(run.text)
                draft_ids.extend(run_ids)
                continue
            byte_ids = (self.draft_tok.byte_token_id(byte) for byte in run.data)
            draft_ids.extend(byte_id for byte_id in byte_ids if byte_id is not None)
        return draft_ids
