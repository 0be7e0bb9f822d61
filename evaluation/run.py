"""Evaluation harness: speed and quality of anypair against the target alone, transformers'
universal assisted generation and llama.cpp alone on the target's GGUF, on HumanEval, SCROLLS QMSum
and CNN/DailyMail.

    python evaluation/run.py --max-prompt-tokens 1024 --out evaluation/measured/pairs128_n20  # the published run
    python evaluation/run.py --report-only --out evaluation/measured/pairs128_n20

The defaults are the published run's pairs and tasks: the three pairs (Qwen2.5-Coder-1.5B-Instruct with
SmolLM2-135M-Instruct, gemma-3-270m and Qwen2.5-Coder-0.5B-Instruct), all three tasks, 20 examples per
task, 128 new tokens, greedy; documents are read whole (QMSum meetings as SCROLLS gives them; that run
cut them to 1,024 tokens). Each model is loaded once and shared by every method. On each example the methods run one
after another (the baseline first, the others in an order that rotates from example to
example), so slow drift of the machine falls on all of them alike; every method is warmed up
before anything is timed. Each finished (task, example, method, draft) is appended to
<out>/examples.jsonl at once, and a restart skips what is there. `--draft` takes several
comma-separated drafts: methods that need no draft model (the baseline, prompt lookup) then run
once per example and are shared by all pairs. At the end <out>/report.json, report.md and the
PNG figures are written; `--report-only --out <folder>` writes them again from examples.jsonl alone
(no model is loaded, the run's own settings are read from the folder).
"""
from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence

if __package__ in (None, ""):
    # run as `python evaluation/run.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anypair.generation.checks import engine_options
from evaluation.data import TASKS, Example, load_task
from evaluation.methods import (
    ALL_METHODS,
    BASELINE_METHOD,
    METHODS_NEEDING_DRAFT,
    TRANSFORMERS_METHODS,
    LoadedDraft,
    LoadedTarget,
    MethodUnavailable,
    build_method,
)
from evaluation.metrics import execute_humaneval, rouge_scores
from evaluation.prompts import BuiltPrompt, PromptError, build_prompt, humaneval_completion, summary_text
from evaluation.records import (
    ExampleRecord,
    RecordStore,
    ResumeError,
    check_or_write_settings,
    read_run_file,
    read_settings,
    write_run_file,
)
from evaluation.report import (
    RunSettings,
    examples_per_task,
    glance_table,
    machine_description,
    package_versions,
    pair_tables,
    report_files,
    write_report,
)

from anypair.benchmarking.harness import interleaved_order, warm_up
from anypair.benchmarking.methods import Decoding, Method, MethodOutput, transformers_target
from anypair.zoo.registry import DEFAULT_TARGET

