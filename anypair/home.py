"""Where anypair keeps files on disk: $ANYPAIR_HOME, default ~/.cache/anypair. The zoo keeps its
models and tokenizers there (`zoo.paths`); tokenization keeps tiktoken's rank-file cache there."""
from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The cache root: $ANYPAIR_HOME if set, else ~/.cache/anypair."""
    configured = os.environ.get("ANYPAIR_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "anypair"
