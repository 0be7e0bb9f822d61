"""Compiling the C kernels of anypair/kernels/csrc once per machine, cached under $ANYPAIR_HOME.

The instruction set is detected, never assumed: AVX2+FMA+F16C CPUs get the AVX2 path, those with
AVX-512 F/BW/VL and VNNI also the AVX-512 path of the K-quants, every other CPU the portable
reference (the same arithmetic, so results do not depend on which was built).
The cache key covers the sources, the flags and the compiler, so an edit or a new CPU rebuilds.
`ANYPAIR_KERNEL_SIMD=portable` (or `avx2`) caps the build (tests, and CPUs that lie about flags).
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional

from anypair.errors import BackendError
from anypair.home import home
from anypair.machine import cpu_flags

SOURCE_DIR = Path(__file__).with_name("csrc")
LIBRARY_NAME = "libanypair_kernels.so"
_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None


class KernelUnavailable(BackendError):
    """The kernels cannot be built here (no C compiler, or the compile failed)."""


AVX2_FLAGS = {"avx2", "fma", "f16c"}
AVX512_FLAGS = {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}


def simd_flags() -> list[str]:
    """-m flags for the SIMD paths this CPU supports; [] means the portable reference.
    `ANYPAIR_KERNEL_SIMD=portable` or `=avx2` caps the build at that level."""
    cap = os.environ.get("ANYPAIR_KERNEL_SIMD", "").lower()
    flags = cpu_flags()
    if cap == "portable" or not AVX2_FLAGS <= flags:
        return []
    avx2 = ["-mavx2", "-mfma", "-mf16c"]
    if cap == "avx2" or not AVX512_FLAGS <= flags:
        return avx2
    return avx2 + ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]


def compiler() -> Optional[str]:
    for candidate in (os.environ.get("CC"), "gcc", "cc"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def _compile_command(cc: str, output: Path) -> list[str]:
    sources = sorted(str(p) for p in SOURCE_DIR.glob("*.c"))
    # -ffp-contract=off: no fused multiply-adds the reference does not also do (bitwise agreement)
    return [cc, "-O3", "-std=c11", "-D_GNU_SOURCE", "-ffp-contract=off", "-fno-math-errno", *simd_flags(),
            "-fopenmp", "-fPIC", "-shared", "-o", str(output), *sources, "-lm"]


def _cache_key(cc: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCE_DIR.iterdir()):
        digest.update(path.name.encode()); digest.update(path.read_bytes())
    digest.update(" ".join(_compile_command(cc, Path("x"))[1:]).encode())
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    digest.update("".join(version).encode())
    return digest.hexdigest()[:16]


def build_key() -> Optional[str]:
    """The key of this machine's build of the kernels (sources, flags, compiler), None without a
    compiler; nothing is built."""
    cc = compiler()
    return None if cc is None else _cache_key(cc)


def library_path() -> Path:
    """The compiled library for this machine, built now if it is not in the cache."""
    cc = compiler()
    if cc is None:
        raise KernelUnavailable("no C compiler found (gcc or $CC) to build anypair's quantized kernels: "
                                "install gcc, or use weights='fp16' / 'fp32'")
    target = home() / "kernels" / _cache_key(cc) / LIBRARY_NAME
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / LIBRARY_NAME
        result = subprocess.run(_compile_command(cc, built), capture_output=True, text=True)
        if result.returncode != 0:
            lines = result.stderr.strip().splitlines() or ["no output"]
            first = next((line for line in lines if "error" in line), lines[0])
            raise KernelUnavailable(f"building anypair's quantized kernels failed ({first}): "
                                    "use weights='fp16' / 'fp32', or report the compiler's message")
        os.replace(built, target)  # atomic: a concurrent build never sees half a library
    return target


def load_library() -> ctypes.CDLL:
    """The kernels, compiled on first use and loaded once per process."""
    global _library
    with _lock:
        if _library is None:
            import torch  # noqa: F401  (load torch's OpenMP runtime first: the kernels then share its threads)

            _library = open_library(library_path())
        return _library


def open_library(path: Path) -> ctypes.CDLL:
    """A compiled kernels library bound (binding.bind) and given this CPU's settings: the prefetch's rows
    and the Q6_K layout. `load_library` opens anypair's own this way; evaluation/bench_kernel_builds.py
    opens other builds beside it."""
    from anypair.kernels.binding import bind

    library = bind(ctypes.CDLL(str(path)))
    library.ap_set_prefetch_min_rows(prefetch_min_rows())
    library.ap_set_q6k_layout(Q6K_LAYOUTS[q6k_layout(avx512=library.ap_simd_level() == 3)])
    return library


@contextlib.contextmanager
def packing_q6k_as(name: str):
    """Q6_K matrices packed inside (QuantWeight) are laid out as `name` ("bits" or "bytes"); the layout
    before is restored after. For tests and benches: the setting is the process's."""
    library = load_library()
    before = library.ap_packed_type(14)
    if library.ap_set_q6k_layout(Q6K_LAYOUTS[name]) != 0:
        raise BackendError(f"the kernels refused the Q6_K layout {name!r}")
    try:
        yield
    finally:
        library.ap_set_q6k_layout(before)


