"""The draft's head size against its acceptance: per HumanEval prompt and interleaved (random order per
prompt), the target alone and the default pair with the draft's full head and reduced heads
(backends/reduced_head.py), constant 4-token drafts, greedy, 128 tokens; every output checked against
the target alone's. Usage: python evaluation/bench_draft_head.py N OUT.json [SIZES, default 8192,16384].
"""
from __future__ import annotations

import json
import random
import statistics
import sys


def run_prompt(gen, heads: dict, prompt: str, seed: int) -> list[dict]:
    """One prompt's rows: the target alone and each head, in a random order."""
    draft = gen.draft.backend
    order = ["alone"] + list(heads)
    random.Random(seed).shuffle(order)
    runs = {}
    for name in order:
        draft.reduced_head = heads.get(name)
        result = gen.generate(prompt, max_new_tokens=128, assisted=name != "alone")
        s = result.stats
        runs[name] = dict(ids=result.target_ids, tps=s.new_tokens / s.total_time_s, rounds=s.rounds,
                          prop=s.draft_tokens_proposed, acc=s.draft_tokens_accepted, draft_s=s.time_drafting_s,
                          verify_s=s.time_verifying_s, total_s=s.total_time_s)
    alone = runs["alone"]
    rows = [dict(head="alone", tps=alone["tps"], total_s=alone["total_s"])]
    for name in heads:
        run = runs[name]
        rows.append(dict(head=str(name), identical=run.pop("ids") == alone["ids"], speedup=run["tps"] / alone["tps"],
                         **run))
    return rows


def main(n: str, out: str, sizes: str = "8192,16384") -> None:
    from anypair.backends.reduced_head import kept_ids, ranked_ids
    from anypair.benchmarking.prompts import humaneval_prompts
    from anypair.generation.generator import AnyPairGenerator

    gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-1.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
                           draft_length="constant", num_draft_tokens=4, skip_losing_drafts=False, threads=2)
    draft, ranking = gen.draft.backend, ranked_ids(gen.draft.hf_tokenizer)
    heads = {"full": None}
    for size in (int(s) for s in sizes.split(",")):
        draft.restrict_head(kept_ids(ranking, size, draft.vocab_size))
        heads[str(size)] = draft.reduced_head
    prompts = humaneval_prompts(int(n))
    gen.generate(prompts[0], max_new_tokens=16)  # warm-up
    rows = []
    for i, prompt in enumerate(prompts):
        rows += [dict(prompt=i, **row) for row in run_prompt(gen, heads, prompt, i)]
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    for name in heads:
        rs = [r for r in rows if r["head"] == name]
        print(f"head {name}: identical {sum(r['identical'] for r in rs)}/{len(rs)}, median speedup "
              f"{statistics.median(r['speedup'] for r in rs):.3f}, accepted per round "
              f"{sum(r['acc'] for r in rs) / sum(r['rounds'] for r in rs):.3f}, draft share "
              f"{sum(r['draft_s'] for r in rs) / sum(r['total_s'] for r in rs):.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
