"""Which numbers a torch model's weights are stored and multiplied in: fp32, fp16 weights with fp32
math (fbgemm), or bf16; chosen per machine, applied in place, and never at the cost of exactness.

A decode step reads every weight once, so on a CPU its time is the weights' bytes over the memory
bandwidth: fp32 Qwen2.5-1.5B reads 6 GB a step. Storing the linear layers' weights in fp16 halves
that, and fbgemm's fp16 GEMM (`quantized::linear_dynamic_fp16`) converts them to fp32 in registers,
so the arithmetic is still fp32. Measured on a 2-core AVX2 EPYC, whole model, context 300: 148 /
157 / 169 ms to score 1 / 2 / 4 tokens in one pass, against 429 / 840 / 1524 ms in fp32.

What the TARGET needs from a kernel beyond speed is batch invariance: a token scored together with
others must get the logits it gets alone, or the verdict on a draft token would depend on the
tokens beside it. fbgemm's fp16 kernel computes each row on its own: rows of a 3..16-row call are
bitwise equal whatever the other rows hold; a 1- or 2-row call takes another code path that differs
by fp32 rounding (~5e-6 per layer). `contract.check_batch_invariance` tests a whole model against
that contract before "auto" keeps a choice. int8 dynamic quantization is faster still but shares
one activation scale across the rows of a call (not batch-invariant): it is offered for drafts only.

Weights are converted layer by layer from the checkpoint's dtype (bf16 in the zoo), so no fp32 copy
of the whole model ever exists; the embedding table stays in the checkpoint's dtype and is widened
per looked-up row (a gather: the values are the same as a widened table's).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from anypair.errors import BackendError, InputError

logger = logging.getLogger("anypair")

WEIGHTS = ("auto", "fp32", "fp16", "bf16", "int8")
#: the weight formats whose kernels may serve a target (int8 dynamic is not batch-invariant)
TARGET_WEIGHTS = ("fp32", "fp16", "bf16")


def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_bf16() -> bool:
    """Native bf16 dot products (AVX-512-BF16 or AMX): bf16 GEMMs run at full speed."""
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def fbgemm_fp16_available() -> bool:
    """fbgemm's fp16-weight GEMM needs an x86 CPU with AVX2, FMA and F16C."""
    flags = cpu_flags()
    if not {"avx2", "fma", "f16c"} <= flags or "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    try:
        packed = torch.ops.quantized.linear_prepack_fp16(torch.ones(8, 8), None)
        torch.ops.quantized.linear_dynamic_fp16(torch.ones(1, 8), packed)
    except (RuntimeError, AttributeError):
        return False
    return True


def candidate_weights(device: str) -> list[str]:
    """What "auto" tries for a target on this machine, fastest first (fp32 always works)."""
    if device.startswith("cuda"):
        return ["bf16"] if torch.cuda.is_bf16_supported() else ["fp32"]
    candidates = []
    if cpu_has_bf16():
        candidates.append("bf16")
    if fbgemm_fp16_available():
        candidates.append("fp16")
    return candidates + ["fp32"]


def parse_weights(weights: Optional[str]) -> str:
    name = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", None: "auto"}.get(weights, weights)
    if name not in WEIGHTS:
        raise InputError(f"unknown weights {weights!r}: use one of {', '.join(WEIGHTS)}")
    return name


class Fp16Linear(torch.nn.Module):
    """A linear layer whose weight is held packed in fp16 by fbgemm; the math is fp32."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self._packed = torch.ops.quantized.linear_prepack_fp16(
            weight.detach().float(), None if bias is None else bias.detach().float())

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "Fp16Linear":
        weight = linear.weight.detach()
        if weight.abs().max() > torch.finfo(torch.float16).max:
            raise BackendError(f"a weight of {linear} exceeds fp16's range: use weights='fp32' or 'bf16'")
        return cls(weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x.float(), self._packed)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weights=fp16 (fbgemm)"


class Int8DynamicLinear(torch.nn.Module):
    """int8 weights, activations quantized per call (one scale per call): fast, NOT batch-invariant.
    For drafts only, whose numerics never reach the output."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.out_features, self.in_features = linear.weight.shape
        quantized = torch.ao.nn.quantized.dynamic.Linear.from_float(
            _with_qconfig(torch.nn.Linear(self.in_features, self.out_features, bias=linear.bias is not None), linear))
        self.inner = quantized

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.float())


