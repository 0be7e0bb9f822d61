"""What machine this is, for engine choices and for every benchmark's report: the CPU model, its
instruction-set features that decide the kernels (AVX2/F16C for fp16-weight fbgemm, AVX-512-BF16
or AMX for native bf16), cores and memory. One place, so reports and choices never disagree."""
from __future__ import annotations

import os
import platform
from typing import Optional


def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _cpuinfo_field(name: str) -> Optional[str]:
    """The first value of `name` in /proc/cpuinfo, or None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD"), or "" where there is none."""
    return _cpuinfo_field("vendor_id") or ""


def cpu_family() -> int:
    """/proc/cpuinfo's "cpu family" (AMD: 25 for Zen 3 and Zen 4, 26 for Zen 5; Intel: 6), 0 where there is none."""
    value = _cpuinfo_field("cpu family")
    return int(value) if value and value.isdigit() else 0


def cpu_model() -> str:
    return _cpuinfo_field("model name") or platform.processor() or platform.machine() or "unknown"


def machine_description() -> dict[str, str]:
    """CPU, the features that matter here, logical CPUs, memory, platform."""
    flags = cpu_flags()
    features = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f in flags]
    try:
        memory = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = "unknown"
    return {"cpu": cpu_model(), "features": "+".join(features) or "none of avx2/f16c/avx512/amx",
            "logical_cpus": str(os.cpu_count()), "memory": memory, "platform": platform.platform()}


def describe_machine() -> str:
    """One line: 'AMD EPYC (2 logical CPUs, avx2+fma+f16c, 23 GiB)'."""
    m = machine_description()
    return f"{m['cpu']} ({m['logical_cpus']} logical CPUs, {m['features']}, {m['memory']})"


def available_memory() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 where there is none): what a run may still take
    without pushing others out."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
