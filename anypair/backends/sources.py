"""What a model spec can be loaded from: its GGUF file (zoo models keep theirs), its checkpoint, or
a model already loaded; and a GGUF member's tokenizer. The engines' loaders and the engine choice
(`anypair.generation.members`) both ask here."""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Optional

from anypair.backends.member import ModelSpec
from anypair.errors import InputError
from anypair.home import home, source_stamp, write_atomically

logger = logging.getLogger("anypair")

#: the kept tokenizers' own format (bump on a change of what an entry holds)
_TOKENIZER_FORMAT = 1

#: the kinds of source an engine declares it loads (anypair.backends.engines.Engine.loads)
GGUF = "gguf"  # a GGUF file: a .gguf path, a zoo model's, a folder's only one
CHECKPOINT = "checkpoint"  # a transformers checkpoint: a hub id, a zoo model, a local folder
LOADED = "loaded"  # a (model, hf_tokenizer) pair already in memory
SOURCE_KINDS = (GGUF, CHECKPOINT, LOADED)


def is_gguf_file(spec: ModelSpec) -> bool:
    return not isinstance(spec, tuple) and str(spec).endswith(".gguf")


def gguf_of(spec: ModelSpec) -> Optional[Path]:
    """The GGUF file a spec names or ships with (zoo models keep theirs), None if it has none."""
    if isinstance(spec, tuple):
        return None
    name = str(spec)
    if name.endswith(".gguf"):
        return Path(name).expanduser()
    from anypair.zoo.registry import ZOO_MODELS

    if name in ZOO_MODELS:
        from anypair.zoo.gguf_assembly import gguf_path

        return gguf_path(ZOO_MODELS[name])
    folder = Path(name).expanduser()
    if folder.is_dir():
        found = sorted(folder.glob("*.gguf"))
        return found[0] if len(found) == 1 else None
    return None


def source_kinds(spec: ModelSpec) -> frozenset[str]:
    """Which kinds of source `spec` offers: a GGUF file alone, a checkpoint (and maybe its GGUF),
    or a loaded model."""
    if isinstance(spec, tuple):
        return frozenset({LOADED})
    if is_gguf_file(spec):
        return frozenset({GGUF})
    return frozenset({CHECKPOINT, GGUF}) if gguf_of(spec) is not None else frozenset({CHECKPOINT})


def checked_gguf(name: str, path: Path) -> Path:
    """A zoo model's GGUF, checked against its recorded stamp (fetched again if missing or damaged);
    any other GGUF, checked to exist and to hold the tensor data its header promises."""
    from anypair.zoo.registry import ZOO_MODELS

    model = ZOO_MODELS.get(name)
    if model is None:
        from anypair.zoo.integrity import check_gguf_complete

        check_gguf_complete(path)
        return path
    from anypair.zoo.gguf_assembly import assemble_gguf, gguf_is_intact
    from anypair.zoo.paths import asset_lock

    with asset_lock(model.folder_name):  # two processes never assemble one GGUF at once
        return path if gguf_is_intact(model) else assemble_gguf(model)


def member_gguf(spec: ModelSpec, engine: str) -> Path:
    """The checked GGUF file of `spec` for the GGUF-reading engine `engine`, or a one-line error."""
    gguf = gguf_of(spec)
    if gguf is None:
        raise InputError(f"{spec} has no GGUF file for the {engine} engine: give a .gguf path or a zoo model, "
                         "or use engine='torch'")
    gguf = checked_gguf(str(spec), gguf)
    if not gguf.is_file():
        raise InputError(f"no such file: {gguf}")
    return gguf


def gguf_tokenizer(spec: ModelSpec, gguf: Path):
    """The HF tokenizer and generation config of a GGUF member: for a zoo model its checked tokenizer
    (no bf16 conversion needed); for a GGUF whose folder holds tokenizer files, those; else one built
    from the GGUF itself."""
    from transformers import AutoTokenizer, GenerationConfig

    from anypair.zoo.registry import ZOO_MODELS

    name = str(spec)
    if name in ZOO_MODELS:
        from anypair.zoo.served_gguf import served_gguf

        _, folder = served_gguf(ZOO_MODELS[name])
        tokenizer = AutoTokenizer.from_pretrained(folder)
        try:
            generation = GenerationConfig.from_pretrained(folder)
        except OSError:
            generation = None
        return tokenizer, generation
    if (gguf.parent / "tokenizer.json").is_file() or (gguf.parent / "tokenizer_config.json").is_file():
        # the folder ships the model's own tokenizer files: exact, and transformers' conversion of a
        # GGUF's vocabulary can mis-segment (Gemma 3's becomes a Unigram model)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent))
        try:
            generation = GenerationConfig.from_pretrained(str(gguf.parent))
        except OSError:
            generation = None
        return tokenizer, generation
    return tokenizer_of_gguf(gguf), None


