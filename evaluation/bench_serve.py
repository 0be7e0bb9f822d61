"""What `anypair serve` costs against in-process `generate`, and how it holds a queue.

1. Overhead: the default pair, greedy, N HumanEval prompts (default 10), 128 new tokens. Per
   prompt, the same request in-process (`AnyPairGenerator.generate`) and over HTTP
   (POST /v1/completions to an `anypair serve` subprocess with the same options), in an order that
   alternates from prompt to prompt so machine drift cancels. Tokens per second are new tokens over
   wall time as the caller sees it (the HTTP client's, for the server). Prints per-prompt figures,
   the medians and their ratio (the goal: serving costs <= 5%); every HTTP text must equal the
   in-process one.
2. Load: 32 requests from 8 clients (4 each, back to back, all at once) on the same server; each text
   must equal its request served alone (part 1's). Prints each request's queue wait and tok/s (the
   server's generation, and the client's including the wait), and the lost, errors and mismatches.
3. Continuous batching (`--batching-only` runs just this part): the same load on a server of
   `--max-batch 1` (one request at a time) and of `--max-batch 8`: aggregate tok/s (all new tokens over
   the load's wall time) and its ratio, the median request's tok/s against a lone request's, lost,
   errors and answers identical to the request alone; the time to first token of a request arriving
   while 7 others decode (each has its first token before it is sent) against its own alone; 4
   requests at once against the same 4 one after another; the responses' batch statistics (rows per
   target forward, the draft length allowed, the requests whose drafts the batch cut, and why); the
   KV per slot (the server's start line) and the server's peak RSS. Beside it, llama.cpp's own multi-sequence batched decode on the target's GGUF
   (llama-cpp-python's batch API, one sequence id per request, greedy): its aggregate tok/s, and the
   share of its answers under load that differ from its answers alone. Prints one table.

    python evaluation/bench_serve.py                              # the goals' run (takes minutes)
    python evaluation/bench_serve.py --n 2 --max-new-tokens 16 --load-requests 8 --load-clients 4  # smoke
    python evaluation/bench_serve.py --batching-only --n 4 --max-new-tokens 32 --load-requests 8 --load-clients 4
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import openai

from anypair.benchmarking.prompts import humaneval_prompts
from anypair.machine import describe_machine
from anypair.zoo.registry import DEFAULT_DRAFT, DEFAULT_TARGET

REPO = Path(__file__).resolve().parent.parent
SERVER_START_TIMEOUT_S = 900

# llama.cpp's log callback while its batched decode runs: nothing (see llama_cpp_batched)
_LLAMA_QUIET = None


@dataclass
class OverheadRun:
    prompt: int
    new_tokens: int
    in_process_tok_s: float
    http_tok_s: float
    same_text: bool


@dataclass
class LoadRun:
    client: int
    prompt: int
    ok: bool
    same_text: bool
    queue_wait_s: float
    generation_tok_s: float  # the server's: new tokens over generation time
    client_tok_s: float  # the client's: new tokens over the request's wall time, waiting included
    error: Optional[str] = None
    new_tokens: int = 0
    # the batch's plan as the response reports it (`anypair` object): rows per target forward, the
    # draft length its rounds were allowed, the rounds whose draft the batch cut, and why
    rows_per_round: float = 0.0
    draft_length: float = 0.0
    draft_capped_rounds: int = 0
    batch_draft_note: Optional[str] = None


class ServeProcess:
    """`anypair serve` on a free port of 127.0.0.1, its log in a file."""

    def __init__(self, flags: list[str]) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix="anypair-serve-", suffix=".log")[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen([sys.executable, "-m", "anypair.cli", "serve", "--port", "0", *flags],
                                        stdout=subprocess.PIPE, stderr=self.log_path.open("w"), text=True, env=env)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in self.process.stdout], daemon=True).start()
        ready, deadline = "", time.monotonic() + SERVER_START_TIMEOUT_S
        while not ready and time.monotonic() < deadline and self.process.poll() is None:
            try:
                ready = lines.get(timeout=1)
            except queue.Empty:
                pass
        if " at http://" not in ready:
            self.stop()
            sys.exit(f"anypair serve did not start; its log:\n{self.log_path.read_text()[-3000:]}")
        self.url = ready.split(" at ", 1)[1].strip()

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key="none", max_retries=0, timeout=3600)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def http_complete(client: openai.OpenAI, model: str, prompt: str, max_tokens: int):
    started = time.perf_counter()
    response = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0)
    return response, time.perf_counter() - started


def run_overhead(gen, server: ServeProcess, model: str, prompts: list[str],
                 max_tokens: int) -> tuple[list[OverheadRun], list[str]]:
    client = server.client()
    runs, texts = [], []
    for i, prompt in enumerate(prompts):
        figures = {}
        order = ("in-process", "http") if i % 2 == 0 else ("http", "in-process")
        for how in order:
            if how == "in-process":
                started = time.perf_counter()
                result = gen.generate(prompt, max_new_tokens=max_tokens)
                figures[how] = (result.text, result.stats.new_tokens, time.perf_counter() - started)
            else:
                response, seconds = http_complete(client, model, prompt, max_tokens)
                figures[how] = (response.choices[0].text, response.usage.completion_tokens, seconds)
        (text, tokens, local_s), (served_text, served_tokens, http_s) = figures["in-process"], figures["http"]
        runs.append(OverheadRun(i, tokens, tokens / local_s, served_tokens / http_s, served_text == text))
        texts.append(served_text)
        r = runs[-1]
        print(f"  prompt {i:2d}: {tokens:4d} tokens  in-process {r.in_process_tok_s:6.2f} tok/s  "
              f"http {r.http_tok_s:6.2f} tok/s  ratio {r.http_tok_s / r.in_process_tok_s:.3f}  "
              f"{'same text' if r.same_text else 'TEXT DIFFERS'}", flush=True)
    return runs, texts


def run_load(server: ServeProcess, model: str, prompts: list[str], alone: list[str], max_tokens: int,
             requests: int, clients: int) -> list[LoadRun]:
    per_client = -(-requests // clients)
    picks = [[(c * per_client + j) % len(prompts) for j in range(per_client) if c * per_client + j < requests]
             for c in range(clients)]

    def one_client(c: int) -> list[LoadRun]:
        client = server.client()
        runs = []
        for k in picks[c]:
            try:
                response, seconds = http_complete(client, model, prompts[k], max_tokens)
            except openai.APIError as exc:
                runs.append(LoadRun(c, k, False, False, 0.0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))
                continue
            stats = response.model_extra["anypair"]
            tokens = response.usage.completion_tokens
            runs.append(LoadRun(c, k, True, response.choices[0].text == alone[k], stats["queue_wait_s"],
                                stats["tokens_per_second"], tokens / seconds, new_tokens=tokens,
                                rows_per_round=stats.get("rows_per_round", 0.0),
                                draft_length=stats.get("draft_length", 0.0),
                                draft_capped_rounds=stats.get("draft_capped_rounds", 0),
                                batch_draft_note=stats.get("batch_draft_note")))
        return runs

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return [run for runs in pool.map(one_client, range(clients)) for run in runs]


# -- 3. continuous batching ------------------------------------------------------------------------


def peak_rss_bytes(pid: int) -> int:
    """VmHWM of a live process (Linux), 0 where unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def time_to_first_token(client: openai.OpenAI, model: str, prompt: str, max_tokens: int) -> float:
    started = time.perf_counter()
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            break
    seconds = time.perf_counter() - started
    stream.close()
    return seconds


