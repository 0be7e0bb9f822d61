"""Input checks that need no model: generator options and request arguments. Each failure is a
one-line InputError saying what is wrong and what to do. They run before anything loads, so the
CLI rejects a bad flag in milliseconds instead of after loading two models."""
from __future__ import annotations

import math
from typing import Optional, Sequence

from anypair.errors import InputError


def check_options(num_draft_tokens: Optional[int], confidence_threshold: Optional[float],
                  threads: Optional[int], draft_window: Optional[int] = None) -> None:
    """The generator's numeric options (None means the default for each)."""
    if num_draft_tokens is not None and (not _is_int(num_draft_tokens) or num_draft_tokens < 1):
        raise InputError(f"num_draft_tokens (-k) must be a positive integer, got {num_draft_tokens!r}: "
                         "leave it unset for the default (to draft nothing: --no-assisted, assisted=False)")
    if confidence_threshold is not None and not (_is_number(confidence_threshold) and 0 <= confidence_threshold <= 1):
        raise InputError(f"confidence_threshold must be a probability in [0, 1], got {confidence_threshold!r} "
                         "(0 turns confidence stopping off; leave it unset for the adaptive default)")
    if threads is not None and (not _is_int(threads) or threads < 1):
        raise InputError(f"threads must be a positive integer, got {threads!r}: leave it unset for torch's default")
    if draft_window is not None and (not _is_int(draft_window) or draft_window < 0):
        raise InputError(f"draft_window must be a whole number of draft tokens >= 0, got {draft_window!r} "
                         "(0: the draft reads the whole prompt)")


SAMPLED_DRAFTS = ("greedy", "intersection")


def check_choices(drafter: object, draft_length: object, sampled_drafts: object) -> None:
    """The generator's named options (a Drafter or a DraftLengthPolicy instance passes as itself)."""
    from anypair.drafters import DRAFTERS
    from anypair.policies import POLICIES as DRAFT_LENGTHS

    if isinstance(drafter, str) and drafter not in DRAFTERS:
        raise InputError(f"unknown drafter {drafter!r}: use one of {', '.join(DRAFTERS)} or a Drafter instance")
    if isinstance(draft_length, str) and draft_length not in DRAFT_LENGTHS:
        raise InputError(f"unknown draft_length {draft_length!r}: use one of {', '.join(DRAFT_LENGTHS)} "
                         "or a DraftLengthPolicy instance")
    if sampled_drafts not in SAMPLED_DRAFTS:
        raise InputError(f"sampled_drafts must be one of {', '.join(SAMPLED_DRAFTS)}, got {sampled_drafts!r}")


def engine_options() -> tuple[str, ...]:
    """What engine= and draft_engine= accept: "auto" and every registered engine's name."""
    from anypair.backends.engines import engine_names

    return ("auto", *engine_names())


def check_engine(engine: object, what: str = "engine") -> None:
    choices = engine_options()
    if engine not in choices:
        raise InputError(f"unknown {what} {engine!r}: use one of {', '.join(choices)}")


def check_member_options(engine: object, draft_engine: object, backend: object, linear_kernel: object,
                         context: object, device: object) -> None:
    """The options that choose how each model is loaded and run."""
    import torch

    from anypair.backends.skinny_linear import KERNELS
    from anypair.backends.torch_engine import BACKENDS

    check_engine(engine, "engine")
    check_engine(draft_engine, "draft_engine")
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)} (ipex is optional)")
    if linear_kernel not in KERNELS:
        raise InputError(f"unknown linear_kernel {linear_kernel!r}: use one of {', '.join(KERNELS)}")
    if context is not None and (not _is_int(context) or context < 16):
        raise InputError(f"context must be an integer of at least 16 tokens, got {context!r}: "
                         "leave it unset for the model's trained context (as far as memory holds its KV cache)")
    if device is not None and (not isinstance(device, str) or not device):
        raise InputError(f"device must be a string such as 'cpu' or 'cuda' (or None: each engine's own), got {device!r}")
    if device is not None:
        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            raise InputError(f"device {device!r} is not a torch device: use cpu, cuda or cuda:N") from None


def check_text(text: str, what: str) -> None:
    """Text a tokenizer can read: a str that is valid Unicode (no lone surrogates, which is what
    bytes that are not UTF-8 become on a command line)."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"{what} is not valid Unicode: character {exc.start} is a lone surrogate U+{ord(text[exc.start]):04X} "
            "(bytes that are not UTF-8 become these); pass UTF-8 text") from None


def check_request(prompt: Optional[str], messages: Optional[Sequence[dict]], max_new_tokens: int) -> None:
    """One request's text and length (the sampling arguments are SamplingConfig's to check)."""
    if (prompt is None) == (messages is None):
        raise InputError("pass exactly one of prompt= (raw text) or messages= (a chat conversation)")
    if prompt is not None:
        check_text(prompt, "the prompt")
        if prompt == "":
            raise InputError("the prompt is empty: give some text to continue")
    if messages is not None:
        if isinstance(messages, (str, dict)) or not messages:
            raise InputError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                    or not isinstance(message.get("content"), str):
                raise InputError(f"messages[{i}] must be a dict with a str 'role' and a str 'content', got {message!r}")
            check_text(message["role"], f"messages[{i}]['role']")
            check_text(message["content"], f"messages[{i}]['content']")
    if not _is_int(max_new_tokens) or max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
