"""The torch engine: a transformers model (a checkpoint, or a model already loaded) loaded as a
member, its weights converted to the format chosen for this machine (`backends.weights`); for a
target the format must pass the batch-invariance contract (`backends.contract`) on the model
itself, or "auto" falls back to the next candidate. Runs on `backends.torch_hf.TorchBackend`, or
the optional checked IPEX backend (`backends.ipex`)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import torch

from anypair.backends.base import ModelBackend
from anypair.backends.member import (EngineChoice, LoadedModel, LoadOptions, ModelSpec, check_target_contract,
                                     member_from_backend)
from anypair.errors import BackendError, InputError

logger = logging.getLogger("anypair")

#: what runs a torch member's forward: plain torch, or IPEX checked against it (optional)
BACKENDS = ("torch", "ipex")


def _num_layers(config) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "num_hidden_layers", 1) or 1)


def _load_torch_model(spec: ModelSpec, dtype: Optional[torch.dtype], device: str):
    """(model, tokenizer, name, the folder its weights were read from: None for a model passed in or
    a hub id, whose weights the contract's verdict cannot be kept for)."""
    if isinstance(spec, tuple):
        model, tokenizer = spec
        return model, tokenizer, getattr(model.config, "_name_or_path", None) or type(model).__name__, None
    from anypair.zoo import load_model
    from anypair.zoo.resolve import resolve_model

    model, tokenizer = load_model(spec, dtype=dtype, device=device)  # its errors name the spec (a zoo model's advice)
    location = resolve_model(spec)  # where it was read from, as load_model found it (one stat a file, no hashing)
    return model, tokenizer, str(spec), location if isinstance(location, Path) else None


def _checkpoint_dtype(weights: str, device: str) -> Optional[torch.dtype]:
    """What to load before converting: fp32 loads as fp32; every other format converts from the
    checkpoint's own dtype (bf16 in the zoo) so that no fp32 copy of the model ever exists."""
    if weights == "fp32":
        return torch.float32
    if weights == "bf16" or device != "cpu":
        return torch.bfloat16 if weights == "bf16" else torch.float16
    return "auto"  # type: ignore[return-value]  (transformers: the checkpoint's dtype)


def load_torch_member(spec: ModelSpec, *, role: str, options: LoadOptions) -> LoadedModel:
    """Load `spec` on torch with `options.weights` ("auto" tries this machine's candidates, fastest
    first); a target's format must pass the batch-invariance contract on the model itself."""
    from anypair.backends.weights import TARGET_WEIGHTS, apply_weights, candidate_weights, weights_bytes

    weights, device = options.weights, options.device
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
        model, hf_tok, name, folder = _load_torch_model(
            spec, None if candidate == "as-given" else _checkpoint_dtype(candidate, device), device)
        model.eval()
        if candidate == "as-given":
            choice_weights, reason = str(next(model.parameters()).dtype).replace("torch.", ""), "as given"
            if next(model.parameters()).device.type == "cpu":
                from anypair.backends.skinny_linear import install_skinny_linear

                kernel = install_skinny_linear(model, options.linear_kernel)
                reason = f"as given, {kernel.kernel} linear"
        else:
            applied = apply_weights(model, candidate, options.linear_kernel)
            choice_weights, reason = applied.weights, applied.reason
        member = _torch_member(model, hf_tok, name, role, options.backend,
                               EngineChoice("torch", choice_weights, reason), weights_bytes(model))
        if role != "target":
            return member
        on_cpu = next(model.parameters()).device.type == "cpu"
        report = check_target_contract(member, folder if on_cpu else None)
        if report.holds or (on_cpu and candidate in ("fp32", "as-given")):
            if not report.holds:
                logger.warning("anypair: target %s: %s", name, report.describe())
            return member
        del member, model
    if on_cpu:  # fp32 on the CPU always returns above: only a faster format failed
        raise BackendError(f"target weights {candidate!r} fail the batch-invariance contract on this machine "
                           f"({report.describe()}): use weights='fp32'")
    # a GPU's kernels are picked by the library per shape, fp32's too (on an H100 an fp32 Qwen2.5 target wrote
    # another greedy text than its own on 1 prompt of 4, its 4-row logits off by 9.5e-4): a target
    # that fails there is refused rather than served with a text that may differ from its own
    if given:
        advice = ("pass it in float32 (model.float()), or its folder or hub id (weights='auto' loads float32), "
                  "or run it on the CPU (device='cpu')")
    else:
        advice = "run the target on the CPU (device='cpu'), where anypair's engines are exact"
    raise BackendError(f"target {name} ({choice_weights}) on {device} fails the batch-invariance contract, so "
                       f"verification would not be exact ({report.describe()}): {advice}")


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
