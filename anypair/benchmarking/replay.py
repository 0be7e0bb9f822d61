"""`anypair bench --target-shape NAME --replay`: the round replayed at a seed target's size.

No real 9-14B weights can be had here, so acceptance at that size cannot be measured; what a round
costs there can. This is a simulation with one borrowed input, the acceptance:

1. *Recorded*: the real default pair (Qwen2.5-Coder-1.5B with SmolLM2-135M, the gguf engine, the
   shipped policy) decodes each prompt; every round's rows (the last committed token plus the
   proposal) and accepted tokens are recorded, with the draft side's real seconds (the draft's prompt
   read, its steps, the translation). The policy prices its rounds as it would running beside the
   seed target (`seed_priced_costs`: the seed target's measured forwards by rows, the draft's measured
   step): a round at 9B costs what it costs there, not what it costs beside the 1.5B target, so the
   lengths recorded are the ones the shipped policy chooses at that size. ('policy-1.5b': the rounds
   as priced beside the 1.5B target, for comparison.)
2. *Replayed*: the seed-shaped target (random weights with the real model's shapes and types,
   `zoo.seed_shapes`) reads a prompt of the same length, then runs the same rounds: a forward of the
   same number of rows at the same context, its cache cropped to what that round kept, each forward
   timed. anypair's replayed decode time is those forwards plus the recorded draft seconds.
3. *Baselines on the same file*: the seed target alone on the gguf engine (its single-row step,
   timed after the same prompt) and llama.cpp alone (its single-row step on the same file, after a
   prompt of the same length), each times the tokens written after the first.

Every cost is measured on this machine; only the acceptance is borrowed from the 1.5B target. The
prompt read is the same for anypair and its target alone (one engine), so the figures are decode
figures: milliseconds per token after the first (`anypair bench --target-shape` measures the prefill
against llama.cpp apart). The weights are random: no text of the seed target is produced or checked.
"""
from __future__ import annotations

import gc
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

from anypair.policies.base import DraftLengthPolicy
from anypair.types import RoundFeedback

#: single-row steps timed for each baseline (their median is the step)
BASELINE_STEPS = 5


@dataclass
class RecordedPrompt:
    """One prompt as the real pair decoded it."""

    prompt_tokens: int
    new_tokens: int
    rounds: list[tuple[int, int]] = field(default_factory=list)  # (rows scored, proposed tokens accepted)
    draft_s: float = 0.0  # the draft side's real seconds: prompt read, steps, commits, translation
    real_speedup: float = 0.0  # the real pair's decode speedup over its own target alone (same machine)

    @property
    def contexts(self) -> list[int]:
        """The cached length before each round: the prompt (the first token is the first round's first
        row), then what each round kept."""
        done, out = self.prompt_tokens, []
        for _, accepted in self.rounds:
            out.append(done)
            done += accepted + 1
        return out


class _Priced(DraftLengthPolicy):
    """The shipped policy behind a handle, so that it can be priced at the seed target's size once the
    warm-up request has timed a draft step (`record`)."""

    name = "adaptive (replayed)"

    def __init__(self, inner: DraftLengthPolicy) -> None:
        self.inner = inner

    def next_length(self) -> int:
        return self.inner.next_length()

    def stop_confidence(self) -> float:
        return self.inner.stop_confidence()

    def stop_confidences(self) -> tuple[float, ...]:
        return self.inner.stop_confidences()

    def branch_confidence(self):
        return self.inner.branch_confidence()

    def row_price(self):
        return self.inner.row_price()

    def remember(self, memory) -> None:
        self.inner.remember(memory)

    def reset(self, confidence_stopping: bool = False) -> None:
        self.inner.reset(confidence_stopping)

    def update(self, feedback: RoundFeedback) -> None:
        self.inner.update(feedback)


