"""Fetch zoo models: assemble the verified GGUF if needed, then convert it once into an HF folder."""
from __future__ import annotations

import sys
from pathlib import Path

from anypair.errors import FetchError
from anypair.zoo.conversion import convert_gguf, converted_dir, is_converted, require_gguf_support
from anypair.zoo.gguf_assembly import assemble_gguf, gguf_path, has_gguf
from anypair.zoo.integrity import sha256_of
from anypair.zoo.paths import asset_lock
from anypair.zoo.registry import TOKENIZER_FAMILIES, ModelAsset
from anypair.zoo.tokenizer_files import fetch_tokenizers


def _verified_gguf(model: ModelAsset, progress: bool) -> Path:
    """The GGUF, re-hashed before the costly conversion (a cached copy may have rotted)."""
    if has_gguf(model):
        path = gguf_path(model)
        actual = sha256_of(path)
        if actual == model.gguf_sha256:
            return path
        path.unlink()
        if progress:
            print(f"Cached GGUF of {model.hub_id} had SHA-256 {actual}, not {model.gguf_sha256}; "
                  "deleted, fetching again.", file=sys.stderr, flush=True)
    return assemble_gguf(model, progress=progress)


def fetch_model(model: ModelAsset, *, progress: bool = True) -> Path:
    """Make the converted HF folder of `model` present and return it."""
    with asset_lock(model.folder_name):
        if is_converted(model):
            if progress:
                print(f"{model.hub_id}: already cached", file=sys.stderr, flush=True)
            return converted_dir(model)
        require_gguf_support()
        gguf = _verified_gguf(model, progress)
        tokenizer_json = None
        if model.tokenizer_family is not None:
            asset = TOKENIZER_FAMILIES[model.tokenizer_family]
            tokenizer_json = fetch_tokenizers([asset], progress=progress)[asset.family]
        try:
            return convert_gguf(model, gguf, tokenizer_json=tokenizer_json, progress=progress)
        except MemoryError as error:
            raise FetchError(f"Ran out of memory converting {model.hub_id}; close other programs and retry.") from error
