"""Quickstart: the default offline pair (Qwen2.5-Coder-1.5B target, SmolLM2-135M draft), whose
tokenizers differ. Models are fetched into the zoo on first use (`anypair fetch` does it ahead).

    python examples/quickstart.py [--target ID] [--draft ID] [--max-new-tokens N]
"""
import argparse

from anypair import AnyPairGenerator

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--target", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
parser.add_argument("--draft", default="HuggingFaceTB/SmolLM2-135M-Instruct")
parser.add_argument("--max-new-tokens", type=int, default=64)
args = parser.parse_args()

gen = AnyPairGenerator(args.target, args.draft)
prompt = 'def is_prime(n: int) -> bool:\n    """Return True if n is a prime number."""\n'
result = gen.generate(prompt, max_new_tokens=args.max_new_tokens)
print(prompt + result.text)
s = result.stats
print(f"\n{s.new_tokens} tokens, {s.tokens_per_second:.2f} tok/s, acceptance {s.acceptance_rate:.2f}, "
      f"{s.mean_accepted_per_round:.2f} accepted per round")

baseline = gen.generate(prompt, max_new_tokens=args.max_new_tokens, assisted=False)
print(f"target alone: {baseline.stats.tokens_per_second:.2f} tok/s; identical output: {baseline.target_ids == result.target_ids}")
