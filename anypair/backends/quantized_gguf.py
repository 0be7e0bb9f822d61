"""The GGUF engine: a target (or draft) served straight from its GGUF file, exactly and fast on a CPU.

The quantized tensors stay the file's own blocks, memory-mapped (no float copy of the model), and
are multiplied by anypair's batch-invariant kernels (anypair/kernels: int8 activations per row and
block, integer dot products, a fixed float order). Norms, SiLU and attention are kernels of the same
kind, so the whole forward gives a token the same logits, bit for bit, whether it is scored alone or
with up to any number of others: verification is exact with no tolerance at all.

The forward is gpt-fast's: one function for "k new tokens after a cached prefix"; a KV cache
preallocated per layer in fp16 and written by position, so a rollback is moving a length; no mask
tensors; grouped-query attention reads each KV head once. Prefill runs through the same forward in
chunks. Architectures (ARCHITECTURES), each read from the GGUF's own metadata and tensors:
llama (SmolLM2, Llama, CodeLlama, Mistral: a declared sliding window, linear or Llama-3 rope scaling),
qwen2 (biases on q/k/v), qwen3 (per-head q/k RMSNorm), phi3 (fused qkv and gate/up, split by rows at
load: a row's dot product is the same bits either way; long-context rope factors), gemma2 and gemma3
(embeddings times sqrt(hidden), GELU-tanh gating, norms after attention and MLP, alternating
sliding-window and global layers, gemma2's soft-capped scores and logits, gemma3's q/k norms and
local rotary base). llama.cpp's converter stores llama's q/k rows permuted for its adjacent-pairs
rotary; the rotary here follows the file's layout (adjacent pairs for llama, halves for the others),
which is the same function of the weights, so no row is moved. Gemma's converter stores its norms
as 1 + w, so every norm is the plain RMSNorm here.
"""
from __future__ import annotations

import logging
import math
import mmap
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from anypair.backends.base import ModelBackend, SequenceRows
from anypair.backends.gguf_file import GGUFFile
from anypair.backends.member import EngineChoice, LoadOptions, ModelSpec, member_from_backend
from anypair.backends.trees import ScoredTree, check_parents, depths
from anypair.errors import InputError

logger = logging.getLogger("anypair")


@dataclass(frozen=True)
class Architecture:
    """What sets an architecture's forward apart, beyond what its metadata and tensors say."""

    rope_pairs: str  # "adjacent" (llama in GGUF layout) or "halves" (NeoX style)
    activation: str = "silu"  # the MLP's gate: "silu" or "gelu_tanh"
    embedding_scale: bool = False  # embeddings times sqrt(hidden) (gemma)
    fused: bool = False  # q/k/v in one attn_qkv matrix, gate and up in one ffn_up (phi3)
    global_every: int = 0  # > 0: every n-th layer attends globally, the others in the sliding window (gemma)
    local_rope_base: Optional[float] = None  # the sliding layers' own rotary base (gemma3)


#: architectures this forward implements (others keep the torch engine or llama.cpp)
ARCHITECTURES = {
    "llama": Architecture("adjacent"),
    "qwen2": Architecture("halves"),
    "qwen3": Architecture("halves"),
    "phi3": Architecture("halves", fused=True),
    "gemma2": Architecture("halves", activation="gelu_tanh", embedding_scale=True, global_every=2),
    "gemma3": Architecture("halves", activation="gelu_tanh", embedding_scale=True, global_every=6,
                           local_rope_base=10000.0),
}
#: the share of available memory (less the weights) a context's KV cache may hold at most: the caches
#: are mapped as positions are written, so this bounds what a long prompt may come to take, never
#: what a short one does
KV_MEMORY_SHARE = 0.6
#: prompt tokens per forward call during prefill (bounds the activations' memory, not the numerics): each
#: weight matrix is read once a chunk, and 256 rows read a prompt at 0.87x the time of 64 (Zen 3, 2 threads,
#: 1,024 tokens of the default target; 512 and 1,024 no better)
PREFILL_CHUNK = 256


