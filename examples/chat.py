"""Chat: with messages=, each model gets the conversation through its OWN chat template
(Qwen's <|im_start|> markers for the target, SmolLM2's for the draft).

    python examples/chat.py [--target ID] [--draft ID] [--max-new-tokens N]
"""
import argparse

from anypair import AnyPairGenerator

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--target", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
parser.add_argument("--draft", default="HuggingFaceTB/SmolLM2-135M-Instruct")
parser.add_argument("--max-new-tokens", type=int, default=96)
args = parser.parse_args()

gen = AnyPairGenerator(args.target, args.draft)
messages = [
    {"role": "system", "content": "You are a concise coding assistant."},
    {"role": "user", "content": "Write a Python function that reverses the words of a sentence."},
]
result = gen.generate(messages=messages, max_new_tokens=args.max_new_tokens)
print(result.text)
print(f"\n[{result.stats.tokens_per_second:.2f} tok/s, acceptance {result.stats.acceptance_rate:.2f}]")
