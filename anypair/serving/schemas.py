"""The bodies of OpenAI's completions and chat completions API, as far as anypair serves them.

Requests are pydantic models: FastAPI validates each body against them and a failure becomes a 400
naming the field (see `errors`), worded from the field's `description`, which says what is
accepted. The fields of OpenAI's API that anypair does not serve are kept aside (`model_extra` of a
request body) and judged by `fields`: ignored when they change nothing in the answer (`user`,
`metadata`), refused with a 400 naming them when they would (penalties, `logit_bias`, ...). `n`
other than 1 is refused, since ignoring it would return fewer choices than asked for.

Responses are plain dicts built by the functions below, in OpenAI's shapes, plus an `anypair`
object with the round statistics of the request.
"""
from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from anypair.types import SEED_MAX, SEED_MIN, GenerationResult

# OpenAI caps stop sequences at 4; a longer list is more likely a mistake than a need
MAX_STOP_STRINGS = 4

NonEmptyStr = Annotated[str, Field(min_length=1)]


class _Body(BaseModel):
    # unknown fields are ignored (clients send OpenAI's full set); numbers and flags are strict
    # (`strict=True` on each): "max_tokens": "16" or true is an error, not 16 or 1
    model_config = ConfigDict(extra="ignore")


class _RequestBody(_Body):
    # a whole request body: the fields it does not declare are kept in `model_extra`, for
    # `fields.refused_field` to refuse those that would change the answer
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Body):
    include_usage: bool = Field(False, strict=True, description="true to add a last chunk with the usage")


class _GenerationFields(_RequestBody):
    """The fields both endpoints share."""

    model: str = Field(description="the model's id, as GET /v1/models lists it")
    max_tokens: Optional[int] = Field(
        None, gt=0, strict=True,
        description="the most new tokens to generate: a positive integer that, added to the prompt's tokens, fits "
                    "the model's context (default: the server's --max-new-tokens)")
    temperature: Optional[float] = Field(
        None, ge=0, le=2, strict=True,
        description="a number from 0 to 2: 0 is greedy (the target's own output, token for token), above 0 samples "
                    "exactly from the target's distribution (default 1)")
    top_p: Optional[float] = Field(
        None, gt=0, le=1, strict=True, description="a number above 0 and at most 1 (1: off, the default)")
    top_k: Optional[int] = Field(
        None, ge=0, strict=True, description="an integer >= 0 (0: off, the default); not in OpenAI's API")
    seed: Optional[int] = Field(
        None, ge=SEED_MIN, le=SEED_MAX, strict=True,
        description=f"an integer from {SEED_MIN} to {SEED_MAX} (64 bits): the same seed, request and server give the "
                    "same sample")
    stop: Union[NonEmptyStr, Annotated[list[NonEmptyStr], Field(min_length=1, max_length=MAX_STOP_STRINGS)], None] = \
        Field(None, description=f"a non-empty string or a list of 1 to {MAX_STOP_STRINGS} of them: the text ends "
                                "before the first one")
    stream: Optional[bool] = Field(None, strict=True, description="true or false: true streams server-sent events")
    stream_options: Optional[StreamOptions] = Field(None, description='an object such as {"include_usage": true}')
    n: Optional[int] = Field(
        None, ge=1, le=1, strict=True, description="1 (one choice per request; send n requests for n choices)")

    @property
    def max_tokens_field(self) -> str:
        return "max_tokens"

    @property
    def requested_max_tokens(self) -> Optional[int]:
        return self.max_tokens


class CompletionRequest(_GenerationFields):
    """POST /v1/completions: raw text to continue."""

    prompt: Union[NonEmptyStr, Annotated[list[NonEmptyStr], Field(min_length=1, max_length=1)]] = Field(
        description="a non-empty string (or a list of exactly one), the raw text to continue")

    @property
    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class TextPart(_Body):
    type: Literal["text"] = Field(description='"text" (anypair reads text only)')
    text: str = Field(description="the text of this part")


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant"] = Field(
        description='one of "system" (or "developer", OpenAI\'s newer name of it), "user" or "assistant"')
    content: Union[str, list[TextPart]] = Field(
        description='a string, or a list of {"type": "text", "text": ...} parts')

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class ChatCompletionRequest(_GenerationFields):
    """POST /v1/chat/completions: a conversation, rendered through each model's own chat template."""

    messages: list[ChatMessage] = Field(
        min_length=1, description='a non-empty list of {"role": ..., "content": ...} messages')
    max_completion_tokens: Optional[int] = Field(
        None, gt=0, strict=True,
        description="OpenAI's newer name of max_tokens: a positive integer (wins over max_tokens)")

    @property
    def max_tokens_field(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    @property
    def requested_max_tokens(self) -> Optional[int]:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def message_dicts(self) -> list[dict]:
        # "developer" is OpenAI's newer name of "system", which chat templates know
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text} for m in self.messages]


