"""Turn a verified GGUF into a plain Hugging Face folder (bf16 safetensors, tokenizer, generation config).

transformers dequantizes the GGUF once; the folder then loads in seconds. The conversion is written to
a scratch folder and renamed into place only after its checks pass, with a marker file, so an
interrupted run never leaves a half-written model behind.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from anypair.errors import FetchError
from anypair.home import file_stamp
from anypair.zoo.integrity import sha256_of
from anypair.zoo.paths import COMPLETE_MARKER, models_dir, scratch_dir
from anypair.zoo.registry import ModelAsset

_BOS_PROBE_TEXT = "Hello"
#: what transformers needs to read a GGUF (both are dependencies in pyproject.toml)
GGUF_CONVERSION_PACKAGES = ("gguf", "accelerate")


@dataclass(frozen=True)
class ConversionRecord:
    """Written as the marker file of a finished conversion."""

    hub_id: str
    gguf_sha256: str
    dtype: str
    transformers_version: str
    seconds: float
    vocab_rows: int
    tokenizer_length: int
    has_chat_template: bool
    #: SHA-256 of every file written: checked before use (see file_stamps) and by `anypair fetch --verify`
    file_sha256: dict[str, str] = field(default_factory=dict)
    #: [size, mtime ns] of every file written: a file whose stamp changed is hashed again before it is used
    file_stamps: dict[str, list[int]] = field(default_factory=dict)


def converted_dir(model: ModelAsset) -> Path:
    return models_dir() / model.folder_name


def is_converted(model: ModelAsset) -> bool:
    return (converted_dir(model) / COMPLETE_MARKER).is_file()


def require_gguf_support() -> None:
    """transformers needs both of these to read a GGUF; say so before a long download is wasted."""
    missing = [name for name in GGUF_CONVERSION_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise FetchError(
            f"Converting GGUF models needs the Python package(s) {', '.join(missing)}: "
            f"`pip install {' '.join(missing)}`, then run `anypair fetch` again."
        )


def _load_dequantized(gguf: Path, dtype):
    from transformers import AutoModelForCausalLM

    try:
        from transformers import GgufConfig
    except ImportError:  # transformers before GgufConfig always dequantized
        extra = {}
    else:
        extra = {"quantization_config": GgufConfig(dequantize=True)}
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype, **extra)
    # The weights are plain dense tensors now; forget the GGUF origin so save_pretrained writes a normal checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def _trimmed_tokenizer_json(tokenizer_json: Path, last_token_id: int | None, scratch: Path) -> Path:
    """The family's tokenizer.json without added tokens past `last_token_id` (a later model's additions)."""
    if last_token_id is None:
        return tokenizer_json
    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    spec["added_tokens"] = [token for token in spec["added_tokens"] if token["id"] <= last_token_id]
    if max(spec["model"]["vocab"].values()) > last_token_id:
        raise FetchError(f"{tokenizer_json} has base tokens past id {last_token_id}; it does not fit this model.")
    trimmed = scratch / "family-tokenizer.json"
    trimmed.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return trimmed


def _build_tokenizer(model: ModelAsset, gguf: Path, tokenizer_json: Path | None, scratch: Path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from_gguf = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tokenizer_json is None:
        tokenizer = from_gguf
    else:
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_file=str(_trimmed_tokenizer_json(tokenizer_json, model.last_token_id, scratch)),
            bos_token=from_gguf.bos_token,
            eos_token=from_gguf.eos_token,
            unk_token=from_gguf.unk_token,
            pad_token=from_gguf.pad_token,
        )
        if from_gguf.chat_template:
            tokenizer.chat_template = from_gguf.chat_template
        _check_same_special_ids(model, from_gguf, tokenizer)
    if model.add_bos_token is not None:
        tokenizer.add_bos_token = model.add_bos_token
    return tokenizer


def _check_same_special_ids(model: ModelAsset, from_gguf, replacement) -> None:
    """The replacement tokenizer must number the model's special tokens as the GGUF does."""
    for role in ("bos_token", "eos_token", "pad_token", "unk_token"):
        token = getattr(from_gguf, role)
        if token is None:
            continue
        gguf_id, new_id = from_gguf.convert_tokens_to_ids(token), replacement.convert_tokens_to_ids(token)
        if gguf_id != new_id:
            raise FetchError(f"{model.hub_id}: {role} {token!r} is id {gguf_id} in the GGUF but {new_id} in the "
                             f"tokenizer.json of family {model.tokenizer_family!r}; the pinned files do not match.")


