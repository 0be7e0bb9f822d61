"""Constrained decoding (structured output) that stays exact: the target's tokens follow a grammar.

A `TokenConstraint` holds a grammar's state over the request's committed target tokens. The loop
(`generation.loop`) uses it three ways each round:

1. `allowed_prefix(proposal)`: a draft's proposal is cut at the first token the grammar rejects
   (the target could never emit it, so scoring it would only cost time);
2. `mask_rows(logits, proposal)`: row i of the target's logits over [last token, *proposal] gets
   -inf at every token the grammar forbids in the state after the committed tokens and proposal[:i]:
   the mask the target alone applies at that position, since the target alone would have emitted
   exactly those tokens before it. The verifier then takes its argmax or keyed race on masked rows,
   so the text is the target's own under the same constraint, greedy or seeded;
3. `commit(ids)`: the tokens the round emitted move the grammar on.

`LogitBias` (OpenAI's `logit_bias`) is the simplest: a fixed number added to chosen tokens' logits
at every position, as the target alone adds it. `RepetitionPenalties` (OpenAI's frequency and
presence penalties) subtracts from each generated token's logit by how often it was generated
before the row's position (the committed tokens and the proposal before the row), as the target
alone does with the same tokens behind it. `Constraints` applies several in order.

`GrammarConstraint` is the grammar, on llguidance (Microsoft's low-level guidance
library: a token mask in tens of microseconds for JSON schemas, regexes and Lark grammars; chosen by
measured per-token cost, `evaluation/bench_structured.py`). `Grammar` is the request's description of
the constraint, checked before anything runs; `GrammarCompiler` makes a request's constraint from it
on a target's tokenizer (built once per tokenizer: reading a 150k vocabulary takes a while).
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence

import torch

from anypair.errors import InputError

GrammarKind = Literal["json_object", "json_schema", "regex", "lark"]


class TokenConstraint(ABC):
    """A grammar's state over a request's committed target tokens (see the module's docstring)."""

    @abstractmethod
    def allowed_prefix(self, target_ids: Sequence[int]) -> int:
        """How many of `target_ids`, from the committed state, the grammar accepts (state unchanged)."""

    @abstractmethod
    def mask_rows(self, logits: torch.Tensor, proposal: Sequence[int]) -> None:
        """In place: row i of `logits` ([len(proposal) + 1, V]) masked in the state after the committed
        tokens and proposal[:i]. `proposal` must be within `allowed_prefix`. State unchanged."""

    @abstractmethod
    def commit(self, target_ids: Sequence[int]) -> None:
        """The emitted tokens move the grammar on."""


class LogitBias(TokenConstraint):
    """A fixed bias added to the logits of some tokens at every position (OpenAI's logit_bias: -100
    all but bans a token, 100 all but forces it). Nothing is cut from a proposal: whether a biased
    token is the target's choice is the verifier's to say, on the biased rows."""

    def __init__(self, bias: dict[int, float]) -> None:
        self.ids = torch.tensor(sorted(bias), dtype=torch.long)
        self.values = torch.tensor([bias[i] for i in sorted(bias)], dtype=torch.float32)

    def allowed_prefix(self, target_ids: Sequence[int]) -> int:
        return len(target_ids)

    def mask_rows(self, logits: torch.Tensor, proposal: Sequence[int]) -> None:
        with torch.inference_mode():
            logits[:, self.ids] += self.values.to(logits.dtype)

    def commit(self, target_ids: Sequence[int]) -> None:
        pass


class RepetitionPenalties(TokenConstraint):
    """OpenAI's frequency and presence penalties: at each position, a generated token's logit less
    `frequency` x the times it was generated before and `presence` once it was (prompt tokens do
    not count, as at OpenAI). Rows are penalised from the counts alone, in the order of the token
    ids, so a row's figures are bitwise the same however the tokens before it were verified."""

    def __init__(self, frequency: float, presence: float) -> None:
        self.frequency = frequency
        self.presence = presence
        self.counts: dict[int, int] = {}  # generated token id -> times committed

    def allowed_prefix(self, target_ids: Sequence[int]) -> int:
        return len(target_ids)

    def _penalise(self, row: torch.Tensor, counts: dict[int, int]) -> None:
        if not counts:
            return
        ids = sorted(counts)
        times = torch.tensor([counts[i] for i in ids], dtype=torch.float32)
        penalty = times * self.frequency + (times > 0).to(torch.float32) * self.presence
        row[torch.tensor(ids, dtype=torch.long)] -= penalty.to(row.dtype)

    def mask_rows(self, logits: torch.Tensor, proposal: Sequence[int]) -> None:
        counts = dict(self.counts)
        with torch.inference_mode():
            for i in range(len(proposal) + 1):
                self._penalise(logits[i], counts)
                if i < len(proposal):
                    counts[proposal[i]] = counts.get(proposal[i], 0) + 1

    def commit(self, target_ids: Sequence[int]) -> None:
        for token in target_ids:
            self.counts[token] = self.counts.get(token, 0) + 1


class Constraints(TokenConstraint):
    """Several constraints at once, applied in order (a bias, then a grammar's mask)."""

    def __init__(self, parts: Sequence[TokenConstraint]) -> None:
        self.parts = list(parts)

    def allowed_prefix(self, target_ids: Sequence[int]) -> int:
        return min(part.allowed_prefix(target_ids) for part in self.parts)

    def mask_rows(self, logits: torch.Tensor, proposal: Sequence[int]) -> None:
        for part in self.parts:
            part.mask_rows(logits, proposal)

    def commit(self, target_ids: Sequence[int]) -> None:
        for part in self.parts:
            part.commit(target_ids)


@dataclass(frozen=True)
class Grammar:
    """What a request's text must follow: OpenAI's `response_format` json_object (any JSON object)
    or json_schema (`source`: the schema as JSON text), a regular expression, or a Lark grammar
    (llguidance's dialect)."""

    kind: GrammarKind
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("json_object", "json_schema", "regex", "lark"):
            raise InputError(f"grammar kind must be json_object, json_schema, regex or lark, got {self.kind!r}")
        if self.kind != "json_object" and not self.source:
            raise InputError(f"a {self.kind} grammar needs its source text")

    @classmethod
    def json_schema(cls, schema: dict[str, Any]) -> Grammar:
        # the order of the properties is kept: llguidance has the text follow it, as OpenAI does
        return cls("json_schema", json.dumps(schema))

    def llguidance_grammar(self) -> str:
        """The grammar in llguidance's own format (raises InputError when the library refuses it)."""
        import llguidance

        try:
            if self.kind == "json_object":
                return llguidance.LLMatcher.grammar_from_json_schema({"type": "object"})
            if self.kind == "json_schema":
                return llguidance.LLMatcher.grammar_from_json_schema(self.source)
            if self.kind == "regex":
                return llguidance.LLMatcher.grammar_from_regex(self.source)
            return llguidance.LLMatcher.grammar_from_lark(self.source)
        except (ValueError, TypeError) as exc:
            raise InputError(f"the {self.kind} cannot be used as a constraint: {exc}") from None

    def check(self) -> None:
        """Raise InputError when llguidance refuses the grammar (a schema with an unknown type, a
        regex that does not parse), before a request is queued."""
        import llguidance

        problem = llguidance.LLMatcher.validate_grammar(self.llguidance_grammar())
        if problem:
            raise InputError(f"the {self.kind} cannot be used as a constraint: {problem}")


class GrammarCompiler:
    """Makes `GrammarConstraint`s for one target tokenizer (a Hugging Face tokenizer). `vocab_size`
    is the width of the target's logits (padded rows included: the mask forbids them too);
    `eos_ids` the target's end-of-sequence ids, every one allowed exactly where the grammar allows
    its end."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, eos_ids: frozenset[int]) -> None:
        import llguidance.hf

        self.tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size)
        self.vocab_size = vocab_size
        self.eos_ids = eos_ids
        # the first mask on a tokenizer builds llguidance's caches over the whole vocabulary (1.6 s on
        # Qwen's 151,936 tokens, 2 cores; 0.1 ms a token after): paid here, not by a request's first token
        GrammarConstraint(self, Grammar("json_object")).mask_rows(torch.zeros(1, vocab_size), [])

    def constraint(self, grammar: Grammar) -> GrammarConstraint:
        return GrammarConstraint(self, grammar)


class GrammarConstraint(TokenConstraint):
    """One request's grammar state on llguidance's matcher."""

    def __init__(self, compiler: GrammarCompiler, grammar: Grammar) -> None:
        import llguidance
        import llguidance.torch

        self._llg_torch = llguidance.torch
        self.matcher = llguidance.LLMatcher(compiler.tokenizer, grammar.llguidance_grammar(), log_level=1)
        if self.matcher.is_error():
            raise InputError(f"the {grammar.kind} cannot be used as a constraint: {self.matcher.get_error()}")
        self.vocab_size = compiler.vocab_size
        # llguidance knows one end-of-sequence token; the target may end on others (Qwen: <|im_end|>
        # and <|endoftext|>): each is allowed where the grammar's own is
        self.grammar_eos = compiler.tokenizer.eos_token
        self.other_eos = sorted(t for t in compiler.eos_ids if t != self.grammar_eos and t < compiler.vocab_size)
        self.eos_ids = frozenset((*self.other_eos, self.grammar_eos))
        self._bitmask: Optional[torch.Tensor] = None

    def _bitmasks(self, rows: int) -> torch.Tensor:
        if self._bitmask is None or self._bitmask.shape[0] < rows:
            self._bitmask = self._llg_torch.allocate_token_bitmask(max(rows, 8), self.vocab_size)
        return self._bitmask[:rows]

    def _fail(self, what: str) -> RuntimeError:
        return RuntimeError(f"the grammar constraint failed {what}: {self.matcher.get_error()}")

    def allowed_prefix(self, target_ids: Sequence[int]) -> int:
        if not target_ids:
            return 0
        return self.matcher.validate_tokens(list(target_ids))

    def mask_rows(self, logits: torch.Tensor, proposal: Sequence[int]) -> None:
        rows = len(proposal) + 1
        bitmask = self._bitmasks(rows)
        consumed = 0
        try:
            for i in range(rows):
                self._llg_torch.fill_next_token_bitmask(self.matcher, bitmask, i)
                if i < len(proposal):
                    if not self.matcher.consume_token(proposal[i]):
                        raise self._fail(f"on proposed token {proposal[i]} (not within allowed_prefix)")
                    consumed += 1
        finally:
            if consumed:
                self.matcher.rollback(consumed)
        if self.other_eos:
            self._allow_other_eos(bitmask)
        with torch.inference_mode():
            self._llg_torch.apply_token_bitmask_inplace(logits, bitmask)

    def _allow_other_eos(self, bitmask: torch.Tensor) -> None:
        """Each of the target's other end ids allowed in the rows where the grammar's own is."""
        eos = self.grammar_eos
        ends_here = ((bitmask[:, eos // 32] >> (eos % 32)) & 1).bool()
        for token in self.other_eos:
            bit = torch.tensor(1 << (token % 32), dtype=torch.int64).to(torch.int32)
            word = bitmask[:, token // 32]
            bitmask[:, token // 32] = torch.where(ends_here, word | bit, word & ~bit)

    def commit(self, target_ids: Sequence[int]) -> None:
        for token in target_ids:
            if token in self.eos_ids:  # the request ends here: nothing follows
                return
            if not self.matcher.consume_token(token):
                raise self._fail(f"on emitted token {token}")
