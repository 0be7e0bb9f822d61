"""Tiny random-weight models of every architecture the gguf engine runs, made into real GGUF files.

No such weights exist offline, but real tokenizers do: each model is built in transformers over a real
tokenizer's vocabulary (a vocabulary GGUF of llama.cpp's, or a zoo model's), written as an F32 GGUF the way llama.cpp's converter writes its architecture
(gguf's own tensor-name map; llama's q/k rows permuted for the adjacent-pairs rotary; gemma's norms
stored as 1 + w; phi3's fused q/k/v and gate/up kept fused), the tokenizer's metadata copied from the
GGUF that ships that tokenizer, then quantized by llama.cpp's own quantizer. transformers reads the
quantized file back (its own GGUF loader, dequantized to fp32) for the reference forward, and llama.cpp
runs the same file for the perplexity comparison: the engine is checked against two implementations it
shares no code with.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

#: llama.cpp's ftype ids of the quantizations the tests use
FTYPES = {"Q4_K_M": 15, "Q8_0": 7, "Q5_0": 8}


@dataclass(frozen=True)
class TinyArch:
    """One architecture's tiny model: its transformers config and its GGUF metadata."""

    arch: str  # the GGUF's general.architecture
    config: Callable[[int], object]  # vocab size -> transformers config
    gguf_metadata: Callable[[object], dict]  # config -> arch-specific GGUF keys beyond the common ones


def llama_cpp_vocab(name: str) -> Callable[[], Path]:
    def path() -> Path:
        from anypair.zoo.resolve import tokenizer_path

        return tokenizer_path("llama-cpp-vocab") / f"ggml-vocab-{name}.gguf"
    return path


_COMMON = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4,
               num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, rms_norm_eps=1e-6)


def _llama(vocab: int):
    from transformers import MistralConfig

    # a llama-architecture GGUF with Mistral's metadata: a declared sliding window on every layer
    # (llama.cpp's converter writes Mistral-7B as `llama`); transformers' Mistral forward is the reference
    return MistralConfig(vocab_size=vocab, tie_word_embeddings=False, rope_theta=10000.0, sliding_window=48,
                         **_COMMON)


def _qwen3(vocab: int):
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=vocab, tie_word_embeddings=True, rope_theta=1000000.0, **_COMMON)


def _phi3(vocab: int):
    from transformers import Phi3Config

    common = dict(_COMMON, head_dim=None)
    common.pop("head_dim")
    return Phi3Config(vocab_size=vocab, tie_word_embeddings=False, rope_theta=10000.0, sliding_window=None,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2, **common)


def _gemma2(vocab: int):
    from transformers import Gemma2Config

    return Gemma2Config(vocab_size=vocab, query_pre_attn_scalar=64, sliding_window=16, attn_logit_softcapping=50.0,
                        final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh", rope_theta=10000.0,
                        pad_token_id=0, bos_token_id=2, eos_token_id=1, **_COMMON)


def _gemma3(vocab: int):
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(vocab_size=vocab, query_pre_attn_scalar=64, sliding_window=16,
                            hidden_activation="gelu_pytorch_tanh", pad_token_id=0, bos_token_id=2, eos_token_id=1,
                            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                            **_COMMON)


def _window(config) -> dict:
    return {"attention.sliding_window": int(config.sliding_window)}


def _softcaps(config) -> dict:
    return {"attn_logit_softcapping": float(config.attn_logit_softcapping),
            "final_logit_softcapping": float(config.final_logit_softcapping), **_window(config)}


def _llama3(vocab: int):
    from transformers import LlamaConfig

    # Llama-3.1's rope scaling: per-frequency factors, with an original context of 64 positions
    return LlamaConfig(vocab_size=vocab, tie_word_embeddings=False, rope_theta=500000.0,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                       **_COMMON)


