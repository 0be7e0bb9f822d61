"""The batch-invariance contract checks the shapes verification uses (row counts after cached contexts of
several lengths), so an engine whose kernels change with either is caught; a torch target on a GPU that
fails it is refused in one line rather than served inexactly. Fake backends stand for the kernels; the
GPU's own checks are in test_cuda.py."""
from __future__ import annotations

from typing import Callable, Sequence

import pytest
import torch

from anypair.backends import contract
from anypair.backends.base import ModelBackend
from anypair.backends.contract import (BITWISE_ENGINE_SHAPES, VERIFICATION_SHAPES, ContractReport, ContractShapes,
                                       InvarianceReport, check_batch_invariance, check_contract, contract_shapes)

VOCAB = 64
PROBE = list(range(1, 400))


class ShapedKernelBackend(ModelBackend):
    """Logits that depend only on (position, token), as a batch-invariant engine's do, except in the passes
    `other_rounding(rows, cached)` names: those come out shifted by `shift` of the largest logit, as a kernel
    picked for that shape with its own rounding would give (the argmax stays the same)."""

    max_context = 4096
    vocab_size = VOCAB

    def __init__(self, other_rounding: Callable[[int, int], bool], bitwise: bool = False, shift: float = 1e-3) -> None:
        self.other_rounding = other_rounding
        self.shift = shift
        self.bitwise_batch_invariant = bitwise
        self._length = 0

    @property
    def cached_length(self) -> int:
        return self._length

    def extend(self, ids: Sequence[int], all_logits: bool = False) -> torch.Tensor:
        rows = []
        for offset, token in enumerate(ids):
            generator = torch.Generator().manual_seed((self._length + offset) * 100_003 + int(token))
            rows.append(torch.randn(VOCAB, generator=generator) * 4.0)
        logits = torch.stack(rows)
        if self.other_rounding(len(ids), self._length):
            logits = logits + self.shift * logits.abs().max()
        self._length += len(ids)
        return logits if all_logits else logits[-1]

    def crop(self, length: int) -> None:
        assert 0 <= length <= self._length
        self._length = length

    def reset(self) -> None:
        self._length = 0


def test_an_invariant_engine_holds_in_every_shape_verification_uses():
    report = check_contract(ShapedKernelBackend(lambda rows, cached: False), PROBE)
    assert report.holds, report.describe()
    shapes = {(check.context, check.k) for check in report.checks}
    assert shapes == {(c, k) for c in VERIFICATION_SHAPES.contexts for k in VERIFICATION_SHAPES.rows}
    # the rows of the adaptive policy's longest proposal (12 tokens and the last one) are among them
    assert max(VERIFICATION_SHAPES.rows) == 13
    assert "holds for 2, 3, 4, 5, 8, 9, 13 rows after 16, 100, 300 cached tokens" in report.describe()


def test_a_kernel_that_differs_only_after_a_long_cached_context_is_caught():
    """An attention kernel picked by the cached length: the 4 rows after ~60 tokens that the check
    used to score alone cannot see it."""
    backend = ShapedKernelBackend(lambda rows, cached: rows > 1 and cached >= 256)
    assert check_batch_invariance(backend, PROBE[:60], PROBE[60:64]).holds  # the old single shape
    report = check_contract(backend, PROBE)
    assert not report.holds
    assert report.worst.context == 300 and report.worst.argmax_agrees
    assert "FAILS at k=2 after 300 cached tokens" in report.describe()
    assert "7 of 21 shapes fail" in report.describe()


def test_a_kernel_that_differs_only_from_five_rows_is_caught():
    """The H100's bf16 GEMMs: 4 rows matched single-token passes bit for bit, 5 and 9 did not."""
    backend = ShapedKernelBackend(lambda rows, cached: rows >= 5)
    assert check_batch_invariance(backend, PROBE[:60], PROBE[60:64]).holds
    report = check_contract(backend, PROBE)
    assert not report.holds and report.worst.k == 5
    assert {check.k for check in report.checks if not check.holds} == {5, 8, 9, 13}


def test_a_bitwise_engine_is_held_to_zero_difference_in_its_own_shapes():
    """A difference of 1e-6 of the largest logit passes as fp32 rounding, except where bits are promised."""
    def near_rounding(rows: int, cached: int) -> bool:
        return rows == 5 and cached == 60

    assert check_contract(ShapedKernelBackend(near_rounding, shift=1e-6), PROBE, BITWISE_ENGINE_SHAPES).holds
    promised = ShapedKernelBackend(near_rounding, bitwise=True, shift=1e-6)
    assert contract_shapes(promised) == BITWISE_ENGINE_SHAPES
    report = check_contract(promised, PROBE, contract_shapes(promised))
    assert not report.holds and (report.worst.k, report.worst.context) == (5, 60)
    assert check_contract(ShapedKernelBackend(lambda rows, cached: False, bitwise=True), PROBE, BITWISE_ENGINE_SHAPES).holds
    assert contract_shapes(ShapedKernelBackend(near_rounding)) == VERIFICATION_SHAPES


def test_a_short_model_is_checked_at_the_longest_context_it_allows():
    backend = ShapedKernelBackend(lambda rows, cached: False)
    backend.max_context = 40
    report = check_contract(backend, PROBE, ContractShapes(contexts=(100, 300), rows=(2, 13)))
    assert {check.context for check in report.checks} == {27}
    backend.max_context = 10
    with pytest.raises(ValueError, match="too few"):
        check_contract(backend, PROBE, ContractShapes(contexts=(16,), rows=(2, 13)))


def _tiny_qwen_on(device: str, tokenizer):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
    with torch.device(device):
        return Qwen2ForCausalLM(config).eval()


@pytest.mark.parametrize("holds", [False, True])
def test_a_torch_target_off_the_cpu_that_fails_the_contract_is_refused(zoo_fetch, monkeypatch, holds):
    """Off the CPU (here the 'meta' device stands for a GPU: the decision reads the model's device) a
    target that fails is refused in one line that says what to do; one that holds is served."""
    from transformers import AutoTokenizer

    from anypair.backends import torch_engine
    from anypair.backends.member import LoadOptions
    from anypair.errors import BackendError

    tokenizer = AutoTokenizer.from_pretrained(zoo_fetch["Qwen/Qwen2.5-Coder-0.5B-Instruct"])
    model = _tiny_qwen_on("meta", tokenizer)
    failing = InvarianceReport(5, 0.1, 30.0, True, context=300)
    report = ContractReport((InvarianceReport(2, 0.0, 30.0, True, context=16),) + (() if holds else (failing,)))
    monkeypatch.setattr(contract, "check_contract", lambda backend, ids, shapes: report)
    options = LoadOptions(device="meta")
    if holds:
        member = torch_engine.load_torch_member((model, tokenizer), role="target", options=options)
        assert member.invariance == report.describe()
        return
    with pytest.raises(BackendError) as refusal:
        torch_engine.load_torch_member((model, tokenizer), role="target", options=options)
    message = str(refusal.value)
    assert "\n" not in message and "on meta fails the batch-invariance contract" in message
    assert "FAILS at k=5 after 300 cached tokens" in message and "model.float()" in message


def test_auto_weights_on_a_gpu_try_fp32_only():
    from anypair.backends.weights import candidate_weights

    assert candidate_weights("cuda") == ["fp32"] and candidate_weights("cuda:1") == ["fp32"]
    assert candidate_weights("cpu")[-1] == "fp32"
