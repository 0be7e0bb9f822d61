"""Every architecture of the gguf engine checked against the world: llama (with Mistral-style window
metadata), qwen3, phi3, gemma2 and gemma3.

No weights of these shapes exist offline, real tokenizers do: tests/tiny_gguf.py builds a tiny random
model of each in transformers with a real tokenizer's vocabulary, writes it as an F32 GGUF and
quantizes it with llama.cpp's own quantizer. Each file is then checked four ways: its logits against
transformers' fp32 forward of the same dequantized weights, its perplexity on real news text against
llama.cpp's on the same file, bitwise batch invariance for k = 1..16 past the sliding window, and
anypair with a draft of another vocabulary against the target alone. gemma-3-270m, the real model
of the zoo, is checked against llama.cpp and transformers the same way.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from anypair.backends.contract import check_every_batch_size
from anypair.errors import InputError

pytest.importorskip("llama_cpp", reason="llama.cpp's quantizer and forward are the references (README command 2)")

import tiny_gguf  # noqa: E402  (tests/ is on the path: conftest.py lives there)

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
GEMMA3_270M = "google/gemma-3-270m"
#: each architecture with the quantization its logits are compared on (all three types are covered;
#: every file is also quantized to Q4_K_M, llama.cpp's usual mix of Q4_K/Q6_K, for the other checks)
LOGIT_TYPES = {"llama": "Q5_0", "qwen3": "Q8_0", "phi3": "Q4_K_M", "gemma2": "Q8_0", "gemma3": "Q5_0"}
ARCHS = tuple(LOGIT_TYPES)
#: tokens of news text scored (past the tiny models' 16-position sliding window several times)
TOKENS = 96
#: how far the engine's logits may be from transformers' fp32 forward on the same dequantized weights:
#: both read the same weights, the engine rounds activations to int8 per block (as llama.cpp does).
#: Measured on these tiny models: mean |difference| 0.019-0.040 of the mean |logit|, the largest
#: 0.019-0.059 of the largest logit, the same top token at 91-99% of positions (llama.cpp on the same
#: files: 0.020-0.023 and 0.019-0.025, 93-98%). A missing post-norm, soft-cap, q/k norm, window or a
#: wrong rotary moves them by far more (see test_a_broken_architecture_is_caught).
MEAN_LOGIT_TOLERANCE = 0.06
MAX_LOGIT_TOLERANCE = 0.08
TOP1_AGREEMENT = 0.85
#: perplexity against llama.cpp's on the same file (measured: within 0.15% on every architecture)
PERPLEXITY_TOLERANCE = 0.01


def _vocab(name: str) -> Path:
    return tiny_gguf.llama_cpp_vocab(name)()


#: the real tokenizer each architecture's forward checks use: the family's own where it is small
#: (llama: Llama-2's 32k, phi3: Phi-3's), Llama-2's 32k for the others (what is checked is the
#: forward; Qwen's 151k and Gemma's 262k vocabularies only make the files slower to build and read:
#: Gemma's own is used by the seed pair below)
FORWARD_VOCAB = {"llama": "llama-spm", "qwen3": "llama-spm", "phi3": "phi-3", "gemma2": "llama-spm",
                 "gemma3": "llama-spm", "llama3": "llama-spm", "phi3-long": "phi-3"}
#: rope-scaling variants, checked against transformers too: a llama file with Llama-3.1's per-frequency
#: factors (`rope_freqs`), a phi3 file with long-context factors and attention factor (without the
#: factors the logits are 0.29 and 0.72 off, measured)
ROPE_VARIANTS = {"llama3": "Q8_0", "phi3-long": "Q8_0"}


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _builders_key() -> str:
    """What every tiny file is made by: tiny_gguf.py and the libraries that draw the weights (torch,
    transformers), write them (gguf, numpy) and quantize them (llama.cpp)."""
    from importlib.metadata import version

    import llama_cpp
    import transformers

    parts = [_file_digest(Path(tiny_gguf.__file__)), torch.__version__, transformers.__version__, version("gguf"),
             np.__version__, llama_cpp.__version__]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class TinyFiles:
    """Each tiny model's quantized GGUFs, built at most once per run, by (arch, vocabulary, type).

    They are kept in a folder named by their content's key (the builders and the vocabulary file's
    bytes) under pytest's cache when it is on: a run reuses what an earlier run built from the same
    inputs (the seeded build gives the same file again), and a change to any input builds afresh.
    The F32 GGUF they are quantized from (4-5 times their size) is built only when a quantization is
    missing, into this run's `scratch` folder. Each kept file is written under a temporary name and
    renamed, so an interrupted build leaves none."""

    def __init__(self, folder: Path, scratch: Path) -> None:
        self.folder = folder
        self.scratch = scratch
        self.builders = _builders_key()
        self.vocab_digests: dict[Path, str] = {}

    def config(self, arch: str, vocab: Path = None):
        return tiny_gguf.tiny_config(arch, vocab or _vocab(FORWARD_VOCAB[arch]))

    def quantized(self, arch: str, ftype: str, vocab: Path = None) -> Path:
        vocab = vocab or _vocab(FORWARD_VOCAB[arch])
        target = self._kept(arch, vocab) / f"{ftype}.gguf"
        if not target.exists():
            tiny_gguf.quantize(self._f32(arch, vocab), self._partial(target), ftype).replace(target)
        return target

    def _kept(self, arch: str, vocab: Path) -> Path:
        """The folder of (arch, vocab)'s quantized files made from today's inputs (older ones removed)."""
        if vocab not in self.vocab_digests:
            self.vocab_digests[vocab] = _file_digest(vocab)
        key = hashlib.sha256(f"{self.builders} {arch} {self.vocab_digests[vocab]}".encode()).hexdigest()[:16]
        prefix = f"{arch}-{vocab.stem}-"
        folder = self.folder / f"{prefix}{key}"
        if not folder.is_dir():
            for stale in self.folder.glob(prefix + "?" * len(key)):  # built from other inputs: never read again
                shutil.rmtree(stale)
            folder.mkdir(parents=True)
        return folder

    def _f32(self, arch: str, vocab: Path) -> Path:
        f32 = self.scratch / f"{arch}-{vocab.stem}-F32.gguf"
        if not f32.exists():
            model, config = tiny_gguf.build_model(arch, vocab)
            tiny_gguf.write_gguf(arch, model, config, f32, vocab)
        return f32

    @staticmethod
    def _partial(path: Path) -> Path:
        return path.with_name(path.name + ".partial")


@pytest.fixture(scope="session")
def tiny_files(request, tmp_path_factory, zoo_fetch) -> TinyFiles:
    cache = request.config.cache if request.config.pluginmanager.has_plugin("cacheprovider") else None
    scratch = tmp_path_factory.mktemp("tiny-gguf")
    return TinyFiles(cache.mkdir("anypair-tiny-gguf") if cache is not None else scratch, scratch)


def _news_ids(gguf: Path, count: int) -> list[int]:
    """`count` ids of real CNN/DailyMail text, tokenized by the file's own (real) tokenizer in llama.cpp."""
    import llama_cpp

    from anypair.benchmarking.sweep import DEFAULT_ARTICLES, articles_from_jsonl

    vocab = llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False)
    ids = vocab.tokenize("\n\n".join(articles_from_jsonl(DEFAULT_ARTICLES))[:8000].encode(), add_bos=False)
    assert len(ids) >= count
    return ids[:count]


