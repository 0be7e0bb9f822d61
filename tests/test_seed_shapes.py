"""Seed-shaped GGUFs (anypair/zoo/seed_shapes.py, seed_writer.py, seed_vocab.py, seed_blocks.py) and
`anypair bench --target-shape` (benchmarking/seed_bench.py).

No real-size file is written here: the real shapes are checked through their tensor plans (against
the published sizes of the real Q4_K_M files), and small shapes of the same families go through the
same writer, then are read back, run on the gguf engine and on llama.cpp, cached and benchmarked.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from anypair.zoo import seed_shapes
from anypair.zoo.seed_shapes import SHAPES, SeedShape, tensor_plan

#: published sizes of the real Q4_K_M files (GB, the hub's listing: bartowski's and TheBloke's
#: conversions), which a plan with one wrong shape or type would miss by far more than 1%
PUBLISHED_Q4_K_M_GB = {"gemma-2-9b": 5.76, "codellama-13b": 7.87, "phi-3-medium-128k": 8.57, "qwen2.5-7b": 4.68,
                       "llama-3.1-8b": 4.92}


def _small(name: str, **changes) -> SeedShape:
    """`name`'s family at a few MB: 2 layers of 256 (gemma2: 3 layers, so both window kinds run)."""
    layers = 3 if SHAPES[name].arch == "gemma2" else 2
    shape = SHAPES[name].scaled(name=f"small-{name}", layers=layers, hidden=256, ffn=512, heads=4, kv_heads=2,
                                head_dim=64)
    return dataclasses.replace(shape, **changes)


#: one small shape per family and feature: codellama (Llama-2 + 16 extra tokens), phi3 (fused, Q5_K,
#: long rope), gemma2 (Gemma's 256k from tokenizer.json, tied Q6_K head, soft-caps), and qwen2 (biases)
#: and llama3 (rope_freqs) over Llama-2's vocabulary (their own 151k/128k vocabularies take gguf's
#: reader 5-10 s to copy)
SMALL = {"codellama-13b": _small("codellama-13b"), "phi-3-medium-128k": _small("phi-3-medium-128k"),
         "gemma-2-9b": _small("gemma-2-9b"),
         "qwen2.5-7b": _small("qwen2.5-7b", tokenizer="llama-spm", vocab=32000),
         "llama-3.1-8b": _small("llama-3.1-8b", tokenizer="llama-spm", vocab=32000)}


@pytest.fixture(scope="module")
def small_files(zoo_fetch, tmp_path_factory):
    from anypair.zoo.seed_writer import write_seed_gguf

    folder = tmp_path_factory.mktemp("seeds")
    return {name: write_seed_gguf(shape, folder / f"{shape.name}.gguf", progress=False)
            for name, shape in SMALL.items()}


# -- the real shapes' plans -------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SHAPES))
def test_each_plan_is_the_size_of_the_real_q4_k_m_file(name):
    gb = seed_shapes.file_size(SHAPES[name]) / 1e9
    assert abs(gb - PUBLISHED_Q4_K_M_GB[name]) / PUBLISHED_Q4_K_M_GB[name] < 0.01, (name, gb)


def test_the_plan_follows_llama_cpps_q4_k_m_rule():
    plan = {t.name: t for t in tensor_plan(SHAPES["qwen2.5-7b"])}
    v_wide = [i for i in range(28) if plan[f"blk.{i}.attn_v.weight"].type_name == "Q6_K"]
    down_wide = [i for i in range(28) if plan[f"blk.{i}.ffn_down.weight"].type_name == "Q6_K"]
    # use_more_bits: the first and last eighth, and every third layer between
    assert v_wide == down_wide == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]
    assert plan["output.weight"].type_name == "Q6_K" and plan["token_embd.weight"].type_name == "Q4_K"
    assert plan["blk.0.attn_q.weight"].shape == (3584, 3584) and plan["blk.0.attn_k.weight"].shape == (512, 3584)
    assert plan["blk.3.ffn_down.weight"].shape == (3584, 18944) and plan["blk.0.attn_q.bias"].type_name == "F32"
    gemma = {t.name: t for t in tensor_plan(SHAPES["gemma-2-9b"])}
    assert "output.weight" not in gemma and gemma["token_embd.weight"].type_name == "Q6_K"  # tied: the head's type
    assert gemma["blk.0.attn_q.weight"].shape == (4096, 3584) and "blk.41.post_ffw_norm.weight" in gemma
    phi = {t.name: t for t in tensor_plan(SHAPES["phi-3-medium-128k"])}
    assert phi["blk.0.attn_qkv.weight"].type_name == "Q5_K" and phi["blk.0.attn_qkv.weight"].shape == (7680, 5120)
    assert phi["blk.0.ffn_up.weight"].shape == (35840, 5120) and "rope_factors_long.weight" in phi


