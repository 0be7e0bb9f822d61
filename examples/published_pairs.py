"""The three heterogeneous pairs of the universal-assisted-generation paper (Timor et al., 2025),
by their hub ids. They need the Hugging Face hub (and the memory for a 9-14B target); offline,
this says what is missing instead of failing obscurely.

    python examples/published_pairs.py [--target ID --draft ID] [--max-new-tokens N]

`--target` and `--draft` run that one pair instead (the test suite runs it on the zoo's small models).
"""
import argparse
import sys

from anypair import AnyPairGenerator
from anypair.errors import AnyPairError

PAIRS = [
    ("google/gemma-2-9b", "double7/vicuna-68m", "The theory of relativity states that"),
    ("codellama/CodeLlama-13b-Instruct-hf", "bigcode/tiny_starcoder_py", "def merge_sort(xs):\n"),
    ("microsoft/Phi-3-medium-128k-instruct", "Qwen/Qwen2-0.5B-Instruct", "Summarize: the quick brown fox"),
]

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--target", help="run this target with --draft instead of the published pairs")
parser.add_argument("--draft")
parser.add_argument("--max-new-tokens", type=int, default=64)
args = parser.parse_args()
if (args.target is None) != (args.draft is None):
    parser.error("--target and --draft go together")
pairs = [(args.target, args.draft, "def merge_sort(xs):\n")] if args.target else PAIRS

failures = 0
for target, draft, prompt in pairs:
    print(f"== {target} with {draft}")
    try:
        gen = AnyPairGenerator(target, draft)
        result = gen.generate(prompt, max_new_tokens=args.max_new_tokens)
    except AnyPairError as exc:
        failures += 1
        print(f"   not available here: {exc}")
        continue
    print(result.text)
    print(f"   {result.stats.tokens_per_second:.2f} tok/s, acceptance {result.stats.acceptance_rate:.2f}")
sys.exit(1 if failures == len(pairs) else 0)
