"""Lossless sampling end to end: tiny random-weight models with REAL tokenizers (the Qwen2.5
tokenizer for the target, SmolLM2's for the draft) run through the real generation path
(`AnyPairGenerator`, `DecodeSession`, `ModelDrafter`, `SamplingVerifier`): every request must emit
exactly the tokens the target samples alone with the same seed, and the first generated tokens must
follow the target's own sampling distribution.

The weights are shaped (not trained) so that the distributions are spread out but testable: each
model puts most of its mass on a few dozen "head" tokens that depend on the context, the rest on
a long tail. The target's head is partly outside the intersection; the draft also likes tokens the
target cannot write and its padded logit rows; the target's padded rows are loud too (the loop
must mask them). p and q therefore differ a lot, so a verifier that trusts the draft is caught.

Statistics: chi-square homogeneity tests of the token counts at generated positions 2 to 4 (the
first position is the target's prefill sample, drafting starts after it), speculative arm versus
the target sampling alone, Bonferroni over positions, false-alarm rate ALPHA (see
test_sampling_stats). The target-alone arm's first token is also checked against the exactly
known p, so the reference itself is right.

Sample sizes: a homogeneity test's power depends on its two samples through n_ref * n_arm /
(n_ref + n_arm) (the chi-square's noncentrality). Every arm at T=1 is compared with one shared
target-alone reference of REFERENCE_N requests (half the cost of a drafted request), so each arm
needs ARM_N = 350 requests for the power that 500 had against a reference of 600 (273 either way).
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from anypair.drafters.base import DraftRequest
from anypair.sampling import PositionNoise, make_generator, warp_logits
from anypair.types import SamplingConfig
from anypair.verifiers.sampling import SamplingVerifier
from test_sampling import T1, AcceptEveryDraftToken  # the verifier broken on purpose
from test_sampling_stats import ALPHA, chi_square_p_value, homogeneity_p_value

TARGET = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPT = "def add(a, b):\n    return"
HIDDEN = 32
TARGET_ROWS = 151_936  # Qwen2.5's LM head: 271 rows more than the tokenizer's 151,665 ids
DRAFT_ROWS = 49_216  # SmolLM2's 49,152 ids padded to a multiple of 64
CHECKED_POSITIONS = (1, 2)  # 0-based: generated tokens 2 and 3


@dataclass
class TinyPair:
    target: tuple  # (model, hf tokenizer)
    draft: tuple
    target_real: int  # tokenizer ids of the target (rows past it are padding)


def shaped_head(rows: int, head_ids: torch.Tensor, loud_ids: torch.Tensor, loudness: float,
                generator: torch.Generator) -> torch.Tensor:
    """LM-head weights: dimension 0 of the hidden state is a large positive constant (see
    `shaped_embeddings`); the tail gets a negative logit from it, loud rows a positive one, head
    tokens context-dependent logits from the other dimensions."""
    weight = torch.zeros(rows, HIDDEN)
    weight[:, 0] = -2.8
    weight[head_ids, 0] = 0.0
    weight[head_ids, 1:] = 0.45 * torch.randn(head_ids.numel(), HIDDEN - 1, generator=generator)
    weight[loud_ids, 0] = loudness
    return weight


def shaped_embeddings(rows: int, generator: torch.Generator) -> torch.Tensor:
    embeddings = torch.randn(rows, HIDDEN, generator=generator)
    embeddings[:, 0] = 4.0
    return embeddings


def build_tiny_pair(target_tok, draft_tok) -> TinyPair:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from anypair.sampling import pair_vocab_map
    from anypair.tokenization import from_hf

    generator = torch.Generator().manual_seed(1234)
    torch.manual_seed(1234)
    target_adapter = from_hf(target_tok, model_vocab_size=TARGET_ROWS)
    draft_adapter = from_hf(draft_tok, model_vocab_size=DRAFT_ROWS)
    vocab_map = pair_vocab_map(target_adapter, draft_adapter)
    target_real, draft_real = target_adapter.vocab_size, draft_adapter.vocab_size

    shared_draft = vocab_map.shared_draft_ids
    pick = shared_draft[torch.randperm(shared_draft.numel(), generator=generator)[:40]]
    target_only = torch.nonzero(vocab_map.target_to_draft[:target_real] < 0).flatten()
    target_only = target_only[torch.randperm(target_only.numel(), generator=generator)[:4]]
    draft_only = torch.nonzero(vocab_map.draft_to_target[:draft_real] < 0).flatten()
    draft_only = draft_only[torch.randperm(draft_only.numel(), generator=generator)[:6]]
    target_head = torch.cat([vocab_map.draft_to_target[pick[:28]], target_only])
    draft_head = torch.cat([pick[4:40], draft_only])  # overlaps the target's shared head, not all of it

    target_config = Qwen2Config(vocab_size=TARGET_ROWS, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                                tie_word_embeddings=False, eos_token_id=target_tok.eos_token_id)
    draft_config = LlamaConfig(vocab_size=DRAFT_ROWS, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                               tie_word_embeddings=False, eos_token_id=draft_tok.eos_token_id)
    target = Qwen2ForCausalLM(target_config).eval()
    draft = LlamaForCausalLM(draft_config).eval()
    target_padding, draft_padding = torch.arange(target_real, TARGET_ROWS), torch.arange(draft_real, DRAFT_ROWS)
    target_embeddings = shaped_embeddings(TARGET_ROWS, generator)
    # padded target rows would swamp everything if the loop did not mask them
    target_lm_head = shaped_head(TARGET_ROWS, target_head, target_padding, 3.0, generator)
    # the draft sees shared tokens as the target does and likes them similarly, but not equally;
    # its padded rows and draft-only tokens hold a good share of its mass, which the intersection drops
    draft_embeddings = shaped_embeddings(DRAFT_ROWS, generator)
    draft_embeddings[shared_draft] = target_embeddings[vocab_map.draft_to_target[shared_draft]]
    draft_lm_head = shaped_head(DRAFT_ROWS, draft_head, draft_padding, 0.8, generator)
    twins = pick[4:28]
    draft_lm_head[twins] = target_lm_head[vocab_map.draft_to_target[twins]]
    draft_lm_head[twins, 1:] += 0.25 * torch.randn(twins.numel(), HIDDEN - 1, generator=generator)
    with torch.no_grad():
        target.model.embed_tokens.weight.copy_(target_embeddings)
        target.lm_head.weight.copy_(target_lm_head)
        draft.model.embed_tokens.weight.copy_(draft_embeddings)
        draft.lm_head.weight.copy_(draft_lm_head)
    return TinyPair((target, target_tok), (draft, draft_tok), target_real)


# -- running many requests through the real loop -------------------------------------------------

N_NEW = 4  # generated tokens per request: the first is the prefill sample, then up to 2 drafted + 1
POSITIONS = (1, 2, 3)  # generated positions checked (0-based); drafting starts at 1
REFERENCE_N = 1200  # target-alone requests at T=1, shared by every T=1 arm
ARM_N = 350  # drafted requests per T=1 arm: 1200 * 350 / 1550 = 271, as 600 * 500 / 1100 = 273 before


def effective_n(reference: int, arm: int) -> float:
    """What a homogeneity test's power depends on (its noncentrality is this times the squared
    distance between the two laws)."""
    return reference * arm / (reference + arm)


@dataclass
class Samples:
    tokens: torch.Tensor  # [requests, N_NEW] generated target ids
    proposed: int
    accepted: int
    draft_failures: int
    rounds: int = 0

    def counts(self, position: int, rows: int) -> torch.Tensor:
        return torch.bincount(self.tokens[:, position], minlength=rows)

    @property
    def acceptance(self) -> float:
        return self.accepted / max(self.proposed, 1)


def sample_requests(gen, cfg: SamplingConfig, n: int, seed: int, assisted: bool = True, verifier_cls=None,
                    stop_confidence: float = 0.0, draft_length: int = 2) -> Samples:
    """`n` requests of N_NEW tokens through `DecodeSession` with the generator's own backends,
    drafter and verifier. One drafter serves all requests (AnyPairGenerator builds one per
    request; its set-up is not what is tested and would dominate the time)."""
    from anypair.drafters.base import NoDrafter
    from run_session import run_alone
    from anypair.generation.loop import DecodeRequest, DecodeSession
    from anypair.policies import make_policy

    noise = PositionNoise()
    drafter = gen._model_drafter(cfg, noise) if assisted else NoDrafter()
    if assisted:
        drafter.confidence_threshold = stop_confidence  # 0: always the full length
    verifier = (verifier_cls or SamplingVerifier)(cfg, make_generator(seed), noise)
    target_ids = gen.target.render(PROMPT, None)
    draft_request = DraftRequest(target_ids, prompt=PROMPT)
    # no EOS: every request runs its N_NEW tokens, so every position has n samples
    request = DecodeRequest(target_ids, N_NEW, frozenset(), (), draft_request)
    tokens, proposed, accepted, failures, rounds = [], 0, 0, 0, 0
    for _ in range(n):
        session = DecodeSession(gen.target_backend, gen.target.tokenizer, drafter, verifier,
                                make_policy("constant", draft_length), request)
        result = run_alone(session)
        tokens.append(result.target_ids)
        proposed += result.stats.draft_tokens_proposed
        accepted += result.stats.draft_tokens_accepted
        failures += result.stats.draft_failed
        rounds += result.stats.rounds
    return Samples(torch.tensor(tokens), proposed, accepted, failures, rounds)


def min_homogeneity_p_value(a: Samples, b: Samples) -> float:
    return min(homogeneity_p_value(a.counts(j, TARGET_ROWS), b.counts(j, TARGET_ROWS)) for j in POSITIONS)


def exact_first_token_probs(gen, cfg: SamplingConfig, target_real: int) -> torch.Tensor:
    model = gen.target.model
    with torch.no_grad():
        logits = model(torch.tensor([gen.target.render(PROMPT, None)])).logits[0, -1].clone()
    logits[target_real:] = float("-inf")
    return warp_logits(logits, cfg)


# -- fixtures ------------------------------------------------------------------------------------


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tokenizers(zoo_fetch):
    from transformers import AutoTokenizer

    from anypair.zoo import model_dir

    return AutoTokenizer.from_pretrained(model_dir(TARGET)), AutoTokenizer.from_pretrained(model_dir(SMOL))


@pytest.fixture(scope="module")
def tiny_pair(tokenizers):
    return build_tiny_pair(*tokenizers)


@pytest.fixture(scope="module")
def tiny_gen(tiny_pair):
    from anypair import AnyPairGenerator

    return AnyPairGenerator(tiny_pair.target, tiny_pair.draft, dtype="fp32", draft_length="constant", num_draft_tokens=2,
                            sampled_drafts="intersection")


@pytest.fixture(scope="module")
def tiny_gen_greedy_drafts(tiny_gen):
    """tiny_gen's members (loaded once: a member passes through as itself) with greedy drafts."""
    from anypair import AnyPairGenerator

    return AnyPairGenerator(tiny_gen.target, tiny_gen.draft, draft_length="constant", num_draft_tokens=2,
                            sampled_drafts="greedy")


