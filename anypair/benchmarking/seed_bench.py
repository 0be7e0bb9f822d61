"""`anypair bench --target-shape NAME`: the gguf engine beside llama.cpp on one seed-shaped GGUF
(`zoo.seed_shapes`: a big target's exact shapes and types, random weights), on the same threads.

What it measures, per engine: the load (its constructor, and the load plus a first token's logits, since
llama.cpp maps the file lazily and pays for its pages on the first step), each in a child process of its
own so that its peak RSS is its own, the file in the page cache for every load; the k-token step at each
context (`costs.verification_costs_by_context`: both engines loaded at once, interleaved per context,
medians; where both do not fit in memory, each alone, one after the other); the prompt read (prefill) of
N tokens, engines alternating; and, from the roofline's ceilings (`roofline.Ceilings`,
`roofline.step_bytes_and_macs`), the floor of each step on this machine. The weights are random, so the
text is meaningless and no token is checked: only the costs are real, and the JSON says so.
"""
from __future__ import annotations

import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

#: the engines compared, by the names the JSON and the plot use
GGUF, LLAMA_CPP = "gguf", "llama.cpp"
#: the gguf engine's layout-cache modes of a load that repacked nothing (kernels/packed_cache.py)
CACHED = ("mapped", "read")
RANDOM_WEIGHTS_NOTE = ("random weights with the model's exact shapes, types and tokenizer: the text is "
                       "meaningless, the costs (time, memory) are real")


