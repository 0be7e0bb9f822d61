"""The evaluation's methods by name, all on the same loaded models, weights and threads. The method
protocol and the methods themselves are anypair's (`anypair.benchmarking.methods`); this module
only says which of them each name means.

- `target`          the target alone, through anypair's own loop (`assisted=False`): the baseline
- `anypair`         anypair with the draft model as drafter
- `anypair-lookup`  anypair with prompt-lookup drafting (no draft model)
- `hf-uag`          transformers' universal assisted generation with the same draft model (for a
                    pair sharing a tokenizer, transformers' plain assisted generation)
- `hf-target`       the target alone through transformers' `generate` (optional: shows whether
                    anypair's baseline loop is as fast as transformers' own)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from anypair.benchmarking.methods import AnyPairMethod, Method, TorchAssistant, TransformersMethod
from anypair.benchmarking.report import BASELINE
from anypair.generation.members import LoadedModel

METHODS_NEEDING_DRAFT = ("anypair", "hf-uag")
ALL_METHODS = ("target", "anypair", "anypair-lookup", "hf-uag", "hf-target")
BASELINE_METHOD = BASELINE


@dataclass(frozen=True)
class LoadedDraft:
    """A draft loaded once: anypair's member, and transformers' own copy when a transformers method runs."""

    member: LoadedModel
    assistant: Optional[TorchAssistant]

    @property
    def name(self) -> str:
        return self.member.name


def build_method(name: str, target: LoadedModel, draft: Optional[LoadedDraft], threads: int) -> Method:
    """The method `name` on the shared models (`draft` is ignored by methods that use none)."""
    from anypair import AnyPairGenerator

    if name == "target":
        return AnyPairMethod(name, AnyPairGenerator(target, None, threads=threads), assisted=False)
    if name == "anypair-lookup":
        return AnyPairMethod(name, AnyPairGenerator(target, None, drafter="lookup", threads=threads), assisted=True)
    if name == "hf-target":
        return TransformersMethod(name, target, None)
    if name not in METHODS_NEEDING_DRAFT:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(ALL_METHODS)}")
    if draft is None:
        raise ValueError(f"method {name} needs a draft")
    if name == "anypair":
        generator = AnyPairGenerator(target, draft.member, drafter="model", threads=threads)
        return AnyPairMethod(name, generator, assisted=True, draft_name=draft.name)
    if draft.assistant is None:
        raise ValueError(f"method {name} needs transformers' copy of {draft.name}: load it with TorchAssistant.load")
    return TransformersMethod(name, target, draft.assistant)
