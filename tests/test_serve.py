"""`anypair serve` over real HTTP on 127.0.0.1, with the official `openai` client as the client:
greedy text equal to `anypair generate`'s and to the target alone, streamed chunks that add up to
it, a bounded load test (8 clients x 3 requests, a full queue answers 503), continuous batching (8
concurrent requests, greedy and seeded, some joining mid-decode, one cancelled: each answer equals
the same request alone), a client that leaves mid-stream, and each bad input's status code and field.

The server is the real command (`python -m anypair.cli serve`, one process for the module) on the
test pair: Qwen2.5-Coder-0.5B-Instruct with SmolLM2-135M-Instruct as its draft, 16 new tokens (8 in the load test).
Queueing itself is tested on a stand-in generator that holds the queue full for as long as the
test needs (a real one would finish at its own pace and make the test a race).
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import httpx
import openai
import pytest

REPO = Path(__file__).resolve().parent.parent
TARGET = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
DRAFT = "HuggingFaceTB/SmolLM2-135M-Instruct"
N_NEW = 16
PAIR_FLAGS = ["-m", TARGET, "-a", DRAFT, "--max-new-tokens", str(N_NEW)]
QUEUE_SIZE = 8  # the load test's 8 clients: one generating, 7 waiting
START_TIMEOUT_S = 600  # the first run compiles the GGUF engine's kernels

CODE = "def is_prime(n: int) -> bool:\n"
SAMPLED = {"temperature": 1.5, "top_p": 0.95, "seed": 3}
SAMPLED_FLAGS = ["--do-sample", "--temperature", "1.5", "--top-p", "0.95", "--seed", "3"]
QUESTION = "Write a Python function that reverses a string."


class RunningServer:
    """`anypair serve` in a subprocess; its stderr (one log line per request) is kept in `log`."""

    def __init__(self, extra_flags: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "anypair.cli", "serve", *PAIR_FLAGS, "--port", "0", *extra_flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        self.log: list[str] = []
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, args=(self.process.stdout, lines.put), daemon=True).start()
        threading.Thread(target=self._drain, args=(self.process.stderr, self.log.append), daemon=True).start()
        ready = ""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready and time.monotonic() < deadline and self.process.poll() is None:
            try:
                ready = lines.get(timeout=1)
            except queue.Empty:
                pass
        if " at http://" not in ready:
            self.stop()
            pytest.fail(f"anypair serve did not start: {ready!r}; stderr:\n{''.join(self.log[-30:])}")
        self.url = ready.split(" at ", 1)[1].strip()  # http://127.0.0.1:PORT/v1
        self.root = self.url.removesuffix("/v1")

    @staticmethod
    def _drain(pipe, sink) -> None:
        for line in pipe:
            sink(line)

    def wait_for_log(self, text: str, timeout_s: float = 10.0, also: str = "") -> list[str]:
        """The log lines holding `text` (and `also`), once there is one (stderr is read by a thread: a
        line the server wrote before answering may reach `log` a moment after the answer)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            lines = [line for line in self.log if text in line and also in line]
            if lines:
                return lines
            time.sleep(0.05)
        return []

    def client(self, **kwargs) -> openai.OpenAI:
        # no retries: a 503 or an error must reach the test as it is
        return openai.OpenAI(base_url=self.url, api_key="none", max_retries=0, timeout=300, **kwargs)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def server(zoo_fetch) -> Iterator[RunningServer]:
    # a context of 8,192 (the model's own is 32,768): the bad-input tests' prompts pass it in seconds
    running = RunningServer(["--queue-size", str(QUEUE_SIZE), "--context", "8192"])
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return server.client()


def complete(client: openai.OpenAI, prompt: str, **kwargs) -> str:
    """Greedy unless `kwargs` say otherwise."""
    return client.completions.create(model=TARGET, prompt=prompt, **{"temperature": 0, **kwargs}).choices[0].text


def chat(client: openai.OpenAI, question: str, **kwargs) -> str:
    response = client.chat.completions.create(model=TARGET, messages=[{"role": "user", "content": question}],
                                              temperature=0, **kwargs)
    return response.choices[0].message.content


# -- lossless: the same text as `anypair generate` and as the target alone ---------------------------


