"""Fetch zoo models: assemble the verified GGUF if needed, then convert it once into an HF folder; check
the converted folder each time it is asked for (a stat per file) and convert it again if it was damaged."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from anypair.errors import FetchError
from anypair.zoo.conversion import convert_gguf, converted_dir, is_converted, require_gguf_support
from anypair.zoo.gguf_assembly import assemble_gguf, gguf_path, has_gguf, record_stamp
from anypair.home import file_stamp
from anypair.zoo.integrity import folder_problem, sha256_of
from anypair.zoo.paths import COMPLETE_MARKER, asset_lock
from anypair.zoo.registry import TOKENIZER_FAMILIES, ModelAsset
from anypair.zoo.tokenizer_files import fetch_tokenizers


def _verified_gguf(model: ModelAsset, progress: bool) -> Path:
    """The GGUF, re-hashed before the costly conversion (a cached copy may have rotted)."""
    if has_gguf(model):
        path = gguf_path(model)
        actual = sha256_of(path)
        if actual == model.gguf_sha256:
            record_stamp(model)
            return path
        path.unlink()
        if progress:
            print(f"Cached GGUF of {model.hub_id} had SHA-256 {actual}, not {model.gguf_sha256}; "
                  "deleted, fetching again.", file=sys.stderr, flush=True)
    return assemble_gguf(model, progress=progress)


def _rewrite_marker(marker: Path, record: dict) -> None:
    partial = marker.with_name(f"{marker.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(partial, marker)


def _converted_problem(model: ModelAsset, *, rehash: bool, progress: bool) -> str | None:
    """What is wrong with the converted folder, naming the file (None: every file is as written).

    Each file recorded at conversion is checked by its stamp (size and time: one stat); a file whose
    stamp changed, or every file with `rehash` (`anypair fetch --verify`: a flipped byte can keep size and
    time), is hashed against the SHA-256 recorded when it was written, and a good one is stamped again.
    Conversions recorded before stamps existed are hashed once; before hashes existed, only
    `rehash` looks (whether the folder loads)."""
    folder = converted_dir(model)
    marker = folder / COMPLETE_MARKER
    try:
        record = json.loads(marker.read_text())
        hashes, stamps = dict(record.get("file_sha256") or {}), dict(record.get("file_stamps") or {})
    except (OSError, ValueError, AttributeError, TypeError) as error:
        return f"its record {marker} is unreadable ({type(error).__name__})"
    if not hashes:
        return folder_problem(folder) if rehash else None
    if progress and not rehash and any(name not in stamps for name in hashes):
        print(f"{model.hub_id}: hashing its converted files once, to record their sizes and times",
              file=sys.stderr, flush=True)
    damaged, restamped = [], {}
    for name, sha256 in hashes.items():
        path = folder / name
        if not path.is_file():
            damaged.append(f"{path} is missing")
            continue
        stamp = file_stamp(path)
        if not rehash and stamps.get(name) == stamp:
            continue
        recorded_size = (stamps.get(name) or [None])[0]
        if recorded_size is not None and stamp[0] < recorded_size:
            damaged.append(f"{path} is truncated ({stamp[0]} of its {recorded_size} bytes)")
        elif sha256_of(path) != sha256:
            damaged.append(f"{path} changed since conversion")
        elif stamps.get(name) != stamp:
            restamped[name] = stamp
    if damaged:
        return "; ".join(damaged)
    if restamped:
        _rewrite_marker(marker, {**record, "file_stamps": {**stamps, **restamped}})
    return None


def _check_converted(model: ModelAsset, *, rehash: bool, progress: bool) -> str | None:
    """Unmark a damaged converted folder (so it is converted again from the verified GGUF), saying so in
    one line on stderr; returns the problem (None: the folder is good). With `rehash`, the GGUF is
    re-hashed too (a bad one is deleted and fetched again)."""
    if rehash and has_gguf(model):
        actual = sha256_of(gguf_path(model))
        if actual != model.gguf_sha256:
            gguf_path(model).unlink()
            print(f"{model.hub_id}: cached GGUF had SHA-256 {actual}, not {model.gguf_sha256}; deleted, it will be "
                  "fetched again.", file=sys.stderr, flush=True)
    if not is_converted(model):
        return None
    problem = _converted_problem(model, rehash=rehash, progress=progress)
    if problem:
        (converted_dir(model) / COMPLETE_MARKER).unlink()
        print(f"anypair: {model.hub_id}: {problem}; converting it again from the verified GGUF",
              file=sys.stderr, flush=True)
    return problem


def fetch_model(model: ModelAsset, *, progress: bool = True, verify: bool = False) -> Path:
    """Make the converted HF folder of `model` present, checked, and return it (a damaged one is converted
    again; `verify`: re-hash every file first)."""
    with asset_lock(model.folder_name):
        damage = _check_converted(model, rehash=verify, progress=progress)
        try:
            return _fetch_model_locked(model, progress)
        except FetchError as error:
            if damage is None:
                raise
            raise FetchError(f"{model.hub_id}: {damage}, and repairing it failed: {error} "
                             f"(then run `anypair fetch --verify {model.hub_id}`)") from error


def _fetch_model_locked(model: ModelAsset, progress: bool) -> Path:
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
