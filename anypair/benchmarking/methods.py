"""The method protocol every benchmark runs on, and its implementations.

A method turns a `BenchPrompt` and a `Decoding` into a `MethodOutput` with the same figures whatever
produced it, so the harness and the reports never ask which method they hold. All methods of one
benchmark run on models loaded once, with the same threads.

- `AnyPairMethod`: an already-built `AnyPairGenerator`, assisted or the target alone
- `TransformersMethod`: transformers' `generate` on the target's loaded model, alone or assisted by a
  torch copy of the draft (universal assisted generation when the tokenizers differ): the one place
  transformers' assisted generation is driven, greedy and sampling
- `LlamaCppAloneMethod`: the target's GGUF alone through llama-cpp-python's own greedy loop
"""
from __future__ import annotations

import copy
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

import torch

from anypair.backends.torch_hf import model_vocab_rows
from anypair.benchmarking.prompts import BenchPrompt
from anypair.errors import InputError
from anypair.backends.member import LoadedModel

if TYPE_CHECKING:
    from anypair.generation.generator import AnyPairGenerator


@dataclass(frozen=True)
class Decoding:
    """How to decode: greedy when temperature == 0; top_k 0 and top_p 1.0 are off. Sampling methods
    seed their random draws with `seed`, so one seed gives each method the same chance. With
    `ignore_eos` every method writes exactly `max_new_tokens` (the sweep's lengths must hold)."""

    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0


@dataclass
class MethodOutput:
    text: str
    target_ids: list[int]  # generated target ids, prompt excluded, up to and including the first end-of-sequence
    prompt_tokens: int
    time_to_first_token_s: float
    total_time_s: float
    finish_reason: str
    rounds: Optional[int] = None  # None: the method does not report its steps
    draft_tokens_proposed: Optional[int] = None  # None: the method has no draft
    draft_tokens_accepted: Optional[int] = None
    # where anypair's time went (None for methods that do not report it)
    drafting_s: Optional[float] = None
    verifying_s: Optional[float] = None
    translating_s: Optional[float] = None
    # anypair only: the request ran the target alone because drafting had lost time on the
    # generator's recent requests (policies.ledger); None for methods without that choice
    drafting_skipped: Optional[bool] = None

    @property
    def new_tokens(self) -> int:
        return len(self.target_ids)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.total_time_s if self.total_time_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> Optional[float]:
        if not self.draft_tokens_proposed:
            return None if self.draft_tokens_proposed is None else 0.0
        return self.draft_tokens_accepted / self.draft_tokens_proposed

    @property
    def mean_accepted_per_round(self) -> Optional[float]:
        if self.rounds is None or self.draft_tokens_accepted is None:
            return None
        return self.draft_tokens_accepted / self.rounds if self.rounds else 0.0


class Method(Protocol):
    name: str
    draft_name: str  # "" for methods without a draft model
    # anypair's position-keyed sampler: for a seed it writes the target's own text, drafting or not,
    # so its sampled outputs are compared with the baseline's like greedy ones
    keyed_sampling: bool

    def generate(self, prompt: BenchPrompt, decoding: Decoding) -> MethodOutput: ...


def cut_after_end_of_sequence(ids: list[int], eos_ids: frozenset[int]) -> list[int]:
    """Generated ids up to and including the first end-of-sequence token, the convention anypair's
    `target_ids` follow: every method's ids must be cut the same way, or the outputs of an example
    that ends at EOS compare unequal by one token (and tokens per second count one token apart)."""
    for position, token in enumerate(ids):
        if token in eos_ids:
            return ids[: position + 1]
    return ids


# ---- anypair ------------------------------------------------------------------------------------


