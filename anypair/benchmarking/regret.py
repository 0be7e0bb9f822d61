"""`anypair bench --regret`: the draft-length policy's own test bench.

Per prompt, the shipped policy (the default `adaptive` length with the cross-request ledger, as a
user gets it) runs beside every fixed length k (0: the target alone, the baseline; 1..8: a constant
k draft steps a round, no ledger, no confidence stop), for each drafter asked for, on models loaded
once and on the interleaved harness (the baseline first, the others rotated from prompt to prompt).
The report is the policy's *regret*: its tokens per second over the best fixed length in hindsight
for that prompt (which may be k = 0), per prompt and as a median, beside its speed over the target
alone and over the best single fixed length for all prompts. Every greedy output is compared with
the target's own token for token.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import torch

from anypair.benchmarking.harness import Job, JobRuns, run_interleaved
from anypair.benchmarking.methods import AnyPairMethod, Decoding, Method
from anypair.benchmarking.prompts import BenchPrompt
from anypair.benchmarking.report import BASELINE
from anypair.errors import InputError
from anypair.machine import describe_machine

DEFAULT_LENGTHS = tuple(range(0, 9))
POLICY = "policy"


def method_name(drafter: str, length: Optional[int]) -> str:
    """`model-policy`, `model-k4`, ...; the target alone (k = 0) is the shared baseline."""
    if length == 0:
        return BASELINE
    return f"{drafter}-{POLICY}" if length is None else f"{drafter}-k{length}"


@dataclass
class RegretRow:
    """One prompt, one drafter: the policy against every fixed length."""

    example: int
    drafter: str
    policy_tps: float
    fixed_tps: dict[int, float]  # k -> tokens per second (0: the target alone)
    identical: bool  # every output of this drafter on this prompt equals the target's own

    @property
    def best_k(self) -> int:
        return max(self.fixed_tps, key=self.fixed_tps.get)

    @property
    def regret(self) -> float:
        """The policy's speed over the best fixed length in hindsight (1.0: as good)."""
        return self.policy_tps / self.fixed_tps[self.best_k]

    @property
    def vs_target(self) -> float:
        return self.policy_tps / self.fixed_tps[0]


@dataclass
class RegretReport:
    settings: dict
    rows: list[RegretRow]

    def drafters(self) -> list[str]:
        return list(dict.fromkeys(r.drafter for r in self.rows))

    def summary(self, drafter: str) -> dict:
        rows = [r for r in self.rows if r.drafter == drafter]
        lengths = sorted(rows[0].fixed_tps) if rows else []
        # the best single fixed length for all prompts, chosen in hindsight by its median speedup
        by_k = {k: statistics.median(r.fixed_tps[k] / r.fixed_tps[0] for r in rows) for k in lengths}
        best_global = max(by_k, key=by_k.get) if by_k else 0
        return dict(
            drafter=drafter, prompts=len(rows),
            median_regret=statistics.median(r.regret for r in rows) if rows else float("nan"),
            worst_regret=min((r.regret for r in rows), default=float("nan")),
            median_vs_target=statistics.median(r.vs_target for r in rows) if rows else float("nan"),
            worst_vs_target=min((r.vs_target for r in rows), default=float("nan")),
            median_speedup_by_k={str(k): round(v, 3) for k, v in by_k.items()},
            best_single_k=best_global,
            median_vs_best_single_k=(statistics.median(r.policy_tps / r.fixed_tps[best_global] for r in rows)
                                     if rows else float("nan")),
            identical=sum(r.identical for r in rows))

    def to_json(self) -> dict:
        return dict(settings=self.settings, summary=[self.summary(d) for d in self.drafters()],
                    rows=[dict(asdict(r), best_k=r.best_k, regret=r.regret, vs_target=r.vs_target)
                          for r in self.rows])


def regret_methods(gen, drafters: Sequence[str], lengths: Sequence[int], options: dict) -> list[Method]:
    """The target alone first, then per drafter the shipped policy and each fixed length >= 1, all on
    the members `gen` loaded (a loaded member passes through as itself)."""
    from anypair.generation.generator import AnyPairGenerator

    methods: list[Method] = [AnyPairMethod(BASELINE, gen, assisted=False)]
    shipped = {k: v for k, v in options.items() if k not in ("draft_length", "num_draft_tokens")}
    for drafter in drafters:
        policy = AnyPairGenerator(gen.target, gen.draft, drafter=drafter, **shipped)
        methods.append(AnyPairMethod(method_name(drafter, None), policy, assisted=True))
        for k in lengths:
            if k == 0:
                continue
            fixed = AnyPairGenerator(gen.target, gen.draft, drafter=drafter, draft_length="constant",
                                     num_draft_tokens=k, **shipped)
            methods.append(AnyPairMethod(method_name(drafter, k), fixed, assisted=True))
    return methods


