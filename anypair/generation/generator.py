"""AnyPairGenerator: the front door. Its options are checked once (`GeneratorOptions`) before the
pair loads; each request is checked (`GenerationRequest`), planned by the pure `plan_request`
(drafter, verifier, policy), and run as a `DecodeSession` through the batch scheduler
(`generation.batch`): `generate` and `stream` as a batch of one, `generate_many` and the server's
worker with up to `max_batch` requests sharing each forward.

    gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-1.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
    result = gen.generate("def fib(n):", max_new_tokens=64)
    for chunk in gen.stream(messages=[{"role": "user", "content": "Hi"}]): print(chunk, end="")
"""
from __future__ import annotations

import contextlib
import inspect
import os
from dataclasses import dataclass
from typing import Callable, Generator, Iterator, Optional, Sequence, Union

import torch

from anypair.backends.engines import verification_slope
from anypair.drafters import uses_draft_model
from anypair.drafters.base import DraftRequest, Drafter, NoDrafter
from anypair.drafters.hybrid import HybridDrafter
from anypair.errors import InputError
from anypair.generation.batch import BatchScheduler, CollectingSink, run_rounds
from anypair.generation.loop import DecodeRequest, DecodeSession
from anypair.generation.text import TextStream
from anypair.generation.options import (
    DEFAULT_DRAFT_WINDOW,
    DrafterKind,
    GenerationRequest,
    GeneratorOptions,
    PairFacts,
    RequestPlan,
    VerifierKind,
    plan_request,
)
from anypair.policies import (ConstantLength, DraftLengthPolicy, TimedCosts, draft_prompt_window,
                              estimated_step_costs)
from anypair.policies.adaptive import PairMemory
from anypair.policies.batch import BatchCosts
from anypair.policies.ledger import DraftingHistory, DraftingLedger, LedgerDecision, RequestOutcome
from anypair.sampling.keyed import PositionNoise
from anypair.types import GenerationResult, SamplingConfig
from anypair.verifiers.base import Verifier
from anypair.verifiers.constraints import (
    Constraints,
    Grammar,
    GrammarCompiler,
    LogitBias,
    RepetitionPenalties,
    TokenConstraint,
)

ModelSpec = Union[str, "os.PathLike[str]", tuple]  # hub id, local folder, .gguf file, or (model, hf_tokenizer)


@dataclass(frozen=True)
class _LedgerEntry:
    """A drafting request's place in its DraftingLedger, settled when the request finishes."""

    ledger: DraftingLedger
    decision: LedgerDecision