#: Q6_K's two layouts (csrc/ap_common.h): the kernels' type codes
Q6K_LAYOUTS = {"bits": 114, "bytes": 115}


def q6k_layout(vendor: Optional[str] = None, avx512: bool = True) -> str:
    """How Q6_K matrices are laid out for the kernels: "bits" (their own 6 bits, block_q6_K_g16: the
    file's size) or "bytes" (a byte a value, block_q6_K_i8: 30% more to read, nothing to unpack). Which is
    faster depends on whether a step is bound by reading or by unpacking: on an Intel Xeon (2 threads,
    AVX-512 VNNI, ~26 GB/s) the 6-bit layout took 0.69-0.87x the byte layout's time at 1 to 8 rows (a
    [32,768 x 4,096] matrix, evaluation/measured/kernel_q6k_layouts_xeon.json); on Zen 4 (51 GB/s) and with AVX2 (Zen 3) unpacking 6 bits cost more than the bytes
    it saves (the head of Qwen2.5-1.5B 10.5 against 7.5-8.0 ms on Zen 4). So Intel with AVX-512 reads the
    6 bits, everything else the bytes. Both give the same bits. `ANYPAIR_Q6K_LAYOUT` overrides it."""
    from anypair.machine import cpu_vendor

    override = os.environ.get("ANYPAIR_Q6K_LAYOUT", "").strip().lower()
    if override:
        if override not in Q6K_LAYOUTS:
            raise BackendError(f"ANYPAIR_Q6K_LAYOUT must be one of {', '.join(Q6K_LAYOUTS)}, got {override!r}")
        return override
    intel = (vendor if vendor is not None else cpu_vendor()) == "GenuineIntel"
    return "bits" if intel and avx512 else "bytes"


def prefetch_min_rows(vendor: Optional[str] = None, family: Optional[int] = None) -> int:
    """From how many activation rows the AVX-512 K-quant tiles prefetch ahead (csrc/dot_avx512.c).
    Where the hardware prefetcher does not keep the 1-3 row tiles fed, every row count prefetches:
    on an Intel Xeon (2 threads, Qwen2.5-1.5B, context 300, A/B in one process) prefetching at every row
    count took k = 1 / 2 / 3 from 48.0 / 55.6 / 61.3 ms to 45.2 / 51.4 / 53.7 (k = 4: 58.0 / 56.7); on AMD
    Zen 5 (family 26; 2 threads, gemma-2-9b's seed shape, context 300, A/B in one process, three runs) from
    137-139 / 160-165 ms to 97-101 / 106-109 for k = 1 / 2 (k = 4, 8 the same either way). On Zen 4 (and
    Zen 3, family 25) the same prefetches cost 3-6% at 1-3 rows, so there they start at 4.
    `ANYPAIR_PREFETCH_MIN_ROWS` overrides it (measurements)."""
    from anypair.machine import cpu_family, cpu_vendor

    override = os.environ.get("ANYPAIR_PREFETCH_MIN_ROWS")
    if override:
        try:
            return max(1, int(override))
        except ValueError:
            raise BackendError(f"ANYPAIR_PREFETCH_MIN_ROWS must be a whole number of rows, got {override!r}") from None
    vendor = vendor if vendor is not None else cpu_vendor()
    family = family if family is not None else cpu_family()
    return 1 if vendor == "GenuineIntel" or (vendor == "AuthenticAMD" and family >= 26) else 4


def release_thread_pool() -> bool:
    """Free the calling thread's OpenMP threads (OpenMP 5's omp_pause_resource_all); False when
    the kernels are not loaded here or the runtime refused.

    Why: libgomp lets its waiting threads spin only while it manages no more threads than there
    are CPUs. A server loads the models on its main thread (one pool) and generates on a worker
    thread (a second pool): every pool then waits passively, and a 2-core decode step loses ~15%
    to wake-ups (measured: 13.5 against 15.7 tok/s). Releasing the loading thread's pool before
    the worker starts keeps the worker's threads spinning between kernels, as in a plain process."""
    if _library is None:
        return False
    pause = getattr(_library, "omp_pause_resource_all", None)
    if pause is None:
        return False
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    return pause(1) == 0  # omp_pause_soft: the threads go, the runtime stays