@pytest.fixture(scope="module")
def reference_t1(tiny_gen):
    return sample_requests(tiny_gen, T1, n=REFERENCE_N, seed=100, assisted=False)


# -- the distribution tests ----------------------------------------------------------------------


def test_fixture_is_discriminating(tiny_gen, tiny_pair):
    """p must be spread out and partly outside the intersection, and the draft's q (what it
    proposes) must differ from p a lot, else the distribution checks below would be weak."""
    from anypair.sampling import pair_vocab_map, sample_draft_token

    p = exact_first_token_probs(tiny_gen, T1, tiny_pair.target_real)
    assert 0.1 < float(p.max()) < 0.6
    vocab_map = pair_vocab_map(tiny_gen.target.tokenizer, tiny_gen.draft.tokenizer)
    assert float(p[vocab_map.target_to_draft < 0].sum()) > 0.05
    draft_model, draft_tok = tiny_pair.draft
    with torch.no_grad():
        draft_logits = draft_model(torch.tensor([tiny_gen.draft.render(PROMPT, None)])).logits[0, -1]
    draft_probs = torch.softmax(draft_logits, dim=-1)
    assert float(draft_probs[len(draft_tok):].sum()) > 0.05
    noise = PositionNoise()
    noise.rekey(0)
    q = sample_draft_token(draft_logits, vocab_map, T1, noise.exponential(1, TARGET_ROWS)).target_probs
    assert 0.3 < 0.5 * float((p - q).abs().sum()) < 0.95


