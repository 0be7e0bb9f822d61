"""Anonymous memory for the interleaved weights on 2 MB pages, without making a load wait for 2 MB
faults.

A step streams every weight once, and on 4 KB pages each 4 KB costs a TLB miss on the way (2-3% of a
step of the default pair, 3-10% at 7B, measured on this project's Zen 4 and Xeon). But a 2 MB fault
is the dearest way to get fresh memory: the kernel must find (or reclaim and compact) a free 2 MB
block and zero it, and in a VM a block the host has not backed lately costs the host's faults too.
Measured on this project's Intel Xeon VM (2 vCPUs; 2 GB touched, five times alternating): 2 MB faults
0.47, 1.04 and 8.65 GB/s, 4 KB faults 3.08 and 3.09 GB/s; a first load of Qwen2.5-7B's shape spent
53% of its samples zeroing 2 MB pages. Which 2 MB blocks are slow cannot be told beforehand (with 4 GB
of free 2 MB blocks the load still took 5.5 s), and at times the faults got no 2 MB page at all.

So `huge_page_bytes` faults the weights on 4 KB pages (advised MADV_NOHUGEPAGE until then, so also
where transparent huge pages are `always`), at a steady rate, and a background thread moves them onto
2 MB pages once the load is over (MADV_COLLAPSE, Linux 6.1: the same addresses and bytes, so the
kernels never see the change, and the kernel's search for blocks happens there, off the load's
path): at once where the engine says its load is done (`collapse_later`), else once no allocation
came for QUIET_S. Collapsing Qwen2.5-7B's 4.2 GB takes 2.5 s of a core alone, 6-7 s beside the
engine's two threads, whose first prompt it slows by ~2 s. (Under SCHED_IDLE it slowed that prompt
as much, the kernel's collapse not yielding to them, and a process that never idles kept 4 KB pages
to its end: not kept.) First loads at that shape, two runs: 2.74 / 6.24 s against 4.51 / 6.45 s
with 2 MB faults (llama.cpp 7.20 / 2.82 s; README, "First loads on 4 KB pages"). Where MADV_COLLAPSE is
missing the memory is advised MADV_HUGEPAGE instead, for khugepaged to collapse in its own time.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import mmap
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Optional

import numpy as np

logger = logging.getLogger("anypair")

HUGE_PAGE = 2 << 20
_MADV_COLLAPSE = 25  # Linux 6.1
_COLLAPSE_PIECE = 32 << 20  # one call's range: the thread lets go of the kernel's locks between pieces
QUIET_S = 0.5  # no allocation for this long: a load is over (where no engine said so)


@dataclass
class CollapseStatus:
    """What the background collapse did in this process so far."""

    pending_bytes: int = 0  # faulted on 4 KB pages, not collapsed yet
    collapsed_bytes: int = 0
    failed_bytes: int = 0  # the kernel could not (no memory to compact into) or does not (no MADV_COLLAPSE)
    seconds: float = 0.0


_lock = threading.Lock()
_later: list[tuple[weakref.ref, int, int]] = []  # (the mapping, its first 2 MB page, bytes on whole 2 MB pages)
_status = CollapseStatus()
_worker: Optional[threading.Thread] = None
_last_allocation = 0.0
_go = False  # an engine's load is over: collapse without waiting for QUIET_S


def huge_page_bytes(size: int) -> np.ndarray:
    """`size` uninitialised bytes, 2 MB-aligned, faulted on 4 KB pages and collapsed onto 2 MB pages
    after the load (in the background)."""
    if size < HUGE_PAGE or not hasattr(mmap, "MADV_NOHUGEPAGE"):  # small, or not Linux
        return np.empty(size, dtype=np.uint8)
    global _last_allocation, _worker
    region = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(region, dtype=np.uint8)
    start = (-whole.ctypes.data) % HUGE_PAGE
    view = whole[start:start + size]
    length = size // HUGE_PAGE * HUGE_PAGE
    region.madvise(mmap.MADV_NOHUGEPAGE, start, length)
    with _lock:
        _later.append((weakref.ref(region), int(view.ctypes.data), length))
        _status.pending_bytes += length
        _last_allocation = time.monotonic()
        if _worker is None:
            _worker = threading.Thread(target=_collapse_all, name="anypair-huge-pages", daemon=True)
            _worker.start()
    return view


def collapse_later() -> None:
    """An engine's load is over: the background thread collapses what it allocated now (not after
    QUIET_S)."""
    global _go
    with _lock:
        _go = True


def wait_for_collapse(timeout: Optional[float] = None) -> CollapseStatus:
    """Block until the background collapse is done (or `timeout` seconds); what it did so far."""
    worker = _worker
    if worker is not None:
        worker.join(timeout)
    return status()


def status() -> CollapseStatus:
    with _lock:
        return CollapseStatus(**vars(_status))


def madvise(address: int, length: int, advice: int) -> int:
    """libc's madvise on [address, address + length) of any mapping (Python's `mmap.madvise` takes only
    ranges of its own object, and lets go of no lock): 0, or the failure's errno."""
    return 0 if _libc().madvise(address, length, advice) == 0 else ctypes.get_errno()


@functools.lru_cache(maxsize=None)
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _next_region() -> Optional[tuple[weakref.ref, int, int]]:
    """The oldest region waiting, once the load is over; None (and the worker gone) when none waits."""
    global _worker, _go
    while True:
        with _lock:
            if not _later:
                _worker, _go = None, False  # under the lock: a region queued after this starts a new worker
                return None
            if _go or time.monotonic() - _last_allocation >= QUIET_S:
                return _later.pop(0)
        time.sleep(0.05)


def _collapse_all() -> None:
    supported = True
    while (item := _next_region()) is not None:
        ref, start, length = item
        t0 = time.perf_counter()
        done = 0
        for at in range(0, length, _COLLAPSE_PIECE):
            region = ref()  # held while the kernel works on it
            if region is None:  # the engine let go of the matrix: its memory is gone
                break
            piece = min(_COLLAPSE_PIECE, length - at)
            # MADV_COLLAPSE refuses MADV_NOHUGEPAGE memory; without MADV_COLLAPSE this advice is khugepaged's cue
            madvise(start + at, piece, mmap.MADV_HUGEPAGE)
            error = madvise(start + at, piece, _MADV_COLLAPSE) if supported else None
            if error == 0:
                done += piece
            elif error == 22:  # EINVAL: no MADV_COLLAPSE before Linux 6.1
                supported = False
                logger.debug("huge pages: no MADV_COLLAPSE here; khugepaged collapses the weights in its time")
            del region
        gone = ref() is None
        with _lock:
            _status.pending_bytes -= length
            _status.collapsed_bytes += done
            _status.failed_bytes += 0 if gone else length - done
            _status.seconds += time.perf_counter() - t0
