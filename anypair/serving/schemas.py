"""The bodies of OpenAI's completions and chat completions API, as far as anypair serves them.

Requests are pydantic models: FastAPI validates each body against them and a failure becomes a 400
naming the field (see `errors`), worded from the field's `description`, which says what is
accepted. The fields of OpenAI's API that anypair does not serve are kept aside (`model_extra` of a
request body) and judged by `fields`: ignored when they change nothing in the answer (`user`,
`metadata`), refused with a 400 naming them when they would (`best_of`, `min_p`, ...) or when no
table knows them (a typo such as `max_token`). `n`
other than 1 is refused, since ignoring it would return fewer choices than asked for.

Responses are plain dicts built by the functions below, in OpenAI's shapes, plus an `anypair`
object with the round statistics of the request.
"""
from __future__ import annotations

import json
import time
from typing import Annotated, Any, Callable, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from anypair.types import MAX_TOP_LOGPROBS, SEED_MAX, SEED_MIN, GenerationResult, TokenLogprob

# OpenAI caps stop sequences at 4; a longer list is more likely a mistake than a need
MAX_STOP_STRINGS = 4

NonEmptyStr = Annotated[str, Field(min_length=1)]


class _Body(BaseModel):
    # a nested object's undeclared fields are ignored: clients send back whole objects the server
    # returned (an assistant message with `refusal` and `annotations`); numbers and flags are strict
    # (`strict=True` on each): "max_tokens": "16" or true is an error, not 16 or 1
    model_config = ConfigDict(extra="ignore")


class _RequestBody(_Body):
    # a whole request body: the fields it does not declare are kept in `model_extra`, for `fields`
    # to refuse those that would change the answer and those it does not know
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Body):
    include_usage: bool = Field(False, strict=True, description="true to add a last chunk with the usage")


class TextFormat(_Body):
    type: Literal["text"] = Field(description='"text": free text (no constraint)')


class JSONObjectFormat(_Body):
    type: Literal["json_object"] = Field(description='"json_object": the answer is one JSON object')


class JSONSchemaSpec(_Body):
    name: str = Field(description="the schema's name (letters, digits, _ and -)")
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema",
                                    description="a JSON schema (an object) the answer follows")
    description: Optional[str] = Field(None, description="what the format is for (not shown to the model)")
    strict: Optional[bool] = Field(None, description="true or false: anypair always follows the schema strictly")


class JSONSchemaFormat(_Body):
    type: Literal["json_schema"] = Field(description='"json_schema": the answer follows json_schema.schema')
    json_schema: JSONSchemaSpec = Field(description='{"name": ..., "schema": {...}}')


ResponseFormat = Union[TextFormat, JSONObjectFormat, JSONSchemaFormat]


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
    response_format: Optional[ResponseFormat] = Field(
        None, discriminator="type",
        description='{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {"name": ..., '
                    '"schema": {...}}}: the answer follows it, and is the target\'s own answer under it')
    guided_regex: Optional[NonEmptyStr] = Field(
        None, description="a regular expression the answer follows (vLLM's field), the target's own answer under it")
    guided_json: Optional[dict[str, Any]] = Field(
        None, description="a JSON schema the answer follows (vLLM's field; OpenAI's is response_format)")
    logit_bias: Optional[dict[str, Annotated[float, Field(ge=-100, le=100)]]] = Field(
        None, description='an object of token ids (as strings) to biases from -100 to 100, such as {"1734": -100}: '
                          "added to the target's logits at every position")

    frequency_penalty: Optional[float] = Field(
        None, ge=-2, le=2, strict=True,
        description="a number from -2 to 2 (0: off): each generated token's logit less this times its count so far")
    presence_penalty: Optional[float] = Field(
        None, ge=-2, le=2, strict=True,
        description="a number from -2 to 2 (0: off): each generated token's logit less this once it appeared")

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, bias: Optional[dict[str, float]]) -> Optional[dict[str, float]]:
        if bias is not None and not all(key.isdigit() for key in bias):
            raise ValueError("logit_bias keys must be token ids (non-negative integers written as strings)")
        return bias

    @property
    def token_bias(self) -> Optional[dict[int, float]]:
        return {int(key): value for key, value in self.logit_bias.items()} if self.logit_bias else None

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
    logprobs: Optional[int] = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, strict=True,
        description=f"an integer from 0 to {MAX_TOP_LOGPROBS}: the target's log-probability of each token and this "
                    "many alternatives")

    @property
    def requested_logprobs(self) -> Optional[int]:
        return self.logprobs

    @property
    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class TextPart(_Body):
    type: Literal["text"] = Field(description='"text" (anypair reads text only)')
    text: str = Field(description="the text of this part")