def test_reference_first_token_follows_exact_p(tiny_gen, tiny_pair, reference_t1):
    """The target-alone arm is the reference: its prefill sample must follow p exactly."""
    p = exact_first_token_probs(tiny_gen, T1, tiny_pair.target_real)
    assert chi_square_p_value(reference_t1.counts(0, TARGET_ROWS), p) > ALPHA


def test_speculative_sampling_keeps_target_distribution(tiny_gen, tiny_pair, reference_t1):
    assert effective_n(REFERENCE_N, ARM_N) >= 0.99 * effective_n(600, 500)  # the power the arms had with 500 and 600
    speculative = sample_requests(tiny_gen, T1, n=ARM_N, seed=101)
    assert speculative.draft_failures == 0
    # every verifier path is taken: acceptances, disagreements, bonus tokens
    assert 0.1 < speculative.acceptance < 0.9, speculative.acceptance
    assert int(speculative.tokens.max()) < tiny_pair.target_real  # padded rows never come out
    assert min_homogeneity_p_value(speculative, reference_t1) > ALPHA / len(POSITIONS)  # Bonferroni


def test_drafting_that_stops_on_its_own_draws_keeps_target_distribution(tiny_gen, reference_t1):
    """A draft that ends its proposal when the probability of what it drew falls below a
    threshold decides the proposal length from its own picks: the output must stay the target's."""
    stopping = sample_requests(tiny_gen, T1, n=ARM_N, seed=103, stop_confidence=0.02, draft_length=3)
    # the threshold must bite some of the time and not all of the time, or the check proves nothing
    drafting_rounds_full = 3 * stopping.rounds
    assert 0 < stopping.proposed < 0.9 * drafting_rounds_full, (stopping.proposed, stopping.rounds)
    assert 0.1 < stopping.acceptance < 0.95, stopping.acceptance
    assert min_homogeneity_p_value(stopping, reference_t1) > ALPHA / len(POSITIONS)


