"""The target's contract verdict kept on disk, so that loading the same weights again on the same machine
and code does not measure it again.

Measuring the batch-invariance contract (backends.contract) costs a prefill and dozens of forwards at
load: 8.8 s of a 14.8 s SmolLM2-135M fp32 load, 16-26 s for Qwen2.5-Coder-0.5B, on 2 cores of an AMD
EPYC (Zen 3). Every CLI run paid it anew, and the test suite paid it at every load. The verdict is a
property of the weights and of everything that picks the kernels' rounding, so it is kept under a key
of exactly those: the weights' files (path, size and mtime of each), the engine's choice (format, linear
kernel), torch's thread count, the CPU (model and flags), torch's and transformers'
versions, the source of anypair's engines and kernels (a hash of backends/ and kernels/, C included;
an edit there measures again), the compiler's build of the kernels, and the check itself (probe text,
shapes, tolerance). Any change measures afresh and replaces the entry.

The cache is `$ANYPAIR_HOME/contract/<key>.json`: the full report (every shape's figures), written under a
temporary name and renamed. Only CPU verdicts are kept: a GPU library picks kernels by heuristics that
may also read free memory and workspace size, so a GPU target is measured at every load. A member whose
weights have no files to stamp (a model object passed in, a hub id) is measured every time too.
`ANYPAIR_CONTRACT_CACHE=0` turns the cache off; an unreadable entry is measured again, an unwritable
home costs one debug line.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from anypair.backends.contract import ContractReport, InvarianceReport
from anypair.home import home, source_stamp, write_atomically

logger = logging.getLogger("anypair")

#: the entry's own format (bump on a change of what an entry holds)
FORMAT = 1
_PACKAGE = Path(__file__).resolve().parents[1]
_ENGINE_SOURCES = ("backends", "kernels")
_source_digest: Optional[str] = None


def cache_enabled() -> bool:
    """$ANYPAIR_CONTRACT_CACHE: anything but 0/false/no/off keeps verdicts (the default)."""
    return os.environ.get("ANYPAIR_CONTRACT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def engine_source_digest() -> str:
    """A hash of anypair's engine and kernel sources (.py, .c, .h), once per process."""
    global _source_digest
    if _source_digest is None:
        digest = hashlib.sha256()
        for folder in _ENGINE_SOURCES:
            for path in sorted((_PACKAGE / folder).rglob("*")):
                if path.suffix in (".py", ".c", ".h") and path.is_file():
                    digest.update(str(path.relative_to(_PACKAGE)).encode())
                    digest.update(path.read_bytes())
        _source_digest = digest.hexdigest()
    return _source_digest


def verdict_key(weights: Path, engine: str) -> Optional[str]:
    """The key of a verdict for these weights on this engine choice on this CPU, or None where a
    verdict cannot be kept (the cache off, nothing on disk to stamp). Callers pass CPU members only."""
    if not cache_enabled():
        return None
    stamped = source_stamp(weights)
    if stamped is None:
        return None
    import torch
    import transformers

    from anypair.backends.contract import (BITWISE_ENGINE_SHAPES, PROBE_TEXT, RELATIVE_TOLERANCE,
                                           VERIFICATION_SHAPES)
    from anypair.kernels.build import build_key
    from anypair.machine import cpu_flags, cpu_model

    described = {
        "format": FORMAT, "weights": stamped, "engine": engine,
        "threads": torch.get_num_threads(), "cpu": [cpu_model(), sorted(cpu_flags())],
        "torch": torch.__version__, "transformers": transformers.__version__,
        "sources": engine_source_digest(), "kernels": build_key(),
        "check": [PROBE_TEXT, asdict(VERIFICATION_SHAPES), asdict(BITWISE_ENGINE_SHAPES), RELATIVE_TOLERANCE],
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]


def cache_folder() -> Path:
    return home() / "contract"


def _entry(key: str) -> Path:
    return cache_folder() / f"{key}.json"


def kept_verdict(key: str) -> Optional[ContractReport]:
    """The report kept under `key`, or None (none kept, or an entry that does not read back)."""
    try:
        checks = json.loads(_entry(key).read_text())["checks"]
        report = ContractReport(tuple(InvarianceReport(**check) for check in checks))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return report if report.checks else None  # no shape checked would read as "holds"


def keep_verdict(key: str, report: ContractReport) -> None:
    """Write `report` under `key`; a disk that will not take it costs one debug line."""
    entry = {"format": FORMAT, "checks": [asdict(check) for check in report.checks]}
    try:
        write_atomically(_entry(key), json.dumps(entry).encode())
    except OSError as error:
        logger.debug("anypair: the contract's verdict was not kept (%s)", error)


def measured_or_kept(key: Optional[str], measure: Callable[[], ContractReport]) -> tuple[ContractReport, bool]:
    """(report, kept): the verdict kept under `key` where there is one, else `measure()`'s (then kept)."""
    if key is not None:
        report = kept_verdict(key)
        if report is not None:
            return report, True
    report = measure()
    if key is not None:
        keep_verdict(key, report)
    return report, False
