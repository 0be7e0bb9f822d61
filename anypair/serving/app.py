"""The FastAPI application: OpenAI's endpoints over one loaded generator.

    GET  /health                 answers at once, also while a request generates
    GET  /v1/models              the one model served
    POST /v1/completions         raw text to continue
    POST /v1/chat/completions    a conversation, through each model's own chat template

A request is checked (pydantic, then what needs the model: its name, its context), queued on the
worker, and answered from the worker's events: one JSON body, or server-sent events, one per
verified piece of text, ending with `data: [DONE]`. Greedy requests (temperature 0) return the
target's own greedy text, as `anypair generate` and `AnyPairGenerator.generate` do.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional, Union

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from fastapi.sse import EventSourceResponse, format_sse_event

from anypair.errors import InputError
from anypair.generation.options import GenerationRequest
from anypair.serving.errors import SERVER_ERROR, APIError, install_error_handlers
from anypair.serving.fields import Endpoint, refused_field, unknown_field, unknown_field_message
from anypair.serving.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    JSONObjectFormat,
    JSONSchemaFormat,
    NamedToolChoice,
    ResponseIds,
    body_fields,
    chat_body,
    chat_chunk,
    chat_logprobs,
    completion_body,
    completion_chunk,
    completion_logprobs,
    finish_reason,
    round_statistics,
    timings,
    usage,
)
from anypair.serving.tools import (
    CLOSE_TAG,
    OPEN_TAG,
    ToolCall,
    ToolCallStream,
    forced_call_grammar,
    new_call_id,
    parse_answer,
    parses_tool_calls,
)
from anypair.types import GenerationResult, TokenLogprob, VerifiedText
from anypair.verifiers.constraints import Grammar
from anypair.serving.worker import Chunk, Event, Failed, Finished, GenerationWorker, Job, QueueFull, ServedGenerator

logger = logging.getLogger("anypair.serving")

# how often a handler waiting for its turn checks that its client is still there
DISCONNECT_POLL_S = 0.25


@dataclass(frozen=True)
class ServeSettings:
    """What the server adds to the generator's own options."""

    model_name: str  # the id clients send as `model` (the target's name by default)
    queue_size: int = 16  # requests that may wait while the running ones generate; one more gets 503
    max_batch: int = 1  # requests that run at once, sharing each target forward (continuous batching)
    default_max_tokens: int = 128  # for requests that leave max_tokens out
    # web pages (origins such as "http://localhost:3000", or "*") whose scripts may call the server:
    # a chat front end in a browser needs its origin here; none by default
    allowed_origins: tuple[str, ...] = ()
    # a field no table of `fields` names is refused (a 400 naming it), as OpenAI refuses it; True
    # ignores it instead, for clients that send their own extensions (--accept-unknown-fields)
    accept_unknown_fields: bool = False


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


