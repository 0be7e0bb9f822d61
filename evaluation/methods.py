"""The decoding methods compared, all on the same loaded models, dtype and threads.

- `target`          the target alone, through anypair's own loop (`assisted=False`): the baseline
- `anypair`         anypair with the draft model as drafter
- `anypair-lookup`  anypair with prompt-lookup drafting (no draft model)
- `hf-uag`          transformers' universal assisted generation with the same draft model (for a
                    pair sharing a tokenizer, transformers' plain assisted generation)
- `hf-target`       the target alone through transformers' `generate` (optional: shows whether
                    anypair's baseline loop is as fast as transformers' own)

Each method turns a prompt into a `MethodOutput` with the same figures, whatever produced it.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Optional, Protocol

import torch

from evaluation.prompts import BuiltPrompt, encode_prompt

METHODS_NEEDING_DRAFT = ("anypair", "hf-uag")
METHODS_WITHOUT_DRAFT = ("target", "anypair-lookup", "hf-target")
ALL_METHODS = ("target", "anypair", "anypair-lookup", "hf-uag", "hf-target")
BASELINE_METHOD = "target"


@dataclass(frozen=True)
class LoadedModel:
    """A model loaded once and shared by every method that uses it."""

    name: str
    model: object  # transformers PreTrainedModel for transformers' methods (None: none needs it)
    tokenizer: object  # transformers tokenizer
    member: object = None  # anypair.generation.members.LoadedModel: what anypair's methods run


@dataclass(frozen=True)
class Decoding:
    """How to decode: greedy when temperature == 0."""

    max_new_tokens: int
    temperature: float = 0.0
    seed: int = 0

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0


@dataclass
class MethodOutput:
    text: str
    target_ids: list[int]  # generated target ids, prompt excluded, end-of-sequence excluded
    prompt_tokens: int
    time_to_first_token_s: float
    total_time_s: float
    finish_reason: str
    rounds: Optional[int] = None  # None: the method has no draft rounds
    draft_tokens_proposed: Optional[int] = None
    draft_tokens_accepted: Optional[int] = None

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

    def generate(self, prompt: BuiltPrompt, decoding: Decoding) -> MethodOutput: ...


def cut_after_end_of_sequence(ids: list[int], eos_ids: frozenset[int]) -> list[int]:
    """Generated ids up to and including the first end-of-sequence token, the convention anypair's
    `target_ids` follow: every method's ids must be cut the same way, or the outputs of an example
    that ends at EOS compare unequal by one token (and tokens per second count one token apart)."""
    for position, token in enumerate(ids):
        if token in eos_ids:
            return ids[: position + 1]
    return ids


def eos_ids_of(loaded: LoadedModel) -> frozenset[int]:
    configured = loaded.model.generation_config.eos_token_id
    ids = set(configured if isinstance(configured, (list, tuple)) else [configured] if configured is not None else [])
    if loaded.tokenizer.eos_token_id is not None:
        ids.add(loaded.tokenizer.eos_token_id)
    return frozenset(ids)


# ---- anypair ------------------------------------------------------------------------------------


class AnyPairMethod:
    """anypair's generator; `drafter` "none" means the target alone (assisted=False)."""

    def __init__(self, name: str, target: LoadedModel, draft: Optional[LoadedModel], drafter: str, threads: int) -> None:
        from anypair import AnyPairGenerator

        self.name = name
        self.draft_name = draft.name if draft is not None else ""
        self.assisted = drafter != "none"
        def spec(loaded: LoadedModel):
            return loaded.member if loaded.member is not None else (loaded.model, loaded.tokenizer)

        options = {"threads": threads}
        if self.assisted:
            options["drafter"] = drafter
        self.generator = AnyPairGenerator(spec(target), spec(draft) if draft is not None else None, **options)

    def generate(self, prompt: BuiltPrompt, decoding: Decoding) -> MethodOutput:
        result = self.generator.generate(
            prompt.text,
            max_new_tokens=decoding.max_new_tokens,
            do_sample=decoding.do_sample,
            temperature=decoding.temperature if decoding.do_sample else 1.0,
            seed=decoding.seed if decoding.do_sample else None,
            assisted=self.assisted,
        )
        stats = result.stats
        return MethodOutput(
            text=result.text,
            target_ids=list(result.target_ids),
            prompt_tokens=stats.prompt_tokens,
            time_to_first_token_s=stats.time_to_first_token_s,
            total_time_s=stats.total_time_s,
            finish_reason=result.finish_reason,
            rounds=stats.rounds if self.assisted else None,
            draft_tokens_proposed=stats.draft_tokens_proposed if self.assisted else None,
            draft_tokens_accepted=stats.draft_tokens_accepted if self.assisted else None,
        )


