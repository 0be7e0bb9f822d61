"""AnyPairGenerator: the front door. Loads the pair, wires backend + drafter + verifier + policy,
validates input, and runs `DecodeSession`s.

    gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-1.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
    result = gen.generate("def fib(n):", max_new_tokens=64)
    for chunk in gen.stream(messages=[{"role": "user", "content": "Hi"}]): print(chunk, end="")
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence, Union

import torch

from anypair.backends.torch_hf import TorchBackend
from anypair.drafters.base import DraftRequest, Drafter, NoDrafter
from anypair.errors import InputError
from anypair.generation.loop import DecodeRequest, DecodeSession
from anypair.policies import DraftLengthPolicy, StepCosts, estimated_step_costs, make_policy
from anypair.types import GenerationResult, SamplingConfig

ModelSpec = Union[str, "os.PathLike[str]", tuple]  # hub id, local folder, or (model, hf_tokenizer)


def cpu_has_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_dtype(device: str) -> torch.dtype:
    """bf16 where the hardware has it: there one pass scoring 2-8 tokens costs about one
    single-token step, which is what makes verification cheap; fp32 elsewhere."""
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_bf16() else torch.float32


def parse_dtype(dtype: Union[str, torch.dtype, None], device: str) -> torch.dtype:
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32,
             "fp16": torch.float16, "float16": torch.float16}
    if dtype not in names:
        raise InputError(f"unknown dtype {dtype!r}: use one of {sorted(names)}")
    return names[dtype]


@dataclass
class LoadedModel:
    """A model with its HF tokenizer and its anypair tokenizer adapter."""

    name: str
    model: Any
    hf_tokenizer: Any
    tokenizer: Any  # TokenizerAdapter
    eos_ids: frozenset[int] = field(default_factory=frozenset)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf_tokenizer, "chat_template", None))

    def render(self, prompt: Optional[str], messages: Optional[Sequence[dict]]) -> list[int]:
        """The model's own token ids for a raw prompt or a conversation (its own chat template)."""
        if messages is not None:
            if not self.has_chat_template:
                raise InputError(f"{self.name} has no chat template: pass prompt= (raw text) instead of messages=")
            ids = self.hf_tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            if ids and isinstance(ids[0], list):
                ids = ids[0]
            return [int(i) for i in ids]
        return [int(i) for i in self.hf_tokenizer(prompt, add_special_tokens=True)["input_ids"]]


