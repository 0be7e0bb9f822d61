"""Target and draft engines on real models: the batch-invariance contract that a target's kernel
must pass (and that int8 dynamic quantization fails), the weight formats "auto" picks, exact greedy
output on the fp16-weight target, and llama.cpp as a draft and as a target engine."""
from __future__ import annotations

import pytest
import torch

from anypair.backends.contract import PROBE_TEXT, check_batch_invariance
from anypair.errors import BackendError, InputError

QWEN05 = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
CODE = "def quicksort(items):\n    \"\"\"Sort a list.\"\"\"\n    if len(items) <= 1:\n        return items\n"


def _probe(member, k: int):
    ids = member.tokenizer.encode_continuation(PROBE_TEXT)
    return ids[:-k], ids[-k:]


@pytest.fixture(scope="module")
def fp16_target(zoo_fetch):
    from anypair.backends.weights import fbgemm_fp16_available
    from anypair.generation.members import load_member

    if not fbgemm_fp16_available():
        pytest.skip("this CPU has no AVX2+F16C fbgemm: fp16 weights are not offered here (fp32 is used)")
    return load_member(QWEN05, role="target", weights="fp16")


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_fp16_weights_keep_the_contract_on_a_real_model(fp16_target, k):
    report = check_batch_invariance(fp16_target.backend, *_probe(fp16_target, k))
    assert report.holds, report.describe()


@pytest.mark.slow
def test_int8_dynamic_fails_the_contract_and_cannot_serve_a_target(zoo_fetch):
    """The check must be able to fail: int8 dynamic shares one activation scale per call."""
    from anypair.generation.members import load_member

    draft = load_member(SMOL, role="draft", engine="torch", weights="int8")
    report = check_batch_invariance(draft.backend, *_probe(draft, 4))
    assert not report.holds and report.relative_diff > 1e-3, report.describe()
    with pytest.raises(InputError, match="not batch-invariant"):
        load_member(SMOL, role="target", weights="int8")


@pytest.mark.slow
def test_auto_falls_back_when_a_format_fails_the_contract(zoo_fetch, monkeypatch):
    """A format that fails the check on this machine is never kept for a target."""
    from anypair.backends import contract
    from anypair.generation import members

    real = contract.check_contract

    def fp16_breaks(backend, probe_ids, shapes=contract.VERIFICATION_SHAPES):
        report = real(backend, probe_ids, shapes)
        if any(type(m).__name__ == "Fp16Linear" for m in backend.model.modules()):
            worst = report.worst
            return contract.ContractReport((contract.InvarianceReport(
                worst.k, 1.0, worst.max_abs_logit, worst.argmax_agrees, context=worst.context),))
        return report

    monkeypatch.setattr(contract, "check_contract", fp16_breaks)
    from anypair.backends import weights

    monkeypatch.setattr(weights, "candidate_weights", lambda device: ["fp16", "fp32"])
    member = members.load_member(SMOL, role="target", engine="torch", weights="auto")
    assert member.engine.weights == "fp32"
    with pytest.raises(BackendError, match="batch-invariance"):
        members.load_member(SMOL, role="target", engine="torch", weights="fp16")


@pytest.mark.slow
def test_fp16_weights_hold_no_fp32_copy(fp16_target):
    from anypair.backends.weights import Fp16Linear, WideningEmbedding

    model = fp16_target.model
    assert isinstance(model.get_output_embeddings(), Fp16Linear)
    assert isinstance(model.get_input_embeddings(), WideningEmbedding)
    params = sum(p.numel() for p in model.parameters())  # what is left as plain tensors: embedding, norms
    assert params < 0.3 * 494e6
    # 2 bytes per weight, plus the tied embedding kept once more as the bf16 lookup table (fp32: 4)
    assert fp16_target.weights_bytes < 0.7 * 4 * 494e6