def seed_priced_costs(row_seconds: dict[int, float], draft_step_s: float):
    """The length policy's costs beside the seed target, in its single-row steps: the draft's measured
    step over the seed's, the seed's measured slope over a short proposal's rows (1 to 5), and its
    measured forwards by rows (the curve the policy prices each row with, as `EngineCosts` gives it
    in a real run)."""
    from anypair.policies import StepCosts

    one = row_seconds[1]
    return StepCosts(draft_step=draft_step_s / one, verify_slope=max(0.0, (row_seconds[5] / one - 1) / 4),
                     verify_rows=tuple((rows, seconds / one) for rows, seconds in sorted(row_seconds.items())))


def seed_curve(target, prompt_ids: Sequence[int], ks: Sequence[int]) -> dict[int, float]:
    """The seed target's forward of each of `ks` rows after `prompt_ids`, ms: two passes, each count's smaller
    median kept. A pass right after the load can be slowed for a while (gemma-2-9b's shape on the AVX2 machine
    priced a row at 0.087 of a step where the same file measured 0.19 minutes later, and the policy drafted
    rounds of 5-12 rows for ~1 kept token)."""
    from anypair.benchmarking.costs import verification_costs

    passes = [verification_costs(target, prompt_ids, ks=ks, repeats=3) for _ in range(2)]
    return {k: min(p[k] for p in passes) for k in ks}


def record(prompts: Sequence[str], max_new_tokens: int, threads: int, progress: bool = True,
           target: Optional[str] = None, draft: Optional[str] = None, drafter: str = "model",
           fixed_length: Optional[int] = None, seed_row_s: Optional[dict[int, float]] = None,
           seed_size: Optional[tuple[int, int]] = None, draft_window: Optional[int] = None) -> list[RecordedPrompt]:
    """Each prompt through the real pair (default: the default pair) with the shipped policy, or a
    constant `fixed_length` draft steps a round (what a longer draft would have had accepted, for the
    sweep at a size where drafting is cheap), and its target alone for the real speedup. `seed_row_s`
    (a seed target's forwards by rows, seconds): the policy prices rounds at that target's
    costs (`seed_priced_costs`) instead of the 1.5B target's. `seed_size` (the seed target's weight bytes
    and layers on the gguf engine): the draft reads the prompt the generator would have it read beside
    that target (`AnyPairGenerator.draft_window_beside`), whatever the rule. `drafter`: `drafters.DRAFTERS`'
    name ('hybrid': the same draft model with the prompt's own n-grams proposed where they match).
    `draft_window`: the prompt tokens the draft reads (None: as above, or the generator's default)."""
    from anypair.generation.generator import AnyPairGenerator
    from anypair.policies import AdaptiveLength, make_policy
    from anypair.zoo.registry import DEFAULT_DRAFT, DEFAULT_TARGET

    recorder = _Priced(make_policy("adaptive") if fixed_length is None else make_policy("constant", fixed_length))
    # the ledger's pauses are left off: it would judge drafting by the 1.5B target's costs, where a draft
    # step is 13% of a step and a summary's drafting loses; beside the seed target it is 2-4%
    def pair(window: Optional[int]):
        gen = AnyPairGenerator(target or DEFAULT_TARGET, draft or DEFAULT_DRAFT, drafter=drafter, draft_length=recorder,
                               threads=threads, skip_losing_drafts=False, draft_window=window)
        gen.generate(prompts[0], max_new_tokens=8)  # warm-up: allocations and kernel choices
        return gen

    gen = pair(draft_window)
    if seed_size is not None and draft_window is None:  # the prompt the draft would read beside the seed target
        window = gen.draft_window_beside(seed_size[0], seed_size[1], "gguf")
        if window != gen.draft_window:
            del gen
            gc.collect()
            gen = pair(window)
    if fixed_length is None and seed_row_s is not None:  # the draft's step is measured now: price at the seed's size
        if gen.draft_step_seconds is None:
            raise RuntimeError("replay: the warm-up request did not time a draft step; the policy cannot be priced "
                               "at the seed's size (try --replay-lengths policy-1.5b)")
        costs = seed_priced_costs(seed_row_s, gen.draft_step_seconds)
        recorder.inner = AdaptiveLength(fixed_costs=costs)  # its row price reaches the hybrid's lookup too
        if progress:
            print(f"  the policy priced beside the seed target: a draft step {costs.draft_step:.3f} of its step, "
                  f"each extra row {costs.verify_slope:.3f}", file=sys.stderr, flush=True)
    if progress:
        print(f"  the draft reads {gen.draft_window or 'all'} of its prompt's last tokens", file=sys.stderr, flush=True)
    recorded = []
    for i, prompt in enumerate(prompts):
        alone = gen.generate(prompt, max_new_tokens=max_new_tokens, assisted=False).stats
        stats = gen.generate(prompt, max_new_tokens=max_new_tokens).stats
        rounds = list(stats.round_log)  # a tree's rows all count: its forward scores them all
        speedup = _decode_s(alone) / _decode_s(stats) * (stats.new_tokens - 1) / max(alone.new_tokens - 1, 1)
        recorded.append(RecordedPrompt(stats.prompt_tokens, stats.new_tokens, rounds,
                                       stats.time_drafting_s + stats.time_translating_s, speedup))
        if progress:
            print(f"  recorded prompt {i}: {stats.prompt_tokens} + {stats.new_tokens} tokens in {len(rounds)} rounds, "
                  f"real decode speedup {speedup:.2f}x", file=sys.stderr, flush=True)
    del gen
    gc.collect()
    return recorded