def test_random_blocks_dequantize_to_zero_mean_and_the_asked_spread():
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from anypair.zoo.seed_blocks import random_blocks

    rng = np.random.default_rng(0)
    for kind in ("Q4_K", "Q5_K", "Q6_K"):
        values = dequantize(random_blocks(kind, 256, 0.02, rng).reshape(-1), GGMLQuantizationType[kind])
        assert abs(values.mean()) < 0.002 and 0.018 < values.std() < 0.022, (kind, values.mean(), values.std())


# -- the tokenizers ---------------------------------------------------------------------------------


def test_codellamas_16_extra_rows_get_its_infill_pieces_and_pads(zoo_fetch):
    from anypair.zoo.seed_vocab import CONTROL, UNUSED, tokenizer_fields

    fields = {f.key: f.value for f in tokenizer_fields("llama-spm", 32016)}
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == len(fields["tokenizer.ggml.scores"]) == 32016
    assert tokens[32007:32011] == ["▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"] and types[32008] == CONTROL
    assert tokens[32015] == "[PAD32015]" and types[32015] == UNUSED and tokens[31999] != "[PAD31999]"


def test_gemmas_tokenizer_json_becomes_sentencepiece_fields(zoo_fetch):
    from anypair.zoo.seed_vocab import BYTE, CONTROL, NORMAL, tokenizer_fields

    fields = {f.key: f.value for f in tokenizer_fields("gemma", 256000)}
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    assert len(tokens) == 256000 and tokens[:4] == ["<pad>", "<eos>", "<bos>", "<unk>"]
    assert fields["tokenizer.ggml.bos_token_id"] == 2 and types[2] == CONTROL
    assert types[tokens.index("<0x0A>")] == BYTE and types[tokens.index("▁the")] == NORMAL
    with pytest.raises(ValueError, match="more than"):
        tokenizer_fields("gemma", 1000)


# -- small files through the same writer -------------------------------------------------------------


@pytest.mark.parametrize("name", list(SMALL))
def test_a_small_file_holds_exactly_the_planned_tensors_and_metadata(small_files, name):
    from gguf import GGMLQuantizationType

    from anypair.backends.gguf_file import GGUFFile

    shape, gguf = SMALL[name], GGUFFile(small_files[name])
    plan = tensor_plan(shape)
    assert list(gguf.tensors) == [t.name for t in plan]
    for tensor in plan:
        found = gguf.tensors[tensor.name]
        assert found.shape == tuple(reversed(tensor.shape)), tensor.name  # ggml order: the row length first
        assert GGMLQuantizationType(found.ggml_type).name == tensor.type_name, tensor.name
    meta = gguf.metadata
    assert gguf.architecture == shape.arch and meta[f"{shape.arch}.block_count"] == shape.layers
    assert meta[f"{shape.arch}.attention.head_count_kv"] == shape.kv_heads
    assert meta[f"{shape.arch}.attention.key_length"] == shape.head_dim
    assert meta["tokenizer.ggml.tokens"].length == shape.vocab and meta["general.file_type"] == 15
    for key, value in shape.extra:
        assert math.isclose(meta[f"{shape.arch}.{key}"], value, rel_tol=1e-6), key


