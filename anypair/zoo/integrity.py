"""Is a file what it should be? SHA-256 checks against pinned hashes (a file that does not match is
deleted and reported, never used), cheap size-and-time stamps that say when a verified file must be
hashed again, and the GGUF completeness check (the tensor data the header promises is in the file)."""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
from pathlib import Path

from anypair.errors import DamagedFileError, FetchError

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


# -- GGUF completeness ---------------------------------------------------------------------------------

class _HeaderOverrun(Exception):
    """The header claims more bytes than the file has."""


class _NotGguf(ValueError):
    """The file does not start with GGUF's magic bytes."""


class _Reader:
    """Little-endian reads from a memory-mapped GGUF header, each checked against the file's end."""

    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise _HeaderOverrun
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def skip(self, size: int) -> None:
        if size < 0 or self.pos + size > len(self.data):
            raise _HeaderOverrun
        self.pos += size

    def string(self) -> bytes:
        length = self.take("<Q")
        start = self.pos
        self.skip(length)
        return bytes(self.data[start:self.pos])


def _skip_value(reader: _Reader, value_type: int, scalar_sizes: dict[int, int], string_type: int,
                array_type: int) -> None:
    if value_type in scalar_sizes:
        reader.skip(scalar_sizes[value_type])
    elif value_type == string_type:
        reader.skip(reader.take("<Q"))
    elif value_type == array_type:
        item_type, count = reader.take("<I"), reader.take("<Q")
        if item_type in scalar_sizes:
            reader.skip(scalar_sizes[item_type] * count)
        else:
            for _ in range(count):
                _skip_value(reader, item_type, scalar_sizes, string_type, array_type)
    else:
        raise ValueError(f"unknown metadata value type {value_type}")


def gguf_data_end(path: Path) -> int:
    """The byte where the last tensor's data ends, as the GGUF header says (ValueError: the header is
    not a GGUF header (_NotGguf), or is corrupt; _HeaderOverrun: the header itself runs past the file's end)."""
    from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType

    scalar_sizes = {GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1, GGUFValueType.UINT16: 2,
                    GGUFValueType.INT16: 2, GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4,
                    GGUFValueType.FLOAT32: 4, GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8,
                    GGUFValueType.FLOAT64: 8}
    scalar_sizes = {int(kind): size for kind, size in scalar_sizes.items()}
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        reader = _Reader(data)
        if reader.take("<I") != GGUF_MAGIC:
            raise _NotGguf("it does not start with the bytes 'GGUF'")
        version = reader.take("<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} is not one anypair reads (2 or 3)")
        tensor_count, metadata_count = reader.take("<Q"), reader.take("<Q")
        alignment = GGUF_DEFAULT_ALIGNMENT
        for _ in range(metadata_count):
            key = reader.string()
            value_type = reader.take("<I")
            if key == b"general.alignment" and value_type == GGUFValueType.UINT32:
                alignment = reader.take("<I")
            else:
                _skip_value(reader, value_type, scalar_sizes, int(GGUFValueType.STRING), int(GGUFValueType.ARRAY))
        if alignment <= 0:
            raise ValueError(f"its alignment is {alignment}")
        data_end = 0
        for _ in range(tensor_count):
            name = reader.string()
            dims = [reader.take("<Q") for _ in range(reader.take("<I"))]
            type_id, offset = reader.take("<I"), reader.take("<Q")
            try:
                block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
            except (ValueError, KeyError):
                raise ValueError(f"tensor {name.decode(errors='replace')!r} has unknown type {type_id}") from None
            elements = 1
            for dim in dims:
                elements *= dim
            data_end = max(data_end, offset + elements // block_size * type_size)
        data_start = -(-reader.pos // alignment) * alignment
        return data_start + data_end


def check_gguf_complete(path: str | os.PathLike) -> None:
    """Raise DamagedFileError (an InputError), in one line naming the file and what to do, unless
    `path` is a GGUF file holding all the tensor data its header promises. Reads the header only
    (a memory map; no tensor data is touched)."""
    path = Path(path)
    advice = "download it again (a zoo model's: `anypair fetch --verify NAME`)"
    if not path.is_file():
        raise DamagedFileError(f"no such file: {path}; give the path of an existing .gguf file" if not path.exists()
                               else f"{path} is not a file; give the path of a .gguf file")
    size = path.stat().st_size
    try:
        end = gguf_data_end(path) if size else 0
    except _HeaderOverrun:
        raise DamagedFileError(f"{path} is truncated or corrupt: its GGUF header runs past the end of the file "
                               f"({size} bytes); {advice}") from None
    except _NotGguf as error:
        raise DamagedFileError(f"{path} is not a GGUF file ({error}); give a .gguf model file") from None
    except ValueError as error:
        raise DamagedFileError(f"{path} is a corrupt GGUF file ({error}); {advice}") from None
    if size == 0:
        raise DamagedFileError(f"{path} is empty, not a GGUF file; {advice}")
    if size < end:
        raise DamagedFileError(f"{path} is truncated: its header promises {end} bytes of header and tensor data, "
                               f"the file has {size}; {advice}")


def folder_problem(folder: Path) -> str | None:
    """What is wrong with a model folder, naming the file (None when nothing obvious is): damaged
    JSON, a missing tokenizer, safetensors whose header or length is bad."""
    from safetensors import safe_open

    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        path = folder / name
        if path.is_file():
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                return f"{path} is not valid JSON ({exc}): the file is damaged or half-written"
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        return f"{folder} has no tokenizer (tokenizer.json or tokenizer.model)"
    weights = sorted(folder.glob("*.safetensors"))
    for path in weights:
        try:
            with safe_open(path, framework="pt"):
                pass
        except Exception as exc:  # SafetensorError and OSError alike: the file is unusable
            return f"{path} is not a readable safetensors file ({exc}): the file is damaged or truncated"
    if not weights and not any(folder.glob("*.bin")):
        return f"{folder} has no weights (*.safetensors)"
    return None