class FunctionCall(_Body):
    name: str = Field(description="the function's name")
    arguments: str = Field(description="the arguments as JSON text, such as '{\"city\": \"Paris\"}'")

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, arguments: str) -> str:
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments must be JSON text ({exc})") from None
        if not isinstance(parsed, dict):
            raise ValueError("arguments must be a JSON object")
        return arguments


class ToolCall(_Body):
    id: str = Field(description="the call's id, which the tool message answering it repeats as tool_call_id")
    type: Literal["function"] = Field("function", description='"function"')
    function: FunctionCall = Field(description='{"name": ..., "arguments": "<JSON text>"}')


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"] = Field(
        description='one of "system" (or "developer", OpenAI\'s newer name of it), "user", "assistant" or "tool"')
    content: Union[str, list[TextPart], None] = Field(
        description='a string, or a list of {"type": "text", "text": ...} parts (null only in an assistant message '
                    'with tool_calls)')
    tool_calls: Optional[list[ToolCall]] = Field(
        None, description="in an assistant message: the tool calls it made, as the server returned them")
    tool_call_id: Optional[str] = Field(None, description="in a tool message: the id of the call it answers")

    @model_validator(mode="after")
    def _content_or_calls(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is null: give the message's text (only an assistant message with tool_calls "
                             "may have none)")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id, the id of the call it answers")
        return self

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)

    def template_dict(self) -> dict[str, Any]:
        """The message as chat templates read it: "developer" as "system" (the name templates know),
        tool calls' arguments as objects (Qwen2.5's template writes them with `tojson`)."""
        message: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role, "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [{"id": call.id, "type": "function", "function": {
                "name": call.function.name, "arguments": json.loads(call.function.arguments)}}
                for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class FunctionDefinition(_Body):
    name: NonEmptyStr = Field(description="the function's name")
    description: Optional[str] = Field(None, description="what the function does, for the model")
    parameters: Optional[dict[str, Any]] = Field(None, description="its parameters, as a JSON schema")
    strict: Optional[bool] = Field(None, description="true or false")


class Tool(_Body):
    type: Literal["function"] = Field(description='"function"')
    function: FunctionDefinition = Field(description='{"name": ..., "description": ..., "parameters": {...}}')

    def template_dict(self) -> dict[str, Any]:
        return {"type": "function", "function": self.function.model_dump(exclude_none=True)}


class NamedFunction(_Body):
    name: NonEmptyStr = Field(description="the name of one of the tools")


class NamedToolChoice(_Body):
    type: Literal["function"] = Field(description='"function"')
    function: NamedFunction = Field(description='{"name": ...}')


