"""The face a user meets: the README, the documentation site, the published tables and the records
behind them, the release's name and metadata, and the scripts a user runs from evaluation/."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anypair.benchmarking import published

REPO = Path(__file__).resolve().parent.parent
MEASURED = REPO / "evaluation" / "measured"
MAX_RECORD_FILES = 60


def _pages() -> list[Path]:
    """Where figures and records are cited: the README, the site's pages, the evaluation's README."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "evaluation" / "README.md",
            REPO / "CHANGELOG.md"]


# ---- the published tables ------------------------------------------------------------------------


def test_every_published_table_matches_its_records():
    """`python -m anypair.benchmarking.published --check`: a figure cannot outlive its record."""
    assert published.regenerate(write=False) == [], "run: python -m anypair.benchmarking.published"


def _copy_pages(root: Path) -> None:
    shutil.copy(REPO / "README.md", root / "README.md")
    shutil.copy(REPO / "CHANGELOG.md", root / "CHANGELOG.md")
    shutil.copytree(REPO / "docs", root / "docs")
    (root / "evaluation").mkdir()
    shutil.copy(REPO / "evaluation" / "README.md", root / "evaluation" / "README.md")


def test_a_figure_typed_over_a_table_is_found_and_rewritten(tmp_path):
    _copy_pages(tmp_path)
    readme = tmp_path / "README.md"
    text = readme.read_text()
    start = text.index("<!-- table: headline-amx -->")
    row = text.index("| target alone |", start)
    readme.write_text(text[:row] + "| target alone | 99.99 |" + text[text.index("\n", row):])
    assert published.regenerate(tmp_path, write=False) == ["README.md"]
    assert published.regenerate(tmp_path, write=True) == ["README.md"]
    assert readme.read_text() == text


def test_an_undeclared_table_or_an_unclosed_one_is_refused(tmp_path):
    rendered = {"a": "x"}
    with pytest.raises(SystemExit, match="not declared"):
        published.rewrite("<!-- table: b -->\n<!-- /table -->", rendered, "page.md")
    with pytest.raises(SystemExit, match="no closing"):
        published.rewrite("<!-- table: a -->\n", rendered, "page.md")
    assert published.rewrite("t\n<!-- table: a -->\nold\n<!-- /table -->\nu", rendered) == \
        ("t\n<!-- table: a -->\n\nx\n\n<!-- /table -->\nu", ["a"])


def test_each_table_is_headed_by_its_machine_release_record_and_command():
    for table in published.TABLES:
        head = published.render(table).split("\n")[:2]
        assert head[0].startswith("*Machine:* ") and "*Release:* anypair " in head[0], table.name
        assert "not recorded" not in head[0], table.name
        assert all(f"evaluation/measured/{r}" in head[0] for r in table.records), table.name
        assert head[1].startswith("*Command:* `") and ("anypair " in head[1] or "python " in head[1]), table.name


def test_the_readme_has_a_headline_table_for_each_cpu_class_on_its_first_screen():
    lines = (REPO / "README.md").read_text().split("\n")
    assert len(lines) <= 250
    fast = next(i for i, line in enumerate(lines) if line.startswith("## How fast"))
    assert fast < 30, "the speed against llama.cpp is the first thing after the commands"
    for name in ("headline-avx2", "headline-avx512", "headline-amx"):
        assert f"<!-- table: {name} -->" in lines
    assert any(line.startswith("![") and "evaluation/measured/" in line for line in lines)  # one plot


# ---- records: every one cited, every citation there --------------------------------------------


def _cited() -> set[str]:
    """The records the pages cite, as paths under evaluation/measured/ ("x/" for a file inside folder x)."""
    cited = set()
    for page in _pages():
        for path in re.findall(r"evaluation/measured/([\w./-]+[\w/])", page.read_text()):
            cited.add(path)
    return cited


def test_every_record_is_cited_and_every_citation_exists():
    cited = _cited()
    missing = sorted(p for p in cited if not (MEASURED / p).exists())
    assert not missing, f"cited but absent: {missing}"
    top = {p.split("/")[0] + ("/" if "/" in p else "") for p in cited}
    on_disk = {p.name + ("/" if p.is_dir() else "") for p in MEASURED.iterdir() if p.name != "README.md"}
    uncited = sorted(on_disk - top - {name + "/" for name in top})
    assert not uncited, f"records no page cites (remove them: git keeps them): {uncited}"


def test_the_records_are_few():
    files = [p for p in MEASURED.rglob("*") if p.is_file()]
    assert len(files) <= MAX_RECORD_FILES, f"{len(files)} files under evaluation/measured/"


