"""A custom drafter in a few lines: propose the tokens of a fixed snippet whenever the output so far
ends with its first token. Whatever it proposes, the output is the target's own (verification).

    python examples/custom_drafter.py [--target ID] [--max-new-tokens N]
"""
import argparse

from anypair import AnyPairGenerator
from anypair.drafters.base import Drafter
from anypair.types import Proposal


class SnippetDrafter(Drafter):
    name = "snippet"

    def __init__(self, snippet_ids):
        self.snippet_ids = snippet_ids

    def start(self, request):
        self.last = request.target_prompt_ids[-1]

    def propose(self, budget):  # a DraftBudget: max_draft_steps, max_target_tokens, stop_confidence
        if self.last in self.snippet_ids[:-1]:
            at = self.snippet_ids.index(self.last)
            return Proposal(self.snippet_ids[at + 1:][:budget.max_target_tokens], source=self.name)
        return Proposal([], source=self.name)

    def commit(self, new_target_ids):
        self.last = new_target_ids[-1]


parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--target", default="Qwen/Qwen2.5-Coder-0.5B-Instruct")
parser.add_argument("--max-new-tokens", type=int, default=24)
args = parser.parse_args()

target = AnyPairGenerator(args.target)  # target only; we bring the drafter
snippet = target.target.tokenizer.encode_continuation("    return a + b\n")
gen = AnyPairGenerator(target.target, drafter=SnippetDrafter(snippet))
result = gen.generate("def add(a, b):\n", max_new_tokens=args.max_new_tokens)
print(result.text)
print(f"accepted {result.stats.draft_tokens_accepted} of {result.stats.draft_tokens_proposed} proposed")