class ChatCompletionRequest(_GenerationFields):
    """POST /v1/chat/completions: a conversation, rendered through each model's own chat template."""

    messages: list[ChatMessage] = Field(
        min_length=1, description='a non-empty list of {"role": ..., "content": ...} messages')
    max_completion_tokens: Optional[int] = Field(
        None, gt=0, strict=True,
        description="OpenAI's newer name of max_tokens: a positive integer (wins over max_tokens)")
    logprobs: Optional[bool] = Field(
        None, strict=True, description="true or false: true returns the target's log-probability of each token")
    top_logprobs: Optional[int] = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, strict=True,
        description=f"an integer from 0 to {MAX_TOP_LOGPROBS}, with logprobs: true: the alternatives per token")
    tools: Optional[list[Tool]] = Field(
        None, description='a list of {"type": "function", "function": {"name": ..., "parameters": {...}}}')
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = Field(
        None, description='"none", "auto" (the default with tools), "required" or {"type": "function", "function": '
                          '{"name": ...}}')

    @property
    def requested_logprobs(self) -> Optional[int]:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def offered_tools(self) -> Optional[list[dict[str, Any]]]:
        """The tools the templates render: none when tool_choice is "none"."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [tool.template_dict() for tool in self.tools]

    @property
    def max_tokens_field(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    @property
    def requested_max_tokens(self) -> Optional[int]:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def message_dicts(self) -> list[dict]:
        return [m.template_dict() for m in self.messages]


#: every model a request body is made of
_SCHEMAS: tuple[type[BaseModel], ...] = (
    CompletionRequest, ChatCompletionRequest, ChatMessage, TextPart, StreamOptions, TextFormat, JSONObjectFormat,
    JSONSchemaFormat, JSONSchemaSpec, FunctionCall, ToolCall, FunctionDefinition, Tool, NamedFunction,
    NamedToolChoice)


def field_names() -> frozenset[str]:
    """Every field name of the request bodies: what an error's location may name (the rest of a
    pydantic location are the names of union members, such as 'list[constrained-str]')."""
    names: set[str] = set()
    for model in _SCHEMAS:
        names.update(model.model_fields)
        names.update(f.alias for f in model.model_fields.values() if f.alias)
    return frozenset(names)


def body_fields(model: type[BaseModel]) -> frozenset[str]:
    """The top-level fields a request body of `model` declares, as a client writes them."""
    return frozenset(info.alias or name for name, info in model.model_fields.items())


def field_description(location: tuple) -> Optional[str]:
    """The description of the field at a pydantic location ('body', 'messages', 0, 'role'), if any."""
    for part in reversed(location):
        if isinstance(part, str):
            for model in _SCHEMAS:
                for name, info in model.model_fields.items():
                    if part in (name, info.alias) and info.description:
                        return info.description
    return None


# -- responses -------------------------------------------------------------------------------------

FinishReason = Literal["stop", "length", "tool_calls"]

#: the bytes of a target token id (the target's TokenizerAdapter.token_bytes)
TokenBytes = Callable[[int], bytes]


def finish_reason(result: GenerationResult, called_tools: bool = False) -> FinishReason:
    """OpenAI's reason: 'length' when the answer was cut at its length (whatever it was writing,
    calls included: a client then knows to ask for more), else 'tool_calls' when it called tools,
    'stop' for the end-of-sequence token or a stop string."""
    if result.finish_reason == "length":
        return "length"
    return "tool_calls" if called_tools else "stop"


def _token_text(token_bytes: TokenBytes, target_id: int) -> tuple[str, list[int]]:
    data = token_bytes(target_id)
    # a token may hold part of a character: its text shows the replacement character, `bytes` the truth
    return data.decode("utf-8", errors="replace"), list(data)


def chat_logprobs(entries: Sequence[TokenLogprob], token_bytes: TokenBytes) -> dict[str, Any]:
    """OpenAI's chat `logprobs` object: per token its text, bytes, log-probability and alternatives."""
    content = []
    for entry in entries:
        text, data = _token_text(token_bytes, entry.target_id)
        top = []
        for target_id, logprob in entry.top:
            alt_text, alt_data = _token_text(token_bytes, target_id)
            top.append({"token": alt_text, "logprob": logprob, "bytes": alt_data})
        content.append({"token": text, "logprob": entry.logprob, "bytes": data, "top_logprobs": top})
    return {"content": content, "refusal": None}


def completion_logprobs(entries: Sequence[TokenLogprob], token_bytes: TokenBytes,
                        first_offset: int = 0) -> dict[str, Any]:
    """OpenAI's completions `logprobs` object (tokens, token_logprobs, top_logprobs, text_offset);
    `first_offset`: the characters of the answer before these tokens (a stream's later chunks)."""
    tokens, offsets, top = [], [], []
    offset = first_offset
    for entry in entries:
        text, _ = _token_text(token_bytes, entry.target_id)
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
        top.append({_token_text(token_bytes, t)[0]: logprob for t, logprob in entry.top})
    return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries], "top_logprobs": top,
            "text_offset": offsets}


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
        # the batch's plan: rows per target forward, the draft length its rounds were allowed, the
        # rounds whose draft the batch cut (to none: drafting off under load) and why
        "rows_per_round": round(s.mean_rows_per_round, 3),
        "draft_length": round(s.mean_draft_length, 3),
        "draft_capped_rounds": s.draft_capped_rounds,
        "batch_draft_note": s.batch_draft_note,
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


def completion_body(ids: ResponseIds, result: GenerationResult, anypair: dict[str, Any],
                    logprobs: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    choice = {"index": 0, "text": result.text, "finish_reason": finish_reason(result), "logprobs": logprobs}
    return {**ids.header("text_completion"), "choices": [choice], "usage": usage(result), "timings": timings(result),
            "anypair": anypair}


def chat_body(ids: ResponseIds, result: GenerationResult, anypair: dict[str, Any],
              message: Optional[dict[str, Any]] = None, logprobs: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """`message`: the assistant's message when it is not the plain text (tools were offered)."""
    message = message or {"role": "assistant", "content": result.text}
    choice = {"index": 0, "message": message, "finish_reason": finish_reason(result, bool(message.get("tool_calls"))),
              "logprobs": logprobs}
    return {**ids.header("chat.completion"), "choices": [choice], "usage": usage(result), "timings": timings(result),
            "anypair": anypair}


def completion_chunk(ids: ResponseIds, text: str, reason: Optional[FinishReason] = None,
                     logprobs: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    return {**ids.header("text_completion"),
            "choices": [{"index": 0, "text": text, "finish_reason": reason, "logprobs": logprobs}]}


def chat_chunk(ids: ResponseIds, delta: dict[str, Any], reason: Optional[FinishReason] = None,
               logprobs: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    return {**ids.header("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": logprobs}]}
