"""Adapter over tiktoken encodings: OpenAI's r50k/cl100k/o200k `.tiktoken` files, Meta's
Llama-3 `tokenizer.model` (tiktoken format) and Mistral's Tekken json.

tiktoken never adds BOS or a prefix space and `encode_ordinary` never matches special tokens,
so continuations need nothing extra.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from anypair.errors import TokenizerError
from anypair.tokenization.base import TableTokenizerAdapter
from anypair.home import home

_OPENAI_BLOB_URLS = {
    "r50k_base": "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken",
    "p50k_base": "https://openaipublic.blob.core.windows.net/encodings/p50k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
# tiktoken's own expected hashes (tiktoken_ext/openai_public.py). Checked before tiktoken sees the
# file: on a mismatch tiktoken would silently try to download the official file instead.
_OPENAI_SHA256 = {
    "r50k_base": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Meta's llama_models/llama3/tokenizer.py: these names, then reserved ones up to 256 specials.
_LLAMA3_NAMED_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
)
_LLAMA3_SPECIAL_COUNT = 256
_env_lock = threading.Lock()


class TiktokenAdapter(TableTokenizerAdapter):
    """TokenizerAdapter over a `tiktoken.Encoding` whose special tokens are listed separately."""

    def __init__(
        self,
        encoding: tiktoken.Encoding,
        *,
        name: str,
        bos_id: int | None = None,
        eos_ids: set[int] | None = None,
        pad_id: int | None = None,
        id_offset: int = 0,
        extra_special_ids: set[int] | None = None,
        vocab_size: int | None = None,
    ) -> None:
        """`id_offset` shifts every tiktoken rank (Tekken numbers its specials first)."""
        size = vocab_size or encoding.n_vocab + id_offset
        table = [b""] * size
        special_ids = set(extra_special_ids or ())
        special_values = set(encoding._special_tokens.values())
        for rank in range(encoding.n_vocab):
            token_id = rank + id_offset
            if token_id >= size:
                break
            if rank in special_values:
                special_ids.add(token_id)
                continue
            try:
                table[token_id] = encoding.decode_single_token_bytes(rank)
            except KeyError:  # a gap in the ranks
                special_ids.add(token_id)
        self.encoding = encoding
        self._id_offset = id_offset
        self._max_rank = size - id_offset
        super().__init__(
            name=name,
            token_bytes_table=table,
            special_ids=special_ids,
            byte_fallback_ids=set(),
            bos_id=bos_id,
            eos_ids=eos_ids or set(),
            unk_id=None,
            pad_id=pad_id,
        )

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.encode_continuation(text)
        return [self.bos_id, *ids] if add_special_tokens and self.bos_id is not None else ids

    def encode_continuation(self, text: str) -> list[int]:
        self._require_unicode(text)
        offset = self._id_offset
        ids = self.encoding.encode_ordinary(text)
        if offset:
            ids = [rank + offset for rank in ids]
        return ids


def openai_encoding(path: str | Path) -> TiktokenAdapter:
    """r50k_base / p50k_base / cl100k_base / o200k_base from a local `.tiktoken` file.

    tiktoken builds these encodings (regex, special tokens) itself and reads the rank file
    through its cache; the file is placed under the cache name tiktoken looks for, and tiktoken
    checks its official SHA-256 on the way in.
    """
    path = Path(path)
    encoding_name = path.name.removesuffix(".tiktoken")
    url = _OPENAI_BLOB_URLS.get(encoding_name)
    if url is None:
        raise TokenizerError(
            f"{path.name}: unknown tiktoken encoding; expected one of "
            f"{', '.join(n + '.tiktoken' for n in _OPENAI_BLOB_URLS)}"
        )
    if not path.is_file():
        raise TokenizerError(f"tiktoken file {path} does not exist")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != _OPENAI_SHA256[encoding_name]:
        raise TokenizerError(
            f"{path} is not the official {encoding_name} file (SHA-256 {digest[:12]}..., expected "
            f"{_OPENAI_SHA256[encoding_name][:12]}...); re-fetch it with `anypair fetch`"
        )
    cache_dir = home() / "tiktoken-cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached = cache_dir / hashlib.sha1(url.encode()).hexdigest()
    if not cached.is_file() or cached.stat().st_size != path.stat().st_size:
        shutil.copyfile(path, cached)
    with _env_lock:
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
        try:
            encoding = tiktoken.get_encoding(encoding_name)
        except ValueError as exc:  # hash mismatch
            cached.unlink(missing_ok=True)
            raise TokenizerError(f"{path} is not the official {encoding_name} file ({exc})") from exc
        finally:
            if previous is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous
    end_of_text = encoding._special_tokens.get("<|endoftext|>")
    return TiktokenAdapter(
        encoding, name=encoding_name, eos_ids={end_of_text} if end_of_text is not None else set()
    )


def llama3_encoding(path: str | Path) -> TiktokenAdapter:
    """Meta's Llama-3 `tokenizer.model` (base64 tiktoken ranks) with its 256 special tokens."""
    path = Path(path)
    try:
        ranks = load_tiktoken_bpe(str(path))
    except Exception as exc:  # tiktoken raises ValueError/binascii.Error on bad lines
        raise TokenizerError(f"cannot read {path} as a tiktoken rank file ({exc})") from exc
    base = len(ranks)
    reserved = [
        f"<|reserved_special_token_{2 + i}|>"
        for i in range(_LLAMA3_SPECIAL_COUNT - len(_LLAMA3_NAMED_SPECIALS))
    ]
    specials = {token: base + i for i, token in enumerate((*_LLAMA3_NAMED_SPECIALS, *reserved))}
    encoding = tiktoken.Encoding(
        name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )
    return TiktokenAdapter(
        encoding,
        name="llama3-tiktoken",
        bos_id=specials["<|begin_of_text|>"],
        eos_ids={specials[t] for t in ("<|end_of_text|>", "<|eot_id|>", "<|eom_id|>")},
        pad_id=specials["<|finetune_right_pad_id|>"],
    )


def tekken_encoding(path: str | Path) -> TiktokenAdapter:
    """Mistral's Tekken json: special tokens take the first ids, ranks follow them."""
    path = Path(path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        config = spec["config"]
        vocab = spec["vocab"]
        num_special = int(config["default_num_special_tokens"])
        vocab_size = int(config["default_vocab_size"])
        pattern = config["pattern"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TokenizerError(f"cannot read {path} as a Tekken tokenizer json ({exc})") from exc
    inner_size = vocab_size - num_special
    ranks = {base64.b64decode(entry["token_bytes"]): entry["rank"] for entry in vocab[:inner_size]}
    encoding = tiktoken.Encoding(name="tekken", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    specials = {entry["token_str"]: entry["rank"] for entry in spec.get("special_tokens") or []}
    return TiktokenAdapter(
        encoding,
        name=path.stem,
        # Tekken files without a special-token list use Mistral's fixed <unk>=0, <s>=1, </s>=2.
        bos_id=specials.get("<s>", 1),
        eos_ids={specials.get("</s>", 2)},
        id_offset=num_special,
        extra_special_ids=set(range(num_special)),
        vocab_size=vocab_size,
    )
