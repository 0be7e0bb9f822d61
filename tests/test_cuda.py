"""On a CUDA GPU (skipped where torch sees none): a torch target there is exact or refused in one line.
Greedy output and seeded samples equal the target alone, token for token, with a draft of another
vocabulary on the GPU too; the keyed noise gives the same sample on the GPU as on the CPU for the same
probabilities. The CPU-side checks of the same code (the noise's device, the contract's shapes, the
refusal) are in test_sampling.py and test_contract.py."""
from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: torch sees none on this machine"),
    pytest.mark.slow,
]

TARGET = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
DRAFT = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPTS = (
    "def quicksort(xs):\n    \"\"\"Sort a list of numbers.\"\"\"\n",
    "The history of the printing press begins in",
    "import json\n\ndef load_config(path):\n",
)
NEW_TOKENS = 96


@pytest.fixture(scope="module")
def cuda_pair(zoo_fetch):
    """The pair on the GPU (torch engine: the gguf engine runs on the CPU), drafting a constant 4
    tokens on every request so that verification scores 5-row passes throughout; or the refusal."""
    from anypair import AnyPairGenerator
    from anypair.errors import BackendError

    try:
        return AnyPairGenerator(TARGET, DRAFT, device="cuda", engine="torch", draft_engine="torch",
                                draft_length="constant", num_draft_tokens=4, skip_losing_drafts=False)
    except BackendError as refusal:
        message = str(refusal)
        assert "\n" not in message and "device='cpu'" in message, message
        pytest.skip(f"this GPU's fp32 kernels fail the contract and the target is refused in one line: {message}")


def test_the_target_runs_in_fp32_checked_in_every_verification_shape(cuda_pair):
    assert cuda_pair.target.engine.weights == "fp32"
    assert next(cuda_pair.target.model.parameters()).device.type == "cuda"
    assert "holds for 2, 3, 4, 5, 8, 9, 13 rows after 16, 100, 300 cached tokens" in cuda_pair.target.invariance


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_is_the_target_alone_token_for_token(cuda_pair, prompt):
    alone = cuda_pair.generate(prompt, max_new_tokens=NEW_TOKENS, assisted=False)
    assisted = cuda_pair.generate(prompt, max_new_tokens=NEW_TOKENS)
    assert assisted.target_ids == alone.target_ids
    assert assisted.stats.draft_tokens_proposed > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_seeded_sampling_is_the_targets_own_sample(cuda_pair, seed):
    settings = dict(do_sample=True, temperature=0.7, top_k=50, top_p=0.95, seed=seed, max_new_tokens=NEW_TOKENS)
    alone = cuda_pair.generate(PROMPTS[0], assisted=False, **settings)
    assisted = cuda_pair.generate(PROMPTS[0], **settings)
    assert assisted.target_ids == alone.target_ids
    assert cuda_pair.generate(PROMPTS[0], assisted=False, **settings).target_ids == alone.target_ids


def test_intersection_drafts_sample_from_gpu_logits(cuda_pair):
    """The draft's own keyed samples (its logits on the GPU, its pick made on the vocabulary map's device)."""
    from anypair import AnyPairGenerator

    coupled = AnyPairGenerator(cuda_pair.target, cuda_pair.draft, device="cuda", sampled_drafts="intersection",
                               draft_length="constant", num_draft_tokens=4, skip_losing_drafts=False)
    settings = dict(do_sample=True, temperature=1.0, seed=7, max_new_tokens=NEW_TOKENS)
    alone = coupled.generate(PROMPTS[1], assisted=False, **settings)
    assisted = coupled.generate(PROMPTS[1], **settings)
    assert assisted.target_ids == alone.target_ids
    assert assisted.stats.draft_tokens_proposed > 0


def test_the_keyed_sample_is_the_same_on_the_gpu_for_the_same_probabilities():
    from anypair.sampling import PositionNoise, keyed_sample

    generator = torch.Generator().manual_seed(0)
    noise = PositionNoise()
    noise.rekey(12345)
    rows = 151_936
    for position in range(64):
        probs = torch.softmax(torch.randn(rows, generator=generator) * 3.0, dim=-1)
        on_cpu = keyed_sample(probs, noise.exponential(position, rows))
        gpu_probs = probs.cuda()
        on_gpu = keyed_sample(gpu_probs, noise.exponential(position, rows, gpu_probs.device))
        assert on_gpu == on_cpu
