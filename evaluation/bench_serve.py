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

    python evaluation/bench_serve.py                              # the goals' run (takes minutes)
    python evaluation/bench_serve.py --n 2 --max-new-tokens 16 --load-requests 8 --load-clients 4  # smoke
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
                                stats["tokens_per_second"], tokens / seconds))
        return runs

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return [run for runs in pool.map(one_client, range(clients)) for run in runs]


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
    args = parser.parse_args()
    if min(args.n, args.max_new_tokens, args.threads, args.load_requests, args.load_clients) < 1:
        parser.error("--n, --max-new-tokens, --threads, --load-requests and --load-clients must be at least 1")

    from anypair.generation.generator import AnyPairGenerator

    prompts = humaneval_prompts(args.n)
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