@pytest.fixture(scope="module")
def expected(server, zoo_fetch) -> dict[str, str]:
    """`anypair generate`'s greedy text for the raw prompt and for the chat question (capsys is
    function-scoped: the CLI runs here through its own stdout capture). Each call makes its own
    generator as a fresh `anypair generate` does (options, drafter, ledger); the models themselves
    are loaded once for the five (a loaded member passes through a generator as itself)."""
    import contextlib
    import io

    from anypair.cli import main
    from anypair.generation import members

    loaded: dict[tuple, object] = {}
    load_member = members.load_member

    def load_once(spec, **kwargs):
        key = (spec, *sorted(kwargs.items()))
        if key not in loaded:
            loaded[key] = load_member(spec, **kwargs)
        return loaded[key]

    texts = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(members, "load_member", load_once)
        for name, prompt, flags in (("raw", CODE, ["--raw"]), ("chat", QUESTION, []),
                                    ("raw alone", CODE, ["--raw", "--no-assisted"]),
                                    ("chat alone", QUESTION, ["--no-assisted"]),
                                    ("raw sampled", CODE, ["--raw", *SAMPLED_FLAGS])):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert main(["generate", prompt, *PAIR_FLAGS, *flags]) == 0
            texts[name] = out.getvalue().removesuffix("\n")
    assert len(loaded) == 2  # the target and the draft, each loaded once
    return texts


def test_completion_equals_anypair_generate_and_the_target_alone(server, client, expected):
    response = client.completions.create(model=TARGET, prompt=CODE, max_tokens=N_NEW, temperature=0)
    assert response.choices[0].text == expected["raw"] == expected["raw alone"]
    assert response.choices[0].text.strip()  # a test of equal empty strings would prove nothing
    # the target's greedy answer to CODE runs past N_NEW tokens: a generation that ends early fails here
    assert response.choices[0].finish_reason == "length"
    assert response.usage.completion_tokens == N_NEW and response.usage.prompt_tokens > 0
    stats = response.model_extra["anypair"]
    assert stats["rounds"] >= 1 and 0 <= stats["acceptance_rate"] <= 1 and "draft" in stats["engines"]
    # one log line for the request: its id, prompt and new tokens, tok/s, acceptance
    (line,) = server.wait_for_log(response.id)
    assert f"prompt={response.usage.prompt_tokens} new={response.usage.completion_tokens} " in line
    assert " tok/s " in line
    assert abs(float(line.split("acceptance=")[1].split()[0]) - stats["acceptance_rate"]) <= 0.005


def test_chat_equals_anypair_generate_and_the_target_alone(client, expected):
    response = client.chat.completions.create(model=TARGET, messages=[{"role": "user", "content": QUESTION}],
                                              max_tokens=N_NEW, temperature=0)
    assert response.choices[0].message.content == expected["chat"] == expected["chat alone"]
    assert response.choices[0].message.role == "assistant" and response.choices[0].message.content.strip()
    # the chat template wraps the question: the prompt is longer than the question's own tokens
    assert response.usage.prompt_tokens > len(QUESTION.split())


def test_sampling_fields_reach_the_generator_a_seeded_sample_equals_anypair_generates(client, expected):
    sampled = complete(client, CODE, **SAMPLED)
    assert sampled == expected["raw sampled"]
    assert sampled != expected["raw"]  # the sample is not the greedy text: temperature was not dropped
    assert complete(client, CODE, **SAMPLED) == sampled  # the same seed, the same sample


def test_default_max_tokens_is_the_servers_max_new_tokens(client, expected):
    assert complete(client, CODE) == expected["raw"]


