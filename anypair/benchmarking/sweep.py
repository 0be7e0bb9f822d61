"""`anypair bench --sweep`: the seed-style benchmark table. Per example, a prompt of exactly 256 or
512 target tokens (the start of a CNN/DailyMail article), 64 to 1024 new tokens with end-of-sequence
ignored so that every length holds, and per run the total time, prefill ms, ms per token and tokens
per second, for the target alone and anypair, greedy and sampling (T=1.0), with llama.cpp alone on
the target's GGUF beside them (greedy: llama-cpp-python's loop here is greedy only). Every job runs
on the interleaved harness (baseline first, the others rotated, everything warmed up first); the
table shows how the speedup grows with the number of new tokens.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

from anypair.benchmarking.harness import Job, run_interleaved
from anypair.benchmarking.methods import AnyPairMethod, Decoding, Method
from anypair.benchmarking.prompts import BenchPrompt
from anypair.benchmarking.report import BASELINE, RunFigures
from anypair.errors import InputError

SWEEP_PROMPT_LENGTHS = (256, 512)
SWEEP_NEW_TOKENS = (64, 128, 256, 512, 1024)
SWEEP_TEMPERATURES = (0.0, 1.0)  # 0: greedy
LLAMA_CPP_ALONE = "llama.cpp-alone"
ANYPAIR = "anypair-model"
# shipped with the package, so an installed anypair sweeps with no data checkout: the first 6 articles of
# Spec-Bench's CNN/DailyMail 3.0.0 test subset (evaluation/ reads the whole subset), id and article text,
# in the subset's order, so article 0 is the one the published tables used
DEFAULT_ARTICLES = Path(__file__).resolve().parent / "data" / "cnn_dailymail_sweep.jsonl"
# how far from n content tokens the cut may move to make the re-encoded prompt exactly n tokens long
CUT_SEARCH_SPAN = 16


def articles_from_jsonl(path: Path) -> list[str]:
    """The `article` field of every line of a CNN/DailyMail-style JSONL file."""
    try:
        with open(path, encoding="utf-8") as lines:
            articles = [json.loads(line)["article"] for line in lines if line.strip()]
    except OSError as exc:
        raise InputError(f"cannot read the sweep's articles at {path}: {exc.strerror}; pass --sweep-articles FILE "
                         "(a JSONL file with an \"article\" per line, e.g. CNN/DailyMail 3.0.0)") from exc
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: every line must be a JSON object with an \"article\" field") from exc
    return articles


def prompt_of_exactly(hf_tokenizer, text: str, n_tokens: int) -> Optional[BenchPrompt]:
    """A raw prompt made of the start of `text` that the target's tokenizer encodes to exactly
    `n_tokens` ids (special tokens it adds included), or None when `text` is too short.

    Decoding the first n ids and encoding the text again can merge differently at the cut (or end
    inside a multi-byte character), so cuts near n are tried until one re-encodes to n exactly."""
    content_ids = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    added = len(BenchPrompt("a").target_ids(hf_tokenizer)) - len(hf_tokenizer("a", add_special_tokens=False)["input_ids"])
    wanted_content = n_tokens - added
    if len(content_ids) < wanted_content + CUT_SEARCH_SPAN:
        return None
    for shift in sorted(range(-CUT_SEARCH_SPAN, CUT_SEARCH_SPAN + 1), key=abs):
        cut = wanted_content + shift
        if cut < 1:
            continue
        prompt = BenchPrompt(hf_tokenizer.decode(content_ids[:cut]))
        if len(prompt.target_ids(hf_tokenizer)) == n_tokens:
            return prompt
    return None


def sweep_prompts(hf_tokenizer, articles: Sequence[str], prompt_lengths: Sequence[int], per_length: int) -> dict[int, list[BenchPrompt]]:
    """For each prompt length, the first `per_length` articles long enough, cut to exactly that many tokens."""
    prompts: dict[int, list[BenchPrompt]] = {}
    for length in prompt_lengths:
        found = []
        for article in articles:
            prompt = prompt_of_exactly(hf_tokenizer, article, length)
            if prompt is not None:
                found.append(prompt)
            if len(found) == per_length:
                break
        if len(found) < per_length:
            raise InputError(f"only {len(found)} of the articles are long enough for a {length}-token prompt "
                             f"({per_length} wanted): lower --sweep-examples or the prompt length, or pass more "
                             "articles with --sweep-articles FILE")
        prompts[length] = found
    return prompts


@dataclass(frozen=True)
class SweepCell:
    """What one job of the sweep is: which article, cut to how many tokens, how many new tokens, how decoded."""

    article: int
    prompt_length: int
    new_tokens: int
    temperature: float

    @property
    def decoding_name(self) -> str:
        return "greedy" if self.temperature == 0 else f"T={self.temperature:g}"


@dataclass
class SweepRow:
    article: int
    prompt_tokens: int
    new_tokens: int
    decoding: str
    method: str
    total_s: float
    prefill_ms: float
    ms_per_token: float
    tokens_per_s: float
    speedup: Optional[float]  # tokens per second over the target alone's on the same job
    acceptance: Optional[float]
    identical_to_target: Optional[bool]
    # where an assisted run's time went after the prefill: drafting (the draft's prompt read
    # included) and verification, and how many rounds it took (0 where a method reports none)
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    rounds: int = 0
    # anypair ran the target alone: drafting had lost time on its recent requests (policies.ledger)
    drafting_skipped: Optional[bool] = None


def sweep_jobs(prompts: dict[int, list[BenchPrompt]], new_tokens: Sequence[int], temperature: float,
               seed: int, first_index: int) -> tuple[list[Job], dict[int, SweepCell]]:
    """One job per (prompt length, article, new tokens), the shortest generations first: the harness
    warms every method up on the first job, which should be cheap."""
    cells = [SweepCell(article, length, tokens, temperature)
             for tokens in sorted(new_tokens) for length, found in prompts.items() for article in range(len(found))]
    jobs, cell_of = [], {}
    for offset, cell in enumerate(cells):
        index = first_index + offset
        decoding = Decoding(cell.new_tokens, temperature=temperature, seed=seed, ignore_eos=True)
        jobs.append(Job(index, prompts[cell.prompt_length][cell.article], decoding))
        cell_of[index] = cell
    return jobs, cell_of


def rows_of(runs: Sequence[RunFigures], cell_of: dict[int, SweepCell]) -> list[SweepRow]:
    baseline_speed = {r.example: r.tokens_per_s for r in runs if r.method == BASELINE}
    rows = []
    for run in runs:
        cell = cell_of[run.example]
        base = baseline_speed.get(run.example)
        rows.append(SweepRow(
            article=cell.article, prompt_tokens=run.prompt_tokens, new_tokens=run.new_tokens,
            decoding=cell.decoding_name, method=run.method, total_s=run.total_s, prefill_ms=run.prefill_ms,
            ms_per_token=run.ms_per_token, tokens_per_s=run.tokens_per_s,
            speedup=run.tokens_per_s / base if base and run.method != BASELINE else None,
            acceptance=run.acceptance, identical_to_target=run.identical_to_target,
            draft_ms=run.draft_ms, verify_ms=run.verify_ms, rounds=run.rounds, drafting_skipped=run.drafting_skipped))
    return rows


def run_sweep(methods_greedy: Sequence[Method], methods_sampling: Sequence[Method],
              prompts: dict[int, list[BenchPrompt]], new_tokens: Sequence[int], temperatures: Sequence[float],
              *, seed: int = 0, progress: bool = True) -> list[SweepRow]:
    """The whole grid: greedy jobs on `methods_greedy`, each sampling temperature on `methods_sampling`
    (the baseline first in both)."""
    rows: list[SweepRow] = []
    next_index = 0
    for temperature in temperatures:
        methods = methods_greedy if temperature == 0 else methods_sampling
        jobs, cell_of = sweep_jobs(prompts, new_tokens, temperature, seed, next_index)
        next_index += len(jobs)
        label = "sweep, greedy" if temperature == 0 else f"sweep, T={temperature:g}"
        done = run_interleaved(methods, jobs, progress=progress, description=label)
        rows += rows_of([figures for job in done for figures in job.runs], cell_of)
    return rows


def format_optional(value: Optional[float], pattern: str) -> str:
    return "" if value is None else pattern.format(value)


def sweep_markdown(rows: Sequence[SweepRow], settings: dict) -> str:
    """The per-example table, then median speedups by new tokens (one column per prompt length and decoding)."""
    lines = [
        "| prompt tokens | new tokens | decoding | method | total s | prefill ms | ms/token | tok/s | speedup vs target "
        "| acceptance | draft ms | verify ms | rounds | identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ordered = sorted(rows, key=lambda r: (r.decoding != "greedy", r.decoding, r.prompt_tokens, r.new_tokens, r.article))
    for r in ordered:
        lines.append(
            f"| {r.prompt_tokens} | {r.new_tokens} | {r.decoding} | {r.method} | {r.total_s:.2f} | {r.prefill_ms:.0f} "
            f"| {r.ms_per_token:.1f} | {r.tokens_per_s:.2f} | {format_optional(r.speedup, '{:.2f}x')} "
            f"| {'target alone' if r.drafting_skipped else format_optional(r.acceptance, '{:.2f}')} "
            f"| {format_optional(r.draft_ms or None, '{:.0f}')} | {format_optional(r.verify_ms or None, '{:.0f}')} "
            f"| {r.rounds or ''} "
            f"| {'' if r.identical_to_target is None else ('yes' if r.identical_to_target else 'NO')} |")
    columns = sorted({(r.decoding, r.prompt_tokens, r.method) for r in rows if r.method != BASELINE},
                     key=lambda c: (c[0] != "greedy", c[0], c[1], c[2]))
    summary = ["| new tokens | " + " | ".join(f"{method}, {decoding}, prompt {length}" for decoding, length, method in columns)
               + " |", "|---|" + "---|" * len(columns)]
    for tokens in sorted({r.new_tokens for r in rows}):
        cells = []
        for decoding, length, method in columns:
            speedups = [r.speedup for r in rows if (r.decoding, r.prompt_tokens, r.method, r.new_tokens)
                        == (decoding, length, method, tokens) and r.speedup is not None]
            cells.append(f"{statistics.median(speedups):.2f}x" if speedups else "–")
        summary.append(f"| {tokens} | " + " | ".join(cells) + " |")
    header = ", ".join(f"{k} {v}" for k, v in settings.items() if k in ("target", "draft", "engines", "threads", "machine"))
    return ("Per example (end of sequence ignored, so every run writes the asked number of tokens):\n\n"
            + "\n".join(lines) + "\n\nMedian speedup over the target alone (tok/s ratio per job):\n\n"
            + "\n".join(summary) + f"\n\n{header}\n")


def save_sweep(rows: Sequence[SweepRow], settings: dict, json_path: str) -> Path:
    """`json_path` gets every figure; the Markdown table goes beside it (same name, .md). Returns the latter."""
    path = Path(json_path)
    path.write_text(json.dumps({"settings": settings, "rows": [asdict(r) for r in rows]}, indent=2))
    markdown_path = path.with_suffix(".md")
    markdown_path.write_text(sweep_markdown(rows, settings))
    return markdown_path


def parse_int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{option} takes comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise InputError(f"{option} takes positive integers, got {text!r}")
    return values


def parse_temperatures(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--sweep-temperatures takes comma-separated numbers (0 = greedy), got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise InputError(f"--sweep-temperatures takes numbers >= 0 (0 = greedy), got {text!r}")
    return values


def run_sweep_cmd(args, generator_options: dict) -> int:
    """`anypair bench --sweep`: loads the pair once, cuts the prompts, runs the grid, prints and saves the table."""
    import torch

    from anypair.benchmarking.bench import llama_cpp_alone
    from anypair.generation.generator import AnyPairGenerator
    from anypair.machine import describe_machine

    prompt_lengths = parse_int_list(args.sweep_prompt_lengths, "--sweep-prompt-lengths")
    new_tokens = parse_int_list(args.sweep_new_tokens, "--sweep-new-tokens")
    temperatures = parse_temperatures(args.sweep_temperatures)
    if args.sweep_examples < 1:
        raise InputError(f"--sweep-examples must be at least 1, got {args.sweep_examples}")
    articles = articles_from_jsonl(Path(args.sweep_articles) if args.sweep_articles else DEFAULT_ARTICLES)

    gen = AnyPairGenerator(args.model, args.assistant_model, drafter="model", **generator_options)
    prompts = sweep_prompts(gen.target.hf_tokenizer, articles, prompt_lengths, args.sweep_examples)
    threads = torch.get_num_threads()
    baseline = AnyPairMethod(BASELINE, gen, assisted=False)
    anypair = AnyPairMethod(ANYPAIR, gen, assisted=True, draft_name=args.assistant_model)
    methods_greedy: list[Method] = [baseline, anypair]
    alone = None if args.no_llama_cpp else llama_cpp_alone(args.model, gen.target, threads)
    if alone is not None:
        methods_greedy.append(alone)
    settings = dict(target=args.model, draft=args.assistant_model, engines=gen.engines, threads=threads,
                    machine=describe_machine(), torch=torch.__version__, prompt_lengths=prompt_lengths,
                    new_tokens=new_tokens, temperatures=temperatures, examples_per_length=args.sweep_examples,
                    ignore_eos=True, llama_cpp_alone=alone is not None)
    rows = run_sweep(methods_greedy, [baseline, anypair], prompts, new_tokens, temperatures)
    print(sweep_markdown(rows, settings))
    if args.json:
        markdown_path = save_sweep(rows, settings, args.json)
        print(f"saved {args.json} and {markdown_path}")
    return 0
