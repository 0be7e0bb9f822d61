"""`anypair inspect TARGET DRAFT`: how well two models' tokenizers fit together for drafting.

Reports vocabulary sizes, the size of the vocabulary intersection and how much of a sample text's
target tokens it covers, tokens per word for each tokenizer, exact byte round-trips on hard
strings, and warnings (a draft whose LM head is most of its parameters, a tiny intersection, a
tokenizer that does not give back the bytes it was given). Model configs are read from
config.json only; weights are loaded only for `--mass`, which runs the target over the sample
text and reports the share of its probability the intersection covers.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from anypair.errors import AnyPairError
from anypair.tokenization.base import TokenizerAdapter

DEFAULT_SAMPLE_TEXT = """\
def moving_average(values: list[float], window: int = 3) -> list[float]:
\t\"\"\"Average of each run of `window` values.\"\"\"
    if window <= 0:
        raise ValueError("window must be positive")
    return [sum(values[i : i + window]) / window for i in range(len(values) - window + 1)]

The committee met on Tuesday to review the budget; members agreed that the new library's
opening hours (9:00-17:30) should stay as they are until the survey results come back.
東京の天気は晴れです。明日は雨が降るかもしれません。 我们明天见！
Great job 🎉👍🏽 — naïve café façade, 3.14159 × 2 ≈ 6.28.
"""

#: strings every tokenizer should give back byte for byte (tabs, space runs, CJK, emoji with
#: modifiers, combining marks, text that looks like special tokens, leading spaces, CRLF)
HARD_STRINGS: tuple[str, ...] = (
    "\tif x:\n\t\treturn  y   # two  spaces",
    "    indented\n        more\n",
    " leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "中文字符和日本語のテキスト",
    "한국어 텍스트",
    "emoji 😀👍🏽🇫🇷👨‍👩‍👧",
    "e\u0301 (combining acute) vs \u00e9",
    "\u09df Bengali composition exclusion",
    "<|im_end|> <s> </s> <bos> <start_of_turn>user <|endoftext|>",
    "<0x41> looks like a byte piece",
    "line one\r\nline two\r\n",
    "\u00a0non-breaking\u2009thin space",
    "x" * 64,
)

#: warn when the draft's LM head (vocab x hidden) is more than this share of its parameters
HEAD_SHARE_WARNING = 0.25
#: warn when the intersection covers less than this share of the sample's target tokens
COVERAGE_WARNING = 0.5

TokenizerLike = Union[str, Path, TokenizerAdapter]


@dataclass(frozen=True)
class ModelShape:
    """What config.json says about a model's size (parameters estimated, weights not read)."""

    vocab_rows: int
    hidden_size: int
    total_params: int
    tied_embeddings: bool

    @property
    def head_params(self) -> int:
        return self.vocab_rows * self.hidden_size

    @property
    def head_share(self) -> float:
        return self.head_params / self.total_params if self.total_params else 0.0


@dataclass(frozen=True)
class RoundTrip:
    """Exact byte round-trips of HARD_STRINGS through one tokenizer."""

    n_strings: int
    failures: tuple[str, ...]


@dataclass(frozen=True)
class TokenizerSide:
    name: str
    vocab_size: int
    model_rows: Optional[int]  # LM-head rows when the model config is known
    sample_tokens: int
    tokens_per_word: float
    round_trip: RoundTrip
    model: Optional[ModelShape]


@dataclass(frozen=True)
class PairReport:
    target: TokenizerSide
    draft: TokenizerSide
    same_vocabulary: bool
    intersection_size: int
    #: share of the sample text's target tokens whose bytes are also a draft token
    sample_target_coverage: float
    sample_words: int
    warnings: tuple[str, ...] = field(default=())
    #: mean target probability (temperature 1) on intersection tokens over the sample's positions;
    #: None unless measured (`--mass`): it bounds how often sampled drafts can be accepted
    intersection_probability_mass: Optional[float] = None


