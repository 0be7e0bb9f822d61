"""Exceptions that anypair raises. Every message says what went wrong and what to do about it."""
from __future__ import annotations

from typing import Optional


class AnyPairError(Exception):
    """Base class of every error anypair raises on purpose."""


class UnknownModelError(AnyPairError):
    """A model name is neither in the zoo, nor a local folder, nor reachable on the hub."""


class FetchError(AnyPairError):
    """A download failed, a registry was unreachable, or a file did not match its SHA-256."""


class TokenizerError(AnyPairError):
    """A tokenizer file could not be read, or a tokenizer cannot represent some text."""


class InputError(AnyPairError, ValueError):
    """Bad user input: empty prompt, prompt longer than the context, max_new_tokens < 1, ...
    (also a ValueError: it is one, and callers that caught ValueError keep working).

    `field`: the request field to blame, by its name in `generate()` ("prompt", "max_new_tokens",
    "logit_bias", ...), where the check knows it; `code`: a short machine-readable reason
    ("context_length_exceeded"). The server maps both into its 400 error object."""

    def __init__(self, message: str, *, field: Optional[str] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.field = field
        self.code = code


class DamagedFileError(InputError):
    """A file anypair needs is missing, truncated or corrupt (a GGUF, a model folder's weights,
    config or tokenizer); the message names the file and the next step."""


class BackendError(AnyPairError):
    """A model backend is unavailable or failed its correctness check (e.g. IPEX logits differ)."""
