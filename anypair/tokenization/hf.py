"""Adapter over HF fast tokenizers (`tokenizers.Tokenizer`, transformers' PreTrainedTokenizerFast).

Token bytes come from the vocabulary pieces (GPT-2 byte alphabet for byte-level BPE, `▁` and
`<0xNN>` for SentencePiece-style vocabularies). Continuations are encoded by a copy of the
tokenizer (`own_copy_of`: its model shared) whose pipeline cannot add anything: no dummy-prefix
space, no BOS/EOS template, no Unicode normalization (which would change the bytes), special tokens
matched as plain text.
"""
from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from anypair.errors import TokenizerError
from anypair.tokenization.base import TableTokenizerAdapter
from anypair.tokenization.pieces import (
    byte_fallback_value,
    byte_level_piece_bytes,
    sentencepiece_piece_bytes,
)

# Normalizers that rewrite characters; a continuation must keep its exact bytes.
_LOSSY_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Prepend"}
_BOS_NAMES = ("<|begin_of_text|>", "<bos>", "<s>", "<|startoftext|>")
_EOS_NAMES = ("<|end_of_text|>", "<eos>", "</s>", "<|endoftext|>")
# End-of-turn markers that end generation for chat models alongside the plain EOS.
_END_OF_TURN_NAMES = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|end|>")
_PAD_NAMES = ("<pad>", "<|finetune_right_pad_id|>", "[PAD]")
_UNK_NAMES = ("<unk>", "[UNK]")


@dataclass(frozen=True)
class SpecialRoles:
    """Which ids play the BOS/EOS/UNK/PAD roles."""

    bos_id: int | None
    eos_ids: frozenset[int]
    unk_id: int | None
    pad_id: int | None


@dataclass(frozen=True)
class VocabularyTable:
    """The id -> bytes table of a tokenizer with its special and byte-fallback ids."""

    token_bytes: list[bytes]
    special_ids: frozenset[int]
    byte_fallback_ids: frozenset[int]


