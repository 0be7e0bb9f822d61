"""The three heterogeneous pairs of the universal-assisted-generation paper (Timor et al., 2025),
by their hub ids. They need the Hugging Face hub (and the memory for a 9-14B target); offline,
this says what is missing instead of failing obscurely."""
import sys

from anypair import AnyPairGenerator
from anypair.errors import AnyPairError

PAIRS = [
    ("google/gemma-2-9b", "double7/vicuna-68m", "The theory of relativity states that"),
    ("codellama/CodeLlama-13b-Instruct-hf", "bigcode/tiny_starcoder_py", "def merge_sort(xs):\n"),
    ("microsoft/Phi-3-medium-128k-instruct", "Qwen/Qwen2-0.5B-Instruct", "Summarize: the quick brown fox"),
]

failures = 0
for target, draft, prompt in PAIRS:
    print(f"== {target} with {draft}")
    try:
        gen = AnyPairGenerator(target, draft)
        result = gen.generate(prompt, max_new_tokens=64)
    except AnyPairError as exc:
        failures += 1
        print(f"   not available here: {exc}")
        continue
    print(result.text)
    print(f"   {result.stats.tokens_per_second:.2f} tok/s, acceptance {result.stats.acceptance_rate:.2f}")
sys.exit(1 if failures == len(PAIRS) else 0)
