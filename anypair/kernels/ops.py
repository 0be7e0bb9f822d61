"""Typed Python surface of the C kernels: weights held as their GGUF bytes, torch tensors in and out.

`QuantWeight` is one [N, K] matrix in its GGUF type (memory-mapped bytes, never a float copy;
Q4_1, Q5_0, Q8_0 and the K-quants Q4_K/Q5_K/Q6_K are rearranged once into the kernels' interleaved layout, 16 rows
per group, the same values in about as many bytes);
`LinearGroup` multiplies activation rows by several matrices that read the same input (q/k/v,
gate/up) in one call, quantizing the rows once. Types without a native kernel are dequantized once
to F32 with gguf's own code (exact values), so every GGUF type runs, the rare ones slower.
`use_reference=True` runs the scalar reference instead of the SIMD path; the linears also take
`path="avx2"`, the AVX2 path where the AVX-512 one is compiled (tests compare all three bitwise).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import torch

from anypair.kernels.binding import ApLayer as _ApLayer
from anypair.kernels.binding import ApModel as _ApModel
from anypair.kernels.binding import ApWeight as _ApWeight
from anypair.kernels.build import load_library
from anypair.kernels.huge_pages import huge_page_bytes

#: ggml types with a kernel of their own (others are widened to F32 at load)
NATIVE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 8: "Q8_0", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}
#: ggml types the kernels read in their interleaved layout (csrc/repack.c)
INTERLEAVED_TYPES = {3, 6, 8, 12, 13, 14}
_F32 = 0
#: which kernels a linear runs: the best compiled, the AVX2 path, or the scalar reference
KernelPath = Literal["best", "reference", "avx2"]
_PATH_CODES = {"best": 0, "reference": 1, "avx2": 2}


def _path_code(path: KernelPath, use_reference: bool) -> int:
    if path not in _PATH_CODES:
        raise ValueError(f"kernel path {path!r}: one of {', '.join(_PATH_CODES)}")
    return _PATH_CODES["reference" if use_reference else path]


#: what csrc/matmul.c's ap_simd_level() returns, by name
SIMD_LEVELS = {3: "avx512-vnni", 2: "avx2", 0: "portable"}


def simd_level() -> str:
    """Which path the compiled kernels run: "avx512-vnni" (the K-quants; AVX2 for the other types),
    "avx2" or "portable"."""
    return SIMD_LEVELS[load_library().ap_simd_level()]


@dataclass
class QuantWeight:
    """A weight matrix [N rows, K columns] as GGUF blocks (row-major, `row_bytes` per row)."""

    ggml_type: int
    rows: int
    cols: int
    data: np.ndarray  # uint8 [rows, row_bytes], usually a memory map of the GGUF
    bias: Optional[torch.Tensor] = None  # float32 [rows]
    type_name: str = ""
    #: False: keep the GGUF rows as they are, for a matrix only ever gathered by rows (`dequant_rows`)
    interleave: bool = True
    #: the load's layout cache (kernels/packed_cache.py; this matrix's entry: `cache_key`); None: none
    layout: Optional[Any] = field(default=None, repr=False)  # a packed_cache.LayoutCache (passed in by the engine)
    cache_key: str = ""
    #: the interleaved copy the kernels read (Q4_1/Q5_0/Q8_0/Q4_K/Q5_K/Q6_K), else None: `data` is read in place
    packed: Optional[np.ndarray] = field(init=False, default=None, repr=False)
    _struct: _ApWeight = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.ggml_type not in NATIVE_TYPES:
            raise ValueError(f"no kernel for ggml type {self.ggml_type}: use QuantWeight.from_gguf_tensor")
        if self.data.dtype != np.uint8 or self.data.ndim != 2 or self.data.shape[0] != self.rows:
            raise ValueError("QuantWeight data must be uint8 [rows, row_bytes]")
        if not self.data.flags["C_CONTIGUOUS"]:
            self.data = np.ascontiguousarray(self.data)
        if self.bias is not None:
            self.bias = self.bias.detach().to(torch.float32).contiguous()
        self.type_name = self.type_name or NATIVE_TYPES[self.ggml_type]
        kernel_type, kernel_data = self.ggml_type, self.data
        #: whether `packed` was made now from `data` (False: read from the layout cache, or none)
        self.repacked = False
        if self.ggml_type in INTERLEAVED_TYPES and self.interleave:
            kernel_type, self.packed, self.repacked = _interleave(self.ggml_type, self.data, self.rows, self.cols,
                                                                  self.layout, self.cache_key)
            kernel_data = self.packed
        self._struct = _ApWeight(kernel_type, self.rows, self.cols, self.data.shape[1], kernel_data.ctypes.data,
                                 self.bias.data_ptr() if self.bias is not None else None)

    @property
    def nbytes(self) -> int:
        """Bytes the kernels read (the interleaved copy where there is one)."""
        return int((self.packed if self.packed is not None else self.data).nbytes)

    @classmethod
    def from_gguf_tensor(cls, tensor, bias: Optional[torch.Tensor] = None, rows: Optional[tuple[int, int]] = None,
                         layout: Optional[Any] = None, interleave: bool = True) -> "QuantWeight":
        """From a `backends.gguf_file.GGUFTensor` (ggml shape [K, N]): the blocks as they are in the
        file, or for a type without a kernel its exact values widened to F32. `rows` = (first, end)
        takes only those rows (a fused matrix's parts: each row's blocks are its own). `layout`: the
        load's layout cache (its key is the tensor's name and rows); `interleave=False`: rows gathered only."""
        key = tensor.name if rows is None else f"{tensor.name}[{rows[0]}:{rows[1]}]"
        cols, count = int(tensor.shape[0]), int(np.prod(tensor.shape[1:]))
        data = tensor.data.reshape(count, -1)
        if rows is not None:
            data = np.ascontiguousarray(data[rows[0]:rows[1]])
        rows = data.shape[0]
        if tensor.ggml_type in NATIVE_TYPES:
            return cls(tensor.ggml_type, rows, cols, data, bias, NATIVE_TYPES[tensor.ggml_type], interleave, layout,
                       key)
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        qtype = GGMLQuantizationType(tensor.ggml_type)
        values = np.ascontiguousarray(dequantize(data, qtype).reshape(rows, cols).astype(np.float32))
        return cls(_F32, rows, cols, values.view(np.uint8).reshape(rows, -1), bias, f"{qtype.name} as F32")


def _interleave(ggml_type: int, rows: np.ndarray, count: int, cols: int, layout: Optional[Any] = None,
                key: str = "") -> tuple[int, np.ndarray, bool]:
    """Q4_1/Q5_0/Q8_0/Q4_K/Q5_K/Q6_K rows -> (kernel type, interleaved bytes, whether repacked now): groups
    of 16 rows (csrc/repack.c), in anonymous huge pages; mapped or read from the load's layout cache
    where a previous load left them (then nothing is repacked, and the bytes are there once the layout's
    `finish()` has returned)."""
    lib = load_library()
    size = lib.ap_packed_bytes(ggml_type, count, cols)
    if size == 0:
        block = 32 if ggml_type in (3, 6, 8) else 256
        raise ValueError(f"{NATIVE_TYPES[ggml_type]} matrix [{count}, {cols}]: columns must be a multiple of {block}")
    kernel_type = lib.ap_packed_type(ggml_type)

    def repack(packed: np.ndarray) -> None:
        if lib.ap_repack(ggml_type, rows.ctypes.data, rows.shape[1], count, cols, packed.ctypes.data, 0) < 0:
            raise ValueError(f"cannot interleave a {NATIVE_TYPES[ggml_type]} matrix [{count}, {cols}]")

    if layout is not None:
        packed, filled = layout.buffer(key, kernel_type, size, huge_page_bytes, repack)
        return kernel_type, packed, not filled
    packed = huge_page_bytes(size)
    repack(packed)
    return kernel_type, packed, True


class LinearGroup:
    """Matrices that read the same input rows: y_i = x W_i^T (+ b_i), one C call for all of them."""

    def __init__(self, weights: Sequence[QuantWeight], library: Optional[ctypes.CDLL] = None) -> None:
        """`library`: another build of the kernels to run (evaluation/bench_kernel_builds.py); default anypair's."""
        if not weights or len({w.cols for w in weights}) != 1:
            raise ValueError("a LinearGroup needs matrices with the same number of columns")
        self.weights = list(weights)
        self.cols = weights[0].cols
        self._array = (_ApWeight * len(weights))(*[w._struct for w in weights])
        self._lib = library if library is not None else load_library()

    def __call__(self, x: torch.Tensor, threads: int = 0, use_reference: bool = False,
                 path: KernelPath = "best") -> list[torch.Tensor]:
        if x.dtype != torch.float32 or x.dim() != 2 or x.shape[1] != self.cols:
            raise ValueError(f"expected float32 rows [M, {self.cols}], got {tuple(x.shape)} {x.dtype}")
        x = x.contiguous()
        rows = x.shape[0]
        outputs = [torch.empty(rows, w.rows, dtype=torch.float32) for w in self.weights]
        pointers = (ctypes.c_void_p * len(outputs))(*[o.data_ptr() for o in outputs])
        status = self._lib.ap_linear(ctypes.addressof(self._array), len(self.weights), x.data_ptr(), rows, self.cols,
                                     ctypes.addressof(pointers), threads, _path_code(path, use_reference))
        if status != 0:
            raise RuntimeError(f"ap_linear failed ({status}): shapes or types the kernels do not take")
        return outputs