class HFTokenizerAdapter(TableTokenizerAdapter):
    """TokenizerAdapter over a `tokenizers.Tokenizer` (optionally with its transformers wrapper).

    The adapter owns `tokenizer` and keeps it in continuation mode (the hot path, called every
    decoding round); `encode` switches the model's own pipeline back in for one call. Swapping
    stages is cheap, whereas a second `Tokenizer` of a 262k vocabulary costs seconds.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        name: str,
        roles: SpecialRoles | None = None,
        hf_tokenizer: Any = None,
    ) -> None:
        table = vocabulary_table(tokenizer)
        roles = roles or guess_special_roles(special_vocabulary(tokenizer))
        super().__init__(
            name=name,
            token_bytes_table=table.token_bytes,
            special_ids=set(table.special_ids),
            byte_fallback_ids=set(table.byte_fallback_ids),
            bos_id=roles.bos_id,
            eos_ids=set(roles.eos_ids),
            unk_id=roles.unk_id,
            pad_id=roles.pad_id,
        )
        self.tokenizer = tokenizer
        self.hf_tokenizer = hf_tokenizer
        self._prompt_pipeline = _Pipeline.of(tokenizer)
        self._continuation_pipeline = continuation_pipeline(self._prompt_pipeline)
        self._continuation_pipeline.install(tokenizer)
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, name: str | None = None) -> "HFTokenizerAdapter":
        """Load a tokenizer.json (roles from a tokenizer_config.json beside it when present)."""
        path = Path(path)
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for bad JSON
            raise TokenizerError(
                f"cannot read {path} as a HF tokenizer.json ({exc}); check that the file is "
                "complete (re-fetch it with `anypair fetch`)"
            ) from exc
        roles = roles_from_config(path.parent / "tokenizer_config.json", special_vocabulary(tokenizer))
        return cls(tokenizer, name=name or path.parent.name or path.name, roles=roles)

    @classmethod
    def from_hf(cls, hf_tokenizer: Any, model_vocab_size: int | None = None) -> "HFTokenizerAdapter":
        """Wrap a transformers fast tokenizer that came with a loaded model.

        `model_vocab_size` is the model's `config.vocab_size` (LM-head rows), which may exceed
        the tokenizer's size; the extra rows become padding ids. The caller's tokenizer is never
        modified: the adapter works on its own copy of the backend, which shares only its model
        (vocabulary and merges, read-only to both; `own_copy_of`).
        """
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if not isinstance(backend, Tokenizer):
            raise TokenizerError(
                f"{type(hf_tokenizer).__name__} is not a fast tokenizer; load it with "
                "AutoTokenizer.from_pretrained(..., use_fast=True)"
            )
        own_copy = own_copy_of(backend)
        guessed = guess_special_roles(special_vocabulary(own_copy))
        eos_ids = set(guessed.eos_ids)
        if hf_tokenizer.eos_token_id is not None:
            eos_ids.add(hf_tokenizer.eos_token_id)
        roles = SpecialRoles(
            bos_id=hf_tokenizer.bos_token_id,
            eos_ids=frozenset(eos_ids),
            unk_id=hf_tokenizer.unk_token_id,
            pad_id=hf_tokenizer.pad_token_id,
        )
        name = getattr(hf_tokenizer, "name_or_path", "") or type(hf_tokenizer).__name__
        adapter = cls(own_copy, name=str(name), roles=roles, hf_tokenizer=hf_tokenizer)
        if model_vocab_size is not None:
            adapter.set_model_vocab_size(model_vocab_size)
        return adapter

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self._require_unicode(text)
        if self.hf_tokenizer is not None:
            return list(self.hf_tokenizer.encode(text, add_special_tokens=add_special_tokens))
        with self._lock:
            self._prompt_pipeline.install(self.tokenizer)
            try:
                return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
            finally:
                self._continuation_pipeline.install(self.tokenizer)

    def encode_continuation(self, text: str) -> list[int]:
        self._require_unicode(text)
        with self._lock:
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return self._check_round_trip(text, ids)


def own_copy_of(tokenizer: Tokenizer) -> Tokenizer:
    """A `Tokenizer` the adapter may swap stages on without touching `tokenizer`: fresh copies of its
    stages, settings and added tokens around the same model object, which nothing here changes. A
    256,000-token BPE model (580,604 merges at gemma-2) costs 2-4 s to build again from JSON, sharing it a
    few milliseconds. Should the copy's added tokens come out other than the original's (ids, flags), it
    is built again through JSON, the slow way, as before."""
    shell = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": _component_spec(tokenizer.normalizer), "pre_tokenizer": _component_spec(tokenizer.pre_tokenizer),
        "post_processor": _component_spec(tokenizer.post_processor), "decoder": _component_spec(tokenizer.decoder),
        "model": {"type": "BPE", "vocab": {}, "merges": []}}))
    shell.model = tokenizer.model  # shared, as the model is never changed by either
    added = tokenizer.get_added_tokens_decoder()
    ordered = [added[token_id] for token_id in sorted(added)]
    # in id order, after the normalizer (added tokens are stored normalized); a run of special or plain tokens
    # in one call, as each call rebuilds the matcher (gemma-3: 6,000 one at a time, 28 s)
    for special, run in itertools.groupby(ordered, key=lambda token: token.special):
        (shell.add_special_tokens if special else shell.add_tokens)(list(run))
    if tokenizer.truncation is not None:
        shell.enable_truncation(**tokenizer.truncation)
    if tokenizer.padding is not None:
        shell.enable_padding(**tokenizer.padding)
    shell.encode_special_tokens = tokenizer.encode_special_tokens
    if _added_tokens(shell) != _added_tokens(tokenizer):
        return Tokenizer.from_str(tokenizer.to_str())
    return shell


def _added_tokens(tokenizer: Tokenizer) -> dict[int, tuple]:
    return {token_id: (token.content, token.special, token.single_word, token.lstrip, token.rstrip, token.normalized)
            for token_id, token in tokenizer.get_added_tokens_decoder().items()}


@dataclass(frozen=True)
class _Pipeline:
    """The swappable stages of a `tokenizers.Tokenizer` around its (expensive) model."""

    normalizer: Any
    pre_tokenizer: Any
    post_processor: Any
    encode_special_tokens: bool

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> "_Pipeline":
        return cls(
            tokenizer.normalizer,
            tokenizer.pre_tokenizer,
            tokenizer.post_processor,
            tokenizer.encode_special_tokens,
        )

    def install(self, tokenizer: Tokenizer) -> None:
        tokenizer.normalizer = self.normalizer
        tokenizer.pre_tokenizer = self.pre_tokenizer
        tokenizer.post_processor = self.post_processor
        tokenizer.encode_special_tokens = self.encode_special_tokens


def continuation_pipeline(prompt: _Pipeline) -> _Pipeline:
    """Stages that encode text exactly as given, mid-stream: no dummy prefix, no BOS/EOS
    template, no Unicode normalization, special tokens matched as plain text."""
    normalizer = _without_lossy_normalizers(_component_spec(prompt.normalizer))
    pre_tokenizer = _without_prefix_space(_component_spec(prompt.pre_tokenizer))
    # A throwaway tokenizer with an empty model is the public way to turn JSON specs back
    # into components.
    carrier = Tokenizer.from_str(
        json.dumps(
            {
                "version": "1.0",
                "truncation": None,
                "padding": None,
                "added_tokens": [],
                "normalizer": normalizer,
                "pre_tokenizer": pre_tokenizer,
                "post_processor": None,
                "decoder": None,
                "model": {"type": "BPE", "vocab": {}, "merges": []},
            }
        )
    )
    return _Pipeline(carrier.normalizer, carrier.pre_tokenizer, None, True)


def _component_spec(component: Any) -> dict | None:
    return None if component is None else json.loads(component.__getstate__())


def special_vocabulary(tokenizer: Tokenizer) -> dict[str, int]:
    """Content -> id of the added tokens flagged special."""
    return {
        added.content: token_id
        for token_id, added in tokenizer.get_added_tokens_decoder().items()
        if added.special
    }


def vocabulary_table(tokenizer: Tokenizer) -> VocabularyTable:
    """Exact bytes of every id; specials get b""."""
    model = tokenizer.model
    if type(model).__name__ == "WordPiece":
        raise TokenizerError(
            "WordPiece tokenizers (BERT) drop spaces and case, so text cannot round-trip through "
            "them; anypair needs a BPE, SentencePiece or tiktoken vocabulary"
        )
    stages = json.dumps([_component_spec(tokenizer.pre_tokenizer), _component_spec(tokenizer.decoder)])
    byte_level = "ByteLevel" in stages
    byte_fallback = bool(getattr(model, "byte_fallback", False)) or "ByteFallback" in stages
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    added_tokens = tokenizer.get_added_tokens_decoder()
    size = max([tokenizer.get_vocab_size(with_added_tokens=True), *(i + 1 for i in added_tokens)])
    table = [b""] * size
    byte_fallback_ids: set[int] = set()
    if byte_level:
        for piece, token_id in vocab.items():
            table[token_id] = byte_level_piece_bytes(piece)
    else:  # the byte-fallback test only for pieces that can be one (a prefix test; 256,000 pieces at gemma)
        for piece, token_id in vocab.items():
            value = byte_fallback_value(piece) if byte_fallback and piece.startswith("<0x") else None
            if value is None:
                table[token_id] = sentencepiece_piece_bytes(piece, byte_fallback=False)
            else:
                table[token_id] = bytes([value])
                byte_fallback_ids.add(token_id)
    special_ids: set[int] = set()
    for token_id, added in added_tokens.items():
        if added.special:
            table[token_id] = b""
            special_ids.add(token_id)
        elif vocab.get(added.content) != token_id:
            table[token_id] = added.content.encode("utf-8")
    unk_piece = getattr(model, "unk_token", None)
    if unk_piece is not None and unk_piece in vocab:
        table[vocab[unk_piece]] = b""
        special_ids.add(vocab[unk_piece])
    # Ids that no piece names (gaps in the numbering) can never be produced from text.
    named = set(vocab.values()) | set(added_tokens)
    special_ids.update(set(range(size)).difference(named))
    return VocabularyTable(table, frozenset(special_ids), frozenset(byte_fallback_ids))


def _without_lossy_normalizers(normalizer: dict | None) -> dict | None:
    if normalizer is None or normalizer["type"] in _LOSSY_NORMALIZERS:
        return None
    if normalizer["type"] == "Sequence":
        kept = [_without_lossy_normalizers(n) for n in normalizer["normalizers"]]
        kept = [n for n in kept if n is not None]
        return {"type": "Sequence", "normalizers": kept} if kept else None
    return normalizer


def _without_prefix_space(pre_tokenizer: dict | None) -> dict | None:
    if pre_tokenizer is None:
        return None
    kind = pre_tokenizer["type"]
    if kind == "Sequence":
        return {**pre_tokenizer, "pretokenizers": [_without_prefix_space(p) for p in pre_tokenizer["pretokenizers"]]}
    if kind == "Metaspace":
        return {**pre_tokenizer, "prepend_scheme": "never", "add_prefix_space": False}
    if kind == "ByteLevel":
        return {**pre_tokenizer, "add_prefix_space": False}
    return pre_tokenizer


def guess_special_roles(vocab: dict[str, int]) -> SpecialRoles:
    """Roles from the conventional names of special tokens (`vocab`: special tokens only)."""

    def first(names: tuple[str, ...]) -> int | None:
        return next((vocab[n] for n in names if n in vocab), None)

    eos = first(_EOS_NAMES)
    eos_ids = {vocab[n] for n in _END_OF_TURN_NAMES if n in vocab} | ({eos} if eos is not None else set())
    return SpecialRoles(first(_BOS_NAMES), frozenset(eos_ids), first(_UNK_NAMES), first(_PAD_NAMES))


def roles_from_config(config_path: Path, vocab: dict[str, int]) -> SpecialRoles:
    """Roles from a tokenizer_config.json when there is one, else from conventional names."""
    guessed = guess_special_roles(vocab)
    if not config_path.is_file():
        return guessed
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return guessed

    def role(key: str, default: int | None) -> int | None:
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        return vocab.get(value, default) if isinstance(value, str) else default

    eos = role("eos_token", None)
    eos_ids = set(guessed.eos_ids) | ({eos} if eos is not None else set())
    return SpecialRoles(
        bos_id=role("bos_token", guessed.bos_id),
        eos_ids=frozenset(eos_ids),
        unk_id=role("unk_token", guessed.unk_id),
        pad_id=role("pad_token", guessed.pad_id),
    )