def _check_folder(model: ModelAsset, folder: Path, expects_chat_template: bool) -> tuple[int, int, bool]:
    """Reload what was written and check the pitfalls; returns (vocab rows, tokenizer length, chat template?)."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    problems = []
    if len(tokenizer) > config.vocab_size:
        problems.append(f"tokenizer has {len(tokenizer)} tokens but the model only {config.vocab_size} rows")
    if tokenizer.bos_token_id is not None and model.add_bos_token is False:
        if tokenizer.bos_token_id in tokenizer(_BOS_PROBE_TEXT).input_ids:
            problems.append(f"tokenizer prepends BOS id {tokenizer.bos_token_id} but must not")
    if model.add_bos_token is True and tokenizer(_BOS_PROBE_TEXT).input_ids[:1] != [tokenizer.bos_token_id]:
        problems.append("tokenizer does not prepend BOS but must")
    has_template = bool(tokenizer.chat_template)
    if expects_chat_template and not has_template:
        problems.append("the GGUF's chat template was lost")
    if (folder / "tokenizer.model").exists():
        problems.append("a tokenizer.model (GGUF copy) was left in the folder")
    if problems:
        raise FetchError(f"Converting {model.hub_id} produced a bad folder: {'; '.join(problems)}.")
    return config.vocab_size, len(tokenizer), has_template


@contextlib.contextmanager
def _transformers_silenced():
    """A conversion that shows one line at most (none with `anypair fetch --quiet`): transformers' info logs
    off, and what the libraries write to sys.stderr themselves (the GGUF reader's own tqdm bar, which no
    transformers setting reaches) kept from the terminal; everything is restored afterwards, and errors
    still raise."""
    from transformers.utils import logging as transformers_logging

    bars, verbosity = transformers_logging.is_progress_bar_enabled(), transformers_logging.get_verbosity()
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()


def convert_gguf(model: ModelAsset, gguf: Path, *, tokenizer_json: Path | None, progress: bool = True) -> Path:
    """Dequantize `gguf` to bf16 and write the HF folder for `model`; returns the folder."""
    import torch
    import transformers

    started = time.perf_counter()
    scratch = scratch_dir("convert-" + model.folder_name)
    (scratch / "tokenizer-source").mkdir()
    try:
        if progress:  # the one line of the step: the libraries' own bars and notices are kept off the terminal
            print(f"Converting {model.hub_id} from GGUF (dequantizing to bfloat16) ...", file=sys.stderr, flush=True)
        with _transformers_silenced():
            network = _load_dequantized(gguf, torch.bfloat16)
            network.save_pretrained(scratch)
            del network
            tokenizer = _build_tokenizer(model, gguf, tokenizer_json, scratch / "tokenizer-source")
            tokenizer.save_pretrained(scratch)
        shutil.rmtree(scratch / "tokenizer-source", ignore_errors=True)
        # Some transformers versions write the whole GGUF back out as tokenizer.model; HF folders never need it.
        (scratch / "tokenizer.model").unlink(missing_ok=True)
        vocab_rows, tokenizer_length, has_template = _check_folder(model, scratch, bool(tokenizer.chat_template))
        record = ConversionRecord(
            hub_id=model.hub_id, gguf_sha256=model.gguf_sha256, dtype="bfloat16",
            transformers_version=transformers.__version__, seconds=round(time.perf_counter() - started, 1),
            vocab_rows=vocab_rows, tokenizer_length=tokenizer_length, has_chat_template=has_template,
            file_sha256={path.name: sha256_of(path) for path in sorted(scratch.iterdir()) if path.is_file()},
            file_stamps={path.name: file_stamp(path) for path in sorted(scratch.iterdir()) if path.is_file()},
        )
        (scratch / COMPLETE_MARKER).write_text(json.dumps(asdict(record), indent=2) + "\n")
        target = converted_dir(model)
        shutil.rmtree(target, ignore_errors=True)  # an unmarked leftover of an older, interrupted layout
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target
