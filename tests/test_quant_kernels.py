"""anypair/kernels on real GGUF blocks: the SIMD path equals the scalar reference bitwise, a row's
output is bitwise the same alone or with 1..16 others, the values are the GGUF's (dequantization
against gguf's own code, products against fp64), and the attention/norm/SiLU kernels likewise.

Real blocks come from the zoo's GGUFs (Qwen Q4_K/Q6_K, SmolLM2 Q4_1, Qwen-0.5B and Gemma's other
types); a type no zoo file holds is made by quantizing a real weight matrix with gguf's quantizer, and
Q5_K (which gguf cannot quantize) from real Q4_K blocks with random fifth bits: real scales and
minimums, every value 0..31 reached.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from anypair.kernels import NATIVE_TYPES, LinearGroup, QuantWeight, attention, dequant_rows, load_library, rmsnorm, \
    silu_mul, simd_level

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROWS_PER_MATRIX = 96  # enough rows for every chunk/thread split, small enough to be quick


def _zoo_tensors():
    """name -> gguf tensor, over the zoo's test-group GGUFs, first tensor of each type wins."""
    from anypair.backends.gguf_file import GGUFFile
    from anypair.zoo.registry import ZOO_MODELS
    from anypair.zoo.served_gguf import gguf_file

    by_type = {}
    for model in ZOO_MODELS.values():
        if not model.in_test_group:
            continue
        path = gguf_file(model, progress=False)
        for tensor in GGUFFile(path).tensors.values():
            if len(tensor.shape) == 2 and tensor.ggml_type not in by_type and tensor.shape[0] % 256 == 0:
                by_type[tensor.ggml_type] = tensor
    return by_type


def _q5_k_from_q4_k(q4_k_rows: np.ndarray, seed: int = 0) -> np.ndarray:
    """Q5_K rows (ggml's block_q5_K: d, dmin, 12 bytes of scales, 32 of fifth bits, 128 of nibbles)
    made of Q4_K rows' blocks (d, dmin, scales, nibbles) with random fifth bits between."""
    rows = q4_k_rows.reshape(q4_k_rows.shape[0], -1, 144)
    fifth = np.random.default_rng(seed).integers(0, 256, size=(*rows.shape[:2], 32), dtype=np.uint8)
    blocks = np.concatenate([rows[..., :16], fifth, rows[..., 16:]], axis=-1)
    return np.ascontiguousarray(blocks.reshape(rows.shape[0], -1))


@pytest.fixture(scope="module")
def real_matrices():
    """ggml type -> QuantWeight of ROWS_PER_MATRIX real rows, for every type with a kernel."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    found = _zoo_tensors()
    matrices = {}
    for ggml_type, tensor in found.items():
        if ggml_type in NATIVE_TYPES:
            weight = QuantWeight.from_gguf_tensor(tensor)
            matrices[ggml_type] = QuantWeight(weight.ggml_type, ROWS_PER_MATRIX, weight.cols,
                                              np.ascontiguousarray(weight.data[:ROWS_PER_MATRIX]))
    # types no zoo file holds: real values (a Q4_K matrix's), quantized by gguf's own code
    source = found[int(GGMLQuantizationType.Q4_K)]
    values = dequantize(source.data[:ROWS_PER_MATRIX], GGMLQuantizationType.Q4_K).astype(np.float32)
    matrices[int(GGMLQuantizationType.Q5_K)] = QuantWeight(int(GGMLQuantizationType.Q5_K), ROWS_PER_MATRIX, source.shape[0],
                                                           _q5_k_from_q4_k(source.data[:ROWS_PER_MATRIX]))
    for name in ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "F16", "F32"):
        qtype = GGMLQuantizationType[name]
        if int(qtype) in matrices:
            continue
        blocks = values.astype(np.float16) if name == "F16" else values if name == "F32" else quantize(values, qtype)
        blocks = np.ascontiguousarray(blocks).view(np.uint8).reshape(ROWS_PER_MATRIX, -1)
        matrices[int(qtype)] = QuantWeight(int(qtype), ROWS_PER_MATRIX, values.shape[1], blocks)
    assert set(matrices) == set(NATIVE_TYPES), f"missing kernels' test matrices: {set(NATIVE_TYPES) - set(matrices)}"
    return matrices


def _activations(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=generator)
    x[:, :7] *= 30.0  # outlier channels, as real hidden states have
    return x


@pytest.mark.parametrize("type_name", list(NATIVE_TYPES.values()))
def test_simd_paths_equal_the_scalar_reference_bitwise(real_matrices, type_name):
    """Every compiled path (AVX-512 VNNI where the CPU has it, AVX2) against the reference, with
    a full tile of 8 rows and a partial one, and a prefill chunk's many rows (the wide paths)."""
    weight = real_matrices[next(t for t, n in NATIVE_TYPES.items() if n == type_name)]
    group = LinearGroup([weight])
    for rows in (11, 67):
        x = _activations(rows, weight.cols)
        best = group(x)[0]
        assert torch.equal(best, group(x, use_reference=True)[0]), f"{simd_level()} path != reference, {rows} rows"
        assert torch.equal(best, group(x, path="avx2")[0]), f"{simd_level()} path != AVX2 path, {rows} rows"


