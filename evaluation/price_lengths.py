"""Draft-length rules priced at a seed target's size with one measured curve: which rule commits the most
tokens for the time, free of the machine's drift between rules.

`anypair bench --target-shape NAME --replay --replay-lengths ...` times every rule's rounds on the seed
target, one rule after the other; on a machine whose memory is shared with other guests the seed's
forwards moved by a third within minutes (gemma-2-9b's shape on 2 Zen 5 cores: 8 rows cost 1.22x, 1.57x
and 1.79x a single step in three passes one hour), so rules timed ten minutes apart are not compared
fairly. Here the seed's forwards of 1-18 rows are measured once (or read from `--curve`), each rule's
rounds are recorded on the real default pair (greedy, HumanEval; the acceptance is the 1.5B target's,
as in the replay), and every round is priced with that one curve: its rows' forward plus the draft's
real seconds. Rules: "policy" (the shipped policy, priced at the seed's curve as in the replay),
"policy-step-value" (the same, a committed token valued at one target step: the stop before commit
46dcaaa), or a constant number of draft steps. The weights are random: no text is checked here; the
recorded outputs are the real pair's, lossless as the suite checks.

    python evaluation/price_lengths.py --shape gemma-2-9b --rules policy,policy-step-value,4,6,8 \\
        --n 10 --json evaluation/measured/priced_lengths_gemma-2-9b_zen5_n10.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import contextmanager, nullcontext

#: the seed's forwards measured: 1 to this many rows (the policy's cap is 12 tokens, trees add rows)
CURVE_ROWS = 18


def seed_size(shape_name: str) -> tuple[int, int]:
    """The seed target's weight bytes (its tensors') and layers: the draft's window beside it."""
    from anypair.zoo.seed_shapes import file_size, resolve_shape

    shape = resolve_shape(shape_name)
    return file_size(shape), shape.layers


def measure_curve(shape_name: str, threads: int) -> dict[int, float]:
    """The seed target's forward by rows after a 150-token prompt, ms (`replay.seed_curve`)."""
    import numpy as np

    from anypair.backends.quantized_gguf import QuantizedGGUFBackend
    from anypair.benchmarking.replay import seed_curve
    from anypair.zoo.seed_shapes import resolve_shape
    from anypair.zoo.seed_writer import seed_gguf

    shape = resolve_shape(shape_name)
    ids = [int(i) for i in np.random.default_rng(0).integers(0, shape.vocab, size=600)]
    target = QuantizedGGUFBackend(seed_gguf(shape), name=shape.name, threads=threads, context=600)
    return seed_curve(target, ids[:150], tuple(range(1, CURVE_ROWS + 1)))


def curve_costs(curve: dict[int, float]):
    """The curve as the policies draw one (`EngineCosts`: lines between counts, past the last count its
    last segment's rows): `.seconds(rows)` gives ms here."""
    from anypair.policies.costs import EngineCosts

    costs = EngineCosts(smoothing=1.0)
    for rows, ms in curve.items():
        costs.observe(rows, ms)
    return costs


@contextmanager
def tokens_valued_at_one_step():
    """The confidence stop as it was before commit 46dcaaa: a committed token worth one target step."""
    from anypair.policies.adaptive import ConfidenceStopLength

    shipped = ConfidenceStopLength.token_value
    ConfidenceStopLength.token_value = lambda self: self.costs.verify(1)
    try:
        yield
    finally:
        ConfidenceStopLength.token_value = shipped


def priced_rule(rule: str, curve: dict[int, float], prompts, threads: int, drafter: str = "model",
                draft_window=None, seed_size=None) -> dict:
    """One rule's rounds recorded on the real pair and priced with `curve`."""
    from anypair.benchmarking.replay import record

    fixed = None if rule.startswith("policy") else int(rule)
    row_s = {k: ms / 1000 for k, ms in curve.items() if k <= 13}
    with (tokens_valued_at_one_step() if rule == "policy-step-value" else nullcontext()):
        recorded = record(prompts, 128, threads, progress=False, fixed_length=fixed, drafter=drafter,
                          seed_row_s=row_s, seed_size=seed_size, draft_window=draft_window)
    costs, rows = curve_costs(curve), []
    for p in recorded:
        verify_ms = sum(costs.seconds(r) for r, _ in p.rounds)
        rows.append({"new_tokens": p.new_tokens, "rounds": len(p.rounds), "rows": sum(r for r, _ in p.rounds),
                     "accepted": sum(a for _, a in p.rounds), "verify_ms": verify_ms, "draft_ms": 1000 * p.draft_s,
                     "ms_per_token": (verify_ms + 1000 * p.draft_s) / p.new_tokens})
    total = sum(r["verify_ms"] + r["draft_ms"] for r in rows)
    rounds = sum(r["rounds"] for r in rows)
    return {"rule": rule, "prompts": rows, "ms_per_token": total / sum(r["new_tokens"] for r in rows),
            "median_ms_per_token": statistics.median(r["ms_per_token"] for r in rows),
            "rows_per_round": sum(r["rows"] for r in rows) / rounds,
            "tokens_per_round": sum(r["new_tokens"] for r in rows) / rounds,
            "draft_share": sum(r["draft_ms"] for r in rows) / total}


def main(argv=None) -> int:
    from anypair.benchmarking.prompts import humaneval_prompts, prompts_from_file
    from anypair.machine import describe_machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="gemma-2-9b")
    parser.add_argument("--rules", default="policy,policy-step-value,4,6,8")
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--curve", help="a JSON {rows: ms} of the seed's forwards (default: measured now)")
    parser.add_argument("--drafter", default="model", help="drafters.DRAFTERS' name ('hybrid': model + prompt n-grams)")
    parser.add_argument("--prompts", help="a file of prompts separated by two blank lines (default: HumanEval)")
    parser.add_argument("--draft-window", type=int, help="prompt tokens the draft reads (0: all; default: the generator's)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    curve = ({int(k): float(v) for k, v in json.load(open(args.curve)).items()} if args.curve
             else measure_curve(args.shape, args.threads))
    print("the seed's forwards by rows, x one row: "
          + " ".join(f"{k}:{curve[k] / curve[1]:.2f}" for k in sorted(curve)), file=sys.stderr, flush=True)
    prompts = prompts_from_file(args.prompts, args.n) if args.prompts else humaneval_prompts(args.n)
    results = []
    print("| rule | ms a token (all prompts) | median of prompts | rows a round | tokens a round | draft share |")
    print("|---|---|---|---|---|---|")
    for rule in args.rules.split(","):
        r = priced_rule(rule.strip(), curve, prompts, args.threads, args.drafter, args.draft_window, seed_size(args.shape))
        results.append(r)
        print(f"| {r['rule']} | {r['ms_per_token']:.1f} | {r['median_ms_per_token']:.1f} | {r['rows_per_round']:.2f} | "
              f"{r['tokens_per_round']:.2f} | {100 * r['draft_share']:.0f}% |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"what": f"draft-length rules priced at {args.shape}'s seed with one measured curve of its "
                               "forwards (random weights: costs only), the rounds and draft seconds recorded on the "
                               "real default pair", "machine": describe_machine(), "threads": args.threads,
                       "drafter": args.drafter, "prompts": args.prompts or "humaneval", "draft_window": args.draft_window,
                       "curve_ms": curve, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