def field_names() -> frozenset[str]:
    """Every field name of the request bodies: what an error's location may name (the rest of a
    pydantic location are the names of union members, such as 'list[constrained-str]')."""
    names: set[str] = set()
    for model in (CompletionRequest, ChatCompletionRequest, ChatMessage, TextPart, StreamOptions):
        names.update(model.model_fields)
    return frozenset(names)


def field_description(location: tuple) -> Optional[str]:
    """The description of the field at a pydantic location ('body', 'messages', 0, 'role'), if any."""
    models: list[type[BaseModel]] = [CompletionRequest, ChatCompletionRequest, ChatMessage, TextPart, StreamOptions]
    for part in reversed(location):
        if isinstance(part, str):
            for model in models:
                if part in model.model_fields and model.model_fields[part].description:
                    return model.model_fields[part].description
    return None


# -- responses -------------------------------------------------------------------------------------

FinishReason = Literal["stop", "length"]


def finish_reason(result: GenerationResult) -> FinishReason:
    """OpenAI's reason: 'stop' for the end-of-sequence token or a stop string, 'length' otherwise."""
    return "length" if result.finish_reason == "length" else "stop"


def usage(result: GenerationResult) -> dict[str, int]:
    prompt, new = result.stats.prompt_tokens, result.stats.new_tokens
    return {"prompt_tokens": prompt, "completion_tokens": new, "total_tokens": prompt + new}


def round_statistics(result: GenerationResult, engines: str, queue_wait_s: float) -> dict[str, Any]:
    """The `anypair` object of a response: how the draft did on this request, and where time went."""
    s = result.stats
    return {
        "acceptance_rate": round(s.acceptance_rate, 4),
        "accepted_per_round": round(s.mean_accepted_per_round, 4),
        "rounds": s.rounds,
        "draft_tokens_proposed": s.draft_tokens_proposed,
        "draft_tokens_accepted": s.draft_tokens_accepted,
        "tokens_per_second": round(s.tokens_per_second, 3),
        "time_to_first_token_s": round(s.time_to_first_token_s, 4),
        "generation_time_s": round(s.total_time_s, 4),
        "queue_wait_s": round(queue_wait_s, 4),
        "engines": engines,
        "draft_failure_reason": s.draft_failure_reason,
        # continuous batching: the requests that shared this one's target calls (mean over its rounds,
        # and the most), and its rounds in a shared call where drafting did not pay for itself
        "batch_size": round(s.mean_batch_size, 3),
        "batch_size_max": max(1, s.batch_size_max),
        "undrafted_shared_rounds": s.undrafted_shared_rounds,
        # vLLM's speculative-decoding figure: tokens a verification step yields (1 + accepted draft tokens)
        "mean_acceptance_length": round(1.0 + s.mean_accepted_per_round, 4),
    }


def timings(result: GenerationResult) -> dict[str, Any]:
    """llama-server's `timings` object, which its clients read for speculative decoding (draft_n,
    draft_n_accepted): the prompt's and the generation's token counts, milliseconds and rates."""
    s = result.stats
    prompt_ms, predicted_ms = 1000.0 * s.time_prefill_s, 1000.0 * max(0.0, s.total_time_s - s.time_prefill_s)
    return {"prompt_n": s.prompt_tokens, "prompt_ms": round(prompt_ms, 3),
            "prompt_per_second": round(s.prompt_tokens / prompt_ms * 1000.0, 3) if prompt_ms > 0 else 0.0,
            "predicted_n": s.new_tokens, "predicted_ms": round(predicted_ms, 3),
            "predicted_per_second": round(s.new_tokens / predicted_ms * 1000.0, 3) if predicted_ms > 0 else 0.0,
            "draft_n": s.draft_tokens_proposed, "draft_n_accepted": s.draft_tokens_accepted}


class ResponseIds:
    """The id, creation time and model name every body and chunk of one request repeats."""

    def __init__(self, request_id: str, model: str) -> None:
        self.id = request_id
        self.model = model
        self.created = int(time.time())

    def header(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}


def completion_body(ids: ResponseIds, result: GenerationResult, anypair: dict[str, Any]) -> dict[str, Any]:
    choice = {"index": 0, "text": result.text, "finish_reason": finish_reason(result), "logprobs": None}
    return {**ids.header("text_completion"), "choices": [choice], "usage": usage(result), "timings": timings(result),
            "anypair": anypair}


def chat_body(ids: ResponseIds, result: GenerationResult, anypair: dict[str, Any]) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": result.text},
              "finish_reason": finish_reason(result), "logprobs": None}
    return {**ids.header("chat.completion"), "choices": [choice], "usage": usage(result), "timings": timings(result),
            "anypair": anypair}


def completion_chunk(ids: ResponseIds, text: str, reason: Optional[FinishReason] = None) -> dict[str, Any]:
    return {**ids.header("text_completion"),
            "choices": [{"index": 0, "text": text, "finish_reason": reason, "logprobs": None}]}


def chat_chunk(ids: ResponseIds, delta: dict[str, str], reason: Optional[FinishReason] = None) -> dict[str, Any]:
    return {**ids.header("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}]}