def _decode_s(stats) -> float:
    return max(stats.total_time_s - stats.time_to_first_token_s, 1e-9)


def _timed(backend, ids: Sequence[int]) -> float:
    t0 = time.perf_counter()
    backend.extend(list(ids), all_logits=True)
    return time.perf_counter() - t0


def replay_on(backend, prompt: RecordedPrompt, ids: Sequence[int]) -> dict:
    """The prompt's rounds on the seed target (after an untimed read of a prompt of its length), with the
    target alone's single-row step timed after every round at that round's context and BASELINE_STEPS times
    after the last: seconds (the step the median of them all). Interleaved because a shared machine's
    memory traffic moves a one-row step (bound by reading) by a third within an hour while rounds of many
    rows (bound by the multiplies) barely move: a step timed only after the rounds put that drift into the
    ratio."""
    backend.reset()
    backend.prefill(list(ids[: prompt.prompt_tokens]))
    verify_s, steps = 0.0, []
    for (rows, accepted), context in zip(prompt.rounds, prompt.contexts):
        verify_s += _timed(backend, ids[context: context + rows])
        backend.crop(context + accepted + 1)
        steps += _single_steps(backend, ids, 1)
    return {"verify_s": verify_s, "step_s": statistics.median(steps + _single_steps(backend, ids, BASELINE_STEPS))}


def _single_steps(backend, ids: Sequence[int], count: int) -> list[float]:
    """`count` single-row steps after what `backend` holds (each cropped away): seconds."""
    steps = []
    for _ in range(count):
        steps.append(_timed(backend, ids[:1]))
        backend.crop(backend.cached_length - 1)
    return steps


def _single_step(backend, ids: Sequence[int]) -> float:
    """The median of BASELINE_STEPS single-row steps after what `backend` holds."""
    return statistics.median(_single_steps(backend, ids, BASELINE_STEPS))


def llama_cpp_steps(path, contexts: Sequence[int], threads: int, ids: Sequence[int]) -> dict[int, float]:
    """llama.cpp's single-row step on the same file after a prompt of each of `contexts` tokens
    (one load, the cache read afresh for each): seconds by context."""
    from anypair.backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend(path, name="llama.cpp", threads=threads, context=max(contexts) + 64)
    steps = {}
    for context in contexts:
        backend.reset()
        backend.prefill(list(ids[:context]))
        steps[context] = _single_step(backend, ids)
    del backend
    gc.collect()
    return steps


@dataclass
class ReplayRow:
    prompt: int
    prompt_tokens: int
    new_tokens: int
    rounds: int
    anypair_ms_per_token: float
    target_ms_per_token: float
    llama_cpp_ms_per_token: Optional[float]
    draft_share: float
    real_speedup_at_1_5b: float

    @property
    def vs_target(self) -> float:
        return self.target_ms_per_token / self.anypair_ms_per_token


