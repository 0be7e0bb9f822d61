"""The real tokenizer of a seed-shaped GGUF's family, as the `tokenizer.*` metadata llama.cpp reads.

Four families ship as llama.cpp's own vocabulary-only GGUFs in the zoo (`llama-cpp-vocab`: Llama-2's
32k SentencePiece, Phi-3's 32,064, Qwen2's 151k and Llama-3's 128k byte-BPE): their fields are
copied as they are. Gemma's 256k ships only as a Hugging Face tokenizer.json (`gemma`); it is turned
into the SentencePiece fields llama.cpp's converter writes for Gemma-2 (pieces in id order, a score
per piece, a type per piece, Gemma's special ids).

A model's embedding often has more rows than its tokenizer has tokens (Qwen2.5-7B: 152,064 rows,
151,665 tokens; CodeLlama-13B: 32,016 rows over Llama-2's 32,000 pieces). llama.cpp requires one
token per row, and its converter pads with `[PAD<id>]` tokens of type UNUSED: so does this module.
For CodeLlama the four infill pieces of its 16 extra are known (32007-32010: ▁<PRE>, ▁<SUF>, ▁<MID>,
▁<EOT>, llama.cpp's own CodeLlama ids) and named as such; the other 12 are not in any file here
and stay `[PAD<id>]`.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: llama.cpp's token types (gguf.TokenType)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
#: CodeLlama's infill pieces past Llama-2's 32,000
CODELLAMA_EXTRA = {32007: "▁<PRE>", 32008: "▁<SUF>", 32009: "▁<MID>", 32010: "▁<EOT>"}


@dataclass(frozen=True)
class VocabField:
    """One `tokenizer.*` key: its value and gguf value type (and item type for arrays)."""

    key: str
    value: Any
    kind: Any
    item_kind: Any = None


def _llama_cpp_vocab(name: str) -> Path:
    from anypair.zoo.resolve import tokenizer_path

    return tokenizer_path("llama-cpp-vocab") / f"ggml-vocab-{name}.gguf"


@functools.lru_cache(maxsize=2)
def _gguf_fields(path: Path) -> tuple[VocabField, ...]:
    """Every tokenizer.* field of a vocabulary GGUF (gguf's reader: 1-15 s, once per process)."""
    import gguf

    reader = gguf.GGUFReader(path)
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            kind = field.types[0]
            item = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            fields.append(VocabField(key, field.contents(), kind, item))
    return tuple(fields)


def _gemma_fields(path: Path) -> tuple[VocabField, ...]:
    """Gemma's tokenizer.json as llama.cpp's SentencePiece fields. SentencePiece scores a BPE piece by
    the order it was learned in, which is its id: the score is -id (the specials and bytes get 0)."""
    import gguf

    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    tokens = [""] * len(vocab)
    for piece, index in vocab.items():
        tokens[index] = piece
    types = [NORMAL] * len(tokens)
    for added in data.get("added_tokens", ()):
        types[added["id"]] = CONTROL if added.get("special") else USER_DEFINED
    for index, piece in enumerate(tokens):
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            types[index] = BYTE
    unk = vocab[data["model"].get("unk_token") or "<unk>"]
    types[unk] = UNKNOWN
    scores = [0.0 if kind != NORMAL else -float(index) for index, kind in enumerate(types)]
    array, string, f32, i32 = (gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING, gguf.GGUFValueType.FLOAT32,
                               gguf.GGUFValueType.INT32)
    u32, boolean = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.BOOL
    # the ids and flags llama.cpp's converter writes for Gemma-2 (convert_hf_to_gguf.Gemma2Model)
    return (VocabField("tokenizer.ggml.model", "llama", string), VocabField("tokenizer.ggml.pre", "default", string),
            VocabField("tokenizer.ggml.tokens", tokens, array, string),
            VocabField("tokenizer.ggml.scores", scores, array, f32),
            VocabField("tokenizer.ggml.token_type", types, array, i32),
            VocabField("tokenizer.ggml.bos_token_id", vocab["<bos>"], u32),
            VocabField("tokenizer.ggml.eos_token_id", vocab["<eos>"], u32),
            VocabField("tokenizer.ggml.unknown_token_id", unk, u32),
            VocabField("tokenizer.ggml.padding_token_id", vocab["<pad>"], u32),
            VocabField("tokenizer.ggml.add_bos_token", True, boolean),
            VocabField("tokenizer.ggml.add_eos_token", False, boolean),
            VocabField("tokenizer.ggml.add_space_prefix", False, boolean))


#: where each family's tokenizer comes from: a llama.cpp vocabulary GGUF, or the zoo's Gemma tokenizer.json
SOURCES = {"llama-spm": "llama.cpp ggml-vocab-llama-spm.gguf (Llama-2 32k SentencePiece)",
           "phi-3": "llama.cpp ggml-vocab-phi-3.gguf (Phi-3 32,064)",
           "qwen2": "llama.cpp ggml-vocab-qwen2.gguf (Qwen2 151k byte-BPE)",
           "llama-bpe": "llama.cpp ggml-vocab-llama-bpe.gguf (Llama-3 128k byte-BPE)",
           "gemma": "the zoo's `gemma` tokenizer.json (Gemma / Gemma-2 256k), as SentencePiece fields"}


def tokenizer_fields(family: str, rows: int) -> list[VocabField]:
    """The family's tokenizer.* fields with exactly `rows` tokens (padded as llama.cpp's converter
    pads; a family with more tokens than rows is refused: its model would not have them)."""
    from anypair.zoo.resolve import tokenizer_path

    if family not in SOURCES:
        raise ValueError(f"no tokenizer source {family!r}: choose among {', '.join(SOURCES)}")
    if family == "gemma":
        fields = _gemma_fields(tokenizer_path("gemma"))
    else:
        fields = _gguf_fields(_llama_cpp_vocab(family))
    fields = list(fields)
    count = next(len(f.value) for f in fields if f.key == "tokenizer.ggml.tokens")
    if count > rows:
        raise ValueError(f"the {family} tokenizer has {count} tokens, more than the {rows} rows of the embedding")
    if count == rows:
        return fields
    padded = []
    for field in fields:
        if field.key == "tokenizer.ggml.tokens":
            extra = [CODELLAMA_EXTRA.get(i, f"[PAD{i}]") if family == "llama-spm" else f"[PAD{i}]"
                     for i in range(count, rows)]
            field = VocabField(field.key, list(field.value) + extra, field.kind, field.item_kind)
        elif field.key == "tokenizer.ggml.token_type":
            extra = [CONTROL if family == "llama-spm" and i in CODELLAMA_EXTRA else UNUSED for i in range(count, rows)]
            field = VocabField(field.key, list(field.value) + extra, field.kind, field.item_kind)
        elif field.key == "tokenizer.ggml.scores":
            field = VocabField(field.key, list(field.value) + [-1000.0] * (rows - count), field.kind, field.item_kind)
        padded.append(field)
    return padded
