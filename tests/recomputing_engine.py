"""An engine as a newcomer would add one, in one file (tests/test_engines.py registers it): a
`ModelBackend` with no KV cache at all, which runs the model over the whole sequence on every call
(slow, but complete), and the loader the engine registry calls."""
from __future__ import annotations

import torch

from anypair.backends.base import ModelBackend
from anypair.backends.member import EngineChoice, LoadedModel, LoadOptions, member_from_backend


class RecomputingBackend(ModelBackend):
    name = "recomputing"

    def __init__(self, model) -> None:
        from anypair.backends.torch_hf import model_max_context, model_vocab_rows

        self.model = model
        self.vocab_size = model_vocab_rows(model)
        self.max_context = model_max_context(model)
        self.ids: list[int] = []

    @property
    def cached_length(self) -> int:
        return len(self.ids)

    def extend(self, ids, all_logits=False):
        self.ids.extend(int(i) for i in ids)
        with torch.inference_mode():
            logits = self.model(torch.tensor([self.ids])).logits[0, -len(ids):].float()
        return logits if all_logits else logits[-1]

    def crop(self, length: int) -> None:
        del self.ids[length:]

    def reset(self) -> None:
        self.ids = []


def load_recomputing_member(spec, *, role: str, options: LoadOptions) -> LoadedModel:
    """A zoo model or checkpoint folder, in fp32, on RecomputingBackend."""
    from anypair.zoo import load_model

    model, hf_tokenizer = load_model(spec, dtype=torch.float32)
    return member_from_backend(RecomputingBackend(model.eval()), hf_tokenizer, role=role, name=str(spec),
                               engine=EngineChoice("recomputing", "fp32", "no KV cache"),
                               generation_config=model.generation_config)
