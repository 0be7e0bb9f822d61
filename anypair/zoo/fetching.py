"""`fetch`: turn names (zoo model hub ids, tokenizer family names, group names) into local paths."""
from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from anypair.errors import UnknownModelError
from anypair.zoo.model_files import fetch_model
from anypair.zoo.registry import GROUPS, TOKENIZER_FAMILIES, ZOO_MODELS, valid_names
from anypair.zoo.tokenizer_files import fetch_tokenizers


def unknown_name_error(name: str) -> UnknownModelError:
    return UnknownModelError(
        f"{name!r} is not in the anypair zoo. Valid names: {', '.join(valid_names())}. "
        "Fetch with `anypair fetch NAME ...` (or `anypair fetch` for everything)."
    )


def expand_names(names: Sequence[str] | None) -> list[str]:
    """Group names expanded, duplicates dropped, order kept; unknown names raise UnknownModelError."""
    if isinstance(names, str):
        names = [names]
    requested = list(GROUPS["tokenizers"]) + list(GROUPS["models"]) if names is None else list(names)
    expanded: list[str] = []
    for name in requested:
        members = GROUPS.get(name, (name,))
        for member in members:
            if member not in ZOO_MODELS and member not in TOKENIZER_FAMILIES:
                raise unknown_name_error(member)
            if member not in expanded:
                expanded.append(member)
    return expanded


def fetch(names: Sequence[str] | None = None, *, progress: bool = True, verify: bool = False) -> dict[str, Path]:
    """Fetch (download, verify, convert) what `names` lists; None means everything. Returns name -> path.
    `verify` re-hashes what is cached already and fetches again what fails.

    Tokenizers come first (they are small and others wait on them), then models smallest first.
    """
    wanted = expand_names(names)
    started = time.perf_counter()
    families = [TOKENIZER_FAMILIES[name] for name in wanted if name in TOKENIZER_FAMILIES]
    paths: dict[str, Path] = dict(fetch_tokenizers(families, progress=progress, verify=verify)) if families else {}
    models = sorted((ZOO_MODELS[name] for name in wanted if name in ZOO_MODELS), key=lambda m: m.gguf_size)
    for model in models:
        paths[model.hub_id] = fetch_model(model, progress=progress, verify=verify)
    if progress:
        print(f"anypair zoo: {len(paths)} asset(s) ready in {time.perf_counter() - started:.1f} s",
              file=sys.stderr, flush=True)
    return {name: paths[name] for name in wanted}
