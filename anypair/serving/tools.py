"""Tool calls in the target's text, as OpenAI's `tool_calls`.

A model offered tools (rendered into its prompt by its own chat template) calls one by writing it in
its text in the format its template taught it. The format parsed here is the one of Qwen2.5's
template (and Hermes'): each call a JSON object on its own between tags,

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Small models often write the call in the other forms they have seen, and those are calls too when
the JSON names one of the offered tools and its arguments are an object (otherwise they stay text):

- the object alone, the whole answer (Qwen2.5-Coder-0.5B does), or a list of such objects;
- the object in a fenced JSON block, anywhere in the answer (Qwen2.5-Coder-1.5B does):

      ```json
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      ```

A call cut by the length (`max_tokens`) is no call: an unclosed `<tool_call>` (the tag says it is a
call, not text for the reader) is dropped from the text; an unclosed block or object stays text, as
it may as well be an answer in JSON.

The text itself is the target's own, token for token (greedy or seeded), so the calls parsed from it
are the ones the target alone makes. A template that renders tools in another format is refused
(`parses_tool_calls`) rather than served with its calls left in the text.

`tool_choice` "required" or a named function forces a call with a grammar (`forced_call_grammar`):
the answer is then the target's own under that constraint, as structured output is.

`ToolCallStream` does the same on a stream: text outside the calls goes out as it comes (holding
back only what may be the start of a tag or of a fenced call), each call goes out whole once its
closing tag or fence is verified; an answer that begins as a bare JSON object is held to its end.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Optional, Union

from anypair.verifiers.constraints import Grammar

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
FENCE = "```"
# a fenced block that opens as a call would: ```json (or ``` alone), a line break, then an object
# or a list of objects; `_FENCE_BEGUN`: the texts that may still become one (too short to say)
_FENCE_OPENING = re.compile(r"```(?:json)?[ \t]*\r?\n\s*(?:\[\s*)?\{", re.IGNORECASE)
_FENCE_BEGUN = re.compile(r"```(?:j(?:s(?:o(?:n)?)?)?)?[ \t]*(?:\r?(?:\n\s*(?:\[\s*)?)?)?", re.IGNORECASE)
_FENCE_LINE = re.compile(r"```(?:json)?[ \t]*\r?\n", re.IGNORECASE)


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


def _call_of(value: Any) -> Optional[ToolCall]:
    """The call a parsed JSON value is, if it is one: an object with a string `name` and object
    `arguments` (or JSON text of one; `parameters`, Llama's word, is read the same)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # a model may write the arguments as JSON text already
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def parse_call(body: str) -> Optional[ToolCall]:
    """The call in the text between the tags; None when it is not a call (the text stays text)."""
    try:
        return _call_of(json.loads(body))
    except json.JSONDecodeError:
        return None


def parse_json_calls(text: str, tool_names: frozenset[str]) -> Optional[list[ToolCall]]:
    """The calls in JSON text written without tags (a bare answer, a fenced block): one call object or
    a non-empty list of them, each naming an offered tool; None when the text is anything else."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    values = value if isinstance(value, list) else [value]
    calls = [_call_of(item) for item in values]
    if not calls or any(call is None or call.name not in tool_names for call in calls):
        return None
    return calls


@dataclass(frozen=True)
class ParsedAnswer:
    content: Optional[str]  # the text outside the calls (None when there is none)
    calls: tuple[ToolCall, ...]


def parse_answer(text: str, tool_names: frozenset[str], cut: bool = False) -> ParsedAnswer:
    """The calls in a whole answer, and the text around them (`tool_names`: the offered tools; `cut`:
    the answer ended at its length, so an unclosed tagged call is dropped)."""
    stream = ToolCallStream(tool_names)
    pieces = stream.feed(text) + stream.finish(cut)
    content = "".join(p for p in pieces if isinstance(p, str))
    calls = tuple(p for p in pieces if isinstance(p, ToolCall))
    return ParsedAnswer(content if content.strip() or not (calls or stream.dropped) else None, calls)


Piece = Union[str, ToolCall]


class ToolCallStream:
    """Splits a stream of text into text pieces and whole `ToolCall`s, in order. An answer that
    opens (past whitespace) a JSON object, or a list whose first item is one, is held to its end:
    it may be a bare call of one of `tool_names`."""

    def __init__(self, tool_names: frozenset[str]) -> None:
        self.tool_names = tool_names
        self._pending = ""  # text not yet handed out: a possible opening, or a call not yet closed
        self._in: Optional[str] = None  # the call being read: "tag" or "fence" (None: text)
        self._bare: Optional[bool] = None  # whether the answer may be a bare call (None: nothing seen yet)
        self.dropped = False  # whether `finish` dropped a tagged call the length cut
        # the line breaks after a call are part of the call format (the template puts one between
        # calls): they are dropped, also when they come in a later piece
        self._after_call = False

    def feed(self, text: str) -> list[Piece]:
        self._pending += text
        if self._bare is None:
            self._bare = _bare_opening(self._pending)
        if self._bare is not False:
            return []  # undecided, or held to the end as a possible bare call
        out: list[Piece] = []
        while self._step(out):
            pass
        return out

    def _step(self, out: list[Piece]) -> bool:
        """Hands out what the pending text settles; False when the rest must wait for more text."""
        if self._in == "tag":
            return self._close_tag(out)
        if self._in == "fence":
            return self._close_fence(out)
        if self._after_call:
            self._pending = self._pending.lstrip("\n")
            self._after_call = not self._pending
        tag, fence = self._pending.find(OPEN_TAG), self._pending.find(FENCE)
        if tag >= 0 and (fence < 0 or tag < fence):
            self._hand_out(out, tag)
            self._pending, self._in = self._pending[len(OPEN_TAG):], "tag"
            return True
        if fence >= 0:
            opens = _fence_opening(self._pending[fence:])
            if opens is False:  # a block of code or text: it goes out, fence and all
                self._hand_out(out, fence + len(FENCE))
                return True
            self._hand_out(out, fence)
            self._in = "fence" if opens else None
            return bool(opens)
        # the end may begin a tag or a fence: it waits for the next piece
        keep = max(_partial_tag_length(self._pending), len(self._pending) - len(self._pending.rstrip("`")))
        self._hand_out(out, len(self._pending) - keep)
        return False

    def _hand_out(self, out: list[Piece], length: int) -> None:
        """The first `length` characters of the pending text go out as text."""
        if length:
            out.append(self._pending[:length])
            self._pending = self._pending[length:]

    def _close_tag(self, out: list[Piece]) -> bool:
        end = self._pending.find(CLOSE_TAG)
        if end < 0:
            return False
        body, self._pending = self._pending[:end], self._pending[end + len(CLOSE_TAG):]
        self._in = None
        call = parse_call(body)
        # text between tags that is not a call is the model's text, tags and all
        out.append(call if call is not None else f"{OPEN_TAG}{body}{CLOSE_TAG}")
        self._after_call = call is not None
        return True

    def _close_fence(self, out: list[Piece]) -> bool:
        line = _FENCE_LINE.match(self._pending)
        end = self._pending.find(FENCE, line.end())
        if end < 0:
            return False
        block, self._pending = self._pending[:end + len(FENCE)], self._pending[end + len(FENCE):]
        self._in = None
        calls = parse_json_calls(block[line.end():end], self.tool_names)
        out.extend(calls if calls is not None else [block])
        self._after_call = calls is not None
        return True

    def finish(self, cut: bool = False) -> list[Piece]:
        """What is left at the end (`cut`: the answer ended at its length). An unclosed tagged call is
        dropped when cut (a client must not show call markup as the answer) and is text otherwise,
        as the model wrote it; an unclosed block or bare object stays text (it may be JSON text)."""
        if self._bare:
            calls = parse_json_calls(self._pending, self.tool_names)
            if calls is not None:
                self._pending = ""
                return list(calls)
            self._bare = False
            return self.feed("") + self.finish(cut)
        if self._in == "tag" and cut:
            self._pending, self._in, self.dropped = "", None, True
            return []
        rest = (OPEN_TAG + self._pending) if self._in == "tag" else self._pending
        self._pending, self._in = "", None
        return [rest] if rest else []


def _bare_opening(text: str) -> Optional[bool]:
    """Whether an answer that begins with `text` may be a bare call: it opens an object or a list of
    objects (None: only whitespace or "[" so far)."""
    begun = text.lstrip()
    if begun.startswith("["):
        begun = begun[1:].lstrip()
    return None if not begun else begun.startswith("{")


def _fence_opening(text: str) -> Optional[bool]:
    """Whether text that begins with a fence opens a fenced call (None: too short to say)."""
    if _FENCE_OPENING.match(text):
        return True
    return None if _FENCE_BEGUN.fullmatch(text) else False


def _partial_tag_length(text: str) -> int:
    """The length of the longest end of `text` that begins the opening tag."""
    for length in range(min(len(text), len(OPEN_TAG) - 1), 0, -1):
        if OPEN_TAG.startswith(text[-length:]):
            return length
    return 0