def test_greedy_drafts_as_point_masses_keep_target_distribution(tiny_gen_greedy_drafts, tiny_pair, reference_t1):
    """The default sampled-drafting mode: the draft's greedy text, translated, verified as point
    masses, with and without stopping on the draft's confidence."""
    for seed, stop in ((104, 0.0), (105, 0.05)):
        greedy_drafts = sample_requests(tiny_gen_greedy_drafts, T1, n=ARM_N, seed=seed, stop_confidence=stop)
        assert greedy_drafts.draft_failures == 0
        assert greedy_drafts.proposed > 0 and 0.02 < greedy_drafts.acceptance < 0.95, greedy_drafts.acceptance
        assert int(greedy_drafts.tokens.max()) < tiny_pair.target_real
        assert min_homogeneity_p_value(greedy_drafts, reference_t1) > ALPHA / len(POSITIONS)


@pytest.mark.parametrize("mode", ["intersection", "greedy"])
def test_every_request_is_the_target_alone_with_the_same_seed(tiny_gen, tiny_gen_greedy_drafts, mode):
    """The keyed verifier's defining property through the real loop: request for request, drafting
    emits exactly what the target samples alone from the same seed."""
    gen = tiny_gen if mode == "intersection" else tiny_gen_greedy_drafts
    alone = sample_requests(gen, T1, n=40, seed=150, assisted=False)
    drafted = sample_requests(gen, T1, n=40, seed=150, draft_length=3)
    assert drafted.accepted > 0 and drafted.draft_failures == 0
    assert torch.equal(drafted.tokens, alone.tokens)
    assert len({tuple(row) for row in alone.tokens.tolist()}) > 20  # the requests' keys differ


