"""The GGUF engine on real models: bitwise batch invariance of the whole forward for k = 1..16 at
short and long contexts (the contract a target must keep for exact verification), anypair's greedy
output equal to this engine's own target-alone output, the engine choice, and bad files.

Models: Qwen2.5-Coder-1.5B (the default target: Q4_K/Q6_K), Qwen2.5-Coder-0.5B (qwen2: Q5_0/Q8_0/
Q4_K/Q6_K), SmolLM2-135M (llama architecture: Q4_1/Q8_0)."""
from __future__ import annotations

import functools

import pytest
import torch

from anypair.backends.contract import check_every_batch_size
from anypair.errors import InputError

QWEN15 = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
QWEN05 = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "def merge_sorted(a, b):",
    "Explain in two sentences what a hash table is.",
]


def _gguf(name: str):
    from anypair.zoo.registry import ZOO_MODELS
    from anypair.zoo.served_gguf import gguf_file

    return gguf_file(ZOO_MODELS[name], progress=False)


def _backend(name: str, context: int = 8192):
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    return QuantizedGGUFBackend(_gguf(name), name=name, threads=2, context=context)


@functools.lru_cache(maxsize=None)
def _real_text(name: str) -> tuple[int, ...]:
    """Code from Python's standard library in the model's own vocabulary (tokenized once per model)."""
    import inspect
    import json.decoder
    import textwrap

    from anypair.backends.sources import gguf_tokenizer

    tokenizer, _ = gguf_tokenizer(name, _gguf(name))
    text = "".join(inspect.getsource(module) for module in (json.decoder, textwrap, inspect))
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def _real_text_ids(name: str, count: int) -> list[int]:
    """`count` ids of real text, code from Python's standard library, in the model's own vocabulary."""
    ids = _real_text(name)
    assert len(ids) >= count
    return list(ids[:count])


@pytest.mark.parametrize("name,contexts", [(QWEN15, (16, 300)), (QWEN05, (16, 1000)), (SMOL, (16, 1000, 4000))])
def test_whole_forward_is_bitwise_batch_invariant_for_k_1_to_16(name, contexts):
    backend = _backend(name)
    for context in contexts:
        ids = _real_text_ids(name, context + 16)
        reports = check_every_batch_size(backend, ids[:context], ids[context:])
        assert [r.k for r in reports] == list(range(1, 17))
        failing = [r.describe() for r in reports if not r.holds or r.max_abs_diff != 0.0]
        assert not failing, f"{name} at context {context}: {failing}"


def test_the_contract_tells_a_bitwise_engine_from_a_tolerant_one():
    """The check can fail: a backend that perturbs batched rows by 1e-6 (fp32 noise, which the
    tolerant contract accepts) fails when the engine promises identical bits."""
    backend = _backend(SMOL, context=256)

    class Perturbed(type(backend)):
        def extend(self, ids, all_logits=False):
            logits = super().extend(ids, all_logits)
            return logits + 1e-6 * (len(ids) > 1)

    backend.__class__ = Perturbed
    ids = list(range(300, 340))
    reports = check_every_batch_size(backend, ids[:30], ids[30:34])
    assert reports[0].holds and not any(r.holds for r in reports[1:])
    backend.bitwise_batch_invariant = False
    assert all(r.holds for r in check_every_batch_size(backend, ids[:30], ids[30:34]))


@pytest.fixture(scope="module")
def default_pair_generator():
    from anypair import AnyPairGenerator

    return AnyPairGenerator(QWEN15, SMOL, threads=2)


def test_the_default_target_runs_on_the_gguf_engine(default_pair_generator):
    gen = default_pair_generator
    assert gen.target.engine.engine == "gguf"
    assert gen.target.engine.weights == "Q4_K/Q6_K"
    assert "holds bitwise" in gen.target.invariance
    assert gen.target.model is None  # no transformers model, no float copy of the weights
    assert gen.target.weights_bytes < 1.15 * gen.target.gguf_path.stat().st_size


@pytest.mark.parametrize("prompt", PROMPTS)
def test_anypair_equals_the_gguf_target_alone_token_for_token(default_pair_generator, prompt):
    gen = default_pair_generator
    alone = gen.generate(messages=[{"role": "user", "content": prompt}], max_new_tokens=48, assisted=False)
    assisted = gen.generate(messages=[{"role": "user", "content": prompt}], max_new_tokens=48)
    assert assisted.target_ids == alone.target_ids
    assert assisted.stats.rounds < len(alone.target_ids)  # the draft did propose and was accepted


