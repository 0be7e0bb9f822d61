"""`anypair inspect`: the pair report on real tokenizers and a real model config (SmolLM2-135M)."""
from __future__ import annotations

import argparse

import pytest

import anypair.inspect_pair as inspect_module
from anypair.errors import UnknownModelError
from anypair.inspect_pair import (
    add_inspect_parser,
    format_report,
    inspect_pair,
    model_shape,
)

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def qwen_smollm_report():
    return inspect_pair("qwen2", SMOLLM2)


def test_report_of_a_real_pair(qwen_smollm_report):
    report = qwen_smollm_report
    assert not report.same_vocabulary
    assert report.target.vocab_size > 150_000 and report.draft.vocab_size == 49_152
    assert report.draft.model_rows == 49_152 and report.target.model_rows is None  # a family has no model
    # SmolLM2-135M has 134,515,008 parameters (its model card); the config-only estimate must match
    assert report.draft.model.total_params == 134_515_008
    assert 0 < report.intersection_size < report.draft.vocab_size
    assert 0.5 < report.sample_target_coverage < 1.0
    assert report.target.tokens_per_word > 1 and report.draft.tokens_per_word > report.target.tokens_per_word
    assert report.target.round_trip.failures == () and report.draft.round_trip.failures == ()
    assert report.warnings == ()  # SmolLM2's head is 21% of it: under the threshold
    text = format_report(report)
    assert "vocabulary intersection: " in text and "tokens per word" in text and "49,152" in text


def test_same_tokenizer_is_flagged_and_fully_covered():
    report = inspect_pair("qwen2", "qwen2")
    assert report.same_vocabulary and report.sample_target_coverage == 1.0
    assert report.intersection_size == report.target.vocab_size - len(_qwen_specials())


def _qwen_specials():
    from anypair.zoo import load_tokenizer
    from anypair.zoo import tokenizer_path

    return load_tokenizer(str(tokenizer_path("qwen2"))).special_ids


def test_head_warning(monkeypatch, qwen_smollm_report):
    # Gemma-3-270m's config: its 262k x 640 head is most of the model
    gemma3_270m = {"hidden_size": 640, "vocab_size": 262_144, "num_hidden_layers": 18, "intermediate_size": 2048,
                   "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "tie_word_embeddings": True}
    shape = model_shape({"text_config": gemma3_270m})
    assert abs(shape.total_params - 268_098_176) / 268_098_176 < 0.001  # published count, norms aside
    assert shape.head_share > 0.6
    monkeypatch.setattr(inspect_module, "HEAD_SHARE_WARNING", 0.2)
    warnings = inspect_module._warnings(qwen_smollm_report.target, qwen_smollm_report.draft, False,
                                        qwen_smollm_report.intersection_size, 0.9)
    assert len(warnings) == 1 and "LM head" in warnings[0]
    low_coverage = inspect_module._warnings(qwen_smollm_report.target, qwen_smollm_report.draft, False, 10, 0.1)
    assert any("intersection" in w for w in low_coverage)


def test_cli_parser_and_bad_names(capsys):
    parser = argparse.ArgumentParser()
    add_inspect_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["inspect", "qwen2", SMOLLM2])
    assert args.func(args) == 0
    assert "vocabulary intersection" in capsys.readouterr().out
    with pytest.raises(UnknownModelError):
        inspect_pair("qwen2", "no-such-model-or-tokenizer")


def test_unreachable_hub_id_fails_fast_with_advice(monkeypatch):
    """Offline, the answer comes without trying the network at all (fast by construction: no clock)."""
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("the hub was contacted although HF_HUB_OFFLINE is set")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError, match="hub cannot be reached"):
        inspect_pair("qwen2", "some-org/not-in-the-zoo-model")


# --- --mass: the target's probability on the intersection (mechanics, random weights) ---------


@pytest.fixture(scope="module")
def tiny_random_qwen(tmp_path_factory):
    """A one-layer random-weight Qwen2 with the real Qwen2.5 tokenizer and its 151,936 model rows."""
    import shutil

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from anypair.zoo import resolve_model

    real = resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct")
    folder = tmp_path_factory.mktemp("tiny-qwen")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(real / name, folder / name)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=151_936, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return folder


def test_mass_of_a_near_uniform_target_is_the_intersection_share(tiny_random_qwen, capsys):
    # Small random weights give a near-uniform next-token distribution, so the probability mass on
    # the intersection must be close to the share of the target's 151,936 rows that are in it.
    import re

    rows = 151_936
    parser = argparse.ArgumentParser()
    add_inspect_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["inspect", str(tiny_random_qwen), SMOLLM2, "--mass"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    intersection = int(re.search(r"vocabulary intersection: ([\d,]+) tokens", out)[1].replace(",", ""))
    mass = float(re.search(r"probability mass on the intersection .*: ([\d.]+)%", out)[1]) / 100
    assert mass == pytest.approx(intersection / rows, abs=0.02) and mass < 0.5

    model = inspect_module.load_target_model(str(tiny_random_qwen))
    same = inspect_pair(str(tiny_random_qwen), "qwen2", target_model=model)
    assert same.target.model_rows == rows
    assert same.intersection_probability_mass == pytest.approx(same.intersection_size / rows, abs=0.02)
    assert same.intersection_probability_mass > 0.9


def test_mass_needs_a_target_model():
    from anypair.errors import InputError

    with pytest.raises(InputError, match="--mass needs TARGET to be a model"):
        inspect_module.load_target_model("qwen2")