def dequant_rows(weight: QuantWeight, row_ids: Sequence[int]) -> torch.Tensor:
    """Rows of a quantized matrix as float32 (token embeddings: a gather, dequantized per row)."""
    ids = torch.as_tensor(list(row_ids), dtype=torch.int64)
    out = torch.empty(len(ids), weight.cols, dtype=torch.float32)
    lib = load_library()
    if weight.packed is None and weight.ggml_type in INTERLEAVED_TYPES:  # rows kept as the GGUF's (interleave=False)
        status = lib.ap_dequant_rows_raw(weight.ggml_type, weight.data.ctypes.data, weight.data.shape[1], weight.rows,
                                         weight.cols, ids.data_ptr(), len(ids), out.data_ptr())
    else:
        status = lib.ap_dequant_rows(ctypes.addressof(weight._struct), ids.data_ptr(), len(ids), out.data_ptr())
    if status != 0:
        raise IndexError(f"row ids out of range for a matrix of {weight.rows} rows")
    return out


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, use_reference: bool = False) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    load_library().ap_rmsnorm(x.data_ptr(), weight.data_ptr(), x.shape[0], x.shape[1], ctypes.c_float(eps),
                              out.data_ptr(), int(use_reference))
    return out


def silu_mul(gate: torch.Tensor, up: torch.Tensor, use_reference: bool = False) -> torch.Tensor:
    """SiLU(gate) * up, written into gate (contiguous float32 tensors of one shape)."""
    load_library().ap_silu_mul(gate.data_ptr(), up.data_ptr(), gate.numel(), int(use_reference))
    return gate


