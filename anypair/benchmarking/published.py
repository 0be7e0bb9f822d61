"""The published figures: every table of results in README.md and docs/ is written here from the JSON
records under evaluation/measured/, never typed by hand.

    python -m anypair.benchmarking.published            # rewrite every table in place
    python -m anypair.benchmarking.published --check    # exit 1 if a page differs from its records

A page holds a table between two markers, and the text between them belongs to this module:

    <!-- table: headline-avx2 -->
    ...generated...
    <!-- /table -->

`TABLES` below is the one list of what is published: a table is one entry (its name, its kind, the
record(s) it reads, the command that made them). Adding a table is adding an entry and its markers on
a page. Each table is headed by the machine and the release of its record(s) and the command that
made them. A record that carries its own `release` (`anypair bench --json` writes one, see
`anypair.benchmarking.report.save_json`) is headed by it; older records by the release declared here.
This module reads JSON only (no torch, no models), so the test that regenerates every page is quick.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
MEASURED = "evaluation/measured"
#: the pages that may hold tables (relative to the repository root)
PAGES = ("README.md", "docs", "evaluation/README.md", "CHANGELOG.md")
RELEASE = "0.1.0"  # the release of records that carry none of their own


@dataclass(frozen=True)
class Table:
    name: str  # the marker's name on a page
    kind: str  # a key of KINDS
    records: tuple[str, ...]  # paths under evaluation/measured/
    command: str  # what made the record(s); "{record}" stands for a record's path
    labels: tuple[str, ...] = ()  # one row label per record, for kinds of several records
    release: str = RELEASE  # used for records without a `release` field
    key: str = ""  # a sub-record to read (a temperature of a sampling record)
    machine: str = ""  # for records that do not name their machine


# CPU classes: AVX2 = AMD EPYC Zen 3; AVX-512 VNNI = AMD EPYC Zen 4 and Zen 5; AMX = Intel Xeon.
BENCH = "anypair bench --n 10 --max-new-tokens 128 --threads 2 --verify-contexts 300,4000 --roofline"
REPLAY = "anypair bench --target-shape {shape} --replay --n 10 --threads 2"
REPLAY_SUMM = "anypair bench --target-shape {shape} --replay --drafter hybrid --prompts prompts.txt --n 10 --threads 2"

TABLES: tuple[Table, ...] = (
    # -- the default pair (Qwen2.5-Coder-1.5B + SmolLM2-135M) on each CPU class: the README's headline
    Table("headline-avx2", "bench", ("bench_engine_roofline_zen3_n10.json",),
          BENCH + " --drafters model --json {record}"),
    Table("headline-avx512", "bench", ("bench_engine_roofline_zen4_n10_r4.json",),
          BENCH + " --drafters model,hybrid --json {record}"),
    Table("headline-amx", "bench", ("bench_intel_xeon_amx_n10_r2_a.json",),
          BENCH + " --drafters model,hybrid --repeats 2 --json {record}"),
    # -- the default pair's rounds replayed on big targets' exact shapes (random weights, real costs)
    Table("headline-big-targets", "replays",
          ("replay_gemma-2-9b_model_halves_zen3_n10.json", "replay_gemma-2-9b_own_tokens_head_zen5_n10_c.json",
           "replay_gemma-2-9b_intel_xeon_n10.json"),
          REPLAY.format(shape="gemma-2-9b") + " --json {record}",
          ("AVX2 (AMD EPYC Zen 3): gemma-2-9b, HumanEval, model", "AVX-512 VNNI (AMD EPYC Zen 5): gemma-2-9b, HumanEval, model",
           "AMX (Intel Xeon): gemma-2-9b, HumanEval, model")),
    Table("replays-avx2", "replays",
          ("replay_gemma-2-9b_model_halves_zen3_n10.json", "replay_gemma-2-9b_hybrid_halves_zen3_n10.json",
           "replay_codellama-13b_zen3_n10.json", "replay_gemma-2-9b_summ_hybrid_zen3_n10.json"),
          REPLAY + " [--drafter hybrid] [--prompts prompts.txt] --json {record}",
          ("gemma-2-9b, HumanEval, model", "gemma-2-9b, HumanEval, hybrid", "CodeLlama-13B, HumanEval, model",
           "gemma-2-9b, summaries, hybrid")),
    Table("replays-avx512", "replays",
          ("replay_gemma-2-9b_own_tokens_head_zen5_n10_c.json", "replay_codellama-13b_own_tokens_head_zen5_n10.json",
           "replay_gemma-2-9b_summ_hybrid_own_tokens_head_zen5_n10_c.json", "replay_codellama-13b_summ_hybrid_zen5_n10.json"),
          REPLAY + " [--drafter hybrid --prompts prompts.txt] --json {record}",
          ("gemma-2-9b, HumanEval, model", "CodeLlama-13B, HumanEval, model", "gemma-2-9b, summaries, hybrid",
           "CodeLlama-13B, summaries, hybrid")),
    Table("replays-amx", "replays",
          ("replay_gemma-2-9b_intel_xeon_n10.json", "replay_codellama-13b_intel_xeon_n10.json",
           "replay_phi-3-medium-128k_intel_xeon_n10.json", "replay_gemma-2-9b_summ_hybrid_intel_xeon_n10.json",
           "replay_codellama-13b_summ_hybrid_intel_xeon_n10.json"),
          REPLAY + " [--drafter hybrid --prompts prompts.txt] --json {record}",
          ("gemma-2-9b, HumanEval, model", "CodeLlama-13B, HumanEval, model", "Phi-3-medium, HumanEval, model",
           "gemma-2-9b, summaries, hybrid", "CodeLlama-13B, summaries, hybrid")),
    # -- the gguf engine beside llama.cpp on big targets' shapes: k-token steps, loads, memory
    Table("steps-gemma-2-9b-avx2", "steps", ("bench_target_shape_gemma-2-9b_zen3.json",),
          "anypair bench --target-shape gemma-2-9b --threads 2 --verify-contexts 300,4000 --ks 1,2,4,8,16 "
          "--json {record}"),
    Table("steps-codellama-13b-avx2", "steps", ("bench_target_shape_codellama-13b_zen3.json",),
          "anypair bench --target-shape codellama-13b --threads 2 --verify-contexts 300 --ks 1,2,4,8 "
          "--prefill-tokens 0 --json {record}"),
    Table("steps-gemma-2-9b-avx512", "steps", ("bench_target_shape_gemma-2-9b_ctx300_tiled_zen5.json",),
          "anypair bench --target-shape gemma-2-9b --threads 2 --verify-contexts 300 --ks 1,2,4,8,16 --step-repeats 9 "
          "--load-repeats 1 --prefill-tokens 0 --json {record} "
          "--plot evaluation/measured/bench_target_shape_gemma-2-9b_ctx300_tiled_zen5.png"),
    Table("steps-gemma-2-9b-ctx4000-avx512", "steps", ("bench_target_shape_gemma-2-9b_ctx4000_zen5.json",),
          "anypair bench --target-shape gemma-2-9b --threads 2 --verify-contexts 4000 --ks 1,4,8 --step-repeats 5 "
          "--load-repeats 1 --json {record}"),
    Table("steps-qwen2.5-7b-avx512", "steps", ("bench_target_shape_qwen2.5-7b_ctx300_zen5.json",),
          "anypair bench --target-shape qwen2.5-7b --threads 2 --verify-contexts 300 --ks 1,2,4,8,16 --step-repeats 9 "
          "--load-repeats 1 --prefill-tokens 0 --json {record}"),
    Table("steps-gemma-2-9b-amx", "steps", ("bench_target_shape_gemma-2-9b_q6k_bits_xeon.json",),
          "anypair bench --target-shape gemma-2-9b --threads 2 --ks 1,4,8 --verify-contexts 300 --prefill-tokens 0 "
          "--json {record}"),
    Table("steps-codellama-13b-amx", "steps", ("bench_target_shape_codellama-13b_q6k_bits_xeon.json",),
          "anypair bench --target-shape codellama-13b --threads 2 --ks 1,4,8 --verify-contexts 300 --prefill-tokens 0 "
          "--json {record}"),
    Table("steps-phi-3-medium-amx", "steps", ("bench_target_shape_phi-3-medium-128k_q6k_bits_xeon.json",),
          "anypair bench --target-shape phi-3-medium-128k --threads 2 --ks 1,4,8 --verify-contexts 300 --step-repeats 3 "
          "--prefill-tokens 0 --json {record}"),
    Table("steps-llama-3.1-8b-amx", "steps", ("bench_target_shape_llama-3.1-8b_attention_xeon.json",),
          "anypair bench --target-shape llama-3.1-8b --threads 2 --ks 1,2,4,8 --verify-contexts 300,4000 "
          "--step-repeats 5 --prefill-tokens 0 --load-repeats 1 --json {record}"),
    Table("steps-qwen2.5-7b-amx", "steps", ("bench_target_shape_qwen2.5-7b_attention_xeon.json",),
          "anypair bench --target-shape qwen2.5-7b --threads 2 --ks 1,2,4,8 --verify-contexts 300,4000 "
          "--step-repeats 5 --prefill-tokens 0 --load-repeats 1 --json {record}"),
    # -- the evaluation: chat-templated tasks, quality and exactness beside speed
    Table("evaluation-three-pairs", "evaluation", ("pairs128_n20/report.json",),
          "python evaluation/run.py --max-prompt-tokens 1024 --out evaluation/measured/pairs128_n20"),
    Table("evaluation-default-pair-humaneval", "evaluation", ("humaneval128_n20_trees/report.json",),
          "python evaluation/run.py --task humaneval --n 20 --max-prompt-tokens 1024 --draft "
          "HuggingFaceTB/SmolLM2-135M-Instruct --methods target,anypair,anypair-hybrid "
          "--out evaluation/measured/humaneval128_n20_trees"),
    Table("evaluation-default-pair-summaries", "evaluation", ("summ128_n20_trees/report.json",),
          "python evaluation/run.py --task cnn_dailymail, then --task scrolls, each --n 20 --max-prompt-tokens 1024 "
          "--draft HuggingFaceTB/SmolLM2-135M-Instruct --methods target,anypair,anypair-hybrid "
          "--out evaluation/measured/summ128_n20_trees"),
    # -- more of the default pair
    Table("sampling-t07", "bench", ("bench_sampling_keyed_n10.json",),
          "python evaluation/bench_sampling.py --n 10 --json {record}", key="0.7"),
    Table("sampling-t10", "bench", ("bench_sampling_keyed_n10.json",),
          "python evaluation/bench_sampling.py --n 10 --json {record}", key="1.0"),
    Table("regret-amx", "regret", ("regret_intel_xeon_amx_n10_trees.json", "regret_summ_model_intel_xeon_n10.json"),
          "anypair bench --regret --n 10 --max-new-tokens 128 --threads 2 --drafters model,hybrid "
          "[--drafters model --prompts prompts.txt] --json {record}", ("HumanEval", "summaries")),
    Table("serve-batching-avx512", "serve", ("bench_serve_batching_zen4_8x4_prefetch.json",),
          "python evaluation/bench_serve.py --batching-only --json {record}"),
    Table("structured-avx512", "structured", ("bench_structured_default_pair_n4.json",),
          "python evaluation/bench_structured.py --n 4 --json {record}",
          machine="AMD EPYC (Zen 4: AVX-512 VNNI, no AMX), 2 cores, shared with other jobs (the file names none)"),
    Table("llama-cpp-target-avx512", "bench", ("bench_llamacpp_target_ledger_n6.json",),
          "anypair bench --engine llama.cpp --n 6 --max-new-tokens 96 --threads 2 --json {record}"),
    Table("gemma-3-270m-target-avx2", "bench", ("bench_gemma3_270m_target_zen3_n4.json",),
          "anypair bench -m google/gemma-3-270m --n 4 --max-new-tokens 64 --threads 2 --verify-contexts 300 "
          "--json {record}"),
    Table("prefill-avx2", "prefill", ("bench_prefill_zen3.json",),
          "anypair bench --prefill 1024,4096,8192 --threads 2 --repeats 1 --json {record} "
          "--plot evaluation/measured/bench_prefill_zen3.png"),
    Table("prefill-builds-avx2", "prefill-builds", ("prefill_builds_zen3.json",),
          "python evaluation/bench_prefill_builds.py --builds /tmp/before /tmp/after --lengths 1024,4096,8192 "
          "--json {record}", labels=("0.1.0 (c84187a)", "unreleased (981da01)"), release="unreleased (981da01)"),
    Table("decode-context-avx2", "decode-context", ("decode_context_zen3.json",),
          "python evaluation/bench_decode_context.py --contexts 300,16000 --ks 1,4 --repeats 7 "
          "--roofline-rows 16,64,512 --json {record}", release="unreleased"),
    Table("prefill-avx512", "prefill", ("bench_prefill_zen4_r3.json",),
          "python evaluation/bench_prefill.py --json {record}"),
)


# ---- reading records ----------------------------------------------------------------------------


def load(path: str) -> dict:
    return json.loads((REPO / MEASURED / path).read_text())


def _machine(record: dict, table: Table) -> str:
    for where in (record, record.get("settings") or {}):
        machine = where.get("machine")
        if isinstance(machine, dict):  # evaluation/run.py's records
            return f"{machine.get('cpu')} ({machine.get('logical_cpus')} logical CPUs, {machine.get('features')}, " \
                   f"{machine.get('memory')})"
        if machine:
            return str(machine)
    return table.machine or "not recorded"


def _release(record: dict, table: Table) -> str:
    for where in (record, record.get("settings") or {}):
        if where.get("release"):
            return str(where["release"])
        versions = where.get("versions")
        if isinstance(versions, dict) and versions.get("anypair"):
            return str(versions["anypair"])
    return table.release


def _x(value: Optional[float]) -> str:
    return "–" if value is None or value != value else f"{value:.2f}x"


def _median(values: Sequence[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _header(*cells: str) -> list[str]:
    return [_row(*cells), _row(*("---" for _ in cells))]


# ---- kinds: each renders the lines of one table -------------------------------------------------


def _bench(table: Table, records: list[dict]) -> list[str]:
    """`anypair bench` (and bench_sampling.py per temperature): medians per method, ratios as the medians
    of per-prompt ratios against the target alone and llama.cpp alone on the same prompt."""
    record = records[0][table.key] if table.key else records[0]
    runs, settings = record["runs"], record["settings"]
    methods = list(dict.fromkeys(r["method"] for r in runs))

    def per_prompt(method: str, baseline: str) -> Optional[float]:
        base = {r["example"]: r["tokens_per_s"] for r in runs if r["method"] == baseline}
        return _median([r["tokens_per_s"] / base[r["example"]] for r in runs
                        if r["method"] == method and base.get(r["example"])])

    names = {"target": "target alone", "llama.cpp-alone": "llama.cpp alone (same GGUF)",
             "anypair-model": "**anypair** (draft model)", "anypair-hybrid": "**anypair** (hybrid: lookup + model)",
             "anypair": "**anypair**"}
    lines = [f"Target `{settings.get('target')}`, draft `{settings.get('draft')}`, "
             f"{len({r['example'] for r in runs})} prompts, up to {settings.get('max_new_tokens')} new tokens, "
             f"{settings.get('threads')} threads" + (f", temperature {table.key}" if table.key else ", greedy") + ".", ""]
    has_llama = "llama.cpp-alone" in methods
    lines += _header("method", "tok/s (median)", "vs target alone", *(["vs llama.cpp alone"] if has_llama else []),
                     "accepted / round", "identical to target alone")
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        same = [r["identical_to_target"] for r in mine if r.get("identical_to_target") is not None]
        accepted = _median([r["mean_accepted"] for r in mine if r.get("mean_accepted") is not None])
        lines.append(_row(names.get(method, method), f"{_median([r['tokens_per_s'] for r in mine]):.2f}",
                          _x(per_prompt(method, "target")),
                          *([_x(per_prompt(method, "llama.cpp-alone"))] if has_llama else []),
                          "–" if accepted is None else f"{accepted:.2f}",
                          f"{sum(same)}/{len(same)}" if same else "–"))
    return lines


def _replays(table: Table, records: list[dict]) -> list[str]:
    """`anypair bench --target-shape NAME --replay`: one row per record."""
    lines = _header("target shape, prompts, drafter", "anypair vs the target alone", "anypair vs llama.cpp alone",
                    "target alone vs llama.cpp alone", "draft's share of a round", "the same rounds at 1.5B (real)")
    for label, record in zip(table.labels, records):
        summary = record["summary"]
        lines.append(_row(label, f"**{_x(summary['median_vs_target'])}**", _x(summary["median_vs_llama_cpp"]),
                          _x(summary.get("target_alone_vs_llama_cpp")), f"{100 * summary['median_draft_share']:.0f}%",
                          _x(summary.get("median_real_speedup_at_1_5b"))))
    return lines


def _steps(table: Table, records: list[dict]) -> list[str]:
    """`anypair bench --target-shape NAME`: ms to score k tokens after a context, both engines on one file."""
    record = records[0]
    by_context = record["step_ms"]
    ks = list(next(iter(next(iter(by_context.values())).values())))
    shape = record["shape"]
    size = shape.get("file_bytes") if isinstance(shape, dict) else None
    name = shape["name"] if isinstance(shape, dict) else shape
    lines = [f"`{name}`'s exact shapes, types and tokenizer with random weights"
             + (f" ({size / 1e9:.2f} GB)" if size else "") + f", {record.get('threads')} threads, medians.", ""]
    lines += _header("context", "engine", *(f"k = {k}, ms" for k in ks), "k = 1 vs llama.cpp's k = 1")
    for context, engines in by_context.items():
        llama_one = engines.get("llama.cpp", {}).get("1")
        for engine, costs in engines.items():
            label = "anypair (gguf engine)" if engine == "gguf" else engine
            ratio = costs["1"] / llama_one if llama_one and engine != "llama.cpp" else None
            lines.append(_row(context, label, *(f"{costs[k]:.0f}" for k in ks), _x(ratio)))
    loads = record.get("load") or {}
    if loads:
        lines += ["", *_header("engine", "first load, s", "peak RSS, GB",
                               *(["prefill, tok/s"] if record.get("prefill") else []))]
        prefill = record.get("prefill") or {}
        for engine, load_figures in loads.items():
            first = load_figures.get("first", load_figures)
            rate = (prefill.get(engine) or {}).get("tokens_per_s") if isinstance(prefill.get(engine), dict) else None
            lines.append(_row("anypair (gguf engine)" if engine == "gguf" else engine, f"{first['load_s']:.1f}",
                              f"{first['peak_rss_GB']:.2f}", *([f"{rate:.1f}" if rate else "–"] if prefill else [])))
    return lines


def _evaluation(table: Table, records: list[dict]) -> list[str]:
    """evaluation/run.py's report.json: speed, exactness and quality per task and method."""
    record = records[0]
    settings = record["settings"]
    # records with end-to-end times (evaluation/run.py since it reads documents whole) show both times and
    # what the prompts were; the earlier records keep their table as published
    timed = any(s.get("total_time_s_median") is not None for s in record["summaries"])
    limit = settings.get("max_prompt_tokens")
    prompts = "" if not timed else (", documents whole" if limit is None else f", prompts cut to {limit} tokens")
    lines = [f"Target `{settings['target']}`, {settings['n_requested']} examples a task, up to "
             f"{settings['max_new_tokens']} new tokens, greedy, chat-templated prompts{prompts}, "
             f"{settings.get('threads')} threads.", ""]
    lines += _header("task", "method (draft)", "n", "speedup, median [95% CI]", "tok/s (mean)",
                     *(["prompt tokens (mean)", "time to first token, s (median)", "end to end, s (median)"]
                       if timed else []),
                     "ran the target alone", "identical to target alone", "quality")
    for s in record["summaries"]:
        speedup = s.get("speedup")
        cell = "1.00 (baseline)" if s["method"] == "target" else (
            "–" if not speedup else f"{speedup['median']:.2f} [{speedup['median_ci']['low']:.2f}, "
                                    f"{speedup['median_ci']['high']:.2f}]")
        draft = s.get("draft", "").split("/")[-1]
        quality = f"pass@1 {100 * s['pass_at_1']:.1f}%" if s.get("pass_at_1") is not None else (
            "R-1/2/L " + "/".join(f"{s['rouge'][k]:.1f}" for k in ("rouge1", "rouge2", "rougeLsum")) if s.get("rouge") else "–")
        identical = s.get("identical_rate")
        skipped = s.get("drafting_skipped")
        failed = s.get("failed") or 0
        lines.append(_row(s["task"], s["method"] + (f" ({draft})" if draft else ""),
                          f"{s['n']}" + (f" ({failed} failed)" if failed else ""), cell,
                          f"{s['tokens_per_second_mean']:.2f}",
                          *([f"{s['prompt_tokens_mean']:.0f}", f"{s['time_to_first_token_s_median']:.2f}",
                             "–" if s.get("total_time_s_median") is None else f"{s['total_time_s_median']:.2f}"]
                            if timed else []),
                          "–" if skipped is None else f"{skipped}/{s['n']}",
                          "–" if identical is None or s["method"] == "target" else f"{100 * identical:.0f}%", quality))
    return lines


