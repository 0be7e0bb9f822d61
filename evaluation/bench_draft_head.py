"""The draft's head against its acceptance, on the default pair, real, per prompt in one process: the
full head and heads of the most frequent rows (each sequence keeping its request's own tokens beside
them, as shipped: backends/reduced_head.py), the order rotated per prompt; greedy, 128 tokens, every
output checked to be the same. By default the shipped length policy (`--constant K`: K-token drafts,
the form of the first measurement). Prints per head the median time a decoded token relative to the
full head's, tokens accepted, rounds and drafting seconds; writes every run as JSON.

    python evaluation/bench_draft_head.py 10 OUT.json [--sizes 8192] [--prompts FILE] [--constant 4]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys


def run_prompt(gen, heads: dict, prompt: str, turn: int) -> list[dict]:
    """One prompt's runs, one per head, the order rotated by `turn`."""
    draft = gen.draft.backend
    names = list(heads)
    order = names[turn % len(names):] + names[:turn % len(names)]
    rows, texts = [], set()
    for name in order:
        draft.reduced_head = heads[name]
        result = gen.generate(prompt, max_new_tokens=128)
        s = result.stats
        texts.add(tuple(result.target_ids))
        rows.append(dict(head=name, tokens=s.new_tokens, rounds=s.rounds, proposed=s.draft_tokens_proposed,
                         accepted=s.draft_tokens_accepted, drafting_s=s.time_drafting_s, total_s=s.total_time_s,
                         ms_a_token=1000 * (s.total_time_s - s.time_to_first_token_s) / max(s.new_tokens - 1, 1)))
    if len(texts) != 1:
        raise SystemExit(f"outputs differ between heads on prompt {turn}: a lossless bug")
    return rows


def summary(rows: list[dict], heads: dict) -> list[str]:
    """One line per head: median time a token relative to the full head, per prompt, and totals."""
    full = {r["prompt"]: r["ms_a_token"] for r in rows if r["head"] == "full"}
    lines = []
    for name in heads:
        rs = [r for r in rows if r["head"] == name]
        ratio = statistics.median(r["ms_a_token"] / full[r["prompt"]] for r in rs)
        lines.append(f"| {name} | {ratio:.3f} | {sum(r['accepted'] for r in rs)} | {sum(r['rounds'] for r in rs)} | "
                     f"{sum(r['drafting_s'] for r in rs):.2f} | {sum(r['total_s'] for r in rs):.2f} |")
    return ["| head | time a token / full head's (median) | accepted | rounds | drafting, s | total, s |",
            "|---|---|---|---|---|---|", *lines]


def main(argv: list[str]) -> None:
    from anypair.backends.reduced_head import kept_ids, ranked_ids
    from anypair.benchmarking.prompts import humaneval_prompts, prompts_from_file
    from anypair.generation.generator import AnyPairGenerator
    from anypair.zoo.registry import DEFAULT_DRAFT, DEFAULT_TARGET

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int)
    parser.add_argument("json")
    parser.add_argument("--sizes", default="8192", help="shared rows of each reduced head, comma-separated")
    parser.add_argument("--prompts", help="a prompts file (default: HumanEval)")
    parser.add_argument("--constant", type=int, help="constant drafts of this many tokens (default: the policy)")
    args = parser.parse_args(argv)
    length = dict(draft_length="constant", num_draft_tokens=args.constant, skip_losing_drafts=False) \
        if args.constant else {}
    gen = AnyPairGenerator(DEFAULT_TARGET, DEFAULT_DRAFT, threads=2, **length)
    draft, ranking = gen.draft.backend, ranked_ids(gen.draft.hf_tokenizer)
    heads = {"full": None}
    for size in (int(s) for s in args.sizes.split(",")):
        draft.restrict_head(kept_ids(ranking, size, draft.vocab_size))
        heads[str(size)] = draft.reduced_head
    prompts = prompts_from_file(args.prompts, args.n) if args.prompts else humaneval_prompts(args.n)
    gen.generate(prompts[0], max_new_tokens=16)  # warm-up
    rows = []
    for i, prompt in enumerate(prompts):
        rows += [dict(prompt=i, **row) for row in run_prompt(gen, heads, prompt, i)]
        print(f"prompt {i + 1}/{len(prompts)}", file=sys.stderr, flush=True)
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(summary(rows, heads)))


if __name__ == "__main__":
    main(sys.argv[1:])
