"""A loaded member of a pair (the target or the draft): what every engine's loader returns.

`LoadedModel` holds a member's tokenizers, EOS ids and the `ModelBackend` that runs it;
`member_from_backend` builds one from any backend (all a new engine needs besides its backend);
`LoadOptions` is what the generator's options say about loading, handed to every engine alike.
This module sits in backends/ so that an engine builds its member without reaching up into
generation/ (which picks the engine: `anypair.generation.members`).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from anypair.backends.base import ModelBackend
from anypair.errors import InputError
from anypair.tokenization.base import TokenizerAdapter

logger = logging.getLogger("anypair")

ModelSpec = Union[str, "os.PathLike[str]", tuple]  # hub id, local folder, .gguf file, or (model, hf_tokenizer)


@dataclass(frozen=True)
class EngineChoice:
    """What runs a member, and why: shown by `anypair generate -v` and recorded by the benchmarks."""

    engine: str  # a name in anypair.backends.engines (or a caller's own, for a member it built itself)
    weights: str  # "fp32", "fp16", "bf16", "int8" (torch), the GGUF's block types (gguf) or file name (llama.cpp)
    reason: str

    def describe(self) -> str:
        return f"{self.engine} {self.weights} ({self.reason})"


@dataclass(frozen=True)
class LoadOptions:
    """How to load a member, whichever engine runs it (each engine reads the fields it uses)."""

    weights: str = "auto"  # torch's weights format ("auto": this machine's fastest that passes the contract)
    device: str = "cpu"
    backend: str = "torch"  # "torch" or "ipex", for torch-engine members
    linear_kernel: str = "auto"  # torch's few-token linear kernel (backends.skinny_linear)
    threads: Optional[int] = None
    context: Optional[int] = None  # the gguf and llama.cpp engines' context length


@dataclass
class LoadedModel:
    """A member of the pair, ready to run."""

    name: str
    hf_tokenizer: Any  # transformers tokenizer: chat template and prompt encoding
    tokenizer: TokenizerAdapter  # exact bytes per id
    eos_ids: frozenset[int]
    backend: ModelBackend
    engine: EngineChoice
    model: Any = None  # the transformers model on the torch engine; None on the GGUF engines
    weights_bytes: int = 0  # bytes of weights held (the GGUF's size on llama.cpp)
    num_layers: int = 1
    gguf_path: Optional[Path] = None
    invariance: Optional[str] = field(default=None)  # the target's contract check, as measured

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf_tokenizer, "chat_template", None))

    @property
    def renders_tools(self) -> bool:
        """Whether the chat template renders tool definitions (it reads a `tools` variable: Qwen2.5's
        does, SmolLM2's does not); a tokenizer may keep a separate "tool_use" template."""
        template = getattr(self.hf_tokenizer, "chat_template", None)
        if isinstance(template, dict):
            return "tool_use" in template or any("tools" in text for text in template.values())
        return bool(template) and "tools" in template

    def render(self, prompt: Optional[str], messages: Optional[Sequence[dict]],
               tools: Optional[Sequence[dict]] = None) -> list[int]:
        """The model's own token ids for a raw prompt or a conversation (its own chat template, with
        `tools`, OpenAI's tool definitions, where given)."""
        if messages is not None:
            if not self.has_chat_template:
                raise InputError(f"{self.name} has no chat template: pass the conversation as raw text "
                                 "(prompt= instead of messages=; --raw on the command line)")
            if tools and not self.renders_tools:
                raise InputError(f"{self.name}'s chat template does not render tools: this model was not given a way "
                                 "to call them; leave tools out")
            ids = self.hf_tokenizer.apply_chat_template(list(messages), tools=list(tools) if tools else None,
                                                        add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            if ids and isinstance(ids[0], list):
                ids = ids[0]
            return [int(i) for i in ids]
        return [int(i) for i in self.hf_tokenizer(prompt, add_special_tokens=True)["input_ids"]]


def eos_ids_of(adapter: TokenizerAdapter, generation_config) -> frozenset[int]:
    """The tokenizer's EOS ids and those the model's generation config adds."""
    eos = set(adapter.eos_ids)
    configured = getattr(generation_config, "eos_token_id", None)
    if configured is not None:
        eos.update([configured] if isinstance(configured, int) else list(configured))
    return frozenset(int(e) for e in eos)


def member_from_backend(backend: ModelBackend, hf_tokenizer: Any, *, role: str, name: str, engine: EngineChoice,
                        generation_config: Any = None, model: Any = None, weights_bytes: int = 0, num_layers: int = 1,
                        gguf_path: Optional[Path] = None, check_contract: bool = True) -> LoadedModel:
    """A member on any engine, from its `ModelBackend` and the model's transformers tokenizer.

    This is all an engine's loader needs besides its backend (see backends/engines.py); a member
    built here can also be passed to `AnyPairGenerator` as the target or the draft as it is. A
    target's backend is checked against the batch-invariance contract (`invariance` holds the
    measurement; a failure is logged, since outputs may then differ from the target's own
    single-token run at near-ties). `check_contract=False`: the caller checks."""
    from anypair.tokenization import from_hf

    adapter = from_hf(hf_tokenizer, model_vocab_size=backend.vocab_size)
    member = LoadedModel(name, hf_tokenizer, adapter, eos_ids_of(adapter, generation_config), backend, engine, model,
                         weights_bytes, num_layers, gguf_path)
    if role == "target" and check_contract:
        report = check_target_contract(member, gguf_path)
        if not report.holds:
            logger.warning("anypair: target %s on %s: %s", name, engine.engine, report.describe())
    return member


def check_target_contract(member: LoadedModel, weights: Optional[Path] = None):
    """The batch-invariance contract (backends.contract) on a loaded target, in the shapes verification
    uses (row counts after cached contexts of several lengths), written to `member.invariance`.
    `weights`: the file or folder a CPU target's weights were read from, whose verdict this machine may
    have kept (backends.contract_cache); None (a model passed in, a GPU): measured now."""
    from anypair.backends.contract import PROBE_TEXT, check_contract, contract_shapes
    from anypair.backends.contract_cache import measured_or_kept, verdict_key

    def measure():
        ids = member.tokenizer.encode_continuation(PROBE_TEXT)
        return check_contract(member.backend, ids, contract_shapes(member.backend))

    key = None if weights is None else verdict_key(weights, member.engine.describe())
    report, kept = measured_or_kept(key, measure)
    member.invariance = report.describe() + (" (kept from an earlier check of these weights here)" if kept else "")
    return report
