"""Drafters: what proposes target tokens for the target to verify (`base.Drafter`): a draft model
(`model.ModelDrafter`), prompt-lookup n-grams (`lookup`), or the two by turns (`hybrid`).

`DRAFTERS` is the one list of their names (the CLI's --drafter and --drafters, the options' check,
the request planner and the generator read it); it imports nothing heavy, so the CLI can check a
flag before torch loads.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DrafterName:
    """A drafter a generator builds by name, and whether it runs the draft model."""

    name: str
    uses_draft_model: bool
    summary: str


#: the named drafters, the default first
DRAFTERS: dict[str, DrafterName] = {d.name: d for d in (
    DrafterName("model", True, "the draft model"),
    DrafterName("lookup", False, "n-grams from prompt and output, no model"),
    DrafterName("hybrid", True, "lookup when it has a long match, the model otherwise"),
)}


def uses_draft_model(drafter: object) -> bool:
    """Whether `drafter` (a name, or a Drafter instance: it brings its own model, if any) runs the
    generator's draft model."""
    return isinstance(drafter, str) and drafter in DRAFTERS and DRAFTERS[drafter].uses_draft_model