def _engine(gguf: Path, context: int = 256):
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    return QuantizedGGUFBackend(gguf, name=gguf.name, threads=2, context=context)


def _shares(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[float, float, float]:
    difference = (ours - theirs).abs()
    return (float(difference.mean() / theirs.abs().mean()), float(difference.max() / theirs.abs().max()),
            float((ours.argmax(-1) == theirs.argmax(-1)).double().mean()))


@pytest.mark.parametrize("arch", ARCHS + tuple(ROPE_VARIANTS))
def test_logits_are_transformers_fp32_forward_of_the_dequantized_weights(tiny_files, arch):
    gguf = tiny_files.quantized(arch, {**LOGIT_TYPES, **ROPE_VARIANTS}[arch])
    ids = _news_ids(gguf, TOKENS)
    ours = _engine(gguf).extend(ids, all_logits=True)
    reference = tiny_gguf.reference_model(arch, tiny_files.config(arch), gguf)
    with torch.inference_mode():
        theirs = reference(torch.tensor([ids])).logits[0].float()
    mean_share, max_share, agreement = _shares(ours, theirs)
    assert mean_share < MEAN_LOGIT_TOLERANCE and max_share < MAX_LOGIT_TOLERANCE, (arch, mean_share, max_share)
    assert agreement >= TOP1_AGREEMENT, (arch, agreement)


@pytest.mark.parametrize("arch", ARCHS)
def test_perplexity_is_llama_cpps_within_1_percent_and_every_batch_size_gives_the_same_bits(tiny_files, arch):
    from anypair.backends.llama_cpp import LlamaCppBackend

    gguf = tiny_files.quantized(arch, "Q4_K_M")
    ids = _news_ids(gguf, TOKENS)
    engine = _engine(gguf)
    # llama.cpp ignores a llama file's declared window (Mistral's), which the engine, like transformers,
    # applies: the llama file is compared over its window of 48 positions
    scored = ids[:48] if arch == "llama" else ids
    ours = tiny_gguf.perplexity(engine.extend(scored, all_logits=True), scored)
    llama = LlamaCppBackend(gguf, name="llama.cpp", threads=2, context=256)
    theirs = tiny_gguf.perplexity(llama.extend(scored, all_logits=True), scored)
    # random weights, drawn wide: confidently wrong, so the perplexity is far from the uniform
    # vocabulary's and every logit's error shows in it
    assert abs(math.log(theirs / engine.vocab_size)) > 0.1, (theirs, engine.vocab_size)
    assert abs(ours / theirs - 1) < PERPLEXITY_TOLERANCE, (arch, ours, theirs)
    # 40 positions in, 16 scored every way (past the sliding layers' window: 16 positions, llama's 48)
    engine.reset()
    reports = check_every_batch_size(engine, ids[:40], ids[40:56])
    assert [r.k for r in reports] == list(range(1, 17))
    failing = [r.describe() for r in reports if not r.holds or r.max_abs_diff != 0.0]
    assert not failing, f"{arch}: {failing}"


QWEN05 = "Qwen/Qwen2.5-Coder-0.5B-Instruct"


def _generate_both(target, draft) -> None:
    from anypair import AnyPairGenerator

    gen = AnyPairGenerator(target, draft, draft_length="constant", num_draft_tokens=4, threads=2)
    assert gen.target.engine.engine == "gguf" and gen.draft.engine.engine == "gguf"
    prompt = "The city council met on Tuesday to discuss the new budget, and"
    alone = gen.generate(prompt, max_new_tokens=20, assisted=False)
    assisted = gen.generate(prompt, max_new_tokens=20)
    assert alone.stats.new_tokens == 20
    assert assisted.target_ids == alone.target_ids
    assert assisted.stats.draft_tokens_proposed > 0 and not assisted.stats.draft_failed


@pytest.mark.parametrize("arch, draft", [("llama", SMOL), ("qwen3", SMOL), ("phi3", QWEN05)])
def test_anypair_on_each_architecture_equals_the_target_alone(tiny_files, arch, draft):
    """Each tiny target drafted by a zoo model of another vocabulary: llama (CodeLlama's vocabulary)
    and qwen3 by SmolLM2, phi3 by Qwen2.5-Coder-0.5B (the Phi-3 / Qwen2 seed pair's shape)."""
    _generate_both(str(tiny_files.quantized(arch, "Q4_K_M")), draft)


def test_a_gemma2_target_with_gemmas_own_tokenizer_drafted_by_a_llama_family_model(tiny_files):
    """The gemma-2-9b / vicuna-68m seed pair's shape: a gemma2 target over Gemma's 262k vocabulary
    (the zoo's Gemma-3 tokenizer files beside the GGUF: the folder's tokenizer is the member's), drafted
    by SmolLM2 (llama family, 49k byte-BPE)."""
    import shutil

    from anypair.zoo.registry import ZOO_MODELS
    from anypair.zoo.served_gguf import served_gguf

    gemma_gguf, gemma_folder = served_gguf(ZOO_MODELS[GEMMA3_270M])
    target = tiny_files.quantized("gemma2", "Q4_K_M", vocab=Path(gemma_gguf))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(gemma_folder) / name, target.parent / name)
    _generate_both(str(target), SMOL)


