"""Prompt reads of two or more anypair checkouts side by side: the same prompt, the same GGUF, one child
process per (checkout, length, repeat), the checkouts alternating, so that a release is judged against
the one before it on the same machine in the same hour.

Each child imports anypair from its checkout, loads the target on the gguf engine (context = the length
plus 64), waits for the load's background work (the weights' move onto 2 MB pages, the layout cache's
write), reads 128 tokens to warm it, then times one read of the whole prompt from an empty cache and
prints the seconds and the first token (every checkout must agree on it).

    git worktree add /tmp/before v0.1.0
    python evaluation/bench_prefill_builds.py --builds /tmp/before . --lengths 1024,4096,8192 --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = """
import json, sys, time
from anypair.backends.quantized_gguf import QuantizedGGUFBackend
gguf, n, threads, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ids = json.load(open(path))[:n]
engine = QuantizedGGUFBackend(gguf, threads=threads, context=n + 64)
from anypair.kernels.huge_pages import wait_for_collapse
wait_for_collapse()  # the load's background work (weights onto 2 MB pages) off the other core first
committer = getattr(engine.layout_cache, "_committer", None)
if committer is not None:
    committer.join()
engine.extend(ids[:128])
engine.reset()
started = time.perf_counter()
logits = engine.extend(ids)
print(json.dumps({"seconds": time.perf_counter() - started, "token": int(logits.argmax())}))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", nargs="+", required=True, help="anypair checkouts; the first is the baseline")
    parser.add_argument("-m", "--target", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
    parser.add_argument("--lengths", default="1024,4096", help="comma-separated prompt lengths in target tokens")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="save the figures to this JSON file")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from anypair.backends.sources import gguf_of, gguf_tokenizer
    from anypair.benchmarking.prefill import prompt_text
    from anypair.machine import describe_machine
    from anypair.zoo import fetch

    builds = [Path(b).resolve() for b in args.builds]
    for build in builds:
        if not (build / "anypair" / "backends" / "quantized_gguf.py").is_file():
            parser.error(f"{build} is not an anypair checkout: give a git worktree, e.g. `git worktree add /tmp/before HEAD~1`")
    lengths = [int(n) for n in args.lengths.split(",")]
    fetch([args.target], progress=True)
    gguf = gguf_of(args.target)
    tokenizer, _ = gguf_tokenizer(args.target, gguf)
    prompt = prompt_text(tokenizer, max(lengths))
    ids, source = prompt.ids, prompt.source
    samples = {n: {str(b): [] for b in builds} for n in lengths}
    tokens = {n: {} for n in lengths}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as ids_file:
        json.dump(ids[:max(lengths)], ids_file)
        ids_file.flush()
        for n in lengths:
            for repeat in range(args.repeats):
                for build in builds if repeat % 2 == 0 else builds[::-1]:
                    done = subprocess.run([sys.executable, "-c", _CHILD, str(gguf), str(n), str(args.threads), ids_file.name],
                                          cwd=build, env={**_env(), "PYTHONPATH": str(build)}, capture_output=True,
                                          text=True, check=True)
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                    samples[n][str(build)].append(result["seconds"])
                    tokens[n][str(build)] = result["token"]
                    print(f"{build.name} {n} tokens: {result['seconds']:.2f} s", file=sys.stderr)
    machine = describe_machine()
    table = Table(title=f"prompt reads, s (tok/s, x the first): {machine}, {args.threads} threads, {source}")
    table.add_column("tokens", justify="right")
    for build in builds:
        table.add_column(build.name, justify="right")
    table.add_column("same first token", justify="center")
    for n in lengths:
        base = statistics.median(samples[n][str(builds[0])])
        cells = [f"{statistics.median(samples[n][str(b)]):.1f} ({n / statistics.median(samples[n][str(b)]):.0f}, "
                 f"{statistics.median(samples[n][str(b)]) / base:.2f})" for b in builds]
        table.add_row(f"{n:,}", *cells, str(len(set(tokens[n].values())) == 1))
    Console().print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": machine, "target": args.target, "threads": args.threads, "text": source,
            "command": "python evaluation/bench_prefill_builds.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "builds": [str(b) for b in builds], "seconds": samples, "first_token": tokens}, indent=1))
    return 0


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


if __name__ == "__main__":
    raise SystemExit(main())
