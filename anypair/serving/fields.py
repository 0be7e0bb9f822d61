"""What anypair does with each field of OpenAI's request bodies that its schemas do not serve.

A request body may carry any of OpenAI's fields; the ones anypair serves are declared in
`schemas` (pydantic checks them). Every other field is one of:

- **ignored**: it never changes the text a client gets back (`user`, `metadata`, `store`, ...);
- **refused**: it would change the answer and anypair does not serve it, so a request that gives
  it a value other than its neutral one (the value that asks for nothing: a penalty of 0, an empty
  `logit_bias`, `echo: false`) gets a 400 naming the field and what to do instead, rather than an
  answer that silently differs from what was asked for.

A field that is neither (a misspelling such as `max_token`, a field of the other endpoint, another
server's extension anypair has not classified) is **unknown**: refused with a 400 naming it, and
the served field it is closest to (`unknown_field`), as OpenAI refuses it. Ignoring it would let a
typo change the answer unseen (`max_token` would leave the length at the server's default).
`anypair serve --accept-unknown-fields` ignores unknown fields instead, for a client that sends
its own extensions and cannot be changed. Other servers' extensions that change the answer (vLLM's
`guided_json`, llama-server's `grammar`, ...) are refused like OpenAI's own.

`README.md` (Serve) lists the same table for users; `tests/test_serve_api.py` walks it.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Collection, Literal, Mapping, Optional

Endpoint = Literal["chat", "completions"]
BOTH: frozenset[Endpoint] = frozenset(("chat", "completions"))
CHAT: frozenset[Endpoint] = frozenset(("chat",))
COMPLETIONS: frozenset[Endpoint] = frozenset(("completions",))


def _absent(value: Any) -> bool:
    return value is None


def _zero(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0)


def _one(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 1)


def _false(value: Any) -> bool:
    return value is None or value is False


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == [] or value == ""


def _text_only(value: Any) -> bool:
    return value is None or value == ["text"]


@dataclass(frozen=True)
class RefusedField:
    """A field that would change the answer, and that anypair does not serve."""

    name: str
    endpoints: frozenset[Endpoint]
    neutral: Callable[[Any], bool]  # the values that ask for nothing (accepted, as if absent)
    neutral_text: str  # those values, for the message and the README
    why: str  # what the field does, and what to send instead

    def message(self) -> str:
        return (f"{self.name} is not served by anypair: {self.why}. Leave it out (or send {self.neutral_text}); "
                "anypair never ignores a field that would change the answer")


#: fields that change what the client gets back and that anypair refuses (at a non-neutral value)
REFUSED: tuple[RefusedField, ...] = (
    RefusedField("best_of", COMPLETIONS, _one, "1",
                 "one sample per request: send best_of requests with different seeds and compare them yourself"),
    RefusedField("echo", COMPLETIONS, _false, "false", "the prompt is not repeated in the answer: prepend it yourself"),
    RefusedField("suffix", COMPLETIONS, _empty, 'null or ""', "insertion (fill in the middle) is not offered"),
    RefusedField("functions", CHAT, _empty, "null",
                 "the deprecated functions API is not offered: send tools (and tool_choice)"),
    RefusedField("function_call", CHAT, _absent, "null",
                 "the deprecated functions API is not offered: send tools and tool_choice"),
    RefusedField("audio", CHAT, _absent, "null", "the models served read and write text only"),
    RefusedField("modalities", CHAT, _text_only, '["text"]', "the models served read and write text only"),
    RefusedField("reasoning_effort", CHAT, _absent, "null",
                 "the models served are not reasoning models: there is no reasoning to constrain"),
    RefusedField("verbosity", CHAT, _absent, "null", "no control of the answer's length other than max_tokens"),
    RefusedField("web_search_options", CHAT, _absent, "null", "the server does not search the web"),
    RefusedField("moderation", CHAT, _absent, "null", "no moderation runs: nothing is scored or blocked"),
    # other servers' extensions that change the answer
    RefusedField("min_p", BOTH, _zero, "0", "min-p truncation is not offered: use top_p or top_k"),
    RefusedField("typical_p", BOTH, _one, "1", "typical sampling is not offered: use top_p or top_k"),
    RefusedField("repetition_penalty", BOTH, _one, "1",
                 "the multiplicative repetition penalty is not offered: send frequency_penalty or "
                 "presence_penalty (served exactly)"),
    RefusedField("min_tokens", BOTH, _zero, "0", "forbidding the end before a length is not offered"),
    RefusedField("guided_choice", BOTH, _absent, "null", "choice constraints are not offered"),
    RefusedField("guided_grammar", BOTH, _absent, "null",
                 "grammars are not read: send guided_regex, or response_format with a JSON schema"),
    RefusedField("grammar", BOTH, _absent, "null",
                 "llama-server's GBNF grammars are not read: send guided_regex, or response_format with a JSON schema"),
    RefusedField("json_schema", BOTH, _absent, "null",
                 'send response_format: {"type": "json_schema", "json_schema": {"name": ..., "schema": ...}}'),
    RefusedField("parallel_tool_calls", CHAT, lambda v: v is None or v is True, "true",
                 "every tool call the model writes is returned; limiting it to one would change the answer"),
    RefusedField("tool_choice", COMPLETIONS, _absent, "null", "tools are served by POST /v1/chat/completions"),
    RefusedField("tools", COMPLETIONS, _empty, "null", "tools are served by POST /v1/chat/completions"),
    RefusedField("top_logprobs", COMPLETIONS, _absent, "null",
                 "the completions API takes the number of alternatives as logprobs (an integer)"),
)

#: OpenAI's fields that change nothing in the text a client gets back, ignored
IGNORED: tuple[str, ...] = (
    "user", "metadata", "store", "service_tier", "safety_identifier",
    # prompt caching is a cost of OpenAI's; anypair reads every prompt anew
    "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention",
    # a prediction of the answer only speeds OpenAI's decoding up; the answer is the model's own
    "prediction",
)

_REFUSED_BY_NAME: Mapping[str, RefusedField] = {field.name: field for field in REFUSED}


def refused_field(extra: Mapping[str, Any], endpoint: Endpoint) -> Optional[RefusedField]:
    """The first field of a body's unserved fields (`extra`) that anypair must refuse, if any."""
    for name, value in extra.items():
        field = _REFUSED_BY_NAME.get(name)
        if field is not None and endpoint in field.endpoints and not field.neutral(value):
            return field
    return None


def unknown_field(extra: Mapping[str, Any], endpoint: Endpoint) -> Optional[str]:
    """The first of a body's unserved fields (`extra`) that no table names for `endpoint`, if any."""
    refused = {field.name for field in REFUSED if endpoint in field.endpoints}
    return next((name for name in extra if name not in refused and name not in IGNORED), None)


def unknown_field_message(name: str, endpoint: Endpoint, served: Collection[str],
                          served_elsewhere: Collection[str]) -> str:
    """What the 400 for an unknown field says: OpenAI's words, then the served field closest to it
    (`served`: the endpoint's own; a typo most often meant one), or that the other endpoint serves
    it (`served_elsewhere`: `prompt` sent for chat)."""
    path, other = ("/v1/chat/completions", "/v1/completions") if endpoint == "chat" else \
        ("/v1/completions", "/v1/chat/completions")
    close = difflib.get_close_matches(name, list(served), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    where = f"it is a field of POST {other}" if name in served_elsewhere else "leave it out"
    return (f"Unrecognized request argument supplied: {name}{hint}. POST {path} has no field {name!r}: {where}; "
            "anypair refuses fields it does not know rather than ignore one that may change the answer "
            "(anypair serve --accept-unknown-fields ignores them)")
