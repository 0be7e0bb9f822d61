"""Anonymous memory for the interleaved weights on 2 MB pages, without making a load wait for the
kernel to compact memory for them.

A step streams every weight once, and on 4 KB pages each 4 KB costs a TLB miss on the way (2-3% of a
step of the default pair, 3-25% of a 7B step, measured on this project's Zen 4 and Xeon). With
transparent huge pages in `madvise` mode (most distributions' default) a fault in a region advised
MADV_HUGEPAGE takes a free 2 MB block; where none is free (memory full of page cache, or cut into
4 KB pieces by an earlier process) the fault waits while the kernel reclaims and compacts memory for
it. So the first load of a 7B file took 6.9-7.1 s where it had to, against 2.3-2.6 s where free
blocks were at hand, and llama.cpp's 3.4 s (it stays on 4 KB pages; Intel Xeon, 2 vCPUs).

`huge_page_bytes` therefore asks for huge pages at fault time only while the kernel's free 2 MB
blocks (/proc/buddyinfo) cover the allocation; the rest is faulted on 4 KB pages at once and
`collapse_later` has a background thread collapse it into 2 MB pages after the load has returned
(MADV_COLLAPSE, Linux 6.1: the same addresses and bytes, so the kernels never see the change; the
reclaim and compaction happen there, off the load's path). Where MADV_COLLAPSE is missing, the
region is advised MADV_HUGEPAGE instead, for khugepaged to collapse in its own time.
"""
from __future__ import annotations

import ctypes
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
#: free 2 MB blocks left to the rest of the system when an allocation asks for huge pages at fault time
_RESERVE_BLOCKS = 128


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


def free_huge_blocks() -> Optional[int]:
    """Free 2 MB blocks the kernel holds now (/proc/buddyinfo, orders 9 and up, all zones); None where
    it does not say (not Linux)."""
    try:
        with open("/proc/buddyinfo") as info:
            return blocks_in_buddyinfo(info.read())
    except (OSError, ValueError):
        return None


def blocks_in_buddyinfo(text: str) -> int:
    """2 MB blocks in /proc/buddyinfo's text: each line "Node 0, zone Normal" and the free blocks of
    orders 0, 1, ... (a page << order); with 4 KB pages a block of order 10 is two of 2 MB."""
    huge = (HUGE_PAGE // mmap.PAGESIZE).bit_length() - 1
    blocks = 0
    for line in text.splitlines():
        counts = [int(n) for n in line.split()[4:]]
        blocks += sum(count << (order - huge) for order, count in enumerate(counts) if order >= huge)
    return blocks


def huge_page_bytes(size: int) -> np.ndarray:
    """`size` uninitialised bytes, 2 MB-aligned: on 2 MB pages at fault time where the kernel has the
    free blocks, else on 4 KB pages now and collapsed after the load (`collapse_later`)."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only
    if size < HUGE_PAGE or advice is None:
        return np.empty(size, dtype=np.uint8)
    region = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(region, dtype=np.uint8)
    start = (-whole.ctypes.data) % HUGE_PAGE
    view = whole[start:start + size]
    free = free_huge_blocks()
    if free is None or free - _RESERVE_BLOCKS >= -(-size // HUGE_PAGE):
        region.madvise(advice, start, size - size % mmap.PAGESIZE)
    else:
        with _lock:
            _later.append((weakref.ref(region), int(view.ctypes.data), size // HUGE_PAGE * HUGE_PAGE))
            _status.pending_bytes += size // HUGE_PAGE * HUGE_PAGE
    return view


def collapse_later() -> None:
    """Start the background collapse of what was faulted on 4 KB pages (after a load: the thread then
    competes with nothing the load waits for); a no-op when nothing waits."""
    global _worker
    with _lock:
        if not _later or _worker is not None:  # a running worker takes what was queued since it started
            return
        _worker = threading.Thread(target=_collapse_all, name="anypair-huge-pages", daemon=True)
        _worker.start()


def wait_for_collapse(timeout: Optional[float] = None) -> CollapseStatus:
    """Block until the background collapse is done (or `timeout` seconds); what it did so far."""
    worker = _worker
    if worker is not None:
        worker.join(timeout)
    return status()


def status() -> CollapseStatus:
    with _lock:
        return CollapseStatus(**vars(_status))


def _collapse_all() -> None:
    global _worker
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    supported = True
    while True:
        with _lock:
            if not _later:
                _worker = None  # under the lock: a region queued after this starts a new worker
                return
            ref, start, length = _later.pop(0)
        t0 = time.perf_counter()
        done = 0
        for at in range(0, length, _COLLAPSE_PIECE):
            region = ref()  # held while the kernel works on it
            if region is None:  # the engine let go of the matrix: its memory is gone
                break
            if supported and libc.madvise(start + at, min(_COLLAPSE_PIECE, length - at), _MADV_COLLAPSE) == 0:
                done += min(_COLLAPSE_PIECE, length - at)
            elif supported and ctypes.get_errno() == 22:  # EINVAL: no MADV_COLLAPSE before Linux 6.1
                supported = False
                logger.debug("huge pages: no MADV_COLLAPSE here; khugepaged collapses the weights in its time")
            if not supported:
                libc.madvise(start + at, length - at, mmap.MADV_HUGEPAGE)
                break
            del region
        gone = ref() is None
        with _lock:
            _status.pending_bytes -= length
            _status.collapsed_bytes += done
            _status.failed_bytes += 0 if gone else length - done
            _status.seconds += time.perf_counter() - t0
