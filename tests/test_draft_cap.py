"""`num_draft_tokens` (-k) is honoured as a cap on every round's proposal with the default
settings (adaptive draft length, confidence stopping), not only by the constant policy."""
from __future__ import annotations

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n"
CAP = 2


def test_num_draft_tokens_caps_proposals_with_the_defaults(smol_alone_fp32):
    from anypair import AnyPairGenerator
    from anypair.types import SamplingConfig

    # same vocabulary: one draft step proposes exactly one target token; the target is the run's
    # shared SmolLM2 member (a loaded member passes through as itself)
    gen = AnyPairGenerator(smol_alone_fp32.target, SMOL, dtype="fp32", num_draft_tokens=CAP)
    drafter = gen._model_drafter(SamplingConfig(), None)  # the cached greedy drafter that generate() uses
    asked, proposed = [], []
    propose_steps = drafter.propose_steps  # what the scheduler runs: the proposal, its draft steps yielded

    def recording_propose_steps(budget):
        proposal = yield from propose_steps(budget)
        asked.append(budget.max_draft_steps)
        proposed.append(len(proposal))
        return proposal

    drafter.propose_steps = recording_propose_steps
    assisted = gen.generate(PROMPT, max_new_tokens=24)
    assert assisted.target_ids == gen.generate(PROMPT, max_new_tokens=24, assisted=False).target_ids
    assert asked and max(asked) <= CAP and max(proposed) <= CAP, (asked, proposed)