def create_app(generator: ServedGenerator, settings: ServeSettings) -> FastAPI:
    """The application serving `generator` (an AnyPairGenerator, loaded once)."""
    worker = GenerationWorker(generator, settings.queue_size, settings.max_batch)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            worker.stop()

    app = FastAPI(title="anypair", summary="lossless speculative decoding with a draft of any tokenizer",
                  lifespan=lifespan)
    app.state.worker = worker
    install_error_handlers(app)
    if settings.allowed_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.allowed_origins), allow_methods=["GET", "POST"],
                           allow_headers=["*"], expose_headers=["Retry-After"])
    started = int(time.time())

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": settings.model_name, "generating": worker.running is not None,
                "running": worker.active if worker.max_batch > 1 else int(worker.running is not None),
                "max_batch": worker.max_batch, "queued": worker.waiting, "queue_size": worker.queue_size,
                "served": worker.served, "cancelled": worker.cancelled}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        model = {"id": settings.model_name, "object": "model", "created": started, "owned_by": "anypair",
                 "anypair": {"engines": generator.engines}}
        return {"object": "list", "data": [model]}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        check_fields(body, "completions")
        return await serve(request, body, prompt=body.prompt_text, messages=None)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        check_fields(body, "chat")
        if not generator.target.has_chat_template:
            raise APIError(400, f"{settings.model_name} has no chat template: send the conversation as raw text to "
                                "POST /v1/completions", param="messages", code="no_chat_template")
        tools = body.offered_tools
        if not body.tools and body.tool_choice not in (None, "none", "auto"):
            raise APIError(400, "tool_choice asks for a call, but no tools are given: send tools, or leave "
                                "tool_choice out", param="tool_choice", code="invalid_value")
        forced_call = check_tools(body, tools) if tools else None
        return await serve(request, body, prompt=None, messages=body.message_dicts, tools=tools,
                           forced_call=forced_call)

    def check_fields(body: Union[CompletionRequest, ChatCompletionRequest], endpoint: Endpoint) -> None:
        """A 400 for an undeclared field of the body (`model_extra`) that would change the answer
        (`fields.REFUSED`) or that no table names (a typo, another server's extension). It runs
        before every other check: a misspelt field may be why the rest of the body looks wrong."""
        extra = body.model_extra or {}
        refused = refused_field(extra, endpoint)
        if refused is not None:
            raise APIError(400, refused.message(), param=refused.name, code="unsupported_field")
        unknown = None if settings.accept_unknown_fields else unknown_field(extra, endpoint)
        if unknown is not None:
            other = ChatCompletionRequest if endpoint == "completions" else CompletionRequest
            message = unknown_field_message(unknown, endpoint, body_fields(type(body)), body_fields(other))
            raise APIError(400, message, param=unknown, code="unknown_field")

    def check_tools(body: ChatCompletionRequest, tools: list[dict]) -> Optional[Grammar]:
        """A 400 for tools this server cannot serve exactly: a template that does not render them
        (or renders them in a format whose calls are not parsed), a tool_choice naming no offered
        tool, a constraint beside them. Returns the grammar that forces a call when tool_choice is
        "required" or names a function."""
        template = generator.target.hf_tokenizer.chat_template
        if not generator.target.renders_tools or not parses_tool_calls(template):
            why = ("does not render tools" if not generator.target.renders_tools
                   else "renders tools in a format whose calls anypair does not parse (it parses <tool_call> JSON, "
                        "as Qwen2.5's and Hermes' templates write them)")
            raise APIError(400, f"tools: {settings.model_name}'s chat template {why}: leave tools out, or serve a "
                                "model whose template writes <tool_call> (Qwen2.5)", param="tools",
                           code="tools_unsupported")
        if (isinstance(body.response_format, (JSONObjectFormat, JSONSchemaFormat)) or body.guided_regex is not None
                or body.guided_json is not None):
            raise APIError(400, "response_format: a constraint on the answer with tools would forbid the model's "
                                "tool calls: send one or the other", param="response_format",
                           code="unsupported_value")
        if body.tool_choice in (None, "auto"):
            return None
        named = body.tool_choice.function.name if isinstance(body.tool_choice, NamedToolChoice) else None
        if named is not None and named not in {tool["function"]["name"] for tool in tools}:
            raise APIError(400, f"tool_choice names {named!r}, which is not among the tools: name one of them",
                           param="tool_choice", code="invalid_value")
        vocabulary = generator.target.hf_tokenizer.added_tokens_encoder
        tag_ids = ((vocabulary[OPEN_TAG], vocabulary[CLOSE_TAG])
                   if OPEN_TAG in vocabulary and CLOSE_TAG in vocabulary else None)
        grammar = forced_call_grammar(tools, named, tag_ids)
        try:
            grammar.check()
        except InputError as exc:
            raise APIError(400, f"tools: {exc}", param="tools", code="invalid_grammar") from None
        return grammar

    async def serve(request: Request, body: Union[CompletionRequest, ChatCompletionRequest], *,
                    prompt: Optional[str], messages: Optional[list[dict]],
                    tools: Optional[list[dict]] = None, forced_call: Optional[Grammar] = None) -> Response:
        chat = messages is not None
        if chat and body.top_logprobs is not None and not body.logprobs:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
        arguments = generation_arguments(body, prompt, messages)
        if tools:
            arguments["tools"] = tools
        if forced_call is not None:
            arguments["grammar"] = forced_call
        tool_names = frozenset(tool["function"]["name"] for tool in tools) if tools else None
        answer = AnswerFormat(chat, tool_names, generator.target.tokenizer.token_bytes
                              if body.requested_logprobs is not None else None)
        try:  # the one typed request, built once here; the body's schema checked each field already
            typed = GenerationRequest.of(**arguments)
        except InputError as exc:
            raise APIError(400, str(exc), code="invalid_value") from None
        job = Job(f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", typed, asyncio.get_running_loop(),
                  max_tokens_field=body.max_tokens_field, streams=bool(body.stream))
        try:
            worker.submit(job)
        except QueueFull as full:
            raise APIError(503, f"the server is busy: {worker.queue_size} requests already wait for a free slot; "
                                f"retry in {full.retry_after_s} s (the Retry-After header)",
                           error_type=SERVER_ERROR, code="queue_full",
                           headers={"Retry-After": str(full.retry_after_s)}) from None
        try:
            first = await next_event(job, request)
            if isinstance(first, Failed):
                raise failure_error(first, job)
            ids = ResponseIds(job.request_id, settings.model_name)
            if body.stream:
                include_usage = bool(body.stream_options and body.stream_options.include_usage)
                return EventSourceResponse(stream_events(job, first, ids, answer, include_usage),
                                           headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            event = first
            while not isinstance(event, Finished):
                if isinstance(event, Failed):
                    raise failure_error(event, job)
                event = await next_event(job, request)
        except ClientGone:
            # nobody reads the answer; the worker logs the request's line when it drops the job
            return Response(status_code=499)
        log_request(job, event)
        return JSONResponse(answer.body(ids, event.result, statistics(event)))

    def generation_arguments(body: Union[CompletionRequest, ChatCompletionRequest], prompt: Optional[str],
                             messages: Optional[list[dict]]) -> dict[str, Any]:
        if body.model != settings.model_name:
            raise APIError(404, f"model {body.model!r} is not served here: use {settings.model_name!r} "
                                "(GET /v1/models lists it)", param="model", code="model_not_found")
        # whether prompt + max_new_tokens fit is checked once, where the prompt is rendered (the session)
        max_new_tokens = body.requested_max_tokens or settings.default_max_tokens
        temperature = 1.0 if body.temperature is None else body.temperature
        arguments = dict(prompt=prompt, messages=messages, max_new_tokens=max_new_tokens, stop=body.stop,
                         # temperature 0 is OpenAI's greedy; SamplingConfig wants a positive one only when sampling
                         do_sample=temperature > 0, temperature=temperature if temperature > 0 else 1.0,
                         top_p=1.0 if body.top_p is None else body.top_p, top_k=body.top_k or 0, seed=body.seed)
        if body.requested_logprobs is not None:
            arguments["logprobs"] = body.requested_logprobs
        grammar = requested_grammar(body)
        if grammar is not None:
            arguments["grammar"] = grammar
        if body.token_bias:  # its ids are checked against the vocabulary once, by the generator
            arguments["logit_bias"] = body.token_bias
        if body.frequency_penalty:
            arguments["frequency_penalty"] = body.frequency_penalty
        if body.presence_penalty:
            arguments["presence_penalty"] = body.presence_penalty
        return arguments

    def statistics(finished: Finished) -> dict[str, Any]:
        return round_statistics(finished.result, generator.engines, finished.queue_wait_s)

    async def stream_events(job: Job, first: Event, ids: ResponseIds, answer: AnswerFormat,
                            include_usage: bool) -> AsyncIterator[bytes]:
        try:
            if answer.chat:  # OpenAI's first chat chunk names the role
                yield sse(chat_chunk(ids, {"role": "assistant", "content": ""}))
            event = first
            while True:
                if isinstance(event, Chunk):
                    for chunk in answer.chunks(ids, event.text):
                        yield sse(chunk)
                elif isinstance(event, Finished):
                    for chunk in answer.last_chunks(ids, event.result):
                        yield sse(chunk)
                    reason = answer.streamed_finish_reason(event.result)
                    last = chat_chunk(ids, {}, reason) if answer.chat else completion_chunk(ids, "", reason)
                    yield sse({**last, "timings": timings(event.result), "anypair": statistics(event)})
                    if include_usage:
                        yield sse({**ids.header(last["object"]), "choices": [], "usage": usage(event.result)})
                    yield format_sse_event(data_str="[DONE]")
                    log_request(job, event)
                    return
                else:  # the generator broke after its first piece: the status line is already sent
                    yield sse(failure_error(event, job).body())
                    yield format_sse_event(data_str="[DONE]")
                    return
                event = await job.events.get()
        finally:
            # the client left (the response was cancelled) or the stream ended: a no-op then
            job.cancel()

    def requested_grammar(body: Union[CompletionRequest, ChatCompletionRequest]) -> Optional[Grammar]:
        """The constraint the body asks for (response_format, or vLLM's guided_regex / guided_json)."""
        fmt = body.response_format
        asked = [name for name, value in (("response_format", fmt if isinstance(fmt, (JSONObjectFormat,
                                                                                        JSONSchemaFormat)) else None),
                                          ("guided_regex", body.guided_regex), ("guided_json", body.guided_json))
                 if value is not None]
        if not asked:
            return None
        if len(asked) > 1:
            raise APIError(400, f"{asked[1]}: give one constraint, not {' and '.join(asked)}", param=asked[1],
                           code="invalid_value")
        if isinstance(fmt, JSONObjectFormat):
            grammar = Grammar("json_object")
        elif isinstance(fmt, JSONSchemaFormat):
            grammar = Grammar.json_schema(fmt.json_schema.schema_)
        elif body.guided_regex is not None:
            grammar = Grammar("regex", body.guided_regex)
        else:
            grammar = Grammar.json_schema(body.guided_json)
        try:
            grammar.check()
        except InputError as exc:
            raise APIError(400, f"{asked[0]}: {exc}", param=asked[0], code="invalid_grammar") from None
        return grammar

    return app


class AnswerFormat:
    """How one request's answer is written: chat or completions, calls of the offered tools
    (`tool_names`) parsed from the text or not, log-probabilities or not (`token_bytes`: the
    target's token bytes, given when asked for).
    A stream's pieces go through `chunks`, and the rest through `last_chunks` at its end."""

    def __init__(self, chat: bool, tool_names: Optional[frozenset[str]],
                 token_bytes: Optional[Callable[[int], bytes]]) -> None:
        self.chat = chat
        self.token_bytes = token_bytes
        self.tool_names = tool_names
        self.calls = ToolCallStream(tool_names) if tool_names else None
        self.calls_sent = 0
        self.logprobs_sent = 0
        self.characters_sent = 0  # the completions API's text_offset of the next token

    # -- a whole answer --------------------------------------------------------------------------
    def body(self, ids: ResponseIds, result: GenerationResult, anypair: dict[str, Any]) -> dict[str, Any]:
        logprobs = self.logprobs(result.logprobs or [])
        if not self.chat:
            return completion_body(ids, result, anypair, logprobs)
        message = None
        if self.calls is not None:
            # the text without its calls, and without a tagged call the length cut (see `tools`)
            parsed = parse_answer(result.text, self.tool_names, cut=result.finish_reason == "length")
            message = {"role": "assistant", "content": parsed.content}
            if parsed.calls:
                message["tool_calls"] = [call.openai(new_call_id()) for call in parsed.calls]
        return chat_body(ids, result, anypair, message, logprobs)

    def logprobs(self, entries: list[TokenLogprob]) -> Optional[dict[str, Any]]:
        if self.token_bytes is None:
            return None
        if self.chat:
            return chat_logprobs(entries, self.token_bytes)
        written = completion_logprobs(entries, self.token_bytes, self.characters_sent)
        self.characters_sent += sum(len(token) for token in written["tokens"])
        return written

    # -- a stream --------------------------------------------------------------------------------
    def chunks(self, ids: ResponseIds, text: str) -> list[dict[str, Any]]:
        """The chunks of one verified piece of text (a VerifiedText carries its tokens' logprobs)."""
        entries = list(text.logprobs) if isinstance(text, VerifiedText) else []
        self.logprobs_sent += len(entries)
        logprobs = self.logprobs(entries)
        if not self.chat:
            return [completion_chunk(ids, text, logprobs=logprobs)]
        if self.calls is None:
            return [chat_chunk(ids, {"content": str(text)}, logprobs=logprobs)]
        return self._deltas(ids, self.calls.feed(text), logprobs)

    def last_chunks(self, ids: ResponseIds, result: GenerationResult) -> list[dict[str, Any]]:
        """What the stream has not sent at its end: text held back as a possible tool call, and the
        log-probabilities of tokens that ended the answer without text (an end-of-sequence token)."""
        rest = (result.logprobs or [])[self.logprobs_sent:]
        logprobs = self.logprobs(rest) if rest else None
        pieces = self.calls.finish(cut=result.finish_reason == "length") if self.calls is not None else []
        if not pieces and logprobs is None:
            return []
        if not self.chat:
            return [completion_chunk(ids, "", logprobs=logprobs)]
        return self._deltas(ids, pieces, logprobs) if pieces else [chat_chunk(ids, {}, logprobs=logprobs)]

    def _deltas(self, ids: ResponseIds, pieces: list[Union[str, ToolCall]],
                logprobs: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = []
        for piece in pieces:
            if isinstance(piece, ToolCall):
                deltas.append({"tool_calls": [piece.openai(new_call_id(), index=self.calls_sent)]})
                self.calls_sent += 1
            elif piece:
                deltas.append({"content": piece})
        if not deltas and logprobs is not None:
            deltas.append({})  # the tokens' figures go out even while their text is held back
        return [chat_chunk(ids, delta, logprobs=logprobs if i == 0 else None) for i, delta in enumerate(deltas)]

    def streamed_finish_reason(self, result: GenerationResult) -> str:
        return finish_reason(result, self.calls_sent > 0)


async def next_event(job: Job, request: Request) -> Event:
    """The job's next event; ClientGone (and the job cancelled) if the client leaves meanwhile."""
    while True:
        try:
            return await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_S)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                job.cancel()
                raise ClientGone() from None


def failure_error(failed: Failed, job: Job) -> APIError:
    if isinstance(failed.error, InputError):
        # the generator speaks of its own argument; the client sent max_tokens
        message = " ".join(str(failed.error).replace("max_new_tokens", job.max_tokens_field).split())
        if failed.param and failed.param not in message:  # "prompt (n tokens) + ..." of a chat request
            message = f"{failed.param}: {message}"
        return APIError(400, message, param=failed.param, code=failed.code or "invalid_request")
    return APIError(500, f"internal error: {type(failed.error).__name__}: the server's log has the details; "
                         "please report it", error_type=SERVER_ERROR, code="internal_error")


def sse(payload: dict[str, Any]) -> bytes:
    return format_sse_event(data_str=json.dumps(payload, ensure_ascii=False))


def log_request(job: Job, finished: Finished) -> None:
    s = finished.result.stats
    logger.info("%s prompt=%d new=%d %.2f tok/s acceptance=%.2f accepted/round=%.2f finish=%s queue=%.2fs",
                job.request_id, s.prompt_tokens, s.new_tokens, s.tokens_per_second, s.acceptance_rate,
                s.mean_accepted_per_round, finished.result.finish_reason, finished.queue_wait_s)
