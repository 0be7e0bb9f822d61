"""Model backends (prefill, score k new tokens, roll back) and the engines that load a member onto
one: the gguf engine (the default), llama.cpp and torch (with optional checked IPEX), declared in
`anypair.backends.engines`."""
from anypair.backends.base import ModelBackend
from anypair.backends.torch_hf import TorchBackend, model_max_context, model_vocab_rows

__all__ = ["ModelBackend", "TorchBackend", "model_max_context", "model_vocab_rows"]
