"""A fresh machine: the declared dependencies cover what the code needs at run time, and CI runs
the README's own test command (inside a virtual environment it creates itself)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent


def declared_dependencies() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {Requirement(line).name.lower() for line in project["dependencies"]}


def test_gguf_conversion_packages_are_dependencies():
    # `anypair fetch` converts the zoo's GGUF files; a package it needs that is not declared works
    # only on a machine where someone installed it by hand
    from anypair.zoo.conversion import GGUF_CONVERSION_PACKAGES

    assert set(GGUF_CONVERSION_PACKAGES) <= declared_dependencies()


# .ci/run installs packages: every run here is a copy in a scratch folder (no pyproject.toml to
# install) with the package index switched off, so no version of the script can change this machine
SANDBOX = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}


def ci(run: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(run), *args], capture_output=True, text=True, env=SANDBOX, **kwargs)


def _ci_copy(tmp_path: Path, readme: str) -> Path:
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "README.md").write_text(readme)
    return tmp_path / ".ci" / "run"


def readme_test_command() -> str:
    lines = (REPO / "README.md").read_text().splitlines()
    return lines[lines.index(next(l for l in lines if l.startswith("# 2. tests"))) + 1]


def readme_main_command() -> str:
    lines = (REPO / "README.md").read_text().splitlines()
    return lines[lines.index(next(l for l in lines if l.startswith("# 1. main job"))) + 1]


def test_the_main_job_installs_the_package_alone_and_no_extra():
    """README command 1 installs what the main job needs and no more: llama-cpp-python (built from
    source, most of a first run's time) is the llama extra, for command 2 and whoever asks for it."""
    command = readme_main_command()
    assert command.startswith("pip install torch==2.13.0 && pip install -e . && anypair generate "), command
    assert "[" not in command.split("anypair generate")[0], command


def test_the_default_pair_runs_without_llama_cpp_and_a_llama_cpp_member_says_how_to_get_it(zoo_fetch, monkeypatch):
    import sys

    from anypair.errors import BackendError
    from anypair.generation.members import load_member, resolve_engine

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` now fails, as when it is not installed
    assert resolve_engine("Qwen/Qwen2.5-Coder-1.5B-Instruct", "auto", "target") == "gguf"
    assert resolve_engine("HuggingFaceTB/SmolLM2-135M-Instruct", "auto", "draft") == "gguf"
    with pytest.raises(BackendError, match=r"needs llama-cpp-python: anypair install llama\.cpp \(builds llama-cpp-python 0\.3\.36 for this CPU") as refused:
        load_member("HuggingFaceTB/SmolLM2-135M-Instruct", role="draft", engine="llama.cpp")
    assert "\n" not in str(refused.value)


def test_ci_runs_the_readme_test_command(tmp_path):
    out = ci(_ci_copy(tmp_path, (REPO / "README.md").read_text()), "--print-command", check=True)
    command = out.stdout.strip()
    assert command == readme_test_command()
    assert "pip install torch==2.13.0" in command and "pytest" in command


def test_ci_follows_an_edited_readme(tmp_path):
    run = _ci_copy(tmp_path, "# x\n\n```bash\n# 1. main\necho one\n\n# 2. tests: all\npip install torch==2.13.0 && pip install extra && python -m pytest -q\n```\n")
    out = ci(run, "--print-command", check=True)
    assert out.stdout.strip() == "pip install torch==2.13.0 && pip install extra && python -m pytest -q"


@pytest.mark.parametrize("readme", [
    "# no bash block at all\n",
    "```bash\n# 1. main\necho one\n```\n\n```bash\n# 2. tests\npython -m pytest\n```\n",  # not the first block
    "```bash\n# 2. tests\n\n```\n",  # nothing after the comment
    "```bash\n# 2. tests\npip install torch && python -m pytest -q\n```\n",  # torch unpinned
])
def test_ci_fails_loudly_without_a_usable_readme_command(tmp_path, readme):
    out = ci(_ci_copy(tmp_path, readme), "--print-command")
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.startswith(".ci/run: error:") and out.stderr.count("\n") == 1


def test_ci_treats_no_tests_collected_as_failure(tmp_path):
    # a fresh venv is made but the command runs no install: pytest (exit 5) would be missing anyway,
    # so the command stands in for it with the same exit status
    run = _ci_copy(tmp_path, "```bash\n# 2. tests\npip install torch==2.13.0 --help >/dev/null && exit 5\n```\n")
    out = ci(run, timeout=300)
    assert out.returncode == 1
    assert "no tests" in out.stderr