@pytest.mark.parametrize("name", list(SMALL))
def test_a_small_file_runs_on_the_gguf_engine_with_finite_logits(small_files, name):
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    engine = QuantizedGGUFBackend(small_files[name], threads=2, context=256)
    assert engine.shape.vocab == SMALL[name].vocab and engine.shape.head_dim == 64
    # every matrix on a kernel of its own type: none widened to F32 (phi3's Q5_K attn_qkv was, 5.2 GB at 14B)
    expected = {"Q4_K", "Q6_K"} | ({"Q5_K"} if SMALL[name].arch == "phi3" else set())
    assert set(engine.weight_types) == expected, engine.weight_types
    ids = [int(i) for i in np.random.default_rng(1).integers(0, SMALL[name].vocab, 80)]
    logits = engine.extend(ids, all_logits=True)
    assert torch.isfinite(logits).all()
    # sane scales: unit-gain matrices give logits of order one that differ from position to position
    assert 0.3 < float(logits.std()) < 5.0 and float((logits[0] - logits[-1]).abs().mean()) > 0.1


@pytest.mark.parametrize("name", list(SMALL))
def test_a_small_file_loads_in_llama_cpp_and_computes_what_the_engine_computes(small_files, name):
    pytest.importorskip("llama_cpp", reason="llama.cpp is optional (`anypair install llama.cpp`)")
    from anypair.backends.llama_cpp import LlamaCppBackend
    from anypair.backends.llama_cpp_guard import probe_failure
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    failure = probe_failure(small_files[name], 2)
    if failure is not None:
        pytest.skip(failure)
    ids = [int(i) for i in np.random.default_rng(2).integers(0, SMALL[name].vocab, 40)]
    theirs = LlamaCppBackend(small_files[name], threads=2, context=256).extend(ids, all_logits=True)
    ours = QuantizedGGUFBackend(small_files[name], threads=2, context=256).extend(ids, all_logits=True)
    assert torch.isfinite(theirs).all() and theirs.shape == ours.shape
    # the same weights read the same way: measured 0.9993-0.9998 on every family; the engine with its
    # rotary pairs swapped (adjacent <-> halves) gives 0.50-0.81 on the same files
    correlation = float(torch.corrcoef(torch.stack([ours.flatten(), theirs.flatten()]))[0, 1])
    assert correlation > 0.98, (name, correlation)


def test_the_cache_reuses_a_file_by_its_shapes_key(zoo_fetch, tmp_path, monkeypatch):
    from anypair.zoo import seed_writer

    monkeypatch.setattr(seed_shapes, "seed_dir", lambda: tmp_path)
    shape = SMALL["codellama-13b"]
    first = seed_writer.seed_gguf(shape, progress=False)
    stamp = first.stat().st_mtime_ns

    def no_second_write(*args, **kwargs):
        raise AssertionError("a cached shape was written again")

    monkeypatch.setattr(seed_writer, "write_seed_gguf", no_second_write)
    assert seed_writer.seed_gguf(shape, progress=False) == first and first.stat().st_mtime_ns == stamp
    other = dataclasses.replace(shape, ffn=768)
    assert other.key != shape.key and seed_shapes.seed_path(other) != first
    with pytest.raises(AssertionError, match="written again"):  # another shape is another file
        seed_writer.seed_gguf(other, progress=False)
    assert not list(tmp_path.glob("*.partial"))


def test_the_same_shape_gives_the_same_bytes(small_files, tmp_path):
    import hashlib

    from anypair.zoo.seed_writer import write_seed_gguf

    again = write_seed_gguf(SMALL["phi-3-medium-128k"], tmp_path / "again.gguf", progress=False)
    digest = lambda path: hashlib.sha256(path.read_bytes()).hexdigest()  # noqa: E731
    assert digest(again) == digest(small_files["phi-3-medium-128k"])
    other = write_seed_gguf(SMALL["phi-3-medium-128k"], tmp_path / "other.gguf", progress=False, seed=1)
    assert digest(other) != digest(again) and other.stat().st_size == again.stat().st_size


