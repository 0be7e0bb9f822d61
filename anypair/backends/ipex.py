"""Optional Intel Extension for PyTorch backend.

IPEX is end-of-life (last release 2.8, which needs torch 2.8 exactly), and `ipex.llm.optimize`
has been seen to return wrong logits when one forward pass scores several new tokens, which is
exactly what verification does. So IPEX is detected, never required, and an optimized model is
used only after its multi-token logits have been checked against plain torch on a probe.
"""
from __future__ import annotations

import importlib.util
from typing import Sequence

import torch

from anypair.backends.base import ModelBackend
from anypair.backends.torch_hf import TorchBackend
from anypair.errors import BackendError


def ipex_status() -> tuple[bool, str]:
    """(usable, why) without importing IPEX when it is absent."""
    if importlib.util.find_spec("intel_extension_for_pytorch") is None:
        return False, "intel-extension-for-pytorch is not installed (it is optional; the torch backend is used)"
    try:
        import intel_extension_for_pytorch as ipex  # noqa: F401
    except Exception as exc:  # a torch/IPEX version mismatch raises at import
        return False, f"intel-extension-for-pytorch is installed but fails to import with torch {torch.__version__}: {exc}"
    ipex_version = getattr(ipex, "__version__", "?")
    if ipex_version.split("+")[0].rsplit(".", 1)[0] != torch.__version__.split("+")[0].rsplit(".", 1)[0]:
        return False, f"IPEX {ipex_version} does not match torch {torch.__version__} (IPEX needs the same major.minor)"
    return True, f"IPEX {ipex_version}"


def check_multi_token_logits(candidate: ModelBackend, reference: ModelBackend, probe_ids: Sequence[int],
                             n_new: int = 4, atol: float = 5e-2) -> tuple[bool, str]:
    """Score the last `n_new` probe tokens in one pass on `candidate` and compare with `reference`
    scoring them one at a time. Returns (ok, detail)."""
    probe_ids = list(probe_ids)
    if len(probe_ids) <= n_new:
        raise ValueError("probe must be longer than n_new")
    head, tail = probe_ids[:-n_new], probe_ids[-n_new:]
    candidate.prefill(head)
    multi = candidate.extend(tail, all_logits=True)
    reference.prefill(head)
    single = torch.stack([reference.extend([t]) for t in tail])
    worst = float((multi - single).abs().max())
    same_choice = bool((multi.argmax(-1) == single.argmax(-1)).all())
    ok = same_choice and worst <= atol * max(1.0, float(single.abs().max()))
    return ok, f"max |logit difference| {worst:.4g}, same argmax: {same_choice}"


class IpexBackend(TorchBackend):
    """TorchBackend over an `ipex.llm.optimize`d model; construct with `make_ipex_backend`."""


def make_ipex_backend(model, probe_ids: Sequence[int], name: str = "ipex") -> IpexBackend:
    usable, why = ipex_status()
    if not usable:
        raise BackendError(f"backend='ipex' is unavailable: {why}. Use backend='torch'.")
    import intel_extension_for_pytorch as ipex

    reference = TorchBackend(model, name=f"{name}-reference")
    optimized = ipex.llm.optimize(model, dtype=next(model.parameters()).dtype, inplace=False)
    backend = IpexBackend(optimized, name=name)
    ok, detail = check_multi_token_logits(backend, reference, probe_ids)
    if not ok:
        raise BackendError(
            f"IPEX returns different logits from plain torch when one pass scores several tokens ({detail}); "
            "speculative verification would be wrong with it. Use backend='torch'."
        )
    return backend