def _rss_now() -> int:
    """Resident bytes of this process now (VmRSS)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _open_engine(engine: str, path: Path, threads: int, context: int):
    if engine == GGUF:
        from anypair.backends.quantized_gguf import QuantizedGGUFBackend

        return QuantizedGGUFBackend(path, name=GGUF, threads=threads, context=context)
    from anypair.backends.llama_cpp import LlamaCppBackend

    return LlamaCppBackend(path, name=LLAMA_CPP, threads=threads, context=context)


def _child_load(engine: str, path: str, threads: int, context: int) -> None:
    """In a child process: load, then one token; print the times and memory as one JSON line."""
    if engine == GGUF:
        from anypair.kernels import load_library

        load_library()  # the kernels' build (cached after the first) is not the model's load
    from anypair.kernels.packed_cache import cache_path

    cached = cache_path(Path(path))
    # how much of the layout cache the page cache holds before the load (a later load maps it: what is
    # not there comes from the disk), e.g. after the other engine's load pushed it out
    resident = page_cache_share(cached) if engine == GGUF and cached.exists() else None
    t0 = time.perf_counter()
    backend = _open_engine(engine, Path(path), threads, context)
    loaded = time.perf_counter()
    backend.extend([1])
    first = time.perf_counter()
    layout = getattr(backend, "layout_cache", None)  # the gguf engine: "written" first, "mapped" or "read" once cached
    print(json.dumps({"load_s": loaded - t0, "first_logits_s": first - t0, "rss_after_bytes": _rss_now(),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "layout_cache": layout.mode if layout is not None else None,
                      "layout_cache_in_page_cache": resident}))


def _child_member_load(path: str, threads: int, context: int, first: bool) -> None:
    """In a child process: the whole target a user loads (`load_member`: the engine, the tokenizer from the
    GGUF, the byte-exact adapter, the contract's check); print its time and its parts as one JSON line.
    `first`: the GGUF's kept tokenizer is removed and no kept verdict is read (both made and kept anew),
    as at a file's first load; the layout cache is as `measure_loads` left it (written)."""
    from anypair import tokenization
    from anypair.backends import contract_cache, member, sources
    from anypair.generation.members import load_member
    from anypair.kernels import load_library

    load_library()  # the kernels' build is not the model's load
    if first:
        kept = sources.kept_tokenizer_path(Path(path))
        if kept is not None:
            kept.unlink(missing_ok=True)
        contract_cache.kept_verdict = lambda key: None  # measured, then kept (replacing an earlier entry)
    parts: dict[str, float] = {}

    def timed(name, function):  # this child's own timing of the load's parts; nothing else runs here
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                parts[name] = parts.get(name, 0.0) + time.perf_counter() - start
        return wrapper

    converted: list[Path] = []  # whether this load converted the tokenizer or read the kept one back
    convert = sources._convert_tokenizer
    sources._convert_tokenizer = lambda gguf: converted.append(gguf) or convert(gguf)
    sources.gguf_tokenizer = timed("tokenizer", sources.gguf_tokenizer)
    tokenization.from_hf = timed("adapter", tokenization.from_hf)
    member.check_target_contract = timed("contract", member.check_target_contract)
    t0 = time.perf_counter()
    loaded = load_member(path, role="target", engine=GGUF, threads=threads, context=context)
    total = time.perf_counter() - t0
    parts["engine and the rest"] = total - sum(parts.values())
    print(json.dumps({"load_s": total, "parts_s": parts, "contract": loaded.invariance,
                      "tokenizer_converted": bool(converted),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


def measure_member_loads(path: Path, threads: int, context: int, repeats: int, progress: bool = True) -> dict:
    """The target as a user loads it (`_child_member_load`), in fresh child processes: the first as at a
    file's first load (its tokenizer converted, its contract measured), the others reading what the first
    kept. The bench's engine loads (`measure_loads`) time the engine alone."""
    runs = []
    for round_ in range(repeats):
        code = ("import sys; from anypair.benchmarking.seed_bench import _child_member_load; "
                "_child_member_load(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == '1')")
        done = subprocess.run([sys.executable, "-c", code, str(path), str(threads), str(context),
                               "1" if round_ == 0 else "0"], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"loading {path.name} as a target failed in a child process: "
                               f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if progress:
            parts = ", ".join(f"{name} {s:.1f} s" for name, s in runs[-1]["parts_s"].items())
            print(f"  target load {round_ + 1}/{repeats}: {runs[-1]['load_s']:.1f} s ({parts})", file=sys.stderr,
                  flush=True)
    summary = {"first": {"load_s": round(runs[0]["load_s"], 2),
                         "parts_s": {k: round(v, 2) for k, v in runs[0]["parts_s"].items()}}}
    if len(runs) > 1:
        later = runs[1:]
        summary["kept"] = {"load_s": round(statistics.median(r["load_s"] for r in later), 2),
                           "parts_s": {k: round(statistics.median(r["parts_s"][k] for r in later), 2)
                                       for k in later[0]["parts_s"]}}
    return {**summary, "samples": runs}


def page_cache_share(path: Path) -> Optional[float]:
    """The share of `path`'s pages in the page cache now (mincore over a mapping; reads nothing)."""
    import ctypes
    import mmap

    import numpy as np

    from anypair.kernels.packed_cache import mapping_address

    size = path.stat().st_size
    if size == 0:
        return None
    pages = -(-size // mmap.PAGESIZE)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) as region:
        start = ctypes.c_void_p(mapping_address(region))
        flags = np.zeros(pages, dtype=np.uint8)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mincore(start, ctypes.c_size_t(size), flags.ctypes.data_as(ctypes.c_void_p)) != 0:
            return None
        return round(int(np.count_nonzero(flags & 1)) / pages, 3)


def measure_loads(path: Path, engines: Sequence[str], threads: int, context: int, repeats: int,
                  progress: bool = True) -> dict:
    """Each engine's load in a fresh child process, engines alternating `repeats` times: medians and samples.
    The gguf engine's layout cache is removed first, so its first round is a first load (repack, and
    the cache written) and the later rounds read the cache: reported apart as "first" and "cached".

    The file is read through once beforehand (untimed), so every load finds it in the page cache: a
    cold read from disk would otherwise fall on whichever engine loads first."""
    from anypair.kernels.packed_cache import cache_path

    if GGUF in engines:
        cache_path(path).unlink(missing_ok=True)
    warm_page_cache(path)
    samples: dict[str, list[dict]] = {engine: [] for engine in engines}
    for round_ in range(repeats):
        for engine in engines:
            code = ("import sys; from anypair.benchmarking.seed_bench import _child_load; "
                    "_child_load(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))")
            done = subprocess.run([sys.executable, "-c", code, engine, str(path), str(threads), str(context)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"loading {path.name} on {engine} failed in a child process: "
                                   f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
            samples[engine].append(json.loads(done.stdout.strip().splitlines()[-1]))
            if progress:
                s = samples[engine][-1]
                print(f"  load {round_ + 1}/{repeats} {engine}: {s['load_s']:.1f} s (first logits "
                      f"{s['first_logits_s']:.1f} s), peak RSS {s['peak_rss_bytes'] / 1e9:.2f} GB",
                      file=sys.stderr, flush=True)
    result = {}
    for engine, runs in samples.items():
        result[engine] = {**_load_summary(runs), "samples": runs}
        if engine == GGUF:
            for name, kept in (("first", [r for r in runs if r["layout_cache"] not in CACHED]),
                               ("cached", [r for r in runs if r["layout_cache"] in CACHED])):
                if kept:
                    result[engine][name] = _load_summary(kept)
    return result


def warm_page_cache(path: Path, chunk: int = 64 << 20) -> None:
    """Reads `path` once, so its pages are in the page cache (memory allowing) for what follows."""
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(chunk)
        while f.readinto(buffer):
            pass


def _load_summary(runs: Sequence[dict]) -> dict:
    """Medians of the times and the RSS after loading; the highest peak RSS."""
    return {"load_s": round(statistics.median(r["load_s"] for r in runs), 2),
            "first_logits_s": round(statistics.median(r["first_logits_s"] for r in runs), 2),
            "peak_rss_GB": round(max(r["peak_rss_bytes"] for r in runs) / 1e9, 2),
            "rss_after_load_GB": round(statistics.median(r["rss_after_bytes"] for r in runs) / 1e9, 2)}


def measure_prefill(backends: dict, ids: Sequence[int], repeats: int, progress: bool = True) -> dict:
    """Seconds to read `ids` as a prompt from an empty cache, engines alternating: medians."""
    seconds: dict[str, list[float]] = {name: [] for name in backends}
    for _ in range(repeats):
        for name, backend in backends.items():
            backend.reset()
            t0 = time.perf_counter()
            backend.prefill(list(ids))
            seconds[name].append(time.perf_counter() - t0)
            backend.reset()
            if progress:
                print(f"  prefill {len(ids)} tokens on {name}: {seconds[name][-1]:.1f} s", file=sys.stderr, flush=True)
    return {name: {"tokens": len(ids), "s": round(statistics.median(s), 2),
                   "tokens_per_s": round(len(ids) / statistics.median(s), 1)} for name, s in seconds.items()}


#: resident bytes per byte of the file once each engine has loaded it, measured on the Qwen2.5-7B
#: shape (README, "At the seeds' scale"): the gguf engine 5.41 GB, llama.cpp 8.18 GB for 4.68 GB
RESIDENT_PER_FILE_BYTE = {GGUF: 1.16, LLAMA_CPP: 1.75}


def memory_needed(shape, engines: Sequence[str] = (GGUF, LLAMA_CPP), context: int = 0) -> int:
    """Bytes `engines` hold at once while the steps are timed: each one's measured share of the
    file, plus the F32 copy the gguf engine makes of every matrix of a type it has no kernel for
    (none in the seed shapes' Q4_K_M mix since Q5_K has its kernel), plus each one's fp16 keys and values for
    `context` positions (CodeLlama-13B, no grouped KV: 3.3 GB each at 4,000)."""
    from anypair.kernels.ops import NATIVE_TYPES
    from anypair.zoo.seed_shapes import tensor_plan

    plan = tensor_plan(shape)
    size = sum(t.nbytes for t in plan)
    widened = sum(4 * t.shape[0] * t.shape[1] - t.nbytes for t in plan
                  if t.type_name != "F32" and t.type_name not in NATIVE_TYPES.values())
    kv = 2 * 2 * shape.layers * shape.kv_heads * shape.head_dim * context * len(engines)
    return int(size * sum(RESIDENT_PER_FILE_BYTE[e] for e in engines) + (widened if GGUF in engines else 0) + kv)


def engine_groups(shape, available: Optional[int], context: int = 0) -> list[tuple[str, ...]]:
    """Which engines are loaded together for the step costs (their caches holding `context`
    positions): both (interleaved, the fair comparison) where both fit in `available` bytes, else
    each alone in turn; a one-line error where even one does not fit (before the machine swaps or
    kills something)."""
    from anypair.errors import InputError

    needed = memory_needed(shape, context=context)
    if not available or needed <= available:
        return [(GGUF, LLAMA_CPP)]
    alone = max(memory_needed(shape, (engine,), context) for engine in (GGUF, LLAMA_CPP))
    if alone > available:
        raise InputError(f"timing {shape.name} needs ~{alone / 1e9:.1f} GB of memory for one engine and "
                         f"{available / 1e9:.1f} GB is available: free memory, or run it on a larger machine")
    return [(GGUF,), (LLAMA_CPP,)]


def read_floors(backend, ceilings, contexts: Sequence[int], ks: Sequence[int]) -> dict:
    """{context: {k: ms}}: the roofline's floor of each step (the larger of its bytes over the read
    bandwidth and its int8 multiply-adds over the int8 peak)."""
    from anypair.benchmarking.roofline import step_bytes_and_macs

    floors = {}
    for context in contexts:
        row = {}
        for k in ks:
            bytes_read, macs = step_bytes_and_macs(backend, context, k)
            peak = macs / ceilings.int8_macs_per_s if ceilings.int8_macs_per_s else 0.0
            row[str(k)] = round(1000 * max(bytes_read / ceilings.read_bytes_per_s, peak), 1)
        floors[str(context)] = row
    return floors


def run_seed_bench(shape, *, contexts: Sequence[int] = (300, 4000), ks: Sequence[int] = tuple(range(1, 17)),
                   prefill_tokens: int = 1000, threads: int = 2, repeats: int = 5, load_repeats: int = 2,
                   prefill_repeats: int = 1, target_loads: int = 3, progress: bool = True) -> dict:
    """Write or reuse the file of `shape` (a SeedShape or its name), then measure both engines on it
    (see the module's docstring). `target_loads`: loads of the whole target as a user loads it, the
    first as a first load (0: none)."""
    import dataclasses

    import numpy as np
    import torch

    from anypair.backends.llama_cpp_guard import probe_failure
    from anypair.benchmarking.costs import verification_costs_by_context
    from anypair.benchmarking.roofline import Ceilings, roofline_json
    from anypair.errors import InputError
    from anypair.machine import available_memory, describe_machine, machine_description
    from anypair.zoo.seed_shapes import file_size, resolve_shape
    from anypair.zoo.seed_writer import seed_gguf

    shape = resolve_shape(shape) if isinstance(shape, str) else shape
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if progress else (lambda text: None)
    timed_context = max(max(contexts) + max(ks), prefill_tokens)
    groups = engine_groups(shape, available_memory(), timed_context)
    if len(groups) > 1:
        say(f"both engines at once need ~{memory_needed(shape, context=timed_context) / 1e9:.1f} GB: each is loaded "
            "alone, one after the other (its steps timed alone, not interleaved with the other's)")
    torch.set_num_threads(threads)
    path = seed_gguf(shape, progress=progress)
    context = timed_context + 64
    failure = probe_failure(path, threads)
    if failure is not None:
        raise InputError(f"llama.cpp cannot run {path.name} here, so there is nothing to compare with: {failure}")
    engines = (GGUF, LLAMA_CPP)
    say(f"{shape.name}: {path} ({path.stat().st_size / 1e9:.2f} GB, {RANDOM_WEIGHTS_NOTE})")
    say(f"loading each engine in a child process, {load_repeats} time(s), alternating")
    loads = measure_loads(path, engines, threads, context, load_repeats, progress)
    member_loads = {}
    if target_loads:
        say(f"loading it as anypair's target (engine, tokenizer, adapter, contract), {target_loads} time(s)")
        member_loads = measure_member_loads(path, threads, context, target_loads, progress)
    say("the machine's ceilings (read bandwidth, int8 peak) for the roofline's floor")
    ceilings = Ceilings.measure(threads)
    # the weights are random: which ids are read changes nothing but the embedding rows fetched
    ids = [int(i) for i in np.random.default_rng(0).integers(0, shape.vocab, size=max(prefill_tokens, 64))]
    steps: dict = {str(ctx): {} for ctx in contexts}
    prefill: dict = {}
    for group in groups:
        say(f"loading {' and '.join(group)} here for the step costs")
        backends = {engine: _open_engine(engine, path, threads, context) for engine in group}
        for ctx in contexts:
            say(f"k-token steps at context {ctx} (k = {', '.join(map(str, ks))}; {repeats} timed calls each, medians)")
            table = verification_costs_by_context(backends, ids, [ctx], ks, repeats)[ctx]
            for name, costs in table.items():
                steps[str(ctx)][name] = {str(k): round(v, 1) for k, v in costs.items()}
                say(f"  {name}: " + ", ".join(f"k={k} {ms:.0f} ms" for k, ms in steps[str(ctx)][name].items()))
        if prefill_tokens:
            say(f"prefill of {prefill_tokens} tokens")
            prefill.update(measure_prefill(backends, ids[:prefill_tokens], prefill_repeats, progress))
        if GGUF in backends:
            floors = read_floors(backends[GGUF], ceilings, contexts, ks)
        backends.clear()  # this group's weights are freed before the next group loads
        gc.collect()
    return {"what": f"anypair bench --target-shape {shape.name}: the gguf engine beside llama.cpp on one file; "
                    + RANDOM_WEIGHTS_NOTE,
            "shape": {**dataclasses.asdict(shape), "extra": dict(shape.extra), "file": str(path),
                      "file_bytes": path.stat().st_size, "tensor_bytes": file_size(shape)},
            "machine": describe_machine(), "cpu": machine_description()["cpu"], "threads": threads,
            "settings": {"contexts": list(contexts), "ks": list(ks), "repeats": repeats, "load_repeats": load_repeats,
                         "prefill_tokens": prefill_tokens, "prefill_repeats": prefill_repeats,
                         "engine_context": context, "engines_timed": "together, interleaved" if len(groups) == 1
                         else "one after the other, each alone in memory (both at once do not fit)"},
            "load": loads, "target_load": member_loads, "step_ms": steps, "read_floor_ms": floors,
            "ceilings": roofline_json(ceilings, [])["ceilings"], "prefill": prefill}


def format_table(result: dict) -> str:
    """The figures as a Markdown table: per context and k, each engine's ms, their ratio and the floor."""
    lines = [f"{result['shape']['name']} ({result['shape']['hub_id']}), {result['cpu']}, {result['threads']} threads; "
             + RANDOM_WEIGHTS_NOTE, "",
             "| context | k | gguf ms | llama.cpp ms | gguf / llama.cpp | gguf / its k=1 | read floor ms |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for ctx, engines in result["step_ms"].items():
        ours, theirs = engines[GGUF], engines[LLAMA_CPP]
        for k, ms in ours.items():
            lines.append(f"| {ctx} | {k} | {ms:.0f} | {theirs[k]:.0f} | {ms / theirs[k]:.2f} | "
                         f"{ms / ours['1']:.2f} | {result['read_floor_ms'][ctx][k]:.0f} |")
    lines.append("")
    for engine, load in result["load"].items():
        prefill = result["prefill"].get(engine)
        lines.append(f"- {engine}: load {load['load_s']:.1f} s (first logits {load['first_logits_s']:.1f} s), "
                     f"peak RSS {load['peak_rss_GB']:.2f} GB"
                     + (f"; prefill {prefill['tokens']} tokens {prefill['s']:.1f} s = "
                        f"{prefill['tokens_per_s']:.1f} tok/s" if prefill else ""))
        for name, what in (("first", "first load (repack; layout cache written)"),
                           ("cached", "later loads (cache read)")):
            if name in load:
                part = load[name]
                lines.append(f"  - {what}: {part['load_s']:.2f} s (first logits {part['first_logits_s']:.2f} s), "
                             f"peak RSS {part['peak_rss_GB']:.2f} GB")
    for name, what in (("first", "first load (tokenizer converted, contract measured)"),
                       ("kept", "later loads (both read back)")):
        part = result.get("target_load", {}).get(name)
        if part:
            parts = ", ".join(f"{key} {s:.1f} s" for key, s in part["parts_s"].items())
            lines.append(f"- anypair's target as loaded by a user, {what}: {part['load_s']:.1f} s ({parts})")
    return "\n".join(lines)


def save_plot(result: dict, path: Path) -> Path:
    """ms by k for both engines, one line per engine and context (matplotlib, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 5))
    styles = {GGUF: "o-", LLAMA_CPP: "s--"}
    for ctx, engines in result["step_ms"].items():
        for engine, costs in engines.items():
            ks = [int(k) for k in costs]
            axes.plot(ks, list(costs.values()), styles.get(engine, "x-"), label=f"{engine}, context {ctx}")
    floor = result["read_floor_ms"].get(next(iter(result["step_ms"])))
    if floor:
        axes.plot([int(k) for k in floor], list(floor.values()), ":", color="grey", label="roofline floor")
    axes.set_xlabel("k (tokens scored in one step)")
    axes.set_ylabel("ms per step (median)")
    axes.set_title(f"{result['shape']['name']} shape, random weights (costs only), {result['threads']} threads\n"
                   f"{result['machine']}", fontsize=8)
    return finish_plot(figure, axes, path)


def finish_plot(figure, axes, path) -> Path:
    """A bench plot's common end: y from 0, a light grid, the legend, saved as a PNG (its folder made)."""
    import matplotlib.pyplot as plt

    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def parse_ks(text: str) -> list[int]:
    """'1-16' or '1,2,4,8,16' (or both: '1-4,8,16') -> the ks, each at least 1."""
    from anypair.errors import InputError

    ks: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            low, _, high = part.partition("-")
            ks.extend(range(int(low), int(high) + 1) if high else [int(low)])
    except ValueError:
        raise InputError(f"--ks takes a range and/or commas, e.g. 1-16 or 1,2,4,8,16; got {text!r}") from None
    if not ks or min(ks) < 1:
        raise InputError(f"--ks: each k must be at least 1, got {text!r}")
    return sorted(set(ks))


def run_target_shape_cmd(args, contexts: Optional[Sequence[int]]) -> int:
    """`anypair bench --target-shape NAME`: measure, print the table, save the JSON and the plot."""
    from anypair.errors import InputError
    from anypair.zoo.seed_shapes import resolve_shape

    resolve_shape(args.target_shape)  # an unknown name: one line, before anything loads
    if args.replay:
        return _run_replay_cmd(args)
    if args.step_repeats < 1 or args.load_repeats < 1 or args.prefill_tokens < 0:
        raise InputError("--step-repeats and --load-repeats must be at least 1 and --prefill-tokens at least 0")
    result = run_seed_bench(args.target_shape, contexts=contexts or (300, 4000), ks=parse_ks(args.ks),
                            prefill_tokens=args.prefill_tokens, threads=args.threads or 2, repeats=args.step_repeats,
                            load_repeats=args.load_repeats)
    print(format_table(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"saved {args.json}")
    if args.plot:
        print(f"saved {save_plot(result, Path(args.plot))}")
    return 0


def _run_replay_cmd(args) -> int:
    """`--target-shape NAME --replay`: the default pair's rounds replayed at that size (benchmarking.replay)."""
    from anypair.benchmarking.prompts import humaneval_prompts, prompts_from_file
    from anypair.benchmarking.replay import format_replay, replay
    from anypair.errors import InputError

    if args.n < 1:
        raise InputError(f"--n must be at least 1, got {args.n}")
    # "policy": the shipped policy's rounds priced at the seed's size; "policy-1.5b": priced beside the 1.5B
    # target; a number: a constant draft of that many steps
    named = {"policy": None, "policy-1.5b": "1.5b"}
    try:
        lengths = [named[k.strip()] if k.strip() in named else int(k) for k in args.replay_lengths.split(",")
                   if k.strip()]
    except ValueError:
        raise InputError(f"--replay-lengths takes 'policy', 'policy-1.5b' and/or draft lengths, e.g. policy,4,8; got "
                         f"{args.replay_lengths!r}") from None
    if not lengths or any(isinstance(k, int) and k < 1 for k in lengths):
        raise InputError(f"--replay-lengths: each fixed length must be at least 1, got {args.replay_lengths!r}")
    prompts = prompts_from_file(args.prompts, args.n) if args.prompts else humaneval_prompts(args.n)
    results = []
    for length in lengths:
        results.append(replay(args.target_shape, prompts, max_new_tokens=args.max_new_tokens or 128,
                              threads=args.threads or 2, fixed_length=length if isinstance(length, int) else None,
                              priced_at_size=length != "1.5b", drafter=args.drafter))
        print(format_replay(results[-1]), flush=True)
        if args.json:  # after each length: a long run keeps what it measured
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            saved = results[0] if len(results) == 1 else {"runs": results}
            Path(args.json).write_text(json.dumps(saved, indent=1) + "\n")
    if args.json:
        print(f"saved {args.json}")
    return 0
