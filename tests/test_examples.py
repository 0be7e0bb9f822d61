"""Every script in examples/ runs as a user runs it (a fresh process), on the zoo's small test models
and a few new tokens: an example that no longer matches the API fails here, not in a user's hands."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
TARGET = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
DRAFT = "HuggingFaceTB/SmolLM2-135M-Instruct"

# each script, the arguments that put it on the test models, and a line its output must hold
RUNS = {
    "quickstart.py": (["--target", TARGET, "--draft", DRAFT, "--max-new-tokens", "8"], "identical output: True"),
    "chat.py": (["--target", TARGET, "--draft", DRAFT, "--max-new-tokens", "8"], "tok/s, acceptance"),
    "streaming.py": (["--target", TARGET, "--draft", DRAFT, "--max-new-tokens", "8"], "tok/s]"),
    "custom_drafter.py": (["--target", TARGET, "--max-new-tokens", "8"], "proposed"),
    "published_pairs.py": (["--target", TARGET, "--draft", DRAFT, "--max-new-tokens", "8"], "tok/s, acceptance"),
}


def test_every_example_is_run_here():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(RUNS)


@pytest.mark.parametrize("script", sorted(RUNS))
def test_the_example_runs_on_the_test_models(script, zoo_fetch):
    arguments, expected = RUNS[script]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *arguments], capture_output=True, text=True,
                          env=env, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout, done.stdout[-2000:]


@pytest.mark.parametrize("script", sorted(RUNS))
def test_the_example_answers_help(script):
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr[-2000:]
