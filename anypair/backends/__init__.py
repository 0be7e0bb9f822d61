"""Model backends: prefill, score k new tokens, roll back. torch (default) and optional IPEX."""
from anypair.backends.base import ModelBackend
from anypair.backends.torch_hf import TorchBackend, model_max_context, model_vocab_rows

__all__ = ["ModelBackend", "TorchBackend", "model_max_context", "model_vocab_rows"]
