"""One member of a pair (the target or the draft) loaded onto an engine: its tokenizers, its EOS ids,
and the `ModelBackend` that runs it.

Engines (the choice is made here, in `resolve_engine`; each engine loads itself):
- "gguf": a GGUF file (every zoo model has one) on anypair's batch-invariant quantized kernels
  (`backends.quantized_gguf`): the target's default for the architectures it runs; exact.
- "torch": a transformers model whose weights are converted to the format chosen for this machine
  (`backends.weights`); for a target, the format must pass the batch-invariance contract
  (`backends.contract`) on the model itself, or "auto" falls back to the next candidate.
- "llama.cpp": a GGUF file on llama.cpp (`backends.llama_cpp`): the draft's default where
  llama-cpp-python is installed and the draft has a GGUF, and a target engine on request (not
  batch-invariant: see that module).
- any other: a `ModelBackend` wrapped by `member_from_backend` and passed to AnyPairGenerator as
  the target or the draft (a loaded member is used as it is).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch

from anypair.backends.base import ModelBackend
from anypair.errors import BackendError, InputError
from anypair.generation.checks import BACKENDS, check_engine
from anypair.tokenization.base import TokenizerAdapter

logger = logging.getLogger("anypair")

ModelSpec = Union[str, "os.PathLike[str]", tuple]  # hub id, local folder, .gguf file, or (model, hf_tokenizer)


@dataclass(frozen=True)
class EngineChoice:
    """What runs a member, and why: shown by `anypair generate -v` and recorded by the benchmarks."""

    engine: str  # "gguf", "torch" or "llama.cpp"
    weights: str  # "fp32", "fp16", "bf16", "int8" (torch), the GGUF's block types (gguf) or file name (llama.cpp)
    reason: str

    def describe(self) -> str:
        return f"{self.engine} {self.weights} ({self.reason})"


@dataclass
class LoadedModel:
    """A member of the pair, ready to run."""

    name: str
    hf_tokenizer: Any  # transformers tokenizer: chat template and prompt encoding
    tokenizer: TokenizerAdapter  # exact bytes per id
    eos_ids: frozenset[int]
    backend: ModelBackend
    engine: EngineChoice
    model: Any = None  # the transformers model on the torch engine; None on llama.cpp
    weights_bytes: int = 0  # bytes of weights held (the GGUF's size on llama.cpp)
    num_layers: int = 1
    gguf_path: Optional[Path] = None
    invariance: Optional[str] = field(default=None)  # the target's contract check, as measured

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf_tokenizer, "chat_template", None))

    def render(self, prompt: Optional[str], messages: Optional[Sequence[dict]]) -> list[int]:
        """The model's own token ids for a raw prompt or a conversation (its own chat template)."""
        if messages is not None:
            if not self.has_chat_template:
                raise InputError(f"{self.name} has no chat template: pass the conversation as raw text "
                                 "(prompt= instead of messages=; --raw on the command line)")
            ids = self.hf_tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            if ids and isinstance(ids[0], list):
                ids = ids[0]
            return [int(i) for i in ids]
        return [int(i) for i in self.hf_tokenizer(prompt, add_special_tokens=True)["input_ids"]]


def _eos_ids(adapter: TokenizerAdapter, generation_config) -> frozenset[int]:
    eos = set(adapter.eos_ids)
    configured = getattr(generation_config, "eos_token_id", None)
    if configured is not None:
        eos.update([configured] if isinstance(configured, int) else list(configured))
    return frozenset(int(e) for e in eos)


def _num_layers(config) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "num_hidden_layers", 1) or 1)


def member_from_backend(backend: ModelBackend, hf_tokenizer: Any, *, role: str, name: str, engine: EngineChoice,
                        generation_config: Any = None, model: Any = None, weights_bytes: int = 0, num_layers: int = 1,
                        gguf_path: Optional[Path] = None, check_contract: bool = True) -> LoadedModel:
    """A member on any engine, from its `ModelBackend` and the model's transformers tokenizer.

    This is all a new engine needs besides its backend (see backends/base.py): build the member
    here and pass it to `AnyPairGenerator` as the target or the draft (a member is used as it is,
    nothing loads again). A target's backend is checked against the batch-invariance contract
    (`invariance` holds the measurement; a failure is logged, since outputs may then differ from
    the target's own single-token run at near-ties). `check_contract=False`: the caller checks."""
    from anypair.tokenization import from_hf

    adapter = from_hf(hf_tokenizer, model_vocab_size=backend.vocab_size)
    member = LoadedModel(name, hf_tokenizer, adapter, _eos_ids(adapter, generation_config), backend, engine, model,
                         weights_bytes, num_layers, gguf_path)
    if role == "target" and check_contract:
        report = check_target_contract(member)
        member.invariance = report.describe()
        if not report.holds:
            logger.warning("anypair: target %s on %s: %s", name, engine.engine, report.describe())
    return member


