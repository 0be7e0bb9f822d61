"""`anypair bench`: the target alone against anypair with each drafter, transformers' universal
assisted generation (`--compare-hf`) and llama.cpp running the target's GGUF alone, greedy, on the
interleaved harness. Builds the methods on models loaded once; `format_report` prints the tables
and `save_json` saves every figure."""
from __future__ import annotations

import sys

from typing import Optional, Sequence

import torch

from anypair.backends.member import LoadedModel
from anypair.benchmarking.costs import draft_step_ms, verification_costs
from anypair.benchmarking.harness import Job, run_interleaved
from anypair.benchmarking.methods import (
    AnyPairMethod,
    Decoding,
    LlamaCppAloneMethod,
    Method,
    TorchAssistant,
    TransformersMethod,
    transformers_target,
)
from anypair.benchmarking.prompts import BenchPrompt
from anypair.benchmarking.report import BASELINE, BenchReport
from anypair.machine import describe_machine


def llama_cpp_alone(target_spec: str, target: LoadedModel, threads: int) -> Optional[Method]:
    """llama.cpp running the target's GGUF alone, where the target has one and llama-cpp-python is installed."""
    from anypair.backends.llama_cpp_guard import probe_failure
    from anypair.backends.sources import gguf_of

    gguf = gguf_of(target_spec)
    if gguf is None or not gguf.is_file():
        return None
    failure = probe_failure(gguf, threads)  # not installed, or crashes here: one line, and the run goes on
    if failure is not None:
        print(f"anypair bench: llama.cpp alone is left out: {failure}; --no-llama-cpp leaves it out without "
              "this note", file=sys.stderr, flush=True)
        return None
    return LlamaCppAloneMethod("llama.cpp-alone", gguf, target, threads)


def verification_table(target_spec: str, target: LoadedModel, text_ids: Sequence[int], contexts: Sequence[int],
                       threads: int) -> dict:
    """The target's k-token step at each context, beside llama.cpp's own k-token decode on the same
    GGUF when the target has one: {context: {engine: {k: ms}}} (JSON keys are strings)."""
    from anypair.backends.llama_cpp import LlamaCppBackend
    from anypair.backends.llama_cpp_guard import probe_failure
    from anypair.backends.sources import gguf_of
    from anypair.benchmarking.costs import verification_costs_by_context

    backends = {f"target ({target.engine.engine})": target.backend}
    gguf = gguf_of(target_spec)
    if gguf is not None and gguf.is_file() and target.engine.engine != "llama.cpp":
        failure = probe_failure(gguf, threads)
        if failure is None:
            backends["llama.cpp"] = LlamaCppBackend(gguf, name="llama.cpp", threads=threads,
                                                    context=max(contexts) + 64)
        else:
            print(f"anypair bench: llama.cpp's k-token steps are left out: {failure}", file=sys.stderr, flush=True)
    table = verification_costs_by_context(backends, text_ids, contexts)
    return {str(c): {name: {str(k): round(v, 1) for k, v in costs.items()} for name, costs in row.items()}
            for c, row in table.items()}


def run_bench(target: str, draft: Optional[str], prompts: Sequence[str], *, max_new_tokens: int = 128,
              drafters: Sequence[str] = ("model",), compare_hf: bool = False, compare_llama_cpp: bool = True,
              chat: bool = False, repeats: int = 1, progress: bool = True,
              verify_contexts: Sequence[int] = (), roofline: bool = False, **options) -> BenchReport:
    """Per prompt: the target alone first, then anypair with each drafter, transformers' UAG and
    llama.cpp alone in a rotating order. `options` go to AnyPairGenerator (weights, engines, ...)."""
    from anypair.generation.generator import AnyPairGenerator

    gen = AnyPairGenerator(target, draft, drafter=drafters[0], **options)
    threads = torch.get_num_threads()
    report = BenchReport(settings=dict(
        target=target, draft=draft, drafters=list(drafters), engines=gen.engines, threads=threads,
        max_new_tokens=max_new_tokens, n_prompts=len(prompts), repeats=repeats, torch=torch.__version__,
        machine=describe_machine(), compare_hf=compare_hf, chat=chat,
        target_invariance=gen.target.invariance, **{k: v for k, v in options.items() if k != "threads"}))
    bench_prompts = [BenchPrompt.chat(gen.target.hf_tokenizer, p) if chat else BenchPrompt(p) for p in prompts]

    # the verification-cost table: what scoring k tokens in one pass costs, for the chosen engines
    probe = bench_prompts[0].target_ids(gen.target.hf_tokenizer)
    report.settings["verify_ms"] = {str(k): round(v, 1) for k, v in verification_costs(gen.target.backend, probe).items()}
    if verify_contexts:
        text_ids = [i for p in bench_prompts for i in p.target_ids(gen.target.hf_tokenizer)]
        report.settings["verify_ms_by_context"] = verification_table(target, gen.target, text_ids, verify_contexts, threads)
    if roofline:
        from anypair.benchmarking.roofline import Ceilings, profile_steps, roofline_json

        text_ids = [i for p in bench_prompts for i in p.target_ids(gen.target.hf_tokenizer)]
        ceilings = Ceilings.measure(threads)
        steps = profile_steps(gen.target.backend, text_ids, verify_contexts or (300,), ks=(1, 2, 4, 8, 16))
        report.settings["roofline"] = roofline_json(ceilings, steps)
        report.roofline = (ceilings, steps)
    if gen.draft is not None:
        report.settings["draft_step_ms"] = round(draft_step_ms(gen.draft.backend, gen.draft.render(prompts[0], None)), 2)

    methods: list[Method] = [AnyPairMethod(BASELINE, gen, assisted=False)]
    for name in drafters:
        # one generator per drafter, all on the members loaded once (a loaded member passes through as itself)
        generator = gen if name == drafters[0] else AnyPairGenerator(gen.target, gen.draft, drafter=name, **options)
        methods.append(AnyPairMethod(f"anypair-{name}", generator, assisted=True, draft_name=draft or ""))
    if compare_hf and draft is not None:
        # transformers' generate drives a torch model: a target on another engine (the GGUF engine, the
        # default) gets a torch copy of its own for UAG (its numerics differ, so its "same" column may too)
        methods.append(TransformersMethod("hf-uag", transformers_target(gen.target, target), TorchAssistant.load(draft)))
    alone = llama_cpp_alone(target, gen.target, threads) if compare_llama_cpp else None
    if alone is not None:
        methods.append(alone)

    decoding = Decoding(max_new_tokens)
    jobs = [Job(i, prompt, decoding) for i, prompt in enumerate(bench_prompts) for _ in range(repeats)]
    report.runs = [figures for done in run_interleaved(methods, jobs, progress=progress) for figures in done.runs]
    return report
