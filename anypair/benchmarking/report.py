"""What a benchmark reports: one `RunFigures` row per (prompt, method), medians and speedups over
the baseline, the rich tables `anypair bench` prints and the JSON file it saves."""
from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from typing import Optional

from anypair.benchmarking.methods import MethodOutput

BASELINE = "target"  # the method every speedup is measured against


@dataclass
class RunFigures:
    method: str
    example: int
    prompt_tokens: int
    new_tokens: int
    total_s: float
    prefill_ms: float  # time to the first new token
    ms_per_token: float  # after the first new token
    tokens_per_s: float  # new tokens over the whole time, prefill included
    acceptance: Optional[float] = None
    mean_accepted: Optional[float] = None
    identical_to_target: Optional[bool] = None
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    translate_ms: float = 0.0
    # sampling benchmarks: mean log-probability of the generated tokens under the target's own
    # (warped) sampling law; a lossless method matches the target alone's figure on average
    target_logprob: Optional[float] = None
    rounds: int = 0
    # anypair ran the target alone on this run: drafting had lost time on its recent requests
    drafting_skipped: Optional[bool] = None

    @classmethod
    def of(cls, method: str, example: int, output: MethodOutput, identical_to_target: Optional[bool] = None,
           target_logprob: Optional[float] = None) -> RunFigures:
        drafted = bool(output.draft_tokens_proposed)
        return cls(
            method=method, example=example, prompt_tokens=output.prompt_tokens, new_tokens=output.new_tokens,
            total_s=output.total_time_s, prefill_ms=1000 * output.time_to_first_token_s,
            ms_per_token=1000 * (output.total_time_s - output.time_to_first_token_s) / max(output.new_tokens - 1, 1),
            tokens_per_s=output.tokens_per_second,
            acceptance=output.acceptance_rate if drafted else None,
            mean_accepted=output.mean_accepted_per_round if drafted else None,
            identical_to_target=identical_to_target,
            draft_ms=1000 * (output.drafting_s or 0.0), verify_ms=1000 * (output.verifying_s or 0.0),
            translate_ms=1000 * (output.translating_s or 0.0), target_logprob=target_logprob,
            rounds=output.rounds or 0, drafting_skipped=output.drafting_skipped)


@dataclass
class BenchReport:
    settings: dict
    runs: list[RunFigures] = field(default_factory=list)
    roofline: Optional[tuple] = None  # (Ceilings, [StepProfile]) when measured (benchmarking/roofline.py)

    def draft_share(self, method: str) -> Optional[float]:
        """Median over runs of drafting / (drafting + verifying) time; None without draft time."""
        shares = [r.draft_ms / (r.draft_ms + r.verify_ms) for r in self.runs
                  if r.method == method and r.draft_ms + r.verify_ms > 0 and r.draft_ms > 0]
        return statistics.median(shares) if shares else None

    def median(self, method: str, attr: str) -> float:
        values = [getattr(r, attr) for r in self.runs if r.method == method and getattr(r, attr) is not None]
        return statistics.median(values) if values else float("nan")

    def speedups(self, method: str, baseline: str = BASELINE) -> list[float]:
        """Per-run tokens per second of `method` over `baseline`'s on the same example."""
        base = {r.example: r.tokens_per_s for r in self.runs if r.method == baseline}
        return [r.tokens_per_s / base[r.example] for r in self.runs if r.method == method and base.get(r.example)]

    def decode_speedups(self, method: str, baseline: str = BASELINE) -> list[float]:
        """Per-run ms per token after the first of `baseline` over `method`'s on the same example.
        The target's prefill is the same for both and left out (the draft's prompt read is not), so
        where two methods write different lengths (sampling) the ratio does not swing with how much
        of each run the prefill was."""
        base = {r.example: r.ms_per_token for r in self.runs if r.method == baseline and r.new_tokens > 1}
        return [base[r.example] / r.ms_per_token for r in self.runs
                if r.method == method and r.new_tokens > 1 and base.get(r.example) and r.ms_per_token > 0]

    def to_json(self) -> dict:
        return {"settings": self.settings, "runs": [asdict(r) for r in self.runs]}