DEFAULT_METHODS = ("target", "anypair", "anypair-hybrid", "hf-uag", "llama.cpp-alone")
# the published evaluation's drafts, each paired with the default target (Qwen2.5-Coder-1.5B-Instruct)
DEFAULT_DRAFTS = ("HuggingFaceTB/SmolLM2-135M-Instruct", "google/gemma-3-270m", "Qwen/Qwen2.5-Coder-0.5B-Instruct")
DEFAULT_N = 20
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
WARM_UP_TOKENS = 8
#: the warm-up's prompt is cut to this (a whole meeting would cost every method minutes, untimed)
WARM_UP_PROMPT_TOKENS = 512


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    # --task and --n default to None so that --report-only can tell "not given" (report every record
    # in the folder) from a restriction
    parser.add_argument("--task", default=None, choices=[*TASKS, "all"], help="default all")
    parser.add_argument("--target", default=DEFAULT_TARGET, help="target model (hub id or local folder)")
    parser.add_argument("--draft", default=",".join(DEFAULT_DRAFTS),
                        help="draft model(s), comma-separated: one pair per draft (default: the three published drafts)")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS), help=f"comma-separated, from {', '.join(ALL_METHODS)}")
    parser.add_argument("--n", type=int, default=None, help=f"examples per task (the first N; default {DEFAULT_N})")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (temperature > 0)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (resumable)")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder with cnn_dailymail/ and scrolls_qmsum/ (default: <repo>/../shared/data)")
    parser.add_argument("--data-source", default="local", choices=["local", "hub", "auto"], help="local copies, the dataset hub, or hub-when-reachable")
    parser.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help=(
            "whole-prompt limit in target tokens (default: what the target's context leaves beside "
            "--max-new-tokens, so QMSum meetings (~13k tokens) and news articles are read whole, as SCROLLS gives "
            "them). A smaller limit, e.g. 1024, cuts the transcript or article at a line end; the instruction and "
            "the query are never cut"
        ),
    )
    parser.add_argument("--weights", "--dtype", dest="weights", default="auto", choices=["auto", "fp32", "fp16", "bf16"],
                        help="the target's weights (auto: the fastest batch-invariant format of this machine)")
    parser.add_argument("--draft-engine", default="auto", choices=list(engine_options()),
                        help="anypair's draft engine (auto: gguf for a llama/qwen2 GGUF, llama.cpp for another GGUF "
                             "when installed, torch otherwise); transformers' methods get a torch copy")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--report-only", action="store_true",
                        help="write the tables and figures from <out>/examples.jsonl without loading any model "
                             "(the run's settings come from the folder; --task and --n restrict it)")
    args = parser.parse_args(argv)
    args.n_given, args.task_given = args.n is not None, args.task is not None
    args.n = DEFAULT_N if args.n is None else args.n
    args.task = args.task or "all"
    args.tasks = list(TASKS) if args.task == "all" else [args.task]
    args.drafts = [d.strip() for d in args.draft.split(",") if d.strip()]
    args.method_names = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in args.method_names if m not in ALL_METHODS]
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(ALL_METHODS)}")
    if BASELINE_METHOD not in args.method_names:
        args.method_names.insert(0, BASELINE_METHOD)  # every speedup is measured against it
    if any(m in METHODS_NEEDING_DRAFT for m in args.method_names) and not args.drafts:
        parser.error(f"methods {', '.join(METHODS_NEEDING_DRAFT)} need --draft")
    if args.n < 1 or args.max_new_tokens < 1 or args.threads < 1:
        parser.error("--n, --max-new-tokens and --threads must be positive")
    if args.max_prompt_tokens is not None and args.max_prompt_tokens < 1:
        parser.error("--max-prompt-tokens must be positive (leave it out to read every document whole)")
    return args


def load_models(target_name: str, draft_names: Sequence[str], weights: str, draft_engine: str,
                needs_torch_drafts: bool, needs_torch_target: bool) -> tuple[LoadedTarget, list[LoadedDraft]]:
    """The target once on anypair's engine (and, when a transformers method runs and that engine is
    not torch, once more as a torch model for transformers' generate); each draft once for anypair's
    engine and, when a transformers method needs it, as a torch model."""
    from anypair.benchmarking.methods import TorchAssistant
    from anypair.generation.members import load_member

    print(f"loading {target_name} ...", file=sys.stderr, flush=True)
    member = load_member(target_name, role="target", weights=weights)
    print(f"  {member.engine.describe()}; {member.invariance}", file=sys.stderr, flush=True)
    torch_copy = None
    if needs_torch_target:
        # transformers' generate drives a torch model: its numerics differ from the GGUF engine's, so
        # its "identical" column compares a torch target's output with the baseline's
        torch_copy = transformers_target(member, target_name, weights)
    target = LoadedTarget(target_name, member, torch_copy)
    drafts = []
    for name in draft_names:
        print(f"loading {name} ...", file=sys.stderr, flush=True)
        member = load_member(name, role="draft", engine=draft_engine)
        drafts.append(LoadedDraft(member, TorchAssistant.load(name) if needs_torch_drafts else None))
    return target, drafts


def engines_asked(args: argparse.Namespace) -> str:
    return f"target weights {args.weights}, draft engine {args.draft_engine}"