# ---- transformers -------------------------------------------------------------------------------


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

    @classmethod
    def for_model(cls, model) -> "ProposalCounter":
        """One counter per target model: several assisted methods share the target, and wrapping
        its generator builder once per method would nest the wrappers."""
        counter = getattr(model, "_anypair_proposal_counter", None)
        if counter is None:
            counter = cls(model)
            model._anypair_proposal_counter = counter
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


class TransformersMethod:
    """transformers' `generate`: the target alone, or assisted by `draft` (universal assisted
    generation when the tokenizers differ)."""

    def __init__(self, name: str, target: LoadedModel, draft: Optional[LoadedModel]) -> None:
        self.name = name
        self.target = target
        self.draft = draft
        self.draft_name = draft.name if draft is not None else ""
        self.eos_ids = eos_ids_of(target)
        self.same_vocabulary = draft is not None and draft.model.get_output_embeddings().weight.shape[0] == (
            target.model.get_output_embeddings().weight.shape[0]
        ) and draft.tokenizer.get_vocab() == target.tokenizer.get_vocab()
        # The assistant's generation config changes during a call (confidence threshold,
        # heuristic draft length) and would carry over into the next example: restore it each time.
        self.pristine_assistant_config = copy.deepcopy(draft.model.generation_config) if draft is not None else None
        self.proposal_counter = ProposalCounter.for_model(target.model) if draft is not None else None

    def generation_kwargs(self, decoding: Decoding) -> dict:
        from transformers import GenerationConfig

        eos = sorted(self.eos_ids)
        config = GenerationConfig(
            max_new_tokens=decoding.max_new_tokens,
            do_sample=decoding.do_sample,
            # a clean config: a model's own defaults (repetition penalty, top-k) must not change
            # what "greedy" or "temperature T" means between methods
            temperature=decoding.temperature if decoding.do_sample else None,
            top_k=0 if decoding.do_sample else None,
            top_p=1.0 if decoding.do_sample else None,
            eos_token_id=eos,
            pad_token_id=eos[0],
        )
        kwargs = {"generation_config": config}
        if self.draft is not None:
            self.draft.model.generation_config = copy.deepcopy(self.pristine_assistant_config)
            kwargs["assistant_model"] = self.draft.model
            if not self.same_vocabulary:
                kwargs["tokenizer"] = self.target.tokenizer
                kwargs["assistant_tokenizer"] = self.draft.tokenizer
        return kwargs

    def generate(self, prompt: BuiltPrompt, decoding: Decoding) -> MethodOutput:
        prompt_ids = encode_prompt(self.target.tokenizer, prompt.text, prompt.uses_chat_template)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long)
        kwargs = self.generation_kwargs(decoding)
        timer = RoundTimer()
        if decoding.do_sample:
            torch.manual_seed(decoding.seed)
        if self.proposal_counter is not None:
            self.proposal_counter.take()
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.target.model.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), streamer=timer, **kwargs
            )
        total_time = time.perf_counter() - started
        generated = cut_after_end_of_sequence(output[0, len(prompt_ids):].tolist(), self.eos_ids)
        finish_reason = "eos" if generated and generated[-1] in self.eos_ids else "length"
        assisted = self.draft is not None
        proposed = self.proposal_counter.take() if assisted else None
        # each round adds the accepted draft tokens and one token of the target's own
        accepted = max(len(generated) - timer.rounds, 0) if assisted else None
        return MethodOutput(
            text=self.target.tokenizer.decode(generated, skip_special_tokens=True),
            target_ids=generated,
            prompt_tokens=len(prompt_ids),
            time_to_first_token_s=(timer.first_token_at - started) if timer.first_token_at else total_time,
            total_time_s=total_time,
            finish_reason=finish_reason,
            rounds=timer.rounds if assisted else None,
            draft_tokens_proposed=proposed,
            draft_tokens_accepted=accepted,
        )


def build_method(name: str, target: LoadedModel, draft: Optional[LoadedModel], threads: int) -> Method:
    """The method `name` on the shared models (`draft` is ignored by methods that use none)."""
    if name == "target":
        return AnyPairMethod(name, target, None, drafter="none", threads=threads)
    if name == "anypair":
        return AnyPairMethod(name, target, draft, drafter="model", threads=threads)
    if name == "anypair-lookup":
        return AnyPairMethod(name, target, None, drafter="lookup", threads=threads)
    if name == "hf-uag":
        return TransformersMethod(name, target, draft)
    if name == "hf-target":
        return TransformersMethod(name, target, None)
    raise ValueError(f"unknown method {name!r}; choose from {', '.join(ALL_METHODS)}")
