"""Random quantized blocks with sane scales, in the byte layout of ggml's Q4_K, Q5_K and Q6_K.

A seed-shaped GGUF (`zoo.seed_shapes`) needs the exact bytes a real Q4_K_M file has, but no real
weights of those sizes can be had offline. Drawing floats and quantizing them would take a float
copy of every matrix and minutes of numpy per gigabyte, so the blocks are drawn directly: random
quants, and per sub-block scales and minimums chosen so that each value is centred on zero with a
standard deviation `std` (the writer takes 1/sqrt(columns), so every matrix maps unit activations
to unit activations and the forward stays finite through 40 layers). The layouts are ggml's
(block_q4_K, block_q5_K, block_q6_K in ggml-common.h); gguf's own dequantizer reads them back in
the tests, which check the mean and spread.
"""
from __future__ import annotations

import numpy as np

#: bytes of one 256-value super-block
BLOCK_BYTES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
QK_K = 256

# Q4_K/Q5_K: value = d * sc * q - dmin * m per 32-value sub-block (q in 0..15 or 0..31, sc and m
# 6-bit). With dmin = d and m = round(centre * sc) the value is d * sc * (q - centre): zero-mean.
# The sub-block scales are drawn from a small range so that m still fits in 6 bits.
_K_SCALES = {"Q4_K": (4, 8, 7.5, 16), "Q5_K": (2, 4, 15.5, 32)}  # (lowest sc, highest sc, centre, levels)


def _uniform_std(levels: int) -> float:
    """Standard deviation of a quant drawn uniformly from 0..levels-1."""
    return float(np.sqrt((levels * levels - 1) / 12.0))


def _pack_k_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """ggml's 12-byte packing of 8 six-bit scales and 8 six-bit minimums (the inverse of
    get_scale_min_k4): sub-blocks 0-3 in the low 6 bits of bytes 0-7, sub-blocks 4-7 split into a
    low nibble in bytes 8-11 and two high bits on top of bytes 0-7."""
    packed = np.empty((sc.shape[0], 12), dtype=np.uint8)
    packed[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    return packed


def _half(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)


def k_quant_blocks(kind: str, count: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """`count` random Q4_K or Q5_K super-blocks, uint8 [count, 144 or 176]."""
    low, high, centre, levels = _K_SCALES[kind]
    sc = rng.integers(low, high + 1, size=(count, 8), dtype=np.uint8)
    m = np.rint(centre * sc).astype(np.uint8)
    d = np.full(count, std / (float(sc.mean()) * _uniform_std(levels)), dtype=np.float32)
    parts = [_half(d), _half(d), _pack_k_scales(sc, m)]
    if kind == "Q5_K":  # the fifth bit of each quant, one bit per value
        parts.append(rng.integers(0, 256, size=(count, 32), dtype=np.uint8))
    parts.append(rng.integers(0, 256, size=(count, 128), dtype=np.uint8))  # two 4-bit quants a byte
    return np.concatenate(parts, axis=1)


def q6_k_blocks(count: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """`count` random Q6_K super-blocks, uint8 [count, 210]: value = d * scale * (q - 32), q in 0..63,
    a signed 8-bit scale per 16 values (random signs keep the small -0.5 offset of q from adding up)."""
    magnitude = rng.integers(8, 17, size=(count, 16))
    scales = (magnitude * rng.choice(np.array([-1, 1]), size=(count, 16))).astype(np.int8)
    d = np.full(count, std / (float(magnitude.mean()) * _uniform_std(64)), dtype=np.float32)
    low = rng.integers(0, 256, size=(count, 128), dtype=np.uint8)  # ql: low 4 bits of two quants a byte
    high = rng.integers(0, 256, size=(count, 64), dtype=np.uint8)  # qh: high 2 bits of four quants a byte
    return np.concatenate([low, high, scales.view(np.uint8), _half(d)], axis=1)


def random_blocks(kind: str, count: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """`count` super-blocks of `kind` (Q4_K, Q5_K or Q6_K) whose values have mean ~0 and spread `std`."""
    if kind == "Q6_K":
        return q6_k_blocks(count, std, rng)
    if kind in _K_SCALES:
        return k_quant_blocks(kind, count, std, rng)
    raise ValueError(f"no random blocks for {kind}: only {', '.join(BLOCK_BYTES)}")
