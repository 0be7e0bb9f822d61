"""Chat: with messages=, each model gets the conversation through its OWN chat template
(Qwen's <|im_start|> markers for the target, SmolLM2's for the draft)."""
from anypair import AnyPairGenerator

gen = AnyPairGenerator("Qwen/Qwen2.5-Coder-1.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
messages = [
    {"role": "system", "content": "You are a concise coding assistant."},
    {"role": "user", "content": "Write a Python function that reverses the words of a sentence."},
]
result = gen.generate(messages=messages, max_new_tokens=96)
print(result.text)
print(f"\n[{result.stats.tokens_per_second:.2f} tok/s, acceptance {result.stats.acceptance_rate:.2f}]")
