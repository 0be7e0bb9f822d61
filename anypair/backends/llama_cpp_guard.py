"""llama.cpp built for this CPU, and kept from taking anypair down when it crashes.

Two jobs, both about llama-cpp-python (the optional llama.cpp engine, the bench's baseline and the tests'
reference):

- **Building it for this CPU** (`anypair install llama.cpp`). llama-cpp-python compiles llama.cpp with
  `-march=native`, which on Intel CPUs with AMX compiles ggml's AMX path; that path requests the tile
  permission on one thread and keeps its tile configuration on the stack, so its first batched decode
  dies with SIGILL (`tilezero`; llama.cpp PR #26954). On such a CPU the build names every other
  instruction set the CPU reports and leaves AMX out; elsewhere it stays native. Wheels are kept per
  set of build flags under $ANYPAIR_HOME/wheels (pip's own cache keys a wheel by the sdist alone, so it
  would hand back a wheel built with other flags).
- **Probing it in a child process** before a process of ours runs it (`require_llama_cpp_runs`): the
  child loads the GGUF about to be used and decodes a batch of rows and then a single row, the two
  shapes llama.cpp takes different paths for. A child killed by a signal becomes one line naming the
  signal, the likely cause and the fix, instead of the death of the calling process. The verdict is
  cached per (llama.cpp build, GGUF) in $ANYPAIR_HOME/llama_cpp_probes.json.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

from anypair.errors import BackendError
from anypair.home import home
from anypair.machine import cpu_flags

#: the llama-cpp-python release anypair is tested with (the `[llama]` extra pins the same)
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"

#: how to get llama.cpp, named in every message that needs it
LLAMA_CPP_INSTALL = ("anypair install llama.cpp (builds llama-cpp-python 0.3.36 for this CPU, ~8 min on 2 cores)")

#: rows of the probe's batched decode: enough for the matrix-matrix paths (AMX tiles take 16)
PROBE_BATCH_ROWS = 32
#: seconds a probe may take (loading a 1.5B GGUF and two decodes take a few seconds)
PROBE_TIMEOUT_S = 300

# ggml's CMake options for x86 instruction sets, each with the /proc/cpuinfo flags it needs
_X86_OPTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512vbmi",)),
    ("GGML_AVX512_VNNI", ("avx512_vnni",)),
    ("GGML_AVX512_BF16", ("avx512_bf16",)),
)
_AMX_OPTIONS = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_has_amx(flags: Optional[frozenset[str]] = None) -> bool:
    flags = cpu_flags() if flags is None else flags
    return bool({"amx_tile", "amx_int8", "amx_bf16"} & flags)


def llama_cpp_cmake_args(flags: Optional[frozenset[str]] = None) -> list[str]:
    """CMake arguments for llama.cpp on this CPU: native where that is sound; on a CPU with AMX, every
    instruction set the CPU reports except AMX (ggml's AMX path crashes: see the module's docstring)."""
    flags = cpu_flags() if flags is None else flags
    if not cpu_has_amx(flags):
        return []
    args = ["-DGGML_NATIVE=OFF"]
    for option, needs in _X86_OPTIONS:
        args.append(f"-D{option}={'ON' if all(f in flags for f in needs) else 'OFF'}")
    args += [f"-D{option}=OFF" for option in _AMX_OPTIONS]
    return args


def _wheel_folder(cmake_args: Sequence[str]) -> Path:
    key = hashlib.sha256(" ".join([LLAMA_CPP_PYTHON, *cmake_args]).encode()).hexdigest()[:16]
    return home() / "wheels" / f"llama-cpp-python-{key}"


def install_llama_cpp(*, progress: bool = True) -> Path:
    """Build (once per set of flags) and install llama-cpp-python for this CPU; returns the wheel.
    pip's output is shown only when it fails."""
    cmake_args = llama_cpp_cmake_args()
    folder = _wheel_folder(cmake_args)
    wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
    env = dict(os.environ)
    if cmake_args:
        env["CMAKE_ARGS"] = " ".join(cmake_args)
    how = "without ggml's AMX path (it crashes on this CPU): " + " ".join(cmake_args) if cmake_args else "native"
    if not wheels:
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", str(folder),
                   LLAMA_CPP_PYTHON]
        _run_pip(command, env, f"building {LLAMA_CPP_PYTHON} for this CPU ({how}; ~8 min on 2 cores)", progress)
        wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
        if not wheels:
            raise BackendError(f"pip built no wheel of {LLAMA_CPP_PYTHON} in {folder}; run the build by hand: "
                               f"CMAKE_ARGS='{' '.join(cmake_args)}' pip install {LLAMA_CPP_PYTHON}")
    _run_pip([sys.executable, "-m", "pip", "install", "--force-reinstall", "--no-deps", str(wheels[-1])], env,
             f"installing {wheels[-1].name}", progress)
    # its dependencies as the wheel's own metadata names them (already satisfied in most environments)
    _run_pip([sys.executable, "-m", "pip", "install", str(wheels[-1])], env, "checking its dependencies", progress)
    return wheels[-1]