def test_a_llama_architecture_target_with_a_qwen_draft_is_exact(zoo_fetch):
    """The other architecture as the target (SmolLM2, llama), drafted by a model of another vocabulary."""
    from anypair import AnyPairGenerator

    gen = AnyPairGenerator(SMOL, QWEN05, threads=2, draft_engine="gguf", num_draft_tokens=4, draft_length="constant")
    assert gen.target.engine.engine == "gguf" and gen.draft.engine.engine == "gguf"
    for prompt in ("def add(a, b):", "The three primary colours are"):
        alone = gen.generate(prompt, max_new_tokens=32, assisted=False)
        assert gen.generate(prompt, max_new_tokens=32).target_ids == alone.target_ids


def test_engine_choice(zoo_fetch, tmp_path):
    from anypair.generation.members import resolve_engine

    assert resolve_engine(QWEN15, "auto", "target") == "gguf"
    assert resolve_engine(QWEN05, "auto", "target") == "gguf"
    assert resolve_engine(QWEN05, "auto", "target", weights="fp16") == "torch"  # torch's numerics on request
    assert resolve_engine("google/gemma-3-270m", "auto", "target") == "gguf"  # gemma3 runs on it too
    with pytest.raises(InputError, match="weights"):
        resolve_engine(QWEN05, "gguf", "target", weights="fp16")


