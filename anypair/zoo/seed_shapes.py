"""Seed-shaped GGUFs: files with the exact tensor shapes, types and metadata of the big targets the
project's seed pairs name (gemma-2-9b, CodeLlama-13B, Phi-3-medium-128k, Qwen2.5-7B, Llama-3.1-8B),
filled with random blocks, so that the engines can be measured at those sizes on a machine that has
no such weights (no model hub here).

What is real: every tensor's name, shape and ggml type (llama.cpp's Q4_K_M mix: Q4_K for most
matrices, Q6_K for the output head and, by llama.cpp's `use_more_bits` rule, for about half of the
attn_v and ffn_down matrices, Q5_K for phi3's fused attn_qkv; F32 norms and biases), the metadata
the engines read (layers, widths, heads, KV heads, head size, rope base and scaling, gemma2's
soft-caps and sliding window) taken from each model's config.json, and the family's real tokenizer
(`zoo.seed_vocab`). What is not: the values. The blocks are random (`zoo.seed_blocks`) with scales
that keep the activations finite, so the text such a file writes is meaningless; only costs (time,
memory, bytes read) measured on it mean anything, and every figure taken on one must say so.

Files are written block by block (no float copy of the model in memory) and cached under
$ANYPAIR_HOME/seeds by a key of everything that decides their bytes (the shape, the writer's
version): a second call with the same shape returns the same file (`zoo.seed_writer.seed_gguf`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from anypair.errors import InputError
from anypair.home import home
from anypair.zoo.seed_blocks import BLOCK_BYTES, QK_K

#: bump when the bytes written for a given shape change (it is part of the cache key)
WRITER_VERSION = 1
#: llama.cpp's file type of Q4_K_M (LLAMA_FTYPE_MOSTLY_Q4_K_M)
FTYPE_Q4_K_M = 15
#: rows of a matrix drawn and written at once (bounds the writer's memory to ~tens of MB)
ROWS_PER_CHUNK = 4096


@dataclass(frozen=True)
class SeedShape:
    """A model's shape as its config.json gives it, and what its GGUF carries beyond the common keys."""

    name: str
    hub_id: str
    arch: str  # general.architecture
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int  # rows of the embedding (and of the head)
    context: int  # trained context (max_position_embeddings)
    rope_base: float
    rms_eps: float
    tokenizer: str  # a key of seed_vocab.SOURCES
    tied: bool = False  # the head is the embedding (no output.weight)
    qkv_bias: bool = False  # qwen2
    extra: tuple[tuple[str, object], ...] = ()  # more `{arch}.` keys (soft-caps, window, rope scaling)
    rope_factors: str = ""  # "llama3" (rope_freqs) or "longrope" (phi3's long/short factors)
    notes: str = ""

    @property
    def key(self) -> str:
        """What decides the file's bytes: every field, the writer's version (12 hex digits)."""
        fields = dataclasses.asdict(self)
        fields.pop("notes")
        text = json.dumps([WRITER_VERSION, fields], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def scaled(self, *, name: str, layers: int, hidden: int, ffn: int, heads: int, kv_heads: int,
               head_dim: int, vocab: Optional[int] = None) -> "SeedShape":
        """The same family (architecture, tokenizer, metadata) at another size: the tests' small files."""
        return dataclasses.replace(self, name=name, layers=layers, hidden=hidden, ffn=ffn, heads=heads,
                                   kv_heads=kv_heads, head_dim=head_dim, vocab=vocab or self.vocab)


#: the seed pairs' targets, from each model's config.json
SHAPES: dict[str, SeedShape] = {s.name: s for s in (
    SeedShape("gemma-2-9b", "google/gemma-2-9b", "gemma2", layers=42, hidden=3584, ffn=14336, heads=16,
              kv_heads=8, head_dim=256, vocab=256000, context=8192, rope_base=10000.0, rms_eps=1e-6,
              tokenizer="gemma", tied=True,
              extra=(("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0),
                     ("attention.sliding_window", 4096)),
              notes="query_pre_attn_scalar 256 = head_dim (the engine's and llama.cpp's default for 9B)"),
    SeedShape("codellama-13b", "codellama/CodeLlama-13b-hf", "llama", layers=40, hidden=5120, ffn=13824, heads=40,
              kv_heads=40, head_dim=128, vocab=32016, context=16384, rope_base=1000000.0, rms_eps=1e-5,
              tokenizer="llama-spm",
              notes="Llama-2's 32,000 pieces + 16: the infill pieces 32007-32010 named, "
                    "12 [PAD] (not in any file here)"),
    SeedShape("phi-3-medium-128k", "microsoft/Phi-3-medium-128k-instruct", "phi3", layers=40, hidden=5120,
              ffn=17920, heads=40, kv_heads=10, head_dim=128, vocab=32064, context=131072, rope_base=10000.0,
              rms_eps=1e-5, tokenizer="phi-3",
              extra=(("rope.scaling.original_context_length", 4096), ("attention.sliding_window", 131072)),
              rope_factors="longrope",
              notes="the long/short rope factors are drawn in the real ones' ranges, not copied"),
    SeedShape("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", "qwen2", layers=28, hidden=3584, ffn=18944, heads=28,
              kv_heads=4, head_dim=128, vocab=152064, context=32768, rope_base=1000000.0, rms_eps=1e-6,
              tokenizer="qwen2", qkv_bias=True),
    SeedShape("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", "llama", layers=32, hidden=4096, ffn=14336,
              heads=32, kv_heads=8, head_dim=128, vocab=128256, context=131072, rope_base=500000.0, rms_eps=1e-5,
              tokenizer="llama-bpe", rope_factors="llama3",
              notes="Llama-3's 128k vocabulary file (3.1 renames a few reserved special tokens)"),
)}


@dataclass(frozen=True)
class TensorPlan:
    """One tensor of the file: its GGUF name, ggml type name and numpy shape (rows first)."""

    name: str
    type_name: str
    shape: tuple[int, ...]
    std: float = 0.0  # spread of the random values (matrices); vectors use `fill`
    fill: str = ""  # "norm" (1 + noise), "bias" (small noise), "rope-llama3", "rope-long", "rope-short"

    @property
    def nbytes(self) -> int:
        if self.type_name == "F32":
            return 4 * math.prod(self.shape)
        return math.prod(self.shape) // QK_K * BLOCK_BYTES[self.type_name]


def _use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's rule for the layers whose attn_v and ffn_down Q4_K_M keeps at Q6_K."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def tensor_plan(shape: SeedShape) -> list[TensorPlan]:
    """Every tensor of the shape's Q4_K_M file, in the order llama.cpp's converter writes them."""
    hidden, q_rows, kv_rows = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim

    def matrix(name: str, rows: int, cols: int, kind: str = "Q4_K") -> TensorPlan:
        if cols % QK_K:
            raise InputError(f"{shape.name}: {name} has {cols} columns, not a multiple of {QK_K} (K-quants)")
        return TensorPlan(name, kind, (rows, cols), std=1.0 / math.sqrt(cols))

    def vector(name: str, size: int, fill: str) -> TensorPlan:
        return TensorPlan(name, "F32", (size,), fill=fill)

    # the embedding is the head when tied: llama.cpp then gives it the head's type
    plan = [matrix("token_embd.weight", shape.vocab, hidden, "Q6_K" if shape.tied else "Q4_K")]
    if shape.rope_factors == "llama3":
        plan.append(vector("rope_freqs.weight", shape.head_dim // 2, "rope-llama3"))
    elif shape.rope_factors == "longrope":
        plan += [vector("rope_factors_long.weight", shape.head_dim // 2, "rope-long"),
                 vector("rope_factors_short.weight", shape.head_dim // 2, "rope-short")]
    for i in range(shape.layers):
        wide = "Q6_K" if _use_more_bits(i, shape.layers) else "Q4_K"
        block = f"blk.{i}."
        plan.append(vector(block + "attn_norm.weight", hidden, "norm"))
        if shape.arch == "phi3":  # fused q/k/v: llama.cpp's Q4_K_M writes it as Q5_K
            plan.append(matrix(block + "attn_qkv.weight", q_rows + 2 * kv_rows, hidden, "Q5_K"))
        else:
            plan += [matrix(block + "attn_q.weight", q_rows, hidden), matrix(block + "attn_k.weight", kv_rows, hidden),
                     matrix(block + "attn_v.weight", kv_rows, hidden, wide)]
            if shape.qkv_bias:
                plan += [vector(block + f"attn_{p}.bias", rows, "bias")
                         for p, rows in (("q", q_rows), ("k", kv_rows), ("v", kv_rows))]
        plan.append(matrix(block + "attn_output.weight", hidden, q_rows))
        if shape.arch == "gemma2":
            plan.append(vector(block + "post_attention_norm.weight", hidden, "norm"))
        plan.append(vector(block + "ffn_norm.weight", hidden, "norm"))
        if shape.arch == "phi3":  # gate and up stacked in one ffn_up
            plan.append(matrix(block + "ffn_up.weight", 2 * shape.ffn, hidden))
        else:
            plan += [matrix(block + "ffn_gate.weight", shape.ffn, hidden),
                     matrix(block + "ffn_up.weight", shape.ffn, hidden)]
        plan.append(matrix(block + "ffn_down.weight", hidden, shape.ffn, wide))
        if shape.arch == "gemma2":
            plan.append(vector(block + "post_ffw_norm.weight", hidden, "norm"))
    plan.append(vector("output_norm.weight", hidden, "norm"))
    if not shape.tied:
        plan.append(matrix("output.weight", shape.vocab, hidden, "Q6_K"))
    return plan


def file_size(shape: SeedShape) -> int:
    """Bytes of the tensors' data (the header adds a few MB: the tokenizer)."""
    return sum(t.nbytes for t in tensor_plan(shape))


def resolve_shape(name: str) -> SeedShape:
    shape = SHAPES.get(name) or SHAPES.get(name.lower())
    if shape is None:
        by_hub = {s.hub_id.lower(): s for s in SHAPES.values()}
        shape = by_hub.get(name.lower())
    if shape is None:
        raise InputError(f"unknown seed shape {name!r}: choose among {', '.join(SHAPES)} "
                         "(`anypair seed-gguf --list` shows each one's size)")
    return shape


def seed_dir() -> Path:
    return home() / "seeds"


def seed_path(shape: SeedShape) -> Path:
    return seed_dir() / f"{shape.name}-seed-{shape.key}.Q4_K_M.gguf"


def describe(shape: SeedShape) -> str:
    """One line: what the file will be."""
    kv = 2 * 2 * shape.layers * shape.kv_heads * shape.head_dim  # fp16 K and V bytes a position
    return (f"{shape.name} ({shape.hub_id}, {shape.arch}): {shape.layers} layers of {shape.hidden}, FFN {shape.ffn}, "
            f"{shape.heads} heads / {shape.kv_heads} KV of {shape.head_dim}, vocab {shape.vocab:,}, "
            f"{file_size(shape) / 1e9:.2f} GB Q4_K_M, KV {kv / 2**20:.2f} MiB a position")

