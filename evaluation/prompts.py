"""Prompts for the three tasks, built the way published benchmarks build them.

- HumanEval: code completion. A base model gets the HumanEval prompt itself and continues it.
  A chat model gets the prompt in a user turn and its reply is opened with "```python\\n" plus
  the same prompt, so it too continues the function body (the "assistant prefix" form that
  instruct-HumanEval harnesses use); the completion is then cut at the Codex stop sequences.
- CNN/DailyMail: a summarization instruction followed by the article (as Spec-Bench does).
- SCROLLS QMSum: the ZeroSCROLLS layout (instruction, transcript, query, "Answer:").
Chat/instruct models (those whose tokenizer carries a chat template) get their chat template.

Documents are read whole: a QMSum meeting (~10k words, ~13k tokens) as SCROLLS gives it. Where a
limit is asked for (`max_prompt_tokens`, target tokens, whole prompt; `evaluation/run.py` defaults it
to what the target's context leaves beside the new tokens), the transcript or article loses its end
at a line end; the instruction and the query are never cut.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from anypair.benchmarking.prompts import BenchPrompt, encode_prompt

from evaluation.data import Example

SUMMARIZE_INSTRUCTION = "Summarize the following news article in a few sentences."
QMSUM_INSTRUCTION = (
    "You are given a meeting transcript and a query containing a question or instruction. "
    "Answer the query in one or more sentences."
)
HUMANEVAL_INSTRUCTION = "Complete the following Python function. Write only the code."
CODE_FENCE_OPEN = "```python\n"
# The Codex paper's stop sequences, plus the closing fence a chat model writes after its code.
HUMANEVAL_STOP_SEQUENCES = ("\n```", "\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(")


class PromptError(Exception):
    """A prompt cannot be built within the limits asked for."""


@dataclass(frozen=True, kw_only=True)
class BuiltPrompt(BenchPrompt):
    """The exact text every method is given, and how many target tokens it is."""

    prompt_tokens: int
    truncated: bool  # the document was cut to fit max_prompt_tokens


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render(tokenizer, user_message: str, assistant_prefix: str = "") -> tuple[str, bool]:
    """The user message in the model's chat template (with the reply opened by `assistant_prefix`),
    or the message as plain text for a base model."""
    if not has_chat_template(tokenizer):
        return user_message + assistant_prefix, False
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_message}], tokenize=False, add_generation_prompt=True
    )
    return rendered + assistant_prefix, True


def humaneval_prompt_parts(example: Example, tokenizer) -> tuple[str, bool]:
    if not has_chat_template(tokenizer):
        return example.document, False
    user_message = f"{HUMANEVAL_INSTRUCTION}\n\n{CODE_FENCE_OPEN}{example.document}```"
    return render(tokenizer, user_message, assistant_prefix=CODE_FENCE_OPEN + example.document)


def summary_user_message(example: Example, document: str) -> str:
    if example.task == "scrolls":
        return f"{QMSUM_INSTRUCTION}\n\nTranscript:\n{document}\n\nQuery:\n{example.query}\n\nAnswer:"
    return f"{SUMMARIZE_INSTRUCTION}\n\nArticle:\n{document}\n\nSummary:"


def cut_document(document: str, tokenizer, budget_tokens: int) -> str:
    """The longest start of `document` within `budget_tokens` target tokens, ending at a line end
    when there is one (a transcript keeps whole utterances)."""
    document_ids = tokenizer(document, add_special_tokens=False)["input_ids"]
    if len(document_ids) <= budget_tokens:
        return document
    kept = tokenizer.decode(document_ids[: max(budget_tokens, 0)])
    last_line_end = kept.rfind("\n")
    return kept[:last_line_end] if last_line_end > 0 else kept


def build_summary_prompt(example: Example, tokenizer, max_prompt_tokens: int) -> BuiltPrompt:
    text, uses_chat = render(tokenizer, summary_user_message(example, example.document))
    prompt_tokens = len(encode_prompt(tokenizer, text, uses_chat))
    if prompt_tokens <= max_prompt_tokens:
        return BuiltPrompt(text=text, uses_chat_template=uses_chat, prompt_tokens=prompt_tokens, truncated=False)
    overhead_text, _ = render(tokenizer, summary_user_message(example, ""))
    overhead_tokens = len(encode_prompt(tokenizer, overhead_text, uses_chat))
    if overhead_tokens >= max_prompt_tokens:
        raise PromptError(
            f"{example.task} {example.example_id}: instruction and query alone are {overhead_tokens} tokens; "
            f"raise --max-prompt-tokens above that"
        )
    budget = max_prompt_tokens - overhead_tokens
    # Re-tokenizing across the cut can merge differently: shrink until the whole prompt fits.
    while True:
        document = cut_document(example.document, tokenizer, budget)
        text, _ = render(tokenizer, summary_user_message(example, document))
        prompt_tokens = len(encode_prompt(tokenizer, text, uses_chat))
        if prompt_tokens <= max_prompt_tokens or budget <= 0:
            return BuiltPrompt(text=text, uses_chat_template=uses_chat, prompt_tokens=prompt_tokens, truncated=True)
        budget -= prompt_tokens - max_prompt_tokens


def build_prompt(example: Example, tokenizer, max_prompt_tokens: Optional[int] = None) -> BuiltPrompt:
    """The prompt for `example`, in the target tokenizer's terms; None: no limit (the document whole)."""
    if example.task == "humaneval":
        text, uses_chat = humaneval_prompt_parts(example, tokenizer)
        prompt_tokens = len(encode_prompt(tokenizer, text, uses_chat))
        if max_prompt_tokens is not None and prompt_tokens > max_prompt_tokens:
            raise PromptError(
                f"{example.example_id}: the HumanEval prompt is {prompt_tokens} tokens and code cannot be cut; "
                f"raise --max-prompt-tokens to at least that"
            )
        return BuiltPrompt(text=text, uses_chat_template=uses_chat, prompt_tokens=prompt_tokens, truncated=False)
    if max_prompt_tokens is None:
        text, uses_chat = render(tokenizer, summary_user_message(example, example.document))
        return BuiltPrompt(text=text, uses_chat_template=uses_chat,
                           prompt_tokens=len(encode_prompt(tokenizer, text, uses_chat)), truncated=False)
    return build_summary_prompt(example, tokenizer, max_prompt_tokens)


def humaneval_completion(generated_text: str) -> str:
    """The function body a model wrote, cut at the first stop sequence (what pass@1 runs after the prompt)."""
    cut_at = len(generated_text)
    for stop in HUMANEVAL_STOP_SEQUENCES:
        position = generated_text.find(stop)
        if position != -1:
            cut_at = min(cut_at, position)
    return generated_text[:cut_at]


def summary_text(generated_text: str) -> str:
    """The summary a model wrote, without chat end markers a decode may have left in."""
    return re.sub(r"<\|[^|>]+\|>|<end_of_turn>|</s>", "", generated_text).strip()
