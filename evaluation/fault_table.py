"""Fault injection on the real small models, as one table: damage each kind of file anypair caches or
is given (truncate it, flip bytes in it, delete it), interrupt a fetch in each phase, run two fetches at
once and a first run in a fresh $ANYPAIR_HOME; after each, run the command line and record how it ended.

Every case must end one of two ways: **repaired** (exit 0 and stdout byte for byte the clean run's) or
**refused** (exit 2 and one line on stderr, `anypair: error: ...`, naming the damaged file). Anything
else (a wrong answer with exit 0, a traceback, another exit status, an error that does not name the
file) is a failure, and the script then exits with status 1.

    python evaluation/fault_table.py           # every case (about 15 minutes on 2 cores: each damaged
                                               # converted file costs a conversion, each fetch a download)
    python evaluation/fault_table.py --quick   # only the cases that need no conversion or download

Each case runs in its own $ANYPAIR_HOME under a temporary folder, seeded with copies of
SmolLM2-135M-Instruct's (a few cases: Qwen2.5-Coder-0.5B-Instruct's) converted folder and GGUF from the
real cache (`anypair fetch test` first): the real cache is never touched. Runs use one thread and greedy decoding with fp32 weights (where a
damaged checkpoint used to print garbage with exit 0).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Say hi."


@dataclass(frozen=True)
class Subject:
    """A zoo model whose cached files the faults damage."""

    hub_id: str
    gguf_name: str
    tokenizer_family: str | None = None  # the family's tokenizer.json is needed to convert it again

    @property
    def folder(self) -> str:
        return self.hub_id.replace("/", "--")

    def alone(self) -> list[str]:
        """The target alone, greedy, fp32 weights: the reference every repaired run must print."""
        return ["generate", "-m", self.hub_id, "--no-assisted", "--weights", "fp32", "--threads", "1",
                "--max-new-tokens", "8", PROMPT]

    def drafted(self) -> list[str]:
        """The same target with its own GGUF drafting on llama.cpp: lossless, so the same stdout."""
        return ["generate", "-m", self.hub_id, "-a", self.hub_id, "--weights", "fp32", "--threads", "1",
                "--max-new-tokens", "8", PROMPT]


SMOLLM2 = Subject("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
QWEN_05B = Subject("Qwen/Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-coder-0.5b-instruct-q4.gguf", "qwen2")
FLIP_BYTES = 4096
COMMAND_TIMEOUT_S = 600


@dataclass(frozen=True)
class Outcome:
    kind: str  # "repaired", "refused" or "FAILED"
    detail: str

    @property
    def ok(self) -> bool:
        return self.kind in ("repaired", "refused")


@dataclass(frozen=True)
class FaultCase:
    artifact: str
    fault: str
    #: damages the seeded home (or the folder beside it) and returns the CLI arguments to run after
    inject: Callable[[Path], list[str]]
    #: the file an error must name (a refusal); None: the case must be repaired
    named_file: str | None = None
    #: whether the case needs a conversion or a download (left out by --quick)
    slow: bool = True
    #: start from an empty $ANYPAIR_HOME instead of a seeded one
    fresh_home: bool = False
    subject: Subject = SMOLLM2


# -- running the command line ------------------------------------------------------------------------

def cache_home() -> Path:
    from anypair.home import home

    return home()


def run_cli(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANYPAIR_HOME": str(home), "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "anypair.cli", *args], capture_output=True, env=env,
                          timeout=COMMAND_TIMEOUT_S, cwd=home.parent)


def seed_home(home: Path, source: Path, subject: Subject) -> None:
    """Copies (never links: faults are written in place) of the subject's converted folder and GGUF (and
    tokenizer family), with their times kept, so that the stamps recorded in the cache still hold."""
    for sub in ("models", "gguf"):
        shutil.copytree(source / sub / subject.folder, home / sub / subject.folder, copy_function=shutil.copy2)
    if subject.tokenizer_family is not None:
        family = Path("tokenizers") / subject.tokenizer_family
        shutil.copytree(source / family, home / family, copy_function=shutil.copy2)


def classify(result: subprocess.CompletedProcess, clean_stdout: bytes, named_file: str | None) -> Outcome:
    err = result.stderr.decode(errors="replace")
    errors = [line for line in err.splitlines() if line.startswith("anypair: ")]
    if "Traceback" in err:
        return Outcome("FAILED", f"traceback, exit {result.returncode}")
    if result.returncode == 0:
        if result.stdout == clean_stdout:
            repairs = [line for line in errors if "error" not in line]
            return Outcome("repaired", repairs[0][len("anypair: "):] if repairs else "same output")
        return Outcome("FAILED", f"exit 0 with a different answer: {result.stdout[:60]!r}")
    if result.returncode == 2:
        error_lines = [line for line in errors if line.startswith("anypair: error: ")]
        if len(error_lines) != 1:
            return Outcome("FAILED", f"exit 2 with {len(error_lines)} error lines")
        if named_file is not None and named_file not in error_lines[0]:
            return Outcome("FAILED", f"the error does not name {named_file}: {error_lines[0]}")
        return Outcome("refused", error_lines[0][len("anypair: error: "):])
    return Outcome("FAILED", f"exit {result.returncode}: {(errors or err.splitlines() or [''])[-1][:200]}")


# -- faults ------------------------------------------------------------------------------------------

def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def flip(path: Path) -> None:
    """Invert FLIP_BYTES bytes in the middle of the file, in place (size unchanged, time changed)."""
    size = path.stat().st_size
    count = min(FLIP_BYTES, size)
    with open(path, "r+b") as handle:
        handle.seek((size - count) // 2)
        data = handle.read(count)
        handle.seek((size - count) // 2)
        handle.write(bytes(byte ^ 0xFF for byte in data))


def delete(path: Path) -> None:
    path.unlink()


FAULTS = {"truncated to half": truncate, f"{FLIP_BYTES} bytes flipped": flip, "deleted": delete}


def _converted(name: str, fault: Callable[[Path], None], subject: Subject = SMOLLM2) -> Callable[[Path], list[str]]:
    def inject(home: Path) -> list[str]:
        fault(home / "models" / subject.folder / name)
        return subject.alone()
    return inject


def _zoo_gguf(fault: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    def inject(home: Path) -> list[str]:
        fault(home / "gguf" / SMOLLM2.folder / SMOLLM2.gguf_name)
        return SMOLLM2.drafted()
    return inject


def _given_gguf(make: Callable[[Path, Path], None], role: str, subject: Subject = SMOLLM2) -> Callable[[Path], list[str]]:
    """A GGUF the user names by path (the target, or the draft), damaged by `make(real, copy)`."""
    def inject(home: Path) -> list[str]:
        given = home.parent / "given.gguf"
        make(home / "gguf" / subject.folder / subject.gguf_name, given)
        flag = ["-m", str(given), "--no-assisted"] if role == "target" else ["-m", SMOLLM2.hub_id, "-a", str(given)]
        return ["generate", *flag, "--threads", "1", "--max-new-tokens", "8", PROMPT]
    return inject


def _half_copy(real: Path, copy: Path) -> None:
    with open(real, "rb") as source, open(copy, "wb") as sink:
        sink.write(source.read(real.stat().st_size // 2))


def _header_copy(real: Path, copy: Path) -> None:
    with open(real, "rb") as source, open(copy, "wb") as sink:
        sink.write(source.read(100_000))


def _text_copy(real: Path, copy: Path) -> None:
    copy.write_text("this is not a model\n")


def _absent(real: Path, copy: Path) -> None:
    copy.unlink(missing_ok=True)


def _given_folder(missing: str) -> Callable[[Path], list[str]]:
    """A model folder the user names by path, copied from the converted one without `missing`."""
    def inject(home: Path) -> list[str]:
        folder = home.parent / "given-model"
        shutil.copytree(home / "models" / SMOLLM2.folder, folder, ignore=shutil.ignore_patterns(missing, ".anypair-*"))
        return ["generate", "-m", str(folder), "--no-assisted", "--threads", "1", "--max-new-tokens", "8", PROMPT]
    return inject


def _interrupted_fetch(phase_began: Callable[[Path, bytes], bool], delay_s: float) -> Callable[[Path], list[str]]:
    """`anypair fetch SmolLM2` in an empty home, killed (SIGKILL) `delay_s` after `phase_began(home, stderr so
    far)` (a download shows only a progress bar, so the phases are told by the files they write)."""
    def inject(home: Path) -> list[str]:
        env = {**os.environ, "ANYPAIR_HOME": str(home), "PYTHONPATH": str(REPO)}
        with tempfile.TemporaryFile() as stderr:
            child = subprocess.Popen([sys.executable, "-m", "anypair.cli", "fetch", SMOLLM2.hub_id],
                                     stdout=subprocess.DEVNULL, stderr=stderr, env=env)
            deadline = time.monotonic() + COMMAND_TIMEOUT_S
            began = False
            while not began and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
                stderr.seek(0)
                began = phase_began(home, stderr.read())
            time.sleep(delay_s)
            finished_first = child.poll() is not None
            child.send_signal(signal.SIGKILL)
            child.wait()
            stderr.seek(0)
            seen = stderr.read()
        if not began or finished_first:
            raise RuntimeError(f"the fetch was not interrupted in the phase asked for (it printed {seen[-300:]!r})")
        return SMOLLM2.alone()
    return inject


def _downloading(home: Path, stderr: bytes) -> bool:
    return (home / "tmp" / f"gguf-{SMOLLM2.folder}" / "part1").is_dir()


def _assembling(home: Path, stderr: bytes) -> bool:
    partial = home / "gguf" / SMOLLM2.folder / f"{SMOLLM2.gguf_name}.partial"
    return partial.is_file() and partial.stat().st_size > 0


def _converting(home: Path, stderr: bytes) -> bool:
    return b"Converting " in stderr


def _two_fetches(home: Path) -> list[str]:
    env = {**os.environ, "ANYPAIR_HOME": str(home), "PYTHONPATH": str(REPO)}
    children = [subprocess.Popen([sys.executable, "-m", "anypair.cli", "fetch", "--quiet", SMOLLM2.hub_id],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    for child in children:
        _, err = child.communicate(timeout=COMMAND_TIMEOUT_S)
        if child.returncode != 0:
            raise RuntimeError(f"one of two fetches at once failed: {err.decode(errors='replace')[-300:]}")
    return SMOLLM2.alone()


def cases() -> list[FaultCase]:
    found: list[FaultCase] = []
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        for fault, damage in FAULTS.items():
            found.append(FaultCase(f"converted {name}", fault, _converted(name, damage)))
    for fault, damage in FAULTS.items():
        found.append(FaultCase("zoo GGUF (draft on llama.cpp)", fault, _zoo_gguf(damage)))
    for role in ("target", "draft"):
        for fault, make, slow in (("truncated to half", _half_copy, False), ("header only (100 KB)", _header_copy, False),
                                  ("not a GGUF (text)", _text_copy, False), ("no such file", _absent, False)):
            found.append(FaultCase(f"GGUF given as the {role}", fault, _given_gguf(make, role), "given.gguf", slow))
    for missing in ("model.safetensors", "config.json", "tokenizer.json"):
        found.append(FaultCase("model folder given by path", f"without {missing}", _given_folder(missing),
                               "given-model", slow=False))
    for phase, began, delay in (("download", _downloading, 0.5), ("assembly", _assembling, 0.2),
                                ("conversion", _converting, 3.0)):
        found.append(FaultCase("fetch", f"killed in its {phase}", _interrupted_fetch(began, delay), fresh_home=True))
    found.append(FaultCase("fetch", "two at once", _two_fetches, fresh_home=True))
    found.append(FaultCase("first run", "in an empty $ANYPAIR_HOME", lambda home: SMOLLM2.alone(), fresh_home=True))
    qwen = "Qwen2.5-Coder-0.5B: "
    found.append(FaultCase(qwen + "converted model.safetensors", "truncated to half",
                           _converted("model.safetensors", truncate, QWEN_05B), subject=QWEN_05B))
    found.append(FaultCase(qwen + "converted tokenizer.json", f"{FLIP_BYTES} bytes flipped",
                           _converted("tokenizer.json", flip, QWEN_05B), subject=QWEN_05B))
    found.append(FaultCase(qwen + "GGUF given as the target", "truncated to half",
                           _given_gguf(_half_copy, "target", QWEN_05B), "given.gguf", slow=False, subject=QWEN_05B))
    return found


# -- the table ---------------------------------------------------------------------------------------

def run_case(case: FaultCase, source: Path, clean_stdout: bytes, workdir: Path) -> Outcome:
    case_dir = Path(tempfile.mkdtemp(prefix="case-", dir=workdir))
    home = case_dir / "home"
    try:
        if not case.fresh_home:
            seed_home(home, source, case.subject)
        try:
            args = case.inject(home)
        except RuntimeError as error:
            return Outcome("FAILED", f"could not inject the fault: {error}")
        outcome = classify(run_cli(args, home), clean_stdout, case.named_file)
        return Outcome(outcome.kind, outcome.detail.replace(str(case_dir), "CASE"))
    finally:
        shutil.rmtree(case_dir, ignore_errors=True)


def clean_run(source: Path, workdir: Path, subject: Subject) -> bytes:
    """The reference stdout: the target alone on an undamaged copy of the cache."""
    home = workdir / "clean" / "home"
    seed_home(home, source, subject)
    result = run_cli(subject.alone(), home)
    if result.returncode != 0 or not result.stdout.strip():
        raise SystemExit(f"the clean run failed (exit {result.returncode}): {result.stderr.decode()[-500:]}")
    shutil.rmtree(home.parent, ignore_errors=True)
    return result.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the cases that need no conversion or download")
    args = parser.parse_args(argv)
    source = cache_home()
    for subject in (SMOLLM2, QWEN_05B):
        if not (source / "models" / subject.folder / ".anypair-complete.json").is_file():
            print(f"{subject.hub_id} is not in {source}: run `anypair fetch test` first", file=sys.stderr)
            return 2
    from rich.console import Console
    from rich.table import Table

    console, progress = Console(width=220), Console(stderr=True)
    chosen = [case for case in cases() if not (args.quick and case.slow)]
    with tempfile.TemporaryDirectory(prefix="anypair-faults-") as tmp:
        workdir = Path(tmp)
        clean = {subject: clean_run(source, workdir, subject) for subject in {case.subject for case in chosen}}
        for subject, stdout in clean.items():
            console.print(f"clean stdout of {subject.hub_id}: {stdout!r}", highlight=False)
        table = Table(title=f"anypair fault injection ({len(chosen)} cases)")
        for column in ("#", "artifact", "fault", "outcome", "s", "what the user sees on stderr (CASE: the case's folder)"):
            table.add_column(column, overflow="fold", no_wrap=column != "what the user sees on stderr (CASE: the case's folder)")
        failures = 0
        for number, case in enumerate(chosen, start=1):
            started = time.perf_counter()
            outcome = run_case(case, source, clean[case.subject], workdir)
            seconds = time.perf_counter() - started
            failures += not outcome.ok
            progress.print(f"[{number}/{len(chosen)}] {case.artifact}, {case.fault}: {outcome.kind} ({seconds:.0f} s)",
                           highlight=False)
            table.add_row(str(number), case.artifact, case.fault, outcome.kind, f"{seconds:.0f}", outcome.detail)
    console.print(table)
    console.print(f"{len(chosen) - failures} of {len(chosen)} cases repaired or refused; {failures} failed",
                  highlight=False)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
