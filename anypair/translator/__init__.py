"""Translation between a draft tokenizer and a target tokenizer.

- `VocabMap` (vocab_map.py): the vocabulary intersection (draft id <-> target id for identical bytes).
- translate.py, one round's translation both ways: `Translator` (draft-proposed bytes -> target ids,
  the unstable tail marked) and `DraftSync` (the draft's context tokens kept in step with the
  committed target text).
- utf8.py: the byte-level helpers both use.
"""
from anypair.translator.translate import DraftRealignment, DraftSync, Translation, Translator
from anypair.translator.vocab_map import VocabMap

__all__ = ["VocabMap", "Translator", "Translation", "DraftRealignment", "DraftSync"]
