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
reference); this script only times them. The matrices are packed once, by this process's own build: builds
that change a packed layout (ap_repack, the Q6_K layout) cannot be compared with this script.
"""
from __future__ import annotations

import argparse
import ctypes
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


def load_build(path: Path):
    """One build loaded beside the others, set as load_library sets anypair's own."""
    from anypair.kernels.binding import bind
    from anypair.kernels.build import Q6K_LAYOUTS, prefetch_min_rows, q6k_layout

    library = bind(ctypes.CDLL(str(path)))
    library.ap_set_prefetch_min_rows(prefetch_min_rows())
    library.ap_set_q6k_layout(Q6K_LAYOUTS[q6k_layout(avx512=library.ap_simd_level() == 3)])
    return library


def matrices(gguf, name: str, layers: int):
    """`layers` layers' matrix `name` (blk.i.NAME.weight), or the output head ("head": output.weight, else the
    tied token_embd.weight), interleaved as the engine has them."""
    from anypair.kernels.ops import QuantWeight

    if name == "head":
        tensor = gguf.tensors.get("output.weight") or gguf.tensors["token_embd.weight"]
        return [QuantWeight.from_gguf_tensor(tensor)]
    return [QuantWeight.from_gguf_tensor(gguf.tensors[f"blk.{i}.{name}.weight"]) for i in range(layers)]


def time_builds(weights, libraries, threads: int, rows: int, repeats: int) -> list[float]:
    """Median seconds per matrix of each build: every repeat runs all builds in turn on the same input."""
    import torch

    from anypair.kernels.ops import LinearGroup

    groups = [[LinearGroup([w], library) for w in weights] for library in libraries]
    x = torch.randn(rows, weights[0].cols)
    seconds = [[] for _ in libraries]
    for repeat in range(repeats + 1):  # the first round warms each build and is not counted
        for index in range(len(libraries)):
            start = time.perf_counter()
            for group in groups[index]:
                group(x, threads=threads)
            if repeat:
                seconds[index].append((time.perf_counter() - start) / len(weights))
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
    parser.add_argument("--json", help="save the figures to this JSON file")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from anypair.backends.gguf_file import GGUFFile
    from anypair.kernels.build import load_library
    from anypair.machine import describe_machine

    builds = [Path(b) for b in args.builds]
    libraries = [load_build(build_library(b)) for b in builds]
    load_library()  # this process's own, which packs the matrices (the layout is the same for every build)
    gguf = GGUFFile(Path(args.gguf))
    table = Table(title=f"kernel builds, ms per matrix (x the first build): {describe_machine()}")
    for column in ("matrix", "type", "threads", "k", *[b.name or str(b) for b in builds]):
        table.add_column(column, justify="right")
    results = []
    for name in args.matrices.split(","):
        weights = matrices(gguf, name, args.layers)
        for threads in (int(t) for t in args.threads.split(",")):
            for rows in (int(k) for k in args.rows.split(",")):
                medians = time_builds(weights, libraries, threads, rows, args.repeats)
                types = sorted({w.type_name for w in weights})
                results.append({"matrix": name, "types": types, "shape": [weights[0].rows, weights[0].cols],
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
            "repeats": args.repeats, "layers_rotated": args.layers, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