def format_report(report: BenchReport) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    methods = list(dict.fromkeys(r.method for r in report.runs))
    table = Table(title="anypair bench: " + ", ".join(f"{k}={v}" for k, v in report.settings.items()
                                                      if k in ("target", "draft", "engines", "threads", "max_new_tokens", "machine")))
    for col in ("ex", "method", "prompt tok", "new tok", "total s", "prefill ms", "ms/tok", "tok/s", "accept", "acc/round", "same", "speedup"):
        table.add_column(col, justify="right")
    if any(r.drafting_skipped for r in report.runs):
        table.caption = "accept 'alone': anypair ran the target alone there (drafting had lost time on its recent requests)"
    base = {r.example: r.tokens_per_s for r in report.runs if r.method == BASELINE}
    for r in report.runs:
        speed = r.tokens_per_s / base[r.example] if base.get(r.example) else float("nan")
        table.add_row(str(r.example), r.method, str(r.prompt_tokens), str(r.new_tokens), f"{r.total_s:.2f}",
                      f"{r.prefill_ms:.0f}", f"{r.ms_per_token:.1f}", f"{r.tokens_per_s:.2f}",
                      "alone" if r.drafting_skipped else "" if r.acceptance is None else f"{r.acceptance:.2f}",
                      "" if r.mean_accepted is None else f"{r.mean_accepted:.2f}",
                      "" if r.identical_to_target is None else ("yes" if r.identical_to_target else "NO"),
                      f"{speed:.2f}x")
    with_llama = any(r.method == "llama.cpp-alone" for r in report.runs)
    summary = Table(title="medians (speedups: medians of per-prompt ratios)")
    for col in ("method", "tok/s", "speedup vs target", "accept", "acc/round", "draft ms", "verify ms", "translate ms",
                "identical") + (("vs llama.cpp",) if with_llama else ()):
        summary.add_column(col, justify="right")
    for m in methods:
        sp = report.speedups(m)
        same = [r.identical_to_target for r in report.runs if r.method == m and r.identical_to_target is not None]
        row = [m, f"{report.median(m, 'tokens_per_s'):.2f}",
               f"{statistics.median(sp):.2f}x" if sp else "", f"{report.median(m, 'acceptance'):.2f}",
               f"{report.median(m, 'mean_accepted'):.2f}", f"{report.median(m, 'draft_ms'):.0f}",
               f"{report.median(m, 'verify_ms'):.0f}", f"{report.median(m, 'translate_ms'):.1f}",
               f"{sum(same)}/{len(same)}" if same else ""]
        if with_llama:
            ratios = report.speedups(m, baseline="llama.cpp-alone")
            row.append(f"{statistics.median(ratios):.2f}x" if ratios else "")
        summary.add_row(*row)
    buf = StringIO()
    console = Console(file=buf, width=170)
    console.print(table)
    console.print(summary)
    costs = report.settings.get("verify_ms")
    if costs:
        one = costs.get("1") or next(iter(costs.values()))
        cost_table = Table(title=f"verification cost of the target ({report.settings.get('engines', '')})")
        cost_table.add_column("")
        for k in costs:
            cost_table.add_column(f"k={k}", justify="right")
        cost_table.add_row("ms", *(f"{v:.1f}" for v in costs.values()))
        cost_table.add_row("x k=1", *(f"{v / one:.2f}" for v in costs.values()))
        console.print(cost_table)
        step = report.settings.get("draft_step_ms")
        if step is not None:
            console.print(f"draft step {step:.1f} ms = {100 * step / one:.1f}% of a single-token target step")
    by_context = report.settings.get("verify_ms_by_context")
    if by_context:
        console.print(verification_context_table(by_context))
    if report.roofline is not None:
        from anypair.benchmarking.roofline import format_roofline

        console.print(format_roofline(*report.roofline))
    shares = {m: report.draft_share(m) for m in methods if m != BASELINE}
    shares = {m: v for m, v in shares.items() if v is not None}
    if shares:
        console.print("draft's share of a round (drafting / (drafting + verifying), median per prompt): "
                      + ", ".join(f"{m} {100 * v:.0f}%" for m, v in shares.items()))
    return buf.getvalue()


def verification_context_table(by_context: dict):
    """ms to score k tokens after a cached context, per engine, with the two ratios that matter:
    the target's k=1 against llama.cpp's k=1, and each k against the engine's own k=1."""
    from rich.table import Table

    first = next(iter(by_context.values()))
    ks = list(next(iter(first.values())))
    table = Table(title="k-token step after a cached context (ms, median)")
    for column in ("context", "engine", *(f"k={k}" for k in ks), "k=4 / own k=1", "k=1 / llama.cpp k=1"):
        table.add_column(column, justify="right")
    for context, engines in by_context.items():
        llama = engines.get("llama.cpp", {}).get("1")
        for name, costs in engines.items():
            own = costs.get("1")
            table.add_row(context, name, *(f"{costs[k]:.1f}" for k in ks),
                          f"{costs['4'] / own:.2f}" if "4" in costs and own else "",
                          f"{own / llama:.2f}" if llama and own else "")
    return table


def release() -> str:
    """The release that measures: anypair's version, and `git describe` of its checkout where it is one."""
    import subprocess
    from pathlib import Path

    from anypair import __version__

    try:
        described = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], capture_output=True,
                                   text=True, timeout=10, cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        described = ""
    return f"{__version__} ({described})" if described else __version__


def save_json(report: BenchReport, path: str) -> None:
    """Every figure of the run, with the release that measured it and the command that ran it (the published
    tables head each record by them: anypair/benchmarking/published.py)."""
    import shlex
    import sys

    report.settings.setdefault("release", release())
    report.settings.setdefault("command", shlex.join(["anypair", *sys.argv[1:]]))
    with open(path, "w") as f:
        json.dump(report.to_json(), f, indent=2)
