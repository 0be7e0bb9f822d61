"""llama.cpp built for the CPU at hand and kept from taking anypair down (anypair/backends/llama_cpp_guard.py).

A crashing llama.cpp is stood in for by a `llama_cpp` package that kills its own process with SIGILL
on its first decode, as llama.cpp's AMX path does on Intel CPUs with AMX: the probe's child dies,
the caller gets one line naming the signal and the fix, and goes on."""
from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

from anypair.backends import llama_cpp_guard as guard
from anypair.errors import BackendError

SAPPHIRE_RAPIDS = frozenset(
    "sse4_2 avx avx2 fma f16c bmi2 avx_vnni avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512_vnni "
    "avx512_bf16 amx_tile amx_int8 amx_bf16".split())
ZEN4 = frozenset("sse4_2 avx avx2 fma f16c bmi2 avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi "
                 "avx512_vnni avx512_bf16".split())
ZEN3 = frozenset("sse4_2 avx avx2 fma f16c bmi2".split())


def test_amx_cpus_get_every_other_instruction_set_and_no_amx():
    args = guard.llama_cpp_cmake_args(SAPPHIRE_RAPIDS)
    assert "-DGGML_NATIVE=OFF" in args
    for option in ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"):
        assert f"-D{option}=OFF" in args
    for option in ("GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_BF16",
                   "GGML_AVX512_VBMI", "GGML_AVX_VNNI"):
        assert f"-D{option}=ON" in args, option


def test_an_amx_cpu_without_some_extension_leaves_that_one_out():
    args = guard.llama_cpp_cmake_args(SAPPHIRE_RAPIDS - {"avx512_bf16", "avx_vnni"})
    assert "-DGGML_AVX512_BF16=OFF" in args and "-DGGML_AVX_VNNI=OFF" in args and "-DGGML_AVX512=ON" in args


@pytest.mark.parametrize("flags", [ZEN4, ZEN3], ids=["zen4", "zen3"])
def test_cpus_without_amx_build_native(flags):
    assert guard.llama_cpp_cmake_args(flags) == []


def test_wheels_are_kept_per_set_of_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYPAIR_HOME", str(tmp_path))
    native = guard._wheel_folder(guard.llama_cpp_cmake_args(ZEN4))
    without_amx = guard._wheel_folder(guard.llama_cpp_cmake_args(SAPPHIRE_RAPIDS))
    assert native != without_amx and native.parent == without_amx.parent == tmp_path / "wheels"


CRASHING_LLAMA_CPP = textwrap.dedent('''
    """Stands in for a llama.cpp whose batched decode executes an instruction the OS refuses."""
    import os
    import signal


    class Llama:
        def __init__(self, *args, **kwargs):
            pass

        def n_vocab(self):
            return 1000

        def eval(self, tokens):
            os.kill(os.getpid(), signal.SIGILL)
''')


@pytest.fixture
def crashing_llama_cpp(tmp_path, monkeypatch):
    """`import llama_cpp` finds the crashing stand-in, here and in child processes; a fresh home."""
    package = tmp_path / "shim" / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(CRASHING_LLAMA_CPP)
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setenv("PYTHONPATH", str(package.parent))
    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    importlib.invalidate_caches()
    monkeypatch.setenv("ANYPAIR_HOME", str(tmp_path / "home"))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    return model


def test_a_crashing_llama_cpp_costs_one_line_not_the_process(crashing_llama_cpp):
    with pytest.raises(BackendError) as caught:
        guard.require_llama_cpp_runs(crashing_llama_cpp, threads=1)
    message = str(caught.value)
    assert "\n" not in message
    assert "SIGILL" in message and "anypair install llama.cpp" in message and "model.gguf" in message


def test_the_verdict_is_cached_per_build_and_file(crashing_llama_cpp, monkeypatch):
    first = guard.probe_failure(crashing_llama_cpp, threads=1)
    assert first is not None and "SIGILL" in first

    def no_second_probe(*args, **kwargs):
        raise AssertionError("the cached verdict should have answered")

    monkeypatch.setattr(subprocess, "run", no_second_probe)
    assert guard.probe_failure(crashing_llama_cpp, threads=1) == first


def test_a_probe_that_fails_without_crashing_is_not_cached(crashing_llama_cpp, monkeypatch):
    """A Python error in the child (here: a `llama_cpp` without `Llama`, as an unrelated folder of that
    name on the child's path gives) is reported, and the next call probes again: only a clean run or
    a crash says something lasting about the build on this file."""
    (crashing_llama_cpp.parent / "shim" / "llama_cpp" / "__init__.py").write_text("")
    first = guard.probe_failure(crashing_llama_cpp, threads=1)
    assert first is not None and "exit 1" in first and "Llama" in first
    probes = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: probes.append(a) or real_run(*a, **k))
    assert guard.probe_failure(crashing_llama_cpp, threads=1) == first
    assert len(probes) == 1


def test_the_llama_cpp_engine_refuses_in_one_line_when_llama_cpp_crashes(zoo_fetch, crashing_llama_cpp):
    """The engine reads the file's metadata first (a real GGUF: a vocabulary-only one), then probes."""
    from anypair.backends.llama_cpp import LlamaCppBackend

    vocab_gguf = zoo_fetch["llama-cpp-vocab"] / "ggml-vocab-llama-spm.gguf"  # the fetched one: the home is a new one here
    with pytest.raises(BackendError, match=r"^llama\.cpp crashed with SIGILL decoding ggml-vocab-llama-spm\.gguf"):
        LlamaCppBackend(vocab_gguf, threads=1)


def test_the_bench_leaves_llama_cpp_out_and_goes_on(crashing_llama_cpp, monkeypatch, capsys):
    from anypair.backends import sources
    from anypair.benchmarking.bench import llama_cpp_alone

    monkeypatch.setattr(sources, "gguf_of", lambda spec: crashing_llama_cpp)
    assert llama_cpp_alone("a-target", target=None, threads=1) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llama.cpp alone is left out" in err[0] and "SIGILL" in err[0]


def test_the_real_llama_cpp_passes_its_probe_on_a_real_model(zoo_fetch, tmp_path, monkeypatch):
    """The probe's child runs llama-cpp-python's real API (README command 2 installs it) on SmolLM2."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is installed by the README's test command")
    from anypair.backends.sources import gguf_of

    monkeypatch.setattr(guard, "_probe_cache", lambda: tmp_path / "probes.json")
    assert guard.probe_failure(gguf_of("HuggingFaceTB/SmolLM2-135M-Instruct"), threads=2) is None
    assert (tmp_path / "probes.json").is_file()