def test_bad_gguf_files_get_one_line_errors(tmp_path):
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    source = _gguf(SMOL)
    truncated = tmp_path / "half.gguf"
    with open(source, "rb") as handle:
        truncated.write_bytes(handle.read(source.stat().st_size // 2))
    with pytest.raises(InputError, match="truncated"):
        QuantizedGGUFBackend(truncated)
    not_gguf = tmp_path / "text.gguf"
    not_gguf.write_text("hello")
    with pytest.raises(InputError, match="not a GGUF"):
        QuantizedGGUFBackend(not_gguf)
    with pytest.raises(InputError, match="no such file"):
        QuantizedGGUFBackend(tmp_path / "nope.gguf")


def test_context_and_token_ids_are_checked():
    backend = _backend(SMOL, context=64)
    backend.prefill(list(range(100, 160)))
    with pytest.raises(InputError, match="context"):
        backend.extend(list(range(10)))
    with pytest.raises(InputError, match="out of range"):
        backend.extend([backend.vocab_size])
    backend.crop(10)
    assert backend.cached_length == 10
    assert torch.isfinite(backend.extend([5, 6, 7], all_logits=True)).all()


def test_the_roofline_accounts_for_a_step_part_by_part():
    """`anypair bench --roofline`'s figures: the machine's ceilings are measured (not zero), a step's
    parts are timed, and its bytes and multiply-adds are the model's (k rows of every quantized matrix)."""
    from anypair.benchmarking.roofline import Ceilings, format_roofline, profile_steps, step_bytes_and_macs
    from anypair.kernels.ops import PROFILE_PARTS

    backend = _backend(SMOL, context=256)
    ids = _real_text_ids(SMOL, 40)
    steps = profile_steps(backend, ids, contexts=(32,), ks=(1, 3), repeats=1)
    assert [(s.context, s.k) for s in steps] == [(32, 1), (32, 3)]
    for step in steps:
        assert set(step.parts_ms) == set(PROFILE_PARTS) | {"embedding", "head", "argmax"}
        assert all(ms >= 0.0 for ms in step.parts_ms.values()) and step.parts_ms["gate_up"] > 0.0
        assert sum(step.parts_ms.values()) <= step.total_ms * 1.05  # parts are inside the step
    matrices = [w for layer in backend.layers for w in layer.matrices] + backend.head.weights
    assert steps[1].int8_macs == 3 * sum(w.rows * w.cols for w in matrices)  # SmolLM2: every matrix quantized
    assert steps[0].bytes_read == step_bytes_and_macs(backend, 32, 1)[0] > sum(w.nbytes for w in matrices)
    assert backend.cached_length == 0 and backend.stack.profile is None  # left as found, profiling off
    from anypair.kernels import simd_level

    ceilings = Ceilings.measure(threads=2)
    assert ceilings.read_bytes_per_s > 1e8
    assert ceilings.int8_macs_per_s > 1e9 if simd_level() != "portable" else ceilings.int8_macs_per_s == 0.0
    assert "roofline" in str(format_roofline(ceilings, steps).title)


def test_the_default_context_is_the_models_own_as_far_as_memory_holds_its_kv_cache(monkeypatch):
    """Unset, the context is the model's trained one (32,768 for Qwen2.5-Coder), lowered to what
    free memory holds; an asked context that does not fit is one line naming the memory and the option."""
    from anypair.backends import quantized_gguf
    from anypair.backends.gguf_file import GGUFFile
    from anypair.backends.quantized_gguf import context_within_memory, kv_bytes_per_position, read_shape

    shape = read_shape(GGUFFile(_gguf(QWEN05)))
    per_position = kv_bytes_per_position(shape)
    assert shape.trained_context == 32768 and per_position == 2 * 2 * 24 * 2 * 64
    gib = 2**30
    assert context_within_memory("t", shape, None, 1, gib, available=20 * gib) == 32768
    small = context_within_memory("t", shape, None, 1, gib, available=gib + 100 * 2**20)
    assert small % 256 == 0 and small * per_position <= 100 * 2**20 * quantized_gguf.KV_MEMORY_SHARE
    assert small > 100 * 2**20 * quantized_gguf.KV_MEMORY_SHARE / per_position - 256
    assert context_within_memory("t", shape, 4096, 1, gib, available=20 * gib) == 4096
    assert context_within_memory("t", shape, 10**6, 1, gib, available=20 * gib) == 32768  # never past its training
    with pytest.raises(InputError, match=r"context of 32768 tokens needs .* GiB of KV cache .* at most \d+"):
        context_within_memory("t", shape, 32768, 1, gib, available=gib + 100 * 2**20)
    with pytest.raises(InputError, match="8 sequence"):
        context_within_memory("t", shape, 32768, 8, gib, available=3 * gib)
    with pytest.raises(InputError, match="no room for a KV cache"):
        context_within_memory("t", shape, None, 1, gib, available=gib)
    backend = quantized_gguf.QuantizedGGUFBackend(_gguf(QWEN05), threads=1)
    assert backend.max_context == min(32768, context_within_memory("t", shape, None, 1, _gguf(QWEN05).stat().st_size))


def test_a_prompt_past_the_drafts_context_drafts_and_equals_the_target_alone():
    """A prompt longer than the draft's context is no refusal: the draft reads a window of its own
    (sliding as the text grows) and proposes, and the output is the target's own. The draft's context is
    cut to 400 positions here so that a 1,500-token prompt passes it, as a 30k-token chat passes 8k."""
    from anypair import AnyPairGenerator

    loaded = AnyPairGenerator(QWEN05, SMOL, threads=2)
    loaded.draft_backend.max_context = 400
    gen = AnyPairGenerator(loaded.target, loaded.draft, threads=2, skip_losing_drafts=False)
    from anypair.backends.sources import gguf_tokenizer

    tokenizer, _ = gguf_tokenizer(QWEN05, _gguf(QWEN05))
    prompt = tokenizer.decode(_real_text_ids(QWEN05, 1500)) + "\n\ndef parse_header(line):\n"
    assert gen.room_for_new_tokens(prompt) > 1000
    alone = gen.generate(prompt, max_new_tokens=40, assisted=False)
    assisted = gen.generate(prompt, max_new_tokens=40)
    assert not assisted.stats.draft_failed, assisted.stats.draft_failure_reason
    assert assisted.stats.draft_tokens_proposed > 0
    assert assisted.target_ids == alone.target_ids


def test_a_prompt_read_whole_in_chunks_or_after_a_cached_prefix_gives_the_same_bits(monkeypatch):
    """Chunking invariance: a prompt read in one piece, in chunks of 64 or 512, or as a cached prefix then
    the rest (a previous request's cache) leaves bitwise the same KV cache and first token's logits."""
    from anypair.backends import quantized_gguf

    backend = _backend(QWEN05, context=800)
    ids = _real_text_ids(QWEN05, 700)

    def read(chunk: int, prefix: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
        monkeypatch.setattr(quantized_gguf, "PREFILL_CHUNK", chunk)
        backend.reset()
        if prefix:
            backend.extend(ids[:prefix])
        logits = backend.extend(ids[prefix:]).clone()
        caches = [c[0, :, :len(ids)].clone() for layer in backend.layers for c in (layer.k_cache, layer.v_cache)]
        return logits, caches

    whole_logits, whole_kv = read(len(ids))
    for chunk, prefix in ((64, 0), (512, 0), (256, 300)):
        logits, kv = read(chunk, prefix)
        assert torch.equal(logits, whole_logits), f"chunks of {chunk}, cached prefix {prefix}: first token's logits differ"
        assert all(torch.equal(a, b) for a, b in zip(kv, whole_kv)), f"chunks of {chunk}, prefix {prefix}: KV differs"