# -- loading -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedSide:
    """Where a TARGET/DRAFT argument's tokenizer lives, and its model config when it is a model."""

    tokenizer_location: Union[str, TokenizerAdapter]
    config: Optional[dict]


def resolve_side(spec: TokenizerLike) -> ResolvedSide:
    """A loaded adapter, a zoo tokenizer family ("qwen2"), a tokenizer file, or a model (zoo name,
    local folder, hub id). Only a model's config.json is read, never its weights."""
    if isinstance(spec, TokenizerAdapter):
        return ResolvedSide(spec, None)
    name = str(spec)
    from anypair.zoo import TOKENIZER_FAMILIES, resolve_model, tokenizer_path

    if name in TOKENIZER_FAMILIES:
        return ResolvedSide(str(tokenizer_path(name)), None)
    if Path(name).expanduser().is_file():
        return ResolvedSide(name, None)
    resolved = resolve_model(name)  # raises UnknownModelError with advice for anything else
    folder = Path(_folder_of(resolved)).expanduser()
    if folder.is_dir():
        config_file = folder / "config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else None
        return ResolvedSide(str(folder), config)
    return ResolvedSide(str(resolved), _hub_config(str(resolved)))


def _hub_config(hub_id: str) -> Optional[dict]:
    from anypair.zoo.resolve import UnknownModelError, hub_reachable

    if not hub_reachable():  # fail in seconds, not after transformers' retries
        raise UnknownModelError(
            f"{hub_id!r} is neither a zoo model nor a local folder, and the Hugging Face hub cannot be "
            "reached. Use a zoo name (`anypair fetch --list`), a local model folder or a tokenizer file."
        )
    try:  # transformers fetches config.json alone
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(hub_id).to_dict()
    except (OSError, ValueError):
        return None


def _load_tokenizer(location: Union[str, TokenizerAdapter]) -> TokenizerAdapter:
    if isinstance(location, TokenizerAdapter):
        return location
    from anypair.zoo import load_tokenizer

    return load_tokenizer(location)


def _folder_of(resolved) -> str:
    for attribute in ("folder", "path", "local_path"):
        if hasattr(resolved, attribute):
            return str(getattr(resolved, attribute))
    return str(resolved)


