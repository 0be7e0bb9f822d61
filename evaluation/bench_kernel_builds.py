"""Kernel builds side by side: the same matrices through two or more builds of the C kernels, in one process.

A kernel change is judged here, not on a whole step: each checkout given (a git worktree of anypair at
another commit, or with an edit) builds its own library as anypair would (kernels/build.py), all of them
are loaded into this process, and every call alternates between them on the same interleaved matrices of
a GGUF (8 layers' worth, rotated, so the caches do not hold them). The machine's speed drifts between runs
(on the shared AVX2 machine by 30%), so only ratios taken within one run count; medians.

    git worktree add /tmp/before HEAD~1
    python evaluation/bench_kernel_builds.py --gguf seed.gguf --builds /tmp/before . --threads 1,2
    python evaluation/bench_kernel_builds.py --gguf seed.gguf --builds /tmp/before . --matrices ffn_gate,ffn_down \\
        --rows 1,2,4,8 --repeats 9 --json out.json

Each build's results are the same bits (tests/test_quant_kernels.py checks each path against the scalar
reference); this script only times them. The matrices are packed by this process's own build, so builds that
change a packed layout (ap_repack) cannot be compared with it; Q6_K's two layouts (kernels/build.py:
q6k_layout) can, as a second axis: `--q6k-layouts bytes,bits` packs each matrix both ways and times every
build on each.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_LIBRARY_OF = "from anypair.kernels.build import library_path; print(library_path())"


def build_library(checkout: Path) -> Path:
    """The kernels' library of `checkout` (built now when its cache entry is missing), in a child process
    that imports anypair from that checkout."""
    if not (checkout / "anypair" / "kernels" / "build.py").is_file():
        raise SystemExit(f"bench_kernel_builds: {checkout} is not an anypair checkout (no anypair/kernels/build.py): "
                         "give a git worktree of the repository, e.g. `git worktree add /tmp/before HEAD~1`")
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    done = subprocess.run([sys.executable, "-c", _LIBRARY_OF], capture_output=True, text=True, env=env,
                          cwd=checkout.resolve())
    if done.returncode != 0:
        raise SystemExit(f"bench_kernel_builds: {checkout} did not build its kernels: {done.stderr.strip()[-300:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def matrices(gguf, name: str, layers: int, q6k_layout: str = ""):
    """`layers` layers' matrix `name` (blk.i.NAME.weight), or the output head ("head": output.weight, else the
    tied token_embd.weight), interleaved as the engine has them; Q6_K in `q6k_layout` where one is given."""
    from anypair.kernels.build import packing_q6k_as
    from anypair.kernels.ops import QuantWeight

    with packing_q6k_as(q6k_layout) if q6k_layout else contextlib.nullcontext():
        if name == "head":
            tensor = gguf.tensors.get("output.weight") or gguf.tensors["token_embd.weight"]
            return [QuantWeight.from_gguf_tensor(tensor)]
        return [QuantWeight.from_gguf_tensor(gguf.tensors[f"blk.{i}.{name}.weight"]) for i in range(layers)]


def time_variants(variants, threads: int, rows: int, repeats: int) -> list[float]:
    """Median seconds per matrix of each (weights, library) variant: every repeat runs all variants in turn on
    the same input."""
    import torch

    from anypair.kernels.ops import LinearGroup

    groups = [[LinearGroup([w], library) for w in weights] for weights, library in variants]
    x = torch.randn(rows, variants[0][0][0].cols)
    seconds = [[] for _ in variants]
    for repeat in range(repeats + 1):  # the first round warms each variant and is not counted
        for index, group_list in enumerate(groups):
            start = time.perf_counter()
            for group in group_list:
                group(x, threads=threads)
            if repeat:
                seconds[index].append((time.perf_counter() - start) / len(group_list))
    return [statistics.median(s) for s in seconds]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True, help="a GGUF (a seed from `anypair seed-gguf NAME`, or a zoo model's)")
    parser.add_argument("--builds", nargs="+", required=True, help="anypair checkouts; the first is the baseline")
    parser.add_argument("--matrices", default="ffn_gate", help="comma-separated: ffn_gate, ffn_down, attn_q, ..., head")
    parser.add_argument("--threads", default="2", help="comma-separated thread counts")
    parser.add_argument("--rows", default="1,2,4,8", help="comma-separated activation rows (k)")
    parser.add_argument("--layers", type=int, default=8, help="layers' matrices rotated per call (caches cannot hold them)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--q6k-layouts", default="", help="comma-separated Q6_K layouts to compare (bytes, bits); "
                                                         "default: the process's own only")
    parser.add_argument("--json", help="save the figures to this JSON file")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from anypair.backends.gguf_file import GGUFFile
    from anypair.kernels.build import Q6K_LAYOUTS, open_library
    from anypair.machine import describe_machine

    layouts = [layout for layout in args.q6k_layouts.split(",") if layout]
    unknown = set(layouts) - set(Q6K_LAYOUTS)
    if unknown:  # before any checkout is built
        raise SystemExit(f"bench_kernel_builds: --q6k-layouts takes {', '.join(Q6K_LAYOUTS)}, got {', '.join(sorted(unknown))}")
    builds = [Path(b) for b in args.builds]
    libraries = [open_library(build_library(b)) for b in builds]
    labels = [f"{b.resolve().name}/{layout}" if layout else b.resolve().name for b in builds for layout in layouts or [""]]
    gguf = GGUFFile(Path(args.gguf))
    table = Table(title=f"kernel builds, ms per matrix (x the first): {describe_machine()}")
    for column in ("matrix", "type", "threads", "k", *labels):
        table.add_column(column, justify="right")
    results = []
    for name in args.matrices.split(","):
        packed = [matrices(gguf, name, args.layers, layout) for layout in layouts or [""]]
        variants = [(weights, library) for library in libraries for weights in packed]
        types = sorted({w.type_name for weights in packed for w in weights})
        for threads in (int(t) for t in args.threads.split(",")):
            for rows in (int(k) for k in args.rows.split(",")):
                medians = time_variants(variants, threads, rows, args.repeats)
                results.append({"matrix": name, "types": types, "shape": [packed[0][0].rows, packed[0][0].cols],
                                "threads": threads, "k": rows, "ms": [round(1000 * m, 3) for m in medians],
                                "x_first": [round(m / medians[0], 3) for m in medians]})
                table.add_row(name, "/".join(types), str(threads), str(rows),
                              *[f"{1000 * m:.2f} ({m / medians[0]:.2f})" for m in medians])
                print(f"{name} threads {threads} k {rows}: " + ", ".join(f"{r:.2f}" for r in results[-1]["x_first"]),
                      file=sys.stderr, flush=True)
    Console().print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "what": "the same interleaved matrices through each build of the kernels, alternating per repeat, medians",
            "machine": describe_machine(), "gguf": Path(args.gguf).name, "builds": [str(b) for b in builds],
            "columns": labels,
            "repeats": args.repeats, "layers_rotated": args.layers, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