def gelu_tanh_mul(gate: torch.Tensor, up: torch.Tensor, use_reference: bool = False) -> torch.Tensor:
    """GELU(gate) * up with GELU's tanh approximation (gemma), written into gate."""
    load_library().ap_gelu_tanh_mul(gate.data_ptr(), up.data_ptr(), gate.numel(), int(use_reference))
    return gate


def softcap(x: torch.Tensor, cap: float, use_reference: bool = False) -> torch.Tensor:
    """x = cap * tanh(x / cap), in place (gemma2's final logits); x contiguous float32."""
    if x.dtype != torch.float32 or not x.is_contiguous():
        raise ValueError("softcap needs a contiguous float32 tensor")
    load_library().ap_softcap(x.data_ptr(), x.numel(), ctypes.c_float(cap), int(use_reference))
    return x


def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start: int, scale: float,
              window: int = 0, threads: int = 0, use_reference: bool = False, softcap: float = 0.0) -> torch.Tensor:
    """q [M, Hq, D] float32 for positions start..start+M-1; caches [Hkv, L_max, D] float16 holding
    positions 0..start+M-1. Returns [M, Hq * D]. `window` > 0: sliding-window attention; `softcap` > 0:
    scores capped to softcap * tanh(score / softcap)."""
    rows, heads, dim = q.shape
    kv_heads, max_len, _ = k_cache.shape
    out = torch.empty(rows, heads * dim, dtype=torch.float32)
    status = load_library().ap_attention(q.contiguous().data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), max_len,
                                         start, rows, heads, kv_heads, dim, ctypes.c_float(scale),
                                         ctypes.c_float(softcap), window,
                                         out.data_ptr(), threads, int(use_reference))
    if status != 0:
        raise RuntimeError("ap_attention: bad shapes (heads not a multiple of KV heads, D % 8, or past the cache)")
    return out