def _regret(table: Table, records: list[dict]) -> list[str]:
    """`anypair bench --regret`: the shipped policy against every fixed draft length, per prompt."""
    lines = _header("prompts", "drafter", "policy vs best length in hindsight (median / worst)",
                    "policy vs target alone (median / worst)", "best single length k", "identical")
    for label, record in zip(table.labels, records):
        for s in record["summary"]:
            lines.append(_row(label, s["drafter"], f"{s['median_regret']:.2f} / {s['worst_regret']:.2f}",
                              f"{_x(s['median_vs_target'])} / {_x(s['worst_vs_target'])}", s["best_single_k"],
                              f"{s['identical']}/{s['prompts']}"))
    return lines


def _serve(table: Table, records: list[dict]) -> list[str]:
    """evaluation/bench_serve.py --batching-only: one request at a time against a shared batch."""
    record = records[0]
    settings, batching = record["settings"], record["batching"]
    alone, batched = batching["one_at_a_time"], batching["batched"]
    lines = [f"`anypair serve`, target `{settings['target']}`, draft `{settings['draft']}`: "
             f"{settings['load_requests']} requests from {settings['load_clients']} clients, up to "
             f"{settings['max_new_tokens']} new tokens, greedy, {settings['threads']} threads.", ""]
    lines += _header("", f"`--max-batch {alone['max_batch']}`", f"`--max-batch {batched['max_batch']}`")
    rows: list[tuple[str, Callable[[dict], str]]] = [
        ("aggregate tok/s", lambda b: f"{b['aggregate_tok_s']:.1f}"),
        ("median request tok/s", lambda b: f"{b['median_request_tok_s']:.1f}"),
        ("time to first token alone / joining the others, s",
         lambda b: f"{b['ttft_alone_s']:.2f} / {b['ttft_under_load_s']:.2f}"),
        ("4 requests at once / one after another, s", lambda b: f"{b['four_concurrent_s']:.1f} / {b['four_serial_s']:.1f}"),
        ("answers identical to the request served alone", lambda b: f"{b['identical']}/{b['answered']}"),
        ("lost / errors", lambda b: f"{b['lost']} / {b['errors']}"),
        ("peak RSS, GiB", lambda b: f"{b['peak_rss_bytes'] / 2 ** 30:.2f}"),
    ]
    for label, cell in rows:
        lines.append(_row(label, cell(alone), cell(batched)))
    llama = batching.get("llama_cpp")
    if llama:
        lines.append(_row(f"llama.cpp's batched decode, {llama['sequences']} sequences, same GGUF", "–",
                          f"{llama['aggregate_tok_s']:.1f} tok/s, {llama['differ']}/{llama['sequences']} answers "
                          f"differ from its own alone"))
    return lines


