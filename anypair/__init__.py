"""anypair: lossless speculative decoding with any small draft model, whatever its tokenizer.

    from anypair import AnyPairGenerator
    gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-1.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
    print(gen.generate("def fibonacci(n):", max_new_tokens=64).text)
"""
from anypair.errors import AnyPairError, FetchError, InputError, TokenizerError, UnknownModelError
from anypair.types import GenerationResult, GenerationStats, SamplingConfig

__version__ = "0.1.0"


def __getattr__(name):  # lazy: importing anypair must not import torch models eagerly
    if name == "AnyPairGenerator":
        from anypair.generation.generator import AnyPairGenerator

        return AnyPairGenerator
    if name == "fetch":
        from anypair.zoo import fetch

        return fetch
    raise AttributeError(name)


__all__ = [
    "AnyPairGenerator",
    "AnyPairError",
    "FetchError",
    "InputError",
    "TokenizerError",
    "UnknownModelError",
    "GenerationResult",
    "GenerationStats",
    "SamplingConfig",
    "fetch",
]