def test_accept_every_draft_token_is_caught(tiny_gen, reference_t1):
    """The same check with a verifier that trusts the draft: it must fail (so the check can fail)."""
    # at least the power it had with 200 against 600 (150): a check this weak still catches it
    broken = sample_requests(tiny_gen, T1, n=175, seed=102, verifier_cls=AcceptEveryDraftToken)
    assert effective_n(REFERENCE_N, 175) >= effective_n(600, 200)
    assert broken.acceptance == 1.0
    assert min_homogeneity_p_value(broken, reference_t1) < ALPHA / len(POSITIONS)


WARPS = {
    "T0.7-p0.8": SamplingConfig(do_sample=True, temperature=0.7, top_p=0.8),
    "T1.3-k20-p0.9": SamplingConfig(do_sample=True, temperature=1.3, top_k=20, top_p=0.9),
}


@pytest.mark.parametrize("name", list(WARPS))
def test_warped_speculative_sampling_keeps_target_distribution(tiny_gen, name):
    cfg = WARPS[name]
    reference = sample_requests(tiny_gen, cfg, n=250, seed=200, assisted=False)
    speculative = sample_requests(tiny_gen, cfg, n=250, seed=201)
    assert speculative.draft_failures == 0 and speculative.accepted > 0
    assert min_homogeneity_p_value(speculative, reference) > ALPHA / len(POSITIONS)


def test_same_tokenizer_pair_uses_identity_map_and_stays_lossless(tiny_gen, tiny_pair, reference_t1):
    """A Qwen-tokenizer draft with fewer padded rows than the target (151,680 vs 151,936): the
    identity map carries q into the target's rows; the output law is unchanged. The target is the
    tiny pair's, so the target-alone law is reference_t1's (the power of 300 against 300: 150)."""
    from transformers import Qwen2ForCausalLM

    from anypair import AnyPairGenerator

    target_model, target_tok = tiny_pair.target
    draft_rows = 151_680
    config = target_model.config.__class__(**{**target_model.config.to_dict(), "vocab_size": draft_rows})
    draft_model = Qwen2ForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        draft_model.model.embed_tokens.weight.copy_(target_model.model.embed_tokens.weight[:draft_rows])
        head = target_model.lm_head.weight[:draft_rows].clone()
        head[:, 1:] += 0.3 * torch.randn(draft_rows, HIDDEN - 1, generator=generator) * (head[:, 1:] != 0)
        draft_model.lm_head.weight.copy_(head)
    gen = AnyPairGenerator(tiny_gen.target, (draft_model, target_tok), dtype="fp32", draft_length="constant",
                           num_draft_tokens=2, sampled_drafts="intersection")
    assert gen.same_vocabulary
    assert gen.target.model is tiny_pair.target[0]  # the same target: its law alone is reference_t1's
    speculative = sample_requests(gen, T1, n=175, seed=301)
    assert effective_n(REFERENCE_N, 175) >= effective_n(300, 300)
    assert speculative.draft_failures == 0 and speculative.acceptance > 0.3
    assert int(speculative.tokens.max()) < tiny_pair.target_real
    assert min_homogeneity_p_value(speculative, reference_t1) > ALPHA / len(POSITIONS)


# -- the public API: reproducibility, statistics, fallback -------------------------------------


def test_same_seed_same_text_and_statistics(tiny_gen):
    first = tiny_gen.generate(PROMPT, max_new_tokens=12, do_sample=True, temperature=1.0, top_k=30, seed=5)
    again = tiny_gen.generate(PROMPT, max_new_tokens=12, do_sample=True, temperature=1.0, top_k=30, seed=5)
    other = tiny_gen.generate(PROMPT, max_new_tokens=12, do_sample=True, temperature=1.0, top_k=30, seed=6)
    assert again.target_ids == first.target_ids and again.text == first.text
    assert other.target_ids != first.target_ids
    stats = first.stats
    assert stats.rounds > 0 and stats.draft_tokens_proposed > 0
    assert stats.acceptance_rate == stats.draft_tokens_accepted / stats.draft_tokens_proposed
    assert stats.mean_accepted_per_round == stats.draft_tokens_accepted / stats.rounds