def _prefill(table: Table, records: list[dict]) -> list[str]:
    """`anypair bench --prefill` (and evaluation/bench_prefill.py): time to first token from an empty cache
    per prompt length, the engines on the target's GGUF, OpenVINO GenAI and the draft's read where run."""
    record = records[0]
    rows = record["lengths"]
    settings = record.get("settings") or {}
    engines = [e for e in ("gguf", "llama.cpp", "openvino") if any(e in r["tokens_per_second"] for r in rows.values())]
    names = {"gguf": "anypair (gguf engine)", "llama.cpp": "llama.cpp", "openvino": "OpenVINO GenAI"}
    has_draft = any("draft" in r for r in rows.values())
    text = f" Text: {settings['text']}." if settings.get("text") else ""
    draft = f" Draft `{settings['draft']}`." if has_draft and settings.get("draft") else ""
    lines = [f"`{record['gguf']}`, {record['threads']} threads, from an empty cache, medians.{text}{draft}", ""]
    lines += _header("prompt tokens", *(f"{names[e]}, s / tok/s" for e in engines),
                     *(["anypair / llama.cpp"] if "llama.cpp" in engines else []),
                     *(["anypair / OpenVINO"] if "openvino" in engines else []),
                     *(["the draft's read: tokens, s"] if has_draft else []))
    for length, figures in rows.items():
        seconds, rates = figures.get("seconds") or {}, figures["tokens_per_second"]
        cells = [f"{seconds[e]:.2f} / {rates[e]:.1f}" if e in rates and e in seconds else
                 f"– / {rates[e]:.1f}" if e in rates else "–" for e in engines]
        if "llama.cpp" in engines:
            cells.append(_x(figures.get("gguf_over_llama_cpp")))
        if "openvino" in engines:
            cells.append(_x(figures.get("gguf_over_openvino")))
        if has_draft:
            read = figures.get("draft")
            cells.append(f"{read['tokens']}, {read['seconds']:.2f}" if read else "–")
        lines.append(_row(length, *cells))
    return lines


