"""Quickstart: the default offline pair (Qwen2.5-Coder-1.5B target, SmolLM2-135M draft), whose
tokenizers differ. Models are fetched into the zoo on first use (`anypair fetch` does it ahead)."""
from anypair import AnyPairGenerator

gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-1.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
prompt = 'def is_prime(n: int) -> bool:\n    """Return True if n is a prime number."""\n'
result = gen.generate(prompt, max_new_tokens=64)
print(prompt + result.text)
s = result.stats
print(f"\n{s.new_tokens} tokens, {s.tokens_per_second:.2f} tok/s, acceptance {s.acceptance_rate:.2f}, "
      f"{s.mean_accepted_per_round:.2f} accepted per round")

baseline = gen.generate(prompt, max_new_tokens=64, assisted=False)
print(f"target alone: {baseline.stats.tokens_per_second:.2f} tok/s; identical output: {baseline.target_ids == result.target_ids}")
