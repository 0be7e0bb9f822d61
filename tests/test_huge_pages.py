"""The weights' memory: 2 MB-aligned, on 2 MB pages at fault time only where the kernel has free
blocks, else on 4 KB pages and collapsed in the background after the load (anypair/kernels/huge_pages.py)."""
import mmap
import sys

import numpy as np
import pytest

from anypair.kernels import huge_pages


def _mapping_of(address: int) -> dict:
    """/proc/self/smaps' fields of the mapping that holds `address`."""
    fields, inside = {}, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:
                if inside:
                    break
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= address < high
            elif inside:
                name, value = line.split(":", 1)
                fields[name] = value.strip()
    return fields


def test_interleaved_copies_start_on_huge_page_boundaries():
    """Large interleaved copies live in their own 2 MB-aligned mapping; small ones are plain arrays.
    Either way every byte is writable and the size is exact."""
    large, small = huge_pages.huge_page_bytes(5 << 20), huge_pages.huge_page_bytes(4096)
    assert large.nbytes == 5 << 20 and large.ctypes.data % (2 << 20) == 0
    large[:] = 7
    assert int(large[-1]) == 7 and small.nbytes == 4096


def test_free_2mb_blocks_are_read_from_the_buddy_allocators_counts():
    text = ("Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3\n"
            "Node 0, zone   Normal   6890   5328   3466   1917   1033   2839   1179    395    171     64     23\n")
    if mmap.PAGESIZE == 4096:
        assert huge_pages.blocks_in_buddyinfo(text) == (1 + 2 * 3) + (64 + 2 * 23)
    if sys.platform == "linux":
        assert huge_pages.free_huge_blocks() >= 0


@pytest.mark.skipif(sys.platform != "linux", reason="transparent huge pages are Linux's")
def test_memory_is_advised_for_huge_pages_only_where_free_blocks_cover_it(monkeypatch):
    """Where the kernel would have to compact memory for every 2 MB fault, the load must not wait for
    it: the memory is faulted on 4 KB pages and queued for the background collapse instead."""
    monkeypatch.setattr(huge_pages, "free_huge_blocks", lambda: 1 << 20)
    plenty = huge_pages.huge_page_bytes(8 << 20)
    assert "hg" in _mapping_of(plenty.ctypes.data)["VmFlags"].split()
    before = huge_pages.status().pending_bytes
    monkeypatch.setattr(huge_pages, "free_huge_blocks", lambda: 0)
    scarce = huge_pages.huge_page_bytes(8 << 20)
    assert "hg" not in _mapping_of(scarce.ctypes.data)["VmFlags"].split()
    assert huge_pages.status().pending_bytes == before + (8 << 20)
    del plenty, scarce
    huge_pages.collapse_later()
    assert huge_pages.wait_for_collapse(60).pending_bytes == 0  # a matrix let go of is skipped


@pytest.mark.skipif(sys.platform != "linux", reason="transparent huge pages are Linux's")
def test_the_background_collapse_keeps_every_byte_and_moves_them_onto_huge_pages(monkeypatch):
    monkeypatch.setattr(huge_pages, "free_huge_blocks", lambda: 0)
    weights = huge_pages.huge_page_bytes(16 << 20)
    weights[:] = np.random.default_rng(0).integers(0, 256, size=weights.nbytes, dtype=np.uint8)
    expected = weights.copy()
    before = huge_pages.status()
    huge_pages.collapse_later()
    after = huge_pages.wait_for_collapse(60)
    assert after.pending_bytes == 0 and np.array_equal(weights, expected)
    collapsed = after.collapsed_bytes - before.collapsed_bytes
    failed = after.failed_bytes - before.failed_bytes
    assert collapsed + failed == 16 << 20
    if collapsed:  # the kernel had MADV_COLLAPSE and the memory to do it
        assert int(_mapping_of(weights.ctypes.data)["AnonHugePages"].split()[0]) * 1024 >= collapsed