def _run_pip(command: list[str], env: dict, what: str, progress: bool) -> None:
    if progress:
        from rich.console import Console

        with Console(stderr=True).status(what):
            done = subprocess.run(command, env=env, capture_output=True, text=True)
    else:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-20000:] + done.stderr[-20000:])
        raise BackendError(f"{what} failed (pip's output above); the command was: {' '.join(command)}")


# ---------------------------------------------------------------------------------------------- probe

def _llama_cpp_build() -> Optional[str]:
    """An identity of the llama-cpp-python that `import llama_cpp` would load: its folder, and the size
    and time of its shared libraries (a rebuild changes them). None when it is not installed."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent
    parts = [str(folder)]
    for lib in sorted(folder.rglob("*.so*")) or [Path(spec.origin)]:
        stat = lib.stat()
        parts.append(f"{lib.name}:{stat.st_size}:{int(stat.st_mtime)}")
    return "|".join(parts)


def _probe_cache() -> Path:
    return home() / "llama_cpp_probes.json"


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def probe_failure(gguf: Path, threads: int) -> Optional[str]:
    """None when llama.cpp decodes `gguf` in a child process; else one line naming what happened,
    the likely cause and the fix. Cached per (llama.cpp build, file)."""
    build = _llama_cpp_build()
    if build is None:
        return f"llama-cpp-python is not installed: {LLAMA_CPP_INSTALL}"
    stat = gguf.stat()
    key = f"{build}||{gguf.resolve()}:{stat.st_size}:{int(stat.st_mtime)}"
    cache = _probe_cache()
    try:
        verdicts = json.loads(cache.read_text())
    except (OSError, ValueError):
        verdicts = {}
    if key in verdicts:
        return verdicts[key] or None
    command = [sys.executable, str(Path(__file__).with_name("llama_cpp_probe.py")), str(gguf), str(threads),
               str(PROBE_BATCH_ROWS)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return (f"llama.cpp did not finish decoding {PROBE_BATCH_ROWS} tokens of {gguf.name} within "
                f"{PROBE_TIMEOUT_S} s in a probe; check the machine's load, or rebuild it: {LLAMA_CPP_INSTALL}")
    if done.returncode == 0 and "ok" in done.stdout:
        verdict = ""
    elif done.returncode < 0:
        name = _signal_name(done.returncode)
        cause = ""
        if name == "SIGILL":
            cause = (" (an instruction this CPU or OS refuses: on CPUs with AMX, llama.cpp's AMX path, "
                     "llama.cpp PR #26954)" if cpu_has_amx() else " (built for another CPU)")
        verdict = (f"llama.cpp crashed with {name} decoding {gguf.name}{cause}; rebuild it for this CPU: "
                   f"{LLAMA_CPP_INSTALL}")
    else:
        # an exception in the child (an import that found another `llama_cpp`, a full disk) says
        # nothing lasting about this build on this file: reported, not cached, probed again next time
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"llama.cpp failed to decode {gguf.name} in a probe (exit {done.returncode}: {last})"
    verdicts[key] = verdict
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(verdicts, indent=1))
        tmp.replace(cache)
    except OSError:
        pass  # the verdict still holds for this call; the next process probes again
    return verdict or None


def require_llama_cpp_runs(gguf: Path, threads: int) -> None:
    """Raise BackendError (one line) unless llama.cpp decodes `gguf` safely on this machine."""
    failure = probe_failure(Path(gguf), threads)
    if failure is not None:
        raise BackendError(failure)