def build_methods(method_names: Sequence[str], target: LoadedTarget, drafts: Sequence[LoadedDraft], threads: int) -> list[Method]:
    """Draftless methods once; draft methods once per draft. The baseline comes first. A method this
    machine cannot run (llama.cpp alone without llama-cpp-python) is left out with one line saying so."""
    methods: list[Method] = []
    for name in method_names:
        try:
            if name in METHODS_NEEDING_DRAFT:
                methods.extend(build_method(name, target, draft, threads) for draft in drafts)
            else:
                methods.append(build_method(name, target, None, threads))
        except MethodUnavailable as missing:
            print(f"left out: {missing}", file=sys.stderr, flush=True)
    methods.sort(key=lambda m: m.name != BASELINE_METHOD)
    return methods


def example_order(examples_by_task: dict[str, list[Example]]) -> list[tuple[str, int, Example]]:
    """Example-major across tasks (first example of every task, then the second, ...), so that a run stopped
    early has covered every task about equally instead of finishing one task before starting the next."""
    longest = max((len(examples) for examples in examples_by_task.values()), default=0)
    return [
        (task, index, examples[index])
        for index in range(longest)
        for task, examples in examples_by_task.items()
        if index < len(examples)
    ]


def score_quality(record: ExampleRecord, example: Example) -> None:
    if example.task == "humaneval":
        outcome = execute_humaneval(example, humaneval_completion(record.text))
        record.passed, record.execution_detail = outcome.passed, outcome.detail
    else:
        record.rouge = rouge_scores(summary_text(record.text), example.reference)


def make_record(example: Example, method: Method, prompt: BuiltPrompt, output: MethodOutput,
                baseline: Optional[ExampleRecord], greedy: bool) -> ExampleRecord:
    identical = None
    if greedy and method.name != BASELINE_METHOD and baseline is not None:
        identical = output.target_ids == baseline.target_ids
    record = ExampleRecord(
        task=example.task,
        example_id=example.example_id,
        method=method.name,
        draft=method.draft_name,
        prompt_tokens=output.prompt_tokens,
        prompt_truncated=prompt.truncated,
        new_tokens=output.new_tokens,
        time_to_first_token_s=output.time_to_first_token_s,
        total_time_s=output.total_time_s,
        tokens_per_second=output.tokens_per_second,
        finish_reason=output.finish_reason,
        text=output.text,
        target_ids=output.target_ids,
        acceptance_rate=output.acceptance_rate,
        mean_accepted_per_round=output.mean_accepted_per_round,
        rounds=output.rounds,
        identical_to_baseline=identical,
        drafting_skipped=output.drafting_skipped,
    )
    score_quality(record, example)
    return record


def failure_record(example: Example, method: Method, prompt: BuiltPrompt, error: Exception) -> ExampleRecord:
    message = " ".join(str(error).split())
    return ExampleRecord(
        task=example.task, example_id=example.example_id, method=method.name, draft=method.draft_name,
        prompt_tokens=0, prompt_truncated=prompt.truncated, new_tokens=0, time_to_first_token_s=0.0,
        total_time_s=0.0, tokens_per_second=0.0, finish_reason="error", text="", target_ids=[],
        error=f"{type(error).__name__}: {message[:300]}",
    )


def planned_methods(method_names: Sequence[str], drafts: Sequence[str]) -> list[tuple[str, str]]:
    """(method, draft) of every method the run asks for: draft methods once per draft."""
    return [(name, draft) for name in method_names
            for draft in (drafts if name in METHODS_NEEDING_DRAFT else [""])]


def pending_work(store: RecordStore, examples_by_task: dict[str, list[Example]],
                 methods: Sequence[tuple[str, str]]) -> int:
    """Generations of (method, draft) not yet recorded."""
    return sum(
        not store.is_done(example.task, example.example_id, name, draft)
        for examples in examples_by_task.values()
        for example in examples
        for name, draft in methods
    )


