"""Continuous batching is exact: rows of several sequences scored in one forward of the GGUF engine
get bitwise the logits each gets alone (SIMD and reference paths, crop and rollback per sequence),
and `AnyPairGenerator.generate_many` returns what `generate` returns one request at a time, greedy
and seeded sampling. (Over HTTP: tests/test_serve.py.)

SmolLM2-135M (llama: Q4_1/Q8_0 blocks) is the model: the property is mechanical, not the model's."""
from __future__ import annotations

import pytest
import torch

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _gguf(name: str):
    from anypair.zoo.registry import ZOO_MODELS
    from anypair.zoo.served_gguf import gguf_file

    return gguf_file(ZOO_MODELS[name], progress=False)


@pytest.fixture(scope="module")
def engines():
    """(an engine of 3 slots, an engine of 1) on the same file."""
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    path = _gguf(SMOL)
    return (QuantizedGGUFBackend(path, name="batched", threads=2, context=256, slots=3),
            QuantizedGGUFBackend(path, name="alone", threads=2, context=256))


# three sequences of different lengths; the third's prompt spans more than one prefill chunk (64)
PROMPTS = [list(range(300, 305)), list(range(1000, 1017)), list(range(2000, 2090))]


def test_rows_of_three_sequences_in_one_call_equal_each_alone_bitwise(engines):
    from anypair.backends.base import SequenceRows

    batched, alone = engines
    batched.set_slots(3)
    # prefill: the first two prompts whole, the third in two chunks, together in two calls
    first = batched.forward_rows([SequenceRows(0, PROMPTS[0], "all"), SequenceRows(1, PROMPTS[1], "last"),
                                  SequenceRows(2, PROMPTS[2][:64], "none")])
    second = batched.forward_rows([SequenceRows(2, PROMPTS[2][64:], "all")])
    expected = []
    for prompt in PROMPTS:
        alone.reset()
        expected.append(alone.extend(prompt, all_logits=True))
    assert torch.equal(first[0], expected[0])
    assert torch.equal(first[1], expected[1][-1])
    assert first[2] is None and torch.equal(second[0], expected[2][64:])

    # a decode round of 1, 4 and 2 rows, in another slot order; then each rolls back its own
    rounds = [{2: [7, 8], 0: [11], 1: [40, 41, 42, 43]}, {1: [5], 0: [6, 7, 8], 2: [9]}]
    kept = [{0: 1, 1: 2, 2: 0}, {0: 2, 1: 1, 2: 1}]  # rows each keeps per round (a rejection crops the rest)
    lengths = {s: len(p) for s, p in enumerate(PROMPTS)}
    history = {s: list(p) for s, p in enumerate(PROMPTS)}
    for round_rows, keep in zip(rounds, kept):
        got = batched.forward_rows([SequenceRows(s, ids, "all") for s, ids in round_rows.items()])
        for (slot, ids), logits in zip(round_rows.items(), got):
            alone.reset()
            alone.extend(history[slot])
            assert torch.equal(logits, alone.extend(ids, all_logits=True)), f"slot {slot}"
            lengths[slot] += keep[slot]
            history[slot] += ids[:keep[slot]]
            batched.sequence(slot).crop(lengths[slot])
    assert [batched.sequence(s).cached_length for s in range(3)] == [lengths[s] for s in range(3)]


def test_a_slot_behaves_as_an_engine_of_its_own(engines):
    batched, alone = engines
    batched.set_slots(3)
    views = [batched.sequence(s) for s in range(3)]
    for view, prompt in zip(views, PROMPTS):  # interleaved: each slot's state is its own
        view.prefill(prompt[:3])
    for view, prompt in zip(views, PROMPTS):
        got = view.extend(prompt[3:], all_logits=True)
        assert torch.equal(got, alone.prefill(prompt[:3]) is not None and alone.extend(prompt[3:], all_logits=True))
    with pytest.raises(ValueError, match="slot 3 of 3"):
        batched.sequence(3)
    with pytest.raises(ValueError, match="one call per slot"):
        from anypair.backends.base import SequenceRows

        batched.forward_rows([SequenceRows(0, [1]), SequenceRows(0, [2])])


