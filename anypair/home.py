"""Where anypair keeps files on disk: $ANYPAIR_HOME, default ~/.cache/anypair. The zoo keeps its
models and tokenizers there (`zoo.paths`); tokenization keeps tiktoken's rank-file cache there; the
caches of work derived from a user's files (a GGUF's tokenizer, the contract's verdict) key their
entries by `source_stamp` and write them with `write_atomically`."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional


def home() -> Path:
    """The cache root: $ANYPAIR_HOME if set, else ~/.cache/anypair."""
    configured = os.environ.get("ANYPAIR_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "anypair"



def file_stamp(path: Path) -> list[int]:
    """[size, mtime in ns]: what a verified file is remembered by. A file whose stamp is unchanged is
    trusted without hashing (one stat); any write changes the time, a truncation the size."""
    status = path.stat()
    return [status.st_size, status.st_mtime_ns]


def source_stamp(path: Path) -> Optional[list]:
    """[resolved path, *file_stamp] of a file, or of every file directly in a model folder: what a cache of
    work derived from a user's files is keyed by (a file replaced or edited in place gets a new stamp).
    None where there is nothing on disk to stamp."""
    try:
        resolved = Path(path).expanduser().resolve()
        files = [resolved] if resolved.is_file() else sorted(p for p in resolved.iterdir() if p.is_file())
        stamped = [[str(p), *file_stamp(p)] for p in files]
    except OSError:
        return None
    return stamped or None


def write_atomically(path: Path, data: bytes) -> None:
    """`data` to `path` under a temporary name beside it, then renamed: a reader never sees half a file.
    Raises OSError (a read-only or full disk)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as handle:
        temporary = Path(handle.name)
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)  # a full disk or a failed rename leaves no stray file
        raise
