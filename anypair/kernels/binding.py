"""The C/Python boundary of the kernels, declared once on the Python side.

`csrc/ap_api.h` declares what the library exports; this module mirrors it: the ctypes structs
(`ApWeight`, `ApModel`, `ApLayer`) and `SIGNATURES`, the return and argument types of every exported
function. `bind(lib)` gives each function its types and compares the structs with the compiled
library's own sizes and offsets (`csrc/abi.c`): a field added on one side only is a one-line error
at load instead of memory read at the wrong place. tests/test_quant_kernels.py checks SIGNATURES
against the header's prototypes.
"""
from __future__ import annotations

import ctypes

from anypair.errors import BackendError

_p, _i, _f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


class ApWeight(ctypes.Structure):
    """ap_weight (ap_common.h): one matrix in its GGUF type or interleaved layout."""

    _fields_ = [("type", ctypes.c_int), ("N", ctypes.c_int), ("K", ctypes.c_int), ("row_bytes", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("bias", ctypes.c_void_p)]


class ApModel(ctypes.Structure):
    """ap_model (ap_api.h): a decoder model's shape and the options its layers share."""

    _fields_ = [("hidden", ctypes.c_int), ("heads", ctypes.c_int), ("kv_heads", ctypes.c_int),
                ("head_dim", ctypes.c_int), ("ffn", ctypes.c_int), ("max_len", ctypes.c_int),
                ("rope_halves", ctypes.c_int), ("activation", ctypes.c_int), ("rms_eps", ctypes.c_float),
                ("attn_scale", ctypes.c_float), ("attn_softcap", ctypes.c_float)]


class ApLayer(ctypes.Structure):
    """ap_layer (ap_api.h): one decoder layer's norms, rotary table, window, matrices and KV cache."""

    _fields_ = [("attn_norm", ctypes.c_void_p), ("ffn_norm", ctypes.c_void_p), ("post_attn_norm", ctypes.c_void_p),
                ("post_ffn_norm", ctypes.c_void_p), ("q_norm", ctypes.c_void_p), ("k_norm", ctypes.c_void_p),
                ("rope_cos", ctypes.c_void_p), ("rope_sin", ctypes.c_void_p), ("window", ctypes.c_int),
                ("qkv", ApWeight * 3),
                ("attn_out", ApWeight), ("gate_up", ApWeight * 2), ("down", ApWeight),
                ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p)]


STRUCTS = {"ap_weight": ApWeight, "ap_model": ApModel, "ap_layer": ApLayer}

#: every function of csrc/ap_api.h: name -> (return type, argument types); pointers are c_void_p
SIGNATURES: dict[str, tuple] = {
    "ap_simd_level": (_i, []),
    "ap_set_prefetch_min_rows": (None, [_i]),
    "ap_type_supported": (_i, [_i]),
    "ap_linear": (_i, [_p, _i, _p, _i, _i, _p, _i, _i]),
    "ap_dequant_rows": (_i, [_p, _p, _i, _p]),
    "ap_quantize_rows": (None, [_p, _i, _i, _i, _p, _p, _p, _p, _i]),
    "ap_packed_bytes": (ctypes.c_size_t, [_i, _i, _i]),
    "ap_repack": (_i, [_i, _p, ctypes.c_size_t, _i, _i, _p, _i]),
    "ap_repack_reference": (_i, [_i, _p, ctypes.c_size_t, _i, _i, _p, _i]),
    "ap_packed_type": (_i, [_i]),
    "ap_set_q6k_layout": (_i, [_i]),
    "ap_dequant_rows_raw": (_i, [_i, _p, ctypes.c_size_t, _i, _i, _p, _i, _p]),
    "ap_exp": (None, [_p, _p, _i, _i]),
    "ap_rmsnorm": (None, [_p, _p, _i, _i, _f, _p, _i]),
    "ap_silu_mul": (None, [_p, _p, ctypes.c_long, _i]),
    "ap_gelu_tanh_mul": (None, [_p, _p, ctypes.c_long, _i]),
    "ap_softcap": (None, [_p, ctypes.c_long, _f, _i]),
    "ap_attention": (_i, [_p, _p, _p, _i, _i, _i, _i, _i, _i, _f, _f, _i, _p, _i, _i]),
    "ap_attention_rows": (_i, [_p, _p, _p, _i, _p, _p, _i, _i, _i, _i, _f, _f, _i, _p, _i, _i]),
    "ap_profile_parts": (_i, []),
    "ap_layers_forward": (_i, [_p, _p, _i, _p, _i, _i, _i, _i, _p]),
    "ap_layers_forward_seqs": (_i, [_p, _p, _i, _p, _p, _p, _p, _i, _p, _p, _i, _i, _i, _p]),
    "ap_stream_read": (ctypes.c_uint64, [_p, ctypes.c_size_t, _i]),
    "ap_int8_peak": (ctypes.c_long, [ctypes.c_long, _i, _i, _p]),
    "ap_abi_layout": (_i, [_p, _i]),
    "ap_abi_names": (ctypes.c_char_p, []),
}


class BindingMismatch(BackendError):
    """The compiled kernels and this binding disagree on a struct or a function."""


def python_layout() -> dict[str, int]:
    """"struct.field" -> byte offset and "struct.size" -> size, as ctypes lays the mirrors out."""
    layout = {}
    for name, struct in STRUCTS.items():
        for field_name, _ in struct._fields_:
            layout[f"{name}.{field_name}"] = getattr(struct, field_name).offset
        layout[f"{name}.size"] = ctypes.sizeof(struct)
    return layout


def c_layout(lib: ctypes.CDLL) -> dict[str, int]:
    """The same names as the compiler laid the structs out (csrc/abi.c)."""
    names = lib.ap_abi_names().decode().split(",")
    values = (ctypes.c_int64 * 64)()
    count = lib.ap_abi_layout(values, len(values))
    if count != len(names):
        raise BindingMismatch(f"the kernels' layout table is inconsistent ({count} values for {len(names)} names)")
    return dict(zip(names, values[:count]))


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Types every exported function and checks the structs; raises BindingMismatch naming the first difference."""
    for name, (restype, argtypes) in SIGNATURES.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            raise BindingMismatch(f"the kernels export no {name}: rebuild them (a stale library?) or update "
                                  "anypair/kernels/binding.py with csrc/ap_api.h") from None
        function.restype, function.argtypes = restype, argtypes
    ours, theirs = python_layout(), c_layout(lib)
    for key in sorted(set(ours) | set(theirs)):
        if ours.get(key) != theirs.get(key):
            raise BindingMismatch(f"{key}: {theirs.get(key)} in the compiled kernels, {ours.get(key)} in "
                                  "anypair/kernels/binding.py: change both sides (csrc/ap_api.h and the ctypes struct)")
    return lib