def test_the_build_takes_the_instruction_sets_the_cpu_reports(monkeypatch):
    """Detected, never assumed: each level's flags only when /proc/cpuinfo lists them all, and
    ANYPAIR_KERNEL_SIMD caps the level."""
    from anypair.kernels import build

    avx2, avx512 = {"avx2", "fma", "f16c"}, {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}
    monkeypatch.delenv("ANYPAIR_KERNEL_SIMD", raising=False)
    for flags, expected in [(set(), []), ({"avx2", "fma"}, []), (avx2, ["-mavx2", "-mfma", "-mf16c"]),
                            (avx2 | avx512 - {"avx512_vnni"}, ["-mavx2", "-mfma", "-mf16c"]),
                            (avx2 | avx512, ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl",
                                             "-mavx512vnni"])]:
        monkeypatch.setattr(build, "cpu_flags", lambda flags=flags: frozenset(flags))
        assert build.simd_flags() == expected, flags
    monkeypatch.setenv("ANYPAIR_KERNEL_SIMD", "avx2")
    assert build.simd_flags() == ["-mavx2", "-mfma", "-mf16c"]
    monkeypatch.setenv("ANYPAIR_KERNEL_SIMD", "portable")
    assert build.simd_flags() == []


def test_the_prefetch_threshold_is_per_cpu_and_never_changes_a_result(real_matrices, monkeypatch):
    """Intel and AMD Zen 5 get the AVX-512 tiles' software prefetch at every row count, Zen 3/4 from 4 rows
    (see kernels/build.py); which loads are hinted must not change one bit of any row."""
    from anypair.kernels import build

    assert build.prefetch_min_rows("GenuineIntel", 6) == 1 and build.prefetch_min_rows("AuthenticAMD", 25) == 4
    assert build.prefetch_min_rows("AuthenticAMD", 26) == 1 and build.prefetch_min_rows("", 0) == 4
    monkeypatch.setenv("ANYPAIR_PREFETCH_MIN_ROWS", "3")
    assert build.prefetch_min_rows("GenuineIntel") == 3
    monkeypatch.setenv("ANYPAIR_PREFETCH_MIN_ROWS", "many")
    with pytest.raises(Exception, match="whole number"):
        build.prefetch_min_rows()
    monkeypatch.delenv("ANYPAIR_PREFETCH_MIN_ROWS")
    lib = build.load_library()
    for weight in real_matrices.values():
        group = LinearGroup([weight])
        x = _activations(6, weight.cols, seed=2)
        results = []
        for rows in (1, 4, 8):
            lib.ap_set_prefetch_min_rows(rows)
            results.append([group(x[:k], threads=2)[0] for k in (1, 2, 3, 6)])
        lib.ap_set_prefetch_min_rows(build.prefetch_min_rows())
        assert all(torch.equal(a, b) for other in results[1:] for a, b in zip(results[0], other))


@pytest.mark.parametrize("type_name", list(NATIVE_TYPES.values()))
def test_rows_are_bitwise_the_same_alone_or_with_up_to_64_others(real_matrices, type_name):
    weight = real_matrices[next(t for t, n in NATIVE_TYPES.items() if n == type_name)]
    group = LinearGroup([weight])
    x = _activations(64, weight.cols, seed=1)
    alone = torch.cat([group(x[i:i + 1], threads=2)[0] for i in range(64)])
    for k in range(2, 65):
        together = group(x[:k], threads=2)[0]
        assert torch.equal(together, alone[:k]), f"{type_name}: row results change when {k} rows are scored together"
    # and whatever the thread count
    assert torch.equal(group(x, threads=1)[0], alone)


