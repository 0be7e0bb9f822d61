"""Tokenizers shipped in pre-tokenizer.json formats: OpenAI's GPT-2 `encoder.json` + `vocab.bpe`
and llama-tokenizer-js's base64 Llama-2 vocabulary with its binary merge list."""
from __future__ import annotations

import base64
import re
import struct
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from anypair.errors import TokenizerError
from anypair.tokenization.gguf_vocab import GGUFVocabulary, gguf_tokenizer
from anypair.tokenization.hf import HFTokenizerAdapter, SpecialRoles
from anypair.tokenization.pieces import byte_fallback_value

_GPT2_END_OF_TEXT = "<|endoftext|>"
_JS_STRING = r'const {name} = "([A-Za-z0-9+/=]*)"'
_LLAMA_UNKNOWN, _LLAMA_BOS, _LLAMA_EOS = 0, 1, 2


def gpt2_bpe_adapter(folder: str | Path) -> HFTokenizerAdapter:
    """GPT-2's byte-level BPE from `encoder.json` and `vocab.bpe` (openai/gpt-2 format)."""
    folder = Path(folder)
    encoder, merges = folder / "encoder.json", folder / "vocab.bpe"
    try:
        bpe = models.BPE.from_file(str(encoder), str(merges))
    except Exception as exc:  # tokenizers raises a bare Exception
        raise TokenizerError(f"cannot read GPT-2 BPE files in {folder} ({exc})") from exc
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(_GPT2_END_OF_TEXT, special=True, normalized=False)])
    end_of_text = tokenizer.token_to_id(_GPT2_END_OF_TEXT)
    roles = SpecialRoles(bos_id=None, eos_ids=frozenset({end_of_text}), unk_id=None, pad_id=None)
    return HFTokenizerAdapter(tokenizer, name="gpt2-bpe", roles=roles)


def llama_tokenizer_js_vocabulary(path: str | Path) -> GGUFVocabulary:
    """The Llama-2 vocabulary and merges embedded in llama-tokenizer-js as base64 constants."""
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8")
        vocab_blob = re.search(_JS_STRING.format(name="llama_vocab_base64"), source).group(1)
        merges_blob = re.search(_JS_STRING.format(name="llama_merges_binary"), source).group(1)
    except (OSError, UnicodeDecodeError, AttributeError) as exc:
        raise TokenizerError(
            f"{path} is not llama-tokenizer-js's llama-tokenizer.js (no base64 vocabulary/merges)"
        ) from exc
    tokens = base64.b64decode(vocab_blob).decode("utf-8").split("\n")
    merge_ids = struct.unpack(f"<{len(base64.b64decode(merges_blob)) // 2}H", base64.b64decode(merges_blob))
    # Each pair of ids is one merge, listed from highest priority down.
    merges = [f"{tokens[left]} {tokens[right]}" for left, right in zip(merge_ids[0::2], merge_ids[1::2])]
    types = [_piece_type(token_id, piece) for token_id, piece in enumerate(tokens)]
    return GGUFVocabulary(
        model="llama",
        pre="default",
        tokens=tokens,
        token_types=types,
        scores=[0.0] * len(tokens),
        merges=merges,
        bos_id=_LLAMA_BOS,
        eos_id=_LLAMA_EOS,
        unk_id=_LLAMA_UNKNOWN,
        pad_id=None,
        add_bos=True,
        add_space_prefix=True,
    )


def llama_tokenizer_js_adapter(path: str | Path) -> HFTokenizerAdapter:
    vocabulary = llama_tokenizer_js_vocabulary(path)
    roles = SpecialRoles(
        bos_id=vocabulary.bos_id,
        eos_ids=frozenset({vocabulary.eos_id}),
        unk_id=vocabulary.unk_id,
        pad_id=None,
    )
    return HFTokenizerAdapter(gguf_tokenizer(vocabulary), name="llama-tokenizer-js", roles=roles)


def _piece_type(token_id: int, piece: str) -> int:
    # GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte.
    if token_id == _LLAMA_UNKNOWN:
        return 2
    if token_id in (_LLAMA_BOS, _LLAMA_EOS):
        return 3
    return 6 if byte_fallback_value(piece) is not None else 1
