"""AnyPairGenerator: the front door. Loads the pair, wires backend + drafter + verifier + policy,
validates input, and runs `DecodeSession`s.

    gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-1.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
    result = gen.generate("def fib(n):", max_new_tokens=64)
    for chunk in gen.stream(messages=[{"role": "user", "content": "Hi"}]): print(chunk, end="")
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional, Sequence, Union

import torch

from anypair.drafters.base import DraftRequest, Drafter, NoDrafter
from anypair.errors import InputError
from anypair.generation.checks import check_choices, check_options, check_request
from anypair.generation.loop import DecodeRequest, DecodeSession
from anypair.policies import DraftLengthPolicy, StepCosts, estimated_step_costs, make_policy
from anypair.types import GenerationResult, SamplingConfig

ModelSpec = Union[str, "os.PathLike[str]", tuple]  # hub id, local folder, .gguf file, or (model, hf_tokenizer)


def weights_from_dtype(dtype: Union[str, torch.dtype, None]) -> str:
    """The older `dtype=` option, as a weights format ("auto", "fp32", "fp16" or "bf16")."""
    from anypair.backends.weights import parse_weights

    if isinstance(dtype, torch.dtype):
        names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
        if dtype not in names:
            raise InputError(f"unsupported dtype {dtype}: use weights='fp32', 'fp16' or 'bf16'")
        return names[dtype]
    return parse_weights(dtype)


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
        weights: how the torch engine holds and multiplies the weights: "auto" (default: the
            fastest format of this machine that passes the target's batch-invariance contract, checked
            on the model at load: bf16 on CPUs with AVX-512-BF16/AMX and on GPUs, else fp16 weights
            with fp32 math through fbgemm on AVX2+F16C CPUs, else fp32), "fp32", "fp16", "bf16", or
            "int8" (dynamic int8: not batch-invariant, so drafts only). The baseline (`assisted=False`)
            runs on the same weights and kernels: outputs are the target's own as served.
        draft_weights: the same for a draft on the torch engine (default "auto": the fastest format).
        dtype: the older name of `weights` ("bf16", "fp32", "fp16" or a torch dtype).
        engine, draft_engine: "auto" (default), "torch" or "llama.cpp". auto runs a .gguf file on
            llama.cpp, a draft that has a GGUF (every zoo model) on llama.cpp when llama-cpp-python is
            installed, and everything else on torch. A llama.cpp TARGET is not batch-invariant: its
            output can differ from its own single-token greedy run at near-ties (see README).
        context: llama.cpp context length (default min(trained, 8192)).
        backend: "torch" (default) or "ipex" for torch-engine members (optional; checked against torch).
        linear_kernel: for fp32 on a CPU: "auto" (default: time torch's linear against anypair's
            skinny kernel and keep the faster), "skinny" or "torch". See anypair.backends.skinny_linear.
        threads: CPU threads (torch and llama.cpp).
    """

    def __init__(self, target: ModelSpec, draft: Optional[ModelSpec] = None, *,
                 drafter: Union[str, Drafter] = "model",
                 draft_length: Union[str, DraftLengthPolicy] = "adaptive",
                 num_draft_tokens: Optional[int] = None,
                 confidence_threshold: Optional[float] = None,
                 sampled_drafts: str = "greedy",
                 weights: Optional[str] = None,
                 draft_weights: str = "auto",
                 dtype: Union[str, torch.dtype, None] = None,
                 engine: str = "auto",
                 draft_engine: str = "auto",
                 context: Optional[int] = None,
                 device: Optional[str] = None,
                 backend: str = "torch",
                 linear_kernel: str = "auto",
                 threads: Optional[int] = None) -> None:
        from anypair.backends.weights import parse_weights
        from anypair.generation.members import load_member

        check_options(num_draft_tokens, confidence_threshold, threads)
        check_choices(drafter, draft_length, sampled_drafts)  # before any model loads, not at the first request
        if threads is not None:
            torch.set_num_threads(threads)
        if weights is not None and dtype is not None:
            raise InputError("pass weights= or its older name dtype=, not both")
        self.weights = parse_weights(weights) if weights is not None else weights_from_dtype(dtype)
        self.draft_weights = parse_weights(draft_weights)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        common = dict(device=self.device, backend=backend, linear_kernel=linear_kernel, threads=threads,
                      context=context)
        self.target = load_member(target, role="target", engine=engine, weights=self.weights, **common)
        self.draft = (load_member(draft, role="draft", engine=draft_engine, weights=self.draft_weights, **common)
                      if draft is not None else None)
        self.target_backend = self.target.backend
        self.draft_backend = self.draft.backend if self.draft is not None else None
        self.drafter_spec = drafter
        self.draft_length = draft_length
        self.num_draft_tokens = num_draft_tokens
        self.confidence_threshold = confidence_threshold
        self.sampled_drafts = sampled_drafts
        self.last_result: Optional[GenerationResult] = None
        # the request that owns the models' KV caches and the drafter now (None: free); see _claim
        self._open_request: Optional[str] = None
        self._drafters: dict[tuple, Drafter] = {}
        self._same_vocabulary: Optional[bool] = None

    # -- construction ---------------------------------------------------------------------------
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

    def _model_drafter(self, sampling: Optional[SamplingConfig], generator: Optional[torch.Generator]) -> Drafter:
        from anypair.drafters.model import ModelDrafter

        if self.draft is None:
            raise InputError("drafter='model' or 'hybrid' needs a draft model: AnyPairGenerator(target, draft)")
        draft = self.draft

        def render(request: DraftRequest) -> list[int]:
            return self._draft_prompt_ids(request.prompt, request.messages, request.target_prompt_ids)

        greedy = sampling is None or not sampling.do_sample
        cached = self._drafters.get(("model", self.confidence_threshold)) if greedy else None
        if cached is not None:  # a greedy drafter holds no per-request state past `start`
            return cached
        drafter = ModelDrafter(self.draft_backend, draft.tokenizer, self.target.tokenizer, render,
                               same_vocabulary=self.same_vocabulary, confidence_threshold=self.confidence_threshold,
                               sampling=sampling, generator=generator, sampled_drafts=self.sampled_drafts)
        if greedy:
            self._drafters[("model", self.confidence_threshold)] = drafter
        return drafter

    def _draft_prompt_ids(self, prompt: Optional[str], messages: Optional[Sequence[dict]],
                          target_ids: Sequence[int]) -> list[int]:
        """The draft's own ids for a request. A conversation goes through the draft's chat template
        where it has one; a draft without one (a base model, the usual draft) reads the target's
        rendered conversation as raw text, so chat works for every pair."""
        assert self.draft is not None
        if messages is None or self.draft.has_chat_template:
            return self.draft.render(prompt, messages)
        # the draft's tokenizer adds its own BOS to the text, so the target's is left out of it; only
        # where the target adds one to raw text is a leading BOS id one (SmolLM2's BOS id is <|im_start|>)
        bos = self.target.tokenizer.bos_id
        target_adds_bos = bos is not None and self.target.render("a", None)[:1] == [bos]
        body = list(target_ids[1:]) if target_adds_bos and list(target_ids[:1]) == [bos] else list(target_ids)
        rendered = self.target.hf_tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return self.draft.render(rendered, None)

    def _drafter(self, assisted: bool, sampling: Optional[SamplingConfig], generator) -> Drafter:
        if not assisted:
            return NoDrafter()
        spec = self.drafter_spec
        if isinstance(spec, Drafter):
            return spec
        if spec == "model":
            return self._model_drafter(sampling, generator) if self.draft is not None else NoDrafter()
        if spec == "lookup":
            from anypair.drafters.lookup import PromptLookupDrafter

            return PromptLookupDrafter()
        if spec == "hybrid":
            from anypair.drafters.hybrid import HybridDrafter

            return HybridDrafter(self._model_drafter(sampling, generator))
        raise InputError(f"unknown drafter {spec!r}: use 'model', 'lookup', 'hybrid' or a Drafter instance")

    def _estimated_costs(self) -> StepCosts:
        """Timing-free step costs for this pair (see policies.estimated_step_costs): a step's time
        taken as proportional to the bytes of weights it reads (4 bytes stand for one fp32 parameter)."""
        # measured here: on a CPU in fp32 each extra token scored adds ~0.22 of a step; fp16-weight
        # fbgemm, bf16 and GPUs score 2-4 tokens for about the price of one
        slope = 0.22 if self.target.engine.weights == "fp32" and self.device == "cpu" else 0.05
        if self.draft is None or self.drafter_spec == "lookup":
            return StepCosts(draft_step=1e-3, verify_slope=slope)  # an n-gram lookup costs next to nothing
        target, draft = self.target, self.draft
        return estimated_step_costs(target.weights_bytes // 4, target.num_layers, draft.weights_bytes // 4,
                                    draft.num_layers, multi_token_slope=slope)

    def _verifier(self, sampling: SamplingConfig, generator):
        if not sampling.do_sample:
            from anypair.verifiers.greedy import GreedyVerifier

            return GreedyVerifier()
        from anypair.sampling import SamplingVerifier

        return SamplingVerifier(sampling, generator)

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

    def _session(self, prompt: Optional[str], messages: Optional[Sequence[dict]], max_new_tokens: int,
                 stop: Union[str, Sequence[str], None], do_sample: bool, temperature: float, top_k: int,
                 top_p: float, seed: Optional[int], assisted: bool) -> DecodeSession:
        check_request(prompt, messages, max_new_tokens)
        sampling = SamplingConfig(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        stop_strings = [stop] if isinstance(stop, str) else list(stop or [])

        target_ids = self.target.render(prompt, messages)
        if not target_ids:
            raise InputError("the prompt encodes to no tokens for the target model")
        limit = self.target_backend.max_context
        if len(target_ids) + max_new_tokens > limit:
            raise InputError(
                f"prompt ({len(target_ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the target's context "
                f"of {limit} tokens: shorten the prompt or lower max_new_tokens")
        generator = None
        if sampling.do_sample:
            generator = torch.Generator(device="cpu")
            generator.manual_seed(seed if seed is not None else torch.seed())
        drafter = self._drafter(assisted, sampling, generator)
        draft_request = DraftRequest(target_ids, prompt=prompt, messages=list(messages) if messages else None)
        if self.draft is not None and assisted and self.drafter_spec in ("model", "hybrid"):
            draft_ids = target_ids if self.same_vocabulary else self._draft_prompt_ids(prompt, messages, target_ids)
            draft_limit = self.draft_backend.max_context
            if len(draft_ids) + max_new_tokens + 16 > draft_limit:
                raise InputError(
                    f"prompt ({len(draft_ids)} draft tokens) + max_new_tokens ({max_new_tokens}) exceeds the draft's "
                    f"context of {draft_limit} tokens: use a draft with a longer context, drafter='lookup', or assisted=False")
        fixed_costs = None
        if sampling.do_sample and seed is not None and self.draft_length == "adaptive":
            # measured timings would make the number of random draws per round, and so the sampled
            # text, depend on machine load: seeded sampling plans with a cost model from model sizes
            fixed_costs = self._estimated_costs()
        policy = make_policy(self.draft_length, self.num_draft_tokens, fixed_costs=fixed_costs)
        request = DecodeRequest(target_ids, max_new_tokens, self.target.eos_ids, stop_strings, draft_request)
        return DecodeSession(self.target_backend, self.target.tokenizer, drafter, self._verifier(sampling, generator),
                             policy, request)

    def generate(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None,
                 max_new_tokens: int = 128, stop: Union[str, Sequence[str], None] = None,
                 do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 seed: Optional[int] = None, assisted: bool = True) -> GenerationResult:
        """Generate up to `max_new_tokens` target tokens; returns text, target ids and statistics."""
        with self._claim("a generate() call"):
            session = self._session(prompt, messages, max_new_tokens, stop, do_sample, temperature, top_k, top_p,
                                    seed, assisted)
            self.last_result = session.run()
        return self.last_result

    def stream(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None,
               max_new_tokens: int = 128, stop: Union[str, Sequence[str], None] = None,
               do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
               seed: Optional[int] = None, assisted: bool = True) -> Iterator[str]:
        """Yield text as soon as each token is verified; `last_result` holds the full result after.

        From its first chunk until it is exhausted, closed (`.close()`) or dropped, the stream owns
        this generator: another request meanwhile raises InputError instead of corrupting it."""
        with self._claim("an open stream"):
            session = self._session(prompt, messages, max_new_tokens, stop, do_sample, temperature, top_k, top_p,
                                    seed, assisted)
            yield from session
            self.last_result = session.result
