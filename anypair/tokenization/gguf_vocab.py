"""Tokenizers rebuilt from GGUF vocabularies (llama.cpp's `tokenizer.ggml.*` metadata).

A GGUF file carries the pieces, their types, SentencePiece scores or BPE merges and the name of
its pre-tokenizer. From these we build the `tokenizers.Tokenizer` the model was converted from:
- "gpt2" (byte-level BPE): the merges, and the split regexes llama.cpp uses for that
  pre-tokenizer name (src/llama-vocab.cpp), applied one after the other as in llama.cpp;
- "llama" (SentencePiece BPE): merges derived from the scores the way transformers converts a
  SentencePiece model, with the `▁` dummy prefix and `<0xNN>` byte fallback.
Other GGUF tokenizer models (WordPiece "bert", Unigram "t5", "gemma4") are refused with a
TokenizerError naming the model.
"""
from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy
from gguf import GGUF_MAGIC, GGUFValueType
from tokenizers import Tokenizer

from anypair.errors import TokenizerError
from anypair.tokenization.hf import HFTokenizerAdapter, SpecialRoles

_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
# Rows that converters add only to round the vocabulary up ("[PAD151646]").
_PADDING_PIECE = re.compile(r"\[PAD\d+\]")

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DEEPSEEK_LLM = (
    '[\r\n]',
    '\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+',
    '\\s?[!-/:-~！-／：-～‘-‟\u3000-。]+',
    '\\s+$',
    '[一-龥ࠀ-一가-\ud7ff]+',
    '\\p{N}+',
)
# llama.cpp's split regexes per `tokenizer.ggml.pre`, with whether the BPE looks whole words up
# in the vocabulary before merging (`ignore_merges`).
_BPE_PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {
    "llama-bpe": ((_LLAMA3,), True),
    "llama3": ((_LLAMA3,), True),
    "llama-v3": ((_LLAMA3,), True),
    "dbrx": ((_LLAMA3,), False),
    "smaug-bpe": ((_LLAMA3,), False),
    "qwen2": ((_QWEN2,), False),
    "stablelm2": ((_QWEN2,), False),
    "qwen35": ((_QWEN35,), False),
    "gpt-2": ((_GPT2,), False),
    "phi-2": ((_GPT2,), False),
    "mpt": ((_GPT2,), False),
    "olmo": ((_GPT2,), False),
    "starcoder": ((r"\p{N}", _GPT2), False),
    "refact": ((r"\p{N}", _GPT2), False),
    "command-r": ((r"\p{N}", _GPT2), False),
    "smollm": ((r"\p{N}", _GPT2), False),
    "falcon": ((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"), False),
    "deepseek-llm": (_DEEPSEEK_LLM, False),
    "deepseek-coder": ((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"), False),
    "default": ((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"), False),
}


@dataclass(frozen=True)
class GGUFVocabulary:
    """The tokenizer metadata of one GGUF file (or the same facts from another source)."""

    model: str
    pre: str
    tokens: list[str]
    token_types: list[int]
    scores: list[float]
    merges: list[str]
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_space_prefix: bool


def read_gguf_vocabulary(path: str | Path) -> GGUFVocabulary:
    """The `tokenizer.ggml.*` fields of a GGUF file (weights, if any, are not read)."""
    path = Path(path)
    try:
        fields = read_gguf_metadata(path)
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise TokenizerError(f"cannot read {path} as a GGUF file ({exc}); re-fetch it") from exc
    if "tokenizer.ggml.tokens" not in fields:
        raise TokenizerError(f"{path} has no tokenizer (no tokenizer.ggml.tokens field)")
    model = fields.get("tokenizer.ggml.model", "llama")
    tokens = fields["tokenizer.ggml.tokens"]
    return GGUFVocabulary(
        model=model,
        pre=fields.get("tokenizer.ggml.pre", "default"),
        tokens=tokens,
        token_types=list(fields.get("tokenizer.ggml.token_type", [_NORMAL] * len(tokens))),
        scores=list(fields.get("tokenizer.ggml.scores", [0.0] * len(tokens))),
        merges=fields.get("tokenizer.ggml.merges", []),
        bos_id=fields.get("tokenizer.ggml.bos_token_id"),
        eos_id=fields.get("tokenizer.ggml.eos_token_id"),
        unk_id=fields.get("tokenizer.ggml.unknown_token_id"),
        pad_id=fields.get("tokenizer.ggml.padding_token_id"),
        add_bos=bool(fields.get("tokenizer.ggml.add_bos_token", model == "llama")),
        add_space_prefix=bool(fields.get("tokenizer.ggml.add_space_prefix", model == "llama")),
    )


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """Key -> value of a GGUF file's metadata section.

    `gguf.GGUFReader` maps every array element to its own numpy view, which takes 30-60 s for
    a 128k-256k vocabulary; this reads the same layout (gguf's constants and value types)
    sequentially, with numpy for numeric arrays, in well under a second.
    """
    with open(path, "rb") as handle:
        data = handle.read(_metadata_size_hint(path))
    reader = _MetadataReader(data)
    if reader.take(4) != struct.pack("<I", GGUF_MAGIC):
        raise ValueError("not a GGUF file (bad magic number)")
    version = reader.unpack("<I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    reader.unpack("<Q")  # tensor count
    kv_count = reader.unpack("<Q")
    fields: dict[str, Any] = {}
    for _ in range(kv_count):
        key = reader.string()
        fields[key] = reader.value(GGUFValueType(reader.unpack("<I")))
    return fields


def _metadata_size_hint(path: Path) -> int:
    # Metadata comes first; vocab-only files are small, model files hold weights after it.
    return min(path.stat().st_size, 256 * 1024 * 1024)


_NUMPY_TYPES = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "<u1",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}


class _MetadataReader:
    """Sequential little-endian reader over the metadata bytes of a GGUF file."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, size: int) -> bytes:
        end = self.offset + size
        if end > len(self.data):
            raise ValueError("file ends inside its metadata (truncated download?)")
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", errors="surrogateescape")

    def value(self, value_type: GGUFValueType) -> Any:
        if value_type == GGUFValueType.STRING:
            return self.string()
        if value_type == GGUFValueType.ARRAY:
            item_type = GGUFValueType(self.unpack("<I"))
            count = self.unpack("<Q")
            if item_type in _NUMPY_TYPES:
                dtype = numpy.dtype(_NUMPY_TYPES[item_type])
                return numpy.frombuffer(self.take(dtype.itemsize * count), dtype=dtype).tolist()
            return [self.value(item_type) for _ in range(count)]
        item = numpy.frombuffer(self.take(numpy.dtype(_NUMPY_TYPES[value_type]).itemsize), _NUMPY_TYPES[value_type])
        return bool(item[0]) if value_type == GGUFValueType.BOOL else item[0].item()


def gguf_tokenizer(vocabulary: GGUFVocabulary) -> Tokenizer:
    """The HF tokenizer equivalent to a GGUF vocabulary."""
    if vocabulary.model == "gpt2":
        spec = _byte_level_bpe_spec(vocabulary)
    elif vocabulary.model == "llama":
        spec = _sentencepiece_bpe_spec(vocabulary)
    else:
        raise TokenizerError(
            f"GGUF tokenizer model {vocabulary.model!r} is not supported (only 'gpt2' byte-level "
            "BPE and 'llama' SentencePiece); use the model's tokenizer.json instead"
        )
    spec["added_tokens"] = _added_tokens(vocabulary)
    spec["post_processor"] = _bos_template(vocabulary)
    return Tokenizer.from_str(json.dumps(spec))


def gguf_adapter(path: str | Path, name: str | None = None) -> HFTokenizerAdapter:
    """TokenizerAdapter for the vocabulary of a GGUF file."""
    path = Path(path)
    vocabulary = read_gguf_vocabulary(path)
    tokenizer = gguf_tokenizer(vocabulary)
    roles = SpecialRoles(
        bos_id=vocabulary.bos_id,
        eos_ids=frozenset(i for i in [vocabulary.eos_id] if i is not None),
        unk_id=vocabulary.unk_id,
        pad_id=vocabulary.pad_id,
    )
    return HFTokenizerAdapter(tokenizer, name=name or path.name, roles=roles)


def _is_added(token_type: int, piece: str) -> bool:
    return token_type in (_CONTROL, _USER_DEFINED, _UNUSED, _UNKNOWN) or bool(_PADDING_PIECE.fullmatch(piece))


def _model_vocab(vocabulary: GGUFVocabulary) -> dict[str, int]:
    """Piece -> id of every piece (first id wins on duplicates).

    Control pieces are in the model's vocab too, although no merge ever produces them: an added
    token that `tokenizers` does not find in the model gets a fresh id after the model's last
    one, which would hand "</s>" the id of a real piece (Llama-2's 31999, "给")."""
    vocab: dict[str, int] = {}
    for token_id, piece in enumerate(vocabulary.tokens):
        vocab.setdefault(piece, token_id)
    return vocab


def _added_tokens(vocabulary: GGUFVocabulary) -> list[dict]:
    """Control/unused/padding pieces as special added tokens, user-defined ones as plain ones."""
    added = []
    types = vocabulary.token_types or [_NORMAL] * len(vocabulary.tokens)
    for token_id, (piece, token_type) in enumerate(zip(vocabulary.tokens, types)):
        if not _is_added(token_type, piece):
            continue
        special = token_type != _USER_DEFINED or bool(_PADDING_PIECE.fullmatch(piece))
        added.append(
            {
                "id": token_id,
                "content": piece,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": special,
            }
        )
    return added


def _bos_template(vocabulary: GGUFVocabulary) -> dict | None:
    if not vocabulary.add_bos or vocabulary.bos_id is None:
        return None
    bos = vocabulary.tokens[vocabulary.bos_id]
    return {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": {"id": bos, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {bos: {"id": bos, "ids": [vocabulary.bos_id], "tokens": [bos]}},
    }


def _empty_spec() -> dict:
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": []}


def _byte_level_bpe_spec(vocabulary: GGUFVocabulary) -> dict:
    if vocabulary.pre not in _BPE_PRE_TOKENIZERS:
        raise TokenizerError(
            f"GGUF pre-tokenizer {vocabulary.pre!r} is not supported; known: "
            f"{', '.join(sorted(_BPE_PRE_TOKENIZERS))}"
        )
    regexes, ignore_merges = _BPE_PRE_TOKENIZERS[vocabulary.pre]
    splits = [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}
        for regex in regexes
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        **_empty_spec(),
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [*splits, byte_level]},
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": ignore_merges,
            "vocab": _model_vocab(vocabulary),
            "merges": vocabulary.merges,
        },
    }


def _sentencepiece_bpe_spec(vocabulary: GGUFVocabulary) -> dict:
    vocab = _model_vocab(vocabulary)
    unk_piece = vocabulary.tokens[vocabulary.unk_id] if vocabulary.unk_id is not None else None
    replace_space = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    normalizers = [{"type": "Prepend", "prepend": "▁"}] if vocabulary.add_space_prefix else []
    return {
        **_empty_spec(),
        "normalizer": {"type": "Sequence", "normalizers": [*normalizers, replace_space]},
        "pre_tokenizer": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unk_piece,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": vocabulary.merges
            or sentencepiece_merges(vocab, vocabulary.tokens, vocabulary.scores, vocabulary.token_types),
        },
    }


def sentencepiece_merges(
    vocab: dict[str, int], tokens: list[str], scores: list[float], token_types: list[int]
) -> list[str]:
    """BPE merges equivalent to SentencePiece's score-ordered merging (as transformers'
    SentencePieceExtractor derives them): every split of a normal piece into two pieces,
    ordered by the merged piece's score, then by the lengths of the halves."""
    merges: list[tuple[str, str, float]] = []
    for piece, score, token_type in zip(tokens, scores, token_types):
        if token_type not in (_NORMAL, _USER_DEFINED) or vocab.get(piece) is None:
            continue
        local = [
            (piece[:cut], piece[cut:], score)
            for cut in range(1, len(piece))
            if piece[:cut] in vocab and piece[cut:] in vocab
        ]
        local.sort(key=lambda merge: (vocab[merge[0]], vocab[merge[1]]))
        merges.extend(local)
    merges.sort(key=lambda merge: (merge[2], len(merge[0]), len(merge[1])), reverse=True)
    return [f"{left} {right}" for left, right, _ in merges]