# -- where a spec's GGUF is --------------------------------------------------------------------------

def gguf_of(spec: ModelSpec) -> Optional[Path]:
    """The GGUF file a spec names or ships with (zoo models keep theirs), None if it has none."""
    if isinstance(spec, tuple):
        return None
    name = str(spec)
    if name.endswith(".gguf"):
        return Path(name).expanduser()
    from anypair.zoo.registry import ZOO_MODELS

    if name in ZOO_MODELS:
        from anypair.zoo.gguf_assembly import gguf_path

        return gguf_path(ZOO_MODELS[name])
    folder = Path(name).expanduser()
    if folder.is_dir():
        found = sorted(folder.glob("*.gguf"))
        return found[0] if len(found) == 1 else None
    return None


def _checked_gguf(name: str, path: Path) -> Path:
    """A zoo model's GGUF, checked against its recorded stamp (fetched again if missing or damaged);
    any other GGUF, checked to exist and to hold the tensor data its header promises."""
    from anypair.zoo.registry import ZOO_MODELS

    model = ZOO_MODELS.get(name)
    if model is None:
        from anypair.zoo.integrity import check_gguf_complete

        check_gguf_complete(path)
        return path
    from anypair.zoo.gguf_assembly import assemble_gguf, gguf_is_intact
    from anypair.zoo.paths import asset_lock

    with asset_lock(model.folder_name):  # two processes never assemble one GGUF at once
        return path if gguf_is_intact(model) else assemble_gguf(model)


def resolve_engine(spec: ModelSpec, engine: str, role: str, weights: str = "auto") -> str:
    """"auto" picks, for a member with a GGUF (a zoo model or a .gguf file):
    - a target, weights left on "auto": the GGUF engine (the file's own blocks on anypair's exact,
      batch-invariant kernels) when it runs the architecture, else llama.cpp for a .gguf file;
    - a draft: the GGUF engine when it runs the architecture (one C call per step: SmolLM2-135M
      steps in 6.1 ms against llama.cpp's 8.4 ms on 2 cores), else llama.cpp when installed (a
      draft need not be exact: Gemma 3 drafts there);
    and torch for everything else (and for a target asked for torch's weights, e.g. weights="fp16")."""
    check_engine(engine)
    is_gguf_file = not isinstance(spec, tuple) and str(spec).endswith(".gguf")
    if engine == "torch" and is_gguf_file:
        raise InputError(f"{spec} is a GGUF file, which the torch engine does not run: use engine='gguf' or "
                         "'llama.cpp' (or a Hugging Face folder for torch)")
    if engine == "gguf" and weights != "auto":
        raise InputError(f"weights={weights!r} is a torch format; the GGUF engine serves the file's own blocks: "
                         "leave weights unset, or use engine='torch'")
    if engine != "auto":
        return engine
    gguf = gguf_of(spec)
    if gguf is None:
        return "torch"
    from anypair.backends.llama_cpp import llama_cpp_available

    if role == "draft":
        if _gguf_engine_runs(spec, gguf):
            return "gguf"
        return "llama.cpp" if llama_cpp_available() or is_gguf_file else "torch"
    if weights == "auto" and _gguf_engine_runs(spec, gguf):
        return "gguf"
    return "llama.cpp" if is_gguf_file else "torch"


