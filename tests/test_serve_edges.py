"""The server's edges (issue 51, item 7), over HTTP with the official openai client, on a stand-in
generator that answers a scripted text (so each edge is tested whatever a model happens to write):

- an unknown field (`frobnicate`, the typo `max_token`) is a 400 naming it and the field it is
  closest to, as OpenAI answers; `--accept-unknown-fields` ignores it instead;
- a tool call written in a model's other usual forms (a fenced ```json block, a bare object or list
  of objects) naming an offered tool comes back as `tool_calls`, `content` null when the message is
  only calls, whole or streamed; the same forms naming no offered tool stay text;
- an answer cut by `max_tokens` in the middle of a tagged call says `finish_reason: "length"`, and
  the partial call is neither a `tool_calls` entry nor text in `content`.

The real models' side of the same edges (a forced call cut by max_tokens, the target alone's
answer) is in tests/test_serve_api.py.
"""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Iterator, Optional

import openai
import pytest

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a given city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
PARIS = ("get_weather", '{"city": "Paris"}')


class ScriptedSession:
    """A request's loop that writes the generator's script, piece by piece, and ends as it says."""

    def __init__(self, pieces: list[str], finish_reason: str) -> None:
        self.pieces, self.finish_reason, self.result = pieces, finish_reason, None

    def steps(self):
        from anypair.types import GenerationResult, GenerationStats

        yield from self.pieces
        stats = GenerationStats(new_tokens=len(self.pieces), prompt_tokens=1)
        self.result = GenerationResult("".join(self.pieces), list(range(len(self.pieces))), stats, self.finish_reason)


class ScriptedGenerator:
    """Answers every request with `script` (pieces of text, as a stream verifies them) ending with
    `finish_reason`; its chat template renders tools in Qwen2.5's tagged format."""

    engines = "stand-in"
    target_backend = SimpleNamespace(max_context=1024)
    target = SimpleNamespace(has_chat_template=True, renders_tools=True, hf_tokenizer=SimpleNamespace(
        chat_template="{% for m in messages %}{{ m.content }}{% endfor %}<tool_call>", added_tokens_encoder={}))

    def __init__(self) -> None:
        self.script: list[str] = ["piece"]
        self.finish_reason = "eos"
        self.requests = 0

    def answer(self, text: str, finish_reason: str = "eos", piece: int = 3) -> None:
        """The next answers: `text` in pieces of `piece` characters (a stream holds back across them)."""
        self.script = [text[i:i + piece] for i in range(0, len(text), piece)]
        self.finish_reason = finish_reason

    def batch_scheduler(self, max_batch: int, queue_size=None):
        from anypair.generation.batch import BatchScheduler

        def session(slot: int, request):
            self.requests += 1
            return ScriptedSession(list(self.script), self.finish_reason), lambda finished: None

        return BatchScheduler(self.target_backend, max_batch, session, queue_size=queue_size)


def serve(**settings) -> Iterator[tuple[openai.OpenAI, ScriptedGenerator]]:
    from anypair.serving import ServeSettings, create_app
    from anypair.serving.server import server_in_thread

    generator = ScriptedGenerator()
    with server_in_thread(create_app(generator, ServeSettings(model_name="m", **settings))) as root:
        yield openai.OpenAI(base_url=f"{root}/v1", api_key="none", max_retries=0, timeout=60), generator


@pytest.fixture(scope="module")
def stand_in() -> Iterator[tuple[openai.OpenAI, ScriptedGenerator]]:
    yield from serve()


@pytest.fixture(scope="module")
def lenient() -> Iterator[tuple[openai.OpenAI, ScriptedGenerator]]:
    yield from serve(accept_unknown_fields=True)


def send(client: openai.OpenAI, endpoint: str, fields: dict):
    if endpoint == "chat":
        return client.chat.completions.create(model="m", messages=ASK, extra_body=fields)
    return client.completions.create(model="m", prompt="hi", extra_body=fields)


# -- unknown fields ----------------------------------------------------------------------------------

@pytest.mark.parametrize("endpoint, fields, field, closest", [
    ("chat", {"frobnicate": 1}, "frobnicate", None),
    ("chat", {"max_token": 5}, "max_token", "max_tokens"),
    ("completions", {"max_token": 5}, "max_token", "max_tokens"),
    ("chat", {"temprature": 0}, "temprature", "temperature"),
    ("completions", {"max_completion_tokens": 5}, "max_completion_tokens", "max_tokens"),  # chat's field
    ("chat", {"user": "u-1", "frobnicate": None}, "frobnicate", None),  # past an ignored field; null too
])
def test_an_unknown_field_is_a_400_naming_it_and_the_field_it_is_closest_to(stand_in, endpoint, fields, field,
                                                                             closest):
    client, generator = stand_in
    served = generator.requests
    with pytest.raises(openai.BadRequestError) as caught:
        send(client, endpoint, fields)
    error = caught.value.body
    assert error["param"] == field and error["code"] == "unknown_field" and error["type"] == "invalid_request_error"
    assert error["message"].startswith(f"Unrecognized request argument supplied: {field}")
    assert (f"did you mean {closest}?" in error["message"]) if closest else "did you mean" not in error["message"]
    assert generator.requests == served  # refused before it reached the generator


