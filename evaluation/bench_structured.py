"""What structured output costs per token: the same chat requests with and without a JSON-schema
constraint (`response_format` json_schema in `anypair serve`), on the target alone and on anypair,
interleaved per prompt, greedy. Goal (issue 45): a constrained request costs <= 1.1x the
unconstrained one per token.

The target alone's ratio is the mask's own cost (its step does not depend on the text); anypair's
also moves with acceptance, which the constraint changes (proposals the grammar rejects are cut
before the target scores them). The grammar's own time (llguidance's masks, the proposal check and
the state updates) is timed apart, per emitted token.

    python evaluation/bench_structured.py                       # the default pair, 6 prompts, 96 tokens
    python evaluation/bench_structured.py -m Qwen/Qwen2.5-Coder-0.5B-Instruct --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anypair import AnyPairGenerator  # noqa: E402
from anypair.verifiers import constraints  # noqa: E402
from anypair.verifiers.constraints import Grammar  # noqa: E402

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "summary": {"type": "string"}, "year": {"type": "integer"},
    "keywords": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
    "required": ["name", "summary", "year", "keywords"]}
SUBJECTS = ["the Python programming language", "the Linux kernel", "the quicksort algorithm", "the Rust compiler",
            "the TCP protocol", "the SQLite database", "the Git version control system", "the HTTP/2 protocol"]


class GrammarClock:
    """Times every call of the grammar constraint (the masks, the proposal check, the updates)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        for name in ("mask_rows", "allowed_prefix", "commit"):
            original = getattr(constraints.GrammarConstraint, name)
            setattr(constraints.GrammarConstraint, name, self._timed(original))

    def _timed(self, method):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
        return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
    parser.add_argument("-a", "--assistant-model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--n", type=int, default=6, help="prompts (default 6)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--json", help="save every figure to this JSON file")
    args = parser.parse_args()

    gen = AnyPairGenerator(args.model, args.assistant_model, skip_losing_drafts=False)
    clock = GrammarClock()
    grammar = Grammar.json_schema(SCHEMA)
    gen.grammar_compiler  # built (and warmed) before timing: a server builds it once
    warm = [{"role": "user", "content": "Say hi."}]
    gen.generate(messages=warm, max_new_tokens=8)
    gen.generate(messages=warm, max_new_tokens=8, grammar=grammar)

    rows = []
    for subject in SUBJECTS[:args.n]:
        messages = [{"role": "user", "content": f"Describe {subject} as a JSON object with the keys name, summary, "
                                                "year and keywords."}]
        row = {"subject": subject}
        for method, assisted in (("alone", False), ("anypair", True)):
            for constrained in (False, True):
                clock.seconds = 0.0
                result = gen.generate(messages=messages, max_new_tokens=args.max_new_tokens, assisted=assisted,
                                      grammar=grammar if constrained else None)
                key = f"{method}_{'constrained' if constrained else 'free'}"
                row[key] = {"tokens": result.stats.new_tokens, "ms_per_token": 1000 * result.stats.total_time_s
                            / result.stats.new_tokens, "grammar_ms_per_token": 1000 * clock.seconds
                            / result.stats.new_tokens, "accepted_per_round": result.stats.mean_accepted_per_round}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    def median(key: str, field: str) -> float:
        return statistics.median(r[key][field] for r in rows)

    summary = {"target": args.model, "draft": args.assistant_model, "prompts": len(rows),
               "max_new_tokens": args.max_new_tokens}
    for method in ("alone", "anypair"):
        free, constrained = median(f"{method}_free", "ms_per_token"), median(f"{method}_constrained", "ms_per_token")
        summary[method] = {"free_ms_per_token": round(free, 2), "constrained_ms_per_token": round(constrained, 2),
                           "ratio": round(constrained / free, 3),
                           "grammar_ms_per_token": round(median(f"{method}_constrained", "grammar_ms_per_token"), 3),
                           "accepted_per_round_free": round(median(f"{method}_free", "accepted_per_round"), 2),
                           "accepted_per_round_constrained":
                               round(median(f"{method}_constrained", "accepted_per_round"), 2)}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