def _quantized_rows(x: torch.Tensor, block: int) -> torch.Tensor:
    """The activation rows as the kernels see them: int8 times the per-block scale, in fp64."""
    lib = load_library()
    rows, cols = x.shape
    q = torch.empty(rows, cols, dtype=torch.int8)
    d = torch.empty(rows, cols // block)
    s16 = torch.empty(rows, cols // 16, dtype=torch.int16)
    s32 = torch.empty(rows, cols // 32, dtype=torch.int16)
    lib.ap_quantize_rows(x.data_ptr(), rows, cols, block, q.data_ptr(), d.data_ptr(), s16.data_ptr(), s32.data_ptr(), 0)
    assert torch.equal(s16.int(), q.view(rows, -1, 16).int().sum(-1)) and torch.equal(s32.int(), q.view(rows, -1, 32).int().sum(-1))
    return (q.double().view(rows, -1, block) * d.double().unsqueeze(-1)).view(rows, cols)


@pytest.mark.parametrize("type_name", list(NATIVE_TYPES.values()))
def test_products_are_the_gguf_weights_times_the_activations(real_matrices, type_name):
    """Against fp64 on gguf's own dequantization: with the activations as quantized, the kernel's
    only error is fp32 rounding; against the float activations, int8 rounding (llama.cpp's class)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    ggml_type = next(t for t, n in NATIVE_TYPES.items() if n == type_name)
    weight = real_matrices[ggml_type]
    if type_name in ("F16", "F32"):
        exact = weight.data.view(np.float16 if type_name == "F16" else np.float32).astype(np.float64)
    else:
        exact = dequantize(weight.data, GGMLQuantizationType(ggml_type)).astype(np.float64)
    exact = torch.from_numpy(exact.reshape(weight.rows, weight.cols))
    x = _activations(5, weight.cols, seed=2)
    got = LinearGroup([weight])(x)[0].double()
    block = {"F16": 0, "F32": 0, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256}.get(type_name, 32)
    as_seen = x.double() if block == 0 else _quantized_rows(x, block)
    reference = as_seen @ exact.T
    assert float((got - reference).abs().max() / reference.abs().max()) < 1e-5
    plain = x.double() @ exact.T
    relative = float((got - plain).abs().max() / plain.abs().max())
    assert relative < (1e-6 if block == 0 else 5e-2), f"{type_name}: relative error {relative:.2e}"
    # dequantized rows (the embedding gather) are gguf's values
    rows = dequant_rows(weight, [0, 5, weight.rows - 1]).double()
    assert torch.allclose(rows, exact[[0, 5, weight.rows - 1]], rtol=1e-6, atol=1e-7)


def _quantized_activations(x: torch.Tensor, block: int = 256) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """q int8 [M, K], d [M, K/block], s16 [M, K/16], s32 [M, K/32] as the kernels make them."""
    lib = load_library()
    rows, cols = x.shape
    q = torch.empty(rows, cols, dtype=torch.int8)
    d = torch.empty(rows, cols // block)
    s16 = torch.empty(rows, cols // 16, dtype=torch.int16)
    s32 = torch.empty(rows, cols // 32, dtype=torch.int16)
    lib.ap_quantize_rows(x.contiguous().data_ptr(), rows, cols, block, q.data_ptr(), d.data_ptr(), s16.data_ptr(),
                         s32.data_ptr(), 1)
    return q.numpy().astype(np.int64), d.numpy(), s16.numpy().astype(np.int64), s32.numpy().astype(np.int64)


def _k_quant_values(blocks: np.ndarray, type_name: str):
    """From GGUF super-blocks [N, nb, bytes]: (d, dmin, per-sub-block scales, minimums, values), the
    file's own encoding read independently of the C code (ggml-quants.c's layouts)."""
    f16 = lambda at: blocks[..., at:at + 2].copy().view(np.float16)[..., 0].astype(np.float32)  # noqa: E731
    if type_name in ("Q4_K", "Q5_K"):
        s = blocks[..., 4:16].astype(np.int64)
        sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0xF) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
        mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
        qs = blocks[..., -128:].astype(np.int64).reshape(*blocks.shape[:2], 4, 32)  # 4 x 32 bytes: sub-blocks 2c, 2c+1
        values = np.stack([qs & 15, qs >> 4], axis=3).reshape(*blocks.shape[:2], 256)
        if type_name == "Q5_K":  # element 32 * j + i: bit j of qh[i]
            qh = blocks[..., 16:48].astype(np.int64)
            values = values | (np.stack([(qh >> j) & 1 for j in range(8)], axis=2).reshape(*blocks.shape[:2], 256) << 4)
        return f16(0), f16(2), sc, mn, values
    ql = blocks[..., 0:128].astype(np.int64).reshape(*blocks.shape[:2], 2, 2, 32)   # [half][first/second 32 bytes]
    qh = blocks[..., 128:192].astype(np.int64).reshape(*blocks.shape[:2], 2, 1, 32)
    low = np.concatenate([ql[..., 0, :] & 15, ql[..., 1, :] & 15, ql[..., 0, :] >> 4, ql[..., 1, :] >> 4], axis=-1)
    high = np.concatenate([(qh[..., 0, :] >> (2 * quarter)) & 3 for quarter in range(4)], axis=-1)
    values = (low | (high << 4)).reshape(*blocks.shape[:2], 256)
    scales = blocks[..., 192:208].copy().view(np.int8).astype(np.int64)
    return f16(208), None, scales, None, values


def _k_quant_definition(weight: QuantWeight, x: torch.Tensor, type_name: str, mutation: str = "") -> torch.Tensor:
    """The K-quant definition of ap_common.h computed in numpy from the GGUF's own blocks: exact
    integers, then float32 steps super-block by super-block; [activation rows, weight rows]. `mutation`
    changes the float epilogue's order as a kernel might by mistake: "scale" multiplies d * (dx * isum),
    "blocks" adds the super-blocks' steps last to first."""
    q, dx, s16, s32 = _quantized_activations(x)
    rows, nb = weight.rows, weight.cols // 256
    d, dmin, scales, mins, values = _k_quant_values(weight.data.reshape(rows, nb, -1), type_name)
    xs = q.reshape(len(q), nb, 256)
    with_minimums = type_name in ("Q4_K", "Q5_K")
    per_scale = 32 if with_minimums else 16
    weights = values if with_minimums else values - 32
    parts = np.einsum("nbji,mbji->nmbj", weights.reshape(rows, nb, -1, per_scale), xs.reshape(len(q), nb, -1, per_scale))
    isum = (scales[:, None] * parts).sum(-1)                                                 # [N, M, nb], exact
    expected = np.zeros((rows, len(q)), dtype=np.float32)
    for b in (reversed(range(nb)) if mutation == "blocks" else range(nb)):
        if mutation == "scale":
            step = d[:, b, None] * (dx[None, :, b] * isum[..., b].astype(np.float32))
        else:
            step = (d[:, b, None] * dx[None, :, b]) * isum[..., b].astype(np.float32)
        if with_minimums:
            msum = (mins[:, None, b, :] * s32[None, :, 8 * b:8 * b + 8]).sum(-1)
            step = step - (dmin[:, b, None] * dx[None, :, b]) * msum.astype(np.float32)
        expected = expected + step
    return torch.from_numpy(expected.T.copy())


@pytest.mark.parametrize("type_name", ["Q4_K", "Q5_K", "Q6_K"])
@pytest.mark.parametrize("rows", [96, 90])
@pytest.mark.parametrize("activation_rows", [6, 37])
def test_k_quants_follow_their_definition_bitwise(real_matrices, type_name, rows, activation_rows):
    """The interleaved kernels against the definition in ap_common.h, computed here in numpy from
    the GGUF's own blocks: equal bit for bit, on every path, also when the last group of 16 rows is
    partly padding (90 rows), for a verification's few rows and a prefill chunk's many (37: the wide
    tiles of 8 and a partial one)."""
    ggml_type = next(t for t, n in NATIVE_TYPES.items() if n == type_name)
    source = real_matrices[ggml_type]
    weight = QuantWeight(ggml_type, rows, source.cols, np.ascontiguousarray(source.data[:rows]))
    x = _activations(activation_rows, weight.cols, seed=4)
    expected = _k_quant_definition(weight, x, type_name)
    group = LinearGroup([weight])
    for path in ("best", "avx2", "reference"):
        assert torch.equal(group(x, path=path)[0], expected), f"{type_name} {path} path differs from the definition"


@pytest.mark.parametrize("type_name", ["Q4_K", "Q5_K", "Q6_K"])
@pytest.mark.parametrize("mutation", ["scale", "blocks"])
def test_a_changed_epilogue_order_is_caught(real_matrices, type_name, mutation):
    """The bitwise tests above can fail: the epilogue in another float order (the scales multiplied the
    other way round, or the super-blocks added last to first) gives other bits on these matrices, so a
    kernel whose epilogue strayed from the one-row path's order would be caught, at 1 and at 37 rows."""
    ggml_type = next(t for t, n in NATIVE_TYPES.items() if n == type_name)
    weight = real_matrices[ggml_type]
    group = LinearGroup([weight])
    for activation_rows in (1, 37):
        x = _activations(activation_rows, weight.cols, seed=4)
        kernels = group(x)[0]
        assert torch.equal(kernels, _k_quant_definition(weight, x, type_name))
        assert not torch.equal(kernels, _k_quant_definition(weight, x, type_name, mutation)), \
            f"{type_name}: the {mutation!r} mutation gives the same bits: the bitwise test could not see it"


def test_q5_k_at_its_largest_values_stays_exact(real_matrices):
    """Q5_K's values reach 31, where the AVX2 path's int16 pair sums would overflow over a whole
    sub-block: every value 31 and every scale 63, against activations all +127 or all -127 (and a
    row alternating), still the definition bit for bit on every path."""
    source = real_matrices[13]
    blocks = source.data.reshape(source.rows, -1, 176).copy()
    blocks[..., 4:16] = 0xFF   # every six-bit scale and minimum 63
    blocks[..., 16:] = 0xFF    # every fifth bit and nibble set: values 31
    weight = QuantWeight(13, source.rows, source.cols, np.ascontiguousarray(blocks.reshape(source.rows, -1)))
    x = torch.ones(3, weight.cols)
    x[1] = -1.0
    x[2, 1::2] = -1.0
    expected = _k_quant_definition(weight, x, "Q5_K")
    group = LinearGroup([weight])
    for path in ("best", "avx2", "reference"):
        assert torch.equal(group(x, path=path)[0], expected), f"Q5_K {path} path differs from the definition at 31"


def _q6k_layout(name: str):
    """Q6_K matrices made inside are laid out as `name` ("bits" or "bytes"); the CPU's choice after."""
    from anypair.kernels.build import packing_q6k_as

    return packing_q6k_as(name)


@pytest.mark.parametrize("rows", [96, 90])
def test_q6_k_in_six_bits_or_in_bytes_gives_the_same_bits(real_matrices, rows):
    """Q6_K's two layouts (block_q6_K_g16, the file's 6 bits; block_q6_K_i8, a byte a value; the CPU picks
    one) follow one definition: each equals the definition computed in numpy, on every path, for 1 to 11
    rows and a padded last group, and their dequantized rows (the embedding gather) are the same."""
    source = real_matrices[14]
    data = np.ascontiguousarray(source.data[:rows])
    x = _activations(11, source.cols, seed=6)
    results = {}
    for layout in ("bits", "bytes"):
        with _q6k_layout(layout):
            weight = QuantWeight(14, rows, source.cols, data)
        assert weight.nbytes == (rows + 15) // 16 * (source.cols // 256) * (3360 if layout == "bits" else 4384)
        expected = _k_quant_definition(weight, x, "Q6_K")
        group = LinearGroup([weight])
        for path in ("best", "avx2", "reference"):
            for k in (1, 3, 8, 11):
                assert torch.equal(group(x[:k], path=path)[0], expected[:k]), f"Q6_K as {layout}, {path} path, {k} rows"
        results[layout] = dequant_rows(weight, [0, 7, rows - 1])
    assert torch.equal(results["bits"], results["bytes"])


def test_the_q6_k_layout_is_the_cpus_and_can_be_set():
    from anypair.errors import BackendError
    from anypair.kernels.build import q6k_layout

    assert q6k_layout("GenuineIntel", avx512=True) == "bits"
    assert q6k_layout("GenuineIntel", avx512=False) == q6k_layout("AuthenticAMD", avx512=True) == "bytes"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANYPAIR_Q6K_LAYOUT", "bytes")
        assert q6k_layout("GenuineIntel") == "bytes"
        patch.setenv("ANYPAIR_Q6K_LAYOUT", "nibbles")
        with pytest.raises(BackendError, match="ANYPAIR_Q6K_LAYOUT must be one of bits, bytes"):
            q6k_layout()
    assert load_library().ap_set_q6k_layout(12) == -1  # not a Q6_K layout: refused, nothing changed


@pytest.mark.parametrize("layout", ["bits", "bytes"])
def test_the_word_at_a_time_repack_writes_the_reference_bytes(layout):
    """The load's repack (8 file bytes at a time) writes, byte for byte, what the reference byte loops write,
    for every interleaved type (Q6_K in either layout), padded last groups and any bytes in the blocks (the
    repack moves bits, it never reads a value); both refuse a shape without a layout alike."""
    lib = load_library()
    block_bytes = {3: (20, 32), 6: (22, 32), 8: (34, 32), 12: (144, 256), 13: (176, 256), 14: (210, 256)}
    rng = np.random.default_rng(12)
    with _q6k_layout(layout):
        for ggml_type, (size, cols) in block_bytes.items():
            for rows, blocks in ((1, 1), (16, 3), (37, 2)):
                data = rng.integers(0, 256, size=(rows, size * blocks), dtype=np.uint8)
                out = {}
                for name in ("ap_repack", "ap_repack_reference"):
                    out[name] = np.full(lib.ap_packed_bytes(ggml_type, rows, cols * blocks), 0x5A, dtype=np.uint8)
                    kind = getattr(lib, name)(ggml_type, data.ctypes.data, data.shape[1], rows, cols * blocks,
                                              out[name].ctypes.data, 2)
                    assert kind == lib.ap_packed_type(ggml_type)
                assert np.array_equal(out["ap_repack"], out["ap_repack_reference"]), \
                    f"{NATIVE_TYPES[ggml_type]} ({layout}), {rows} rows of {blocks} blocks"
    scratch = np.zeros(4096, dtype=np.uint8)
    for name in ("ap_repack", "ap_repack_reference"):
        assert getattr(lib, name)(12, scratch.ctypes.data, 144, 1, 100, scratch.ctypes.data, 1) == -1


def test_the_layout_caches_key_follows_the_q6_k_layout():
    """A cache written with one Q6_K layout is never read with the other."""
    from anypair.kernels.packed_cache import layout_key

    with _q6k_layout("bits"):
        bits = layout_key()
    with _q6k_layout("bytes"):
        assert layout_key() != bits


def _block32_values(blocks: np.ndarray, type_name: str):
    """From GGUF 32-element blocks [N, nb, bytes]: (d, minimum or None, values as the definition
    multiplies them), the file's own encoding read independently of the C code: ggml's block_q4_1
    (d, m, 16 bytes of nibbles), block_q5_0 (d, 32 fifth bits, 16 bytes of nibbles, offset 16) and
    block_q8_0 (d, 32 signed bytes)."""
    f16 = lambda at: blocks[..., at:at + 2].copy().view(np.float16)[..., 0].astype(np.float32)  # noqa: E731
    if type_name == "Q8_0":
        return f16(0), None, blocks[..., 2:34].copy().view(np.int8).astype(np.int64)
    nibbles = blocks[..., -16:].astype(np.int64)
    low = np.concatenate([nibbles & 15, nibbles >> 4], axis=-1)  # elements 0..15, then 16..31
    if type_name == "Q4_1":
        return f16(0), f16(2), low
    fifth_bits = blocks[..., 2:6].copy().view(np.uint32)[..., 0].astype(np.int64)
    high = (fifth_bits[..., None] >> np.arange(32)) & 1         # bit e: element e
    return f16(0), None, (low | (high << 4)) - 16


@pytest.mark.parametrize("type_name", ["Q4_1", "Q5_0"])
@pytest.mark.parametrize("rows", [96, 90])
def test_32_element_blocks_follow_their_definition_bitwise(real_matrices, type_name, rows):
    """The interleaved Q4_1 and Q5_0 kernels against their definitions in ap_common.h (AP_Q4_1_G16,
    AP_Q5_0_G16), computed here in numpy from the GGUF's own blocks: per 32-element block an exact
    int, then acc + ((d * dx) * isum [+ (m * dx) * s32]) in float32; every path, a padded last group too."""
    ggml_type = next(t for t, n in NATIVE_TYPES.items() if n == type_name)
    source = real_matrices[ggml_type]
    weight = QuantWeight(ggml_type, rows, source.cols, np.ascontiguousarray(source.data[:rows]))
    assert weight.packed is not None  # the kernels read the interleaved copy
    x = _activations(6, weight.cols, seed=5)
    q, dx, _, s32 = _quantized_activations(x, block=32)
    nb = weight.cols // 32
    d, m, values = _block32_values(weight.data.reshape(rows, nb, -1), type_name)
    isum = np.einsum("nbi,mbi->nmb", values, q.reshape(len(q), nb, 32))       # exact
    expected = np.zeros((rows, len(q)), dtype=np.float32)
    for b in range(nb):
        step = (d[:, b, None] * dx[None, :, b]) * isum[..., b].astype(np.float32)
        if m is not None:
            step = step + (m[:, b, None] * dx[None, :, b]) * s32[None, :, b].astype(np.float32)
        expected = expected + step
    expected = torch.from_numpy(expected.T.copy())
    group = LinearGroup([weight])
    for path in ("best", "avx2", "reference"):
        assert torch.equal(group(x, path=path)[0], expected), f"{type_name} {path} path differs from the definition"


@pytest.mark.parametrize("rows", [96, 90])
def test_q8_0_keeps_the_row_layouts_eight_lanes_bitwise(real_matrices, rows):
    """Q8_0 is read interleaved (AP_Q8_0_G16) but computed in the row layout's order (ap_common.h), so a
    Q8_0 model's numbers did not move with the layout: per weight row 8 float32 lanes, lane t taking
    (d * dx) * (exact 4-element sum) of elements 4t..4t+3 block by block, then ap_reduce8's tree;
    computed here in numpy from the GGUF's blocks; every path, a padded last group too."""
    source = real_matrices[8]
    weight = QuantWeight(8, rows, source.cols, np.ascontiguousarray(source.data[:rows]))
    assert weight.packed is not None
    x = _activations(5, weight.cols, seed=7)
    q, dx, _, _ = _quantized_activations(x, block=32)
    nb = weight.cols // 32
    d, _, values = _block32_values(weight.data.reshape(rows, nb, -1), "Q8_0")
    lanes = np.einsum("nbte,mbte->nmbt", values.reshape(rows, nb, 8, 4), q.reshape(len(q), nb, 8, 4).astype(np.int64))
    acc = np.zeros((rows, len(q), 8), dtype=np.float32)
    for b in range(nb):
        scale = (d[:, b, None] * dx[None, :, b]).astype(np.float32)
        acc = acc + scale[..., None] * lanes[..., b, :].astype(np.float32)
    a = acc
    expected = ((a[..., 0] + a[..., 4]) + (a[..., 2] + a[..., 6])) + ((a[..., 1] + a[..., 5]) + (a[..., 3] + a[..., 7]))
    expected = torch.from_numpy(expected.T.copy())
    group = LinearGroup([weight])
    for path in ("best", "avx2", "reference"):
        assert torch.equal(group(x, path=path)[0], expected), f"Q8_0 {path} path differs from the row layout's order"


def test_a_group_with_biases_and_mixed_types_equals_its_members_alone(real_matrices):
    """q/k/v in one call: K-quant and 32-block types side by side (two activation quantizations), a bias."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    q4k = real_matrices[12]
    values = dequantize(q4k.data, GGMLQuantizationType.Q4_K).reshape(q4k.rows, q4k.cols).astype(np.float32)
    q8 = QuantWeight(8, q4k.rows, q4k.cols, np.ascontiguousarray(
        quantize(values, GGMLQuantizationType.Q8_0)).view(np.uint8).reshape(q4k.rows, -1))
    bias = torch.randn(q4k.rows)
    with_bias = QuantWeight(q4k.ggml_type, q4k.rows, q4k.cols, q4k.data, bias)
    x = _activations(3, q4k.cols, seed=3)
    first, second = LinearGroup([with_bias, q8])(x)
    assert torch.equal(first, LinearGroup([q4k])(x)[0] + bias)
    assert torch.equal(second, LinearGroup([q8])(x)[0])


def test_bad_input_is_refused():
    weight = QuantWeight(0, 8, 32, np.zeros((8, 128), dtype=np.uint8))
    with pytest.raises(ValueError):
        LinearGroup([weight])(torch.zeros(2, 64))
    with pytest.raises(IndexError):
        dequant_rows(weight, [8])
    with pytest.raises(ValueError, match="no kernel"):
        QuantWeight(99, 8, 32, np.zeros((8, 128), dtype=np.uint8))


# -- the other kernels of a step ------------------------------------------------------------------

def test_exp_rmsnorm_silu_simd_equal_reference_and_are_accurate():
    import ctypes

    lib = load_library()
    x = torch.linspace(-90, 10, 1003)
    fast, ref = torch.empty_like(x), torch.empty_like(x)
    lib.ap_exp(x.data_ptr(), fast.data_ptr(), x.numel(), 0)
    lib.ap_exp(x.data_ptr(), ref.data_ptr(), x.numel(), 1)
    assert torch.equal(fast, ref)
    assert torch.allclose(fast.double(), x.double().exp(), rtol=2e-7, atol=2e-38)  # 0 below exp(-87.3)
    del ctypes

    h = _activations(5, 1536, seed=4)
    w = torch.rand(1536) + 0.5
    assert torch.equal(rmsnorm(h, w, 1e-6), rmsnorm(h, w, 1e-6, use_reference=True))
    expected = h.double() / (h.double().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double()
    assert torch.allclose(rmsnorm(h, w, 1e-6).double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(torch.cat([rmsnorm(h[i:i + 1], w, 1e-6) for i in range(5)]), rmsnorm(h, w, 1e-6))

    gate, up = _activations(3, 1000, seed=5), _activations(3, 1000, seed=6)
    fast = silu_mul(gate.clone(), up)
    assert torch.equal(fast, silu_mul(gate.clone(), up, use_reference=True))
    assert torch.allclose(fast, torch.nn.functional.silu(gate) * up, rtol=1e-5, atol=1e-5)


def _filled_cache(kv_heads: int, length: int, dim: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    k = torch.randn(kv_heads, length + 8, dim, generator=generator).half()
    v = torch.randn(kv_heads, length + 8, dim, generator=generator).half()
    return k, v


def _attention_fp64(q, k_cache, v_cache, pos, scale, window, softcap):
    """torch's attention in fp64 for one query row [Hq, D] at position pos of the caches [Hkv, L, D]."""
    group = q.shape[0] // k_cache.shape[0]
    lo = max(0, pos - window + 1) if window else 0
    keys = k_cache[:, lo:pos + 1].double().repeat_interleave(group, 0)
    values = v_cache[:, lo:pos + 1].double().repeat_interleave(group, 0)
    scores = (keys @ q.double().unsqueeze(-1)).squeeze(-1) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    return (torch.softmax(scores, dim=-1).unsqueeze(-1) * values).sum(1).reshape(-1)


@pytest.mark.parametrize("heads,kv_heads,dim,window,context,queries,softcap", [
    (12, 2, 128, 0, 300, 16, 0.0), (9, 3, 64, 0, 300, 16, 0.0), (4, 1, 256, 40, 300, 16, 0.0),
    # rows whose ranges start and end inside a shared key block; more rows than one piece reads at once
    (12, 2, 128, 0, 301, 5, 0.0), (9, 3, 64, 7, 30, 20, 0.0), (14, 2, 64, 0, 1003, 19, 0.0),
    # gemma-2-9b's shape, one task reading a KV head for every row: soft-capped; a sliding window
    # narrower than the rows' span (each row's first key in another place of a key block); 19 rows
    # (two groups); rows from position 0 (ranges shorter than a block); a head size that is not a
    # multiple of 16 (the AVX2 path in an AVX-512 build)
    (16, 8, 256, 0, 300, 4, 50.0), (16, 8, 256, 5, 301, 8, 50.0), (16, 8, 256, 11, 262, 19, 30.0),
    (16, 8, 256, 0, 0, 5, 0.0), (4, 2, 72, 9, 53, 6, 20.0),
    # an odd multiple of 16 (AVX-512: the values in pairs of 16-element vectors, then one alone)
    (8, 2, 48, 0, 300, 5, 0.0)])
def test_attention_matches_torch_and_is_bitwise_batch_invariant(heads, kv_heads, dim, window, context, queries,
                                                                 softcap):
    k_cache, v_cache = _filled_cache(kv_heads, context + queries, dim, seed=heads)
    q = torch.randn(queries, heads, dim, generator=torch.Generator().manual_seed(7))
    scale = 1.0 / math.sqrt(dim)
    together = attention(q, k_cache, v_cache, context, scale, window=window, threads=2, softcap=softcap)
    assert torch.equal(together, attention(q, k_cache, v_cache, context, scale, window=window, use_reference=True,
                                           softcap=softcap))
    alone = torch.cat([attention(q[i:i + 1], k_cache, v_cache, context + i, scale, window=window, threads=1,
                                 softcap=softcap) for i in range(queries)])
    assert torch.equal(together, alone)
    # torch's attention in fp64 on the same cache: query i sees positions [lo, context + i]
    for i in (0, queries - 1):
        expected = _attention_fp64(q[i], k_cache, v_cache, context + i, scale, window, softcap)
        assert torch.allclose(together[i].double(), expected, rtol=1e-4, atol=1e-5)


def _attention_rows(q, caches, pos, slots, scale, window, softcap, threads=2, use_reference=False):
    """ap_attention_rows straight through ctypes: row m at position pos[m] of cache slot slots[m]
    (caches [2][slots][Hkv][L_max][D] fp16), as the forward calls it for several sequences at once."""
    import ctypes

    rows, heads, dim = q.shape
    _, _, kv_heads, max_len, _ = caches.shape
    positions = np.asarray(pos, dtype=np.int32)
    cache_at = np.asarray([s * kv_heads * max_len * dim for s in slots], dtype=np.int64)
    q = q.contiguous()
    out = torch.empty(rows, heads * dim, dtype=torch.float32)
    status = load_library().ap_attention_rows(q.data_ptr(), caches[0].data_ptr(), caches[1].data_ptr(), max_len,
                                              positions.ctypes.data, cache_at.ctypes.data, rows, heads, kv_heads, dim,
                                              ctypes.c_float(scale), ctypes.c_float(softcap), window, out.data_ptr(),
                                              threads, int(use_reference))
    assert status == 0
    return out


@pytest.mark.parametrize("heads,kv_heads,dim", [(16, 8, 256), (9, 3, 64), (28, 4, 128)])
@pytest.mark.parametrize("window,softcap", [(0, 0.0), (6, 50.0)])
def test_attention_rows_of_two_sequences_in_one_call_are_bitwise_each_row_alone(heads, kv_heads, dim, window, softcap):
    """One ap_attention_rows call with rows of two sequences (two slots of one cache buffer), the
    first sequence's rows in two runs: each run of a sequence is read as one group, and every row
    gets the bits it gets alone and the reference's."""
    generator = torch.Generator().manual_seed(heads)
    caches = torch.randn(2, 2, kv_heads, 320, dim, generator=generator).half()
    pos = [203, 204, 205, 57, 58, 59, 60, 206, 0, 1]
    slots = [1, 1, 1, 0, 0, 0, 0, 1, 0, 0]
    q = torch.randn(len(pos), heads, dim, generator=generator)
    scale = 1.0 / math.sqrt(dim)
    together = _attention_rows(q, caches, pos, slots, scale, window, softcap)
    assert torch.equal(together, _attention_rows(q, caches, pos, slots, scale, window, softcap, use_reference=True))
    for m in range(len(pos)):
        alone = _attention_rows(q[m:m + 1], caches, pos[m:m + 1], slots[m:m + 1], scale, window, softcap, threads=1)
        assert torch.equal(together[m:m + 1], alone), m
        expected = _attention_fp64(q[m], caches[0, slots[m]], caches[1, slots[m]], pos[m], scale, window, softcap)
        assert torch.allclose(together[m].double(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("heads,kv_heads", [(9, 3), (15, 5), (6, 3), (12, 2)])
def test_one_row_split_across_threads_gets_the_reference_bits(heads, kv_heads):
    """A single row (a draft's step) whose KV heads do not divide among the threads: its query heads are
    cut into one contiguous range a thread (a KV head read by two threads, each for part of its heads),
    and every cut gives the reference's bits; so do single rows of several sequences in one call."""
    dim, context = 64, 203
    generator = torch.Generator().manual_seed(heads + kv_heads)
    caches = torch.randn(2, 3, kv_heads, 320, dim, generator=generator).half()
    q = torch.randn(3, heads, dim, generator=generator)
    scale = 1.0 / math.sqrt(dim)
    for threads in (1, 2, 3, 4):
        for m in range(3):
            reference = _attention_rows(q[m:m + 1], caches, [context + m], [m], scale, 0, 0.0, use_reference=True)
            assert torch.equal(_attention_rows(q[m:m + 1], caches, [context + m], [m], scale, 0, 0.0, threads=threads),
                               reference), (threads, m)
        rows = _attention_rows(q, caches, [context, context + 1, context + 2], [0, 1, 2], scale, 0, 0.0, threads=threads)
        assert torch.equal(rows, _attention_rows(q, caches, [context, context + 1, context + 2], [0, 1, 2], scale, 0,
                                                 0.0, use_reference=True)), threads


def test_a_thread_pool_released_comes_back_on_the_next_call(real_matrices):
    """`anypair serve` releases the loading thread's OpenMP threads before generating on its worker
    thread (two pools make libgomp wait passively); the kernels must work the same afterwards."""
    from anypair.kernels.build import release_thread_pool

    weight = real_matrices[12]  # Q4_K
    group = LinearGroup([weight])
    x = _activations(3, weight.cols)
    before = group(x, threads=2)[0]
    assert release_thread_pool()
    assert torch.equal(group(x, threads=2)[0], before)


# -- the C/Python boundary (anypair/kernels/binding.py against csrc/ap_api.h and the compiled library) --

def test_the_binding_matches_the_compiled_structs():
    from anypair.kernels.binding import c_layout, python_layout

    compiled, mirrored = c_layout(load_library()), python_layout()
    assert compiled == mirrored
    assert {"ap_weight.size", "ap_model.size", "ap_layer.size", "ap_layer.qkv"} <= set(compiled)


def test_a_struct_changed_on_one_side_only_is_refused_at_load(monkeypatch):
    """A field the C side does not have (or lays out elsewhere) must stop the load with one line
    naming it, never let Python write a forward's arguments at the wrong offsets."""
    import ctypes

    from anypair.kernels import binding

    class ModelWithAnExtraField(ctypes.Structure):
        _fields_ = [("version", ctypes.c_int)] + list(binding.ApModel._fields_)

    monkeypatch.setitem(binding.STRUCTS, "ap_model", ModelWithAnExtraField)
    with pytest.raises(binding.BindingMismatch, match=r"ap_model\.\w+: .* in the compiled kernels"):
        binding.bind(load_library())


def test_every_exported_prototype_has_the_bindings_signature():
    """csrc/ap_api.h's prototypes and binding.SIGNATURES name the same functions with the same types."""
    import ctypes
    import re
    from pathlib import Path

    from anypair.kernels.binding import SIGNATURES
    from anypair.kernels.build import SOURCE_DIR

    c_types = {"int": ctypes.c_int, "long": ctypes.c_long, "float": ctypes.c_float, "size_t": ctypes.c_size_t,
               "uint64_t": ctypes.c_uint64, "void": None}

    def ctype(declaration: str):
        declaration = re.sub(r"\b(const|restrict)\b", "", declaration).strip()
        if "*" in declaration:
            return ctypes.c_char_p if declaration.replace(" ", "").startswith("char*") else ctypes.c_void_p
        return c_types[declaration.split()[0]]

    header = (Path(SOURCE_DIR) / "ap_api.h").read_text()
    prototypes = re.findall(r"^([A-Za-z_][\w ]*?[\s*]+)(ap_\w+)\(([^)]*)\);", header, flags=re.M)
    assert len(prototypes) >= 15
    declared = {}
    for returns, name, parameters in prototypes:
        arguments = [] if parameters.strip() == "void" else [
            ctype(re.sub(r"\w+(\[\d*\])?$", "", p.strip()) or p) for p in parameters.split(",")]
        declared[name] = (ctype(returns), arguments)
    assert declared == SIGNATURES


def test_the_codes_of_kernels_ops_are_the_headers_enums():
    """Every code the Python side passes or reads (ggml types, interleaved layouts, kernel paths,
    activations, SIMD levels) is the one csrc declares: the enums of ap_common.h and ap_api.h, and
    the levels ap_simd_level() returns; a code renumbered on one side only fails here."""
    import re
    from pathlib import Path

    from anypair.kernels import ops
    from anypair.kernels.build import SOURCE_DIR

    source = Path(SOURCE_DIR)

    def enum(header: str, opening: str) -> dict[str, int]:
        """The AP_* = n entries of the enum `opening` (a regex) of `header`."""
        body = re.search(opening + r"\s*\{(.*?)\}", (source / header).read_text(), flags=re.S)
        assert body, f"{header}: no {opening}"
        without_comments = re.sub(r"//[^\n]*", "", body.group(1))
        return {name: int(value) for name, value in re.findall(r"\b(AP_\w+)\s*=\s*(\d+)", without_comments)}

    types = enum("ap_common.h", "enum ap_type")
    ggml_types = {code: name[len("AP_"):] for name, code in types.items() if not name.endswith(("_G16", "_I8"))}
    assert ggml_types == ops.NATIVE_TYPES
    # every interleaved layout (AP_<type>_G16, Q6_K's AP_Q6_K_I8) names the ggml type it is made from
    layouts = {name: code for name, code in types.items() if name.endswith(("_G16", "_I8"))}
    made_from = {types[name.rsplit("_", 1)[0]] for name in layouts}
    assert made_from == ops.INTERLEAVED_TYPES
    assert all(code == 100 + types[name[:-len("_G16")]] for name, code in layouts.items() if name.endswith("_G16"))
    assert types["AP_F32"] == ops._F32
    from anypair.kernels.build import Q6K_LAYOUTS  # Q6_K's two layouts, as kernels/build.py names them
    assert Q6K_LAYOUTS == {"bits": types["AP_Q6_K_G16"], "bytes": types["AP_Q6_K_I8"]}

    paths = enum("ap_common.h", "enum ap_path")
    assert paths == {f"AP_PATH_{name.upper()}": code for name, code in ops._PATH_CODES.items()}
    activations = enum("ap_api.h", r"enum(?=\s*\{\s*AP_ACT_)")
    assert activations == {f"AP_ACT_{name.upper()}": code for name, code in ops.ACTIVATIONS.items()}

    # ap_simd_level(): a return per compiled level (AP_AVX512, AP_AVX2, neither)
    body = re.search(r"int ap_simd_level\(void\)\s*\{(.*?)\n\}", (source / "matmul.c").read_text(), flags=re.S)
    assert body, "matmul.c: no ap_simd_level()"
    returned = re.findall(r"return (\d+);", body.group(1))
    assert [ops.SIMD_LEVELS[int(code)] for code in returned] == ["avx512-vnni", "avx2", "portable"]
    assert load_library().ap_simd_level() in ops.SIMD_LEVELS
