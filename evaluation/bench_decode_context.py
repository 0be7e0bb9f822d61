"""Decode and verification steps at long context: a k-row step of the target after 300 and after 16,000
tokens of real text, side by side in one process (two cache slots of one engine, the contexts alternating
call by call), so that what a long prompt costs every later step is measured, not assumed. With
`--roofline-rows`, where a forward of that many rows spends its time (a prompt chunk's read: the last row's
logits only) against the machine's read and int8 ceilings.

    python evaluation/bench_decode_context.py                                   # contexts 300,16000, k 1,4
    python evaluation/bench_decode_context.py --contexts 300,8000,16000 --ks 1,2,4,8 --json out.json
    python evaluation/bench_decode_context.py --roofline-rows 16,64,512 --json out.json
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
    parser.add_argument("--contexts", default="300,16000", help="comma-separated cached tokens before the step")
    parser.add_argument("--ks", default="1,4", help="comma-separated rows a step scores")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--roofline-rows", default="", help="comma-separated rows of forwards profiled part by part "
                        "after the first context (e.g. 16,64,512)")
    parser.add_argument("--json", help="save the figures to this JSON file")
    args = parser.parse_args(argv)
    try:
        contexts = [int(c) for c in args.contexts.split(",")]
        ks = [int(k) for k in args.ks.split(",")]
        roofline_rows = [int(k) for k in args.roofline_rows.split(",") if k.strip()]
    except ValueError:
        parser.error(f"--contexts and --ks take comma-separated integers, got {args.contexts!r} and {args.ks!r}")
    if min(contexts) < 1 or min(ks) < 1 or args.repeats < 1:
        parser.error("contexts, ks and --repeats must be positive")

    from rich.console import Console
    from rich.table import Table

    from anypair.backends.base import SequenceRows
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.backends.sources import gguf_of, gguf_tokenizer
    from anypair.benchmarking.prefill import prompt_text
    from anypair.machine import describe_machine
    from anypair.zoo import fetch

    fetch([args.target], progress=True)
    gguf = gguf_of(args.target)
    tokenizer, _ = gguf_tokenizer(args.target, gguf)
    prompt = prompt_text(tokenizer, max(contexts) + max(ks))
    ids = prompt.ids
    engine = QuantizedGGUFBackend(gguf, threads=args.threads,
                                  context=max(contexts) + max([*ks, *roofline_rows]) + 8, slots=len(contexts))
    for slot, context in enumerate(contexts):  # each context in a slot of its own, read once
        started = time.perf_counter()
        engine.extend_slot(slot, ids[:context], False)
        print(f"context {context:,}: read in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    samples = {c: {k: [] for k in ks} for c in contexts}
    for _ in range(args.repeats):
        for k in ks:
            for slot, context in enumerate(contexts):
                rows = ids[context:context + k]
                started = time.perf_counter()
                engine.forward_rows([SequenceRows(slot, rows, "all")])
                samples[context][k].append(time.perf_counter() - started)
                engine.crop_slot(slot, context)
    medians = {c: {k: statistics.median(samples[c][k]) * 1e3 for k in ks} for c in contexts}
    machine = describe_machine()
    table = Table(title=f"a k-row step, ms (median of {args.repeats}): {machine}, {args.threads} threads")
    table.add_column("context", justify="right")
    for k in ks:
        table.add_column(f"k = {k}", justify="right")
    table.add_column(f"k = {ks[-1]} / k = {ks[0]}", justify="right")
    table.add_column(f"k = {ks[0]} / at {contexts[0]:,}", justify="right")
    for c in contexts:
        table.add_row(f"{c:,}", *(f"{medians[c][k]:.1f}" for k in ks), f"{medians[c][ks[-1]] / medians[c][ks[0]]:.2f}x",
                      f"{medians[c][ks[0]] / medians[contexts[0]][ks[0]]:.2f}x")
    Console().print(table)
    roofline = None
    if roofline_rows:
        from anypair.benchmarking.roofline import Ceilings, format_roofline, profile_steps, roofline_json

        ceilings = Ceilings.measure(args.threads)
        profiles = profile_steps(engine, ids, contexts[:1], roofline_rows, repeats=3, all_logits=False)
        Console().print(format_roofline(ceilings, profiles))
        roofline = roofline_json(ceilings, profiles)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "roofline": roofline,
            "machine": machine, "target": args.target, "threads": args.threads, "text": prompt.source,
            "command": "python evaluation/bench_decode_context.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "ms": {str(c): {str(k): medians[c][k] for k in ks} for c in contexts},
            "samples_s": {str(c): {str(k): samples[c][k] for k in ks} for c in contexts}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