def _gguf_engine_runs(spec: ModelSpec, gguf: Path) -> bool:
    """The GGUF engine can serve this file: a C compiler for its kernels, an architecture it knows."""
    from anypair.backends.quantized_gguf import ARCHITECTURES, gguf_architecture
    from anypair.kernels.build import compiler

    if compiler() is None:
        logger.warning("anypair: no C compiler (gcc or $CC) for the GGUF engine's kernels; %s runs on %s instead",
                       spec, "llama.cpp" if str(spec).endswith(".gguf") else "torch (fp16 weights)")
        return False
    if not gguf.is_file():
        gguf = _checked_gguf(str(spec), gguf)
    return gguf.is_file() and gguf_architecture(gguf) in ARCHITECTURES


# -- loading -----------------------------------------------------------------------------------------

def gguf_tokenizer(spec: ModelSpec, gguf: Path):
    """The HF tokenizer and generation config of a GGUF member: for a zoo model its checked tokenizer
    (no bf16 conversion needed), else one built from the GGUF itself."""
    from transformers import AutoTokenizer, GenerationConfig

    from anypair.zoo.registry import ZOO_MODELS

    name = str(spec)
    if name in ZOO_MODELS:
        from anypair.zoo.served_gguf import served_gguf

        _, folder = served_gguf(ZOO_MODELS[name])
        tokenizer = AutoTokenizer.from_pretrained(folder)
        try:
            generation = GenerationConfig.from_pretrained(folder)
        except OSError:
            generation = None
        return tokenizer, generation
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as exc:  # transformers raises many kinds here
        raise InputError(f"could not build a tokenizer from {gguf} ({type(exc).__name__}: {exc}); "
                         "use a model folder with its tokenizer files instead") from exc
    return tokenizer, None


def load_llama_cpp_member(spec: ModelSpec, *, role: str, threads: Optional[int], context: Optional[int]) -> LoadedModel:
    from anypair.backends.llama_cpp import LlamaCppBackend

    gguf = gguf_of(spec)
    if gguf is None:
        raise InputError(f"{spec} has no GGUF file for the llama.cpp engine: give a .gguf path, a zoo model, "
                         "or use engine='torch'")
    gguf = _checked_gguf(str(spec), gguf)
    tokenizer, generation = gguf_tokenizer(spec, gguf)
    backend = LlamaCppBackend(gguf, name=f"{role} {spec}", threads=threads, context=context)
    return member_from_backend(backend, tokenizer, role=role, name=str(spec),
                               engine=EngineChoice("llama.cpp", gguf.name, "GGUF on llama.cpp"),
                               generation_config=generation, weights_bytes=gguf.stat().st_size,
                               num_layers=backend.num_layers, gguf_path=gguf)


def _load_torch_model(spec: ModelSpec, dtype: Optional[torch.dtype], device: str):
    if isinstance(spec, tuple):
        model, tokenizer = spec
        return model, tokenizer, getattr(model.config, "_name_or_path", None) or type(model).__name__
    from anypair.zoo import load_model

    model, tokenizer = load_model(spec, dtype=dtype, device=device)
    return model, tokenizer, str(spec)


def _checkpoint_dtype(weights: str, device: str) -> Optional[torch.dtype]:
    """What to load before converting: fp32 loads as fp32; every other format converts from the
    checkpoint's own dtype (bf16 in the zoo) so that no fp32 copy of the model ever exists."""
    if weights == "fp32":
        return torch.float32
    if weights == "bf16" or device != "cpu":
        return torch.bfloat16 if weights == "bf16" else torch.float16
    return "auto"  # type: ignore[return-value]  (transformers: the checkpoint's dtype)


