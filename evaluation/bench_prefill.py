"""Time to first token on long prompts: the gguf engine's prefill beside llama.cpp's on the same GGUF.

Each engine reads the same real text (a CNN/DailyMail article, repeated to length), tokenized by the
target's tokenizer, from an empty cache, and returns the last position's logits: what a request pays
before its first token. Engines alternate within every repeat, so drift falls on both; medians.

    python evaluation/bench_prefill.py                              # 1,000- and 2,000-token prompts
    python evaluation/bench_prefill.py --lengths 500,1000,2000 --repeats 5 --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--target", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
    parser.add_argument("--lengths", default="1000,2000", help="comma-separated prompt lengths in target tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="save the figures to this JSON file")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from anypair.backends.llama_cpp import LlamaCppBackend
    from anypair.backends.llama_cpp_guard import probe_failure
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.backends.sources import gguf_of, gguf_tokenizer
    from anypair.benchmarking.sweep import DEFAULT_ARTICLES, articles_from_jsonl
    from anypair.machine import describe_machine
    from anypair.zoo import fetch

    fetch([args.target], progress=True)
    gguf = gguf_of(args.target)
    lengths = [int(n) for n in args.lengths.split(",")]
    context = max(lengths) + 64
    text = " ".join(articles_from_jsonl(DEFAULT_ARTICLES))
    hf_tokenizer, _ = gguf_tokenizer(args.target, gguf)
    ids = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = (ids * (max(lengths) // len(ids) + 1))[:max(lengths)]
    engines = {"gguf": QuantizedGGUFBackend(gguf, name="gguf", threads=args.threads, context=context)}
    failure = probe_failure(gguf, args.threads)
    if failure is None:
        engines["llama.cpp"] = LlamaCppBackend(gguf, name="llama.cpp", threads=args.threads, context=context)
    else:
        print(f"bench_prefill: llama.cpp is left out: {failure}", file=sys.stderr)
    samples: dict = {n: {name: [] for name in engines} for n in lengths}
    for n in lengths:
        for _ in range(args.repeats):
            for name, engine in engines.items():
                engine.reset()
                started = time.perf_counter()
                engine.extend(ids[:n])
                samples[n][name].append(time.perf_counter() - started)
                engine.reset()
    table = Table(title=f"prefill from an empty cache (median of {args.repeats}), {describe_machine()}, "
                        f"{args.threads} threads, {Path(gguf).name}")
    for column in ("prompt tokens", *(f"{name} s" for name in engines), *(f"{name} tok/s" for name in engines),
                   "gguf / llama.cpp tok/s"):
        table.add_column(column, justify="right")
    figures = {"machine": describe_machine(), "threads": args.threads, "gguf": Path(gguf).name, "lengths": {}}
    for n in lengths:
        seconds = {name: statistics.median(s) for name, s in samples[n].items()}
        rates = {name: n / s for name, s in seconds.items()}
        ratio = rates["gguf"] / rates["llama.cpp"] if "llama.cpp" in rates else None
        figures["lengths"][n] = {"seconds": seconds, "tokens_per_second": rates, "gguf_over_llama_cpp": ratio}
        table.add_row(str(n), *(f"{seconds[name]:.2f}" for name in engines), *(f"{rates[name]:.0f}" for name in engines),
                      f"{ratio:.2f}x" if ratio else "-")
    Console().print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
        print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