def test_the_reference_path_of_several_sequences_equals_each_alone(engines):
    """The layer stack alone (no head) on the scalar reference and the SIMD path: rows of two
    sequences in one call equal each sequence's rows alone, and the two paths agree."""
    from anypair.kernels import dequant_rows

    engine, one = engines
    a, b = list(range(500, 503)), list(range(700, 702))
    for use_reference in (True, False):
        engine.set_slots(1)
        engine.set_slots(2)  # fresh caches
        x = dequant_rows(engine.embedding, a + b)
        together = engine.stack.forward_seqs(x, [(len(a), 0, 0), (len(b), 0, 1)], 2, use_reference=use_reference)
        for ids, rows in ((a, together[:len(a)]), (b, together[len(a):])):
            alone = one.stack(dequant_rows(one.embedding, ids), 0, 2, use_reference=use_reference)
            assert torch.equal(rows, alone)
        # the next rows of slot 1, alone in a call, read what the shared call cached
        nxt = engine.stack.forward_seqs(dequant_rows(engine.embedding, [9]), [(1, len(b), 1)], 2,
                                        use_reference=use_reference)
        expect = one.stack(dequant_rows(one.embedding, [9]), len(b), 2, use_reference=use_reference)
        assert torch.equal(nxt, expect)
        if use_reference:
            reference_rows = together.clone()
        else:
            assert torch.equal(together, reference_rows)


# -- generate_many == generate, one request at a time -----------------------------------------------

MANY = ["def is_prime(n):", "The capital of France is", "Once upon a time, in a small village,",
        "import numpy as np\n\ndef softmax(x):", "Q: What is 17 * 3?\nA:"]
LENGTHS = [16, 24, 8, 20, 12]


@pytest.fixture(scope="module")
def pair(zoo_fetch):
    from anypair import AnyPairGenerator

    return AnyPairGenerator(SMOL, SMOL, threads=2, context=512)


@pytest.mark.parametrize("sampling", [{}, {"do_sample": True, "temperature": 1.3, "top_p": 0.95}],
                         ids=["greedy", "seeded-sampling"])
def test_generate_many_equals_generate_one_by_one(pair, sampling):
    seeds = [11, 12, 13, 14, 15] if sampling else None
    # 3 slots for 5 requests: two join when the first ones finish
    many = pair.generate_many(MANY, max_new_tokens=LENGTHS, max_batch=3, seed=seeds, **sampling)
    for i, (prompt, n) in enumerate(zip(MANY, LENGTHS)):
        alone = pair.generate(prompt, max_new_tokens=n, seed=seeds[i] if seeds else None, **sampling)
        assert many[i].target_ids == alone.target_ids and many[i].text == alone.text, prompt
    assert max(r.stats.batch_size_max for r in many) == 3
    assert all(r.stats.mean_batch_size >= 1.0 for r in many)


def test_generate_many_refuses_bad_input_in_one_line(pair):
    from anypair.errors import InputError

    with pytest.raises(InputError, match="not both"):
        pair.generate_many(["a"], messages=[[{"role": "user", "content": "b"}]])
    with pytest.raises(InputError, match="one per request"):
        pair.generate_many(["a", "b"], max_new_tokens=[4])
    with pytest.raises(InputError, match="unexpected arguments.*max_token"):
        pair.generate_many(["a"], max_token=4)
    with pytest.raises(InputError, match="logprobs"):  # each request is checked before anything runs
        pair.generate_many(["a", "b"], logprobs=99)


def test_stream_takes_generates_arguments_through_one_check(pair):
    """stream() forwards generate()'s arguments to the one request builder: a typo is one line naming
    it, and its signature (help(), editors) is generate()'s."""
    import inspect

    from anypair.errors import InputError

    with pytest.raises(InputError, match=r"stream\(\) got unexpected arguments \['max_token'\]"):
        pair.stream("a", max_token=4)
    assert list(inspect.signature(pair.stream).parameters) == list(inspect.signature(pair.generate).parameters)


