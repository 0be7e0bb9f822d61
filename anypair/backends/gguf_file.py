"""A GGUF file's header read in a fraction of a second, and its tensors as memory-mapped blocks.

gguf's own `GGUFReader` builds a numpy view for every element of every metadata array: on a model
with a 151k-token vocabulary that is 3 million views and 10-18 s, while the engine needs a dozen
numbers from the header. This reader decodes scalars and strings, steps over arrays (recording
their length), and checks that the file holds every byte its tensor table promises, so a truncated
download is named as such instead of failing later as a reshape error. Block sizes and type names
come from gguf's constants (the format's definition).
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anypair.errors import InputError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of the file: ggml shape (ne0 = row length first), type, and its bytes (a view)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    data: np.ndarray  # uint8 [rows, row_bytes] for 2-D tensors, [bytes] otherwise

    @property
    def type_name(self) -> str:
        from gguf import GGMLQuantizationType

        return GGMLQuantizationType(self.ggml_type).name


class GGUFFile:
    """Metadata (arrays as their length) and tensors of a GGUF file, memory-mapped read-only."""

    def __init__(self, path: Path) -> None:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(f"no such file: {self.path}")
        with open(self.path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        buffer = self._map
        self._offset = 0
        if buffer[:4] != b"GGUF":
            raise InputError(f"{self.path} is not a GGUF file (it does not start with 'GGUF')")
        try:
            version, tensor_count, kv_count = struct.unpack_from("<IQQ", buffer, 4)
            self._offset = 24
            if version < 2:
                raise InputError(f"{self.path} is GGUF version {version}; only versions 2 and later are read")
            self.metadata: dict[str, Any] = {}
            for _ in range(kv_count):
                key = self._string()
                self.metadata[key] = self._value(self._unpack("<I"))
            infos = []
            for _ in range(tensor_count):
                name = self._string()
                dims = struct.unpack_from(f"<{self._unpack('<I')}Q", buffer, self._offset)
                self._offset += 8 * len(dims)
                ggml_type, offset = self._unpack("<I"), self._unpack("<Q")
                infos.append((name, tuple(int(d) for d in dims), int(ggml_type), int(offset)))
        except struct.error:
            raise InputError(f"{self.path} is truncated inside its header ({len(buffer)} bytes): "
                             "fetch the file again (`anypair fetch --verify` for zoo models)") from None
        alignment = int(self.metadata.get("general.alignment", 32))
        data_start = -(-self._offset // alignment) * alignment
        self.tensors: dict[str, GGUFTensor] = {}
        needed = data_start
        layouts = []
        for name, dims, ggml_type, offset in infos:
            try:
                block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
            except (ValueError, KeyError):
                raise InputError(f"{self.path}: tensor {name} has ggml type {ggml_type}, which this gguf "
                                 "package does not know: upgrade gguf (`pip install -U gguf`)") from None
            row_bytes = dims[0] // block * type_size
            rows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
            layouts.append((name, dims, ggml_type, data_start + offset, rows, row_bytes))
            needed = max(needed, data_start + offset + rows * row_bytes)
        if needed > len(buffer):
            raise InputError(f"{self.path} is truncated: its header promises {needed:,} bytes, the file has "
                             f"{len(buffer):,}; fetch it again (`anypair fetch --verify` for zoo models)")
        whole = np.frombuffer(buffer, dtype=np.uint8)
        self._base_address = whole.ctypes.data
        for name, dims, ggml_type, start, rows, row_bytes in layouts:
            data = whole[start:start + rows * row_bytes]
            self.tensors[name] = GGUFTensor(name, dims, ggml_type, data.reshape(rows, row_bytes) if len(dims) > 1 else data)

    def release_pages(self, view: np.ndarray) -> None:
        """Drop the resident pages behind `view` (a tensor's bytes) from this process: for tensors the
        kernels copied into their own layout, so the file's pages do not count twice in the RSS. The
        view stays valid (a later read maps the pages again)."""
        page = mmap.PAGESIZE
        start = view.ctypes.data - self._base_address
        first, end = -(-start // page) * page, (start + view.nbytes) // page * page
        if end > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, end - first)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    # -- decoding ----------------------------------------------------------------------------------

    def _unpack(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self._map, self._offset)
        self._offset += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        length = self._unpack("<Q")
        raw = self._map[self._offset:self._offset + length]
        if len(raw) != length:
            raise struct.error("string past the end")
        self._offset += length
        return raw.decode("utf-8", errors="replace")

    def _value(self, value_type: int):
        if value_type in _SCALARS:
            return self._unpack(_SCALARS[value_type])
        if value_type == _STRING:
            return self._string()
        if value_type == _ARRAY:
            element_type, count = self._unpack("<I"), self._unpack("<Q")
            if element_type in _SCALARS:
                self._offset += count * struct.calcsize(_SCALARS[element_type])
            elif element_type == _STRING:
                for _ in range(count):  # each string says its own length: step over them
                    self._offset += 8 + struct.unpack_from("<Q", self._map, self._offset)[0]
            else:
                for _ in range(count):
                    self._value(element_type)
            return ArrayOf(count)
        raise struct.error(f"unknown GGUF value type {value_type}")


@dataclass(frozen=True)
class ArrayOf:
    """A metadata array that was stepped over: only its length is kept."""

    length: int