def _prefill_builds(table: Table, records: list[dict]) -> list[str]:
    """evaluation/bench_prefill_builds.py: one prompt read per checkout and length, the checkouts alternating
    (`labels` names each checkout), the last against the first."""
    record = records[0]
    builds = record["builds"]
    labels = table.labels or tuple(Path(b).name for b in builds)
    lines = [f"`{record['target']}` on the gguf engine, {record['threads']} threads, from an empty cache, "
             f"medians. Text: {record['text']}.", ""]
    lines += _header("prompt tokens", *(f"{label}: s (tok/s)" for label in labels), f"{labels[-1]} / {labels[0]}",
                     "same first token")
    for length, by_build in record["seconds"].items():
        medians = [_median(by_build[b]) for b in builds]
        cells = [f"{m:.1f} ({int(length) / m:.0f})" for m in medians]
        same = len(set(record["first_token"][length].values())) == 1
        lines.append(_row(f"{int(length):,}", *cells, f"{medians[-1] / medians[0]:.2f}x time, "
                          f"{medians[0] / medians[-1]:.2f}x speed", "yes" if same else "**no**"))
    return lines


def _decode_context(table: Table, records: list[dict]) -> list[str]:
    """evaluation/bench_decode_context.py: k-row steps after each context (contexts alternating in one
    process), and where a forward of many rows spends its time where the record has that roofline."""
    record = records[0]
    ms = record["ms"]
    contexts = list(ms)
    ks = list(ms[contexts[0]])
    lines = [f"`{record['target']}` on the gguf engine, {record['threads']} threads, medians. Text: {record['text']}.", ""]
    lines += _header("context", *(f"k = {k}, ms" for k in ks), f"k = {ks[-1]} / k = {ks[0]}",
                     f"k = {ks[0]} / at context {int(contexts[0]):,}")
    for c in contexts:
        lines.append(_row(f"{int(c):,}", *(f"{ms[c][k]:.1f}" for k in ks), _x(ms[c][ks[-1]] / ms[c][ks[0]]),
                          _x(ms[c][ks[0]] / ms[contexts[0]][ks[0]])))
    roofline = record.get("roofline")
    if roofline:
        ceilings = roofline["ceilings"]
        steps = roofline["steps"]
        parts = list(dict.fromkeys(name for step in steps for name in step["parts_ms"]))
        lines += ["", f"Where a forward of many rows spends its time (context {steps[0]['context']:,}, the last row's "
                  f"logits only, as a prompt chunk's read): ceilings {ceilings['read_GB_s']} GB/s read, "
                  f"{ceilings['int8_GMAC_s']} GMAC/s int8 ({ceilings['simd']}), parts in ms.", ""]
        lines += _header("rows", "ms", "ms a row", "GMAC/s", "of int8 peak", *parts)
        for step in steps:
            lines.append(_row(step["k"], f"{step['ms']:.1f}", f"{step['ms'] / step['k']:.2f}", f"{step['GMAC_s']:.0f}",
                              f"{100 * step['GMAC_s'] / ceilings['int8_GMAC_s']:.0f}%",
                              *(f"{step['parts_ms'].get(name, 0.0):.1f}" for name in parts)))
    return lines


