"""Whole steps of the gguf engine under two per-CPU settings, alternating in one process.

The kernels take two settings from the CPU they run on (kernels/build.py): from how many activation rows
the AVX-512 tiles prefetch ahead (`prefetch_min_rows`) and how Q6_K matrices are laid out (`q6k_layout`).
Both change no bit of any result, only the time, and a shared machine drifts by tens of percent between
runs, so they are judged here side by side: every round times a k-row step (context 300, all logits) under
each value in turn, the order reversed every other round; medians.

    python evaluation/bench_engine_settings.py --gguf seed.gguf --prefetch-rows 4,1 --ks 1,2,4,8
    python evaluation/bench_engine_settings.py --gguf seed.gguf --q6k-layouts bytes,bits --json out.json

The prefetch threshold is a variable of the loaded kernels, so one engine serves every value; the Q6_K
layout is fixed when a matrix is packed, so that comparison loads the file once per layout (twice the
memory) with the layout cache off.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def step_ms(engine, start: int, filler: list[int], k: int) -> float:
    """One k-row step after the prompt, in ms; the cache cropped back to the prompt."""
    t0 = time.perf_counter()
    engine.extend(filler[:k], all_logits=True)
    seconds = time.perf_counter() - t0
    engine.crop(start)
    return 1000 * seconds


def engines_for(args):
    """{value: (engine, the call that puts the kernels in that value's setting)}."""
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.kernels.build import Q6K_LAYOUTS, load_library, packing_q6k_as

    library = load_library()
    if args.prefetch_rows:
        try:
            values = [max(1, int(rows)) for rows in args.prefetch_rows.split(",")]
        except ValueError:
            raise SystemExit(f"bench_engine_settings: --prefetch-rows takes whole numbers of rows, got {args.prefetch_rows}")
        engine = QuantizedGGUFBackend(args.gguf, name="target", threads=args.threads, context=4096)
        return {str(rows): (engine, lambda rows=rows: library.ap_set_prefetch_min_rows(rows)) for rows in values}
    layouts = args.q6k_layouts.split(",")
    unknown = sorted(set(layouts) - set(Q6K_LAYOUTS))
    if unknown:
        raise SystemExit(f"bench_engine_settings: --q6k-layouts takes {', '.join(sorted(Q6K_LAYOUTS))}, got {', '.join(unknown)}")
    engines = {}
    for layout in layouts:
        with packing_q6k_as(layout):  # each engine packs its own copy: no layout cache shared between them
            engines[layout] = (QuantizedGGUFBackend(args.gguf, name=layout, threads=args.threads, context=4096,
                                                    layout_cache=False), lambda: None)
    return engines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True, help="a GGUF (a seed from `anypair seed-gguf NAME`, or a zoo model's)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--prefetch-rows", help="comma-separated thresholds, e.g. 4,1 (the first is the baseline)")
    which.add_argument("--q6k-layouts", help="comma-separated Q6_K layouts: bytes,bits (the first is the baseline)")
    parser.add_argument("--ks", default="1,2,4,8", help="comma-separated rows a step")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--json", help="save the figures to this JSON file")
    args = parser.parse_args(argv)
    from anypair.machine import describe_machine

    ks = [int(k) for k in args.ks.split(",")]
    engines = engines_for(args)
    prompt = [1000 + i % 30000 for i in range(args.context)]
    filler = prompt[-16:] * 2
    starts = {}
    for value, (engine, _) in engines.items():
        if engine.cached_length == 0:
            engine.prefill(prompt)
        starts[value] = engine.cached_length
    samples = {value: {k: [] for k in ks} for value in engines}
    for round_ in range(args.rounds + 1):  # round 0 warms every value and is not counted
        order = list(engines) if round_ % 2 == 0 else list(engines)[::-1]
        for value in order:
            engine, apply = engines[value]
            apply()
            for k in ks:
                ms = step_ms(engine, starts[value], filler, k)
                if round_:
                    samples[value][k].append(ms)
        print(f"round {round_}/{args.rounds}", file=sys.stderr)
    from anypair.kernels.build import load_library, prefetch_min_rows

    load_library().ap_set_prefetch_min_rows(prefetch_min_rows())  # the process's own setting again
    medians = {value: {k: statistics.median(v) for k, v in by_k.items()} for value, by_k in samples.items()}
    base = next(iter(medians))
    print(f"{os.path.basename(args.gguf)}, context {args.context}, {args.threads} threads: {describe_machine()}")
    for value, by_k in medians.items():
        print(f"  {value:>6}: " + "  ".join(f"k={k} {ms:.1f} ms ({ms / medians[base][k]:.3f})" for k, ms in by_k.items()))
    if args.json:
        setting = "prefetch_min_rows" if args.prefetch_rows else "q6k_layout"
        with open(args.json, "w") as f:
            json.dump({"machine": describe_machine(), "gguf": os.path.basename(args.gguf), "setting": setting,
                       "context": args.context, "threads": args.threads, "rounds": args.rounds,
                       "median_ms": medians, "samples_ms": samples}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
