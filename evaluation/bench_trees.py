"""Candidates verified together: the shipped policy with trees of candidates against the same policy
with chains only, and the target alone, on one loaded pair.

Greedy, on anypair's interleaved harness (`anypair.benchmarking`): per prompt the target alone first,
then each drafter with trees (the default, `candidate_trees=True`) and with chains only
(`candidate_trees=False`), in an order that rotates from prompt to prompt so machine drift cancels;
each prompt `--repeats` times, medians per prompt. Every assisted output is checked token for token
against the target's own; a mismatch stops the run. A tree here is the model drafter's proposal and,
beside it in the same target forward, the draft's second choices and the held-back last target token
of its translation (`drafters.model`), priced by the policy (`branch_confidence`).

    python evaluation/bench_trees.py --n 10 --max-new-tokens 128 --repeats 3 --json trees.json
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

from anypair.benchmarking.harness import Job, JobRuns, OutputMismatch, run_interleaved
from anypair.benchmarking.methods import AnyPairMethod, Decoding, Method
from anypair.benchmarking.prompts import BenchPrompt, humaneval_prompts, prompts_from_file
from anypair.machine import describe_machine
from anypair.zoo.registry import DEFAULT_DRAFT, DEFAULT_TARGET


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--draft", default=DEFAULT_DRAFT)
    parser.add_argument("--n", type=int, default=4, help="HumanEval prompts (default 4)")
    parser.add_argument("--prompts", help="a prompts file (prompts separated by two blank lines) instead of HumanEval")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--drafters", default="model", help="comma-separated: model, hybrid (default model)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each prompt (medians per prompt)")
    parser.add_argument("--json", help="save every run to this JSON file")
    args = parser.parse_args()
    drafters = [d.strip() for d in args.drafters.split(",") if d.strip()]
    if not drafters or any(d not in ("model", "hybrid") for d in drafters) or args.repeats < 1 or args.n < 1:
        parser.error("--drafters takes model and/or hybrid; --repeats and --n at least 1")

    from anypair.generation.generator import AnyPairGenerator

    gen = AnyPairGenerator(args.target, args.draft, threads=args.threads)
    methods: list[Method] = [AnyPairMethod("target", gen, assisted=False)]
    for drafter in drafters:
        for trees in (True, False):
            # skip_losing_drafts=False: the ledger's choice across requests would differ between the two
            generator = AnyPairGenerator(gen.target, gen.draft, threads=args.threads, drafter=drafter,
                                         candidate_trees=trees, skip_losing_drafts=False)
            methods.append(AnyPairMethod(f"{drafter} {'trees' if trees else 'chains'}", generator, assisted=True,
                                         draft_name=args.draft))
    texts = prompts_from_file(args.prompts, args.n) if args.prompts else humaneval_prompts(args.n)
    jobs = [Job(i, BenchPrompt(text), Decoding(args.max_new_tokens)) for i, text in enumerate(texts)
            for _ in range(args.repeats)]
    seconds: dict = defaultdict(lambda: defaultdict(list))  # prompt -> method -> seconds
    rounds: dict = defaultdict(lambda: defaultdict(list))

    def record(done: JobRuns) -> None:
        for figures, output in zip(done.runs, done.outputs):
            seconds[done.job.example][figures.method].append(output.total_time_s)
            rounds[done.job.example][figures.method].append((figures.rounds, output.draft_tokens_accepted))

    try:
        run_interleaved(methods, jobs, after_job=record, stop_on_mismatch=True)
    except OutputMismatch as mismatch:
        raise SystemExit(str(mismatch)) from mismatch
    speed = {p: {m: statistics.median(s["target"]) / statistics.median(s[m]) for m in s} for p, s in seconds.items()}
    print("\n| drafter | trees / target, median (worst) | chains / target, median (worst) | trees / chains, median "
          "per prompt | rounds, trees / chains |\n|---|---|---|---|---|")
    for drafter in drafters:
        tree, chain = (f"{drafter} trees", f"{drafter} chains")
        ratios = [speed[p][tree] / speed[p][chain] for p in speed]
        print(f"| {drafter} | {statistics.median(s[tree] for s in speed.values()):.2f}x "
              f"({min(s[tree] for s in speed.values()):.2f}x) | "
              f"{statistics.median(s[chain] for s in speed.values()):.2f}x ({min(s[chain] for s in speed.values()):.2f}x) | "
              f"{statistics.median(ratios):.3f} | {sum(r[tree][0][0] for r in rounds.values())} / "
              f"{sum(r[chain][0][0] for r in rounds.values())} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(settings=dict(vars(args), engines=gen.engines, machine=describe_machine()),
                           speedup_per_prompt=speed, seconds=seconds, rounds=rounds), f, indent=1)


if __name__ == "__main__":
    main()
