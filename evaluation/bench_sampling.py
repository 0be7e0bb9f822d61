"""Sampling benchmark: tokens per second of the target sampling alone, of anypair's lossless
speculative sampling, and of transformers' own assisted sampling for different tokenizers
(`generate(assistant_model=..., tokenizer=..., assistant_tokenizer=..., do_sample=True)`), on the
same pair, engines and threads, side by side and interleaved per prompt so machine drift cancels.

Same setup as the greedy `anypair bench` (whose figures, tables and prompts it reuses): Qwen2.5-Coder-1.5B
target, SmolLM2-135M draft, the first 10 HumanEval prompts, 128 new tokens, auto weights, 2 threads; at
temperatures 1.0 and 0.7. Prints a rich table per temperature and the medians; `--json` saves all.

    python evaluation/bench_sampling.py                       # the full run (~1 h on a 2-core CPU)
    python evaluation/bench_sampling.py --n 2 --max-new-tokens 32 --target Qwen/Qwen2.5-Coder-0.5B-Instruct
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from typing import Optional

import torch

from anypair.bench import BenchReport, RunFigures, figures_from_result, format_report, humaneval_prompts
from anypair.machine import describe_machine
from anypair.zoo.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from anypair.types import SamplingConfig

METHODS = ("target", "anypair", "hf-uag")


def hf_assisted_sampling(gen, hf_draft_model, prompt_ids: list[int], max_new_tokens: int,
                         cfg: SamplingConfig) -> tuple[list[int], float]:
    """transformers' assisted sampling on the same target and a copy of the draft (universal
    assisted generation when the tokenizers differ). Returns (new target ids, seconds)."""
    input_ids = torch.tensor([prompt_ids], device=gen.target.model.device)
    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=True, temperature=cfg.temperature, top_k=cfg.top_k,
                  top_p=cfg.top_p, assistant_model=hf_draft_model, attention_mask=torch.ones_like(input_ids),
                  eos_token_id=sorted(gen.target.eos_ids), pad_token_id=min(gen.target.eos_ids))
    if not gen.same_vocabulary:
        kwargs.update(tokenizer=gen.target.hf_tokenizer, assistant_tokenizer=gen.draft.hf_tokenizer)
    torch.manual_seed(cfg.seed if cfg.seed is not None else 0)
    started = time.perf_counter()
    with torch.inference_mode():
        out = gen.target.model.generate(input_ids, **kwargs)
    return out[0, len(prompt_ids):].tolist(), time.perf_counter() - started


def target_logprob(gen, prompt_ids: list[int], new_ids: list[int], cfg: SamplingConfig) -> Optional[float]:
    """Mean log-probability of `new_ids` under the target's own warped sampling law (one forward
    pass, untimed). Sampling from the target gives about the same mean whoever drafted; a method
    that accepts tokens the target would rarely sample shows a much lower figure."""
    from anypair.sampling.warping import warp_logits

    if not new_ids:
        return None
    ids = torch.tensor([list(prompt_ids) + list(new_ids)], device=gen.target.model.device)
    with torch.no_grad():
        logits = gen.target.model(ids).logits[0, len(prompt_ids) - 1: -1].float()
    real = gen.target.tokenizer.vocab_size
    total = 0.0
    for row, token in zip(logits, new_ids):
        row[real:] = float("-inf")  # padded rows: never sampled
        total += float(torch.log(warp_logits(row, cfg)[token].clamp_min(1e-30)))
    return total / len(new_ids)


def hf_figures(example: int, prompt_tokens: int, new_ids: list[int], seconds: float) -> RunFigures:
    return RunFigures("hf-uag", example, prompt_tokens, len(new_ids), seconds, 0.0,
                      1000 * seconds / max(len(new_ids), 1), len(new_ids) / seconds)


def run(args: argparse.Namespace) -> dict[float, BenchReport]:
    from anypair.generation.generator import AnyPairGenerator

    gen = AnyPairGenerator(args.target, args.draft, weights=args.weights, threads=args.threads,
                           sampled_drafts=args.sampled_drafts)
    # transformers' universal assisted sampling prunes and re-indexes the assistant's LM head and
    # embeddings IN PLACE: sharing the draft would corrupt anypair's draft, so it gets its own torch copy
    # (anypair's draft may not be a torch model at all: llama.cpp)
    hf_draft_model = None
    if not args.no_hf:
        from anypair.zoo import load_model

        hf_draft_model = load_model(args.draft, dtype=torch.float32)[0]
    prompts = humaneval_prompts(args.n)
    reports = {
        temperature: BenchReport(settings=dict(
            target=args.target, draft=args.draft, engines=gen.engines, threads=torch.get_num_threads(),
            max_new_tokens=args.max_new_tokens, temperature=temperature, top_k=args.top_k, top_p=args.top_p,
            n_prompts=len(prompts), machine=describe_machine(), torch=torch.__version__, seed=args.seed,
            same_vocabulary=gen.same_vocabulary, sampled_drafts=args.sampled_drafts))
        for temperature in args.temperatures
    }

    def sample(prompt: str, cfg: SamplingConfig, assisted: bool):
        return gen.generate(prompt, max_new_tokens=args.max_new_tokens, do_sample=True, temperature=cfg.temperature,
                            top_k=cfg.top_k, top_p=cfg.top_p, seed=cfg.seed, assisted=assisted)

    warm = SamplingConfig(do_sample=True, temperature=args.temperatures[0], seed=args.seed)
    sample(prompts[0], warm, False)  # warm-up: one-off allocation and kernel-selection costs
    sample(prompts[0], warm, True)
    if not args.no_hf:
        hf_assisted_sampling(gen, hf_draft_model, gen.target.render(prompts[0], None), 8, warm)

    from rich.progress import track

    jobs = [(i, t) for i in range(len(prompts)) for t in args.temperatures]
    for i, temperature in track(jobs, description="benchmarking sampling"):
        cfg = SamplingConfig(do_sample=True, temperature=temperature, top_k=args.top_k, top_p=args.top_p,
                             seed=args.seed + i)
        report = reports[temperature]
        prompt_ids = gen.target.render(prompts[i], None)
        for method, assisted in (("target", False), ("anypair", True)):
            result = sample(prompts[i], cfg, assisted)
            figures = figures_from_result(method, i, result, None)
            figures.target_logprob = target_logprob(gen, prompt_ids, result.target_ids, cfg)
            report.runs.append(figures)
        if not args.no_hf:
            new_ids, seconds = hf_assisted_sampling(gen, hf_draft_model, prompt_ids, args.max_new_tokens, cfg)
            figures = hf_figures(i, len(prompt_ids), new_ids, seconds)
            figures.target_logprob = target_logprob(gen, prompt_ids, new_ids, cfg)
            report.runs.append(figures)
        # one plain line per job: the progress bar does not show when output goes to a log file
        done = [r for r in report.runs if r.example == i]
        print(f"example {i} T={temperature}: " + ", ".join(f"{r.method} {r.tokens_per_s:.2f} tok/s" for r in done),
              file=sys.stderr, flush=True)
        if args.json:
            save_json(reports, args.json)  # a cut-off run keeps what it measured
    return reports


def save_json(reports: dict[float, BenchReport], path: str) -> None:
    with open(path, "w") as f:
        json.dump({str(t): {"settings": r.settings, "runs": [asdict(x) for x in r.runs]} for t, r in reports.items()},
                  f, indent=1)


def summary_table(reports: dict[float, BenchReport]) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    table = Table(title="sampling: medians per temperature (speedup = median of per-prompt tok/s ratios vs target)")
    for column in ("temperature", "method", "tok/s", "speedup vs target", "accept", "acc/round",
                   "target log-p/token (mean)"):
        table.add_column(column, justify="right")
    for temperature, report in reports.items():
        for method in dict.fromkeys(r.method for r in report.runs):
            speedups = report.speedups(method)
            acceptance, per_round = report.median(method, "acceptance"), report.median(method, "mean_accepted")
            table.add_row(f"{temperature:g}", method, f"{report.median(method, 'tokens_per_s'):.2f}",
                          f"{statistics.median(speedups):.2f}x" if speedups else "",
                          "" if acceptance != acceptance else f"{acceptance:.2f}",
                          "" if per_round != per_round else f"{per_round:.2f}",
                          mean_logprob(report, method))
    buffer = StringIO()
    Console(file=buffer, width=140).print(table)
    return buffer.getvalue()


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
    reports = run(args)
    for report in reports.values():
        print(format_report(report))
    print(summary_table(reports))
    if args.json:
        save_json(reports, args.json)
        print(f"saved {args.json}")


if __name__ == "__main__":
    main()