# -- the whole layer stack in one call (csrc/forward.c) --------------------------------------------

#: the parts of a forward that `LayerStack.profile` times, in csrc/forward.c's order
PROFILE_PARTS = ("norms", "qkv", "rope+cache", "attention", "attn_out", "gate_up", "silu", "down", "residual")

#: the MLP's gating activations the forward runs (csrc/ap_api.h's AP_ACT_*)
ACTIVATIONS = {"silu": 0, "gelu_tanh": 1}


@dataclass
class DecoderLayer:
    """One decoder layer: its norms, its matrices as GGUF blocks, its KV cache, and what only some
    architectures have (post-norms: gemma2/3; per-head q/k norms: qwen3, gemma3; its own rotary table
    and sliding window: gemma's alternating local and global layers)."""

    attn_norm: torch.Tensor
    ffn_norm: torch.Tensor
    q: QuantWeight
    k: QuantWeight
    v: QuantWeight
    attn_out: QuantWeight
    gate: QuantWeight
    up: QuantWeight
    down: QuantWeight
    k_cache: torch.Tensor  # [kv_heads, max_len, head_dim] float16, or [slots, kv_heads, max_len, head_dim]
    v_cache: torch.Tensor
    post_attn_norm: Optional[torch.Tensor] = None  # [hidden]
    post_ffn_norm: Optional[torch.Tensor] = None
    q_norm: Optional[torch.Tensor] = None  # [head_dim]
    k_norm: Optional[torch.Tensor] = None
    rope: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # (cos, sin) [max_len, head_dim / 2]; None: the stack's
    window: int = 0  # > 0: attends to the last `window` positions only

    @property
    def matrices(self) -> list[QuantWeight]:
        return [self.q, self.k, self.v, self.attn_out, self.gate, self.up, self.down]