def run_examples(methods: Sequence[Method], store: RecordStore, examples_by_task: dict[str, list[Example]],
                 decoding: Decoding, prompt_for: Callable[[Example], BuiltPrompt],
                 warm_up_prompt_for: Optional[Callable[[Example], BuiltPrompt]] = None) -> None:
    """Every (example, method) not in `store` yet, example after example, appended as soon as it is done.
    `methods[0]` is the baseline: it runs first on each example, the others in a rotating order. The
    warm-up reads `warm_up_prompt_for(first example)` (default: its prompt)."""
    from tqdm import tqdm

    greedy = not decoding.do_sample
    remaining = pending_work(store, examples_by_task, [(m.name, m.draft_name) for m in methods])
    if remaining == 0:
        return
    first_example = next(iter(examples_by_task.values()))[0]
    # one short untimed generation per method: first calls pay for allocations and caches
    warm_up(methods, (warm_up_prompt_for or prompt_for)(first_example), Decoding(max_new_tokens=WARM_UP_TOKENS))
    # the bar counts generations still to do (a resumed run starts from what is recorded); its ETA is
    # their mean time so far (smoothing 0), steadier than a recent rate when tasks alternate
    progress = tqdm(total=remaining, unit="gen", desc="evaluating", dynamic_ncols=True, smoothing=0.0)
    for task, index, example in example_order(examples_by_task):
        prompt = None
        for method in interleaved_order(methods, index):  # the baseline first: build_methods puts it there
            if store.is_done(task, example.example_id, method.name, method.draft_name):
                continue
            prompt = prompt or prompt_for(example)
            progress.set_postfix_str(f"{task} {example.example_id} {method.name}, {prompt.prompt_tokens} prompt tokens",
                                     refresh=True)
            try:
                output = method.generate(prompt, decoding)
            except Exception as error:  # one method failing on one example must not end the run
                record = failure_record(example, method, prompt, error)
                progress.write(f"{task} {example.example_id} {method.name} {method.draft_name}: FAILED, "
                               f"recorded and skipped: {record.error}")
                store.append(record)
                progress.update(1)
                continue
            baseline = store.get(task, example.example_id, BASELINE_METHOD, "")
            store.append(make_record(example, method, prompt, output, baseline, greedy))
            progress.update(1)
    progress.close()