@pytest.mark.slow
def test_fp16_target_with_a_translated_draft_is_exact(fp16_target, zoo_fetch):
    """Greedy anypair output equals the same fp16 target's own greedy output, token for token."""
    from anypair import AnyPairGenerator

    gen = AnyPairGenerator(fp16_target, SMOL, draft_engine="torch", num_draft_tokens=4, draft_length="constant")
    for prompt in (CODE, "The history of the printing press begins in"):
        alone = gen.generate(prompt, max_new_tokens=24, assisted=False)
        assisted = gen.generate(prompt, max_new_tokens=24)
        assert assisted.target_ids == alone.target_ids
        assert assisted.stats.draft_tokens_proposed > 0


# -- llama.cpp ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smol_llama(zoo_fetch):
    from anypair.generation.members import load_member

    return load_member(SMOL, role="draft", engine="llama.cpp")


@pytest.mark.slow
def test_llama_cpp_backend_rolls_back_exactly(smol_llama):
    """crop() then extend() must give the logits of a run that never went past the crop point."""
    backend = smol_llama.backend
    ids = smol_llama.tokenizer.encode_continuation(CODE)
    backend.prefill(ids[:-3])
    fresh = [backend.extend([t]).clone() for t in ids[-3:]]
    backend.crop(len(ids) - 3)
    assert backend.cached_length == len(ids) - 3
    backend.extend([5, 6, 7, 8], all_logits=True)  # a rejected proposal
    backend.crop(len(ids) - 3)
    again = [backend.extend([t]).clone() for t in ids[-3:]]
    for a, b in zip(fresh, again):
        assert int(a.argmax()) == int(b.argmax()) and torch.allclose(a, b, atol=1e-3)
    assert backend.extend(ids[:2], all_logits=True).shape == (2, backend.vocab_size)
    with pytest.raises(ValueError):
        backend.crop(backend.cached_length + 1)


@pytest.mark.slow
def test_llama_cpp_reads_prompts_longer_than_one_batch(smol_llama):
    from anypair.backends.llama_cpp import PREFILL_CHUNK

    backend = smol_llama.backend
    ids = smol_llama.tokenizer.encode_continuation(CODE * 40)
    assert len(ids) > PREFILL_CHUNK
    last = backend.prefill(ids)
    assert backend.cached_length == len(ids) and last.shape == (backend.vocab_size,)


@pytest.mark.slow
def test_llama_cpp_draft_with_fp16_target_is_exact(fp16_target, smol_llama):
    from anypair import AnyPairGenerator

    # every request drafts: the test is about the pair's exactness, not whether drafting paid on the last one
    gen = AnyPairGenerator(fp16_target, smol_llama, skip_losing_drafts=False)
    assert "llama.cpp" in gen.engines
    for prompt in (CODE, "Write a haiku about the sea.\n"):
        alone = gen.generate(prompt, max_new_tokens=32, assisted=False)
        assisted = gen.generate(prompt, max_new_tokens=32)
        assert assisted.target_ids == alone.target_ids
        assert assisted.stats.draft_tokens_accepted > 0 and not assisted.stats.draft_failed


@pytest.mark.slow
def test_auto_runs_a_zoo_draft_on_the_gguf_engine_or_llama_cpp(zoo_fetch):
    from anypair.generation.members import resolve_engine

    assert resolve_engine(SMOL, "auto", "draft") == "gguf"  # llama arch: anypair's one-call-per-step engine
    assert resolve_engine("google/gemma-3-270m", "auto", "draft") == "gguf"  # gemma3 runs on it too
    # an architecture it does not run goes to llama.cpp: tests/test_architectures.py
    assert resolve_engine(SMOL, "auto", "target") == "gguf"  # a GGUF-sourced target: anypair's exact engine
    with pytest.raises(InputError, match="GGUF"):
        resolve_engine("/tmp/model.gguf", "torch", "target")


