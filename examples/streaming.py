"""Streaming: text appears as soon as each token is verified (never half a UTF-8 character).

    python examples/streaming.py [--target ID] [--draft ID] [--max-new-tokens N]
"""
import argparse
import sys

from anypair import AnyPairGenerator

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--target", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
parser.add_argument("--draft", default="HuggingFaceTB/SmolLM2-135M-Instruct")
parser.add_argument("--max-new-tokens", type=int, default=96)
args = parser.parse_args()

gen = AnyPairGenerator(args.target, args.draft)
stream = gen.stream(messages=[{"role": "user", "content": "Explain recursion in three sentences."}],
                    max_new_tokens=args.max_new_tokens)
for chunk in stream:
    sys.stdout.write(chunk)
    sys.stdout.flush()
print(f"\n[{stream.result.stats.tokens_per_second:.2f} tok/s]")  # the full result, once the stream is exhausted
