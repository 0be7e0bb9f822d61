"""Translation between a draft tokenizer and a target tokenizer.

- `VocabMap`: the vocabulary intersection (draft id <-> target id for identical bytes).
- `Translator`: draft-proposed bytes -> target ids, with the unstable tail marked.
- `DraftSync`: keeps the draft's context tokens in step with the committed target text.
"""
from anypair.translator.sync import DraftRealignment, DraftSync
from anypair.translator.translate import Translation, Translator
from anypair.translator.vocab_map import VocabMap

__all__ = ["VocabMap", "Translator", "Translation", "DraftRealignment", "DraftSync"]