class AnyPairMethod:
    """An already-built AnyPairGenerator: assisted by its drafter, or the target alone (`assisted=False`).
    Several methods may share one generator's members; each configuration gets its own generator."""

    def __init__(self, name: str, generator: AnyPairGenerator, *, assisted: bool, draft_name: str = "") -> None:
        self.name = name
        self.draft_name = draft_name
        self.generator = generator
        self.assisted = assisted
        self.keyed_sampling = True

    def generate(self, prompt: BenchPrompt, decoding: Decoding) -> MethodOutput:
        request: dict[str, Any] = dict(max_new_tokens=decoding.max_new_tokens, assisted=self.assisted,
                                       ignore_eos=decoding.ignore_eos)
        if decoding.do_sample:
            request.update(do_sample=True, temperature=decoding.temperature, top_k=decoding.top_k,
                           top_p=decoding.top_p, seed=decoding.seed)
        if prompt.messages is not None:  # each model renders the conversation in its own chat template
            result = self.generator.generate(messages=list(prompt.messages), **request)
        else:
            result = self.generator.generate(prompt.text, **request)
        stats = result.stats
        return MethodOutput(
            text=result.text,
            target_ids=list(result.target_ids),
            prompt_tokens=stats.prompt_tokens,
            time_to_first_token_s=stats.time_to_first_token_s,
            total_time_s=stats.total_time_s,
            finish_reason=result.finish_reason,
            rounds=stats.rounds,
            draft_tokens_proposed=stats.draft_tokens_proposed if self.assisted else None,
            draft_tokens_accepted=stats.draft_tokens_accepted if self.assisted else None,
            drafting_s=stats.time_drafting_s,
            verifying_s=stats.time_verifying_s,
            translating_s=stats.time_translating_s,
            drafting_skipped=(stats.drafting_skipped is not None) if self.assisted else None,
        )


# ---- transformers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchAssistant:
    """A transformers copy of the draft for transformers' assisted generation. Universal assisted
    generation prunes and re-indexes the assistant's LM head and embeddings IN PLACE, so it never
    shares anypair's draft (which need not be a torch model at all: llama.cpp)."""

    name: str
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # its transformers tokenizer

    @classmethod
    def load(cls, name: str) -> TorchAssistant:
        from anypair.zoo import load_model

        model, tokenizer = load_model(name, dtype=torch.float32)
        return cls(name, model, tokenizer)


class RoundTimer:
    """A transformers streamer that notes when the first new tokens arrive and how many rounds
    (streamer calls after the prompt) the generation took: assisted generation hands over each
    round's accepted tokens plus the target's own in one call."""

    def __init__(self) -> None:
        self.first_token_at: Optional[float] = None
        self.rounds = 0
        self._seen_prompt = False

    def put(self, value) -> None:
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.rounds += 1

    def end(self) -> None:
        pass


class ProposalCounter:
    """Counts the target tokens transformers' candidate generator proposes, by wrapping the
    generator it builds for each call (transformers reports no acceptance figures itself)."""

    # one counter per target model: several assisted methods share the target, and wrapping its
    # generator builder once per method would nest the wrappers
    _of_model: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @classmethod
    def for_model(cls, model) -> ProposalCounter:
        counter = cls._of_model.get(model)
        if counter is None:
            counter = cls._of_model[model] = cls(model)
        return counter

    def __init__(self, model) -> None:
        self.proposed = 0
        build_candidate_generator = model._get_candidate_generator

        def counting_build(*args, **kwargs):
            candidate_generator = build_candidate_generator(*args, **kwargs)
            get_candidates = candidate_generator.get_candidates

            def counting_get_candidates(input_ids, *more, **more_kwargs):
                candidate_ids, candidate_logits = get_candidates(input_ids, *more, **more_kwargs)
                self.proposed += candidate_ids.shape[1] - input_ids.shape[1]
                return candidate_ids, candidate_logits

            candidate_generator.get_candidates = counting_get_candidates
            return candidate_generator

        model._get_candidate_generator = counting_build

    def take(self) -> int:
        proposed, self.proposed = self.proposed, 0
        return proposed