def rows_of(done: JobRuns, drafters: Sequence[str], lengths: Sequence[int]) -> list[RegretRow]:
    figures = {r.method: r for r in done.runs}
    rows = []
    for drafter in drafters:
        names = [method_name(drafter, None)] + [method_name(drafter, k) for k in lengths if k]
        identical = all(figures[n].identical_to_target is not False for n in names)
        fixed = {k: figures[method_name(drafter, k)].tokens_per_s for k in lengths}
        rows.append(RegretRow(done.job.example, drafter, figures[method_name(drafter, None)].tokens_per_s,
                              fixed, identical))
    return rows


def run_regret(target: str, draft: Optional[str], prompts: Sequence[str], *, max_new_tokens: int = 128,
               drafters: Sequence[str] = ("model", "hybrid"), lengths: Sequence[int] = DEFAULT_LENGTHS,
               chat: bool = False, progress: bool = True, json_path: Optional[str] = None,
               **options) -> RegretReport:
    """Every prompt through the target alone, each drafter's policy and each fixed length, interleaved.
    With `json_path` the report is saved after every prompt (a long run keeps what it measured)."""
    from anypair.generation.generator import AnyPairGenerator

    if any(k < 0 for k in lengths):
        raise InputError(f"fixed draft lengths must be >= 0 (0: the target alone), got {list(lengths)}")
    lengths = tuple(sorted(set(lengths) | {0}))  # the target alone is every speedup's baseline
    gen = AnyPairGenerator(target, draft, drafter=drafters[0], **options)
    settings = dict(target=target, draft=draft, drafters=list(drafters), lengths=list(lengths),
                    max_new_tokens=max_new_tokens, n_prompts=len(prompts), threads=torch.get_num_threads(),
                    machine=describe_machine(), engines=gen.engines, chat=chat,
                    **{k: v for k, v in options.items() if k != "threads"})
    bench_prompts = [BenchPrompt.chat(gen.target.hf_tokenizer, p) if chat else BenchPrompt(p) for p in prompts]
    methods = regret_methods(gen, drafters, lengths, options)
    report = RegretReport(settings, [])

    def after_job(done: JobRuns) -> None:
        report.rows.extend(rows_of(done, drafters, lengths))
        if progress:
            for row in report.rows[-len(drafters):]:
                print(format_row(row), flush=True)
        if json_path:
            save_regret_json(report, json_path)

    jobs = [Job(i, prompt, Decoding(max_new_tokens)) for i, prompt in enumerate(bench_prompts)]
    run_interleaved(methods, jobs, progress=progress, description="regret", after_job=after_job)
    return report


def format_row(row: RegretRow) -> str:
    fixed = " ".join(f"k{k}={tps:5.1f}" for k, tps in sorted(row.fixed_tps.items()))
    return (f"prompt {row.example:2d} {row.drafter:7s} policy {row.policy_tps:5.1f} tok/s | {fixed} | "
            f"best k={row.best_k} regret {row.regret:.2f} vs target {row.vs_target:.2f}"
            f"{'' if row.identical else '  OUTPUT DIFFERS'}")


def format_regret(report: RegretReport) -> str:
    """The per-prompt rows and each drafter's medians as rich tables, rendered to text."""
    from rich.console import Console
    from rich.table import Table

    console = Console(record=True, width=160)
    console.print(f"machine: {report.settings['machine']}")
    for drafter in report.drafters():
        rows = [r for r in report.rows if r.drafter == drafter]
        lengths = sorted(rows[0].fixed_tps)
        table = Table(title=f"{drafter}: tokens per second, the policy beside each fixed length (k0: the target alone)")
        for column in ["prompt", "policy", *[f"k{k}" for k in lengths], "best k", "policy / best", "policy / target"]:
            table.add_column(column, justify="right")
        for r in rows:
            table.add_row(str(r.example), f"{r.policy_tps:.1f}", *[f"{r.fixed_tps[k]:.1f}" for k in lengths],
                          str(r.best_k), f"{r.regret:.2f}", f"{r.vs_target:.2f}")
        console.print(table)
        s = report.summary(drafter)
        console.print(f"{drafter}: median policy / best fixed in hindsight {s['median_regret']:.3f} (worst "
                      f"{s['worst_regret']:.2f}); policy / target alone median {s['median_vs_target']:.3f} (worst "
                      f"{s['worst_vs_target']:.2f}); best single k for all prompts: k={s['best_single_k']}, "
                      f"policy / it {s['median_vs_best_single_k']:.3f}; identical {s['identical']}/{s['prompts']}")
        console.print("median speedup over the target alone by k: "
                      + ", ".join(f"k{k} {v:.2f}x" for k, v in s["median_speedup_by_k"].items()))
    return console.export_text()


def save_regret_json(report: RegretReport, path: str) -> None:
    with open(path, "w") as f:
        json.dump(report.to_json(), f, indent=1)