def _llama3_factors(config) -> dict:
    """llama.cpp's converter: `rope_freqs.weight`, one factor per frequency (LlamaModel.generate_extra_tensors)."""
    scaling = config.rope_scaling
    dim = config.hidden_size // config.num_attention_heads
    freqs = 1.0 / (_rope_theta(config) ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = original / low, original / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return {"rope_freqs.weight": np.array(factors)}


def _phi3_long(vocab: int):
    from transformers import Phi3Config

    common = dict(_COMMON)
    common.pop("head_dim")
    half = common["hidden_size"] // common["num_attention_heads"] // 2
    generator = np.random.default_rng(1)
    return Phi3Config(vocab_size=vocab, tie_word_embeddings=False, rope_theta=10000.0, sliding_window=None,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2, original_max_position_embeddings=64,
                      rope_scaling={"type": "longrope", "long_factor": list(1.0 + 4.0 * generator.random(half)),
                                    "short_factor": list(1.0 + 0.2 * generator.random(half))},
                      **common)


def _phi3_long_metadata(config) -> dict:
    """llama.cpp's converter (Phi3MiniModel): both factor tensors, the original context, the attention factor."""
    scaling = config.rope_scaling
    factor = config.max_position_embeddings / config.original_max_position_embeddings
    attn_factor = math.sqrt(1 + math.log(factor) / math.log(config.original_max_position_embeddings))
    return {"rope_factors_long.weight": np.array(scaling["long_factor"]),
            "rope_factors_short.weight": np.array(scaling["short_factor"]),
            "rope.scaling.original_context_length": config.original_max_position_embeddings,
            "rope.scaling.attn_factor": attn_factor}


TINY = {
    "llama": TinyArch("llama", _llama, _window),
    "qwen3": TinyArch("qwen3", _qwen3, lambda c: {}),
    "phi3": TinyArch("phi3", _phi3, lambda c: {}),
    "gemma2": TinyArch("gemma2", _gemma2, _softcaps),
    "gemma3": TinyArch("gemma3", _gemma3, _window),
    # variants: a llama file with Llama-3.1's rope factors, a phi3 file with long-context rope factors
    "llama3": TinyArch("llama", _llama3, _llama3_factors),
    "phi3-long": TinyArch("phi3", _phi3_long, _phi3_long_metadata),
}


def _rope_theta(config) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    if "full_attention" in params:
        params = params["full_attention"]
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


@functools.lru_cache(maxsize=4)
def tokenizer_fields(vocab_gguf: Path) -> tuple[tuple[str, object, object, object], ...]:
    """(key, value, type, array item type) of every tokenizer.* field of a GGUF (read once: gguf's
    reader is slow on a 262k-token vocabulary)."""
    import gguf

    reader = gguf.GGUFReader(vocab_gguf)
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            kind = field.types[0]
            fields.append((key, field.contents(), kind, field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None))
    return tuple(fields)


def vocab_size(vocab_gguf: Path) -> int:
    return next(len(value) for key, value, _, _ in tokenizer_fields(vocab_gguf) if key == "tokenizer.ggml.tokens")


def tiny_config(name: str, vocab_gguf: Path, init_std: float = 0.05):
    """The transformers config of `name`'s tiny model over `vocab_gguf`'s vocabulary (no weights)."""
    config = TINY[name].config(vocab_size(vocab_gguf))
    config.initializer_range = init_std
    return config


def build_model(name: str, vocab_gguf: Path, seed: int = 0, init_std: float = 0.05):
    """The tiny transformers model of `name` (fp32, eval mode) over `vocab_gguf`'s vocabulary.
    Weights are drawn wider than a trained init (std 0.05 against 0.02) so its predictions are far
    from uniform and a perplexity comparison means something."""
    from transformers import AutoModelForCausalLM

    spec = TINY[name]
    config = tiny_config(name, vocab_gguf, init_std)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # norms at 1 + noise so the post-norms and q/k norms do something
        for key, tensor in model.state_dict().items():
            if key.endswith("norm.weight"):
                ones = 0.0 if spec.arch.startswith("gemma") else 1.0  # gemma's norms multiply by 1 + w
                tensor.copy_(ones + 0.1 * torch.randn_like(tensor))
    return model, config


def write_gguf(name: str, model, config, path: Path, vocab_gguf: Path) -> Path:
    """`model` as an F32 GGUF of architecture `name`, with `vocab_gguf`'s tokenizer metadata."""
    import gguf

    spec = TINY[name]
    name = spec.arch  # the GGUF's architecture (a variant such as "llama3" writes a `llama` file)
    arch_enum = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen3": gguf.MODEL_ARCH.QWEN3, "phi3": gguf.MODEL_ARCH.PHI3,
                 "gemma2": gguf.MODEL_ARCH.GEMMA2, "gemma3": gguf.MODEL_ARCH.GEMMA3}[name]
    layers = config.num_hidden_layers
    names = gguf.get_tensor_name_map(arch_enum, layers)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    writer = gguf.GGUFWriter(str(path), name)
    writer.add_block_count(layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_file_type(0)
    for key, value in spec.gguf_metadata(config).items():
        if isinstance(value, np.ndarray):  # a tensor of the rope's factors, as the converter writes it
            writer.add_tensor(key, value.astype(np.float32))
            continue
        kind = gguf.GGUFValueType.FLOAT32 if isinstance(value, float) else (
            gguf.GGUFValueType.STRING if isinstance(value, str) else gguf.GGUFValueType.UINT32)
        writer.add_key_value(f"{name}.{key}", value, kind)
    for key, value, kind, sub_type in tokenizer_fields(vocab_gguf):
        writer.add_key_value(key, value, kind, sub_type=sub_type)
    tied = getattr(config, "tie_word_embeddings", False)
    for key, tensor in model.state_dict().items():
        if key == "lm_head.weight" and tied:
            continue
        data = tensor.detach().float().numpy().copy()
        if name == "llama" and key.endswith(("q_proj.weight", "k_proj.weight")):
            n = heads if key.endswith("q_proj.weight") else kv_heads  # llama.cpp's converter: adjacent-pairs rotary
            data = data.reshape(n, 2, data.shape[0] // n // 2, *data.shape[1:]).swapaxes(1, 2).reshape(data.shape)
        if name.startswith("gemma") and key.endswith("norm.weight"):
            data = data + 1.0  # gemma's converter stores 1 + w
        gguf_name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise KeyError(f"no GGUF name for {key}")
        writer.add_tensor(gguf_name, np.ascontiguousarray(data, dtype=np.float32))
    finish(writer)
    return path


def finish(writer) -> None:
    """Write a gguf.GGUFWriter's header, metadata and tensors, and close the file."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def quantize(source: Path, target: Path, ftype: str) -> Path:
    """llama.cpp's own quantizer (llama-cpp-python's binding), as `llama-quantize` would."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.nthread = 2
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params)
    if status != 0:
        raise RuntimeError(f"llama_model_quantize({ftype}) failed: {status}")
    return target


