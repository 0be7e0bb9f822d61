"""Write a seed-shaped GGUF (`zoo.seed_shapes`) to disk, tensor by tensor and block by block.

gguf's GGUFWriter writes the header, the metadata (the architecture's keys and the family's real
tokenizer, `zoo.seed_vocab`) and the tensor table from `tensor_plan`; the tensors' bytes are then
streamed into the same file a few thousand rows at a time (`ROWS_PER_CHUNK`), with the padding the
writer's own `write_tensor_data` puts between tensors, so that a 9 GB file needs tens of MB of
memory. Each tensor draws from its own seeded generator: the same shape and seed give the same
bytes. `seed_gguf` keeps the files under $ANYPAIR_HOME/seeds by their shape's key.
"""
from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from anypair.errors import InputError
from anypair.zoo.seed_blocks import BLOCK_BYTES, QK_K, random_blocks
from anypair.zoo.seed_shapes import (FTYPE_Q4_K_M, ROWS_PER_CHUNK, SeedShape, TensorPlan, file_size, resolve_shape,
                                      seed_path, tensor_plan)

#: Llama-3.1's rope scaling (its config.json's rope_scaling): per-frequency factors in rope_freqs
LLAMA3_SCALING = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original=8192)


def llama3_rope_factors(head_dim: int, base: float) -> np.ndarray:
    """The rope_freqs tensor llama.cpp's converter computes from Llama-3.1's rope_scaling (real values)."""
    s = LLAMA3_SCALING
    low_wavelen, high_wavelen = s["original"] / s["low_freq_factor"], s["original"] / s["high_freq_factor"]
    factors = []
    for freq in 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)):
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(s["factor"])
        else:
            smooth = (s["original"] / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            factors.append(1.0 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def _vector(plan: TensorPlan, shape: SeedShape, rng: np.random.Generator) -> np.ndarray:
    size = plan.shape[0]
    if plan.fill == "norm":  # gemma's converter stores 1 + w: 1 + noise is a plain norm in both layouts
        return (1.0 + 0.1 * rng.standard_normal(size)).astype(np.float32)
    if plan.fill == "bias":
        return (0.1 * rng.standard_normal(size)).astype(np.float32)
    if plan.fill == "rope-llama3":
        return llama3_rope_factors(shape.head_dim, shape.rope_base)
    if plan.fill == "rope-short":  # Phi-3-128k's short factors sit near 1, its long ones rise to tens
        return np.sort(1.0 + 0.1 * rng.random(size)).astype(np.float32)
    if plan.fill == "rope-long":
        return np.sort(1.0 + 30.0 * rng.random(size) ** 2).astype(np.float32)
    raise ValueError(f"no fill {plan.fill!r}")


def _add_metadata(writer, shape: SeedShape) -> None:
    import gguf

    from anypair.zoo.seed_vocab import tokenizer_fields

    writer.add_name(f"{shape.hub_id} seed-shaped (random weights: its text is meaningless)")
    writer.add_description("anypair seed-gguf: the tensor shapes, types and tokenizer of "
                           f"{shape.hub_id} Q4_K_M with random blocks, for measuring costs only")
    writer.add_block_count(shape.layers)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(FTYPE_Q4_K_M)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    extra = dict(shape.extra)
    if shape.rope_factors == "longrope":  # phi3's magnitude correction, as llama.cpp's converter computes it
        original = int(extra["rope.scaling.original_context_length"])
        extra["rope.scaling.attn_factor"] = math.sqrt(1 + math.log(shape.context / original) / math.log(original))
    for key, value in extra.items():
        kind = gguf.GGUFValueType.FLOAT32 if isinstance(value, float) else gguf.GGUFValueType.UINT32
        writer.add_key_value(f"{shape.arch}.{key}", value, kind)
    for field in tokenizer_fields(shape.tokenizer, shape.vocab):
        writer.add_key_value(field.key, field.value, field.kind, sub_type=field.item_kind)


def _write_matrix(fout, plan: TensorPlan, rng: np.random.Generator, show, done: int) -> int:
    rows, cols = plan.shape
    blocks_per_row = cols // QK_K
    for start in range(0, rows, ROWS_PER_CHUNK):
        count = min(ROWS_PER_CHUNK, rows - start)
        chunk = random_blocks(plan.type_name, count * blocks_per_row, plan.std, rng)
        fout.write(chunk.tobytes())
        done += chunk.nbytes
        show(done)
    return done


def write_seed_gguf(shape: SeedShape, path: Path, *, progress: bool = True, seed: int = 0) -> Path:
    """Write `shape`'s Q4_K_M file of random blocks to `path` (overwritten)."""
    import gguf

    from anypair.zoo.progress import download_bar

    plan = tensor_plan(shape)
    writer = gguf.GGUFWriter(str(path), shape.arch)
    _add_metadata(writer, shape)
    for tensor in plan:
        if tensor.type_name == "F32":
            writer.add_tensor_info(tensor.name, tensor.shape, np.dtype(np.float32), tensor.nbytes)
        else:
            rows, cols = tensor.shape
            byte_shape = (rows, cols // QK_K * BLOCK_BYTES[tensor.type_name])
            writer.add_tensor_info(tensor.name, byte_shape, np.dtype(np.uint8), tensor.nbytes,
                                   raw_dtype=gguf.GGMLQuantizationType[tensor.type_name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    fout = writer.fout[0]
    streams = np.random.SeedSequence([seed, len(plan)]).spawn(len(plan))
    done = 0
    try:
        with download_bar(f"writing {shape.name} (random weights)", file_size(shape), progress) as show:
            for tensor, stream in zip(plan, streams):
                rng = np.random.default_rng(stream)
                writer.write_padding(fout, fout.tell())  # the data section and each tensor start aligned
                if tensor.type_name == "F32":
                    data = _vector(tensor, shape, rng)
                    fout.write(data.tobytes())
                    done += data.nbytes
                else:
                    done = _write_matrix(fout, tensor, rng, show, done)
                writer.write_padding(fout, tensor.nbytes)
    finally:
        writer.close()
    return path


def seed_gguf(shape: SeedShape | str, *, progress: bool = True) -> Path:
    """The cached seed-shaped file of `shape`, written first if it is not there (atomically: an
    interrupted write leaves only a .partial, deleted by the next call)."""
    from anypair.zoo.paths import asset_lock

    shape = resolve_shape(shape) if isinstance(shape, str) else shape
    target = seed_path(shape)
    with asset_lock("seed-" + target.name):
        if target.is_file():
            if progress:
                print(f"{shape.name}: cached {target}", file=sys.stderr, flush=True)
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        needed = file_size(shape) + (64 << 20)
        free = shutil.disk_usage(target.parent).free
        if free < needed:
            raise InputError(f"writing {shape.name}'s seed-shaped GGUF needs {needed / 1e9:.1f} GB, "
                             f"{target.parent} has {free / 1e9:.1f} GB free: free some space or point "
                             "$ANYPAIR_HOME at a larger disk")
        partial = target.with_name(target.name + ".partial")
        try:
            write_seed_gguf(shape, partial, progress=progress)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target
