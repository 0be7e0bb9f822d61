"""AnyPairGenerator: the front door. (Being written: this file fixes the public signature.)"""
from __future__ import annotations

from typing import Iterator, Optional, Sequence, Union

from anypair.types import GenerationResult

ModelSpec = Union[str, "os.PathLike[str]", tuple]  # hub id, local folder, or (model, hf_tokenizer)


class AnyPairGenerator:
    """Speculative decoding of `target` with `draft`, whatever their tokenizers.

    AnyPairGenerator(target, draft=None, *, drafter="model"|"lookup"|"hybrid"|Drafter,
                     draft_length="adaptive"|"constant"|"heuristic"|DraftLengthPolicy,
                     num_draft_tokens=None, dtype=None ("bfloat16" default on CPUs with bf16,
                     "float32" on request), device=None, backend="torch"|"ipex", threads=None)

    generate(prompt=None, *, messages=None, max_new_tokens=128, stop=None, do_sample=False,
             temperature=1.0, top_k=0, top_p=1.0, seed=None, assisted=True) -> GenerationResult
    stream(...same...) -> Iterator[str]
    """

    def __init__(self, target: ModelSpec, draft: Optional[ModelSpec] = None, **options) -> None:
        raise NotImplementedError

    def generate(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None, **kw) -> GenerationResult:
        raise NotImplementedError

    def stream(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None, **kw) -> Iterator[str]:
        raise NotImplementedError