def reference_model(name: str, config, quantized: Path):
    """transformers' fp32 model on the quantized file's weights, dequantized by transformers' own GGUF
    loader (its reverse of the converter's permutation and norm offset), with the tiny config's options
    (window pattern, soft-caps, query scale) that a GGUF does not carry."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    load_config = config
    if config.model_type == "mistral":  # transformers reads a `llama` GGUF as llama: load, then move the weights
        load_config = LlamaConfig(**{k: v for k, v in config.to_dict().items() if k not in ("sliding_window", "model_type", "architectures")})
    model = AutoModelForCausalLM.from_pretrained(str(quantized.parent), gguf_file=quantized.name, config=load_config,
                                                 dtype=torch.float32)
    if load_config is not config:
        mistral = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        mistral.load_state_dict(model.state_dict(), strict=True)
        model = mistral
    return model.eval()


def perplexity(logits: torch.Tensor, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of ids[1:] under logits[:-1]."""
    logprobs = torch.log_softmax(logits[:-1].double(), dim=-1)
    nll = -logprobs[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    return math.exp(float(nll.mean()))


def write_other_architecture(path: Path, arch: str = "gpt2") -> Path:
    """A small, complete GGUF of an architecture the gguf engine does not run."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_embedding_length(32)
    writer.add_tensor("token_embd.weight", np.zeros((16, 32), dtype=np.float32))
    finish(writer)
    return path