@dataclass
class BatchFigures:
    max_batch: int
    aggregate_tok_s: float
    median_request_tok_s: float
    lone_request_tok_s: float
    lost: int
    errors: int
    identical: int
    answered: int
    ttft_alone_s: float = 0.0
    ttft_under_load_s: float = 0.0
    decoding_when_it_joined: int = 0  # of the others, still decoding when the measured request was sent
    peak_rss_bytes: int = 0
    start_line: str = ""
    # the first 4 prompts one after another (their lone runs) and then all 4 at once on the same server
    four_serial_s: float = 0.0
    four_concurrent_s: float = 0.0
    four_identical: int = 0
    # the load's responses: mean rows per target forward, mean draft length allowed, and the requests
    # whose drafts the batch cut (to none: drafting off under load)
    mean_rows_per_round: float = 0.0
    mean_draft_length: float = 0.0
    requests_capped: int = 0
    sample_note: Optional[str] = None


def run_batching_server(args, prompts: list[str], max_batch: int,
                        alone: Optional[list[str]]) -> tuple[BatchFigures, list[str], list[LoadRun]]:
    """One server of `--max-batch max_batch`: texts alone (when `alone` is None), the load, the TTFT."""
    server = ServeProcess(["-m", args.target, "-a", args.draft, "--threads", str(args.threads), "--max-batch",
                           str(max_batch), "--queue-size", str(args.load_requests),
                           "--max-new-tokens", str(args.max_new_tokens)])
    try:
        client = server.client()
        http_complete(client, args.target, prompts[0], 8)  # warm
        lone_rates, lone_seconds, texts = [], [], []
        for prompt in prompts:
            response, seconds = http_complete(client, args.target, prompt, args.max_new_tokens)
            texts.append(response.choices[0].text)
            lone_rates.append(response.usage.completion_tokens / seconds)
            lone_seconds.append(seconds)
        alone = alone or texts
        # 4 concurrent requests against the same 4 one after another (issue 44's first figure)
        four = list(range(min(4, len(prompts))))
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(four)) as pool:
            together = list(pool.map(lambda i: http_complete(server.client(), args.target, prompts[i],
                                                             args.max_new_tokens)[0], four))
        four_concurrent = time.perf_counter() - started
        four_identical = sum(r.choices[0].text == alone[i] for i, r in zip(four, together))
        ttft_alone = time_to_first_token(client, args.target, prompts[-1], 4)
        started = time.perf_counter()
        load = run_load(server, args.target, prompts, alone, args.max_new_tokens, args.load_requests,
                        args.load_clients)
        wall = time.perf_counter() - started
        # a request arriving while 7 (or max_batch - 1) others decode: each of them has its first token
        # (its prompt is read) before the new one is sent
        others = min(7, max(1, max_batch - 1))
        decoding = [threading.Event() for _ in range(others)]

        def busy(i: int) -> None:
            stream = server.client().completions.create(model=args.target, prompt=prompts[i % len(prompts)],
                                                        max_tokens=args.max_new_tokens, temperature=0, stream=True)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].text:
                    decoding[i].set()
            decoding[i].set()

        with concurrent.futures.ThreadPoolExecutor(others) as pool:
            running = [pool.submit(busy, i) for i in range(others)]
            for event in decoding:
                event.wait()
            time.sleep(0.5)  # well into their decoding
            still_decoding = sum(not future.done() for future in running)
            ttft_loaded = time_to_first_token(client, args.target, prompts[-1], 4)
            for future in running:
                future.result()
        rss = peak_rss_bytes(server.process.pid)
        start_line = next((line.strip() for line in server.log_path.read_text().splitlines() if "batch:" in line), "")
    finally:
        server.stop()
    answered = [r for r in load if r.ok]
    tokens = sum(r.new_tokens for r in answered)
    notes = [r.batch_draft_note for r in answered if r.batch_draft_note]
    figures = BatchFigures(max_batch, tokens / wall, statistics.median([r.client_tok_s for r in answered] or [0.0]),
                           statistics.median(lone_rates), args.load_requests - len(load),
                           sum(not r.ok for r in load), sum(r.same_text for r in answered), len(answered),
                           ttft_alone, ttft_loaded, still_decoding, rss, start_line,
                           sum(lone_seconds[i] for i in four), four_concurrent, four_identical,
                           statistics.mean([r.rows_per_round for r in answered] or [0.0]),
                           statistics.mean([r.draft_length for r in answered] or [0.0]),
                           sum(r.draft_capped_rounds > 0 for r in answered), notes[-1] if notes else None)
    return figures, alone, load