def _with_qconfig(fresh: torch.nn.Linear, linear: torch.nn.Linear) -> torch.nn.Linear:
    fresh.weight = torch.nn.Parameter(linear.weight.detach().float(), requires_grad=False)
    if linear.bias is not None:
        fresh.bias = torch.nn.Parameter(linear.bias.detach().float(), requires_grad=False)
    fresh.qconfig = torch.ao.quantization.default_dynamic_qconfig
    return fresh


class WideningEmbedding(torch.nn.Module):
    """An embedding table kept in its checkpoint dtype; looked-up rows come out in fp32."""

    def __init__(self, embedding: torch.nn.Embedding) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = embedding.weight.shape
        self.padding_idx = embedding.padding_idx
        # a copy: the loaded table may be a view into the memory-mapped checkpoint, which would
        # otherwise stay mapped (and count in the process's memory) for this one tensor
        self.weight = torch.nn.Parameter(embedding.weight.detach().clone(), requires_grad=False)
        # some architectures scale the embedding (Gemma-3's ScaledWordEmbedding): keep that behaviour
        self._scale = getattr(embedding, "embed_scale", None)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = F.embedding(ids, self.weight).float()
        return rows if self._scale is None else rows * self._scale.to(torch.float32)


@dataclass(frozen=True)
class WeightsChoice:
    weights: str  # "fp32", "fp16", "bf16" or "int8"
    reason: str
    linear_kernel: str = ""  # for fp32 on CPU: which GEMM (see skinny_linear)


def _replace_linears(model, make) -> int:
    count = 0
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, make(child))
                count += 1
    return count


def _widen_other_parameters(model) -> None:
    """Everything that is not a converted linear or the embedding table computes in fp32."""
    for module in model.modules():
        if isinstance(module, (Fp16Linear, Int8DynamicLinear, WideningEmbedding)):
            continue
        for name, param in list(module.named_parameters(recurse=False)):
            if param.is_floating_point() and param.dtype != torch.float32:
                setattr(module, name, torch.nn.Parameter(param.detach().float(), requires_grad=False))
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer is not None and buffer.is_floating_point() and buffer.dtype != torch.float32:
                module._buffers[name] = buffer.float()


def _convert_quantized(model, make_linear) -> None:
    embeddings = model.get_input_embeddings()
    with torch.inference_mode(False), torch.no_grad():
        _replace_linears(model, make_linear)
        if isinstance(embeddings, torch.nn.Embedding):
            wide = WideningEmbedding(embeddings)
            model.set_input_embeddings(wide)
        _widen_other_parameters(model)
    model.config.tie_word_embeddings = False  # the head is its own packed copy now
    # keeps transformers from re-tying or re-initialising the converted head later
    if hasattr(model, "_tied_weights_keys"):
        model._tied_weights_keys = None


def apply_weights(model, weights: str, linear_kernel: str = "auto") -> WeightsChoice:
    """Convert `model` in place to `weights` ("fp32", "fp16", "bf16" or "int8"; not "auto")."""
    device = next(model.parameters()).device.type
    if weights == "fp16" and device == "cpu":
        if not fbgemm_fp16_available():
            raise InputError("weights='fp16' on a CPU needs fbgemm with AVX2+FMA+F16C, which this machine lacks: "
                             "use weights='fp32' (or 'auto')")
        _convert_quantized(model, Fp16Linear.from_linear)
        return WeightsChoice("fp16", "fp16 weights, fp32 math (fbgemm)")
    if weights == "int8":
        if device != "cpu":
            raise InputError("weights='int8' (dynamic int8) is a CPU draft format: use 'bf16' on a GPU")
        _convert_quantized(model, Int8DynamicLinear)
        return WeightsChoice("int8", "int8 dynamic (fbgemm), draft only")
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[weights]
    model.to(dtype)
    if device == "cpu" and weights == "fp32":
        from anypair.backends.skinny_linear import install_skinny_linear

        kernel = install_skinny_linear(model, linear_kernel)
        return WeightsChoice("fp32", f"fp32 ({kernel.kernel} linear: {kernel.reason})", kernel.kernel)
    return WeightsChoice(weights, f"{weights} {'native' if device == 'cpu' else device}")


def weights_bytes(model) -> int:
    """Bytes the model's weights occupy as held (packed fp16/int8 layers included)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    total += sum(b.numel() * b.element_size() for b in model.buffers())
    for module in model.modules():
        if isinstance(module, Fp16Linear):
            total += module.out_features * module.in_features * 2 + module.out_features * 4
        elif isinstance(module, Int8DynamicLinear):
            total += module.out_features * module.in_features + module.out_features * 4
    return total