def replay(shape, prompts: Sequence[str], *, max_new_tokens: int = 128, threads: int = 2,
           progress: bool = True, recorded: Optional[list[RecordedPrompt]] = None,
           fixed_length: Optional[int] = None, priced_at_size: bool = True, drafter: str = "model") -> dict:
    """Record (unless given), then replay on the seed-shaped file of `shape` (a SeedShape or its name).
    `priced_at_size`: the shipped policy prices its rounds with the seed target's forwards, timed on the
    loaded file before recording, and under every rule the draft reads the prompt it would read beside
    that target (False: the 1.5B target's costs and window)."""
    import numpy as np
    import torch

    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.zoo.seed_shapes import resolve_shape
    from anypair.zoo.seed_writer import seed_gguf

    say = (lambda text: print(text, file=sys.stderr, flush=True)) if progress else (lambda text: None)
    torch.set_num_threads(threads)
    shape = resolve_shape(shape) if isinstance(shape, str) else shape
    path = seed_gguf(shape, progress=progress)
    # the prompts' tokens are unknown before recording: half their characters, and a chat template, bound them
    longest = max(len(p) for p in prompts) // 2 + max_new_tokens + 128 if recorded is None else \
        max(p.prompt_tokens + p.new_tokens for p in recorded) + 64
    longest = max(longest, 512)
    ids = [int(i) for i in np.random.default_rng(0).integers(0, shape.vocab, size=longest)]
    target = QuantizedGGUFBackend(path, name=shape.name, threads=threads, context=longest)
    priced = recorded is None and fixed_length is None and priced_at_size
    label = fixed_length if fixed_length is not None else "recorded" if recorded is not None else \
        "policy" if priced else "policy-1.5b"
    if recorded is None:
        row_s = None
        if priced:  # the seed target's forwards of 1-13 rows (a 12-token cap) after a prompt of a typical length
            typical = int(statistics.median(len(p) for p in prompts)) // 4  # about a prompt's tokens
            curve = seed_curve(target, ids[:min(max(typical, 100), longest - 16)], (1, 2, 3, 4, 5, 6, 8, 9, 12, 13))
            row_s = {rows: ms / 1000 for rows, ms in curve.items()}
        how = (f"a constant {fixed_length}-step draft" if fixed_length is not None else
               "the shipped policy priced at the seed target's costs" if priced else
               "the shipped policy priced at the 1.5B target's costs")
        say(f"recording {len(prompts)} prompts on the real default pair, {how}")
        recorded = record(prompts, max_new_tokens, threads, progress, drafter=drafter, fixed_length=fixed_length,
                          seed_row_s=row_s, seed_size=(target.weights_bytes, target.num_layers) if priced_at_size
                          else None)
    replayed = _replay_rounds(target, recorded, ids, say, path.name)
    del target  # before llama.cpp loads the same file
    gc.collect()
    result = _result(shape, path, recorded, replayed, ids, threads, max_new_tokens, say, label)
    return {**result, "drafter": drafter}


def _replay_rounds(target, recorded: list[RecordedPrompt], ids: Sequence[int], say, name: str) -> list[dict]:
    """Each recorded prompt's rounds on the loaded seed target (`replay_on`)."""
    say(f"replaying on {name} (the gguf engine; random weights, real costs)")
    replayed = []
    for i, prompt in enumerate(recorded):
        if prompt.prompt_tokens + prompt.new_tokens + 16 > len(ids):
            raise ValueError(f"replay: prompt {i} ({prompt.prompt_tokens} tokens) is longer than the context the "
                             f"seed target was loaded with ({len(ids)})")
        replayed.append(replay_on(target, prompt, ids))
        say(f"  prompt {i}: {len(prompt.rounds)} rounds, verification {replayed[-1]['verify_s']:.1f} s, "
            f"a single step {1000 * replayed[-1]['step_s']:.0f} ms")
    return replayed


