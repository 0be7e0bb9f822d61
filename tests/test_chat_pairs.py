"""Chat works for every pair: the target renders the conversation with its own chat template; a
draft without one (a base model, the usual draft) reads the target's rendered text as raw text.
Real zoo models (gemma-3-270m has no chat template), few tokens: assisted greedy output must equal
the target's own."""
from __future__ import annotations

import pytest

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
GEMMA = "google/gemma-3-270m"
MESSAGES = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
N_NEW = 10


@pytest.fixture(scope="module")
def smol_with_gemma(smol_alone_fp32):
    from anypair import AnyPairGenerator

    # the target: the run's shared SmolLM2 member (a loaded member passes through as itself)
    return AnyPairGenerator(smol_alone_fp32.target, GEMMA, dtype="fp32", draft_length="constant",
                            num_draft_tokens=4)


def test_base_model_draft_reads_the_targets_rendered_conversation(smol_with_gemma):
    gen = smol_with_gemma
    assert gen.target.has_chat_template and not gen.draft.has_chat_template
    target_ids = gen.target.render(None, MESSAGES)
    draft_ids = gen._draft_prompt.ids(None, MESSAGES, target_ids)
    # the target's template text, chat markers included, in the draft's tokens with one BOS (the draft's)
    rendered = gen.target.hf_tokenizer.decode(target_ids, skip_special_tokens=False)
    assert "<|im_start|>user" in rendered and MESSAGES[0]["content"] in rendered
    assert gen.draft.hf_tokenizer.decode(draft_ids[1:]) == rendered
    assert draft_ids.count(gen.draft.tokenizer.bos_id) == 1 == (draft_ids[0] == gen.draft.tokenizer.bos_id)


def test_chat_with_a_base_model_draft_equals_the_target_alone(smol_with_gemma):
    gen = smol_with_gemma
    alone = gen.generate(messages=MESSAGES, max_new_tokens=N_NEW, assisted=False)
    assisted = gen.generate(messages=MESSAGES, max_new_tokens=N_NEW)
    assert not assisted.stats.draft_failed, assisted.stats.draft_failure_reason
    assert assisted.stats.draft_tokens_proposed > 0
    assert assisted.target_ids == alone.target_ids
    streamed = "".join(gen.stream(messages=MESSAGES, max_new_tokens=N_NEW))
    assert streamed == alone.text


def test_a_request_renders_the_drafts_prompt_once(smol_with_gemma, monkeypatch):
    """Its fit is checked (the draft's context) before its drafter starts: both read one rendering."""
    gen = smol_with_gemma
    renders = []
    real = gen.draft.render
    monkeypatch.setattr(gen.draft, "render", lambda *args, **kw: renders.append(args) or real(*args, **kw))
    for task in ("multiplies two numbers", "reverses a string"):  # requests no earlier test rendered
        messages = [{"role": "user", "content": f"Write a Python function that {task}."}]
        renders.clear()
        result = gen.generate(messages=messages, max_new_tokens=N_NEW)
        assert result.stats.draft_tokens_proposed > 0 and len(renders) == 1