def test_an_unknown_shape_is_one_line_with_advice_and_exit_2(capsys):
    from anypair.cli import main

    for argv in (["seed-gguf", "gemma-9"], ["bench", "--target-shape", "gemma-9"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "unknown seed shape 'gemma-9'" in err and "seed-gguf --list" in err


@pytest.mark.parametrize("one_at_a_time", [False, True])
def test_bench_target_shape_measures_both_engines_and_plots(small_files, tmp_path, one_at_a_time):
    pytest.importorskip("llama_cpp", reason="llama.cpp is optional (`anypair install llama.cpp`)")
    pytest.importorskip("matplotlib")
    from anypair.benchmarking import seed_bench
    from anypair.zoo import seed_writer

    shape = SMALL["codellama-13b"]
    with pytest.MonkeyPatch.context() as patch:  # the small file written above stands in for the cache
        patch.setattr(seed_writer, "seed_gguf", lambda s, progress=True: small_files["codellama-13b"])
        if one_at_a_time:
            patch.setattr(seed_bench, "engine_groups", lambda shape, available, context=0: [("gguf",), ("llama.cpp",)])
        # the whole target's loads (child processes) once, with the contract's kept verdicts on as for a user
        patch.setenv("ANYPAIR_CONTRACT_CACHE", "1")
        result = seed_bench.run_seed_bench(shape, contexts=(40,), ks=(1, 2, 4), prefill_tokens=48, repeats=2,
                                           load_repeats=1, target_loads=0 if one_at_a_time else 2, progress=False)
    assert ("one after the other" in result["settings"]["engines_timed"]) == one_at_a_time
    if not one_at_a_time:
        first, kept = result["target_load"]["samples"]
        assert set(first["parts_s"]) == {"tokenizer", "adapter", "contract", "engine and the rest"}
        assert "holds bitwise" in first["contract"] and "kept" not in first["contract"]
        assert kept["contract"].endswith("(kept from an earlier check of these weights here)")
        # converted by the first load, read back by the second (their times are close at a 32,000-token vocabulary)
        assert first["tokenizer_converted"] and not kept["tokenizer_converted"]
        assert "later loads (both read back)" in seed_bench.format_table(result)
    assert set(result["load"]) == set(result["prefill"]) == {"gguf", "llama.cpp"}
    for engine, load in result["load"].items():
        assert 0 < load["load_s"] <= load["first_logits_s"] and load["peak_rss_GB"] > 0
        assert set(result["step_ms"]["40"][engine]) == {"1", "2", "4"}
        assert all(ms > 0 for ms in result["step_ms"]["40"][engine].values())
    assert result["read_floor_ms"]["40"]["1"] > 0 and "meaningless" in result["what"]
    table = seed_bench.format_table(result)
    assert table.count("\n| 40 |") == 3 and "meaningless" in table
    plot = seed_bench.save_plot(result, tmp_path / "plot.png")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert seed_bench.parse_ks("1-3,8") == [1, 2, 3, 8]


def test_the_pairs_rounds_are_recorded_and_replayed_with_the_same_rows_and_contexts(small_files, tmp_path):
    """`--target-shape NAME --replay` on a small file: the rounds of a real pair (here the test pair,
    Qwen2.5-Coder-0.5B + SmolLM2) are recorded, then the small seed target runs the same forwards."""
    from anypair.benchmarking import replay as rp
    from anypair.zoo import seed_writer

    recorded = rp.record(["def fibonacci(n):"], 12, threads=2, progress=False,
                         target="Qwen/Qwen2.5-Coder-0.5B-Instruct", draft="HuggingFaceTB/SmolLM2-135M-Instruct")
    prompt = recorded[0]
    assert prompt.rounds and all(rows >= 1 and 0 <= accepted < rows for rows, accepted in prompt.rounds)
    # every token after the first comes from a round: its accepted tokens and the target's own
    assert sum(accepted + 1 for _, accepted in prompt.rounds) >= prompt.new_tokens - 1
    assert prompt.contexts[0] == prompt.prompt_tokens and prompt.draft_s > 0 and prompt.real_speedup > 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seed_writer, "seed_gguf", lambda s, progress=True: small_files["codellama-13b"])
        result = rp.replay(SMALL["codellama-13b"], [], recorded=recorded, progress=False)
    row = result["rows"][0]
    assert row["rounds"] == len(prompt.rounds) and row["anypair_ms_per_token"] > 0 and row["target_ms_per_token"] > 0
    assert 0 < row["draft_share"] < 1 and "meaningless" in result["what"]
    assert "| 0 |" in rp.format_replay(result)


def test_the_target_alones_step_is_timed_between_the_rounds(monkeypatch):
    """replay_on: a single-row step after every round at that round's context (then BASELINE_STEPS after the
    last), each cropped away, so the machine's drift falls on the rounds and the baseline alike."""
    from anypair.benchmarking import replay as rp

    class Engine:
        def __init__(self):
            self.cached_length, self.calls = 0, []

        def reset(self):
            self.cached_length = 0

        def prefill(self, ids):
            self.cached_length = len(ids)

        def extend(self, ids, all_logits=True):
            self.calls.append((self.cached_length, len(ids)))
            self.cached_length += len(ids)

        def crop(self, length):
            self.cached_length = length

    seconds = iter([0.5, 0.1, 0.5, 0.3, 0.5, 0.2] + [0.25] * rp.BASELINE_STEPS)
    monkeypatch.setattr(rp, "_timed", lambda backend, ids: backend.extend(list(ids)) or next(seconds))
    prompt = rp.RecordedPrompt(prompt_tokens=10, new_tokens=7, rounds=[(4, 2), (3, 0), (5, 1)])
    engine = Engine()
    out = rp.replay_on(engine, prompt, list(range(100)))
    rounds_then_steps = [(10, 4), (13, 1), (13, 3), (14, 1), (14, 5), (16, 1)]
    assert engine.calls == rounds_then_steps + [(16, 1)] * rp.BASELINE_STEPS
    assert out["verify_s"] == pytest.approx(1.5) and out["step_s"] == 0.25  # the median of 0.1, 0.3, 0.2 and 5 x 0.25


def test_the_recorded_rounds_are_the_rows_the_target_scored_with_any_drafter():
    """Each round's rows in a request's `round_log` are the proposal's tokens (a tree's alternatives too)
    and the last committed token: what the replay re-runs. The hybrid drafter (the same draft model,
    the prompt's n-grams proposed where they match) records the same way."""
    from anypair.benchmarking import replay as rp
    from anypair.generation.generator import AnyPairGenerator
    from anypair.policies import make_policy

    gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-0.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
                           drafter="hybrid", draft_length=make_policy("constant", 4), threads=2)
    prompt = "def add(a, b):\n    return a + b\n\ndef add3(a, b, c):\n    return a + b + c\n\ndef add"
    stats = gen.generate(prompt, max_new_tokens=24).stats
    assert len(stats.round_log) == stats.rounds
    assert sum(rows - 1 for rows, _ in stats.round_log) == stats.draft_tokens_proposed
    assert sum(kept for _, kept in stats.round_log) == stats.draft_tokens_accepted
    recorded = rp.record([prompt], 24, threads=2, progress=False, drafter="hybrid",
                         target="Qwen/Qwen2.5-Coder-0.5B-Instruct", draft="HuggingFaceTB/SmolLM2-135M-Instruct")
    assert sum(kept + 1 for _, kept in recorded[0].rounds) == recorded[0].new_tokens - 1