def test_streamed_chunks_add_up_to_the_same_text_and_done_ends_the_stream(server, client, expected):
    stream = client.chat.completions.create(model=TARGET, messages=[{"role": "user", "content": QUESTION}],
                                            temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == expected["chat"]
    assert sum(1 for p in pieces if p) >= 2  # streamed in pieces, not in one block at the end
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishing) == 1 and "anypair" in finishing[0].model_extra
    assert finishing[0].choices[0].finish_reason == "length"  # the answer runs past N_NEW tokens
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == N_NEW

    # the wire format itself: server-sent events, the last one `data: [DONE]`
    body = {"model": TARGET, "prompt": CODE, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/completions", json=body, timeout=300) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
    assert text == expected["raw"]


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == [TARGET]
    health = httpx.get(f"{server.root}/health", timeout=10).json()
    assert health["status"] == "ok" and health["queue_size"] == QUEUE_SIZE


# -- load: one generator, a bounded queue ------------------------------------------------------------

LOAD_TOKENS = 8  # what the load test checks (all served, in order, each as if alone) does not grow with length
LOAD_REQUESTS = [("raw", CODE), ("raw", "The three laws of thermodynamics are"), ("raw", "import numpy as np\n\n"),
                 ("chat", QUESTION), ("chat", "Name three prime numbers."), ("chat", "What is a KV cache?")]


def send(client: openai.OpenAI, request: tuple[str, str]) -> str:
    kind, text = request
    ask = complete if kind == "raw" else chat
    return ask(client, text, max_tokens=LOAD_TOKENS)


def test_load_8_clients_x_3_requests_all_served_each_as_if_alone(server, client):
    alone = [send(client, r) for r in LOAD_REQUESTS]
    assert len(set(alone)) == len(alone)  # distinct requests: a mixed-up answer cannot pass

    health_seen: list[dict] = []
    stop_polling = threading.Event()

    def poll_health() -> None:
        while not stop_polling.is_set():
            health_seen.append(httpx.get(f"{server.root}/health", timeout=5).json())
            time.sleep(0.2)

    def one_client(i: int) -> list[tuple[int, str]]:
        own = server.client()
        picks = [(i * 3 + j) % len(LOAD_REQUESTS) for j in range(3)]
        return [(k, send(own, LOAD_REQUESTS[k])) for k in picks]

    poller = threading.Thread(target=poll_health, daemon=True)
    poller.start()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = [r for client_results in pool.map(one_client, range(8)) for r in client_results]
    stop_polling.set()
    poller.join()

    assert len(results) == 24
    assert [text for _, text in results] == [alone[k] for k, _ in results]
    # /health answered while requests generated and waited (that it answers while the generator is
    # held, with no clock involved, is test_a_full_queue_answers_503_with_retry_after_and_health_answers_meanwhile)
    busy = [h for h in health_seen if h["generating"]]
    assert busy and max(h["running"] + h["queued"] for h in busy) >= 2


# -- continuous batching: concurrent requests, each exactly its text alone ----------------------------

# (prompt, max_tokens, sampling): different prompt and answer lengths, greedy and seeded sampling
BATCH = [(CODE, 16, {}), ("The three laws of thermodynamics are", 24, {}), ("import numpy as np\n\n", 20, SAMPLED),
         ("Once upon a time", 18, {"temperature": 1.0, "seed": 7}), ("def quicksort(xs):\n", 22, {}),
         ("A haiku about the sea:\n", 16, {"temperature": 0.8, "top_p": 0.9, "seed": 11}),
         ("SELECT name FROM users WHERE", 24, {}), ("Q: Why is the sky blue?\nA:", 20, {"temperature": 1.2, "seed": 5})]


def test_8_concurrent_requests_equal_each_alone_some_joining_mid_decode_one_cancelled(server, client):
    """Served together (batched), every answer is the one the same request gets alone: greedy and
    seeded samples, 4 requests joining while 4 others decode, and one stream cancelled mid-way."""
    def one(own: openai.OpenAI, index: int):
        prompt, max_tokens, sampling = BATCH[index]
        return own.completions.create(model=TARGET, prompt=prompt, max_tokens=max_tokens,
                                      **{"temperature": 0, **sampling})

    alone = [one(client, i).choices[0].text for i in range(len(BATCH))]
    assert len(set(alone)) == len(alone)
    cancelled_before = httpx.get(f"{server.root}/health", timeout=10).json()["cancelled"]

    first_text = threading.Event()

    def leaving() -> int:
        """A long stream that leaves after two pieces of text, while the others run."""
        stream = server.client().completions.create(model=TARGET, prompt=QUESTION, max_tokens=400, temperature=0,
                                                    stream=True)
        pieces = 0
        for chunk in stream:
            pieces += bool(chunk.choices and chunk.choices[0].text)
            first_text.set()
            if pieces == 2:
                break
        stream.close()
        return pieces

    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        leaver = pool.submit(leaving)
        early = [pool.submit(one, server.client(), i) for i in range(4)]
        assert first_text.wait(300)  # the others arrive while these decode
        late = [pool.submit(one, server.client(), i) for i in range(4, 8)]
        responses = [f.result() for f in early + late]
        assert leaver.result() == 2
    assert [r.choices[0].text for r in responses] == alone
    sizes = [r.model_extra["anypair"]["batch_size_max"] for r in responses]
    assert max(sizes) >= 2, sizes  # they did share forwards
    timings = responses[0].model_extra["timings"]
    assert timings["predicted_n"] == 16 and timings["draft_n"] >= timings["draft_n_accepted"] >= 0
    assert responses[0].model_extra["anypair"]["mean_acceptance_length"] >= 1.0
    # what the batch did to each request's drafts, in its response
    plans = [r.model_extra["anypair"] for r in responses]
    assert all(p["rows_per_round"] >= 1 and p["draft_length"] >= 0 and p["draft_capped_rounds"] >= 0 for p in plans)
    # the late ones joined while others decoded: those others drafted nothing while the prompts were read
    notes = [p["batch_draft_note"] for p in plans if p["batch_draft_note"]]
    assert all(note.startswith(("drafting off", "drafts capped")) for note in notes), notes
    deadline = time.monotonic() + 30  # the leaver's slot frees at the next round
    while httpx.get(f"{server.root}/health", timeout=10).json()["cancelled"] == cancelled_before:
        assert time.monotonic() < deadline
        time.sleep(0.1)


# -- a client that leaves mid-stream -----------------------------------------------------------------


def test_a_client_leaving_mid_stream_frees_the_generator(server, client, expected):
    long_run = 400  # tokens the stream would take if nobody stopped it
    stream = client.chat.completions.create(model=TARGET, messages=[{"role": "user", "content": QUESTION}],
                                            temperature=0, stream=True, max_tokens=long_run)
    received = [next(stream) for _ in range(3)]  # the role chunk and two pieces of text
    assert received[1].choices[0].delta.content
    stream.close()

    assert chat(client, QUESTION) == expected["chat"]  # the next request: served, and right
    cancelled = server.wait_for_log("cancelled after", also="chatcmpl-")  # the batching test cancels a completion
    assert len(cancelled) == 1, server.log[-10:]
    chunks = int(cancelled[0].split("cancelled after ")[1].split()[0])
    assert chunks < 20  # stopped within a few rounds of the disconnect, not after ~400 tokens


# -- bad input: a 4xx naming the field ---------------------------------------------------------------

OVER_CONTEXT = "word " * 9000  # more tokens than the test server's context (8192, set by the fixture)
NEAR_CONTEXT = "word " * 8000


def utf8(fields: dict) -> bool:
    try:
        json.dumps(fields, ensure_ascii=False).encode()
        return True
    except UnicodeEncodeError:
        return False


@pytest.mark.parametrize("endpoint, fields, status, param, code", [
    ("completions", {"model": "no-such-model", "prompt": CODE}, 404, "model", "model_not_found"),
    ("completions", {"prompt": CODE}, 400, "model", "missing_field"),
    ("completions", {"model": TARGET, "prompt": CODE, "max_tokens": 0}, 400, "max_tokens", None),
    ("completions", {"model": TARGET, "prompt": CODE, "max_tokens": -5}, 400, "max_tokens", None),
    ("completions", {"model": TARGET, "prompt": CODE, "max_tokens": 10**6}, 400, "max_tokens",
     "context_length_exceeded"),
    ("completions", {"model": TARGET, "prompt": NEAR_CONTEXT, "max_tokens": 1000}, 400, "max_tokens",
     "context_length_exceeded"),
    ("completions", {"model": TARGET, "prompt": CODE, "temperature": 2.5}, 400, "temperature", None),
    ("completions", {"model": TARGET, "prompt": CODE, "temperature": -1}, 400, "temperature", None),
    ("completions", {"model": TARGET, "prompt": CODE, "top_p": 0}, 400, "top_p", None),
    ("completions", {"model": TARGET, "prompt": CODE, "top_p": 1.5}, 400, "top_p", None),
    ("completions", {"model": TARGET, "prompt": ""}, 400, "prompt", None),
    ("completions", {"model": TARGET, "prompt": OVER_CONTEXT}, 400, "prompt", "context_length_exceeded"),
    ("completions", {"model": TARGET, "prompt": CODE, "stop": ["\n", ""]}, 400, "stop[1]", None),
    ("completions", {"model": TARGET, "prompt": CODE, "n": 2}, 400, "n", None),
    ("completions", {"model": TARGET, "prompt": CODE, "seed": 2**70}, 400, "seed", None),  # was a 500
    ("completions", {"model": TARGET, "prompt": CODE, "seed": -(2**63) - 1}, 400, "seed", None),
    # the generator's own InputError (a lone surrogate: not text a tokenizer can read) is a 400 too
    ("completions", {"model": TARGET, "prompt": "abc \ud800"}, 400, "prompt", None),
    ("chat/completions", {"model": TARGET, "messages": []}, 400, "messages", None),
    ("chat/completions", {"model": TARGET, "messages": [{"role": "wizard", "content": "hi"}]}, 400,
     "messages[0].role", None),
    ("chat/completions", {"model": TARGET, "messages": [{"role": "user", "content": "hi"}, {"role": "user"}]}, 400,
     "messages[1].content", "missing_field"),
    ("chat/completions", {"model": TARGET, "messages": [{"role": "user", "content": OVER_CONTEXT}]}, 400,
     "messages", "context_length_exceeded"),
    ("chat/completions", {"model": TARGET, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 400,
     "max_tokens", None),
    # a field no table knows (a typo would change the answer unseen): refused, as OpenAI refuses it
    ("chat/completions", {"model": TARGET, "messages": [{"role": "user", "content": "hi"}], "frobnicate": 1}, 400,
     "frobnicate", "unknown_field"),
    ("completions", {"model": TARGET, "prompt": CODE, "max_token": 4}, 400, "max_token", "unknown_field"),
])
def test_bad_input_is_a_4xx_naming_the_field(server, endpoint, fields, status, param, code):
    if "model" in fields and utf8(fields):
        client = server.client()
        create = client.completions.create if endpoint == "completions" else client.chat.completions.create
        # fields the client has no argument for go as the client sends them: in extra_body
        extra = {name: value for name, value in fields.items() if name in ("frobnicate", "max_token")}
        with pytest.raises(openai.APIStatusError) as caught:
            create(**{name: value for name, value in fields.items() if name not in extra}, extra_body=extra or None)
        status_code, error = caught.value.status_code, caught.value.body
    else:  # the openai client refuses to send a request without a model, or with text that is not
        # UTF-8: send them as another client would (JSON escapes a lone surrogate as \ud800)
        response = httpx.post(f"{server.url}/{endpoint}", content=json.dumps(fields),
                              headers={"content-type": "application/json"}, timeout=60)
        status_code, error = response.status_code, response.json()["error"]
    assert status_code == status
    assert error["param"] == param and error["type"] == "invalid_request_error"
    if code:
        assert error["code"] == code
    assert param.split("[")[0] in error["message"] and "Traceback" not in error["message"]


def test_malformed_json_and_a_body_that_is_not_an_object(server):
    for content, code in ((b'{"model": "x", "prompt": ', "invalid_json"), (b"[1, 2]", "invalid_body")):
        response = httpx.post(f"{server.url}/completions", content=content,
                              headers={"content-type": "application/json"}, timeout=30)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == code and error["param"] is None and "JSON" in error["message"]


def test_the_server_still_serves_after_the_bad_inputs(client, expected):
    assert complete(client, CODE) == expected["raw"]


# -- the queue, on a stand-in generator that holds it full ---------------------------------------------


class HeldSession:
    """A request's loop that writes one piece of text, then holds its slot until the test lets go."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.result = None

    def steps(self):
        from anypair.types import GenerationResult, GenerationStats

        yield "held"
        assert self.release.wait(60)
        self.result = GenerationResult("held", [1], GenerationStats(new_tokens=1, prompt_tokens=1), "length")


class HeldGenerator:
    """A generator whose scheduler runs HeldSessions: each request holds the worker until released."""

    engines = "held"
    target_backend = SimpleNamespace(max_context=1024)
    target = SimpleNamespace(has_chat_template=True)

    def __init__(self) -> None:
        self.release = threading.Event()

    def batch_scheduler(self, max_batch: int, queue_size=None):
        from anypair.generation.batch import BatchScheduler

        # the sessions never ask for a forward: the engine is never called
        return BatchScheduler(self.target_backend, max_batch,
                              lambda slot, arguments: (HeldSession(self.release), lambda finished: None),
                              queue_size=queue_size)


def test_a_full_queue_answers_503_with_retry_after_and_health_answers_meanwhile():
    from anypair.serving import ServeSettings, create_app
    from anypair.serving.server import server_in_thread

    held = HeldGenerator()
    with server_in_thread(create_app(held, ServeSettings(model_name="m", queue_size=1))) as root:
        client = openai.OpenAI(base_url=f"{root}/v1", api_key="none", max_retries=0, timeout=60)
        running = iter(client.completions.create(model="m", prompt="a", stream=True))
        assert next(running).choices[0].text == "held"  # generating, and holding the generator
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.completions.create, model="m", prompt="b")
            deadline = time.monotonic() + 10
            while httpx.get(f"{root}/health", timeout=5).json()["queued"] < 1:
                assert time.monotonic() < deadline, "the second request never reached the queue"
                time.sleep(0.05)
            health = httpx.get(f"{root}/health", timeout=5).json()
            assert health["generating"] and health["queued"] == 1

            with pytest.raises(openai.APIStatusError) as caught:
                client.completions.create(model="m", prompt="c")
            assert caught.value.status_code == 503 and caught.value.code == "queue_full"
            assert int(caught.value.response.headers["retry-after"]) >= 1

            held.release.set()
            rest = list(running)
            assert rest and rest[-1].choices[0].finish_reason == "length"
            assert waiting.result().choices[0].text == "held"  # the waiting request was not lost
        assert client.completions.create(model="m", prompt="d").choices[0].text == "held"  # room again


def test_allowed_origins_get_cors_headers_and_others_do_not():
    from anypair.serving import ServeSettings, create_app
    from anypair.serving.server import server_in_thread

    held = HeldGenerator()
    held.release.set()
    settings = ServeSettings(model_name="m", allowed_origins=("http://localhost:3000",))
    with server_in_thread(create_app(held, settings)) as root:
        preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
        allowed = httpx.options(f"{root}/v1/completions", headers={"Origin": "http://localhost:3000", **preflight})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = httpx.options(f"{root}/v1/completions", headers={"Origin": "http://evil.example", **preflight})
        assert "access-control-allow-origin" not in other.headers
        answer = httpx.post(f"{root}/v1/completions", json={"model": "m", "prompt": "a"},
                            headers={"Origin": "http://localhost:3000"})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_a_kv_memory_budget_holds_each_request_to_what_fits_and_refuses_longer_ones_with_a_400(zoo_fetch):
    """`anypair serve --kv-memory 4` (MiB): the pair's KV caches take ~35 KiB a position (target and
    draft), so one request may hold about a hundred positions; a request that needs more is a 400 error
    object naming the budget (never an out-of-memory kill mid-answer), one that fits is served."""
    running = RunningServer(["--kv-memory", "4", "--max-batch", "1"])
    try:
        assert running.wait_for_log("positions a request (the KV memory budget)", timeout_s=5)
        client = running.client()
        short = client.completions.create(model=TARGET, prompt="def add(a, b):", max_tokens=4, temperature=0)
        assert short.choices[0].text
        long_prompt = "def f(x):\n    return x + 1\n" * 20  # ~200 tokens
        with pytest.raises(openai.APIStatusError) as caught:
            client.completions.create(model=TARGET, prompt=long_prompt, max_tokens=4, temperature=0)
        error = caught.value.body
        assert caught.value.status_code == 400 and error["code"] == "context_length_exceeded"
        assert "KV memory budget" in error["message"] and "--kv-memory" in error["message"]
        with pytest.raises(openai.APIStatusError) as caught:  # max_tokens alone past the budget: that field named
            client.completions.create(model=TARGET, prompt="a", max_tokens=500, temperature=0)
        assert caught.value.status_code == 400 and caught.value.body["param"] == "max_tokens"
    finally:
        running.stop()
    assert subprocess.run([sys.executable, "-m", "anypair.cli", "serve", "--kv-memory", "0"], cwd=REPO,
                          capture_output=True).returncode == 2
