"""The skinny CPU linear kernel: same numbers as torch's linear, switched in and out in place."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from anypair.backends.skinny_linear import (SkinnyLinear, choose_kernel, install_skinny_linear, skinny_matmul,
                                            uninstall_skinny_linear)


@pytest.mark.parametrize("out_features", [256, 100, 33])  # a multiple of the block, a remainder, barely 1 block
@pytest.mark.parametrize("rows", [1, 3, 16, 17])  # 17 > max_tokens: torch's own path
@pytest.mark.parametrize("bias", [False, True])
def test_matches_torch_linear(out_features, rows, bias):
    torch.manual_seed(out_features * 100 + rows)
    weight = torch.randn(out_features, 96)
    b = torch.randn(out_features) if bias else None
    x = torch.randn(1, rows, 96)
    got = skinny_matmul(x, weight, b, block_rows=32, max_tokens=16)
    want = F.linear(x, weight, b)
    assert got.shape == want.shape == (1, rows, out_features)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_install_switches_class_in_place_and_back():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 64)
    before = model(x)
    choice = install_skinny_linear(model, "skinny")
    assert choice.kernel == "skinny"
    assert all(type(m) is SkinnyLinear for m in model if isinstance(m, torch.nn.Linear))
    assert model.state_dict().keys() == state.keys()
    torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)
    uninstall_skinny_linear(model)
    assert all(type(m) is torch.nn.Linear for m in model if isinstance(m, torch.nn.Linear))
    assert install_skinny_linear(model, "torch").kernel == "torch"
    assert all(type(m) is torch.nn.Linear for m in model if isinstance(m, torch.nn.Linear))


def test_auto_measures_and_reports():
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048))
    choice = choose_kernel(model, "auto")
    assert choice.kernel in ("skinny", "torch")
    assert choice.torch_ms is not None and choice.torch_ms > 0 and choice.skinny_ms > 0
    with pytest.raises(ValueError, match="unknown linear kernel"):
        choose_kernel(model, "fast")