def llama_cpp_batched(gguf: Path, prompts: list[str], max_tokens: int, threads: int, sequences: int) -> dict:
    """llama.cpp's multi-sequence batched decode (one sequence id per prompt, greedy): each prompt alone,
    then `sequences` at once; aggregate tok/s of the batched run and how many answers differ."""
    import ctypes

    import llama_cpp as L
    import numpy as np

    global _LLAMA_QUIET
    if _LLAMA_QUIET is None:  # kept referenced: llama.cpp calls it for as long as the process runs
        _LLAMA_QUIET = L.llama_log_callback(lambda level, text, user_data: None)
    L.llama_log_set(_LLAMA_QUIET, None)  # the low-level API logs every graph it builds to stderr
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(gguf).encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)

    def tokenize(text: str) -> list[int]:
        raw = text.encode()
        out = (L.llama_token * (len(raw) + 16))()
        n = L.llama_tokenize(vocab, raw, len(raw), out, len(out), True, False)
        return list(out[:n])

    ids = [tokenize(prompts[i % len(prompts)]) for i in range(sequences)]  # prompts repeat when fewer
    longest = max(len(i) for i in ids) + max_tokens + 8
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = longest * len(ids), 512, 512
    params.n_seq_max, params.n_threads, params.n_threads_batch = len(ids), threads, threads
    ctx = L.llama_init_from_model(model, params)
    batch = L.llama_batch_init(512, 0, len(ids))

    def decode(rows: list[tuple[int, int, int, bool]]) -> None:  # (token, position, sequence, logits)
        for begin in range(0, len(rows), 512):
            part = rows[begin:begin + 512]
            for i, (token, pos, seq, logits) in enumerate(part):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
                batch.seq_id[i][0], batch.logits[i] = seq, logits
            batch.n_tokens = len(part)
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")

    def argmax(row: int) -> int:
        pointer = L.llama_get_logits_ith(ctx, row)
        return int(np.argmax(np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), (n_vocab,))))

    def run(group: list[int]) -> tuple[list[list[int]], float]:
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        out = {}
        for s in group:  # each prompt in its own call (at most 512 rows), its last row's logits read at once
            if len(ids[s]) > 512:
                raise RuntimeError("a prompt longer than one llama.cpp batch (512 tokens) in this benchmark")
            decode([(t, p, s, p == len(ids[s]) - 1) for p, t in enumerate(ids[s])])
            out[s] = [argmax(len(ids[s]) - 1)]
        started = time.perf_counter()
        for step in range(max_tokens - 1):
            decode([(out[s][-1], len(ids[s]) + step, s, True) for s in group])
            for i, s in enumerate(group):
                out[s].append(argmax(i))
        return [out[s] for s in group], time.perf_counter() - started

    alone = [run([s])[0][0] for s in range(len(ids))]
    together, seconds = run(list(range(len(ids))))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    differ = sum(a != b for a, b in zip(alone, together))
    return {"sequences": len(ids), "aggregate_tok_s": len(ids) * (max_tokens - 1) / seconds, "differ": differ}


