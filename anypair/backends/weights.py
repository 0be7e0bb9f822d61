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
import os
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from anypair.errors import BackendError, InputError
from anypair.machine import cpu_flags

logger = logging.getLogger("anypair")

WEIGHTS = ("auto", "fp32", "fp16", "bf16", "int8")
#: the weight formats whose kernels may serve a target (int8 dynamic is not batch-invariant)
TARGET_WEIGHTS = ("fp32", "fp16", "bf16")


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
        # a GPU's bf16 and fp16 GEMMs are picked per number of rows: on an H100 a bf16 target's
        # verification wrote another greedy text than the target alone, and fp16 failed the contract
        # outright (4-row logits off by 0.13: a probe on an H100 with random-weight Qwen2.5 models); fp32 is the
        # format that can hold, and the contract still checks it
        return ["fp32"]
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
    """A linear layer whose weight is held packed in fp16 by fbgemm; the math is fp32.

    A big layer (an LM head of 150k rows) is packed in blocks of output rows: packing needs an fp32
    copy of what it packs, and a whole head's would briefly add a GB. Each output is the same dot
    product either way (checked bitwise), so the blocks only bound that temporary."""

    #: weights per packed block
    BLOCK_ELEMENTS = 1 << 24

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        rows = max(1, self.BLOCK_ELEMENTS // max(self.in_features, 1))
        self._packed = []
        for start in range(0, self.out_features, rows):
            block = weight[start:start + rows].detach().float()
            block_bias = None if bias is None else bias[start:start + rows].detach().float()
            self._packed.append(torch.ops.quantized.linear_prepack_fp16(block, block_bias))
            del block

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "Fp16Linear":
        weight = linear.weight.detach()
        low, high = torch.aminmax(weight)  # (no temporary the size of the weight)
        if max(-float(low), float(high)) > torch.finfo(torch.float16).max:
            raise BackendError(f"a weight of {linear} exceeds fp16's range: use weights='fp32' or 'bf16'")
        return cls(weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if len(self._packed) == 1:
            return torch.ops.quantized.linear_dynamic_fp16(x, self._packed[0])
        return torch.cat([torch.ops.quantized.linear_dynamic_fp16(x, block) for block in self._packed], dim=-1)

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


class _MappedFiles:
    """Drops the pages of a memory-mapped checkpoint that a conversion has consumed.

    transformers maps the safetensors file and hands out tensors that are views into it; every page
    read while converting stays resident (and counts in the process's memory) until the whole file
    is unmapped at the end, so converting to fp16 would briefly hold the bf16 checkpoint AND the
    fp16 copy. `madvise(MADV_DONTNEED)` on a consumed, file-backed range drops those pages at once;
    a later read would fault them back in from the file unchanged, so this is safe even for bytes
    another tensor still views. Anonymous memory is never touched (DONTNEED would zero it)."""

    MADV_DONTNEED = 4

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []
        self.libc = None
        try:
            import ctypes

            self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
            self.page = os.sysconf("SC_PAGE_SIZE")
            with open("/proc/self/maps") as maps:
                for line in maps:
                    fields = line.split()
                    if len(fields) >= 6 and fields[5].endswith(".safetensors"):
                        start, end = (int(x, 16) for x in fields[0].split("-"))
                        self.ranges.append((start, end))
        except (OSError, AttributeError, ValueError):
            self.ranges = []

    def release(self, tensor: torch.Tensor) -> None:
        if not self.ranges or self.libc is None:
            return
        begin = tensor.data_ptr()
        end = begin + tensor.numel() * tensor.element_size()
        if not any(start <= begin and end <= stop for start, stop in self.ranges):
            return
        first = -(-begin // self.page) * self.page  # whole pages inside the tensor only
        last = end // self.page * self.page
        if last > first:
            import ctypes

            self.libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), self.MADV_DONTNEED)


def _return_freed_memory() -> None:
    """Give the conversion's freed temporaries back to the OS (glibc keeps freed heap otherwise)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


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
    mapped = _MappedFiles()

    def convert(linear: torch.nn.Linear) -> torch.nn.Module:
        converted = make_linear(linear)
        mapped.release(linear.weight)  # its bytes are in the packed copy now
        return converted

    with torch.inference_mode(False), torch.no_grad():
        if isinstance(embeddings, torch.nn.Embedding):
            model.set_input_embeddings(WideningEmbedding(embeddings))  # copied before any page is released
            mapped.release(embeddings.weight)
        _replace_linears(model, convert)
        _widen_other_parameters(model)
    _return_freed_memory()
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