class AnyPairGenerator:
    """Speculative decoding of `target` with `draft`, whatever their tokenizers.

    Args:
        target, draft: hub ids (the offline zoo's copy is used when present), local folders, or
            already-loaded `(model, hf_tokenizer)` pairs. `draft=None` runs the target alone
            (or prompt lookup with `drafter="lookup"`).
        drafter: "model" (the draft model), "lookup" (n-grams from prompt and output, no model),
            "hybrid" (lookup when it has a long match, the model otherwise) or a `Drafter`.
        draft_length: "adaptive" (default), "heuristic", "constant" or a `DraftLengthPolicy`;
            `num_draft_tokens` is the constant length, the heuristic's start, or the adaptive
            policy's cap (where it also starts).
        confidence_threshold: the draft model ends a round once its probability that the whole
            proposal is right (the product of its top probabilities) would fall below this.
            None (default): the adaptive policy sets it each round from the measured costs; 0: off.
        sampled_drafts: how the draft model proposes when sampling. "greedy" (default): its greedy
            text, translated as in greedy decoding, verified as point masses (a token is kept with
            the target's probability of it); "intersection": token-level intersection sampling (the
            draft samples among tokens the target also has and hands over its distributions).
            Both keep the target's distribution exactly; which is faster depends on the pair:
            intersection sampling cannot propose the target's own merges of text the draft splits
            differently (runs of spaces in code, for one), which greedy translation can.
        draft_window: the draft model reads only the last this many tokens of its prompt (0: all of
            it; default None: by the draft's estimated cost, `policies.draft_prompt_window`: 640 for
            a draft of up to 0.15 of a target step such as SmolLM2-135M, fewer for a dearer one,
            at least 64). Its prompt read is paid before any round and on every request; a small
            draft predicts from the last few hundred tokens anyway (10 CNN/DailyMail prompts, the
            default pair: 640 / 1,024 / all took 0.87x / 0.93x / 0.92x the time a token of 256).
        weights: how the torch engine holds and multiplies the weights: "auto" (default: the
            fastest format of this machine that passes the target's batch-invariance contract, checked
            on the model at load: bf16 on CPUs with AVX-512-BF16/AMX and on GPUs, else fp16 weights
            with fp32 math through fbgemm on AVX2+F16C CPUs, else fp32), "fp32", "fp16", "bf16", or
            "int8" (dynamic int8: not batch-invariant, so drafts only). The baseline (`assisted=False`)
            runs on the same weights and kernels: outputs are the target's own as served.
        draft_weights: the same for a draft on the torch engine (default "auto": the fastest format).
        dtype: the older name of `weights` ("bf16", "fp32", "fp16" or a torch dtype).
        engine, draft_engine: "auto" (default) or an engine of `anypair.backends.engines` ("gguf",
            "llama.cpp", "torch", or one added with `register_engine`). auto runs a member with a
            GGUF the gguf engine runs (llama, qwen2/3, phi3, gemma2/3: every zoo model, a user's .gguf) on it, target
            and draft alike; another GGUF's draft on llama.cpp when llama-cpp-python is installed, a
            .gguf target of another architecture on llama.cpp; everything else on torch
            (`anypair.generation.members`). A llama.cpp TARGET is not batch-invariant: its output can
            differ from its own single-token greedy run at near-ties (see README).
        context: context length (default: on the gguf engine the model's trained context as far as free
            memory holds its KV cache; on llama.cpp min(trained, 8192)).
        backend: "torch" (default) or "ipex" for torch-engine members (optional; checked against torch).
        linear_kernel: for fp32 on a CPU: "auto" (default: time torch's linear against anypair's
            skinny kernel and keep the faster), "skinny" or "torch". See anypair.backends.skinny_linear.
        threads: CPU threads (every engine).
        skip_losing_drafts: with the adaptive policy (default True), remember across requests whether
            drafting saved time (`policies.ledger.DraftingLedger`, one per drafter and greedy or
            sampling): while it has been losing on recent requests, a request runs the target alone,
            skipping the draft's prompt read and rounds, and every few requests one drafts again to
            check. Sampling consults it too: a seed gives the target's own text either way.
            False: every request drafts.
        candidate_trees: where the target's engine scores trees of rows (the gguf engine; default
            True), a model drafter adds its other choices (its second choice at a step, its first
            where it stopped unsure, the translation's held-back last token) as alternatives,
            verified in the same forward (each row bitwise its chain's: the output is the same);
            False: chains only.
    """

    def __init__(self, target: ModelSpec, draft: Optional[ModelSpec] = None, *,
                 drafter: Union[str, Drafter] = "model", draft_length: Union[str, DraftLengthPolicy] = "adaptive",
                 num_draft_tokens: Optional[int] = None, confidence_threshold: Optional[float] = None,
                 sampled_drafts: str = "greedy", draft_window: Optional[int] = DEFAULT_DRAFT_WINDOW,
                 weights: Optional[str] = None, draft_weights: str = "auto",
                 dtype: Union[str, torch.dtype, None] = None, engine: str = "auto", draft_engine: str = "auto",
                 context: Optional[int] = None, device: Optional[str] = None, backend: str = "torch",
                 linear_kernel: str = "auto", threads: Optional[int] = None,
                 skip_losing_drafts: bool = True, candidate_trees: bool = True) -> None:
        self._load(target, draft, GeneratorOptions.of(
            drafter=drafter, draft_length=draft_length, num_draft_tokens=num_draft_tokens,
            confidence_threshold=confidence_threshold, sampled_drafts=sampled_drafts, draft_window=draft_window,
            weights=weights, draft_weights=draft_weights, dtype=dtype, engine=engine, draft_engine=draft_engine,
            context=context, device=device, backend=backend, linear_kernel=linear_kernel, threads=threads,
            skip_losing_drafts=skip_losing_drafts, candidate_trees=candidate_trees))

    @classmethod
    def from_options(cls, target: ModelSpec, draft: Optional[ModelSpec], options: GeneratorOptions) -> AnyPairGenerator:
        """A generator from an options object made beforehand (the CLI checks its flags that way
        before anything loads)."""
        generator = cls.__new__(cls)
        generator._load(target, draft, options)
        return generator

    def _load(self, target: ModelSpec, draft: Optional[ModelSpec], options: GeneratorOptions) -> None:
        from anypair.generation.members import DraftPrompt, load_member

        if options.drafter == "hybrid" and draft is None:
            raise InputError("drafter='hybrid' needs a draft model: AnyPairGenerator(target, draft), "
                             "or drafter='lookup' without one")
        self.options = options
        if options.threads is not None:
            torch.set_num_threads(options.threads)
        common = dict(device=options.device, backend=options.backend, linear_kernel=options.linear_kernel,
                      threads=options.threads, context=options.context)
        self.target = load_member(target, role="target", engine=options.engine, weights=options.weights, **common)
        self.draft = (load_member(draft, role="draft", engine=options.draft_engine, weights=options.draft_weights,
                                  **common) if draft is not None else None)
        self.target_backend = self.target.backend
        self.draft_backend = self.draft.backend if self.draft is not None else None
        self._draft_prompt = DraftPrompt(self.target, self.draft) if self.draft is not None else None
        # the request that owns the models' KV caches and the drafter now (None: free); see _claim
        self._open_request: Optional[str] = None
        # a greedy model drafter per slot of the draft's engine, kept across requests: it holds no
        # state past `start`, and building one (its translator) costs more than a short request
        self._greedy_drafters: dict[int, Drafter] = {}
        self._same_vocabulary: Optional[bool] = None
        # what drafting measured on earlier requests, per (drafter kind, sampling)
        self._history: dict[tuple[str, bool], DraftingHistory] = {}
        # a server's cap on one request's positions, and why (`limit_positions`); None: the context
        self._position_limit: Optional[int] = None
        self._position_limit_why = ""
        # each engine's one cost model (a forward of n rows, measured by every scheduler of this
        # generator): the length policies, the ledger, the batch's plan and row shares read them
        self._batch_costs = BatchCosts(self._verify_slope(), verification_slope(self.draft) if self.draft else 0.0)
        self._pair = PairFacts(has_draft_model=self.draft is not None)
        self._grammar_compiler: Optional[GrammarCompiler] = None

    # -- the pair -------------------------------------------------------------------------------
    @property
    def engines(self) -> str:
        """What runs each model, for reports: 'target torch fp16 (...); draft llama.cpp x.gguf (...)'."""
        members = (("target", self.target), ("draft", self.draft))
        return "; ".join(f"{role} {m.engine.describe()}" for role, m in members if m is not None)

    @property
    def same_vocabulary(self) -> bool:
        """Whether target and draft ids mean the same bytes (decided once: it scans both vocabularies)."""
        if self.draft is None:
            return False
        if self._same_vocabulary is None:
            from anypair.tokenization import same_vocabulary

            self._same_vocabulary = same_vocabulary(self.target.tokenizer, self.draft.tokenizer)
        return self._same_vocabulary

    def _model_drafter(self, sampling: SamplingConfig, noise: Optional[PositionNoise], slot: int = 0) -> Drafter:
        """A model drafter on slot `slot` of the draft's engine (a request's own slot in a batch)."""
        from anypair.drafters.model import ModelDrafter

        assert self.draft is not None and self.draft_backend is not None  # plan_request's "model" needs one
        if not sampling.do_sample and slot in self._greedy_drafters:
            return self._greedy_drafters[slot]
        backend = self.draft_backend.sequence(slot)
        draft_prompt = self._draft_prompt
        assert draft_prompt is not None

        def render(request: DraftRequest) -> list[int]:
            return draft_prompt.ids(request.prompt, request.messages, request.target_prompt_ids, request.tools)

        drafter = ModelDrafter(backend, self.draft.tokenizer, self.target.tokenizer, render,
                               same_vocabulary=self.same_vocabulary,
                               confidence_threshold=self.options.confidence_threshold,
                               sampling=sampling, noise=noise,
                               intersection_sampling=self.options.sampled_drafts == "intersection",
                               prompt_window=self.draft_window)
        if not sampling.do_sample:
            self._greedy_drafters[slot] = drafter
        return drafter

    @property
    def draft_window(self) -> int:
        """Prompt tokens the draft model reads (0: all): the option, or by the draft's estimated cost."""
        if self.options.draft_window is not None:
            return self.options.draft_window
        target = self.target
        return self.draft_window_beside(target.weights_bytes, target.num_layers, target.engine.engine)

    def draft_window_beside(self, target_bytes: int, target_layers: int, target_engine: str) -> int:
        """Prompt tokens the draft model would read beside a target of that size (0: all): its step
        estimated from the bytes of weights each reads (`policies.estimated_step_costs`, 4 bytes for one
        fp32 parameter). The replay asks it for a seed target."""
        if self.draft is None:
            return 0
        draft = self.draft
        costs = estimated_step_costs(target_bytes // 4, target_layers, draft.weights_bytes // 4, draft.num_layers,
                                     multi_token_slope=self._verify_slope(), target_engine=target_engine,
                                     draft_engine=draft.engine.engine)
        return draft_prompt_window(costs.draft_step)

    def _drafter(self, kind: DrafterKind, sampling: SamplingConfig, noise: Optional[PositionNoise],
                 slot: int) -> Drafter:
        if kind == "none":
            return NoDrafter()
        if kind == "given":
            assert isinstance(self.options.drafter, Drafter)
            return self.options.drafter
        if kind == "model":
            return self._model_drafter(sampling, noise, slot)
        if kind == "lookup":
            from anypair.drafters.lookup import PromptLookupDrafter

            return PromptLookupDrafter()
        return HybridDrafter(self._model_drafter(sampling, noise, slot), verify_slope=self._lookup_slope())

    @staticmethod
    def _verifier(kind: VerifierKind, sampling: SamplingConfig, noise: Optional[PositionNoise]) -> Verifier:
        if kind == "greedy":
            from anypair.verifiers.greedy import GreedyVerifier

            return GreedyVerifier()
        from anypair.verifiers.sampling import SamplingVerifier

        assert noise is not None  # _session makes one for every sampling request
        return SamplingVerifier(sampling, noise=noise)  # its generator is seeded from sampling.seed

    def _verify_slope(self) -> float:
        """What each extra token scored in one pass adds to a target step, as a share of the step:
        the target's engine's declared figure (`anypair.backends.engines`, each with its measurement),
        the prior of its measured cost model and the timing-free estimate's slope."""
        return verification_slope(self.target)

    def _lookup_slope(self) -> float:
        """The hybrid's price of a verified row: the target's measured slope at a short proposal's rows."""
        return self._batch_costs.target.relative_slope(4)

    @property
    def draft_step_seconds(self) -> Optional[float]:
        """The draft model's one-row forward as its engine's cost model measured it (None: not yet)."""
        draft = self._batch_costs.draft
        return draft.seconds(1) if draft.measured(1) else None

    def forget_drafting_history(self) -> None:
        """Forget what earlier requests measured of drafting (`skip_losing_drafts`' ledger, the pair's
        costs and calibration). Benchmarks call it after their untimed warm-up, whose short first
        request pays for allocations and would count as drafting that lost."""
        for history in self._history.values():  # the engines' costs stay: they are about the engines
            history.ledger.forget()
            history.memory = PairMemory(history.memory.costs)

    def plan(self, request: GenerationRequest) -> RequestPlan:
        """What would serve `request` on this generator: drafter, verifier and policy (nothing runs)."""
        return plan_request(self.options, request, self._pair)

    # -- requests -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _claim(self, what: str) -> Iterator[None]:
        """One request at a time: the models' KV caches and the drafter hold one request's state,
        so a second request while a stream is open would silently corrupt that stream. A stream
        releases its claim when exhausted, closed (`.close()`) or dropped (the generator's close on
        garbage collection runs the `finally`)."""
        if self._open_request is not None:
            raise InputError(f"this AnyPairGenerator is still serving {self._open_request}: read it to the end or "
                             "call its .close() first, or use a second AnyPairGenerator for concurrent requests")
        self._open_request = what
        try:
            yield
        finally:
            self._open_request = None

    def _drafting_history(self, plan: RequestPlan, request: GenerationRequest) -> DraftingHistory:
        key = (plan.drafter, request.sampling.do_sample)
        if key not in self._history:  # the pair's step costs: the engines' own cost models
            costs = TimedCosts(target=self._batch_costs.target, draft=self._batch_costs.draft)
            self._history[key] = DraftingHistory(memory=PairMemory(costs))
        return self._history[key]

    def _ledger(self, plan: RequestPlan, request: GenerationRequest) -> Optional[DraftingLedger]:
        """The ledger this request consults and feeds (None: it drafts as planned, unrecorded)."""
        if (not self.options.skip_losing_drafts or self.options.draft_length != "adaptive"
                or plan.drafter == "none"):
            return None
        return self._drafting_history(plan, request).ledger

    def _session(self, request: GenerationRequest, slot: int) -> tuple[DecodeSession, Optional[_LedgerEntry]]:
        """The request's session on slot `slot` of the engines."""
        plan = self.plan(request)
        target_ids = self.target.render(request.prompt, request.messages, request.tools)
        if not target_ids:
            raise InputError("the prompt encodes to no tokens for the target model")
        room, limit = self._room(target_ids)
        if request.max_new_tokens > room:  # the one check of a request's fit (the server's 400 names the field)
            raise InputError(limit.format(new=request.max_new_tokens),
                             field=("messages" if request.messages is not None else "prompt") if room < 1
                             else "max_new_tokens", code="context_length_exceeded")
        sampling = request.sampling
        # sampling: the request's noise, keyed by the verifier from the seed (`sampling.keyed`), read
        # by the verifier and by a drafter that couples its picks to it
        noise = PositionNoise() if sampling.do_sample else None
        ledger = self._ledger(plan, request)
        decision = ledger.decide() if ledger is not None else LedgerDecision(draft=True)
        if decision.draft:
            drafter, policy = self._drafter(plan.drafter, sampling, noise, slot), plan.policy
            # the pair's costs and calibration, as earlier requests of this kind measured them
            policy.remember(self._drafting_history(plan, request).memory)
        else:  # the ledger keeps the draft model off: prompt-lookup matches only
            drafter, policy = HybridDrafter(None, verify_slope=self._lookup_slope()), ConstantLength(0)
        messages = list(request.messages) if request.messages is not None else None
        tools = list(request.tools) if request.tools is not None else None
        draft_request = DraftRequest(target_ids, prompt=request.prompt, messages=messages, tools=tools)
        # no end-of-sequence ids: the loop then stops only at max_new_tokens (or a stop string)
        eos_ids = frozenset() if request.ignore_eos else self.target.eos_ids
        constraint = self._constraint(request)
        decode_request = DecodeRequest(target_ids, request.max_new_tokens, eos_ids, request.stop_strings, draft_request,
                                       drafting_skipped=decision.skip_note(), top_logprobs=request.logprobs,
                                       constraint=constraint, candidate_trees=self.options.candidate_trees)
        session = DecodeSession(self.target_backend.sequence(slot), self.target.tokenizer, drafter,
                                self._verifier(plan.verifier, sampling, noise), policy, decode_request)
        entry = _LedgerEntry(ledger, decision) if ledger is not None and decision.draft else None
        return session, entry

    def _constraint(self, request: GenerationRequest) -> Optional[TokenConstraint]:
        """What the request's tokens follow: its logit bias, its penalties, then its grammar (None: nothing)."""
        parts: list[TokenConstraint] = []
        if request.logit_bias:
            outside = [token for token, _ in request.logit_bias if token >= self.target_backend.vocab_size]
            if outside:
                raise InputError(f"logit_bias names token ids outside the target's vocabulary of "
                                 f"{self.target_backend.vocab_size}: {outside[:5]}", field="logit_bias",
                                 code="invalid_value")
            parts.append(LogitBias(dict(request.logit_bias)))
        if request.frequency_penalty or request.presence_penalty:
            parts.append(RepetitionPenalties(request.frequency_penalty, request.presence_penalty))
        if request.grammar is not None:
            parts.append(self.grammar_compiler.constraint(request.grammar))
        if len(parts) > 1:
            return Constraints(parts)
        return parts[0] if parts else None

    @property
    def grammar_compiler(self) -> GrammarCompiler:
        """Makes structured-output constraints on the target's tokenizer (built on first use: it reads
        the whole vocabulary)."""
        if self._grammar_compiler is None:
            self._grammar_compiler = GrammarCompiler(self.target.hf_tokenizer, self.target_backend.vocab_size,
                                                     self.target.eos_ids)
        return self._grammar_compiler

    def _settle(self, entry: Optional[_LedgerEntry], session: DecodeSession) -> None:
        """Tell the request's ledger what its drafting saved (a request that ran the target alone
        measured nothing about drafting)."""
        if entry is None or session.result is None:
            return
        stats = session.result.stats
        if stats.draft_rounds == 0:  # the batch kept drafting off (under load): nothing learnt about drafting
            return
        target = self._batch_costs.target
        outcome = RequestOutcome.measure(
            stats.new_tokens, stats.time_prefill_s,
            stats.time_drafting_s + stats.time_translating_s + stats.time_verifying_s,
            target.seconds(1) if target.known else None)
        if outcome is not None:
            entry.ledger.record(outcome, entry.decision.exploring)

    def _room(self, target_ids: list[int]) -> tuple[int, str]:
        """New tokens the request's prompt leaves room for (the target's positions; a draft model reads a
        window of its own, `ModelDrafter._slide_window`, so its context never binds), and the message
        of the limit ({new}: the tokens asked for)."""
        room = self.max_positions - len(target_ids)
        limit = (f"prompt ({len(target_ids)} tokens) + max_new_tokens ({{new}}) exceeds {self._positions_why}: "
                 "shorten the prompt or lower max_new_tokens")
        return room, limit

    @property
    def max_positions(self) -> int:
        """The most positions (prompt + new tokens) one request may hold: the target's context, or less
        where a server's KV memory budget says so (`limit_positions`)."""
        return min(self.target_backend.max_context, self._position_limit or self.target_backend.max_context)

    @property
    def _positions_why(self) -> str:
        if self._position_limit is not None and self._position_limit < self.target_backend.max_context:
            return f"the {self._position_limit} positions a request may hold under {self._position_limit_why}"
        return f"the target's context of {self.target_backend.max_context} tokens"

    def limit_positions(self, positions: int, why: str) -> None:
        """Hold each request to `positions` (prompt + new tokens), `why` naming the limit in the error a
        longer request gets (`anypair serve` sizes it from its KV memory budget)."""
        if positions < 2:
            raise InputError(f"{why} leaves room for {positions} positions a request: at least 2 are needed")
        self._position_limit, self._position_limit_why = positions, why

    def room_for_new_tokens(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None,
                            assisted: bool = True) -> int:
        """The most new tokens a request for this prompt may ask for: what the target's context leaves
        after the prompt, assisted or not (a draft reads a window of its own and never binds; `anypair
        generate` writes up to the end-of-turn token within this bound, as llama.cpp's CLI writes to the
        end of its context)."""
        request = GenerationRequest.of(prompt, messages=messages, max_new_tokens=1, assisted=assisted)
        return self._room(self.target.render(request.prompt, request.messages))[0]

    def generate(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None,
                 max_new_tokens: int = 128, stop: Union[str, Sequence[str], None] = None,
                 do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 seed: Optional[int] = None, assisted: bool = True, ignore_eos: bool = False,
                 logprobs: Optional[int] = None, grammar: Optional[Grammar] = None,
                 tools: Optional[Sequence[dict]] = None,
                 logit_bias: Optional[dict[int, float]] = None, frequency_penalty: float = 0.0,
                 presence_penalty: float = 0.0) -> GenerationResult:
        """Generate up to `max_new_tokens` target tokens (exactly that many with `ignore_eos=True`, unless a
        stop string ends it); returns text, target ids and statistics.

        `logprobs`: 0-20 adds `result.logprobs`, the target's own log-probability of each token and
        that many alternatives. `grammar`: the text follows it (structured output), and is the target's
        own text under it. `tools`: OpenAI's tool definitions, rendered by each model's chat template
        with `messages`. `logit_bias`: target id -> a bias from -100 to 100 added to its logit at every
        position (before temperature and sampling), as the target alone adds it. `frequency_penalty`,
        `presence_penalty` (-2 to 2): OpenAI's penalties on generated tokens, the same way. The default of
        128 bounds a library call's time; `anypair generate` asks for `room_for_new_tokens` instead, so
        an answer ends where the model ends it."""
        arguments = {name: value for name, value in locals().items() if name not in ("self", "prompt")}
        stream = TextStream(self._one_request("a generate() call", self._request(prompt, arguments, "generate")))
        for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def stream(self, prompt: Optional[str] = None, **arguments) -> TextStream:
        """Text as soon as each token is verified: iterate the returned `TextStream`; its `result`
        holds the full `GenerationResult` once it is exhausted. It takes `generate()`'s arguments
        (its signature is generate's), checked here, before the first chunk.

        From its first chunk until it is exhausted, closed (`.close()`) or dropped, the stream owns
        this generator: another request meanwhile raises InputError instead of corrupting it."""
        return TextStream(self._one_request("an open stream", self._request(prompt, arguments, "stream")))

    @staticmethod
    def _request(prompt: Optional[str], arguments: dict, door: str) -> GenerationRequest:
        """The typed request of a call at `door` with `generate()`'s arguments (an unknown one: one line)."""
        unknown = sorted(set(arguments) - set(GenerationRequest.arguments()))
        if unknown:
            raise InputError(f"{door}() got unexpected arguments {unknown}: it takes generate()'s "
                             f"({', '.join(GenerationRequest.arguments())})")
        return GenerationRequest.of(prompt, **arguments)

    def _one_request(self, what: str, request: GenerationRequest) -> Generator[str, None, GenerationResult]:
        """A request as a batch of one: its text as it is verified, its result at the end. `what`
        names the caller in the claim's error."""
        with self._claim(what):
            scheduler = self.batch_scheduler(1)  # a batch of one: the one path every request takes
            sink = CollectingSink()
            scheduler.submit(request, sink)
            yield from run_rounds(scheduler, sink)
            if sink.error is not None:
                raise sink.error
            assert sink.result is not None
            return sink.result

    # -- the scheduler (generation.batch): one request, or several sharing each forward ------------
    def batching_unavailable(self) -> Optional[str]:
        """Why requests cannot share the target's forward here (None: they can). Batching needs
        engines that hold several sequences (the gguf engine): the target's, and the draft's for a
        draft model."""
        if self.target_backend.max_slots == 1:
            return f"the target runs on {self.target.engine.engine}, which holds one sequence (not the gguf engine)"
        if self.draft is not None and self.draft.backend.max_slots == 1 and uses_draft_model(self.options.drafter):
            return f"the draft runs on {self.draft.engine.engine}, which holds one sequence (not the gguf engine)"
        if isinstance(self.options.drafter, Drafter) or isinstance(self.options.draft_length, DraftLengthPolicy):
            return "a Drafter or DraftLengthPolicy instance holds one request's state"
        return None

    def kv_bytes_per_slot(self) -> int:
        """The most a batched request's KV caches take (target and draft, at their full context)."""
        return sum(member.backend.kv_bytes_per_slot for member in (self.target, self.draft) if member is not None)

    def kv_bytes_per_position(self) -> float:
        """What one more position of a request takes in the KV caches: each member's own per position
        (their contexts differ: the target's 32,768 beside a draft's 8,192)."""
        return sum(member.backend.kv_bytes_per_slot / member.backend.max_context
                   for member in (self.target, self.draft) if member is not None)

    def batch_scheduler(self, max_batch: int, queue_size: Optional[int] = None) -> BatchScheduler:
        """A scheduler of up to `max_batch` concurrent requests on this generator's models: the one
        place `max_batch` is checked. Engines holding fewer slots are given that many (what they
        held is forgotten). The caller owns the generator while it runs rounds (`anypair serve`'s
        worker; `generate`, `stream` and `generate_many`)."""
        if max_batch < 1:
            raise InputError(f"max_batch (--max-batch) must be at least 1 (requests that share each forward), "
                             f"got {max_batch}")
        why_not = self.batching_unavailable() if max_batch > 1 else None
        if why_not is not None:
            raise InputError(f"cannot batch {max_batch} requests: {why_not}: use max_batch 1 (--max-batch 1, "
                             "one request at a time)")
        # the draft's engine holds the requests' draft states only where the drafter runs the draft model
        drafting = [self.draft_backend] if self.draft_backend is not None and uses_draft_model(self.options.drafter) \
            else []
        for backend in [self.target_backend, *drafting]:
            if backend.slots < max_batch:
                backend.set_slots(max_batch)
        return BatchScheduler(self.target_backend, max_batch, self._batch_session, costs=self._batch_costs,
                              draft_engine=self.draft_backend, queue_size=queue_size)

    def _batch_session(self, slot: int, request: GenerationRequest
                       ) -> tuple[DecodeSession, Callable[[DecodeSession], None]]:
        """A request's session on slot `slot`, and what to do when it ends."""
        session, entry = self._session(request, slot)
        return session, lambda finished: self._settle(entry, finished)

    def generate_many(self, prompts: Optional[Sequence[str]] = None, *,
                      messages: Optional[Sequence[Sequence[dict]]] = None,
                      max_new_tokens: Union[int, Sequence[int]] = 128, max_batch: int = 8,
                      seed: Union[int, Sequence[Optional[int]], None] = None, **arguments) -> list[GenerationResult]:
        """Several requests at once, sharing each target forward (continuous batching, up to
        `max_batch` at a time): one result per prompt (or conversation), in order, each exactly what
        `generate` returns for it alone. Every other argument is `generate`'s (`stop`, sampling,
        `assisted`, `ignore_eos`, `logprobs`, `grammar`, `tools`, `logit_bias`, the penalties), the
        same for every request; `max_new_tokens` and `seed` may be one per request. Every request is
        checked before anything runs."""
        if (prompts is None) == (messages is None):
            raise InputError("generate_many needs prompts=[...] or messages=[conversation, ...], not both")
        items = list(prompts if prompts is not None else messages)
        lengths = [max_new_tokens] * len(items) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        seeds = list(seed) if isinstance(seed, (list, tuple)) else [seed] * len(items)
        if len(lengths) != len(items) or len(seeds) != len(items):
            raise InputError(f"max_new_tokens and seed: one value, or one per request ({len(items)})")
        requests = [self._request(item if prompts is not None else None, {
            "messages": list(item) if messages is not None else None, "max_new_tokens": n, "seed": s, **arguments},
            "generate_many") for item, n, s in zip(items, lengths, seeds)]
        with self._claim("a generate_many() call"):
            scheduler = self.batch_scheduler(min(max_batch, max(1, len(requests))))
            sinks = [CollectingSink() for _ in requests]
            for request, sink in zip(requests, sinks):
                scheduler.submit(request, sink)
            for _ in run_rounds(scheduler):
                pass
        for sink in sinks:
            if sink.error is not None:
                raise sink.error
        return [sink.result for sink in sinks]


# stream() takes generate()'s arguments: help() and editors show them
AnyPairGenerator.stream.__signature__ = inspect.signature(AnyPairGenerator.generate).replace(  # type: ignore[attr-defined]
    return_annotation="TextStream")
