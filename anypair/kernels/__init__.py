"""anypair's own CPU kernels: batch-invariant linear layers on GGUF's quantized blocks, and the
RMSNorm, SiLU, GELU, soft-capping and attention of a transformer step, all bitwise the same for a row scored alone or
with others. C sources in csrc/ (a scalar reference beside each SIMD path), compiled on first use
(`build`), called through ctypes (`ops`) with the boundary declared once (`binding`, mirroring
csrc/ap_api.h and checked against the compiled structs at load)."""
from anypair.kernels.build import KernelUnavailable, load_library
from anypair.kernels.ops import (NATIVE_TYPES, LinearGroup, QuantWeight, attention, dequant_rows, gelu_tanh_mul,
                                 rmsnorm, silu_mul, simd_level, softcap)

__all__ = ["KernelUnavailable", "load_library", "NATIVE_TYPES", "LinearGroup", "QuantWeight", "attention",
           "dequant_rows", "gelu_tanh_mul", "rmsnorm", "silu_mul", "simd_level", "softcap"]