def test_accept_unknown_fields_ignores_them_and_still_refuses_the_refused(lenient):
    client, generator = lenient
    generator.answer("piece")
    assert send(client, "chat", {"frobnicate": 1, "max_token": 5}).choices[0].message.content == "piece"
    assert send(client, "completions", {"frobnicate": 1}).choices[0].text == "piece"
    with pytest.raises(openai.BadRequestError) as caught:
        send(client, "completions", {"best_of": 2})
    assert caught.value.body["code"] == "unsupported_field"


def test_the_flag_is_in_serves_help():
    shown = subprocess.run([sys.executable, "-m", "anypair.cli", "serve", "--help"], capture_output=True, text=True,
                           check=True).stdout
    assert "--accept-unknown-fields" in shown


# -- tool calls in a model's other forms ----------------------------------------------------------------

FENCED = f"```json\n{CALL}\n```"


def ask(client: openai.OpenAI, stream: bool, **fields):
    """The answer to ASK with TOOLS as (content, [(name, arguments)], finish_reason), whole or streamed."""
    arguments = dict(model="m", messages=ASK, tools=TOOLS, **fields)
    if not stream:
        choice = client.chat.completions.create(**arguments).choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return choice.message.content, calls, choice.finish_reason
    chunks = [c for c in client.chat.completions.create(stream=True, **arguments) if c.choices]
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    calls = [(call.function.name, call.function.arguments)
             for c in chunks for call in c.choices[0].delta.tool_calls or []]
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert len(reasons) == 1  # the last chunk's
    return content or None, calls, reasons[0]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("text, content, calls", [
    (FENCED, None, [PARIS]),  # Qwen2.5-Coder-1.5B's form with tool_choice "auto"
    (f"```\n{CALL}\n```\n", None, [PARIS]),
    (f"I will look it up.\n{FENCED}\n", "I will look it up.\n", [PARIS]),
    (f"  {CALL}", None, [PARIS]),
    (f"[{CALL}, {CALL.replace('Paris', 'Lyon')}]", None, [PARIS, ("get_weather", '{"city": "Lyon"}')]),
    (f"<tool_call>\n{CALL}\n</tool_call>", None, [PARIS]),
    # the same forms that call no offered tool, or hold no call, stay text
    ('```json\n{"name": "get_time", "arguments": {}}\n```', '```json\n{"name": "get_time", "arguments": {}}\n```', []),
    ('```python\nprint("{")\n```', '```python\nprint("{")\n```', []),
    ('```json\n{"name": "get_weather", "arguments": "Paris"}\n```',
     '```json\n{"name": "get_weather", "arguments": "Paris"}\n```', []),
    ("It is sunny.", "It is sunny.", []),
])
def test_a_call_in_a_models_other_forms_is_a_tool_call(stand_in, stream, text, content, calls):
    client, generator = stand_in
    generator.answer(text)
    assert ask(client, stream) == (content, calls, "tool_calls" if calls else "stop")


# -- an answer cut in the middle of a call --------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_call_cut_by_max_tokens_is_length_without_the_partial_call(stand_in, stream, choice):
    client, generator = stand_in
    generator.answer('<tool_call>\n{"name": "get_weather", "argu', "length")
    assert ask(client, stream, tool_choice=choice, max_tokens=8) == (None, [], "length")
    # a whole call, then a second one cut ("required" lets the model write as many as it likes)
    generator.answer(f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{{\"name\": \"get_wea", "length")
    assert ask(client, stream, tool_choice=choice, max_tokens=30) == (None, [PARIS], "length")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_json_cut_by_max_tokens_outside_the_tags_stays_text(stand_in, stream):
    """A bare or fenced object cut before its end may as well be an answer in JSON: it stays text."""
    client, generator = stand_in
    for text in ('{"name": "get_weather", "argu', '```json\n{"name": "get_weather", "argu'):
        generator.answer(text, "length")
        assert ask(client, stream, max_tokens=8) == (text, [], "length")


def test_the_parser_on_strings_whole_and_streamed_agree():
    from anypair.serving.tools import ToolCall, ToolCallStream, parse_answer

    names = frozenset({"get_weather"})
    answers = [FENCED, f"Sure.\n{FENCED}\nDone.", "```python\nprint(1)\n```\n", f"[{CALL}]", "x `` y", "a```",
               f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{{\"name", f"```js\n{CALL}```", f"```json\n{CALL}"]
    for answer in answers:
        for cut in (False, True):
            whole = parse_answer(answer, names, cut)
            for step in (1, 2, 5):
                stream = ToolCallStream(names)
                pieces = [p for i in range(0, len(answer), step) for p in stream.feed(answer[i:i + step])]
                pieces += stream.finish(cut)
                assert [p for p in pieces if isinstance(p, ToolCall)] == list(whole.calls), (answer, step)
                assert "".join(p for p in pieces if isinstance(p, str)) == (whole.content or ""), (answer, step)
    assert parse_answer(f"Sure.\n{FENCED}\nDone.", names).content == "Sure.\nDone."
    assert parse_answer(f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{{", names, cut=True).content is None
    assert parse_answer("<tool_call>\n{", names).content == "<tool_call>\n{"  # not cut: the model's text
