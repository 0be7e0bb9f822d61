"""Sampling benchmark: tokens per second of the target sampling alone, of anypair's lossless
speculative sampling, and of transformers' own assisted sampling for different tokenizers
(`generate(assistant_model=..., tokenizer=..., assistant_tokenizer=..., do_sample=True)`), on the
same pair, engines and threads, side by side and interleaved per prompt so machine drift cancels.

Same setup as the greedy `anypair bench`, whose harness, methods, tables and prompts it shares
(`anypair.benchmarking`): the default pair (Qwen2.5-Coder-1.5B target, SmolLM2-135M draft), the first
10 HumanEval prompts, 128 new tokens, auto weights, 2 threads; at temperatures 1.0 and 0.7. Prints a
rich table per temperature and the medians; `--json` saves all.

    python evaluation/bench_sampling.py                       # the full run (~1 h on a 2-core CPU)
    python evaluation/bench_sampling.py --n 2 --max-new-tokens 32 --target Qwen/Qwen2.5-Coder-0.5B-Instruct
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Optional

import torch

from anypair.benchmarking.harness import Job, JobRuns, run_interleaved
from anypair.benchmarking.methods import (AnyPairMethod, Decoding, MethodOutput, TorchAssistant, TransformersMethod,
                                         transformers_target)
from anypair.benchmarking.prompts import BenchPrompt, humaneval_prompts
from anypair.benchmarking.report import BenchReport, format_report
from anypair.backends.member import LoadedModel
from anypair.machine import describe_machine
from anypair.types import SamplingConfig
from anypair.zoo.registry import DEFAULT_DRAFT, DEFAULT_TARGET


def target_logprob(target: LoadedModel, prompt_ids: list[int], new_ids: list[int], decoding: Decoding) -> Optional[float]:
    """Mean log-probability of `new_ids` under the target's own warped sampling law (one pass of the
    target's engine over prompt and answer, untimed). Sampling from the target gives about the same mean whoever drafted; a method
    that accepts tokens the target would rarely sample shows a much lower figure."""
    from anypair.sampling.warping import warp_logits

    if not new_ids:
        return None
    law = SamplingConfig(do_sample=True, temperature=decoding.temperature, top_k=decoding.top_k, top_p=decoding.top_p)
    # through the target's own backend (any engine: the GGUF engine has no torch module), on a fresh
    # cache: the next generation resets it anyway
    target.backend.reset()
    with torch.inference_mode():
        logits = target.backend.extend(list(prompt_ids) + list(new_ids), all_logits=True)
    logits = logits[len(prompt_ids) - 1: -1].float().clone()  # a normal tensor: rows are masked below
    target.backend.reset()
    real = target.tokenizer.vocab_size
    total = 0.0
    for row, token in zip(logits, new_ids):
        row[real:] = float("-inf")  # padded rows: never sampled
        total += float(torch.log(warp_logits(row, law)[token].clamp_min(1e-30)))
    return total / len(new_ids)


def run(args: argparse.Namespace) -> dict[float, BenchReport]:
    from anypair.generation.generator import AnyPairGenerator

    gen = AnyPairGenerator(args.target, args.draft, weights=args.weights, threads=args.threads,
                           sampled_drafts=args.sampled_drafts)
    methods = [AnyPairMethod("target", gen, assisted=False),
               AnyPairMethod("anypair", gen, assisted=True, draft_name=args.draft)]
    if not args.no_hf:
        # transformers' generate drives a torch model: a GGUF-engine target gets a torch copy
        methods.append(TransformersMethod("hf-uag", transformers_target(gen.target, args.target, args.weights),
                                          TorchAssistant.load(args.draft)))
    prompts = [BenchPrompt(text) for text in humaneval_prompts(args.n)]
    reports = {
        temperature: BenchReport(settings=dict(
            target=args.target, draft=args.draft, engines=gen.engines, threads=torch.get_num_threads(),
            max_new_tokens=args.max_new_tokens, temperature=temperature, top_k=args.top_k, top_p=args.top_p,
            n_prompts=len(prompts), machine=describe_machine(), torch=torch.__version__, seed=args.seed,
            same_vocabulary=gen.same_vocabulary, sampled_drafts=args.sampled_drafts))
        for temperature in args.temperatures
    }
    # prompt i is sampled with seed + i by every method
    jobs = [Job(i, prompt, Decoding(args.max_new_tokens, temperature=temperature, top_k=args.top_k,
                                    top_p=args.top_p, seed=args.seed + i))
            for i, prompt in enumerate(prompts) for temperature in args.temperatures]

    def logprob(job: Job, output: MethodOutput) -> Optional[float]:
        return target_logprob(gen.target, job.prompt.target_ids(gen.target.hf_tokenizer), output.target_ids,
                              job.decoding)

    def record(done: JobRuns) -> None:
        temperature = done.job.decoding.temperature
        reports[temperature].runs.extend(done.runs)
        # one plain line per job: the progress bar does not show when output goes to a log file
        print(f"example {done.job.example} T={temperature}: "
              + ", ".join(f"{r.method} {r.tokens_per_s:.2f} tok/s" for r in done.runs), file=sys.stderr, flush=True)
        if args.json:
            save_json(reports, args.json)  # a cut-off run keeps what it measured

    # anypair must write the target's own text for each seed: a difference is a bug, not a figure
    run_interleaved(methods, jobs, description="benchmarking sampling", target_logprob=logprob, after_job=record,
                    stop_on_mismatch=True)
    return reports


def save_json(reports: dict[float, BenchReport], path: str) -> None:
    with open(path, "w") as f:
        json.dump({str(t): r.to_json() for t, r in reports.items()}, f, indent=1)


def summary_table(reports: dict[float, BenchReport]) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    # anypair writes the target's own text for each seed, so its tok/s ratio compares the same tokens;
    # transformers' UAG samples a text of its own (another length), and tok/s counts the prefill: the
    # decode speedup (ms per token after the first) is the figure that does not swing with length
    table = Table(title="sampling: medians per temperature (speedup = median of per-prompt tok/s ratios vs target; "
                        "decode speedup = of ms per token after the first)")
    for column in ("temperature", "method", "tok/s", "speedup vs target", "decode speedup", "accept", "acc/round",
                   "same text as target", "target log-p/token (mean)"):
        table.add_column(column, justify="right")
    for temperature, report in reports.items():
        for method in dict.fromkeys(r.method for r in report.runs):
            speedups, decode = report.speedups(method), report.decode_speedups(method)
            acceptance, per_round = report.median(method, "acceptance"), report.median(method, "mean_accepted")
            table.add_row(f"{temperature:g}", method, f"{report.median(method, 'tokens_per_s'):.2f}",
                          f"{statistics.median(speedups):.2f}x" if speedups else "",
                          f"{statistics.median(decode):.2f}x" if decode else "",
                          "" if acceptance != acceptance else f"{acceptance:.2f}",
                          "" if per_round != per_round else f"{per_round:.2f}",
                          identical_share(report, method), mean_logprob(report, method))
    buffer = StringIO()
    Console(file=buffer, width=140).print(table)
    return buffer.getvalue()


def identical_share(report: BenchReport, method: str) -> str:
    """'10/10': runs whose tokens are the target alone's for the same seed (blank: not comparable)."""
    same = [r.identical_to_target for r in report.runs if r.method == method and r.identical_to_target is not None]
    return f"{sum(same)}/{len(same)}" if same else ""