def run_batching(args, prompts: list[str]) -> dict:
    print(f"\n3. continuous batching: {args.load_requests} requests from {args.load_clients} clients, "
          f"{args.max_new_tokens} new tokens, greedy", flush=True)
    one, alone, _ = run_batching_server(args, prompts, 1, None)
    batched, _, batched_load = run_batching_server(args, prompts, 8, alone)
    try:
        from anypair.backends.llama_cpp_guard import require_llama_cpp_runs
        from anypair.zoo.registry import ZOO_MODELS
        from anypair.zoo.served_gguf import gguf_file

        gguf = gguf_file(ZOO_MODELS[args.target], progress=False)
        require_llama_cpp_runs(gguf, args.threads)  # a llama.cpp that crashes here: one line in the table
        llama = llama_cpp_batched(gguf, prompts, args.max_new_tokens, args.threads, 8)
    except Exception as exc:  # llama-cpp-python missing or its API changed: the table says so
        llama = {"error": f"{type(exc).__name__}: {exc}"}
    gib = 2 ** 30
    rows = [("aggregate tok/s", f"{one.aggregate_tok_s:.2f}", f"{batched.aggregate_tok_s:.2f}",
             f"{batched.aggregate_tok_s / one.aggregate_tok_s:.2f}x (goal >= 3x)"),
            ("median request tok/s / lone request", f"{one.median_request_tok_s / one.lone_request_tok_s:.2f}",
             f"{batched.median_request_tok_s / batched.lone_request_tok_s:.2f}", "goal >= 0.6"),
            ("lost / errors", f"{one.lost} / {one.errors}", f"{batched.lost} / {batched.errors}", "goal 0 / 0"),
            ("identical to alone", f"{one.identical}/{one.answered}", f"{batched.identical}/{batched.answered}",
             "goal 100%"),
            ("TTFT alone / under load (s)", f"{one.ttft_alone_s:.2f} / {one.ttft_under_load_s:.2f}",
             f"{batched.ttft_alone_s:.2f} / {batched.ttft_under_load_s:.2f}",
             f"{batched.ttft_under_load_s / batched.ttft_alone_s:.2f}x (goal <= 1.5x), joining "
             f"{batched.decoding_when_it_joined} decoding"),
            ("peak RSS (GiB)", f"{one.peak_rss_bytes / gib:.2f}", f"{batched.peak_rss_bytes / gib:.2f}", ""),
            ("4 at once / 4 one after another (s)", f"{one.four_concurrent_s:.1f} / {one.four_serial_s:.1f}",
             f"{batched.four_concurrent_s:.1f} / {batched.four_serial_s:.1f}",
             f"{batched.four_concurrent_s / batched.four_serial_s:.2f}x (goal <= 0.45x); identical "
             f"{batched.four_identical}/4"),
            ("rows per round / draft length (mean)", f"{one.mean_rows_per_round:.1f} / {one.mean_draft_length:.1f}",
             f"{batched.mean_rows_per_round:.1f} / {batched.mean_draft_length:.1f}",
             f"requests whose drafts the batch cut: {batched.requests_capped}/{batched.answered}")]
    print(f"  {'':38s} {'--max-batch 1':>16s} {'--max-batch 8':>16s}")
    for name, a, b, note in rows:
        print(f"  {name:38s} {a:>16s} {b:>16s}  {note}")
    print(f"  server start line: {batched.start_line}")
    print(f"  a response's batch note: {batched.sample_note}")
    if "error" in llama:
        print(f"  llama.cpp batched decode: not run ({llama['error']})")
    else:
        print(f"  llama.cpp batched decode ({llama['sequences']} sequences, target alone, no draft): "
              f"{llama['aggregate_tok_s']:.2f} tok/s aggregate; answers differing from alone: "
              f"{llama['differ']}/{llama['sequences']}")
    return {"one_at_a_time": asdict(one), "batched": asdict(batched), "llama_cpp": llama,
            "batched_load": [asdict(r) for r in batched_load]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--draft", default=DEFAULT_DRAFT)
    parser.add_argument("--n", type=int, default=10, help="HumanEval prompts (default 10)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--load-requests", type=int, default=32)
    parser.add_argument("--load-clients", type=int, default=8)
    parser.add_argument("--json", help="save every figure to this JSON file")
    parser.add_argument("--batching-only", action="store_true", help="run part 3 (continuous batching) only")
    args = parser.parse_args()
    if min(args.n, args.max_new_tokens, args.threads, args.load_requests, args.load_clients) < 1:
        parser.error("--n, --max-new-tokens, --threads, --load-requests and --load-clients must be at least 1")

    from anypair.generation.generator import AnyPairGenerator

    prompts = humaneval_prompts(args.n)
    if args.batching_only:
        print(f"machine: {describe_machine()}")
        figures = run_batching(args, prompts)
        if args.json:
            Path(args.json).write_text(json.dumps({"machine": describe_machine(), "settings": vars(args),
                                                   "batching": figures}, indent=1))
        return
    print(f"machine: {describe_machine()}")
    print(f"pair: {args.target} + {args.draft}; {len(prompts)} HumanEval prompts, {args.max_new_tokens} new tokens, "
          f"greedy, {args.threads} threads", flush=True)
    gen = AnyPairGenerator(args.target, args.draft, threads=args.threads)
    server = ServeProcess(["-m", args.target, "-a", args.draft, "--threads", str(args.threads),
                           "--queue-size", str(args.load_requests), "--max-new-tokens", str(args.max_new_tokens)])
    try:
        print(f"engines: {gen.engines}\nserver: {server.url} (log: {server.log_path})\n\n1. overhead", flush=True)
        gen.generate(prompts[0], max_new_tokens=8)  # warm both sides (kernels, caches) before timing
        http_complete(server.client(), args.target, prompts[0], 8)
        overhead, alone = run_overhead(gen, server, args.target, prompts, args.max_new_tokens)
        local = statistics.median(r.in_process_tok_s for r in overhead)
        served = statistics.median(r.http_tok_s for r in overhead)
        differ = sum(not r.same_text for r in overhead)
        print(f"  median: in-process {local:.2f} tok/s, http {served:.2f} tok/s: ratio {served / local:.3f} "
              f"(serving costs {100 * (1 - served / local):.1f}%; goal <= 5%); texts differing: {differ}")

        print(f"\n2. load: {args.load_requests} requests from {args.load_clients} clients", flush=True)
        started = time.perf_counter()
        load = run_load(server, args.target, prompts, alone, args.max_new_tokens, args.load_requests,
                        args.load_clients)
        wall = time.perf_counter() - started
        for r in sorted(load, key=lambda r: r.queue_wait_s):
            print(f"  client {r.client} prompt {r.prompt:2d}: " + (
                f"queue wait {r.queue_wait_s:6.2f} s  generation {r.generation_tok_s:6.2f} tok/s  "
                f"client {r.client_tok_s:6.2f} tok/s  {'same text' if r.same_text else 'TEXT DIFFERS'}"
                if r.ok else f"ERROR {r.error}"))
        lost = args.load_requests - len(load)
        errors = sum(not r.ok for r in load)
        mismatches = sum(r.ok and not r.same_text for r in load)
        waits = [r.queue_wait_s for r in load if r.ok] or [float("nan")]
        print(f"  {len(load)} answered in {wall:.1f} s; lost {lost}, errors {errors}, texts differing from the "
              f"request served alone {mismatches}; median queue wait {statistics.median(waits):.2f} s")
    finally:
        server.stop()
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": describe_machine(), "settings": vars(args), "engines": gen.engines,
            "overhead": [asdict(r) for r in overhead], "load": [asdict(r) for r in load]}, indent=1))
        print(f"saved {args.json}")
    if differ or lost or errors or mismatches:
        sys.exit(1)


if __name__ == "__main__":
    main()