@dataclass(frozen=True)
class RopeSpec:
    """One rotary table's definition: angle(pos, i) = pos * scale * base^(-2i/D) / factors[i], and
    cos/sin times attn_factor (phi3's long-context magnitude correction)."""

    base: float
    scale: float = 1.0  # linear position scaling (1 / rope.scaling.factor)
    factors: Optional[tuple[float, ...]] = None  # per frequency (Llama-3's rope_freqs, phi3's long/short factors)
    attn_factor: float = 1.0


@dataclass(frozen=True)
class ModelShape:
    """What the forward needs to know of a model, read from the GGUF's metadata."""

    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    rms_eps: float
    rope_base: float
    rope_pairs: str  # "adjacent" (llama in GGUF layout) or "halves" (NeoX style)
    trained_context: int
    vocab: int
    activation: str = "silu"
    embedding_scale: float = 1.0
    attn_scale: float = 0.0  # 0: 1 / sqrt(head_dim)
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    windows: tuple[int, ...] = ()  # per layer: > 0 sliding window, 0 global
    global_rope: Optional[RopeSpec] = None
    local_rope: Optional[RopeSpec] = None  # the sliding layers' table where it differs (gemma3)

    def rope_of(self, layer: int) -> RopeSpec:
        if self.local_rope is not None and self.windows and self.windows[layer] > 0:
            return self.local_rope
        return self.global_rope or RopeSpec(self.rope_base)


def gguf_architecture(path: Path) -> str:
    """The GGUF's `general.architecture` (reads the header only)."""
    return GGUFFile(path).architecture


def _refuse(arch: str, what: str) -> InputError:
    return InputError(f"the GGUF engine does not run this {arch} file: {what}; use engine='llama.cpp' (or 'torch')")


def read_shape(gguf: GGUFFile, context: Optional[int] = None) -> ModelShape:
    """The model's shape from its GGUF metadata; `context` (the engine's) picks phi3's short or long
    rope factors as llama.cpp does. Anything the forward cannot run is refused in one line."""
    arch, tensors = gguf.architecture, gguf.tensors
    if arch not in ARCHITECTURES:
        raise InputError(f"the GGUF engine runs {', '.join(ARCHITECTURES)} models, not {arch!r}: "
                         "use engine='llama.cpp' (or 'torch')")
    traits = ARCHITECTURES[arch]
    get = lambda key, default=None: gguf.metadata.get(f"{arch}.{key}", default)  # noqa: E731
    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    layers = int(get("block_count"))
    head_dim = int(get("attention.key_length", hidden // heads))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise _refuse(arch, "its value heads differ in size from its key heads")
    if int(get("rope.dimension_count", head_dim)) != head_dim:
        raise _refuse(arch, "its rotary covers only part of each head")
    if head_dim % 8:
        raise _refuse(arch, f"a head of {head_dim} values is not a multiple of 8")
    trained = int(get("context_length", 4096))
    base = float(get("rope.freq_base", 10000.0))
    global_rope = RopeSpec(base, *_rope_scaling(gguf, arch, head_dim, trained, context))
    window = int(get("attention.sliding_window", 0) or 0)
    if traits.global_every:  # gemma: layer i is global when (i + 1) % n == 0 (transformers' layer_types)
        windows = tuple(0 if (i + 1) % traits.global_every == 0 else window for i in range(layers))
    else:
        windows = (window,) * layers
    local_rope = None
    if traits.local_rope_base is not None:  # llama.cpp: local layers keep base 10000 and no scaling
        local_rope = RopeSpec(float(get("rope.freq_base_swa", traits.local_rope_base)))
    attn_scale = float(get("attention.scale", 0.0) or 0.0)
    if arch in ("gemma2", "gemma3") and not attn_scale:
        # the query's pre-attention scale, as llama.cpp has it: hidden / heads for the 27B models
        # (46 and 62 layers), the head size otherwise
        big = (arch == "gemma2" and layers == 46) or (arch == "gemma3" and layers == 62)
        attn_scale = 1.0 / math.sqrt(hidden / heads if big else head_dim)
    return ModelShape(
        architecture=arch, layers=layers, hidden=hidden, heads=heads,
        kv_heads=int(get("attention.head_count_kv", heads)), head_dim=head_dim,
        rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)), rope_base=base,
        rope_pairs=traits.rope_pairs, trained_context=trained,
        vocab=int(tensors["token_embd.weight"].shape[1]), activation=traits.activation,
        embedding_scale=math.sqrt(hidden) if traits.embedding_scale else 1.0, attn_scale=attn_scale,
        attn_softcap=float(get("attn_logit_softcapping", 0.0) or 0.0),
        final_softcap=float(get("final_logit_softcapping", 0.0) or 0.0),
        windows=windows, global_rope=global_rope, local_rope=local_rope)


