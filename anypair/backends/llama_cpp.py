"""llama.cpp behind the `ModelBackend` interface (through llama-cpp-python), reading a GGUF file.

As a DRAFT engine it runs the GGUFs anypair's own gguf engine does not (Gemma 3): SmolLM2-135M Q4_1
takes 9.3 ms a step here on 2 cores, against 3.4 ms on the gguf engine (the default for llama/qwen2
GGUFs) and ~55 ms in torch, most of which is Python per layer. The draft's numerics never reach the
output, so quantized weights cost nothing but acceptance. llama-cpp-python is optional
(`anypair install llama.cpp`): the main job does not need it.

As a TARGET engine it runs a user's own GGUF with any draft, which llama.cpp itself no longer
offers across vocabularies. Its batched decode is not batch-invariant (scoring k tokens in one call
gives logits that differ from k single-token calls by 0.2-1.2 on Qwen2.5-1.5B Q4_K_M), so output
equals llama.cpp's own single-token greedy run only where no near-tie flips: `anypair bench` counts
how often. The gguf and torch engines keep the exact contract (see contract.py).

Positions map 1:1 onto the KV cache of sequence 0: `crop(n)` removes positions n.. from it.
Logits are read per position with `llama_get_logits_ith` (llama-cpp-python's `Llama.scores` is
only filled when every position's logits are kept, which costs memory for nothing here).
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from anypair.backends.base import ModelBackend
from anypair.backends.llama_cpp_guard import LLAMA_CPP_INSTALL, require_llama_cpp_runs
from anypair.backends.member import EngineChoice, LoadedModel, LoadOptions, ModelSpec, member_from_backend
from anypair.errors import BackendError, InputError

#: llama.cpp context length when the caller names none: KV memory grows with it
DEFAULT_CONTEXT = 8192
#: tokens per llama_decode call while reading a prompt
PREFILL_CHUNK = 512


def llama_cpp_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True



def _require_llama_cpp():
    try:
        import llama_cpp
    except ImportError as exc:
        raise BackendError(f"the llama.cpp engine needs llama-cpp-python: {LLAMA_CPP_INSTALL}; "
                           "or use engine='gguf' / 'torch'") from exc
    return llama_cpp


class LlamaCppBackend(ModelBackend):
    """A GGUF model on llama.cpp's CPU backend, with a KV cache that can be rolled back."""

    def __init__(self, gguf_path: str | os.PathLike, *, name: str = "llama.cpp", threads: Optional[int] = None,
                 context: Optional[int] = None) -> None:
        llama_cpp = _require_llama_cpp()
        path = Path(gguf_path)
        if not path.is_file():
            raise InputError(f"{path}: no such GGUF file; give the path of a .gguf model")
        self._lib = llama_cpp
        self.name = name
        self.gguf_path = path
        threads = threads or torch.get_num_threads()
        from anypair.tokenization.gguf_vocab import read_gguf_metadata

        try:
            metadata = read_gguf_metadata(path)
        except (ValueError, OSError) as exc:
            raise BackendError(f"{path} is not a readable GGUF file ({exc}); re-fetch it") from exc
        trained = next((int(v) for k, v in metadata.items() if k.endswith(".context_length")), DEFAULT_CONTEXT)
        self.num_layers = next((int(v) for k, v in metadata.items() if k.endswith(".block_count")), 1)
        n_ctx = min(trained, context or DEFAULT_CONTEXT)
        # a llama.cpp that crashes on this machine (SIGILL in its AMX path) costs one line, not the process
        require_llama_cpp_runs(path, threads)
        try:
            self._llama = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_batch=PREFILL_CHUNK, n_threads=threads,
                                          n_threads_batch=threads, logits_all=False, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendError(f"llama.cpp could not load {path}: {exc}; check that it is a complete GGUF model "
                               "file (re-fetch it with `anypair fetch --verify`)") from exc
        self._ctx = self._llama._ctx.ctx
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        vocab = llama_cpp.llama_model_get_vocab(self._llama._model.model)
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self.max_context = n_ctx
        self.threads = threads
        self._batch = llama_cpp.llama_batch_init(PREFILL_CHUNK, 0, 1)
        self._length = 0

    def __del__(self) -> None:
        batch, self._batch = getattr(self, "_batch", None), None
        if batch is not None:
            self._lib.llama_batch_free(batch)

    @property
    def cached_length(self) -> int:
        return self._length

    def reset(self) -> None:
        self._lib.llama_memory_clear(self._memory, True)
        self._length = 0

    def crop(self, length: int) -> None:
        if length < 0 or length > self._length:
            raise ValueError(f"cannot crop a cache of {self._length} positions to {length}")
        if length < self._length and not self._lib.llama_memory_seq_rm(self._memory, 0, length, -1):
            raise BackendError(f"{self.name}: llama.cpp could not roll its KV cache back to {length} positions")
        self._length = length

    def _decode(self, ids: Sequence[int], logits_for_all: bool) -> None:
        batch = self._batch
        batch.n_tokens = len(ids)
        for i, token in enumerate(ids):
            batch.token[i] = token
            batch.pos[i] = self._length + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = logits_for_all or i == len(ids) - 1
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise BackendError(f"{self.name}: llama_decode failed with status {status}")
        self._length += len(ids)

    def _logits(self, index: int) -> torch.Tensor:
        pointer = self._lib.llama_get_logits_ith(self._ctx, index)
        if not pointer:
            raise BackendError(f"{self.name}: llama.cpp returned no logits for batch position {index}")
        row = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(self.vocab_size,))
        return torch.from_numpy(row.copy())

    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        if not ids:
            raise ValueError("extend() needs at least one token")
        if self._length + len(ids) > self.max_context:
            raise InputError(
                f"{self.name}: context of {self._length + len(ids)} tokens exceeds the llama.cpp context of "
                f"{self.max_context}; shorten the prompt or lower max_new_tokens")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"{self.name}: token ids outside the model's vocabulary: {bad[:5]}")
        ids = list(ids)
        rows: list[torch.Tensor] = []
        for start in range(0, len(ids), PREFILL_CHUNK):
            chunk = ids[start:start + PREFILL_CHUNK]
            self._decode(chunk, all_logits)
            if all_logits:
                rows.extend(self._logits(i) for i in range(len(chunk)))
        if all_logits:
            return torch.stack(rows)
        return self._logits(len(chunk) - 1)


def load_llama_cpp_member(spec: ModelSpec, *, role: str, options: LoadOptions) -> LoadedModel:
    """A target or draft on llama.cpp, from a zoo model or a .gguf path."""
    from anypair.backends.sources import gguf_tokenizer, member_gguf

    _require_llama_cpp()  # before the GGUF is assembled or its tokenizer read: fail in one line, fast
    gguf = member_gguf(spec, "llama.cpp")
    tokenizer, generation = gguf_tokenizer(spec, gguf)
    backend = LlamaCppBackend(gguf, name=f"{role} {spec}", threads=options.threads, context=options.context)
    return member_from_backend(backend, tokenizer, role=role, name=str(spec),
                               engine=EngineChoice("llama.cpp", gguf.name, "GGUF on llama.cpp"),
                               generation_config=generation, weights_bytes=gguf.stat().st_size,
                               num_layers=backend.num_layers, gguf_path=gguf)
