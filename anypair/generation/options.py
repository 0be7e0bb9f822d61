"""Options resolved once, and requests planned by a pure function.

- `GeneratorOptions`: everything `AnyPairGenerator` is built with, checked and normalised when it
  is made (a bad option is a one-line `InputError` before any model loads) and frozen after.
- `GenerationRequest`: one call's arguments (text or conversation, length, stops, sampling),
  checked the same way.
- `plan_request(options, request, pair) -> RequestPlan`: which drafter, verifier and draft-length
  policy serve the request. It reads only its arguments, so every choice the generator makes per
  request can be tested without a model.

    options = GeneratorOptions(drafter="hybrid", num_draft_tokens=4)
    request = GenerationRequest.of("def fib(n):", max_new_tokens=64)
    plan = plan_request(options, request, PairFacts(has_draft_model=True))
"""
from __future__ import annotations

import inspect

from dataclasses import dataclass, field
from typing import Literal, Optional, Sequence, Union

import torch

from anypair.drafters import uses_draft_model
from anypair.drafters.base import Drafter
from anypair.errors import InputError
from anypair.generation.checks import check_choices, check_member_options, check_options, check_request
from anypair.policies import DraftLengthPolicy, make_policy
from anypair.types import MAX_TOP_LOGPROBS, SamplingConfig
from anypair.verifiers.constraints import Grammar

#: draft tokens of the prompt the draft model reads (its last ones; 0: all; None: by the draft's
#: estimated cost, policies.draft_prompt_window: 640 for SmolLM2-135M). See drafters.model.
DEFAULT_DRAFT_WINDOW: Optional[int] = None

#: a name of `drafters.DRAFTERS`, or "none" (the target alone) or "given" (the options' Drafter instance)
DrafterKind = str
VerifierKind = Literal["greedy", "sampling"]


def weights_from_dtype(dtype: Union[str, torch.dtype, None]) -> str:
    """The older `dtype=` option, as a weights format ("auto", "fp32", "fp16" or "bf16")."""
    from anypair.backends.weights import parse_weights

    if isinstance(dtype, torch.dtype):
        names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
        if dtype not in names:
            raise InputError(f"unsupported dtype {dtype}: use weights='fp32', 'fp16' or 'bf16'")
        return names[dtype]
    return parse_weights(dtype)


@dataclass(frozen=True)
class GeneratorOptions:
    """AnyPairGenerator's options (see its docstring for what each does). Made once, checked at
    once, never changed: to try other options, build another generator on the loaded members
    (`AnyPairGenerator(gen.target, gen.draft, ...)` loads nothing again)."""

    drafter: Union[str, Drafter] = "model"
    draft_length: Union[str, DraftLengthPolicy] = "adaptive"
    num_draft_tokens: Optional[int] = None
    confidence_threshold: Optional[float] = None
    sampled_drafts: str = "greedy"
    draft_window: Optional[int] = DEFAULT_DRAFT_WINDOW
    weights: str = "auto"
    draft_weights: str = "auto"
    engine: str = "auto"
    draft_engine: str = "auto"
    context: Optional[int] = None
    # None: each member on its engine's own device (the gguf engine: the CPU; torch: the GPU when
    # there is one), so the default pair runs on a GPU machine without a flag
    device: Optional[str] = None
    backend: str = "torch"
    linear_kernel: str = "auto"
    threads: Optional[int] = None
    # remember across requests whether drafting paid, and run the target alone while it has not
    skip_losing_drafts: bool = True
    # where the target's engine scores trees (gguf): the model drafter's other choices (its second
    # choices, its first where it stopped, the held-back last token) are verified beside its proposal
    # in the same forward
    candidate_trees: bool = True

    def __post_init__(self) -> None:
        from anypair.backends.weights import parse_weights

        for name, value in (("skip_losing_drafts", self.skip_losing_drafts), ("candidate_trees", self.candidate_trees)):
            if not isinstance(value, bool):
                raise InputError(f"{name} must be True or False, got {value!r}")
        check_options(self.num_draft_tokens, self.confidence_threshold, self.threads, self.draft_window)
        check_choices(self.drafter, self.draft_length, self.sampled_drafts)
        check_member_options(self.engine, self.draft_engine, self.backend, self.linear_kernel, self.context,
                             self.device)
        # spelled-out names ("float16") are stored as the short ones every later check compares with
        object.__setattr__(self, "weights", parse_weights(self.weights))
        object.__setattr__(self, "draft_weights", parse_weights(self.draft_weights))

    @classmethod
    def of(cls, *, dtype: Union[str, torch.dtype, None] = None, weights: Optional[str] = None,
           device: Optional[str] = None, **options) -> GeneratorOptions:
        """From AnyPairGenerator's keyword arguments: `dtype=` is the older name of `weights=`, and
        `device=None` means each engine's own device (see `device`)."""
        if weights is not None and dtype is not None:
            raise InputError("pass weights= or its older name dtype=, not both")
        resolved = dict(weights=weights if weights is not None else weights_from_dtype(dtype), **options)
        return cls(device=device, **resolved)