def _result(shape, path, recorded: list[RecordedPrompt], replayed: list[dict], ids: Sequence[int], threads: int,
            max_new_tokens: int, say, draft_length) -> dict:
    """The baselines on the same file (llama.cpp alone), then the result's record."""
    from anypair.backends.llama_cpp_guard import probe_failure
    from anypair.machine import describe_machine

    llama_steps: dict[int, float] = {}
    failure = probe_failure(path, threads)
    if failure is None:
        llama_steps = llama_cpp_steps(path, sorted({p.prompt_tokens for p in recorded}), threads, ids)
        for context, step in llama_steps.items():
            say(f"  llama.cpp alone after {context} tokens: {1000 * step:.0f} ms a step")
    else:
        say(f"llama.cpp alone is left out: {failure}")
    rows = []
    for i, (prompt, done) in enumerate(zip(recorded, replayed)):
        after_first = prompt.new_tokens - 1
        anypair_s = done["verify_s"] + prompt.draft_s
        llama = llama_steps.get(prompt.prompt_tokens)
        rows.append(ReplayRow(i, prompt.prompt_tokens, prompt.new_tokens, len(prompt.rounds),
                              1000 * anypair_s / after_first, 1000 * done["step_s"],
                              1000 * llama if llama is not None else None,
                              prompt.draft_s / anypair_s, prompt.real_speedup))
    return {"what": f"the default pair's rounds replayed at {shape.name}'s size: random weights with its exact "
                    "shapes (text meaningless), every cost measured here, the acceptance borrowed from the real "
                    "1.5B target", "shape": shape.name, "file": str(path), "machine": describe_machine(),
            "threads": threads, "max_new_tokens": max_new_tokens,
            "draft_length": draft_length, "rows": [asdict(r) for r in rows],
            "summary": summarize(rows), "recorded": [asdict(p) for p in recorded]}


def summarize(rows: Sequence[ReplayRow]) -> dict:
    with_llama = [r for r in rows if r.llama_cpp_ms_per_token]
    return {
        "median_vs_target": statistics.median(r.vs_target for r in rows),
        "median_vs_llama_cpp": (statistics.median(r.llama_cpp_ms_per_token / r.anypair_ms_per_token for r in with_llama)
                                if with_llama else None),
        "median_draft_share": statistics.median(r.draft_share for r in rows),
        "median_real_speedup_at_1_5b": statistics.median(r.real_speedup_at_1_5b for r in rows),
        "target_alone_vs_llama_cpp": (statistics.median(r.llama_cpp_ms_per_token / r.target_ms_per_token
                                                        for r in with_llama) if with_llama else None),
    }


def format_replay(result: dict) -> str:
    lines = [result["what"], f"drafter: {result.get('drafter', 'model')}; draft length: {result.get('draft_length', 'policy')}; machine: {result['machine']}", "",
             "| prompt | prompt tokens | rounds | anypair ms/token | target alone | llama.cpp alone | vs target | "
             "draft share | real pair at 1.5B |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        llama = f"{r['llama_cpp_ms_per_token']:.0f}" if r["llama_cpp_ms_per_token"] else "-"
        lines.append(f"| {r['prompt']} | {r['prompt_tokens']} | {r['rounds']} | {r['anypair_ms_per_token']:.0f} | "
                     f"{r['target_ms_per_token']:.0f} | {llama} | "
                     f"{r['target_ms_per_token'] / r['anypair_ms_per_token']:.2f}x | {100 * r['draft_share']:.0f}% | "
                     f"{r['real_speedup_at_1_5b']:.2f}x |")
    s = result["summary"]
    vs_llama = f"{s['median_vs_llama_cpp']:.2f}x" if s["median_vs_llama_cpp"] else "-"
    lines += ["", f"medians: anypair {s['median_vs_target']:.2f}x the seed target alone, {vs_llama} llama.cpp alone "
                  f"(decode); draft share {100 * s['median_draft_share']:.0f}%; the same rounds at 1.5B (real): "
                  f"{s['median_real_speedup_at_1_5b']:.2f}x"]
    return "\n".join(lines)
