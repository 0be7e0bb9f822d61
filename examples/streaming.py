"""Streaming: text appears as soon as each token is verified (never half a UTF-8 character)."""
import sys

from anypair import AnyPairGenerator

gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-1.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
stream = gen.stream(messages=[{"role": "user", "content": "Explain recursion in three sentences."}], max_new_tokens=96)
for chunk in stream:
    sys.stdout.write(chunk)
    sys.stdout.flush()
print(f"\n[{stream.result.stats.tokens_per_second:.2f} tok/s]")  # the full result, once the stream is exhausted
