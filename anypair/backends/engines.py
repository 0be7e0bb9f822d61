"""The engines anypair can run a member on: one declared list, and `register_engine` for more.

Each engine is a module that loads a member from a spec (`loader`: "module:function", called as
`function(spec, *, role, options: LoadOptions) -> LoadedModel`, and imported only when used, so
that an engine's optional dependency costs nothing until it is asked for). Its entry says what it
can load (`sources`), whether it promises bitwise batch invariance, whether it may serve a target
(an exact engine: bitwise, or checked on the model by `backends.contract`), where its verification
slope comes from, and its per-layer overhead for the timing-free cost model. The choice among them
is made in `anypair.generation.members` from these facts alone; no module names an engine by string
except its own entry.

Adding an engine is one file: a `ModelBackend` and a loader that wraps it with
`anypair.backends.member.member_from_backend`, then `register_engine(Engine(...))`
(tests/recomputing_engine.py is one).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from anypair.backends.sources import CHECKPOINT, GGUF, LOADED, SOURCE_KINDS
from anypair.errors import InputError

if TYPE_CHECKING:
    from anypair.backends.member import LoadedModel, LoadOptions, ModelSpec


@dataclass(frozen=True)
class Engine:
    name: str
    #: "module:function" that loads a member: function(spec, *, role, options) -> LoadedModel
    loader: str
    #: the kinds of source it loads (anypair.backends.sources: "gguf", "checkpoint", "loaded")
    sources: frozenset[str]
    #: it may serve a target: its batch invariance is promised bitwise or checked on the model at load
    #: (auto prefers these for a target; an engine without it serves one only when asked by name)
    exact_target: bool
    #: what each extra token scored in one pass adds to a target step, as a share of the step
    #: (the hybrid drafter and the drafting ledger price passes with it), from the loaded member
    verification_slope: Callable[["LoadedModel"], float]
    #: per-layer overhead of a decode step, in parameters' worth of matrix work (policies.costs)
    layer_overhead_params: float
    #: it holds torch's weights formats (weights=, draft_weights=); other engines serve their file's own
    takes_weights: bool = False
    #: devices it runs on (None: any torch device)
    devices: Optional[tuple[str, ...]] = ("cpu",)
    #: why it cannot run on this machine, or None when it can (a missing compiler or package)
    unavailable: Callable[[], Optional[str]] = lambda: None
    #: whether it runs this model (its architecture); called only for a spec offering one of `sources`
    runs: Callable[["ModelSpec"], bool] = lambda spec: True

    def __post_init__(self) -> None:
        if ":" not in self.loader:
            raise ValueError(f"engine {self.name!r}: loader must be 'module:function', got {self.loader!r}")
        unknown = set(self.sources) - set(SOURCE_KINDS)
        if not self.sources or unknown:
            raise ValueError(f"engine {self.name!r}: sources must be some of {SOURCE_KINDS}, got {set(self.sources)}")

    def load(self, spec: "ModelSpec", *, role: str, options: "LoadOptions") -> "LoadedModel":
        module, function = self.loader.split(":", 1)
        return getattr(importlib.import_module(module), function)(spec, role=role, options=options)


# -- the built-in engines' facts -------------------------------------------------------------------

def _kernel_path_slope(member: "LoadedModel") -> float:
    from anypair.kernels import simd_level

    return 0.15 if simd_level() == "avx512-vnni" else 0.2


def _torch_slope(member: "LoadedModel") -> float:
    on_cpu = member.model is None or next(member.model.parameters()).device.type == "cpu"
    return 0.22 if member.engine.weights == "fp32" and on_cpu else 0.05


def _no_compiler() -> Optional[str]:
    from anypair.kernels.build import compiler

    if compiler() is None:
        return "no C compiler (gcc or $CC) for the GGUF engine's kernels: install gcc"
    return None


def _gguf_engine_runs(spec: "ModelSpec") -> bool:
    """The GGUF engine knows the architecture of this spec's GGUF (assembled first for a zoo model)."""
    from anypair.backends.quantized_gguf import ARCHITECTURES, gguf_architecture
    from anypair.backends.sources import checked_gguf, gguf_of

    gguf = gguf_of(spec)
    if gguf is None:
        return False
    if not gguf.is_file():
        gguf = checked_gguf(str(spec), gguf)
    return Path(gguf).is_file() and gguf_architecture(gguf) in ARCHITECTURES


def _no_llama_cpp() -> Optional[str]:
    from anypair.backends.llama_cpp import LLAMA_CPP_INSTALL, llama_cpp_available

    return None if llama_cpp_available() else f"the llama.cpp engine needs llama-cpp-python: {LLAMA_CPP_INSTALL}"


