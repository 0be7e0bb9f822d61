"""The weights' memory: 2 MB-aligned, faulted on 4 KB pages, collapsed onto 2 MB pages in the background
after the load (anypair/kernels/huge_pages.py)."""
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


@pytest.mark.skipif(sys.platform != "linux", reason="transparent huge pages are Linux's")
def test_the_load_faults_4kb_pages_and_a_matrix_let_go_of_is_not_collapsed():
    """A 2 MB fault can cost the load far more than 4 KB ones (the kernel's search for a free block, a
    VM host's faults): the weights are faulted on 4 KB pages, even where huge pages are `always`, and
    queued for the background collapse; a matrix freed before its turn is skipped."""
    before = huge_pages.status()
    weights = huge_pages.huge_page_bytes(8 << 20)
    assert "nh" in _mapping_of(weights.ctypes.data)["VmFlags"].split()
    weights[:] = 1
    assert int(_mapping_of(weights.ctypes.data)["AnonHugePages"].split()[0]) == 0
    del weights
    huge_pages.collapse_later()
    after = huge_pages.wait_for_collapse(60)
    assert after.pending_bytes == 0 and after.collapsed_bytes == before.collapsed_bytes


@pytest.mark.skipif(sys.platform != "linux", reason="transparent huge pages are Linux's")
@pytest.mark.parametrize("engine_says_done", [True, False])
def test_the_background_collapse_keeps_every_byte_and_moves_them_onto_huge_pages(engine_says_done):
    """At once where the engine's load says it is done, else once allocations stop for QUIET_S."""
    before = huge_pages.status()
    weights = huge_pages.huge_page_bytes(16 << 20)
    weights[:] = np.random.default_rng(0).integers(0, 256, size=weights.nbytes, dtype=np.uint8)
    expected = weights.copy()
    if engine_says_done:
        huge_pages.collapse_later()
    after = huge_pages.wait_for_collapse(60)
    assert after.pending_bytes == 0 and np.array_equal(weights, expected)
    collapsed = after.collapsed_bytes - before.collapsed_bytes
    failed = after.failed_bytes - before.failed_bytes
    assert collapsed + failed == 16 << 20
    assert "hg" in _mapping_of(weights.ctypes.data)["VmFlags"].split()  # khugepaged's, where no MADV_COLLAPSE
    if collapsed:  # the kernel had MADV_COLLAPSE and the memory to do it
        assert int(_mapping_of(weights.ctypes.data)["AnonHugePages"].split()[0]) * 1024 >= collapsed