def test_draft_without_usable_tokens_falls_back_to_target_samples(tiny_gen, tiny_pair):
    """A draft whose mass is all off the intersection proposes nothing: every round is one target
    sample, the text the target's own with the same seed."""
    from anypair import AnyPairGenerator

    draft_model, draft_tok = tiny_pair.draft
    hopeless = draft_model.__class__(draft_model.config).eval()
    hopeless.load_state_dict(draft_model.state_dict())
    with torch.no_grad():
        hopeless.lm_head.weight[49_152:, 0] = 6.0  # padded rows take everything
    gen = AnyPairGenerator(tiny_gen.target, (hopeless, draft_tok), dtype="fp32", sampled_drafts="intersection")
    assisted = gen.generate(PROMPT, max_new_tokens=10, do_sample=True, seed=9)
    alone = gen.generate(PROMPT, max_new_tokens=10, do_sample=True, seed=9, assisted=False)
    assert assisted.stats.draft_tokens_proposed == 0
    assert assisted.target_ids == alone.target_ids


# -- the real pair -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_pair(zoo_fetch):
    """Qwen2.5-Coder-0.5B with SmolLM2-135M as a user gets them (the default engine: both on the gguf
    engine, the target bitwise batch-invariant), loaded once for the module: each test makes its
    own generator on these members (a loaded member passes through as itself). The tiny pairs above
    run the same loop on torch."""
    from anypair import AnyPairGenerator

    gen = AnyPairGenerator(TARGET, SMOL)
    assert gen.target.engine.engine == "gguf" and gen.draft.engine.engine == "gguf"
    return gen


def test_real_pair_samples_reproducibly_with_statistics(real_pair):
    """Qwen2.5-Coder-0.5B with SmolLM2-135M: sampling runs end to end, the seed fixes the text (the
    target's own: the same without the draft), and the draft's proposals are accepted at a useful rate."""
    from anypair import AnyPairGenerator

    # a constant length without confidence stopping: every round proposes, so acceptance is seen
    loaded = real_pair
    options = dict(max_new_tokens=16, do_sample=True, temperature=0.7, top_p=0.95, seed=11)
    for sampled_drafts in ("greedy", "intersection"):
        # one generator per drafting mode, on the members loaded once (options never change after construction)
        gen = AnyPairGenerator(loaded.target, loaded.draft, draft_length="constant", num_draft_tokens=3,
                               confidence_threshold=0, sampled_drafts=sampled_drafts)
        first = gen.generate("def fibonacci(n):\n", **options)
        again = gen.generate("def fibonacci(n):\n", **options)
        alone = gen.generate("def fibonacci(n):\n", assisted=False, **options)
        assert first.text == again.text == alone.text, sampled_drafts
        assert first.target_ids == again.target_ids == alone.target_ids, sampled_drafts
        assert first.stats.draft_tokens_proposed > 0 and first.stats.acceptance_rate > 0.2, sampled_drafts
        assert not first.stats.draft_failed


def test_seeded_sampling_with_the_default_policy_is_the_target_alone(real_pair):
    """The default adaptive policy times its rounds and the ledger decides whether to draft; the
    seed alone fixes the text: drafted, again, and the target alone give the same tokens."""
    from anypair import AnyPairGenerator

    gen = AnyPairGenerator(real_pair.target, real_pair.draft)  # the default options, a fresh ledger
    options = dict(max_new_tokens=24, do_sample=True, temperature=0.7, seed=12)
    first = gen.generate("def is_prime(n):\n", **options)
    again = gen.generate("def is_prime(n):\n", **options)
    alone = gen.generate("def is_prime(n):\n", assisted=False, **options)
    assert first.stats.draft_tokens_proposed > 0
    assert first.target_ids == again.target_ids == alone.target_ids
