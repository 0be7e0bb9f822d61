"""What the GGUF engine needs of a zoo model: its verified GGUF and a folder with the tokenizer and
generation config, but no bf16 conversion of the weights (the engine serves the GGUF's own blocks).

When the model was converted already (`anypair fetch`), its folder holds the same tokenizer and is
used as it is; otherwise the tokenizer is built exactly as the conversion builds it and saved alone.
"""
from __future__ import annotations

import json
from pathlib import Path

from anypair.zoo.paths import COMPLETE_MARKER, asset_lock, scratch_dir, tokenizers_dir
from anypair.zoo.registry import TOKENIZER_FAMILIES, ModelAsset


def tokenizer_only_dir(model: ModelAsset) -> Path:
    return tokenizers_dir() / "models" / model.folder_name


def gguf_file(model: ModelAsset, *, progress: bool = True) -> Path:
    """The model's verified GGUF, assembled first if it is not cached (under the asset's lock, so
    two processes never assemble it at once)."""
    from anypair.zoo.gguf_assembly import assemble_gguf, gguf_path, has_gguf

    with asset_lock(model.folder_name):
        return gguf_path(model) if has_gguf(model) else assemble_gguf(model, progress=progress)


def served_gguf(model: ModelAsset, *, progress: bool = True) -> tuple[Path, Path]:
    """(the GGUF, a folder with its tokenizer and generation config), fetching what is missing."""
    from anypair.zoo.conversion import converted_dir, is_converted
    from anypair.zoo.gguf_assembly import assemble_gguf, gguf_path, has_gguf

    with asset_lock(model.folder_name):
        gguf = gguf_path(model) if has_gguf(model) else assemble_gguf(model, progress=progress)
        if is_converted(model):
            return gguf, converted_dir(model)
        folder = tokenizer_only_dir(model)
        if (folder / COMPLETE_MARKER).is_file():
            return gguf, folder
        _write_tokenizer_folder(model, gguf, folder, progress)
        return gguf, folder


def _write_tokenizer_folder(model: ModelAsset, gguf: Path, folder: Path, progress: bool) -> None:
    import os
    import shutil

    from transformers import GenerationConfig

    from anypair.zoo.conversion import _build_tokenizer, _check_same_special_ids  # noqa: F401  (one way to build it)
    from anypair.zoo.tokenizer_files import fetch_tokenizers

    tokenizer_json = None
    if model.tokenizer_family is not None:
        asset = TOKENIZER_FAMILIES[model.tokenizer_family]
        tokenizer_json = fetch_tokenizers([asset], progress=progress)[asset.family]
    scratch = scratch_dir("tokenizer-" + model.folder_name)
    try:
        (scratch / "source").mkdir()
        tokenizer = _build_tokenizer(model, gguf, tokenizer_json, scratch / "source")
        shutil.rmtree(scratch / "source")
        tokenizer.save_pretrained(scratch)
        (scratch / "tokenizer.model").unlink(missing_ok=True)
        GenerationConfig(**_generation_ids(gguf)).save_pretrained(scratch)
        (scratch / COMPLETE_MARKER).write_text(json.dumps({"hub_id": model.hub_id, "gguf_sha256": model.gguf_sha256,
                                                           "contents": "tokenizer and generation config only"}) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(scratch, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _generation_ids(gguf: Path) -> dict:
    """bos/eos/pad ids as the GGUF records them (what transformers' GGUF loader puts in a converted
    model's generation config)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    ids = {}
    for key, name in (("tokenizer.ggml.bos_token_id", "bos_token_id"), ("tokenizer.ggml.eos_token_id", "eos_token_id"),
                      ("tokenizer.ggml.padding_token_id", "pad_token_id")):
        field = reader.fields.get(key)
        if field is not None:
            ids[name] = int(field.parts[field.data[0]][0])
    return ids
