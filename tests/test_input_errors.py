"""Bad input gets a one-line error that says what is wrong and what to do: from the library an
InputError (or another AnyPairError), from the CLI exit status 2 and no traceback."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anypair.errors import AnyPairError, InputError, UnknownModelError

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
REPO = Path(__file__).resolve().parent.parent


def cli(*args: str | bytes) -> subprocess.CompletedProcess:
    """The real command line in a child process (argv bytes that are not UTF-8 included)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "anypair.cli", *args], capture_output=True, env=env, timeout=300)


def assert_one_line_error(out: subprocess.CompletedProcess, *fragments: str) -> None:
    err = out.stderr.decode()
    assert out.returncode == 2, err
    assert err.startswith("anypair: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


# --- checked before any model loads: no model is needed (a model would take seconds to load) -----

@pytest.mark.parametrize("flags, fragment", [
    (["--do-sample", "--temperature", "0"], "temperature"),
    (["--do-sample", "--temperature", "inf"], "temperature"),
    (["--do-sample", "--temperature", "nan"], "temperature"),
    (["--top-p", "0"], "top_p"),
    (["--top-p", "1.5"], "top_p"),
    (["--top-k", "-1"], "top_k"),
    (["--threads", "-1"], "threads"),
    (["--threads", "0"], "threads"),
    (["-k", "0"], "num_draft_tokens"),
    (["-k", "-3"], "num_draft_tokens"),
    (["--confidence-threshold", "1.5"], "confidence_threshold"),
    (["--draft-window", "-1"], "draft_window"),
    (["--do-sample", "--seed", str(2**70)], "seed"),
])
def test_cli_rejects_bad_numbers_in_one_line(flags, fragment):
    assert_one_line_error(cli("generate", "hi", "-m", "/no/such/model/folder", *flags), fragment)


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 2**70, 1.5, True])
def test_a_seed_outside_64_bits_is_an_input_error(seed):
    from anypair.types import SamplingConfig

    with pytest.raises(InputError, match="seed must be an integer from"):
        SamplingConfig(do_sample=True, seed=seed)


@pytest.mark.parametrize("seed", [2**64 - 1, -(2**63), 0])
def test_every_seed_the_check_lets_through_seeds_a_generator(seed):
    """The bounds are the generator's own: each accepted seed works and fixes the draws."""
    import torch

    from anypair.sampling import make_generator
    from anypair.types import SamplingConfig

    config = SamplingConfig(do_sample=True, seed=seed)
    draws = [torch.rand(4, generator=make_generator(config.seed)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1])


def test_cli_rejects_argv_that_is_not_utf8():
    assert_one_line_error(cli("generate", b"caf\xe9 au lait", "--no-assisted"), "not valid Unicode", "UTF-8")


def test_cli_missing_folder_says_no_such_folder():
    assert_one_line_error(cli("generate", "hi", "-m", "./no-such-model-folder", "--no-assisted"),
                          "no such folder: ./no-such-model-folder")


def test_cli_debug_shows_the_traceback():
    out = cli("generate", "hi", "--top-p", "0", "--debug")
    assert out.returncode != 0 and b"Traceback" in out.stderr and b"InputError" in out.stderr


def test_generator_rejects_bad_options_before_loading():
    from anypair import AnyPairGenerator

    for options in ({"num_draft_tokens": 0}, {"num_draft_tokens": -3}, {"threads": 0}, {"threads": -1},
                    {"confidence_threshold": math.nan}, {"drafter": "fast"}, {"draft_length": "quick"},
                    {"sampled_drafts": "random"}, {"weights": "fp8"}, {"engine": "onnx"},
                    {"draft_engine": "onnx"}, {"backend": "onnx"}, {"linear_kernel": "blas"}, {"context": 0},
                    {"context": "long"}, {"device": ""}, {"draft_window": -5}):
        # the option is named in the error, not the missing folder: nothing was loaded first
        with pytest.raises(InputError, match=next(iter(options)).split("_")[0]):
            AnyPairGenerator("/no/such/model/folder", None, **options)


def test_sampling_config_errors_are_input_errors():
    from anypair.types import SamplingConfig

    for bad in ({"temperature": 0.0}, {"temperature": math.inf}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -1}):
        with pytest.raises(InputError):
            SamplingConfig(do_sample=True, **bad)
    assert issubclass(InputError, ValueError)  # callers that caught the old ValueError still do


# --- folders that are not (whole) models: real files, one of them damaged --------------------------

@pytest.fixture(scope="module")
def smol_folder(zoo_fetch) -> Path:
    return zoo_fetch[SMOL]


def _copy_with(tmp_path: Path, source: Path, damaged: str, data: bytes) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    for item in source.iterdir():
        if item.name != damaged:
            (folder / item.name).symlink_to(item)
    (folder / damaged).write_bytes(data)
    return folder


def test_folder_that_is_not_a_model(tmp_path):
    from anypair.zoo import load_model

    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(InputError, match="not a model folder .*config.json"):
        load_model(tmp_path)
    with pytest.raises(UnknownModelError, match="no such folder"):
        load_model(tmp_path / "missing")


def test_truncated_safetensors_names_the_file(tmp_path, smol_folder):
    from anypair.zoo import load_model

    with open(smol_folder / "model.safetensors", "rb") as handle:
        head = handle.read(1 << 20)
    folder = _copy_with(tmp_path, smol_folder, "model.safetensors", head)
    with pytest.raises(InputError, match=r"model\.safetensors is not a readable safetensors file.*truncated"):
        load_model(folder)


def test_half_written_tokenizer_json_names_the_file(tmp_path, smol_folder):
    from anypair.zoo import load_model

    folder = _copy_with(tmp_path, smol_folder, "tokenizer.json", (smol_folder / "tokenizer.json").read_bytes()[:5000])
    with pytest.raises(InputError, match=r"tokenizer\.json is not valid JSON"):
        load_model(folder)


# --- requests: a real model, rejected before it generates anything -------------------------------

@pytest.fixture(scope="module")
def smol_alone(smol_alone_fp32):
    return smol_alone_fp32


@pytest.mark.parametrize("request_args, fragment", [
    ({"prompt": "caf\udce9"}, "lone surrogate"),
    ({"messages": [{"role": "user", "content": "caf\udce9"}]}, "lone surrogate"),
    ({"messages": [{"content": "hi"}]}, "'role'"),
    ({"messages": [{"role": "user", "content": None}]}, "'content'"),
    ({"messages": [{"role": "user"}]}, "'content'"),
    ({"messages": "hi"}, "list"),
])
def test_bad_requests_are_input_errors(smol_alone, request_args, fragment):
    with pytest.raises(InputError, match=fragment) as caught:
        smol_alone.generate(max_new_tokens=2, **request_args)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, AnyPairError)