@pytest.fixture(scope="module")
def starcoder_style_draft(zoo_fetch):
    """A tiny random gpt_bigcode model (tiny_starcoder's architecture) over StarCoder's real 49k
    vocabulary, loaded on torch as a (model, tokenizer) pair."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPTBigCodeConfig

    vocab = _vocab("starcoder")
    tokenizer = AutoTokenizer.from_pretrained(str(vocab.parent), gguf_file=vocab.name)
    torch.manual_seed(0)
    config = GPTBigCodeConfig(vocab_size=len(tokenizer), n_embd=128, n_layer=2, n_head=4, n_positions=1024,
                              multi_query=True)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval(), tokenizer


def test_a_codellama_shaped_target_drafted_by_a_gpt_bigcode_model_on_torch(tiny_files, starcoder_style_draft):
    """The CodeLlama / tiny_starcoder seed pair's shape: a llama target over Llama-2's vocabulary (CodeLlama's
    base) on the gguf engine, a gpt_bigcode draft over StarCoder's on torch."""
    from anypair import AnyPairGenerator

    target = str(tiny_files.quantized("llama", "Q4_K_M"))
    gen = AnyPairGenerator(target, starcoder_style_draft, draft_engine="torch", draft_length="constant",
                           num_draft_tokens=4, threads=2)
    assert gen.target.engine.engine == "gguf" and gen.draft.engine.engine == "torch"
    prompt = "def fibonacci(n):\n"
    alone = gen.generate(prompt, max_new_tokens=20, assisted=False)
    assisted = gen.generate(prompt, max_new_tokens=20)
    assert assisted.target_ids == alone.target_ids and alone.stats.new_tokens == 20
    assert assisted.stats.draft_tokens_proposed > 0 and not assisted.stats.draft_failed