@dataclass(frozen=True)
class GenerationRequest:
    """One generate() or stream() call, checked. Exactly one of `prompt` (raw text to continue)
    and `messages` (a chat conversation) is set."""

    prompt: Optional[str]
    messages: Optional[tuple[dict, ...]]
    max_new_tokens: int
    stop_strings: tuple[str, ...]
    sampling: SamplingConfig
    assisted: bool
    # generate exactly max_new_tokens (stop strings still stop): for benchmarks whose lengths must hold
    ignore_eos: bool = False
    # the target's log-probability of each emitted token and this many alternatives (None: none)
    logprobs: Optional[int] = None
    # a grammar the text follows (structured output), the target's own text under it
    grammar: Optional[Grammar] = None
    # tools (OpenAI's function definitions) the chat templates render with the conversation
    tools: Optional[tuple[dict, ...]] = None
    # a bias added to these target ids' logits at every position (OpenAI's logit_bias)
    logit_bias: Optional[tuple[tuple[int, float], ...]] = None
    # OpenAI's penalties on generated tokens: by the times each was generated, and once it was
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    @classmethod
    def arguments(cls) -> tuple[str, ...]:
        """The names `of` takes past the prompt: generate()'s, stream()'s and generate_many()'s."""
        return tuple(name for name in inspect.signature(cls.of).parameters if name not in ("cls", "prompt"))

    @classmethod
    def of(cls, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None,
           max_new_tokens: int = 128, stop: Union[str, Sequence[str], None] = None, do_sample: bool = False,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: Optional[int] = None,
           assisted: bool = True, ignore_eos: bool = False, logprobs: Optional[int] = None,
           grammar: Optional[Grammar] = None, tools: Optional[Sequence[dict]] = None,
           logit_bias: Optional[dict[int, float]] = None, frequency_penalty: float = 0.0,
           presence_penalty: float = 0.0) -> GenerationRequest:
        """From generate()'s arguments (raises InputError on bad ones)."""
        check_request(prompt, messages, max_new_tokens)
        if not isinstance(ignore_eos, bool):
            raise InputError(f"ignore_eos must be True or False, got {ignore_eos!r}")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
            raise InputError(f"logprobs must be None or an integer from 0 to {MAX_TOP_LOGPROBS} (the alternatives "
                             f"reported per token), got {logprobs!r}")
        if grammar is not None and not isinstance(grammar, Grammar):
            raise InputError(f"grammar must be an anypair Grammar, got {type(grammar).__name__}")
        if tools is not None and (messages is None or not all(isinstance(tool, dict) for tool in tools)):
            raise InputError("tools need messages (a conversation) and must be a list of dicts (OpenAI's tool "
                             "definitions)")
        if logit_bias is not None and not all(
                isinstance(token, int) and not isinstance(token, bool) and token >= 0
                and isinstance(bias, (int, float)) and not isinstance(bias, bool) and -100 <= bias <= 100
                for token, bias in logit_bias.items()):
            raise InputError(f"logit_bias must map target token ids (integers >= 0) to biases from -100 to 100, "
                             f"got {logit_bias!r}")
        for name, penalty in (("frequency_penalty", frequency_penalty), ("presence_penalty", presence_penalty)):
            if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not -2 <= penalty <= 2:
                raise InputError(f"{name} must be a number from -2 to 2 (0: off), got {penalty!r}")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        if not all(isinstance(s, str) and s for s in stops):
            raise InputError(f"stop must be a non-empty string or a list of them, got {stop!r}")
        sampling = SamplingConfig(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        return cls(prompt, tuple(messages) if messages is not None else None, max_new_tokens, stops, sampling,
                   bool(assisted), ignore_eos, logprobs, grammar, tuple(tools) if tools else None,
                   tuple(sorted(logit_bias.items())) if logit_bias else None, float(frequency_penalty),
                   float(presence_penalty))

@dataclass(frozen=True)
class PairFacts:
    """What planning needs to know of the loaded pair."""

    has_draft_model: bool


@dataclass(frozen=True)
class RequestPlan:
    """What serves one request."""

    drafter: DrafterKind  # "none": the target alone; "given": the Drafter instance in the options
    verifier: VerifierKind
    policy: DraftLengthPolicy

    @property
    def drafts_with_model(self) -> bool:
        return uses_draft_model(self.drafter)


def plan_request(options: GeneratorOptions, request: GenerationRequest, pair: PairFacts) -> RequestPlan:
    """Choose the drafter, verifier and policy for `request`. Pure: same arguments, same plan.

    Sampling and greedy requests plan alike: the keyed sampling verifier emits the target's own
    samples whatever was proposed, so a seeded request's text cannot depend on the policy's
    measured timings (`verifiers.sampling`)."""
    drafter: DrafterKind
    if not request.assisted:
        drafter = "none"
    elif isinstance(options.drafter, Drafter):
        drafter = "given"
    elif options.drafter == "model" and not pair.has_draft_model:
        drafter = "none"  # AnyPairGenerator(target) alone: the documented way to run the target by itself
    else:
        drafter = options.drafter  # checked against DRAFTERS at construction
    policy = make_policy(options.draft_length, options.num_draft_tokens)
    verifier: VerifierKind = "sampling" if request.sampling.do_sample else "greedy"
    return RequestPlan(drafter, verifier, policy)