def load_pair_member(spec: ModelSpec, dtype: torch.dtype, device: str) -> LoadedModel:
    from anypair.tokenization import from_hf

    if isinstance(spec, LoadedModel):
        return spec
    if isinstance(spec, tuple):
        model, hf_tok = spec
        name = getattr(model.config, "_name_or_path", None) or type(model).__name__
    else:
        from anypair.zoo import load_model

        name = str(spec)
        model, hf_tok = load_model(spec, dtype=dtype, device=device)
    model.eval()
    from anypair.backends.torch_hf import model_vocab_rows

    adapter = from_hf(hf_tok, model_vocab_size=model_vocab_rows(model))
    eos = set(adapter.eos_ids)
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        eos.update([gen_eos] if isinstance(gen_eos, int) else list(gen_eos))
    return LoadedModel(name, model, hf_tok, adapter, frozenset(int(e) for e in eos))


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
        dtype: "bf16" (default where the CPU has bf16), "fp32", or a torch dtype.
        backend: "torch" (default) or "ipex" (optional; checked against torch before use).
        linear_kernel: "auto" (default: time torch's CPU linear against anypair's skinny kernel on
            each model and keep the faster), "skinny" or "torch". See anypair.backends.skinny_linear.
        threads: torch CPU threads.
    """

    def __init__(self, target: ModelSpec, draft: Optional[ModelSpec] = None, *,
                 drafter: Union[str, Drafter] = "model",
                 draft_length: Union[str, DraftLengthPolicy] = "adaptive",
                 num_draft_tokens: Optional[int] = None,
                 confidence_threshold: Optional[float] = None,
                 sampled_drafts: str = "greedy",
                 dtype: Union[str, torch.dtype, None] = None,
                 device: Optional[str] = None,
                 backend: str = "torch",
                 linear_kernel: str = "auto",
                 threads: Optional[int] = None) -> None:
        if threads:
            torch.set_num_threads(int(threads))
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = parse_dtype(dtype, self.device)
        self.target = load_pair_member(target, self.dtype, self.device)
        self.draft = load_pair_member(draft, self.dtype, self.device) if draft is not None else None
        self.backend_name = backend
        self.linear_kernel = linear_kernel
        self.target_backend = self._make_backend(self.target, "target")
        self.draft_backend = self._make_backend(self.draft, "draft") if self.draft is not None else None
        self.drafter_spec = drafter
        self.draft_length = draft_length
        self.num_draft_tokens = num_draft_tokens
        self.confidence_threshold = confidence_threshold
        if sampled_drafts not in ("greedy", "intersection"):
            raise InputError(f"sampled_drafts must be 'greedy' or 'intersection', got {sampled_drafts!r}")
        self.sampled_drafts = sampled_drafts
        self.last_result: Optional[GenerationResult] = None
        self._drafters: dict[tuple, Drafter] = {}
        self._same_vocabulary: Optional[bool] = None

    # -- construction ---------------------------------------------------------------------------
    def _make_backend(self, member, role: str):
        if self.backend_name == "torch":
            return TorchBackend(member.model, name=f"{role} {member.name}", linear_kernel=self.linear_kernel)
        if self.backend_name == "ipex":
            from anypair.backends.ipex import make_ipex_backend

            probe = member.tokenizer.encode_continuation("def add(a, b):\n    return a + b\n\nprint(add(2, 3))")
            return make_ipex_backend(member.model, probe, name=f"{role} {member.name}")
        raise InputError(f"unknown backend {self.backend_name!r}: use 'torch' or 'ipex'")

    @property
    def kernels(self) -> str:
        """Which linear kernel each model ended up with, for reports: 'target skinny, draft torch'."""
        parts = []
        for role, backend in (("target", self.target_backend), ("draft", self.draft_backend)):
            choice = getattr(backend, "kernel_choice", None)
            if choice is not None:
                parts.append(f"{role} {choice.kernel}")
        return ", ".join(parts)

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
            return draft.render(request.prompt, request.messages)

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
        """Timing-free step costs for this pair (see policies.estimated_step_costs)."""
        # measured here: on a CPU in fp32 each extra token scored adds ~0.22 of a step; in bf16 and
        # on GPUs a pass of 2-8 tokens costs about one step
        on_cpu_fp32 = self.target.model.device.type == "cpu" and self.dtype == torch.float32
        slope = 0.22 if on_cpu_fp32 else 0.05
        if self.draft is None or self.drafter_spec == "lookup":
            return StepCosts(draft_step=1e-3, verify_slope=slope)  # an n-gram lookup costs next to nothing

        def size(model) -> tuple[int, int]:
            return sum(p.numel() for p in model.parameters()), int(getattr(model.config, "num_hidden_layers", 1) or 1)

        return estimated_step_costs(*size(self.target.model), *size(self.draft.model), multi_token_slope=slope)

    def _verifier(self, sampling: SamplingConfig, generator):
        if not sampling.do_sample:
            from anypair.verifiers.greedy import GreedyVerifier

            return GreedyVerifier()
        from anypair.sampling import SamplingVerifier

        return SamplingVerifier(sampling, generator)

    # -- requests -------------------------------------------------------------------------------
    def _session(self, prompt: Optional[str], messages: Optional[Sequence[dict]], max_new_tokens: int,
                 stop: Union[str, Sequence[str], None], do_sample: bool, temperature: float, top_k: int,
                 top_p: float, seed: Optional[int], assisted: bool) -> DecodeSession:
        if (prompt is None) == (messages is None):
            raise InputError("pass exactly one of prompt= (raw text) or messages= (a chat conversation)")
        if prompt is not None and not isinstance(prompt, str):
            raise InputError(f"prompt must be a str, got {type(prompt).__name__}")
        if prompt is not None and prompt == "":
            raise InputError("the prompt is empty: give some text to continue")
        if messages is not None and (not messages or not all(isinstance(m, dict) and "content" in m for m in messages)):
            raise InputError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
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
            draft_ids = target_ids if self.same_vocabulary else self.draft.render(prompt, messages)
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
        session = self._session(prompt, messages, max_new_tokens, stop, do_sample, temperature, top_k, top_p,
                                seed, assisted)
        self.last_result = session.run()
        return self.last_result

    def stream(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None,
               max_new_tokens: int = 128, stop: Union[str, Sequence[str], None] = None,
               do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
               seed: Optional[int] = None, assisted: bool = True) -> Iterator[str]:
        """Yield text as soon as each token is verified; `last_result` holds the full result after."""
        session = self._session(prompt, messages, max_new_tokens, stop, do_sample, temperature, top_k, top_p,
                                seed, assisted)
        yield from session
        self.last_result = session.result