def transformers_target(member: LoadedModel, spec: str, weights: str = "auto") -> LoadedModel:
    """The target as transformers' generate can drive it: the member itself when it runs on torch,
    else a torch copy loaded from the same spec (the GGUF engine, the default, is not a torch module;
    the copy's numerics differ, so a transformers method's "identical" column may differ too)."""
    if member.model is not None:
        return member
    from anypair.generation.members import load_member

    return load_member(spec, role="target", engine="torch", weights=weights, device="cpu")


class TransformersMethod:
    """transformers' `generate` on the target's loaded model: alone, or assisted by `assistant`
    (universal assisted generation when the tokenizers differ). Stops at the target's own EOS ids,
    as anypair does, so both write the same text."""

    def __init__(self, name: str, target: LoadedModel, assistant: Optional[TorchAssistant]) -> None:
        if target.model is None:
            raise InputError(f"transformers' generate needs the target on the torch engine, and {target.name} runs on "
                             f"{target.engine.engine}: leave transformers' methods out or load the target with engine='torch'")
        self.name = name
        self.target = target
        self.assistant = assistant
        self.draft_name = assistant.name if assistant is not None else ""
        self.keyed_sampling = False  # torch's generator, drawn from in an order assisted generation changes
        # transformers' own test of "same tokenizer": plain assisted generation then, UAG otherwise
        self.same_vocabulary = assistant is not None and (
            model_vocab_rows(assistant.model) == model_vocab_rows(target.model)
            and assistant.tokenizer.get_vocab() == target.hf_tokenizer.get_vocab())
        # The assistant's generation config changes during a call (confidence threshold,
        # heuristic draft length) and would carry over into the next prompt: restored each call.
        self.pristine_assistant_config = (copy.deepcopy(assistant.model.generation_config)
                                          if assistant is not None else None)
        self.proposal_counter = ProposalCounter.for_model(target.model) if assistant is not None else None

    def generation_kwargs(self, decoding: Decoding) -> dict:
        from transformers import GenerationConfig

        eos = sorted(self.target.eos_ids)
        config = GenerationConfig(
            max_new_tokens=decoding.max_new_tokens,
            do_sample=decoding.do_sample,
            # a clean config: a model's own defaults (repetition penalty, top-k) must not change
            # what "greedy" or "temperature T" means between methods
            temperature=decoding.temperature if decoding.do_sample else None,
            top_k=decoding.top_k if decoding.do_sample else None,
            top_p=decoding.top_p if decoding.do_sample else None,
            eos_token_id=eos,
            pad_token_id=eos[0],
            # transformers' way of not stopping at EOS: EOS is suppressed until the length is reached
            min_new_tokens=decoding.max_new_tokens if decoding.ignore_eos else None,
        )
        kwargs: dict[str, Any] = {"generation_config": config}
        if self.assistant is not None:
            kwargs["assistant_model"] = self.assistant.model
            if not self.same_vocabulary:
                kwargs["tokenizer"] = self.target.hf_tokenizer
                kwargs["assistant_tokenizer"] = self.assistant.tokenizer
        return kwargs

    def generate(self, prompt: BenchPrompt, decoding: Decoding) -> MethodOutput:
        prompt_ids = prompt.target_ids(self.target.hf_tokenizer)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.target.model.device)
        kwargs = self.generation_kwargs(decoding)
        assisted = self.assistant is not None
        if assisted:
            self.assistant.model.generation_config = copy.deepcopy(self.pristine_assistant_config)
            self.proposal_counter.take()
        if decoding.do_sample:
            torch.manual_seed(decoding.seed)
        timer = RoundTimer()
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.target.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), streamer=timer,
                                                **kwargs)
        total_time = time.perf_counter() - started
        generated = output[0, len(prompt_ids):].tolist()
        if not decoding.ignore_eos:
            generated = cut_after_end_of_sequence(generated, self.target.eos_ids)
        return MethodOutput(
            text=self.target.hf_tokenizer.decode(generated, skip_special_tokens=True),
            target_ids=generated,
            prompt_tokens=len(prompt_ids),
            time_to_first_token_s=(timer.first_token_at - started) if timer.first_token_at else total_time,
            total_time_s=total_time,
            finish_reason="eos" if generated and generated[-1] in self.target.eos_ids else "length",
            rounds=timer.rounds,
            draft_tokens_proposed=self.proposal_counter.take() if assisted else None,
            # each round adds the accepted draft tokens and one token of the target's own
            draft_tokens_accepted=max(len(generated) - timer.rounds, 0) if assisted else None,
        )


