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


def _verify_converted(model: ModelAsset) -> None:
    """`anypair fetch --verify`: re-hash the GGUF against its pinned SHA-256 (a bad one is deleted)
    and check the converted folder's files (each against the SHA-256 recorded when it was written;
    older conversions without hashes: that they load); a bad folder is unmarked, so it is rebuilt."""
    import json

    from anypair.zoo.paths import COMPLETE_MARKER
    from anypair.zoo.resolve import folder_problem

    if has_gguf(model):
        actual = sha256_of(gguf_path(model))
        if actual != model.gguf_sha256:
            gguf_path(model).unlink()
            print(f"{model.hub_id}: cached GGUF had SHA-256 {actual}, not {model.gguf_sha256}; deleted, it will be "
                  "fetched again.", file=sys.stderr, flush=True)
    if not is_converted(model):
        return
    folder = converted_dir(model)
    recorded = json.loads((folder / COMPLETE_MARKER).read_text()).get("file_sha256") or {}
    bad = [name for name, sha in recorded.items() if not (folder / name).is_file() or sha256_of(folder / name) != sha]
    problem = f"{', '.join(bad)} changed since conversion" if bad else None if recorded else folder_problem(folder)
    if problem:
        (folder / COMPLETE_MARKER).unlink()
        print(f"{model.hub_id}: {problem}; converting it again.", file=sys.stderr, flush=True)


def fetch_model(model: ModelAsset, *, progress: bool = True, verify: bool = False) -> Path:
    """Make the converted HF folder of `model` present and return it (`verify`: check it first)."""
    with asset_lock(model.folder_name):
        if verify:
            _verify_converted(model)
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
