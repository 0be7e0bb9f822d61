"""One member of a pair (the target or the draft) loaded onto an engine: which engine, picked here
from the engines' declared facts (`anypair.backends.engines`), and the load itself, which each
engine's own module does (`Engine.load`); and how the draft member reads a request (`DraftPrompt`).

"auto" picks, for a spec offering the kinds of source an engine loads (a GGUF file, a checkpoint,
a loaded model), the first engine of the registry that can run here (`Engine.unavailable`) and runs
the model (`Engine.runs`, e.g. its architecture); a target tries the engines that may serve one
exactly first (`Engine.exact_target`), and weights= other than "auto" asks for an engine that takes
torch's formats. With the built-in engines that is: the GGUF engine for a GGUF of an architecture it
runs (llama, qwen2, qwen3, phi3, gemma2, gemma3: the target's and the draft's default, exact);
llama.cpp for a draft GGUF the GGUF engine does not run when llama-cpp-python is installed, and for a
.gguf target of such an architecture;
torch for everything else. A member passed already loaded (`LoadedModel`) is used as it is.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import torch

from anypair.backends.engines import Engine, engine_named, engines
from anypair.backends.member import LoadedModel, LoadOptions, ModelSpec
from anypair.backends.sources import LOADED, is_gguf_file, source_kinds
from anypair.errors import InputError
from anypair.generation.checks import check_engine

logger = logging.getLogger("anypair")


def _check_named_engine(spec: ModelSpec, chosen: Engine, weights: str) -> None:
    """An engine asked for by name must load what `spec` is and take the weights asked for."""
    if is_gguf_file(spec) and "gguf" not in chosen.sources:
        readers = [e.name for e in engines() if "gguf" in e.sources]
        raise InputError(f"{spec} is a GGUF file, which the {chosen.name} engine does not run: use engine="
                         f"{' or '.join(repr(n) for n in readers)} (or a Hugging Face folder for torch)")
    if weights != "auto" and not chosen.takes_weights:
        raise InputError(f"weights={weights!r} is a torch format; the {chosen.name} engine serves the file's own "
                         "blocks: leave weights unset, or use engine='torch'")


def resolve_engine(spec: ModelSpec, engine: str, role: str, weights: str = "auto",
                   excluded: tuple[str, ...] = ()) -> str:
    """The engine that runs `spec` as `role`: `engine` itself when named, else "auto"'s pick (see
    the module's docstring); `excluded`: engines that already failed to load it."""
    check_engine(engine)
    if engine != "auto":
        _check_named_engine(spec, engine_named(engine), weights)
        return engine
    offered = source_kinds(spec)
    candidates = [e for e in engines() if e.sources & offered and e.name not in excluded
                  and (weights == "auto" or e.takes_weights)]
    if role == "target":
        candidates.sort(key=lambda e: not e.exact_target)  # stable: registry order among equals
    reasons = []
    for candidate in candidates:
        why_not = candidate.unavailable()
        if why_not is None and candidate.runs(spec):
            if reasons:
                logger.warning("anypair: %s; %s runs on %s instead", "; ".join(reasons), spec, candidate.name)
            return candidate.name
        if why_not is not None:
            reasons.append(why_not)
    if not candidates and excluded:
        raise InputError(f"no engine but {', '.join(excluded)} loads {spec} here (see the warning above)")
    if not candidates:
        raise InputError(f"no engine loads {spec}: give a zoo model, a model folder, a .gguf file or a loaded "
                         "(model, tokenizer) pair")
    # none can run here: the first that runs the model, whose load then says in one line what is missing
    return next((c.name for c in candidates if c.runs(spec)), candidates[0].name)


def load_member(spec: ModelSpec, *, role: str, engine: str = "auto", weights: str = "auto", device: Optional[str] = None,
                backend: str = "torch", linear_kernel: str = "auto", threads: Optional[int] = None,
                context: Optional[int] = None) -> LoadedModel:
    """Load a target or draft `spec` onto the engine `resolve_engine` picks, on `device` (None: the
    engine's own device, the GPU for torch when there is one)."""
    from anypair.kernels.build import KernelUnavailable

    if isinstance(spec, LoadedModel):
        return spec
    failed: tuple[str, ...] = ()
    while True:
        chosen = engine_named(resolve_engine(spec, engine, role, weights, excluded=failed))
        member_device = device if device is not None else chosen.devices[0] if chosen.devices else (
            "cuda" if torch.cuda.is_available() else "cpu")
        options = LoadOptions(weights=weights, device=member_device, backend=backend, linear_kernel=linear_kernel,
                              threads=threads, context=context)
        if chosen.devices is not None and member_device not in chosen.devices:
            raise InputError(f"the {chosen.name} engine runs on {', '.join(chosen.devices)}, not {member_device!r}: "
                             "use engine='torch' on a GPU")
        if isinstance(spec, tuple) and LOADED not in chosen.sources:  # other specs: the loader says what is missing
            raise InputError(f"the {chosen.name} engine cannot run a model already loaded in memory: use engine='auto'")
        try:
            return chosen.load(spec, role=role, options=options)
        except KernelUnavailable as exc:  # the compiler is there but the build failed: try the next engine
            if engine != "auto":
                raise
            logger.warning("anypair: %s; trying the next engine for %s", exc, spec)
            failed += (chosen.name,)


class DraftPrompt:
    """The draft's own ids for a request's prompt. A conversation goes through the draft's chat
    template where it has one (and, with tools, renders them); a draft without one (a base model, the
    usual draft), or one whose template knows no tools, reads the target's rendered conversation as
    raw text, so chat works for every pair. The last request's ids are kept: its fit is checked
    before its drafter starts, and both read them."""

    def __init__(self, target: LoadedModel, draft: LoadedModel) -> None:
        self.target, self.draft = target, draft
        self._last: Optional[tuple[tuple, tuple[int, ...]]] = None  # (the request's key, its draft ids)

    def ids(self, prompt: Optional[str], messages: Optional[Sequence[dict]], target_ids: Sequence[int],
            tools: Optional[Sequence[dict]] = None) -> list[int]:
        # one request comes as tuples (GenerationRequest) to the fit check and as lists (DraftRequest) to the drafter
        key = (prompt, repr(list(messages)) if messages is not None else None, repr(list(tools or ())),
               tuple(target_ids))
        last = self._last
        if last is not None and last[0] == key:
            return list(last[1])
        ids = self._render(prompt, messages, target_ids, tools)
        self._last = (key, tuple(ids))
        return ids

    def _render(self, prompt: Optional[str], messages: Optional[Sequence[dict]], target_ids: Sequence[int],
                tools: Optional[Sequence[dict]]) -> list[int]:
        if messages is None or (self.draft.has_chat_template and (not tools or self.draft.renders_tools)):
            return self.draft.render(prompt, messages, tools)
        # the draft's tokenizer adds its own BOS to the text, so the target's is left out of it; only
        # where the target adds one to raw text is a leading BOS id one (SmolLM2's BOS id is <|im_start|>)
        bos = self.target.tokenizer.bos_id
        target_adds_bos = bos is not None and self.target.render("a", None)[:1] == [bos]
        body = list(target_ids[1:]) if target_adds_bos and list(target_ids[:1]) == [bos] else list(target_ids)
        rendered = self.target.hf_tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return self.draft.render(rendered, None)