def load_torch_member(spec: ModelSpec, *, role: str, weights: str, device: str, backend: str = "torch",
                      linear_kernel: str = "auto") -> LoadedModel:
    """Load `spec` on torch with `weights` ("auto" tries this machine's candidates, fastest first);
    a target's format must pass the batch-invariance contract on the model itself."""
    from anypair.backends.weights import TARGET_WEIGHTS, apply_weights, candidate_weights, weights_bytes

    given = isinstance(spec, tuple)
    if weights == "auto":
        candidates = ["as-given"] if given else candidate_weights(device)
        if role == "draft" and not given:
            candidates = candidates[:1]  # the draft needs no contract: the fastest format is it
    else:
        if role == "target" and weights not in TARGET_WEIGHTS:
            raise InputError(f"weights={weights!r} is not batch-invariant and cannot serve a target "
                             f"(verification would not be exact): use one of {', '.join(TARGET_WEIGHTS)}")
        candidates = [weights]
    for index, candidate in enumerate(candidates):
        if index and not given:
            logger.warning("anypair: %s weights %s failed the batch-invariance contract; trying %s",
                           role, candidates[index - 1], candidate)
        model, hf_tok, name = _load_torch_model(
            spec, None if candidate == "as-given" else _checkpoint_dtype(candidate, device), device)
        model.eval()
        if candidate == "as-given":
            choice_weights, reason = str(next(model.parameters()).dtype).replace("torch.", ""), "as given"
            if next(model.parameters()).device.type == "cpu":
                from anypair.backends.skinny_linear import install_skinny_linear

                kernel = install_skinny_linear(model, linear_kernel)
                reason = f"as given, {kernel.kernel} linear"
        else:
            applied = apply_weights(model, candidate, linear_kernel)
            choice_weights, reason = applied.weights, applied.reason
        member = _torch_member(model, hf_tok, name, role, backend, EngineChoice("torch", choice_weights, reason),
                               weights_bytes(model))
        if role != "target":
            return member
        report = check_target_contract(member)
        member.invariance = report.describe()
        if report.holds or candidate in ("fp32", "as-given"):
            if not report.holds:
                logger.warning("anypair: target %s: %s", name, report.describe())
            return member
        del member, model
    # fp32 always returns above, so only formats that failed the contract get here
    raise BackendError(f"target weights {candidate!r} fail the batch-invariance contract on this machine "
                       f"({report.describe()}): use weights='fp32'")


def _torch_member(model, hf_tok, name: str, role: str, backend_name: str, engine: EngineChoice,
                  held_bytes: int) -> LoadedModel:
    from anypair.backends.torch_hf import TorchBackend

    if backend_name == "ipex":
        from anypair.backends.ipex import make_ipex_backend

        probe = hf_tok("def add(a, b):\n    return a + b\n\nprint(add(2, 3))", add_special_tokens=False)["input_ids"]
        backend: ModelBackend = make_ipex_backend(model, probe, name=f"{role} {name}")
    elif backend_name == "torch":
        backend = TorchBackend(model, name=f"{role} {name}")
    else:
        raise InputError(f"unknown backend {backend_name!r}: use one of {', '.join(BACKENDS)}")
    # the caller checks a target's contract: a failing weights format falls back to the next one
    return member_from_backend(backend, hf_tok, role=role, name=name, engine=engine,
                               generation_config=getattr(model, "generation_config", None), model=model,
                               weights_bytes=held_bytes, num_layers=_num_layers(model.config), check_contract=False)


def check_target_contract(member: LoadedModel):
    """The batch-invariance contract (backends.contract) measured on a loaded target."""
    from anypair.backends.contract import PROBE_TEXT, check_batch_invariance

    ids = member.tokenizer.encode_continuation(PROBE_TEXT)
    return check_batch_invariance(member.backend, ids[:-4], ids[-4:])


def load_member(spec: ModelSpec, *, role: str, engine: str = "auto", weights: str = "auto", device: str = "cpu",
                backend: str = "torch", linear_kernel: str = "auto", threads: Optional[int] = None,
                context: Optional[int] = None) -> LoadedModel:
    """Load a target or draft `spec` onto the engine `engine` resolves to."""
    if isinstance(spec, LoadedModel):
        return spec
    chosen = resolve_engine(spec, engine, role, weights)
    if chosen == "gguf":
        from anypair.backends.quantized_gguf import load_gguf_member
        from anypair.kernels.build import KernelUnavailable

        if device != "cpu":
            raise InputError("the GGUF engine runs on the CPU: use engine='torch' on a GPU")
        try:
            return load_gguf_member(spec, role=role, threads=threads, context=context)
        except KernelUnavailable as exc:
            if engine == "gguf":
                raise
            chosen = "llama.cpp" if str(spec).endswith(".gguf") else "torch"
            logger.warning("anypair: %s; %s runs on %s instead", exc, spec, chosen)
    if chosen == "llama.cpp":
        if device != "cpu":
            raise InputError("the llama.cpp engine runs on the CPU here: use engine='torch' on a GPU")
        return load_llama_cpp_member(spec, role=role, threads=threads, context=context)
    return load_torch_member(spec, role=role, weights=weights, device=device, backend=backend,
                             linear_kernel=linear_kernel)
