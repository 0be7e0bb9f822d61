"""The gguf engine checked against the world, not against itself: its perplexity on real news text
against llama.cpp's on the same GGUF, its logits against transformers' fp32 forward of the same
(dequantized) weights; the portable C reference compiled and run through the whole forward, bit for
bit the SIMD path's; the SIMD level the build detected, against the CPU's own flags; and the
fallback when there is no C compiler.

Model: SmolLM2-135M-Instruct's Q4_1 GGUF from the zoo (llama architecture; Q4_1 and Q8_0 blocks),
with Qwen2.5-Coder-0.5B's (qwen2: Q5_0/Q8_0/Q4_K/Q6_K) for the portable build's K-quants."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QWEN05 = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
REPO = Path(__file__).resolve().parent.parent
#: tokens of news text scored for the perplexity comparison
PERPLEXITY_TOKENS = 512
#: llama.cpp's perplexity and ours may differ by this share (both quantize activations to 8 bits,
#: each its own way: measured 0.2% here; a wrong rotary, norm or block decoding is off by far more)
PERPLEXITY_TOLERANCE = 0.01


def _gguf(name: str) -> Path:
    from anypair.zoo.registry import ZOO_MODELS
    from anypair.zoo.served_gguf import gguf_file

    return gguf_file(ZOO_MODELS[name], progress=False)


def _news_ids(name: str, count: int) -> list[int]:
    """`count` ids of real CNN/DailyMail articles (shipped with the package) in the model's vocabulary."""
    from anypair.backends.sources import gguf_tokenizer
    from anypair.benchmarking.sweep import DEFAULT_ARTICLES, articles_from_jsonl

    tokenizer, _ = gguf_tokenizer(name, _gguf(name))
    ids = tokenizer("\n\n".join(articles_from_jsonl(DEFAULT_ARTICLES)), add_special_tokens=False)["input_ids"]
    assert len(ids) >= count
    return ids[:count]


def _perplexity(logits: torch.Tensor, ids: list[int]) -> float:
    """exp(mean negative log-likelihood) of ids[1:] under the logits of the positions before them."""
    log_probs = torch.log_softmax(logits[:-1].double(), dim=-1)
    return float(torch.exp(-log_probs.gather(1, torch.tensor(ids[1:])[:, None]).mean()))


@pytest.fixture(scope="module")
def smol_engine(zoo_fetch):
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    return QuantizedGGUFBackend(_gguf(SMOL), name=SMOL, threads=2, context=PERPLEXITY_TOKENS)


def test_perplexity_on_news_text_is_llama_cpps_within_1_percent(smol_engine):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is the reference here (README command 2 installs it)")
    from anypair.backends.llama_cpp import LlamaCppBackend

    ids = _news_ids(SMOL, PERPLEXITY_TOKENS)
    smol_engine.reset()
    ours = _perplexity(smol_engine.extend(ids, all_logits=True), ids)
    reference = LlamaCppBackend(_gguf(SMOL), name="llama.cpp", threads=2, context=PERPLEXITY_TOKENS)
    reference.reset()
    theirs = _perplexity(reference.extend(ids, all_logits=True), ids)
    assert 1 < theirs < 100, theirs  # a model that reads news: not uniform (49,152), not perfect
    assert abs(ours / theirs - 1) < PERPLEXITY_TOLERANCE, (ours, theirs)


#: how far the engine's logits may be from transformers' fp32 forward of the same dequantized weights,
#: over 96 tokens of news: activations rounded to int8 per block (the engine's, and llama.cpp's own
#: q8 activations) move every logit a little. Measured on SmolLM2-135M Q4_1: mean |difference| 0.031
#: of the mean |logit| (llama.cpp on the same file: 0.031 too), the largest 0.039 of the largest
#: logit (llama.cpp: 0.036), the same most likely token at 90% of positions (llama.cpp: 90%; the
#: rest are near-ties of a 135M model reading news). A wrong rotary, norm, bias or block decoding
#: moves them by far more.
MEAN_LOGIT_TOLERANCE = 0.05
MAX_LOGIT_TOLERANCE = 0.06
TOP1_AGREEMENT = 0.85


def test_logits_are_transformers_fp32_forward_of_the_dequantized_weights(smol_engine):
    """transformers reads the GGUF (gguf_file=...), dequantizes every block to fp32 and runs its own
    LlamaForCausalLM: an implementation that shares no code with the engine."""
    from transformers import AutoModelForCausalLM

    gguf = _gguf(SMOL)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    ids = _news_ids(SMOL, 96)
    with torch.inference_mode():
        theirs = model(torch.tensor([ids])).logits[0].float()
    smol_engine.reset()
    ours = smol_engine.extend(ids, all_logits=True)
    assert ours.shape == theirs.shape
    difference = (ours - theirs).abs()
    mean_share = float(difference.mean() / theirs.abs().mean())
    max_share = float(difference.max() / theirs.abs().max())
    agreement = float((ours.argmax(-1) == theirs.argmax(-1)).double().mean())
    assert mean_share < MEAN_LOGIT_TOLERANCE and max_share < MAX_LOGIT_TOLERANCE, (mean_share, max_share)
    assert agreement >= TOP1_AGREEMENT, agreement