def tokenizer_of_gguf(gguf: Path):
    """transformers' tokenizer converted from the GGUF's own vocabulary, kept for the next load.

    The conversion takes seconds at a big vocabulary (gemma-2-9b's 256,000: ~8 s by the class picked
    below, 25-33 s through AutoTokenizer, on 2 cores of an AMD EPYC Zen 3). The result is kept pickled
    under $ANYPAIR_HOME/gguf-tokenizers, keyed by the file's stamp and the libraries' versions, and
    unpickled in 3-5 s later. Pickled rather
    than saved as tokenizer files: reloaded from those, gemma's `<mask>` comes back flagged special where
    the conversion did not flag it, which would change the adapter's special ids. The entry is anypair's
    own file in the user's cache (as the kernels' build is); one that does not load is built again."""
    import pickle

    kept = kept_tokenizer_path(gguf)
    if kept is not None and kept.is_file():
        try:
            with open(kept, "rb") as handle:
                return pickle.load(handle)
        except Exception as exc:  # a damaged or foreign entry: any unpickling error, then built again
            logger.debug("anypair: the kept tokenizer %s did not load (%s); building it again", kept, exc)
    try:
        tokenizer = _convert_tokenizer(gguf)
    except Exception as exc:  # transformers raises many kinds here
        raise InputError(f"could not build a tokenizer from {gguf} ({type(exc).__name__}: {exc}); "
                         "use a model folder with its tokenizer files instead") from exc
    if kept is not None:
        try:
            write_atomically(kept, pickle.dumps(tokenizer))
        except OSError as exc:
            logger.debug("anypair: the GGUF's tokenizer was not kept (%s)", exc)
    return tokenizer


def kept_tokenizer_path(gguf: Path) -> Optional[Path]:
    """Where `tokenizer_of_gguf` keeps the tokenizer of `gguf` (None: the file cannot be stamped)."""
    import tokenizers
    import transformers

    stamped = source_stamp(gguf)
    if stamped is None:
        return None
    key = json.dumps([_TOKENIZER_FORMAT, stamped, transformers.__version__, tokenizers.__version__])
    return home() / "gguf-tokenizers" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.pickle"


#: GGUF architectures whose transformers model type is known without parsing the file's whole metadata
#: (gemma3 files hold the text model only), each checked against AutoTokenizer on real files: the same
#: tokenizer (evaluation/measured/gguf_tokenizer_conversion*_zen3.json; llama in the tests too)
_GGUF_MODEL_TYPES = {"llama": "llama", "gemma2": "gemma2", "gemma3": "gemma3_text", "qwen2": "qwen2", "phi3": "phi3"}


def _convert_tokenizer(gguf: Path):
    """transformers' conversion of the GGUF's vocabulary, built by the class AutoTokenizer would pick.

    AutoTokenizer learns that class from a config it builds by parsing every metadata value with
    gguf-py (768,000 array entries at gemma-2-9b: ~20 s) when only the architecture decides it; the
    class itself then converts from transformers' own fast reader. Same tokenizer, a tenth of the time."""
    from transformers import AutoTokenizer

    tokenizer_class = _tokenizer_class_of(gguf)
    if tokenizer_class is None:
        return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return tokenizer_class.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def _tokenizer_class_of(gguf: Path):
    """The tokenizer class AutoTokenizer picks for a GGUF in a folder without tokenizer files (the
    caller's case), read from the file's header; None where AutoTokenizer must decide itself."""
    try:
        from transformers.integrations.gguf import read_gguf_metadata
        from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES, tokenizer_class_from_name

        metadata, _ = read_gguf_metadata(str(gguf))
    except Exception as exc:  # an older transformers, or a file its reader refuses: AutoTokenizer says why
        logger.debug("anypair: %s's architecture not read ahead (%s)", gguf, exc)
        return None
    model_type = _GGUF_MODEL_TYPES.get(metadata["general.architecture"])
    if model_type is None or metadata.get("general.name") == "mistral":  # transformers reads that as mistral
        return None
    name = TOKENIZER_MAPPING_NAMES.get(model_type) or "TokenizersBackend"  # AutoTokenizer's own fallback
    return None if name == "MistralCommonBackend" else tokenizer_class_from_name(name)