def model_shape(config: dict) -> Optional[ModelShape]:
    """Parameter count of a decoder-only transformer estimated from its config (llama/qwen2/gemma
    layouts: attention with grouped KV heads, gated MLP, norms, embedding and LM head)."""
    config = config.get("text_config", config)
    try:
        hidden = int(config["hidden_size"])
        vocab = int(config["vocab_size"])
        layers = int(config["num_hidden_layers"])
        intermediate = int(config["intermediate_size"])
        heads = int(config["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        return None
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    tied = bool(config.get("tie_word_embeddings", False))
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlp = 3 * hidden * intermediate
    per_layer = attention + mlp + 2 * hidden
    total = layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
    return ModelShape(vocab_rows=vocab, hidden_size=hidden, total_params=total, tied_embeddings=tied)


# -- measuring ---------------------------------------------------------------------------------
def round_trip(tok: TokenizerAdapter, strings: tuple[str, ...] = HARD_STRINGS) -> RoundTrip:
    failures = []
    for text in strings:
        try:
            ok = tok.decode_bytes(tok.encode_continuation(text)) == text.encode("utf-8")
        except AnyPairError:
            ok = False
        if not ok:
            failures.append(text)
    return RoundTrip(n_strings=len(strings), failures=tuple(failures))


def _side(tok: TokenizerAdapter, config: Optional[dict], sample_ids: list[int], n_words: int) -> TokenizerSide:
    shape = model_shape(config) if config else None
    return TokenizerSide(
        name=tok.name,
        vocab_size=tok.vocab_size,
        model_rows=shape.vocab_rows if shape else None,
        sample_tokens=len(sample_ids),
        tokens_per_word=len(sample_ids) / max(n_words, 1),
        round_trip=round_trip(tok),
        model=shape,
    )


def _warnings(target: TokenizerSide, draft: TokenizerSide, same_vocabulary: bool,
              intersection_size: int, coverage: float) -> list[str]:
    warnings = []
    if draft.model is not None and draft.model.head_share > HEAD_SHARE_WARNING:
        warnings.append(
            f"the draft's LM head ({draft.model.vocab_rows:,} x {draft.model.hidden_size:,} = "
            f"{draft.model.head_params / 1e6:.0f}M params) is {100 * draft.model.head_share:.0f}% of its "
            f"~{draft.model.total_params / 1e6:.0f}M parameters: every draft step pays for it; a draft with a "
            "smaller vocabulary will be cheaper per token"
        )
    if not same_vocabulary and coverage < COVERAGE_WARNING:
        warnings.append(
            f"the vocabulary intersection ({intersection_size:,} tokens) covers only {100 * coverage:.0f}% of the "
            "sample's target tokens: token-level (sampling) drafting will rarely propose; text-level greedy "
            "drafting still works"
        )
    for side, role in ((target, "target"), (draft, "draft")):
        if side.round_trip.failures:
            shown = ", ".join(repr(s[:30]) for s in side.round_trip.failures[:3])
            warnings.append(
                f"the {role} tokenizer does not give back the exact bytes of {len(side.round_trip.failures)} of "
                f"{side.round_trip.n_strings} hard strings ({shown}); text with such characters will not be drafted"
            )
    return warnings


def inspect_pair(target: TokenizerLike, draft: TokenizerLike, sample_text: Optional[str] = None,
                 target_model=None) -> PairReport:
    """Measure how well `draft` can draft for `target` (names, paths or loaded adapters).

    With `target_model` (a transformers causal LM or a `ModelBackend` of the target) the report
    also carries the target's probability mass on the intersection over the sample text."""
    from anypair.tokenization import same_vocabulary as same_vocabulary_of
    from anypair.translator import VocabMap

    sample = DEFAULT_SAMPLE_TEXT if sample_text is None else sample_text
    target_side_spec, draft_side_spec = resolve_side(target), resolve_side(draft)
    target_tok = _load_tokenizer(target_side_spec.tokenizer_location)
    draft_tok = _load_tokenizer(draft_side_spec.tokenizer_location)
    target_config, draft_config = target_side_spec.config, draft_side_spec.config
    if target_config:
        target_tok.set_model_vocab_size(int(target_config.get("text_config", target_config).get("vocab_size", 0)))
    if draft_config:
        draft_tok.set_model_vocab_size(int(draft_config.get("text_config", draft_config).get("vocab_size", 0)))
    vocab_map = VocabMap(target_tok, draft_tok)
    target_sample_ids = target_tok.encode_continuation(sample)
    draft_sample_ids = draft_tok.encode_continuation(sample)
    n_words = len(sample.split())
    target_side = _side(target_tok, target_config, target_sample_ids, n_words)
    draft_side = _side(draft_tok, draft_config, draft_sample_ids, n_words)
    same = bool(same_vocabulary_of(target_tok, draft_tok))
    coverage = vocab_map.target_coverage(target_sample_ids)
    return PairReport(
        target=target_side,
        draft=draft_side,
        same_vocabulary=same,
        intersection_size=vocab_map.size,
        sample_target_coverage=coverage,
        sample_words=n_words,
        warnings=tuple(_warnings(target_side, draft_side, same, vocab_map.size, coverage)),
        intersection_probability_mass=(
            None if target_model is None else _probability_mass(target_model, target_tok, vocab_map, sample)),
    )


def _probability_mass(target_model, target_tok: TokenizerAdapter, vocab_map, sample: str) -> float:
    from anypair.sampling.mass import intersection_probability_mass

    return intersection_probability_mass(target_model, target_tok, vocab_map, sample)


def load_target_model(target: TokenizerLike):
    """The target's weights (fp32, CPU) for `--mass`; TARGET must name a model, not a tokenizer."""
    from anypair.errors import InputError

    side = resolve_side(target)
    if side.config is None:
        raise InputError(
            f"--mass needs TARGET to be a model (zoo name, hub id or model folder); {target!s} is a tokenizer")
    import torch

    from anypair.zoo import load_model

    model, _ = load_model(side.tokenizer_location, dtype=torch.float32)
    return model


# -- output ------------------------------------------------------------------------------------
def _rows_text(side: TokenizerSide) -> str:
    return f"{side.model_rows:,}" if side.model_rows is not None else "unknown"


def _params_text(side: TokenizerSide) -> str:
    if side.model is None:
        return "unknown"
    return f"~{side.model.total_params / 1e6:,.0f}M (head {100 * side.model.head_share:.0f}%)"


def format_report(report: PairReport) -> str:
    """The report as a plain-text table followed by its warnings."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="anypair inspect", show_lines=False)
    table.add_column("")
    table.add_column("target", justify="right")
    table.add_column("draft", justify="right")
    t, d = report.target, report.draft
    table.add_row("tokenizer", t.name, d.name)
    table.add_row("vocabulary (tokenizer ids)", f"{t.vocab_size:,}", f"{d.vocab_size:,}")
    table.add_row("model rows (LM head)", _rows_text(t), _rows_text(d))
    table.add_row("parameters (from config)", _params_text(t), _params_text(d))
    table.add_row(f"tokens on sample ({report.sample_words} words)", f"{t.sample_tokens}", f"{d.sample_tokens}")
    table.add_row("tokens per word", f"{t.tokens_per_word:.2f}", f"{d.tokens_per_word:.2f}")
    table.add_row("exact round-trip (hard strings)",
                  f"{t.round_trip.n_strings - len(t.round_trip.failures)}/{t.round_trip.n_strings}",
                  f"{d.round_trip.n_strings - len(d.round_trip.failures)}/{d.round_trip.n_strings}")
    console = Console(width=110, record=True, force_terminal=False, color_system=None)
    with console.capture() as capture:
        console.print(table)
    lines = [capture.get().rstrip()]
    lines.append(f"same vocabulary: {'yes' if report.same_vocabulary else 'no'}")
    lines.append(f"vocabulary intersection: {report.intersection_size:,} tokens "
                 f"({100 * report.intersection_size / max(t.vocab_size, 1):.1f}% of the target's, "
                 f"{100 * report.intersection_size / max(d.vocab_size, 1):.1f}% of the draft's)")
    lines.append(f"sample target tokens covered by the intersection: {100 * report.sample_target_coverage:.1f}%")
    if report.intersection_probability_mass is not None:
        lines.append("target probability mass on the intersection (sample text, temperature 1): "
                     f"{100 * report.intersection_probability_mass:.1f}%")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------
def add_inspect_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "inspect", help="how well a draft's tokenizer fits a target's (vocabularies, intersection, round-trips)")
    parser.add_argument("target", help="target model or tokenizer (zoo name, hub id, folder or tokenizer file)")
    parser.add_argument("draft", help="draft model or tokenizer")
    parser.add_argument("--sample-file", help="measure coverage and tokens per word on this text file "
                        "(default: a built-in mix of code, prose, CJK and emoji)")
    parser.add_argument("--mass", action="store_true", help="load the target model and report the share of "
                        "its probability (temperature 1) that the intersection covers on the sample text: an "
                        "estimate of how well sampling will accelerate (costs one target forward pass)")
    parser.set_defaults(func=run_inspect)
    return parser


def run_inspect(args: argparse.Namespace) -> int:
    sample = None
    if args.sample_file:
        try:
            sample = Path(args.sample_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            from anypair.errors import InputError

            raise InputError(f"cannot read --sample-file {args.sample_file!r} as UTF-8 text: {error}") from error
    target_model = load_target_model(args.target) if args.mass else None
    print(format_report(inspect_pair(args.target, args.draft, sample_text=sample, target_model=target_model)))
    return 0