def _rope_scaling(gguf: GGUFFile, arch: str, head_dim: int, trained: int,
                  context: Optional[int]) -> tuple[float, Optional[tuple[float, ...]], float]:
    """(linear scale, per-frequency factors, attn_factor) of the file's rope scaling."""
    get = lambda key, default=None: gguf.metadata.get(f"{arch}.{key}", default)  # noqa: E731
    kind = str(get("rope.scaling.type", "none") or "none")
    scale, factors, attn_factor = 1.0, None, 1.0
    if kind == "linear":
        scale = 1.0 / float(get("rope.scaling.factor", 1.0))
    elif kind not in ("none", "longrope"):
        raise _refuse(arch, f"rope scaling {kind!r} is not implemented here")
    tensors = gguf.tensors
    if "rope_freqs.weight" in tensors:  # Llama-3.1's frequency factors
        factors = tuple(float(v) for v in _float_tensor(tensors["rope_freqs.weight"]))
    elif "rope_factors_long.weight" in tensors:  # phi3 long-context: long factors past the original context
        original = int(get("rope.scaling.original_context_length", trained))
        long = min(trained, context or trained) > original
        factors = tuple(float(v) for v in _float_tensor(tensors[f"rope_factors_{'long' if long else 'short'}.weight"]))
        default = math.sqrt(1 + math.log(trained / original) / math.log(original)) if trained > original else 1.0
        attn_factor = float(get("rope.scaling.attn_factor", default) or default)
    if factors is not None and len(factors) != head_dim // 2:
        raise _refuse(arch, f"{len(factors)} rope factors for {head_dim // 2} frequencies")
    return scale, factors, attn_factor


def kv_bytes_per_position(shape: ModelShape) -> int:
    """The fp16 K and V of every layer for one position of one sequence."""
    return 2 * 2 * shape.layers * shape.kv_heads * shape.head_dim