class LayerStack:
    """Every decoder layer of a model run by one C call per forward (csrc/forward.c).

    `start_profile()` makes every later call add its seconds per part (PROFILE_PARTS) to `profile`."""

    def start_profile(self) -> None:
        if self._lib.ap_profile_parts() != len(PROFILE_PARTS):
            raise RuntimeError("the kernels' profile parts differ from PROFILE_PARTS: rebuild")
        self.profile = np.zeros(len(PROFILE_PARTS), dtype=np.float64)

    def stop_profile(self) -> dict[str, float]:
        """Seconds per part since start_profile(), and profiling off."""
        parts = dict(zip(PROFILE_PARTS, (float(s) for s in self.profile))) if self.profile is not None else {}
        self.profile = None
        return parts

    def __init__(self, layers: Sequence[DecoderLayer], *, hidden: int, heads: int, kv_heads: int, head_dim: int,
                 rms_eps: float, rope_cos: torch.Tensor, rope_sin: torch.Tensor, rope_halves: bool,
                 activation: str = "silu", attn_scale: Optional[float] = None, attn_softcap: float = 0.0) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r}: one of {', '.join(ACTIVATIONS)}")
        self.layers = list(layers)
        self.hidden = hidden
        tables = (rope_cos.contiguous(), rope_sin.contiguous())
        max_len = rope_cos.shape[0]
        self._model = _ApModel(hidden, heads, kv_heads, head_dim, layers[0].gate.rows, max_len, int(rope_halves),
                               ACTIVATIONS[activation], rms_eps,
                               attn_scale if attn_scale is not None else 1.0 / head_dim ** 0.5, attn_softcap)
        pointer = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        self._keep = [tables]  # the C structs point into these tensors
        structs = []
        for layer in self.layers:
            cos, sin = (t.contiguous() for t in layer.rope) if layer.rope is not None else tables
            if cos.shape != (max_len, head_dim // 2) or sin.shape != cos.shape:
                raise ValueError(f"a rotary table must be [{max_len}, {head_dim // 2}], got {tuple(cos.shape)}")
            norms = (layer.attn_norm, layer.ffn_norm, layer.post_attn_norm, layer.post_ffn_norm, layer.q_norm, layer.k_norm)
            for norm, size in zip(norms, (hidden,) * 4 + (head_dim,) * 2):
                if norm is not None and (not norm.is_contiguous() or norm.dtype != torch.float32 or norm.numel() != size):
                    raise ValueError(f"a norm's weights must be contiguous float32 [{size}]")
            self._keep.append((cos, sin))
            structs.append(_ApLayer(*(pointer(n) for n in norms), cos.data_ptr(), sin.data_ptr(), int(layer.window),
                                    (_ApWeight * 3)(layer.q._struct, layer.k._struct, layer.v._struct),
                                    layer.attn_out._struct, (_ApWeight * 2)(layer.gate._struct, layer.up._struct),
                                    layer.down._struct, layer.k_cache.data_ptr(), layer.v_cache.data_ptr()))
        self._layers = (_ApLayer * len(structs))(*structs)
        # sequences whose KV the caches hold side by side (a 4-D cache: [slots, kv_heads, max_len, head_dim])
        self.slots = int(self.layers[0].k_cache.shape[0]) if self.layers[0].k_cache.dim() == 4 else 1
        self._lib = load_library()
        #: seconds per part of the forward (PROFILE_PARTS order), summed over calls while profiling is on
        self.profile: Optional[np.ndarray] = None

    def __call__(self, x: torch.Tensor, start: int, threads: int = 0, use_reference: bool = False,
                 path: KernelPath = "best") -> torch.Tensor:
        """x [M, hidden] float32, the rows at positions start..start+M-1, updated in place and returned."""
        x = x.contiguous()
        profile = self.profile.ctypes.data if self.profile is not None else None
        status = self._lib.ap_layers_forward(ctypes.addressof(self._model), ctypes.addressof(self._layers),
                                             len(self.layers), x.data_ptr(), start, x.shape[0], threads,
                                             _path_code(path, use_reference), profile)
        if status != 0:
            raise RuntimeError(f"ap_layers_forward failed ({status}): past the cache, or out of memory")
        return x

    def forward_seqs(self, x: torch.Tensor, seqs: Sequence[tuple[int, int, int]], threads: int = 0,
                     use_reference: bool = False, path: KernelPath = "best",
                     parents: Optional[Sequence[int]] = None, tree_kv: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Rows of several sequences in one call: `seqs` lists (rows, start, slot) per sequence, in
        x's row order; each row attends only to its own slot's cache. x updated in place and returned.

        `parents` (one per row of x): the row each row follows, an earlier row of its sequence, -1 for
        a sequence's first row; a sequence whose rows do not each follow the row before is a tree,
        each row at position start + its depth, attending to its ancestors only (bitwise the same row
        in a chain of them; csrc/forward.c). `tree_kv` [layers, rows, 2, kv_heads, head_dim] float16
        receives every tree row's K and V (to move a tree's accepted path to its positions)."""
        x = x.contiguous()
        if sum(rows for rows, _, _ in seqs) != x.shape[0]:
            raise ValueError(f"the sequences' rows ({sum(r for r, _, _ in seqs)}) differ from x's ({x.shape[0]})")
        rows, starts, slots = (np.array(column, dtype=np.intc) for column in zip(*seqs))
        tree = np.array(parents, dtype=np.intc) if parents is not None else None
        if tree is not None and tree.shape != (x.shape[0],):
            raise ValueError(f"parents: one per row ({x.shape[0]}), got {tree.shape}")
        if tree_kv is not None and (tree_kv.dtype != torch.float16 or not tree_kv.is_contiguous()
                                    or tree_kv.numel() != len(self.layers) * x.shape[0] * 2 * self._model.kv_heads
                                    * self._model.head_dim):
            raise ValueError("tree_kv must be contiguous float16 [layers, rows, 2, kv_heads, head_dim]")
        profile = self.profile.ctypes.data if self.profile is not None else None
        status = self._lib.ap_layers_forward_seqs(ctypes.addressof(self._model), ctypes.addressof(self._layers),
                                                  len(self.layers), x.data_ptr(), rows.ctypes.data, starts.ctypes.data,
                                                  slots.ctypes.data, len(seqs),
                                                  tree.ctypes.data if tree is not None else None,
                                                  tree_kv.data_ptr() if tree_kv is not None else None,
                                                  self.slots, threads, _path_code(path, use_reference), profile)
        if status != 0:
            raise RuntimeError(f"ap_layers_forward_seqs failed ({status}): a slot or position past the cache, a "
                               "row following no earlier row of its sequence, or out of memory")
        return x


# -- the machine's ceilings (csrc/roofline.c) ------------------------------------------------------

def read_bandwidth(threads: int, megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes per second the kernels' threads read from memory (the median of `repeats` passes over
    a buffer far larger than the caches): the floor of a step that streams its weights."""
    import statistics
    import time

    lib = load_library()
    size = megabytes << 20
    raw = np.ones(size + 64, dtype=np.uint8)  # written once: every page is real memory
    offset = (-raw.ctypes.data) % 64
    buffer = raw[offset:offset + size]
    lib.ap_stream_read(buffer.ctypes.data, size, threads)
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        lib.ap_stream_read(buffer.ctypes.data, size, threads)
        seconds.append(time.perf_counter() - t0)
    return size / statistics.median(seconds)


def int8_peak(threads: int, path: KernelPath = "best", iterations: int = 2_000_000) -> float:
    """int8 multiply-adds per second that the linear kernels' instruction (vpdpbusd with AVX-512 VNNI,
    else maddubs + madd) issues on `threads` threads with no memory traffic; 0.0 on the portable build."""
    import time

    lib = load_library()
    sink = np.zeros(max(threads, 1) * 4 + 64, dtype=np.int32)
    use_avx2 = int(path == "avx2")
    lib.ap_int8_peak(iterations // 10, threads, use_avx2, sink.ctypes.data)
    t0 = time.perf_counter()
    per_iteration = lib.ap_int8_peak(iterations, threads, use_avx2, sink.ctypes.data)
    seconds = time.perf_counter() - t0
    return per_iteration * iterations * threads / seconds if per_iteration else 0.0
