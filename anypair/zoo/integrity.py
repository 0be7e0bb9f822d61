"""SHA-256 checks: a file that does not match its pinned hash is deleted and reported, never used."""
from __future__ import annotations

import hashlib
from pathlib import Path

from anypair.errors import FetchError

_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def reject(path: Path, what: str, expected: str, actual: str) -> FetchError:
    """Delete a bad file and build the error that names it."""
    path.unlink(missing_ok=True)
    return FetchError(
        f"{what}: expected {expected}, got {actual}; the file {path} was deleted. "
        "Run `anypair fetch` again; if it fails the same way, the registry's copy has changed."
    )


def verify_file(path: Path, *, sha256: str, size: int, label: str, actual_sha256: str | None = None) -> None:
    """Raise FetchError (after deleting `path`) unless it has the pinned size and SHA-256.

    `actual_sha256` lets a caller that hashed the bytes while writing them skip a second read.
    """
    actual_size = path.stat().st_size
    if actual_size != size:
        raise reject(path, f"Size mismatch for {label}", f"{size} bytes", f"{actual_size} bytes")
    actual = actual_sha256 if actual_sha256 is not None else sha256_of(path)
    if actual != sha256:
        raise reject(path, f"SHA-256 mismatch for {label}", sha256, actual)
