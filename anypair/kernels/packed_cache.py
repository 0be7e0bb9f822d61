"""The kernels' interleaved layout of a GGUF kept on disk, so that a second load maps it instead of repacking.

At load the engine rearranges every Q4_1/Q5_0/Q8_0/Q4_K/Q5_K/Q6_K matrix into groups of 16 rows
(csrc/repack.c): for a 7B model that is seconds of work on 2 cores, and the result is a second copy of
the weights. The first load of a file repacks into anonymous huge pages, and a background thread
writes the result to a cache file. Later loads **map** the cache file read-only (`map_on_huge_pages`):
the kernels read the page cache's own pages, so a load costs no copy and no fresh memory (0.2 s at
Qwen2.5-7B's shape against 2.3-7 s to copy 5 GB into fresh huge pages on this project's Xeon, where
faulting in fresh memory is most of a copy's time), and processes loading the same model share one
copy of it. A mapping is used only where the page cache holds the file on 2 MB pages (a step over 4 KB
pages ran 25% slower, a TLB miss per 4 KB): a file cached on small pages is dropped from the cache and
read again through a mapping that asks for huge pages, once; where the OS still gives small pages, the
matrices are read (copied) into anonymous huge pages as before, on the engine's threads at once. The
writer, once its file is on disk, does the same check, so the next load finds the file on 2 MB pages.
(Repacking straight into the file's pages was tried: on this project's Xeon the dirty pages are
throttled at the disk's write rate, 12.6 s for the 7B load against 7.9 s in memory.) A mapped cache
file must not be truncated in place while a process uses it (anypair only ever replaces it by rename).

The cache is `$ANYPAIR_HOME/packed/<source key>-<layout key>.packed`:
- source key: a hash of the GGUF's resolved path; its size and mtime are recorded in the file and
  checked at every load, so a GGUF replaced in place is repacked (and its old cache replaced);
- layout key: a hash of csrc/repack.c, csrc/ap_common.h (the layouts and their structs), FORMAT and
  the CPU's Q6_K layout, so an edit of the layout code never reads bytes laid out by the old one.
The file: one region per matrix, each on a 4 KiB boundary (the whole file is mapped at once, so 2 MB
pages need no 2 MB regions: padding them cost 0.3 GB of RSS at gemma-2-9b's shape), then a JSON index,
then a trailer (index offset, index length, MAGIC). It is written under a temporary name and renamed only once its bytes
are on disk (fsync): a crash mid-write leaves no file that loads.
`ANYPAIR_LAYOUT_CACHE=0` (or the engine's `layout_cache=False`) turns the cache off; a read-only or
full disk falls back to the in-memory repack, with one warning line.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import mmap
import os
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from anypair.home import home
from anypair.kernels.huge_pages import madvise

logger = logging.getLogger("anypair")

#: the cache file's own format (bump on any change of the index or trailer)
FORMAT = 2
MAGIC = b"APLAYOUT"
_TRAILER = struct.Struct("<QQ8s")
_ALIGN = 4096  # regions on page boundaries; the whole file is mapped at once, so a region needs no 2 MB of its own
_HUGE_PAGE = 2 << 20
_SOURCES = Path(__file__).with_name("csrc")
_PIECE = 64 << 20  # a read's unit: small enough to share a matrix between the threads, large for few calls
_HUGE_SHARE = 0.9  # a mapping is used where at least this share of it is on 2 MB pages
_MADV_POPULATE_READ = 22  # Linux 5.14: fault a range in (from the page cache, or the disk), no copy


def cache_enabled(option: Optional[bool] = None) -> bool:
    """The engine's option where given, else $ANYPAIR_LAYOUT_CACHE (anything but 0/false/no/off: on)."""
    if option is not None:
        return option
    return os.environ.get("ANYPAIR_LAYOUT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def layout_key() -> str:
    """A hash of the code that decides the interleaved bytes and of this CPU's choice of Q6_K layout
    (kernels/build.py: q6k_layout): a change to either makes old caches unused."""
    from anypair.kernels.build import load_library

    digest = hashlib.sha256(f"format {FORMAT} q6_K {load_library().ap_packed_type(14)}".encode())
    for name in ("repack.c", "ap_common.h"):
        digest.update((_SOURCES / name).read_bytes())
    return digest.hexdigest()[:12]


def cache_dir() -> Path:
    return home() / "packed"


def cache_path(source: Path) -> Path:
    """Where the layout of `source` is kept (one file per GGUF and layout version)."""
    return cache_dir() / f"{hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]}-{layout_key()}.packed"


def _source_stamp(source: Path) -> dict:
    stat = source.stat()
    return {"path": str(source.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


class LayoutCache:
    """Where each interleaved matrix's bytes come from during one load, always into anonymous memory:
    read from a cache file already written (nothing to repack), or repacked and then written to a new
    cache file (`finish`), or repacked only (cache off or unusable). `buffer()` for each matrix in
    load order, then `finish()`."""

    def __init__(self, source: Path, enabled: Optional[bool] = None, threads: int = 1) -> None:
        self.source = Path(source)
        self.mode = "off"
        self.threads = max(1, int(threads))
        self._entries: dict[str, dict] = {}
        self._handle = None
        # read mode: the pool reading the cache's pieces, and each matrix's reads (its key, memory, repack)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._pending: list[tuple[str, np.ndarray, Callable[[np.ndarray], None], list[Future]]] = []
        if not cache_enabled(enabled):
            return
        self.path = cache_path(self.source)
        try:
            self._open_existing() or self._start_writing()
        except OSError as error:
            self._give_up(f"cannot use the layout cache {self.path} ({error.strerror or error})")

    @property
    def mapped_bytes(self) -> int:
        """The cache file's bytes this load maps (0 unless mapped)."""
        return len(self._region) if self.mode == "mapped" else 0

    # -- reading ------------------------------------------------------------------------------------

    def _open_existing(self) -> bool:
        """Open the cache if it is complete and made from this very file; False when there is none."""
        index = read_index(self.path)
        if index is None or index.get("source") != _source_stamp(self.source) or index.get("layout") != layout_key():
            return False
        self._entries = {entry["key"]: entry for entry in index["entries"]}
        self._region = map_on_huge_pages(self.path, self.threads)
        if self._region is not None:
            self._mapped = np.frombuffer(self._region, dtype=np.uint8)
            self.mode = "mapped"
            return True
        self._handle = open(self.path, "rb")
        self.mode = "read"
        return True

    def _read(self, key: str, kernel_type: int, size: int, allocate: Callable[[int], np.ndarray],
              repack: Callable[[np.ndarray], None]) -> Optional[np.ndarray]:
        """Matrix `key`'s interleaved bytes: mapped, its part of the cache file's mapping; else memory
        from `allocate` (anonymous huge pages) the pool's threads read them into by the time `finish()`
        returns (`repack` fills it instead where a read fails). None when the cache has no such matrix."""
        entry = self._entries.get(key)
        if entry is None or entry["size"] != size or entry["type"] != kernel_type:
            return None
        if self.mode == "mapped":  # read-only: the kernels only read a matrix
            return self._mapped[entry["offset"]:entry["offset"] + size]
        view = allocate(size)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="anypair-layout-read")
        reads = [self._pool.submit(_read_piece, self._handle.fileno(), view[start:start + _PIECE], entry["offset"] + start)
                 for start in range(0, size, _PIECE)]
        self._pending.append((key, view, repack, reads))
        return view

    def _wait_for_reads(self) -> None:
        """Every scheduled read done; a matrix whose read failed is repacked from the GGUF, one warning."""
        for key, view, repack, reads in self._pending:
            failures = [error for error in (read.exception() for read in reads) if error is not None]
            if failures:
                logger.warning("the layout cache %s: matrix %s could not be read (%s): repacking it in memory",
                               self.path, key, failures[0])
                repack(view)
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    # -- writing ------------------------------------------------------------------------------------

    def _start_writing(self) -> bool:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale(folder, self.path)
        self._temp = self.path.with_name(f"{self.path.name}.tmp{os.getpid()}")
        self._handle = open(self._temp, "w+b")
        self._end = 0
        self._arrays: list[np.ndarray] = []
        self.mode = "write"
        return True

    def _give_up(self, why: str) -> None:
        """Off for this load (the repack goes to anonymous memory), with one warning line."""
        if self.mode == "write" and self._handle is not None:
            self._handle.close()
            self._temp.unlink(missing_ok=True)
        self.mode = "off"
        logger.warning("%s: repacking in memory instead (set ANYPAIR_LAYOUT_CACHE=0 to skip the cache)", why)

    # -- the engine's side --------------------------------------------------------------------------

    def buffer(self, key: str, kernel_type: int, size: int, allocate: Callable[[int], np.ndarray],
               repack: Callable[[np.ndarray], None]) -> tuple[np.ndarray, bool]:
        """(the `size` bytes matrix `key` is read from, whether the cache fills them: then they hold its
        interleaved layout once `finish()` returns). Otherwise `repack(view)` has filled them already.
        `allocate(size)`: the memory either way (huge_pages.huge_page_bytes, passed in by ops, which imports this
        module's users, not the other way)."""
        if self.mode in ("read", "mapped"):
            view = self._read(key, kernel_type, size, allocate, repack)
            if view is not None:
                return view, True
            logger.warning("the layout cache %s has no matrix %s of this shape: repacking it in memory", self.path, key)
        view = allocate(size)
        repack(view)
        if self.mode == "write":  # kept for the file `finish()` writes
            self._entries[key] = {"key": key, "type": kernel_type, "offset": self._end, "size": size}
            self._arrays.append(view)
            self._end += -(-size // _ALIGN) * _ALIGN
        return view, False

    def finish(self) -> None:
        """After the last matrix: the file written by a background thread from the matrices' memory
        (the load does not wait for the disk; the process waits for the thread at exit); a cache
        read from is closed."""
        if self.mode == "read" and self._handle is not None:
            self._wait_for_reads()
            self._handle.close()
            self._handle = None
        if self.mode != "write":
            return
        index = json.dumps({"source": _source_stamp(self.source), "layout": layout_key(), "format": FORMAT,
                            "entries": list(self._entries.values())}).encode()
        self.mode = "written"
        self._committer = threading.Thread(target=_write, name="anypair-layout-cache", daemon=False,
                                           args=(self._handle, self._temp, self.path, self._arrays,
                                                 list(self._entries.values()), self._end, index))
        self._committer.start()


def _read_piece(fd: int, view: np.ndarray, offset: int) -> None:
    """One piece of a matrix from the cache file (os.preadv lets go of the GIL: the threads read, and
    fault in their pages, at once)."""
    done = os.preadv(fd, [memoryview(view)], offset)
    if done != view.nbytes:
        raise OSError(f"short read: {done} of {view.nbytes} bytes at offset {offset}")


def _write(handle, temp: Path, final: Path, arrays: list, entries: list, end: int, index: bytes) -> None:
    """The regions, the index and the trailer; then durable (fsync), then visible (rename into
    place, fsync of the folder). Any error: the temporary file goes, one warning, the next load repacks."""
    try:
        os.posix_fallocate(handle.fileno(), 0, end + len(index) + _TRAILER.size)  # a full disk fails here, at once
        for array, entry in zip(arrays, entries):
            view = memoryview(array)
            for at in range(0, entry["size"], _PIECE):  # pieces: one write call takes at most ~2 GB
                os.pwrite(handle.fileno(), view[at:at + _PIECE], entry["offset"] + at)
        os.pwrite(handle.fileno(), index + _TRAILER.pack(end, len(index), MAGIC), end)
        os.fsync(handle.fileno())
        handle.close()
        os.replace(temp, final)
        folder = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        warmed = map_on_huge_pages(final, 1)  # the next load finds the file on 2 MB pages, or knows it cannot
        if warmed is not None:
            warmed.close()
    except OSError as error:
        handle.close()
        temp.unlink(missing_ok=True)
        logger.warning("could not write the layout cache %s (%s): the next load repacks again "
                       "(set ANYPAIR_LAYOUT_CACHE=0 to skip the cache)", final, error.strerror or error)


def map_on_huge_pages(path: Path, threads: int = 1) -> Optional[mmap.mmap]:
    """`path` mapped read-only and faulted in, at least _HUGE_SHARE of it on 2 MB pages; None where the
    OS cannot (no transparent huge pages for files, a small file, or pages still small after one retry).
    Pages the cache holds on 4 KB stay on 4 KB in every mapping: those the file has are dropped from the
    page cache (clean, on disk) and read again through a mapping that asks for huge pages."""
    if not _huge_pages_possible():
        return None
    try:
        with open(path, "rb") as handle:
            for attempt in range(2):
                region = mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
                try:
                    region.madvise(mmap.MADV_HUGEPAGE)
                except OSError:  # no huge pages for this mapping: the share below says so
                    pass
                _populate(region, threads)
                if _huge_share(region) >= _HUGE_SHARE:
                    return region
                region.close()
                if attempt == 0:
                    os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, ValueError):
        pass
    return None


def _huge_pages_possible() -> bool:
    """Linux with transparent huge pages not turned off (madvise or always)."""
    try:
        setting = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[never]" not in setting and hasattr(mmap, "MADV_HUGEPAGE") and hasattr(os, "posix_fadvise")


def mapping_address(region: mmap.mmap) -> int:
    """Where `region` starts in this process's memory."""
    view = np.frombuffer(region, dtype=np.uint8)
    try:
        return int(view.ctypes.data)
    finally:
        del view  # an exported buffer would keep the region from closing


def _populate(region: mmap.mmap, threads: int) -> None:
    """Every page of `region` faulted in (read from the disk where it is not cached), in pieces on
    `threads` threads (a call into libc lets go of the GIL); before Linux 5.14 (no MADV_POPULATE_READ)
    by reading a byte of every page."""
    start, size = mapping_address(region), len(region)

    def piece(at: int) -> bool:
        return madvise(start + at, min(_PIECE, size - at), _MADV_POPULATE_READ) == 0

    with ThreadPoolExecutor(max(1, threads)) as pool:
        if all(pool.map(piece, range(0, size, _PIECE))):
            return
    view = np.frombuffer(region, dtype=np.uint8)
    int(view[::mmap.PAGESIZE].sum())
    del view  # an exported buffer would keep the region from closing


def _huge_share(region: mmap.mmap) -> float:
    """The share of `region`'s whole 2 MB pages that the process maps as 2 MB pages (/proc/self/smaps)."""
    whole = len(region) // _HUGE_PAGE * _HUGE_PAGE
    if whole == 0:
        return 0.0
    header = f"{mapping_address(region):x}-"
    try:
        with open("/proc/self/smaps") as smaps:
            found = False
            for line in smaps:
                if line.startswith(header):
                    found = True
                elif found and line.startswith("FilePmdMapped:"):
                    return int(line.split()[1]) * 1024 / whole
                elif found and "-" in line.split(" ", 1)[0]:
                    break
    except OSError:
        pass
    return 0.0


def read_index(path: Path) -> Optional[dict]:
    """The index of a complete cache file, or None (absent, truncated, or not one)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size < _TRAILER.size:
                return None
            handle.seek(size - _TRAILER.size)
            offset, length, magic = _TRAILER.unpack(handle.read(_TRAILER.size))
            if magic != MAGIC or offset + length + _TRAILER.size != size:
                return None
            handle.seek(offset)
            index = json.loads(handle.read(length))
    except (OSError, ValueError):
        return None
    if index.get("format") != FORMAT or any(e["offset"] + e["size"] > offset for e in index.get("entries", [])):
        return None
    return index


def _remove_stale(folder: Path, path: Path) -> None:
    """Before writing a cache: the same GGUF's caches of other layout versions, caches whose GGUF is
    gone, and temporary files whose writer is gone. A GGUF keeps at most one cache on disk, and a
    deleted model's cache does not outlive it."""
    source_key = path.name.split("-")[0]
    for other in folder.iterdir():
        if ".tmp" in other.name:
            pid = other.name.rsplit(".tmp", 1)[-1]
            if pid.isdigit() and not _alive(int(pid)):
                other.unlink(missing_ok=True)
        elif other.name.startswith(source_key + "-") and other.name != path.name:
            other.unlink(missing_ok=True)
        elif other.suffix == ".packed":
            index = read_index(other)
            if index is None or not Path(index["source"]["path"]).exists():
                other.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