def test_generate_many_takes_every_argument_generate_takes(pair):
    """Log-probabilities, a logit bias, penalties and stop strings reach every request of the batch, and
    each result is what `generate` returns for it alone; results come back, nothing is stashed."""
    arguments = dict(max_new_tokens=8, logprobs=2, logit_bias={13: -100.0}, frequency_penalty=0.5, stop=["\n\n"])
    many = pair.generate_many(MANY[:3], max_batch=3, **arguments)
    for prompt, result in zip(MANY[:3], many):
        alone = pair.generate(prompt, **arguments)
        assert result.target_ids == alone.target_ids and 13 not in result.target_ids
        assert [(e.target_id, e.logprob) for e in result.logprobs] == [(e.target_id, e.logprob) for e in alone.logprobs]


# -- one path: every engine is at least a one-slot engine, and max_batch is checked in one place ------


@pytest.fixture(scope="module")
def torch_alone(smol_alone_fp32):
    """SmolLM2 alone on the torch engine: an engine of one slot."""
    return smol_alone_fp32


def test_a_one_slot_engine_serves_its_one_sequence_through_the_slot_interface(torch_alone):
    from anypair.backends.base import SequenceRows
    from anypair.errors import InputError

    backend = torch_alone.target_backend
    assert (backend.max_slots, backend.slots, backend.kv_bytes_per_slot) == (1, 1, 0)
    slot = backend.sequence(0)  # a view: its length and crop are the engine's one sequence's
    assert slot.engine is backend and slot.index == 0
    with pytest.raises(ValueError, match="slot 1 of 1"):
        backend.sequence(1)
    with pytest.raises(InputError, match="one sequence at a time"):
        backend.set_slots(2)
    prompt = PROMPTS[1]
    backend.reset()  # the generator is shared by the run's modules: whatever ran before is forgotten
    (rows,) = backend.forward_rows([SequenceRows(0, prompt[:8], "none")])
    assert rows is None and backend.cached_length == 8 == slot.cached_length
    (rows,) = backend.forward_rows([SequenceRows(0, prompt[8:], "all")])
    backend.reset()  # the same calls through extend give the same bits (torch is not batch-invariant)
    backend.extend(prompt[:8])
    assert torch.equal(rows, backend.extend(prompt[8:], all_logits=True))


def test_max_batch_is_checked_by_the_scheduler_in_one_line(pair, torch_alone):
    from anypair.errors import InputError
    from anypair.serving.worker import GenerationWorker

    with pytest.raises(InputError, match="must be at least 1"):
        pair.batch_scheduler(0)
    assert torch_alone.batching_unavailable() is not None
    with pytest.raises(InputError, match="cannot batch 2 requests: the target runs on torch, which holds one sequence"):
        torch_alone.generate_many(MANY[:2], max_new_tokens=4, max_batch=2)
    with pytest.raises(InputError, match="cannot batch 3 requests"):
        GenerationWorker(torch_alone, queue_size=4, max_batch=3)  # the server refuses it before it starts
    # one at a time on the torch engine is the same path: generate_many == generate
    many = torch_alone.generate_many(MANY[:2], max_new_tokens=6, max_batch=1)
    assert [r.text for r in many] == [torch_alone.generate(p, max_new_tokens=6).text for p in MANY[:2]]


def test_a_slot_holds_the_memory_of_the_positions_it_wrote_not_of_its_whole_context():
    """`--max-batch 8` costs the KV of what the requests wrote: 8 slots of the default target at an
    8,192 context would hold 1.8 GiB if the caches were resident from the first position (numpy's
    zeros asked for huge pages, and each (layer, head) of a slot is a block of its own)."""
    from pathlib import Path

    from anypair.backends.base import SequenceRows
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    def resident_anonymous() -> int:
        line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("RssAnon:"))
        return int(line.split()[1]) * 1024

    engine = QuantizedGGUFBackend(_gguf(SMOL), name="slots", threads=2, context=8192, slots=4)
    assert engine.kv_bytes_per_slot > 150 * 2**20  # 189 MiB a slot at the full context
    engine.forward_rows([SequenceRows(0, list(range(300, 364)), "none")])  # activations allocated once
    before = resident_anonymous()
    for slot in range(1, 4):
        engine.forward_rows([SequenceRows(slot, list(range(300, 364)), "none")])
    grown = resident_anonymous() - before
    assert grown < 0.1 * 3 * engine.kv_bytes_per_slot, f"3 slots of 64 positions made {grown / 2**20:.0f} MiB resident"