# -- the build: the portable reference, the detected SIMD level, no compiler ------------------------

FORWARD_SCRIPT = """
import sys, torch
from anypair.backends.quantized_gguf import QuantizedGGUFBackend
from anypair.kernels import simd_level
out, runs = sys.argv[1], sys.argv[2:]
logits = [QuantizedGGUFBackend(gguf, threads=2, context=64).extend([int(i) for i in ids.split(",")], all_logits=True)
          for gguf, ids in zip(runs[::2], runs[1::2])]
torch.save({"level": simd_level(), "logits": logits}, out)
"""


def _forward_in_a_process(runs: list[tuple[Path, list[int]]], out: Path, **env: str) -> dict:
    """The whole forward of each (GGUF, ids) in a fresh process (the kernels load once per
    process, so a build of another SIMD level needs its own), under `env`."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **env}
    arguments = [str(item) for gguf, ids in runs for item in (gguf, ",".join(map(str, ids)))]
    done = subprocess.run([sys.executable, "-c", FORWARD_SCRIPT, str(out), *arguments],
                          capture_output=True, text=True, env=environment, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return torch.load(out)


def _expected_simd_level() -> str:
    """What the build should detect, read from /proc/cpuinfo here (not through anypair.machine)."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    level = "portable"
    if {"avx2", "fma", "f16c"} <= flags:
        level = "avx2"
        if {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags:
            level = "avx512-vnni"
    cap = os.environ.get("ANYPAIR_KERNEL_SIMD", "").lower()
    order = ["portable", "avx2", "avx512-vnni"]
    return order[min(order.index(level), order.index(cap))] if cap in order else level


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="reads the CPU's flags from /proc/cpuinfo")
def test_the_build_runs_the_simd_level_the_cpu_reports(zoo_fetch):
    """A build that silently came out portable would make every SIMD-against-reference test compare
    the reference with itself."""
    from anypair.kernels import simd_level

    assert simd_level() == _expected_simd_level()


def test_the_portable_build_runs_the_whole_forward_bitwise_as_the_simd_build(zoo_fetch, tmp_path):
    """ANYPAIR_KERNEL_SIMD=portable compiles the scalar reference alone; the whole forward on it
    (every matrix type of both models: Q4_1, Q8_0, Q5_0, Q4_K, Q6_K; norms, SiLU, attention) gives
    the bits of this process's SIMD build."""
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.kernels import simd_level

    if simd_level() == "portable":
        pytest.skip("this CPU has no SIMD path: the build is the portable reference already")
    runs = [(_gguf(SMOL), _news_ids(SMOL, 24)), (_gguf(QWEN05), _news_ids(QWEN05, 6))]
    simd = [QuantizedGGUFBackend(gguf, threads=2, context=64).extend(ids, all_logits=True) for gguf, ids in runs]
    portable = _forward_in_a_process(runs, tmp_path / "portable.pt", ANYPAIR_KERNEL_SIMD="portable")
    assert portable["level"] == "portable"
    for (gguf, _), ours, reference in zip(runs, simd, portable["logits"]):
        assert torch.equal(ours, reference), \
            f"{gguf.name}: max |difference| {float((ours - reference).abs().max())}"


NO_COMPILER_SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from anypair import AnyPairGenerator
from anypair.errors import AnyPairError
gen = AnyPairGenerator(sys.argv[1], None, threads=1)
print(gen.target.engine.engine, gen.generate("def add(a, b):", max_new_tokens=4).stats.new_tokens)
try:
    AnyPairGenerator(sys.argv[1], None, engine="gguf")
except AnyPairError as error:
    print("refused:", error)
"""


def test_without_a_compiler_the_target_runs_on_torch_after_one_warning(zoo_fetch, tmp_path):
    """No gcc, no cc, no $CC on the PATH: "auto" says so once and serves the target on torch; the
    gguf engine asked for by name is refused in one line."""
    bare = tmp_path / "bin"  # a PATH with no compiler on it
    bare.mkdir()
    environment = {key: value for key, value in os.environ.items() if key != "CC"}
    environment.update(PATH=str(bare), PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", NO_COMPILER_SCRIPT, SMOL], capture_output=True, text=True,
                          env=environment, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    served, refused = done.stdout.splitlines()
    assert served == "torch 4"
    assert refused.startswith("refused: no C compiler found") and "install gcc" in refused
    warnings = [line for line in done.stderr.splitlines() if "no C compiler" in line]
    assert len(warnings) == 1 and "runs on torch instead" in warnings[0], done.stderr[-2000:]