def mean_logprob(report: BenchReport, method: str) -> str:
    values = [r.target_logprob for r in report.runs if r.method == method and r.target_logprob is not None]
    return f"{statistics.fmean(values):.3f}" if values else ""


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--draft", default=DEFAULT_DRAFT)
    parser.add_argument("--n", type=int, default=10, help="HumanEval prompts (the first N)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.7])
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--weights", "--dtype", dest="weights", default="auto",
                        help="the target's weights (auto: the fastest batch-invariant format of this machine)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="prompt i is sampled with seed + i by every method")
    parser.add_argument("--sampled-drafts", choices=("greedy", "intersection"), default="greedy",
                        help="anypair's drafting mode when sampling (see AnyPairGenerator)")
    parser.add_argument("--no-hf", action="store_true", help="skip transformers' assisted sampling")
    parser.add_argument("--json", metavar="PATH", help="save every figure and the settings")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    if args.n < 1 or args.max_new_tokens < 1:
        raise SystemExit("--n and --max-new-tokens must be positive")
    if min(args.temperatures) <= 0:
        raise SystemExit("--temperatures must be above 0 (greedy decoding is `anypair bench`)")
    reports = run(args)
    for report in reports.values():
        print(format_report(report))
    print(summary_table(reports))
    if args.json:
        save_json(reports, args.json)
        print(f"saved {args.json}")


if __name__ == "__main__":
    main()