# ---- llama.cpp ----------------------------------------------------------------------------------


class LlamaCppAloneMethod:
    """The target's GGUF on llama.cpp alone, greedy, through llama-cpp-python's own generate loop:
    what a CPU user runs instead of anypair. Same threads; the GGUF's own (Q4) weights. It reads the
    prompt with the target's tokenizer and stops at the target's EOS ids, like every other method.
    Its context starts at llama.cpp's default (8,192) and grows, before the clock starts, for a request
    that needs more (a whole meeting transcript), up to the model's trained context."""

    def __init__(self, name: str, gguf_path: Path, target: LoadedModel, threads: int) -> None:
        from anypair.backends.llama_cpp import DEFAULT_CONTEXT
        from anypair.backends.llama_cpp_guard import require_llama_cpp_runs

        require_llama_cpp_runs(gguf_path, threads)
        self.name = name
        self.draft_name = ""
        self.keyed_sampling = False  # greedy only
        self.target = target
        self.gguf_path, self.threads = gguf_path, threads
        from anypair.tokenization.gguf_vocab import read_gguf_metadata

        metadata = read_gguf_metadata(Path(gguf_path))
        self.trained_context = next((int(v) for k, v in metadata.items() if k.endswith(".context_length")),
                                    DEFAULT_CONTEXT)
        self.llama = self._open(min(DEFAULT_CONTEXT, self.trained_context))

    def _open(self, context: int):
        from llama_cpp import Llama

        from anypair.backends.llama_cpp import PREFILL_CHUNK

        return Llama(str(self.gguf_path), n_ctx=context, n_batch=PREFILL_CHUNK, n_threads=self.threads,
                     n_threads_batch=self.threads, logits_all=False, verbose=False)

    def _hold(self, positions: int) -> None:
        """A context of at least `positions` (in steps of 1,024, at most the trained context)."""
        if positions <= self.llama.n_ctx():
            return
        trained = self.trained_context
        if positions > trained:
            raise InputError(f"{self.name}: {positions} positions (prompt and new tokens) exceed the model's trained "
                             f"context of {trained} tokens")
        self.llama.close()
        self.llama = self._open(min(trained, -(-positions // 1024) * 1024))

    def generate(self, prompt: BenchPrompt, decoding: Decoding) -> MethodOutput:
        if decoding.do_sample:
            raise InputError(f"{self.name} runs greedy only: benchmark sampling without it (--no-llama-cpp)")
        prompt_ids = prompt.target_ids(self.target.hf_tokenizer)
        self._hold(len(prompt_ids) + decoding.max_new_tokens)
        eos_ids = frozenset() if decoding.ignore_eos else self.target.eos_ids
        self.llama.reset()
        new: list[int] = []
        first = 0.0
        started = time.perf_counter()
        for token in self.llama.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                         reset=True):
            if not new:
                first = time.perf_counter() - started
            new.append(int(token))
            if token in eos_ids or len(new) >= decoding.max_new_tokens:
                break
        total_time = time.perf_counter() - started
        return MethodOutput(
            text=self.target.hf_tokenizer.decode(new, skip_special_tokens=True),
            target_ids=new,
            prompt_tokens=len(prompt_ids),
            time_to_first_token_s=first,
            total_time_s=total_time,
            finish_reason="eos" if new and new[-1] in eos_ids else "length",
        )
