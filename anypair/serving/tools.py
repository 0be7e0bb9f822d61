"""Tool calls in the target's text, as OpenAI's `tool_calls`.

A model offered tools (rendered into its prompt by its own chat template) calls one by writing it in
its text in the format its template taught it. The format parsed here is the one of Qwen2.5's
template (and Hermes'): each call a JSON object on its own between tags,

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Small models often write the call's JSON object alone, without the tags (Qwen2.5-Coder-0.5B does):
an answer that is nothing but such an object, naming one of the offered tools, is that call too.

The text itself is the target's own, token for token (greedy or seeded), so the calls parsed from it
are the ones the target alone makes. A template that renders tools in another format is refused
(`parses_tool_calls`) rather than served with its calls left in the text.

`tool_choice` "required" or a named function forces a call with a grammar (`forced_call_grammar`):
the answer is then the target's own under that constraint, as structured output is.

`ToolCallStream` does the same on a stream: text outside the tags goes out as it comes (holding back
only what may be the start of a tag), each call goes out whole once its closing tag is verified.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Optional, Union

from anypair.verifiers.constraints import Grammar

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"


def parses_tool_calls(chat_template: Union[str, dict, None]) -> bool:
    """Whether a chat template teaches the tag format parsed here (it writes the opening tag)."""
    if isinstance(chat_template, dict):
        return any(OPEN_TAG in text for text in chat_template.values())
    return bool(chat_template) and OPEN_TAG in chat_template


@dataclass(frozen=True)
class ToolCall:
    """One call the model wrote: the function's name and its arguments as JSON text."""

    name: str
    arguments: str

    def openai(self, call_id: str, index: Optional[int] = None) -> dict[str, Any]:
        """The call as OpenAI writes it in a message (`index` in a streamed delta)."""
        call = {"id": call_id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return call if index is None else {"index": index, **call}


def forced_call_grammar(tools: list[dict[str, Any]], name: Optional[str], tag_ids: Optional[tuple[int, int]]) -> Grammar:
    """A Lark grammar (llguidance's dialect) of one or more tagged calls of the offered tools (of
    `name` alone when given). `tag_ids`: the target's ids of the opening and closing tags where each
    is one token of its vocabulary (Qwen2.5's are), which the grammar names by id."""
    schemas = [{"type": "object", "properties": {"name": {"const": tool["function"]["name"]},
                                                  "arguments": tool["function"].get("parameters") or {"type": "object"}},
                "required": ["name", "arguments"], "additionalProperties": False}
               for tool in tools if name is None or tool["function"]["name"] == name]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    open_tag, close_tag = (f"<[{tag_ids[0]}]>", f"<[{tag_ids[1]}]>") if tag_ids else (json.dumps(OPEN_TAG),
                                                                                    json.dumps(CLOSE_TAG))
    call = f'call: {open_tag} "\\n" %json {json.dumps(schema)} "\\n" {close_tag}'
    # one call when a function is named; with "required", as many as the model writes, one a line
    start = "start: call" if name is not None else 'start: call ("\\n" call)*'
    return Grammar("lark", f"{start}\n{call}\n")


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_call(body: str) -> Optional[ToolCall]:
    """The call in the text between the tags; None when it is not a call (the text stays text)."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # a model may write the arguments as JSON text already
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(call["name"], json.dumps(arguments, ensure_ascii=False))


@dataclass(frozen=True)
class ParsedAnswer:
    content: Optional[str]  # the text outside the calls (None when there is none)
    calls: tuple[ToolCall, ...]


def parse_answer(text: str, tool_names: frozenset[str]) -> ParsedAnswer:
    """The calls in a whole answer, and the text around them (`tool_names`: the offered tools)."""
    stream = ToolCallStream(tool_names)
    pieces = stream.feed(text) + stream.finish()
    content = "".join(p for p in pieces if isinstance(p, str))
    calls = tuple(p for p in pieces if isinstance(p, ToolCall))
    return ParsedAnswer(content if content.strip() or not calls else None, calls)


class ToolCallStream:
    """Splits a stream of text into text pieces and whole `ToolCall`s, in order. An answer whose
    first character (past whitespace) opens a JSON object is held to its end: it may be a bare call
    of one of `tool_names`."""

    def __init__(self, tool_names: frozenset[str]) -> None:
        self.tool_names = tool_names
        self._pending = ""  # text not yet handed out: a possible opening tag, or a call not yet closed
        self._in_call = False
        self._bare: Optional[bool] = None  # whether the answer may be a bare call (None: nothing seen yet)

    def feed(self, text: str) -> list[Union[str, ToolCall]]:
        self._pending += text
        if self._bare is None and self._pending.strip():
            self._bare = self._pending.lstrip().startswith("{")
        if self._bare is not False:
            return []  # undecided, or held to the end as a possible bare call
        out: list[Union[str, ToolCall]] = []
        while True:
            if self._in_call:
                end = self._pending.find(CLOSE_TAG)
                if end < 0:
                    return out
                body, self._pending = self._pending[:end], self._pending[end + len(CLOSE_TAG):]
                self._in_call = False
                call = parse_call(body)
                # text between tags that is not a call is the model's text, tags and all
                out.append(call if call is not None else f"{OPEN_TAG}{body}{CLOSE_TAG}")
                # the newline the template puts between calls is part of the call format
                self._pending = self._pending.lstrip("\n") if call is not None else self._pending
                continue
            start = self._pending.find(OPEN_TAG)
            if start >= 0:
                if start:
                    out.append(self._pending[:start])
                self._pending = self._pending[start + len(OPEN_TAG):]
                self._in_call = True
                continue
            keep = _partial_tag_length(self._pending)
            if len(self._pending) > keep:
                out.append(self._pending[:len(self._pending) - keep])
                self._pending = self._pending[len(self._pending) - keep:]
            return out

    def finish(self) -> list[Union[str, ToolCall]]:
        """What is left at the end: an unclosed call stays text, as the model wrote it."""
        if self._bare:
            call = parse_call(self._pending.strip())
            if call is not None and call.name in self.tool_names:
                self._pending = ""
                return [call]
            self._bare = False
            return self.feed("") + self.finish()
        rest = (OPEN_TAG + self._pending) if self._in_call else self._pending
        self._pending, self._in_call = "", False
        return [rest] if rest else []


def _partial_tag_length(text: str) -> int:
    """The length of the longest end of `text` that begins the opening tag."""
    for length in range(min(len(text), len(OPEN_TAG) - 1), 0, -1):
        if OPEN_TAG.startswith(text[-length:]):
            return length
    return 0
