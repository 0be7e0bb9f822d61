"""Shared pytest fixtures. Append-friendly: each area adds its own fixtures below its own heading."""
from __future__ import annotations

import os

import pytest

# the kernels' layout cache (kernels/packed_cache.py) off for the suite: every model a test loads would
# otherwise write its interleaved copy under $ANYPAIR_HOME/packed (GBs, on every CI machine); the
# cache's own tests turn it on in a home of their own (tests/test_layout_cache.py)
os.environ.setdefault("ANYPAIR_LAYOUT_CACHE", "0")
# the contract's kept verdicts (backends/contract_cache.py) off for the suite: tests that stand in a failing
# check for a real one would otherwise keep their verdict for the next load of the same weights (and
# find an earlier run's); the cache's own tests turn it on in a folder of their own
os.environ.setdefault("ANYPAIR_CONTRACT_CACHE", "0")

# --- zoo ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def zoo_fetch():
    """Fetch (once per session, a no-op when cached) what the suite needs: every tokenizer family,
    Qwen2.5-Coder-0.5B-Instruct, SmolLM2-135M-Instruct and gemma-3-270m. Returns name -> local path."""
    from anypair.zoo import fetch

    return fetch(["test"], progress=True)


# --- threads --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models and single vocabulary-sized rows are too small to split: extra threads only contend
    (CI has 2 cores). Modules opt in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def torch_threads_restored():
    """`AnyPairGenerator(..., threads=N)` sets torch's process-wide thread count: each test leaves it
    as it found it (test_faults' threads=1 generator had every later module run torch on one core)."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


# --- shared models --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def smol_alone_fp32(zoo_fetch):
    """SmolLM2-135M alone on the torch engine in fp32 (an engine of one slot), loaded once for the run:
    its load measures the batch-invariance contract (seconds on 2 cores), which three modules paid
    each. The generator holds no request's state between requests (no draft, no ledger), so modules
    share it as they shared their own across their tests."""
    from anypair import AnyPairGenerator

    return AnyPairGenerator("HuggingFaceTB/SmolLM2-135M-Instruct", None, engine="torch", weights="fp32", threads=2)