def test_anypair_inspect_reports_each_seed_pair_shape(tiny_files, starcoder_style_draft):
    """`anypair inspect` (inspect_pair) on each seed pair's shape: the target's GGUF (its tokenizer
    read from the file) against the draft's vocabulary."""
    from anypair.inspect_pair import format_report, inspect_pair

    pairs = [(tiny_files.quantized("llama", "Q4_K_M"), str(_vocab("starcoder"))),
             (tiny_files.quantized("phi3", "Q4_K_M"), QWEN05),
             (tiny_files.quantized("gemma2", "Q8_0"), SMOL)]
    for target, draft in pairs:
        report = inspect_pair(str(target), draft)
        assert not report.same_vocabulary and report.intersection_size > 1000, (target, draft)
        assert 0.5 < report.sample_target_coverage <= 1.0, (target, draft, report.sample_target_coverage)
        assert "intersection" in format_report(report).lower()


def test_gemma3_270m_on_the_engine_drafted_by_smollm2_equals_it_alone(zoo_fetch):
    _generate_both(GEMMA3_270M, SMOL)


def test_a_broken_architecture_is_caught(tiny_files):
    """The logit comparison can fail: gemma2 without its attention soft-cap, or with llama's rotary
    pairing, is far outside the tolerance."""
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    gguf = tiny_files.quantized("gemma2", "Q8_0")
    ids = _news_ids(gguf, TOKENS)
    reference = tiny_gguf.reference_model("gemma2", tiny_files.config("gemma2"), gguf)
    with torch.inference_mode():
        theirs = reference(torch.tensor([ids])).logits[0].float()
    for broken in ("no post-norms", "adjacent rotary"):
        engine = QuantizedGGUFBackend(gguf, threads=2, context=256)
        if broken == "no post-norms":
            for layer in engine.layers:
                layer.post_attn_norm = layer.post_ffn_norm = None
        else:
            engine.shape = dataclasses.replace(engine.shape, rope_pairs="adjacent")
        engine.stack = engine._layer_stack()
        mean_share, _, _ = _shares(engine.extend(ids, all_logits=True), theirs)
        assert mean_share > 2 * MEAN_LOGIT_TOLERANCE, (broken, mean_share)


def test_an_architecture_the_engine_does_not_run_is_refused_in_one_line(tmp_path):
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.generation.members import resolve_engine

    gpt2 = tiny_gguf.write_other_architecture(tmp_path / "gpt2.gguf")
    with pytest.raises(InputError, match=r"not 'gpt2'.*llama\.cpp") as caught:
        QuantizedGGUFBackend(gpt2)
    assert "\n" not in str(caught.value)
    assert resolve_engine(str(gpt2), "auto", "draft") == "llama.cpp"  # auto sends it where it runs


# -- gemma-3-270m: the real model ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma_engine(zoo_fetch):
    from anypair.backends.sources import gguf_of

    return _engine(gguf_of(GEMMA3_270M), context=512)


def test_gemma3_270m_perplexity_on_news_is_llama_cpps_within_1_percent(gemma_engine):
    from anypair.backends.llama_cpp import LlamaCppBackend
    from anypair.backends.sources import gguf_tokenizer, gguf_of
    from anypair.benchmarking.sweep import DEFAULT_ARTICLES, articles_from_jsonl

    gguf = gguf_of(GEMMA3_270M)
    tokenizer, _ = gguf_tokenizer(GEMMA3_270M, gguf)
    ids = tokenizer("\n\n".join(articles_from_jsonl(DEFAULT_ARTICLES)), add_special_tokens=False)["input_ids"][:400]
    ids = [tokenizer.bos_token_id] + ids  # a base model: text starts after <bos>
    gemma_engine.reset()
    ours = tiny_gguf.perplexity(gemma_engine.extend(ids, all_logits=True), ids)
    theirs = tiny_gguf.perplexity(LlamaCppBackend(gguf, name="llama.cpp", threads=2, context=512)
                                  .extend(ids, all_logits=True), ids)
    assert 1 < theirs < 100, theirs  # it reads news: far from its 262,144-token uniform
    assert abs(ours / theirs - 1) < PERPLEXITY_TOLERANCE, (ours, theirs)
    # and past its 512-position window? the context here is 401 < 512: the window is covered by the
    # tiny gemma3 above (16 positions) and by test_generation's rollback test on this model (700 tokens)