def _structured(table: Table, records: list[dict]) -> list[str]:
    """evaluation/bench_structured.py: ms a token with and without a JSON schema, and llguidance's share."""
    summary = records[0]["summary"]
    lines = [f"Target `{summary['target']}`, draft `{summary['draft']}`, {summary['prompts']} chat prompts, up to "
             f"{summary['max_new_tokens']} new tokens, greedy.", ""]
    lines += _header("", "free, ms a token", "with a JSON schema, ms a token", "schema / free",
                     "the grammar's own ms a token", "accepted / round, free / schema")
    for name, label in (("alone", "target alone"), ("anypair", "anypair")):
        f = summary[name]
        lines.append(_row(label, f"{f['free_ms_per_token']:.1f}", f"{f['constrained_ms_per_token']:.1f}",
                          _x(f["ratio"]), f"{f['grammar_ms_per_token']:.2f}",
                          "–" if name == "alone" else
                          f"{f['accepted_per_round_free']:.2f} / {f['accepted_per_round_constrained']:.2f}"))
    return lines


KINDS: dict[str, Callable[[Table, list[dict]], list[str]]] = {
    "prefill-builds": _prefill_builds, "decode-context": _decode_context,
    "bench": _bench, "replays": _replays, "steps": _steps, "evaluation": _evaluation, "regret": _regret,
    "serve": _serve, "prefill": _prefill, "structured": _structured,
}