def context_within_memory(name: str, shape: ModelShape, asked: Optional[int], slots: int, weight_bytes: int,
                          available: Optional[int] = None) -> int:
    """The engine's context: `asked`, else the model's trained context, at most what KV_MEMORY_SHARE of
    the available memory (less the weights) holds for `slots` sequences. An asked context that does not
    fit is refused in one line naming the memory and the option: a long prompt then fails as an error
    at its first token, never as a kill mid-prompt."""
    from anypair.machine import available_memory

    available = available_memory() if available is None else available
    per_position = kv_bytes_per_position(shape) * slots
    fits = int(max(0, available - weight_bytes) * KV_MEMORY_SHARE // per_position) if available else shape.trained_context
    if asked is not None:
        context = min(shape.trained_context, asked)
        if context > fits:
            raise InputError(f"{name}: a context of {context} tokens needs {context * per_position / 2**30:.1f} GiB of "
                             f"KV cache ({slots} sequence(s)), and {available / 2**30:.1f} GiB of memory is available "
                             f"beside {weight_bytes / 2**30:.1f} GiB of weights: set the context option to at most "
                             f"{fits}")
        return context
    if fits < 16:
        raise InputError(f"{name}: {available / 2**30:.1f} GiB of available memory leaves no room for a KV cache "
                         f"beside {weight_bytes / 2**30:.1f} GiB of weights: free memory, or use a smaller model")
    return min(shape.trained_context, fits // 256 * 256 or fits)


def rope_table(spec: RopeSpec, head_dim: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's rotary angles [length, head_dim / 2], in float64 then rounded
    once (the table is the engine's definition; only its consistency matters)."""
    inv_freq = spec.base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if spec.factors is not None:
        inv_freq = inv_freq / torch.tensor(spec.factors, dtype=torch.float64)
    angles = (torch.arange(length, dtype=torch.float64) * spec.scale)[:, None] * inv_freq[None, :]
    return (angles.cos() * spec.attn_factor).float(), (angles.sin() * spec.attn_factor).float()


def _matrix(tensor, release: Callable[[np.ndarray], None], layout, bias: Optional[torch.Tensor] = None,
            rows: Optional[tuple[int, int]] = None, interleave: bool = True):
    """One matrix of the file on the kernels; once repacked, the kernels read their interleaved copy
    and the file's pages it was made from leave this process's memory at once (not at the end of the
    load: the peak RSS is the copy plus one matrix, not plus the head and embedding)."""
    from anypair.kernels import QuantWeight

    matrix = QuantWeight.from_gguf_tensor(tensor, bias, rows=rows, layout=layout, interleave=interleave)
    if matrix.repacked:
        release(matrix.data)
    return matrix


def _decoder_layer(index: int, shape: ModelShape, tensors: dict, cache_shape: tuple[int, ...],
                   release: Callable[[np.ndarray], None], rope: tuple[torch.Tensor, torch.Tensor], layout=None):
    from anypair.kernels import QuantWeight
    from anypair.kernels.ops import DecoderLayer

    def weight(name: str, rows: Optional[tuple[int, int]] = None) -> QuantWeight:
        bias = tensors.get(f"blk.{index}.{name}.bias")
        if bias is not None:
            bias = _float_tensor(bias)
            bias = bias if rows is None else bias[rows[0]:rows[1]].contiguous()
        return _matrix(tensors[f"blk.{index}.{name}.weight"], release, layout, bias, rows)

    def norm(name: str) -> Optional[torch.Tensor]:
        tensor = tensors.get(f"blk.{index}.{name}.weight")
        return None if tensor is None else _float_tensor(tensor)

    if f"blk.{index}.attn_qkv.weight" in tensors:  # phi3: q, k, v stacked by rows
        q_rows, kv_rows = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        q, k, v = (weight("attn_qkv", (a, b)) for a, b in
                   ((0, q_rows), (q_rows, q_rows + kv_rows), (q_rows + kv_rows, q_rows + 2 * kv_rows)))
    else:
        q, k, v = weight("attn_q"), weight("attn_k"), weight("attn_v")
    if f"blk.{index}.ffn_gate.weight" in tensors:
        gate, up = weight("ffn_gate"), weight("ffn_up")
    else:  # phi3: gate then up in one ffn_up (transformers' gate_up_proj.chunk(2))
        ffn = int(tensors[f"blk.{index}.ffn_up.weight"].shape[1]) // 2
        gate, up = weight("ffn_up", (0, ffn)), weight("ffn_up", (ffn, 2 * ffn))
    # zero pages are mapped lazily: an unused long context costs address space, not memory
    return DecoderLayer(
        attn_norm=norm("attn_norm"), ffn_norm=norm("ffn_norm"),
        q=q, k=k, v=v, attn_out=weight("attn_output"), gate=gate, up=up, down=weight("ffn_down"),
        k_cache=_lazy_zeros(cache_shape), v_cache=_lazy_zeros(cache_shape),
        post_attn_norm=norm("post_attention_norm"), post_ffn_norm=norm("post_ffw_norm"),
        q_norm=norm("attn_q_norm"), k_norm=norm("attn_k_norm"), rope=rope,
        window=shape.windows[index] if shape.windows else 0)


def _lazy_zeros(shape: tuple[int, ...]) -> torch.Tensor:
    """An fp16 KV cache of zeros whose pages are mapped when first written, 4 KiB at a time: an
    anonymous mapping of its own. torch.zeros writes every byte, so a cache for the whole context,
    times the batch's slots, would be resident from the start; numpy's zeros asks the kernel for huge
    pages on large blocks, and each (layer, head) of a slot is one 2 MiB block at an 8,192 context,
    so the first position written made the slot's whole cache resident (measured: 230 MiB per slot
    of Qwen2.5-1.5B after 200 positions, 8 slots 1.8 GiB; with 4 KiB pages 0.3 MiB a slot)."""
    size = math.prod(shape) * 2
    pages = mmap.mmap(-1, max(size, 1))
    if sys.platform == "linux":  # huge pages where the system gives them to every large mapping
        pages.madvise(mmap.MADV_NOHUGEPAGE)
    return torch.from_numpy(np.frombuffer(pages, dtype=np.float16, count=math.prod(shape)).reshape(shape))


def _float_tensor(tensor) -> torch.Tensor:
    """A small tensor of the file (norms, biases: F32 as a rule) as float32."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    values = dequantize(tensor.data, GGMLQuantizationType(tensor.ggml_type))
    return torch.from_numpy(np.array(values, dtype=np.float32).reshape(-1))


class QuantizedGGUFBackend(ModelBackend):
    """A GGUF of one of ARCHITECTURES on anypair's batch-invariant kernels, behind extend/crop/reset."""

    bitwise_batch_invariant = True
    scores_trees = True
    #: slots cost memory only for the context they use (the caches' pages are mapped as written)
    max_slots = None
    #: a call's rows bound the activations' memory
    prompt_rows_per_forward = PREFILL_CHUNK

    def __init__(self, path: os.PathLike, *, name: str = "gguf", threads: Optional[int] = None,
                 context: Optional[int] = None, slots: int = 1, layout_cache: Optional[bool] = None) -> None:
        """`layout_cache`: keep the kernels' layout of the file on disk and read it on later loads
        (kernels/packed_cache.py); None: on unless $ANYPAIR_LAYOUT_CACHE=0."""
        from anypair.kernels import load_library
        from anypair.kernels.huge_pages import collapse_later
        from anypair.kernels.packed_cache import LayoutCache

        load_library()  # compile (or find in the cache) before reading the model: a missing compiler fails fast
        self.path = Path(path)
        self.name = name
        gguf = GGUFFile(self.path)  # memory-maps the file; tensors are views into it
        if slots < 1:
            raise InputError(f"{name}: slots must be at least 1, got {slots}")
        self.max_context = context_within_memory(name, read_shape(gguf), context, slots, self.path.stat().st_size)
        self.shape = shape = read_shape(gguf, self.max_context)
        self.vocab_size = shape.vocab
        self.threads = int(threads or torch.get_num_threads())
        # sequences whose KV state the engine holds at once (continuous batching); the engine itself is slot 0
        self._slots = slots
        self.layout_cache = LayoutCache(self.path, layout_cache, threads=self.threads)
        self._load_weights(gguf, self.layout_cache)
        self.layout_cache.finish()
        collapse_later()  # what was faulted on 4 KB pages goes onto 2 MB pages now, off the load's path
        matrices = [w for layer in self.layers for w in layer.matrices]
        self.weight_types = sorted({w.type_name for w in matrices} | {w.type_name for w in self.head.weights})
        self.weights_bytes = sum(w.nbytes for w in matrices) + self.embedding.nbytes \
            + sum(w.nbytes for w in self.head.weights if w is not self.embedding)
        self.stack = self._layer_stack()
        self._lengths = [0] * slots  # cached positions per slot
        self._trees: dict[int, ScoredTree] = {}  # per slot, its last forward when that was a tree
        self._gguf = gguf  # keeps the memory map alive
        self._outside_layers: Optional[dict[str, float]] = None  # seconds of the parts timed in Python, while profiling

    def _load_weights(self, gguf: GGUFFile, layout) -> None:
        """The embedding, head and layers, each matrix interleaved (or read from `layout`) in turn."""
        from anypair.kernels import LinearGroup

        shape, tensors, release = self.shape, gguf.tensors, gguf.release_pages
        tied = "output.weight" not in tensors  # tied embeddings share the table with the head
        # an untied embedding is only gathered, a few rows a step: its GGUF rows stay mapped as they are
        self.embedding = _matrix(tensors["token_embd.weight"], release, layout, interleave=tied)
        self.head = LinearGroup([self.embedding if tied else _matrix(tensors["output.weight"], release, layout)])
        self.output_norm = _float_tensor(tensors["output_norm.weight"])
        cache_shape = (self._slots, shape.kv_heads, self.max_context, shape.head_dim)
        tables: dict[RopeSpec, tuple[torch.Tensor, torch.Tensor]] = {}  # one table per distinct rotary
        for i in range(shape.layers):
            spec = shape.rope_of(i)
            if spec not in tables:
                tables[spec] = rope_table(spec, shape.head_dim, self.max_context)
        self.layers = [_decoder_layer(i, shape, tensors, cache_shape, release, tables[shape.rope_of(i)], layout)
                       for i in range(shape.layers)]
        self.num_layers = shape.layers

    def _layer_stack(self):
        """The C forward over self.layers (each layer carries its own rotary table, window and norms)."""
        from anypair.kernels.ops import LayerStack

        shape, last = self.shape, self.layers[-1]
        return LayerStack(self.layers, hidden=shape.hidden, heads=shape.heads, kv_heads=shape.kv_heads,
                          head_dim=shape.head_dim, rms_eps=shape.rms_eps, rope_cos=last.rope[0], rope_sin=last.rope[1],
                          rope_halves=shape.rope_pairs == "halves", activation=shape.activation,
                          attn_scale=shape.attn_scale or None, attn_softcap=shape.attn_softcap)

    # -- a head over part of the vocabulary (drafts: backends/reduced_head.py) ----------------------

    #: the kept rows' head while restricted, else None (the full head)
    reduced_head = None

    def restrict_head(self, token_ids: Optional[Sequence[int]]) -> None:
        """Score only `token_ids` from now on (their logits bitwise the full head's, -inf for every
        other token), or the full head again with None. For a draft: see backends/reduced_head.py."""
        from anypair.backends.reduced_head import ReducedHead

        if token_ids is None or len(set(token_ids)) >= self.vocab_size:
            self.reduced_head = None
            return
        self.reduced_head = ReducedHead(self.head.weights[0], token_ids, self.vocab_size)

    def keep_head_tokens_slot(self, slot: int, ids: Sequence[int]) -> None:
        if self.reduced_head is not None:  # a full head scores every token already
            self._check_slot(slot)
            self.reduced_head.keep_tokens(slot, ids)

    @property
    def head_bytes(self) -> int:
        """Bytes a step's head reads (the kept rows only while restricted)."""
        if self.reduced_head is not None:
            return self.reduced_head.nbytes
        return sum(w.nbytes for w in self.head.weights)

    # -- where a forward's time goes (`anypair bench --roofline`) ---------------------------------

    def start_profile(self) -> None:
        """From now on every forward adds its seconds per part (the C layer parts, the embedding
        gather, the final norm and head) until `stop_profile()`."""
        self.stack.start_profile()
        self._outside_layers = {"embedding": 0.0, "head": 0.0}

    def stop_profile(self) -> dict[str, float]:
        """Seconds per part since `start_profile()`; profiling off."""
        parts = self.stack.stop_profile()
        parts.update(self._outside_layers or {})
        self._outside_layers = None
        return parts

    # -- the ModelBackend interface ---------------------------------------------------------------

    @property
    def cached_length(self) -> int:
        return self._lengths[0]

    def reset(self) -> None:
        self._lengths[0] = 0

    def crop(self, length: int) -> None:
        self.crop_slot(0, length)

    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        return self._extend(0, ids, all_logits)

    # -- several sequences (continuous batching) ----------------------------------------------------

    def set_slots(self, slots: int) -> None:
        """Hold `slots` sequences' KV state from now on (a new cache per layer: every sequence is
        forgotten). Cache pages are mapped as positions are written, so a slot costs memory only
        for the context it uses; `kv_bytes_per_slot` is its most."""
        if slots < 1:
            raise InputError(f"{self.name}: slots must be at least 1, got {slots}")
        if self.reduced_head is not None:
            self.reduced_head.forget()
        if slots == self._slots:
            self._lengths = [0] * slots
            self._trees = {}
            return
        shape = (slots, self.shape.kv_heads, self.max_context, self.shape.head_dim)
        for layer in self.layers:
            layer.k_cache, layer.v_cache = _lazy_zeros(shape), _lazy_zeros(shape)
        old = self.stack
        self.stack = self._layer_stack()
        self.stack.profile = old.profile
        self._slots = slots
        self._lengths = [0] * slots
        self._trees = {}

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def mapped_weight_bytes(self) -> int:
        return self.layout_cache.mapped_bytes

    @property
    def kv_bytes_per_slot(self) -> int:
        """The fp16 K and V of every layer for one sequence at the full context."""
        return kv_bytes_per_position(self.shape) * self.max_context

    def slot_length(self, slot: int) -> int:
        return self._lengths[slot]

    def crop_slot(self, slot: int, length: int) -> None:
        if length < 0 or length > self._lengths[slot]:
            raise ValueError(f"cannot crop a cache of {self._lengths[slot]} positions to {length}")
        self._lengths[slot] = length  # positions past it are overwritten by the next extend
        self._trees.pop(slot, None)

    def keep_path_slot(self, slot: int, rows: Sequence[int]) -> None:
        tree = self._trees.pop(slot, None)
        if tree is None:
            raise ValueError(f"{self.name}: keep_path on slot {slot}, whose last forward was not a tree")
        self._lengths[slot] = tree.keep(rows, self.layers, slot)

    def extend_slot(self, slot: int, ids: Sequence[int], all_logits: bool) -> torch.Tensor:
        return self._extend(slot, ids, all_logits)

    def _check_rows(self, slot: int, ids: Sequence[int]) -> list[int]:
        if not ids:
            raise ValueError("extend() needs at least one token")
        if self._lengths[slot] + len(ids) > self.max_context:
            raise InputError(f"{self.name}: context of {self._lengths[slot] + len(ids)} tokens exceeds this engine's "
                             f"{self.max_context} (context option, or the model's trained context): "
                             "shorten the prompt, lower max_new_tokens, or raise context")
        if any(not 0 <= int(t) < self.vocab_size for t in ids):
            raise InputError(f"{self.name}: token id out of range for a vocabulary of {self.vocab_size}")
        return [int(t) for t in ids]

    def _extend(self, slot: int, ids: Sequence[int], all_logits: bool) -> torch.Tensor:
        ids = self._check_rows(slot, ids)
        outputs = []
        for begin in range(0, len(ids), PREFILL_CHUNK):
            piece = ids[begin:begin + PREFILL_CHUNK]
            keep_all = all_logits or begin + len(piece) == len(ids)
            logits = "all" if all_logits else "last" if keep_all else "none"
            outputs.append(self.forward_rows([SequenceRows(slot, piece, logits)])[0])
        if all_logits:
            return torch.cat([o for o in outputs if o is not None])
        return outputs[-1]

    # -- the forward --------------------------------------------------------------------------------

    @torch.inference_mode()
    def forward_rows(self, calls: Sequence[SequenceRows]) -> list[Optional[torch.Tensor]]:
        """One forward over the rows of several sequences (at most one call per slot), each appended
        to its own slot's cache: per call the logits it asks for ([len(ids), V] "all", [V] "last", or
        None), bitwise those it gets alone. The caller chunks long prompts (PREFILL_CHUNK rows a
        call bounds the activations' memory)."""
        from anypair.kernels import dequant_rows

        if len({c.slot for c in calls}) != len(calls):
            raise ValueError("forward_rows: one call per slot (a sequence's rows go together, in order)")
        calls = [SequenceRows(c.slot, self._check_rows(c.slot, c.ids), c.logits,
                              None if c.parents is None else check_parents(c.parents, len(c.ids))) for c in calls]
        profile = self._outside_layers
        t0 = time.perf_counter() if profile is not None else 0.0
        rows = dequant_rows(self.embedding, [t for c in calls for t in c.ids])
        if self.shape.embedding_scale != 1.0:  # gemma: one rounded multiply per element, any batch gives these bits
            rows.mul_(self.shape.embedding_scale)
        if profile is not None:
            profile["embedding"] += time.perf_counter() - t0
        parents, tree_kv = self._tree_rows(calls)
        x = self.stack.forward_seqs(rows, [(len(c.ids), self._lengths[c.slot], c.slot) for c in calls], self.threads,
                                    parents=parents, tree_kv=tree_kv)
        picked: list[int] = []  # the rows whose logits are asked for, in call order
        picked_slots: list[int] = []  # and each one's sequence
        row = 0
        for c in calls:
            self._trees.pop(c.slot, None)
            if c.parents is not None:
                self._trees[c.slot] = ScoredTree(self._lengths[c.slot], list(c.parents), tree_kv[:, row:row + len(c.ids)])
            self._lengths[c.slot] += len(c.ids) if c.parents is None else max(depths(c.parents)) + 1
            asked = range(row, row + len(c.ids)) if c.logits == "all" else [row + len(c.ids) - 1] \
                if c.logits == "last" else []
            picked += asked
            picked_slots += [c.slot] * len(asked)
            row += len(c.ids)
        if not picked:  # prefill chunks before the last: only the caches matter
            return [None] * len(calls)
        t0 = time.perf_counter() if profile is not None else 0.0
        chosen = x if len(picked) == x.shape[0] else x[torch.tensor(picked)]
        logits = self._head_logits(chosen, picked_slots)
        if profile is not None:
            profile["head"] += time.perf_counter() - t0
        outputs: list[Optional[torch.Tensor]] = []
        at = 0
        for c in calls:
            if c.logits == "all":
                outputs.append(logits[at:at + len(c.ids)])
                at += len(c.ids)
            elif c.logits == "last":
                outputs.append(logits[at])
                at += 1
            else:
                outputs.append(None)
        return outputs

    def _head_logits(self, rows: torch.Tensor, row_slots: list[int]) -> torch.Tensor:
        """The final norm and the head on `rows` ([M, hidden]; each one's sequence in `row_slots`):
        [M, vocab] logits, over the kept rows only while the head is reduced."""
        from anypair.kernels import rmsnorm, softcap

        normed = rmsnorm(rows.contiguous(), self.output_norm, self.shape.rms_eps)
        # elementwise: each row's bits whatever rows share the call
        cap = (lambda t: softcap(t, self.shape.final_softcap)) if self.shape.final_softcap else None
        if self.reduced_head is not None:
            return self.reduced_head.logits(normed, self.threads, cap, row_slots)
        logits = self.head(normed, self.threads)[0]
        if cap is not None:
            cap(logits)
        return logits

    def _tree_rows(self, calls: Sequence[SequenceRows]) -> tuple[Optional[list[int]], Optional[torch.Tensor]]:
        """Every row's parent (an index into the whole forward's rows) and a tensor for the rows' keys
        and values, when a call is a tree; (None, None) when all are chains."""
        if all(c.parents is None for c in calls):
            return None, None
        parents: list[int] = []
        for c in calls:
            base = len(parents)
            own = c.parents if c.parents is not None else [-1, *range(len(c.ids) - 1)]
            parents += [p if p < 0 else base + p for p in own]
        shape = self.shape
        return parents, torch.empty(shape.layers, len(parents), 2, shape.kv_heads, shape.head_dim, dtype=torch.float16)

    def describe(self) -> str:
        from anypair.kernels import simd_level

        return (f"{self.path.name}: {self.shape.architecture}, {'/'.join(self.weight_types)} blocks, "
                f"{simd_level()} kernels, {self.threads} threads")


def load_gguf_member(spec: ModelSpec, *, role: str, options: LoadOptions):
    """A target or draft on this engine, from a zoo model or a .gguf path."""
    from anypair.backends.sources import gguf_tokenizer, member_gguf
    from anypair.kernels import simd_level

    gguf = member_gguf(spec, "gguf")
    tokenizer, generation = gguf_tokenizer(spec, gguf)
    backend = QuantizedGGUFBackend(gguf, name=f"{role} {spec}", threads=options.threads, context=options.context)
    if role == "draft":  # the draft's head over its most frequent tokens, where asked for (ANYPAIR_DRAFT_HEAD)
        from anypair.backends.reduced_head import restrict_draft_head

        restrict_draft_head(backend, tokenizer)
    choice = EngineChoice("gguf", "/".join(backend.weight_types),
                          f"the GGUF's blocks on anypair's batch-invariant {simd_level()} kernels, "
                          "activations int8 per row")
    return member_from_backend(backend, tokenizer, role=role, name=str(spec), engine=choice,
                               generation_config=generation, weights_bytes=backend.weights_bytes,
                               num_layers=backend.num_layers, gguf_path=gguf)