#: the engines, in the order "auto" prefers them for a draft (a target prefers exact_target ones first)
BUILT_IN_ENGINES = (
    # bitwise batch-invariant by construction (kernels/csrc). Its slope is the kernel path's: Qwen2.5-Coder-1.5B
    # Q4_K_M on 2 cores of an AMD EPYC, k = 2 / 4 / 8 / 12 cost 1.08 / 1.31 / 2.15 / 2.82x k = 1 with AVX-512 VNNI
    # (0.15) and, since Q6_K is read as bytes on AVX2, 1.15 / 1.46 / 2.57 / 3.76x with AVX2 (0.2: the least-squares
    # slope up to k = 8; evaluation/measured/bench_engine_roofline_zen3_n10.json)
    Engine(name="gguf", loader="anypair.backends.quantized_gguf:load_gguf_member", sources=frozenset({GGUF}),
           exact_target=True, verification_slope=_kernel_path_slope,
           # anypair's C forward: ~1 MB of weights' worth per layer, fitted on single-token steps
           # (SmolLM2-135M Q4_1 3.4 ms, Qwen2.5-Coder-0.5B 16.8 ms, -1.5B 35.5 ms; AMD EPYC, 2 threads)
           layer_overhead_params=0.25e6, unavailable=_no_compiler, runs=_gguf_engine_runs),
    # its slope, from its batched decode: k = 2 / 4 / 8 cost 1.72 / 2.86 / 6.64x k = 1 (Qwen2.5-Coder-1.5B Q4_K_M,
    # AMD EPYC, 2 threads; evaluation/measured/bench_llamacpp_target_n6.json)
    Engine(name="llama.cpp", loader="anypair.backends.llama_cpp:load_llama_cpp_member", sources=frozenset({GGUF}),
           exact_target=False, verification_slope=lambda member: 0.6,
           layer_overhead_params=1.0e6,  # ~4 MB a layer: its SmolLM2-135M step is 9.3 ms there
           unavailable=_no_llama_cpp),
    # its slope, measured on a 2-core CPU: ~0.22 in fp32; fp16-weight fbgemm, bf16 and GPUs score 2-4 tokens for
    # about the price of one (0.05); batch invariance checked on the model at load (backends/contract.py)
    Engine(name="torch", loader="anypair.backends.torch_engine:load_torch_member",
           sources=frozenset({CHECKPOINT, LOADED}), exact_target=True,
           verification_slope=_torch_slope,
           # Python and dispatch per op, fitted in fp32 (SmolLM2-135M step 55 ms, Qwen2.5-1.5B 270 ms)
           layer_overhead_params=7.4e6, takes_weights=True, devices=None),
)

_registry: dict[str, Engine] = {engine.name: engine for engine in BUILT_IN_ENGINES}

#: what an engine not in the registry is assumed to cost (a member built by hand with its own name)
UNREGISTERED_SLOPE = 0.25
UNREGISTERED_LAYER_OVERHEAD = 7.4e6


def register_engine(engine: Engine) -> Engine:
    """Add an engine (or replace one of the same name): `engine=` and `draft_engine=` then accept its
    name, and "auto" considers it after the built-in ones."""
    if engine.name == "auto":
        raise ValueError("'auto' is the engine option's own value, not an engine name")
    _registry[engine.name] = engine
    return engine


def unregister_engine(name: str) -> None:
    """Remove an engine added by `register_engine` (the built-in ones stay)."""
    if name in {engine.name for engine in BUILT_IN_ENGINES}:
        raise ValueError(f"{name!r} is a built-in engine")
    _registry.pop(name, None)


def engines() -> tuple[Engine, ...]:
    return tuple(_registry.values())


def engine_names() -> tuple[str, ...]:
    return tuple(_registry)


def engine_named(name: str) -> Engine:
    try:
        return _registry[name]
    except KeyError:
        raise InputError(f"unknown engine {name!r}: use one of auto, {', '.join(_registry)}") from None


def verification_slope(member: "LoadedModel") -> float:
    """The member's engine's verification slope (UNREGISTERED_SLOPE for an engine not registered)."""
    engine = _registry.get(member.engine.engine)
    return UNREGISTERED_SLOPE if engine is None else engine.verification_slope(member)


def layer_overhead_params(name: str) -> float:
    """An engine's per-layer overhead (an unregistered engine's: torch's, the dearest)."""
    engine = _registry.get(name)
    return UNREGISTERED_LAYER_OVERHEAD if engine is None else engine.layer_overhead_params
