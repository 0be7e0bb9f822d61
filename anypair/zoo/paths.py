"""Where the zoo keeps things: sub-folders of `anypair.home.home()` ($ANYPAIR_HOME, default
~/.cache/anypair)."""
from __future__ import annotations

import contextlib
import fcntl
import shutil
from collections.abc import Iterator
from pathlib import Path

from anypair.home import home

COMPLETE_MARKER = ".anypair-complete.json"


def tokenizers_dir() -> Path:
    return home() / "tokenizers"


def models_dir() -> Path:
    return home() / "models"


def gguf_dir() -> Path:
    return home() / "gguf"


def scratch_dir(name: str) -> Path:
    """A fresh working folder for one asset; whatever an interrupted run left there is discarded."""
    folder = home() / "tmp" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@contextlib.contextmanager
def asset_lock(name: str) -> Iterator[None]:
    """Serialise work on one asset between processes (two test sessions fetching at once)."""
    lock_folder = home() / "locks"
    lock_folder.mkdir(parents=True, exist_ok=True)
    safe = name.replace("/", "--")
    with open(lock_folder / f"{safe}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
