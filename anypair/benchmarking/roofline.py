"""The roofline of a target step: the machine's two ceilings (read bandwidth and int8 multiply-adds
per second, measured on the kernels' own threads) beside what a k-token step of the gguf engine
achieves against them, and where the step's milliseconds go.

A decode step (k = 1) streams every weight once: its floor is weight bytes / read bandwidth. Each
extra row in the same step re-uses the weights from cache and costs int8 multiply-adds, so its floor
is the model's multiply-adds / int8 peak. `anypair bench --roofline` prints both figures per k and
context; the engine's changes are decided from them (README, "The engine at the machine's limit").
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Sequence

#: parts of a step timed outside the C layer stack
OUTSIDE_PARTS = ("embedding", "head", "argmax")


@dataclass(frozen=True)
class Ceilings:
    """What the machine allows on `threads` threads."""

    threads: int
    simd: str
    read_bytes_per_s: float
    int8_macs_per_s: float  # the kernels' best instruction (vpdpbusd with AVX-512 VNNI, else maddubs + madd)

    @classmethod
    def measure(cls, threads: int) -> "Ceilings":
        from anypair.kernels import simd_level
        from anypair.kernels.ops import int8_peak, read_bandwidth

        return cls(threads, simd_level(), read_bandwidth(threads), int8_peak(threads))


@dataclass
class StepProfile:
    """One k-token step after `context` cached tokens: its median time and where it went."""

    context: int
    k: int
    total_ms: float
    parts_ms: dict[str, float] = field(default_factory=dict)  # per step, mean over the repeats
    bytes_read: int = 0  # weights + the KV cache read by attention
    int8_macs: int = 0

    @property
    def unaccounted_ms(self) -> float:
        """The step minus its timed parts: Python, ctypes, allocation, the logits' copy."""
        return self.total_ms - sum(self.parts_ms.values())

    def achieved_bytes_per_s(self) -> float:
        return self.bytes_read / (self.total_ms / 1000)

    def achieved_macs_per_s(self) -> float:
        return self.int8_macs / (self.total_ms / 1000)


def step_bytes_and_macs(backend, context: int, k: int) -> tuple[int, int]:
    """Bytes a k-token step reads (every weight matrix once, the head, each layer's KV up to the
    context) and the int8 multiply-adds its linears perform."""
    shape = backend.shape
    # a draft's reduced head (backends/reduced_head.py) reads its kept rows only
    head = [backend.reduced_head.weight] if getattr(backend, "reduced_head", None) is not None \
        else list(backend.head.weights)
    matrices = [w for layer in backend.layers for w in layer.matrices] + head
    weight_bytes = sum(w.nbytes for w in matrices)
    kv_bytes = shape.layers * shape.kv_heads * shape.head_dim * 2 * 2 * (context + k)  # fp16 K and V
    macs = k * sum(w.rows * w.cols for w in matrices if w.type_name not in ("F32", "F16"))
    return weight_bytes + kv_bytes, macs


def profile_steps(backend, text_ids: Sequence[int], contexts: Sequence[int], ks: Sequence[int],
                  repeats: int = 5, all_logits: bool = True) -> list[StepProfile]:
    """Median time of a k-token step (all logits, as verification scores them; `all_logits=False`: the
    last row's only, as a prompt chunk's read) after each context, with the mean time per part over the
    same calls. The cache is cropped back after each call."""
    if not hasattr(backend, "start_profile"):
        raise ValueError(f"{type(backend).__name__} has no profile: the roofline needs the gguf engine")
    profiles = []
    for context in contexts:
        prompt = (list(text_ids) * (context // max(len(text_ids), 1) + 1))[:context]
        backend.reset()
        backend.prefill(prompt)
        filler = list(prompt[-16:]) * (max(ks) // 16 + 1)
        for k in ks:
            samples, parts = [], {}
            for repeat in range(repeats + 1):  # the first call is not counted: it may allocate
                backend.start_profile()
                t0 = time.perf_counter()
                logits = backend.extend(filler[:k], all_logits=all_logits)
                t1 = time.perf_counter()
                logits.argmax(-1)
                t2 = time.perf_counter()
                measured = backend.stop_profile()
                backend.crop(context)
                if repeat == 0:
                    continue
                samples.append(t2 - t0)
                measured["argmax"] = t2 - t1
                for name, seconds in measured.items():
                    parts[name] = parts.get(name, 0.0) + 1000 * seconds / repeats
            bytes_read, macs = step_bytes_and_macs(backend, context, k)
            profiles.append(StepProfile(context, k, 1000 * statistics.median(samples), parts, bytes_read, macs))
    backend.reset()
    return profiles


def roofline_json(ceilings: Ceilings, profiles: Sequence[StepProfile]) -> dict:
    return {"ceilings": {"threads": ceilings.threads, "simd": ceilings.simd,
                         "read_GB_s": round(ceilings.read_bytes_per_s / 1e9, 2),
                         "int8_GMAC_s": round(ceilings.int8_macs_per_s / 1e9, 1)},
            "steps": [{"context": p.context, "k": p.k, "ms": round(p.total_ms, 2),
                       "GB_s": round(p.achieved_bytes_per_s() / 1e9, 2), "GMAC_s": round(p.achieved_macs_per_s() / 1e9, 1),
                       "parts_ms": {n: round(v, 2) for n, v in p.parts_ms.items()},
                       "unaccounted_ms": round(p.unaccounted_ms, 2)} for p in profiles]}


def format_roofline(ceilings: Ceilings, profiles: Sequence[StepProfile]):
    """A rich table: per (context, k) the step, its share of each ceiling, and its parts in ms."""
    from rich.table import Table

    parts = list(dict.fromkeys(name for p in profiles for name in p.parts_ms))
    table = Table(title=(f"roofline: {ceilings.threads} threads, {ceilings.simd} kernels, read "
                         f"{ceilings.read_bytes_per_s / 1e9:.1f} GB/s, int8 peak "
                         f"{ceilings.int8_macs_per_s / 1e9:.0f} GMAC/s"))
    for column in ("context", "k", "ms", "floor ms", "GB/s", "of read", "GMAC/s", "of int8", *parts, "other"):
        table.add_column(column, justify="right")
    for p in profiles:
        floor = 1000 * max(p.bytes_read / ceilings.read_bytes_per_s,
                           p.int8_macs / ceilings.int8_macs_per_s if ceilings.int8_macs_per_s else 0.0)
        table.add_row(str(p.context), str(p.k), f"{p.total_ms:.1f}", f"{floor:.1f}",
                      f"{p.achieved_bytes_per_s() / 1e9:.1f}",
                      f"{100 * p.achieved_bytes_per_s() / ceilings.read_bytes_per_s:.0f}%",
                      f"{p.achieved_macs_per_s() / 1e9:.0f}",
                      f"{100 * p.achieved_macs_per_s() / ceilings.int8_macs_per_s:.0f}%" if ceilings.int8_macs_per_s else "",
                      *(f"{p.parts_ms.get(name, 0.0):.1f}" for name in parts), f"{p.unaccounted_ms:.1f}")
    table.caption = ("floor: the larger of bytes / read bandwidth and multiply-adds / int8 peak; parts in ms per step "
                     "(C layer parts summed over layers; head = final norm + logits; other = Python, ctypes, allocation)")
    return table
