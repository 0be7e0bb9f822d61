"""Tokenizer adapters: one `TokenizerAdapter` surface over every tokenizer family anypair meets.

    from anypair.tokenization import load_tokenizer_file, same_vocabulary
    mine = load_tokenizer_file("/path/to/tokenizer.json")    # a file or an HF folder

Zoo family names ("qwen2", fetched if missing) are the zoo's business: `anypair.zoo.load_tokenizer`.
"""
from __future__ import annotations

from pathlib import Path

from anypair.errors import TokenizerError
from anypair.tokenization.base import TableTokenizerAdapter, TokenizerAdapter
from anypair.tokenization.hf import HFTokenizerAdapter

# Share of regular tokens two vocabularies may disagree on (added tokens such as "<think>",
# "[PAD151646]" rows) and still count as one vocabulary.
_VOCABULARY_MISMATCH_TOLERANCE = 0.01


def from_hf(hf_tokenizer, model_vocab_size: int | None = None) -> HFTokenizerAdapter:
    """Adapter for a transformers fast tokenizer loaded with a model (see HFTokenizerAdapter.from_hf)."""
    return HFTokenizerAdapter.from_hf(hf_tokenizer, model_vocab_size=model_vocab_size)


def load_tokenizer_file(path: str | Path) -> TokenizerAdapter:
    """A tokenizer.json / .model / .tiktoken / .gguf / Tekken json / GPT-2 encoder.json folder /
    HF folder; the adapter is picked from the file's name and contents."""
    path = Path(path).expanduser()
    if not path.exists():
        raise TokenizerError(f"{str(path)!r} is no existing tokenizer file or folder")
    if path.is_dir():
        return _load_folder(path)
    suffixes = path.name.lower()
    if suffixes.endswith(".gguf"):
        from anypair.tokenization.gguf_vocab import gguf_adapter

        return gguf_adapter(path)
    if suffixes.endswith(".tiktoken"):
        from anypair.tokenization.tiktoken_adapter import openai_encoding

        return openai_encoding(path)
    if suffixes.endswith(".js"):
        from anypair.tokenization.legacy_files import llama_tokenizer_js_adapter

        return llama_tokenizer_js_adapter(path)
    if suffixes.endswith(".json"):
        if _is_tekken(path):
            from anypair.tokenization.tiktoken_adapter import tekken_encoding

            return tekken_encoding(path)
        return HFTokenizerAdapter.from_file(path)
    if ".model" in suffixes:
        return _load_model_file(path)
    raise TokenizerError(
        f"don't know how to read {path}: expected tokenizer.json, a SentencePiece .model, a "
        ".tiktoken file, a .gguf file, a Tekken json or a tokenizer folder"
    )


def _load_folder(folder: Path) -> TokenizerAdapter:
    if (folder / "tokenizer.json").is_file():
        return HFTokenizerAdapter.from_file(folder / "tokenizer.json")
    if (folder / "encoder.json").is_file() and (folder / "vocab.bpe").is_file():
        from anypair.tokenization.legacy_files import gpt2_bpe_adapter

        return gpt2_bpe_adapter(folder)
    if (folder / "tokenizer.model").is_file():
        return _load_model_file(folder / "tokenizer.model")
    raise TokenizerError(
        f"{folder} holds no tokenizer.json, tokenizer.model or GPT-2 encoder.json + vocab.bpe"
    )


def _load_model_file(path: Path) -> TokenizerAdapter:
    """A `.model` file is either a SentencePiece proto or a tiktoken rank file (Llama-3)."""
    head = _read_head(path, 64)
    first_line = head.split(b"\n", 1)[0]
    if b" " in first_line and first_line.split(b" ")[-1].isdigit():
        from anypair.tokenization.tiktoken_adapter import llama3_encoding

        return llama3_encoding(path)
    from anypair.tokenization.sentencepiece_adapter import SentencePieceAdapter

    return SentencePieceAdapter.from_file(path)


def _read_head(path: Path, size: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError as exc:
        raise TokenizerError(f"cannot read {path}: {exc}") from exc


def _is_tekken(path: Path) -> bool:
    head = _read_head(path, 4096)
    return b'"config"' in head and b'"pattern"' in head and b'"model"' not in head


def regular_token_bytes(adapter: TokenizerAdapter) -> dict[int, bytes]:
    """Id -> bytes of the tokens text can produce (specials and padding left out)."""
    special = adapter.special_ids
    return {
        token_id: piece
        for token_id, piece in enumerate(adapter.all_token_bytes())
        if piece and token_id not in special
    }


def same_vocabulary(a: TokenizerAdapter, b: TokenizerAdapter) -> bool:
    """Whether ids mean the same bytes in both tokenizers.

    Decided by content, not size: every id that is a regular token in both must spell the same
    bytes, and ids regular in only one of them (added tokens, padding rows) must be a tiny share.
    A padded model vocabulary (more LM-head rows than tokenizer ids) is the same vocabulary.
    """
    regular_a, regular_b = regular_token_bytes(a), regular_token_bytes(b)
    shared = regular_a.keys() & regular_b.keys()
    if any(regular_a[i] != regular_b[i] for i in shared):
        return False
    only_one = len(regular_a) + len(regular_b) - 2 * len(shared)
    smaller = min(len(regular_a), len(regular_b))
    return smaller > 0 and only_one <= _VOCABULARY_MISMATCH_TOLERANCE * smaller


__all__ = [
    "HFTokenizerAdapter",
    "TableTokenizerAdapter",
    "TokenizerAdapter",
    "TokenizerError",
    "from_hf",
    "load_tokenizer_file",
    "same_vocabulary",
]
