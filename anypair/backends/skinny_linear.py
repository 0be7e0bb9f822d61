"""A faster CPU kernel for the linear layers of a decode step: few tokens times a big weight.

Decoding multiplies a handful of token vectors (1 to ~16 rows) by every weight matrix of the model.
torch's CPU `linear` sends that to a general GEMM that is built for many rows; measured on a 2-core
AVX2 EPYC in fp32, Qwen2.5-1.5B took 430 ms to score 1 new token and 1,570 ms to score 4 — a
4-token verification cost as much as 4 plain steps, which leaves speculative decoding nothing to win.

Cutting the weight into blocks of `block_rows` output rows and running one batched matmul over the
blocks keeps each block in cache while all tokens use it. Same model, same run: 264 ms for 1 token,
339 ms for 2, 508 ms for 4 (logits within 2e-5 of torch's). So the target alone gets faster *and* a
k-token verification gets cheap relative to a step.

Whether that holds depends on the CPU and dtype (bf16 on a CPU without bf16 instructions is much
slower this way), so `install_skinny_linear(model, "auto")` times both kernels on the model's own
largest layer and switches only when the skinny one wins. The switch changes each `nn.Linear`'s
class in place (weights, state dict and tied embeddings untouched); `uninstall_skinny_linear` undoes it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

KERNELS = ("auto", "skinny", "torch")


class SkinnyLinear(torch.nn.Linear):
    """nn.Linear whose forward uses a blocked batched matmul when few rows come in."""

    block_rows = 32
    max_tokens = 16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dim() == 0:
            return F.linear(x, self.weight, self.bias)
        return skinny_matmul(x, self.weight, self.bias, self.block_rows, self.max_tokens)


def skinny_matmul(x: torch.Tensor, weight: torch.Tensor, bias, block_rows: int, max_tokens: int) -> torch.Tensor:
    out_features, in_features = weight.shape
    rows = x.numel() // in_features if in_features else 0
    blocks = out_features // block_rows
    if rows == 0 or rows > max_tokens or blocks < 2:
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, in_features)
    main = blocks * block_rows
    blocked = weight[:main].view(blocks, block_rows, in_features).transpose(1, 2)
    out = torch.bmm(flat.expand(blocks, rows, in_features), blocked).transpose(0, 1).reshape(rows, main)
    if main < out_features:
        out = torch.cat([out, F.linear(flat, weight[main:])], dim=1)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], out_features)


@dataclass(frozen=True)
class KernelChoice:
    kernel: str  # "skinny" or "torch"
    reason: str
    torch_ms: float | None = None  # timed cost of the probe layer, 1 + 4 rows, per kernel
    skinny_ms: float | None = None


def _linear_layers(model) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _time_ms(fn, repeats: int = 5) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return sorted(samples)[len(samples) // 2] * 1e3


def choose_kernel(model, kernel: str = "auto") -> KernelChoice:
    """Decide which kernel the model's linear layers should use; "auto" measures both."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown linear kernel {kernel!r}: use one of {KERNELS}")
    if kernel == "torch":
        return KernelChoice("torch", "requested")
    layers = _linear_layers(model)
    if not layers:
        return KernelChoice("torch", "the model has no nn.Linear layers")
    weight = layers[0].weight
    if weight.device.type != "cpu":
        return KernelChoice("torch", f"the model is on {weight.device.type}, the skinny kernel is for CPUs")
    if kernel == "skinny":
        return KernelChoice("skinny", "requested")
    # the biggest non-head layer stands for the rest (the LM head is one layer of dozens)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = [layer for layer in layers if layer is not head] or layers
    probe = max(body, key=lambda layer: layer.weight.numel())
    w, b = probe.weight.detach(), None if probe.bias is None else probe.bias.detach()
    with torch.inference_mode():
        inputs = [torch.randn(rows, w.shape[1], dtype=w.dtype) for rows in (1, 4)]
        torch_ms = sum(_time_ms(lambda x=x: F.linear(x, w, b)) for x in inputs)
        skinny_ms = sum(_time_ms(lambda x=x: skinny_matmul(x, w, b, SkinnyLinear.block_rows,
                                                           SkinnyLinear.max_tokens)) for x in inputs)
    if skinny_ms < 0.9 * torch_ms:
        return KernelChoice("skinny", "measured faster", torch_ms, skinny_ms)
    return KernelChoice("torch", "torch's own kernel measured as fast", torch_ms, skinny_ms)


def install_skinny_linear(model, kernel: str = "auto") -> KernelChoice:
    """Switch the model's nn.Linear layers to SkinnyLinear when `kernel` (or the measurement) says so."""
    choice = choose_kernel(model, kernel)
    if choice.kernel == "skinny":
        for layer in _linear_layers(model):
            if type(layer) is torch.nn.Linear:
                layer.__class__ = SkinnyLinear
    else:
        uninstall_skinny_linear(model)
    return choice


def uninstall_skinny_linear(model) -> None:
    for layer in _linear_layers(model):
        if type(layer) is SkinnyLinear:
            layer.__class__ = torch.nn.Linear