# ---- pages --------------------------------------------------------------------------------------

START = re.compile(r"^<!-- table: (?P<name>[\w.\-]+) -->$")
END = "<!-- /table -->"


def render(table: Table) -> str:
    """The text between a table's markers: its heading line, then the table."""
    records = [load(path) for path in table.records]
    described = [r[table.key] if table.key else r for r in records]  # the part that names machine and release
    paths = ", ".join(f"`{MEASURED}/{p}`" for p in dict.fromkeys(table.records))
    command = table.command.replace("{record}", f"{MEASURED}/{table.records[0]}")
    releases = ", ".join(dict.fromkeys(_release(r, table) for r in described))
    machines = "; ".join(dict.fromkeys(_machine(r, table) for r in described))
    head = [f"*Machine:* {machines}. *Release:* anypair {releases}. *Record:* {paths}.",
            f"*Command:* `{command}`", ""]
    return "\n".join(head + KINDS[table.kind](table, records))


def pages(root: Path = REPO) -> list[Path]:
    found = []
    for entry in PAGES:
        path = root / entry
        found += sorted(path.rglob("*.md")) if path.is_dir() else [path] if path.exists() else []
    return found


def rewrite(text: str, rendered: dict[str, str], where: str = "") -> tuple[str, list[str]]:
    """`text` with every marked table replaced by its rendering; also the names it holds."""
    out, names, lines, i = [], [], text.split("\n"), 0
    while i < len(lines):
        match = START.match(lines[i])
        out.append(lines[i])
        i += 1
        if not match:
            continue
        name = match["name"]
        if name not in rendered:
            raise SystemExit(f"{where}: a table named {name!r} is not declared in anypair.benchmarking.published.TABLES")
        try:
            end = lines.index(END, i)
        except ValueError:
            raise SystemExit(f"{where}: the table {name!r} has no closing {END}") from None
        out += ["", rendered[name], "", END]
        names.append(name)
        i = end + 1
    return "\n".join(out), names


def regenerate(root: Path = REPO, write: bool = True) -> list[str]:
    """Rewrite (or, with write=False, compare) every page; returns the pages that differ(ed)."""
    rendered = {table.name: render(table) for table in TABLES}
    if len(rendered) != len(TABLES):
        raise SystemExit("two tables in TABLES share a name")
    changed, used = [], set()
    for page in pages(root):
        text = page.read_text()
        new, names = rewrite(text, rendered, str(page.relative_to(root)))
        used |= set(names)
        if new != text:
            changed.append(str(page.relative_to(root)))
            if write:
                page.write_text(new)
    unused = set(rendered) - used
    if unused:
        raise SystemExit(f"tables declared but on no page: {sorted(unused)}")
    return changed


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anypair.benchmarking.published",
                                     description="Write every results table of README.md and docs/ from the records "
                                                 "under evaluation/measured/ (between <!-- table: NAME --> markers).")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs from its records")
    args = parser.parse_args(argv)
    changed = regenerate(write=not args.check)
    for page in changed:
        print(("differs from its records: " if args.check else "rewrote ") + page)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
