"""Name -> location -> loaded model: zoo folder first, then a local folder, then the hub id as given."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from anypair.errors import DamagedFileError, InputError, TokenizerError, UnknownModelError
from anypair.zoo.conversion import converted_dir, is_converted
from anypair.zoo.fetching import unknown_name_error
from anypair.zoo.integrity import folder_problem
from anypair.zoo.registry import TOKENIZER_FAMILIES, ZOO_MODELS
from anypair.zoo.tokenizer_files import family_path, fetch_tokenizers, is_cached

if TYPE_CHECKING:
    from anypair.tokenization.base import TokenizerAdapter


def is_zoo_model(name: str | os.PathLike) -> bool:
    return str(name) in ZOO_MODELS


def model_dir(hub_id: str) -> Path | None:
    """The converted zoo folder of `hub_id` if it is fully present, else None."""
    model = ZOO_MODELS.get(hub_id)
    if model is None or not is_converted(model):
        return None
    return converted_dir(model)


def tokenizer_path(family: str, *, fetch_missing: bool = True) -> Path:
    """Local file (or folder, for multi-file families) of a tokenizer family, fetching it if allowed."""
    asset = TOKENIZER_FAMILIES.get(family)
    if asset is None:
        raise TokenizerError(
            f"Unknown tokenizer family {family!r}. Known families: {', '.join(TOKENIZER_FAMILIES)}."
        )
    if is_cached(asset):
        return family_path(asset)
    if not fetch_missing:
        raise TokenizerError(f"Tokenizer family {family!r} is not fetched yet; run `anypair fetch {family}`.")
    return fetch_tokenizers([asset])[family]


def load_tokenizer(name_or_path: str | os.PathLike) -> TokenizerAdapter:
    """A tokenizer family's adapter (fetched if missing), or whatever a path holds (see
    `tokenization.load_tokenizer_file`)."""
    from anypair.tokenization import load_tokenizer_file

    name = str(name_or_path)
    if name in TOKENIZER_FAMILIES and not Path(name).exists():
        if name == "llama-cpp-vocab":
            raise TokenizerError(
                "'llama-cpp-vocab' is a folder of GGUF vocabularies; load one of its "
                "ggml-vocab-*.gguf files by path"
            )
        return load_tokenizer_file(tokenizer_path(name))
    if not Path(name).expanduser().exists():
        raise TokenizerError(
            f"{name!r} is neither a tokenizer family ({', '.join(TOKENIZER_FAMILIES)}) nor an "
            "existing file or folder"
        )
    return load_tokenizer_file(name)


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~"))


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name


def resolve_model(name_or_path: str | os.PathLike) -> str | Path:
    """Zoo folder (fetched if missing), else an existing local folder, else an 'org/name' hub id string."""
    name = str(name_or_path)
    if name in ZOO_MODELS:
        from anypair.zoo.fetching import fetch

        return fetch([name])[name]
    local = Path(name).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise InputError(f"{local} is not a model folder (it has no config.json): give the folder that holds "
                             "config.json, the weights and the tokenizer")
        return local
    if local.exists():
        raise InputError(f"{local} is a file, not a model folder: give the folder that holds it")
    if isinstance(name_or_path, os.PathLike) or _looks_like_path(name):
        raise UnknownModelError(f"no such folder: {name}; give an existing model folder, a zoo model "
                                f"({', '.join(ZOO_MODELS)}) or a hub id")
    if _looks_like_hub_id(name):
        return name
    raise unknown_name_error(name)


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers (False at once when offline mode is set)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    import socket

    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _hub_failure(name: str, error: Exception) -> UnknownModelError:
    return UnknownModelError(
        f"Could not load {name!r} from the model hub ({type(error).__name__}: {error}). Without hub access, "
        f"use a zoo model ({', '.join(ZOO_MODELS)}; `anypair fetch` downloads them) or a local folder."
    )


def load_model(name_or_path: str | os.PathLike, *, dtype=None, device: str = "cpu"):
    """(model, tokenizer) through AutoModelForCausalLM / AutoTokenizer from wherever the name resolves."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    location = resolve_model(name_or_path)
    dtype = torch.bfloat16 if dtype is None else dtype
    # without a reachable hub, transformers retries for about a minute before failing: look only
    # in the local hub cache instead, and fail at once when the model is not there
    local_only = isinstance(location, str) and not hub_reachable()
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype, local_files_only=local_only)
    except Exception as error:  # transformers, tokenizers and safetensors each raise their own types
        if isinstance(location, Path):
            problem = folder_problem(location) or f"{type(error).__name__}: {error}"
            advice = (f"run `anypair fetch --verify {name_or_path}` to check and repair it" if is_zoo_model(name_or_path)
                      else "replace the damaged file or give a complete model folder")
            raise DamagedFileError(f"cannot load the model in {location}: {problem}; {advice}") from error
        if isinstance(error, OSError):
            raise _hub_failure(str(location), error) from error
        raise
    model.to(device)
    model.eval()
    return model, tokenizer
