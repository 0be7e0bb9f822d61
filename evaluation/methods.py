"""The evaluation's methods by name, all on the same loaded models and threads. The method protocol
and the methods themselves are anypair's (`anypair.benchmarking.methods`); this module only says
which of them each name means.

- `target`           the target alone, through anypair's own loop (`assisted=False`): the baseline
- `anypair`          anypair with the draft model as drafter
- `anypair-hybrid`   anypair's hybrid drafter: prompt lookup on a long match, the draft model otherwise
- `anypair-lookup`   anypair with prompt-lookup drafting (no draft model)
- `hf-uag`           transformers' universal assisted generation with the same draft model (for a
                     pair sharing a tokenizer, transformers' plain assisted generation)
- `llama.cpp-alone`  the target's GGUF alone on llama.cpp (llama-cpp-python's own greedy loop): what a
                     CPU user runs instead of anypair
- `hf-target`        the target alone through transformers' `generate` (optional: shows whether
                     anypair's baseline loop is as fast as transformers' own)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from anypair.benchmarking.methods import AnyPairMethod, Method, TorchAssistant, TransformersMethod
from anypair.benchmarking.report import BASELINE
from anypair.backends.member import LoadedModel

METHODS_NEEDING_DRAFT = ("anypair", "anypair-hybrid", "hf-uag")
# the methods that drive transformers' generate, so need the target as a torch model
TRANSFORMERS_METHODS = ("hf-uag", "hf-target")
LLAMA_CPP_ALONE = "llama.cpp-alone"
ALL_METHODS = ("target", "anypair", "anypair-hybrid", "anypair-lookup", "hf-uag", LLAMA_CPP_ALONE, "hf-target")
BASELINE_METHOD = BASELINE
# anypair's drafter for each anypair method that drafts
ANYPAIR_DRAFTERS = {"anypair": "model", "anypair-hybrid": "hybrid", "anypair-lookup": "lookup"}


@dataclass(frozen=True)
class LoadedTarget:
    """The target loaded once: `member` on anypair's engine (the GGUF engine for a GGUF-sourced target),
    `torch_copy` for transformers' methods (the member itself when it already runs on torch; None when
    no transformers method runs), and the spec it was loaded from (llama.cpp alone finds its GGUF by it)."""

    spec: str
    member: LoadedModel
    torch_copy: Optional[LoadedModel] = None


@dataclass(frozen=True)
class LoadedDraft:
    """A draft loaded once: anypair's member, and transformers' own copy when a transformers method runs."""

    member: LoadedModel
    assistant: Optional[TorchAssistant]

    @property
    def name(self) -> str:
        return self.member.name


class MethodUnavailable(Exception):
    """A method cannot run on this machine (say, llama.cpp alone without llama-cpp-python)."""


def build_method(name: str, target: LoadedTarget, draft: Optional[LoadedDraft], threads: int) -> Method:
    """The method `name` on the shared models (`draft` is ignored by methods that use none)."""
    from anypair import AnyPairGenerator
    from anypair.benchmarking.bench import llama_cpp_alone

    if name == "target":
        return AnyPairMethod(name, AnyPairGenerator(target.member, None, threads=threads), assisted=False)
    if name == "anypair-lookup":
        return AnyPairMethod(name, AnyPairGenerator(target.member, None, drafter="lookup", threads=threads),
                             assisted=True)
    if name == LLAMA_CPP_ALONE:
        method = llama_cpp_alone(target.spec, target.member, threads)
        if method is None:
            raise MethodUnavailable(f"{name} needs llama-cpp-python and a GGUF of {target.spec}")
        return method
    if name in TRANSFORMERS_METHODS and target.torch_copy is None:
        raise ValueError(f"method {name} needs the target as a torch model: load it with torch_copy")
    if name == "hf-target":
        return TransformersMethod(name, target.torch_copy, None)
    if name not in METHODS_NEEDING_DRAFT:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(ALL_METHODS)}")
    if draft is None:
        raise ValueError(f"method {name} needs a draft")
    if name in ANYPAIR_DRAFTERS:
        generator = AnyPairGenerator(target.member, draft.member, drafter=ANYPAIR_DRAFTERS[name], threads=threads)
        return AnyPairMethod(name, generator, assisted=True, draft_name=draft.name)
    if draft.assistant is None:
        raise ValueError(f"method {name} needs transformers' copy of {draft.name}: load it with TorchAssistant.load")
    return TransformersMethod(name, target.torch_copy, draft.assistant)