def test_the_three_pair_evaluation_at_twenty_examples_a_task_stays():
    report = MEASURED / "pairs128_n20" / "report.json"
    import json

    summaries = json.loads(report.read_text())["summaries"]
    assert {s["task"] for s in summaries} == {"humaneval", "scrolls", "cnn_dailymail"}
    assert len({s["draft"] for s in summaries if s["draft"]}) == 3
    assert {s["n"] + (s.get("failed") or 0) for s in summaries} == {20}  # hf-uag's failures are counted apart


# ---- no diary ------------------------------------------------------------------------------------

# figures name their machine and release, never a sitting; a superseded figure is replaced, not appended
DIARY = [
    r"\b(this|that|the same|another|a later|an earlier|the next|a second|a third|a fourth|later|earlier) (session|sitting)s?\b",
    r"\bthis time\b", r"\banother time\b",
    r"\b(a|the) (later|earlier|next|previous) release\b", r"\b(the|this) release before\b", r"\bbefore this release\b",
    r"\b(a|the) later (run|hour|stretch|section)\b",
    r"\b(yesterday|today|tonight|this morning|this afternoon)\b",
    r"\b20\d\d-\d\d-\d\d\b",  # dates: figures are named by release, not by day
]


def diary_phrases(text: str) -> list[str]:
    found = []
    for pattern in DIARY:
        found += [m.group(0) for m in re.finditer(pattern, text, flags=re.IGNORECASE)]
    return found


def test_the_diary_check_finds_what_it_looks_for():
    assert diary_phrases("measured in a later session, and again this time on 2026-11-28") == \
        ["a later session", "this time", "2026-11-28"]
    assert diary_phrases("later loads map the layout cache; the release before the interleaved layout") == \
        ["the release before"]
    assert diary_phrases("the first load writes the cache; later loads read it (release 0.1.0)") == []
    assert diary_phrases("each request's DecodeSession; a client's HTTP session") == []


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_is_a_diary(page):
    assert diary_phrases(page.read_text()) == []


# ---- the site --------------------------------------------------------------------------------------


def test_the_api_reference_covers_every_public_name():
    import anypair

    api = (REPO / "docs" / "api.md").read_text()
    documented = {line.split("::: ")[1].split(".")[-1] for line in api.splitlines() if line.startswith("::: ")}
    assert set(anypair.__all__) <= documented, set(anypair.__all__) - documented


def test_every_page_of_the_site_is_in_its_navigation():
    config = (REPO / "mkdocs.yml").read_text()
    for page in (REPO / "docs").rglob("*.md"):
        assert str(page.relative_to(REPO / "docs")) in config, page


def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link, a missing page or a docstring the API reference cannot read
    fails the build (the test extra installs mkdocs, so CI builds the site on every run)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert 'id="anypair.generation.generator.AnyPairGenerator.generate_many"' in api


# ---- the release ----------------------------------------------------------------------------------


def test_anypair_version(capsys):
    import anypair
    from anypair.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"anypair {anypair.__version__}\n"


def test_the_package_metadata_names_its_release_licence_and_addresses():
    tomllib = pytest.importorskip("tomllib")
    import anypair

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["version"] == anypair.__version__
    assert project["license"] and (REPO / "LICENSE").exists()
    assert {"Homepage", "Documentation", "Changelog"} <= set(project["urls"])
    assert any(c.startswith("License :: ") for c in project["classifiers"]) or "license" in project
    assert any(c.startswith("Programming Language :: Python :: 3") for c in project["classifiers"])
    extras = project["optional-dependencies"]["test"]
    assert any(e.startswith("mkdocs-material") for e in extras) and any(e.startswith("mkdocstrings") for e in extras)


def test_the_changelog_has_an_entry_for_this_release():
    import anypair

    changelog = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(anypair.__version__)}\b", changelog, flags=re.MULTILINE)


# ---- the scripts a user runs ---------------------------------------------------------------------


def _scripts() -> list[Path]:
    return [p for p in sorted((REPO / "evaluation").glob("*.py")) if '__name__ == "__main__"' in p.read_text()]


def test_every_evaluation_script_answers_help_and_writes_nothing(tmp_path):
    """As a new user tries it: `python evaluation/X.py --help` prints its usage, exits 0 and writes no file
    (summary_prompts.py once wrote a file named `--help`)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    running = {p.name: subprocess.Popen([sys.executable, str(p), "--help"], cwd=tmp_path, env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in _scripts()}
    assert "run.py" in running and "summary_prompts.py" in running
    for name, process in running.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0 and out.startswith("usage:"), f"{name}: {err[-2000:]}"
    assert list(tmp_path.iterdir()) == []