def test_the_replayed_policy_passes_on_every_advice_of_the_shipped_one():
    """The handle the replay prices the policy through must forward the advice for trees of candidates
    too (it once did not: the policy's trees were never grown in a replay)."""
    from anypair.benchmarking import replay as rp
    from anypair.policies import AdaptiveLength, DraftLengthPolicy

    inner = AdaptiveLength()
    inner.reset(confidence_stopping=True)  # a model drafter's request: the policy grows trees
    handle = rp._Priced(inner)
    assert inner.branch_confidence() is not None and handle.branch_confidence() == inner.branch_confidence()
    assert handle.stop_confidence() == inner.stop_confidence() and handle.next_length() == inner.next_length()
    own = {n for n, v in vars(DraftLengthPolicy).items() if callable(v) and not n.startswith("_")}
    assert own <= {n for n, v in vars(rp._Priced).items() if callable(v)}, own


def test_the_replayed_policy_prices_rounds_at_the_seed_targets_costs(monkeypatch):
    """At 9B a draft step is ~2% of a target step: the recorded policy must price rounds with the seed
    target's measured forwards (and the draft's step), not with the 1.5B target's."""
    from anypair.benchmarking import replay as rp
    from anypair.policies import AdaptiveLength, FixedCosts

    costs = rp.seed_priced_costs({1: 0.25, 2: 0.26, 3: 0.27, 4: 0.29, 5: 0.30, 6: 0.32, 8: 0.36}, draft_step_s=0.005)
    assert costs.draft_step == pytest.approx(0.02) and costs.verify_slope == pytest.approx(0.05)
    made = []

    class Priced(AdaptiveLength):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            made.append(self)

    monkeypatch.setattr("anypair.policies.AdaptiveLength", Priced)
    rp.record(["def fibonacci(n):"], 6, threads=2, progress=False, target="Qwen/Qwen2.5-Coder-0.5B-Instruct",
              draft="HuggingFaceTB/SmolLM2-135M-Instruct", seed_row_s={1: 0.25, 5: 0.30})
    assert made and isinstance(made[-1].expected_rate.costs, FixedCosts)  # the last made: the recorded one
    priced = made[-1].expected_rate.costs.costs
    assert priced.verify_slope == pytest.approx(0.05) and 0 < priced.draft_step < 0.2