def run_all(args: argparse.Namespace, store: RecordStore, examples_by_task: dict[str, list[Example]]) -> None:
    """Loads the models (only when something is left to do), builds the methods and runs what is not recorded."""
    import torch

    if pending_work(store, examples_by_task, planned_methods(args.method_names, args.drafts)) == 0:
        print(f"nothing to do: every (task, example, method) is already in {store.path}", file=sys.stderr)
        return
    torch.set_num_threads(args.threads)
    target, drafts = load_models(args.target, args.drafts if any(m in METHODS_NEEDING_DRAFT for m in args.method_names) else [],
                                 args.weights, args.draft_engine, needs_torch_drafts="hf-uag" in args.method_names,
                                 needs_torch_target=any(m in TRANSFORMERS_METHODS for m in args.method_names))
    methods = build_methods(args.method_names, target, drafts, args.threads)
    decoding = Decoding(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    limit = prompt_limit(args.max_prompt_tokens, target.member.backend.max_context, args.max_new_tokens)
    print(f"prompts: {'cut to' if args.max_prompt_tokens else 'read whole, up to'} {limit} target tokens"
          + ("" if args.max_prompt_tokens else f" (the target's context of {target.member.backend.max_context} "
                                               f"less {args.max_new_tokens} new tokens)"), file=sys.stderr, flush=True)
    tokenizer = target.member.hf_tokenizer
    run_examples(methods, store, examples_by_task, decoding, lambda example: build_prompt(example, tokenizer, limit),
                 lambda example: warm_up_prompt(example, tokenizer, limit))


def prompt_limit(asked: Optional[int], context: int, max_new_tokens: int) -> int:
    """--max-prompt-tokens as asked, else what the target's context leaves beside the new tokens."""
    return asked if asked is not None else max(1, context - max_new_tokens)


def warm_up_prompt(example: Example, tokenizer, limit: int) -> BuiltPrompt:
    """The warm-up's prompt: the example's, cut to WARM_UP_PROMPT_TOKENS where it can be (code cannot)."""
    try:
        return build_prompt(example, tokenizer, min(limit, WARM_UP_PROMPT_TOKENS))
    except PromptError:
        return build_prompt(example, tokenizer, limit)


def result_settings(args: argparse.Namespace) -> dict:
    """What changes the figures of every record: a folder holds records of one such setting only."""
    return {
        "target": args.target,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "seed": args.seed,
        "max_prompt_tokens": args.max_prompt_tokens,
        "engines": engines_asked(args),
        "threads": args.threads,
    }


def run_description(args: argparse.Namespace, argv: Sequence[str]) -> dict:
    """What `--report-only` needs of the run beside its records: the command, what was asked for,
    and where and with what it was measured (not where the report happens to be written)."""
    return {
        "command": "python evaluation/run.py " + " ".join(shlex.quote(a) for a in argv),
        "n_requested": args.n,
        "tasks": args.tasks,
        "drafts": args.drafts,
        "methods": args.method_names,
        "data_source": args.data_source,
        "versions": package_versions(),
        "machine": machine_description(),
    }


def run_settings(settings: dict, description: dict, records: Sequence[ExampleRecord]) -> RunSettings:
    return RunSettings(
        target=settings["target"],
        drafts=sorted({r.draft for r in records if r.draft}),
        methods=[m for m in ALL_METHODS if any(r.method == m for r in records)],
        tasks=[t for t in TASKS if any(r.task == t for r in records)],
        n_requested=description.get("n_requested", DEFAULT_N),
        max_new_tokens=settings["max_new_tokens"],
        temperature=settings["temperature"],
        max_prompt_tokens=settings["max_prompt_tokens"],
        engines=settings["engines"],
        threads=settings["threads"],
        data_source=description.get("data_source", "local"),
        command=description.get("command", "(not recorded)"),
        versions=description.get("versions") or package_versions(),
        machine=description.get("machine") or machine_description(),
        examples_per_task=examples_per_task(records),
    )


def wanted_records(store: RecordStore, examples_by_task: dict[str, list[Example]]) -> list[ExampleRecord]:
    wanted_ids = {(task, e.example_id) for task, examples in examples_by_task.items() for e in examples}
    return [r for r in store.all() if (r.task, r.example_id) in wanted_ids]


def report_only_records(args: argparse.Namespace, store: RecordStore) -> list[ExampleRecord]:
    """Every record in the folder, or those of the first --n examples of --task when given (the data
    files are read for their order; no model is loaded)."""
    if not args.n_given and not args.task_given:
        return list(store.all())
    tasks = sorted({r.task for r in store.all()}) if not args.task_given else args.tasks
    examples_by_task = {task: load_task(task, data_dir=args.data_dir, source=args.data_source)[: args.n]
                        for task in tasks if task in args.tasks}
    return wanted_records(store, examples_by_task)


def report(records: Sequence[ExampleRecord], settings: RunSettings, out_dir: Path) -> None:
    summaries = write_report(records, settings, out_dir)
    print(pair_tables(summaries, settings.target))
    print(glance_table(summaries))
    print("written: " + ", ".join(str(out_dir / name) for name in report_files(summaries)))


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message=".*generation flags are not valid.*")
    store = RecordStore(args.out)
    if args.report_only:
        settings = read_settings(args.out)
        if settings is None or not store.path.exists():
            print(f"evaluation/run.py: {args.out} holds no run (no settings.json or examples.jsonl)", file=sys.stderr)
            return 1
        records = report_only_records(args, store)
        description = read_run_file(args.out) or {}
    else:
        try:
            check_or_write_settings(args.out, result_settings(args))
        except ResumeError as refusal:
            print(f"evaluation/run.py: {refusal}", file=sys.stderr)
            return 2
        description = run_description(args, argv)
        write_run_file(args.out, description)
        settings = result_settings(args)
        examples_by_task = {task: load_task(task, data_dir=args.data_dir, source=args.data_source)[: args.n]
                            for task in args.tasks}
        try:
            run_all(args, store, examples_by_task)
        except KeyboardInterrupt:
            print(f"\ninterrupted: {len(store.records)} generations are recorded in {store.path}; "
                  "run the same command to go on", file=sys.stderr)
            return 130
        records = wanted_records(store, examples_by_task)
    if not records:
        print(f"no results in {store.path} for these tasks", file=sys.stderr)
        return 1
    report(records, run_settings(settings, description, records), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