def test_with_no_device_a_gguf_member_runs_on_the_cpu_of_a_gpu_machine(zoo_fetch, monkeypatch):
    """Where torch sees a GPU, the default pair still loads with no flags: each member on its engine's
    own device (was: device "cuda" for every member, which the gguf engine refused); a device the
    engine cannot use, named, is still refused in one line."""
    from anypair import AnyPairGenerator
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.generation.members import load_member

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pair = AnyPairGenerator(SMOL, SMOL, threads=1, context=256)
    assert isinstance(pair.target_backend, QuantizedGGUFBackend) and isinstance(pair.draft_backend, QuantizedGGUFBackend)
    with pytest.raises(InputError, match="runs on cpu, not 'cuda'"):
        load_member(SMOL, role="draft", engine="gguf", device="cuda")


@pytest.mark.slow
def test_gguf_target_on_llama_cpp_with_a_draft_of_another_vocabulary(zoo_fetch, smol_llama):
    """A user's own GGUF as the target (llama.cpp), drafted by a model of another vocabulary."""
    from anypair import AnyPairGenerator
    from anypair.backends.sources import gguf_of

    gguf = gguf_of(QWEN05)
    # a constant length: the adaptive policy may (rightly) stop drafting on a loaded CI machine
    gen = AnyPairGenerator(str(gguf), smol_llama, engine="llama.cpp", draft_length="constant", num_draft_tokens=4)
    assert gen.target.engine.engine == "llama.cpp"
    alone = gen.generate(CODE, max_new_tokens=24, assisted=False)
    assisted = gen.generate(CODE, max_new_tokens=24)
    assert alone.stats.new_tokens == 24 and assisted.stats.new_tokens == 24
    assert assisted.stats.draft_tokens_accepted > 0
    # llama.cpp's batched logits are not batch-invariant: the texts agree at least until a near-tie
    assert assisted.target_ids[:4] == alone.target_ids[:4]
    assert gen.target.invariance  # a target on any engine has its contract measured at load


@pytest.mark.slow
def test_a_new_engine_is_one_file_and_a_registry_entry(fp16_target):
    """Adding an engine takes one file (tests/recomputing_engine.py: a ModelBackend with no KV cache
    and its loader) and an `Engine` entry; the loop and the engine choice are not touched."""
    from anypair import AnyPairGenerator
    from anypair.backends.engines import Engine, engine_named, register_engine, unregister_engine
    from anypair.backends.sources import CHECKPOINT
    from anypair.generation.checks import engine_options

    with pytest.raises(InputError, match="unknown draft_engine 'recomputing'"):
        AnyPairGenerator(fp16_target, SMOL, draft_engine="recomputing")
    register_engine(Engine(name="recomputing", loader="recomputing_engine:load_recomputing_member",
                           sources=frozenset({CHECKPOINT}), exact_target=False,
                           verification_slope=lambda member: 1.0,  # no cache: every pass re-reads all
                           layer_overhead_params=7.4e6, devices=None))
    try:
        assert "recomputing" in engine_options() and engine_named("recomputing").exact_target is False
        gen = AnyPairGenerator(fp16_target, SMOL, draft_engine="recomputing", draft_length="constant",
                               num_draft_tokens=3)
        assert "draft recomputing fp32" in gen.engines
        assert type(gen.draft.backend).__name__ == "RecomputingBackend"
        alone = gen.generate(CODE, max_new_tokens=20, assisted=False)
        assisted = gen.generate(CODE, max_new_tokens=20)
        assert assisted.target_ids == alone.target_ids
        assert assisted.stats.draft_tokens_accepted > 0 and not assisted.stats.draft_failed
    finally:
        unregister_engine("recomputing")
    assert "recomputing" not in engine_options()


def test_unknown_weights_and_engines_are_input_errors():
    from anypair.backends.weights import parse_weights
    from anypair.generation.members import resolve_engine

    with pytest.raises(InputError, match="weights"):
        parse_weights("fp8")
    with pytest.raises(InputError, match="engine"):
        resolve_engine("x/y", "onnx", "target")