def test_a_bench_that_cannot_fit_in_memory_is_refused_before_anything_loads(monkeypatch):
    from anypair import machine
    from anypair.benchmarking.seed_bench import memory_needed, run_seed_bench
    from anypair.errors import InputError

    phi = SHAPES["phi-3-medium-128k"]
    # its Q5_K attn_qkv runs on the Q5_K kernel (no F32 copy, once 5.2 GB): the engines' shares of the file only
    assert memory_needed(phi) == pytest.approx(2.91 * seed_shapes.file_size(phi), rel=1e-6)
    # a type without a kernel is counted as its F32 copy (what Q5_K was)
    from anypair.kernels import ops
    monkeypatch.setattr(ops, "NATIVE_TYPES", {k: v for k, v in ops.NATIVE_TYPES.items() if v != "Q5_K"})
    widened = memory_needed(phi) - 2.91 * seed_shapes.file_size(phi)
    assert 5.0e9 < widened < 5.4e9, widened
    monkeypatch.setattr(machine, "available_memory", lambda: 10 << 20)
    with pytest.raises(InputError, match=r"needs ~.* GB of memory for one engine and 0\.0 GB is available"):
        run_seed_bench(SMALL["codellama-13b"], progress=False)  # refused before the file is even looked for


def test_engines_that_fit_only_one_at_a_time_are_timed_one_after_the_other():
    """CodeLlama-13B's file is 7.9 GB: both engines at once need ~23 GB, each alone 9-14 GB."""
    from anypair.benchmarking.seed_bench import engine_groups, memory_needed

    code = SHAPES["codellama-13b"]
    assert engine_groups(code, None) == engine_groups(code, 64 << 30) == [("gguf", "llama.cpp")]
    assert memory_needed(code) > 22e9
    assert engine_groups(code, int(22e9)) == [("gguf",), ("llama.cpp",)]
    # its keys and values: 0.82 MB a position for each engine, 3.3 GB each at 4,000
    assert 6.5e9 < memory_needed(code, context=4000) - memory_needed(code) < 6.7e9
    assert engine_groups(code, int(24e9), context=4000) == [("gguf",), ("llama.cpp",)]


def test_the_page_cache_share_of_a_file_just_read_is_whole(tmp_path):
    from anypair.benchmarking.seed_bench import page_cache_share

    path = tmp_path / "some.bin"
    path.write_bytes(bytes(range(256)) * 4096 * 3)  # 3 MB, 768 pages
    path.read_bytes()
    assert page_cache_share(path) == 1.0
    (tmp_path / "empty.bin").touch()
    assert page_cache_share(tmp_path / "empty.bin") is None
