"""Draft-length policy benchmark: which policy turns a draft into the most speed on this machine.

Greedy, one loaded pair, one generator per policy on it, on anypair's interleaved harness
(`anypair.benchmarking`): per prompt the target alone first, then anypair with each policy in an order
that rotates from prompt to prompt, so machine drift cancels. Every assisted output is checked token
for token against the target's own; a mismatch stops the run. Policies:

- adaptive: the default (confidence stopping, measured costs, probes that back off);
- adaptive-fixed-probe: the same with a fixed probe interval of 12 idle rounds (the policy before
  the back-off), to show what the back-off changes;
- constant-2, constant-3: always that many draft tokens, no confidence stopping;
- heuristic: transformers' schedule (grow after full acceptance, shrink otherwise).

    python evaluation/bench_policies.py                          # 4 HumanEval prompts, 64 tokens
    python evaluation/bench_policies.py --n 10 --max-new-tokens 128 --json policies.json
"""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass
from typing import Callable

from anypair.benchmarking.harness import Job, JobRuns, OutputMismatch, run_interleaved
from anypair.benchmarking.methods import AnyPairMethod, Decoding, Method
from anypair.benchmarking.prompts import BenchPrompt, humaneval_prompts
from anypair.machine import describe_machine
from anypair.policies import AdaptiveLength, ConstantLength, DraftLengthPolicy, HeuristicLength
from anypair.zoo.registry import DEFAULT_DRAFT, DEFAULT_TARGET

POLICIES: dict[str, Callable[[], DraftLengthPolicy]] = {
    "adaptive": AdaptiveLength,
    "adaptive-fixed-probe": lambda: AdaptiveLength(first_probe_after=12, probe_every=12),
    "constant-2": lambda: ConstantLength(2),
    "constant-3": lambda: ConstantLength(3),
    "heuristic": HeuristicLength,
}


@dataclass
class PolicyRun:
    prompt: int
    policy: str
    tokens_per_second: float
    speedup: float
    rounds: int
    proposed: int
    accepted: int


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--draft", default=DEFAULT_DRAFT)
    parser.add_argument("--n", type=int, default=4, help="HumanEval prompts (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated, from: " + ", ".join(POLICIES))
    parser.add_argument("--json", help="save every run to this JSON file")
    args = parser.parse_args()
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        parser.error(f"unknown policies {unknown or args.policies!r}; choose from {list(POLICIES)}")

    from anypair.generation.generator import AnyPairGenerator

    gen = AnyPairGenerator(args.target, args.draft, threads=args.threads)
    # one generator per policy on the members loaded once; a policy resets itself for each request
    methods: list[Method] = [AnyPairMethod("target", gen, assisted=False)]
    for name in names:
        generator = AnyPairGenerator(gen.target, gen.draft, threads=args.threads, draft_length=POLICIES[name]())
        methods.append(AnyPairMethod(name, generator, assisted=True, draft_name=args.draft))
    jobs = [Job(i, BenchPrompt(text), Decoding(args.max_new_tokens))
            for i, text in enumerate(humaneval_prompts(args.n))]
    runs: list[PolicyRun] = []

    def record(done: JobRuns) -> None:
        base = done.runs[0]
        line = [f"prompt {done.job.example}: target {base.tokens_per_s:.2f} tok/s"]
        for figures, output in zip(done.runs[1:], done.outputs[1:]):
            speedup = figures.tokens_per_s / base.tokens_per_s
            runs.append(PolicyRun(done.job.example, figures.method, figures.tokens_per_s, speedup, figures.rounds,
                                  output.draft_tokens_proposed, output.draft_tokens_accepted))
            line.append(f"{figures.method} {speedup:.2f}x "
                        f"({output.draft_tokens_accepted}/{output.draft_tokens_proposed} in {figures.rounds} rounds)")
        print(" | ".join(line), flush=True)

    try:
        run_interleaved(methods, jobs, progress=False, after_job=record, stop_on_mismatch=True)
    except OutputMismatch as mismatch:
        raise SystemExit(str(mismatch)) from mismatch

    print("\n| policy | median speedup | per prompt | accepted / proposed |\n|---|---|---|---|")
    for name in names:
        mine = [r for r in runs if r.policy == name]
        print(f"| {name} | {statistics.median(r.speedup for r in mine):.2f}x | "
              f"{', '.join(f'{r.speedup:.2f}' for r in mine)} | "
              f"{sum(r.accepted for r in mine)} / {sum(r.proposed for r in mine)} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(settings=dict(vars(args), engines=gen.engines, machine=describe_machine()),
                           runs=[asdict(r) for r in runs]), f, indent=1)


if __name__ == "__main__":
    main()
