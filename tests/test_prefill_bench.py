"""`anypair bench --prefill`: time to first token on long prompts (anypair.benchmarking.prefill). Its input
checks, its text, the draft's window, the OpenVINO child's plumbing (a fake child stands in for OpenVINO
GenAI, which is not installed here), the published table, and the command end to end on the test pair."""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from anypair.benchmarking import prefill, published
from anypair.errors import InputError

QWEN_SMALL = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"

#: a stand-in for OpenVINO GenAI's child: reads the request, answers 0.01 s per 100 tokens, every repeat
FAKE_CHILD = """
import json, sys
request = json.load(sys.stdin)
samples = {n: [len(ids) / 10000 for _ in range(request["repeats"])] for n, ids in request["prompts"].items()}
print("some log line of the library")
print(json.dumps({"openvino_genai": "fake", "load_s": 0.1, "samples": samples, "threads": request["threads"]}))
"""


def _executable(path: Path, body: str) -> str:
    """`body` as an executable python script at `path` (it stands for a venv's python: the argument
    naming the child script is ignored)."""
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# ---- input --------------------------------------------------------------------------------------


def test_lengths_parse_in_order_without_duplicates():
    assert prefill.parse_lengths("1024, 4096,1024,16384") == [1024, 4096, 16384]


@pytest.mark.parametrize("bad", ["abc", "0", "", "1024,-5", "1.5k"])
def test_bad_lengths_are_one_line_and_exit_2_before_any_model_loads(bad, capsys):
    from anypair.cli import main

    with pytest.raises(InputError, match="--prefill"):
        prefill.parse_lengths(bad)
    assert main(["bench", "--prefill", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("anypair: error: --prefill") and "\n" not in err


def test_a_length_past_the_trained_context_is_refused_before_any_model_loads(zoo_fetch, capsys):
    from anypair.backends.sources import gguf_of
    from anypair.cli import main

    trained = prefill.trained_context(gguf_of(QWEN_SMALL))
    assert trained == 32768
    assert main(["bench", "--prefill", f"1024,{trained}", "-m", QWEN_SMALL]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("anypair: error:")]
    assert len(errors) == 1 and "trained context of 32768" in errors[0] and "at most 32767" in errors[0]
    prefill.check_lengths_fit([trained - 1], trained, QWEN_SMALL)  # its first token still has a position


# ---- the text and the draft's window ------------------------------------------------------------


class WordTokenizer:
    """One id per whitespace-separated word."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(range(len(text.split())))}


def test_the_text_is_qmsum_transcripts_joined_whole_without_their_queries(tmp_path):
    data = tmp_path / "validation.jsonl"
    rows = [{"id": "a", "input": "What was said?\n\none two three"},
            {"id": "a", "input": "What was said?\n\none two three"},  # a second reference of the same meeting
            {"id": "b", "input": "Who spoke?\n\nfour five"}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert prefill.qmsum_transcripts(data) == ["one two three", "four five"]
    text = prefill.prompt_text(WordTokenizer(), 4, data)
    assert len(text.ids) == 5 and text.source.startswith("SCROLLS QMSum")
    assert len(prefill.prompt_text(WordTokenizer(), 12, data).ids) >= 12  # repeated where all are shorter


def test_without_the_data_folder_the_packaged_articles_are_read_and_the_record_says_so(tmp_path):
    text = prefill.prompt_text(WordTokenizer(), 3000, tmp_path / "absent.jsonl")
    assert len(text.ids) >= 3000
    assert text.source.startswith("CNN/DailyMail articles shipped with anypair") and "absent.jsonl" in text.source


def test_the_draft_reads_its_window_and_at_most_half_its_context():
    ids = list(range(1000))
    assert prefill.draft_read_ids(ids, 640, 8192, 16) == ids[-640:]
    assert prefill.draft_read_ids(ids[:100], 640, 8192, 16) == ids[:100]
    assert prefill.draft_read_ids(ids, 0, 8192, 16) == ids  # 0: the whole prompt
    assert prefill.draft_read_ids(ids, 0, 516, 16) == ids[-250:]  # past its context: half of it


# ---- OpenVINO GenAI's child ---------------------------------------------------------------------


def test_the_openvino_parent_reads_a_childs_figures(tmp_path):
    python = _executable(tmp_path / "python", FAKE_CHILD)
    run = prefill.run_openvino(python, tmp_path / "m.gguf", {32: list(range(32)), 64: list(range(64))}, 2, 3)
    assert run.left_out is None
    assert run.samples == {32: [0.0032] * 3, 64: [0.0064] * 3}
    assert run.facts["openvino_genai"] == "fake"


@pytest.mark.parametrize("body, why", [
    ("import sys; print('ModuleNotFoundError: No module named openvino_genai', file=sys.stderr); sys.exit(1)",
     "failed: ModuleNotFoundError: No module named openvino_genai"),
    ("print('not json')", "answered no figures"),
    ("import json, sys; json.load(sys.stdin); print(json.dumps({'samples': {'32': [1.0]}}))", "answered no figures"),
])
def test_a_failing_openvino_child_costs_one_line(tmp_path, body, why):
    python = _executable(tmp_path / "python", body)
    run = prefill.run_openvino(python, tmp_path / "m.gguf", {32: [1] * 32, 64: [1] * 64}, 2, 1)
    assert run.samples == {} and why in run.left_out and "\n" not in run.left_out


def test_a_missing_openvino_python_costs_one_line(tmp_path):
    run = prefill.run_openvino(str(tmp_path / "no-venv" / "python"), tmp_path / "m.gguf", {32: [1] * 32}, 2, 1)
    assert run.samples == {} and run.left_out.startswith("no python at")


def test_the_openvino_child_script_runs_without_anypair_and_fails_in_one_line_without_openvino(tmp_path):
    """The shipped child imports only the standard library before OpenVINO: run by a bare python it
    answers one line on stderr (no openvino_genai here) and exit status 1."""
    import subprocess

    done = subprocess.run([sys.executable, "-I", str(prefill.OPENVINO_SCRIPT)], cwd=tmp_path, text=True,
                          capture_output=True, input=json.dumps({"gguf": "m.gguf", "threads": 1, "prompts": {"8": [1]}}))
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "openvino" in done.stderr


# ---- the record, its table and its plot ---------------------------------------------------------


def _record() -> dict:
    samples = {1024: {"gguf": [2.0, 1.0, 3.0], "llama.cpp": [4.0, 4.0, 4.0], "openvino": [1.0, 1.0, 1.0],
                      "draft": [0.5, 0.5, 0.5]}}
    return {"settings": {"repeats": 3, "text": "SCROLLS QMSum meeting transcripts", "draft": SMOL},
            "machine": "a CPU", "threads": 2, "gguf": "m.gguf", "lengths": prefill.figures(samples, {1024: 640}),
            "left_out": {}}


def test_figures_are_medians_rates_and_ratios_with_every_sample():
    row = _record()["lengths"]["1024"]
    assert row["seconds"] == {"gguf": 2.0, "llama.cpp": 4.0, "openvino": 1.0}
    assert row["tokens_per_second"]["gguf"] == 512.0
    assert row["gguf_over_llama_cpp"] == 2.0 and row["gguf_over_openvino"] == 0.5
    assert row["samples"]["gguf"] == [2.0, 1.0, 3.0]
    assert row["draft"] == {"tokens": 640, "seconds": 0.5, "samples": [0.5, 0.5, 0.5]}


def test_the_published_prefill_table_shows_every_engine_run_and_the_draft(tmp_path):
    table = published.Table("prefill-test", "prefill", ("x.json",), "anypair bench --prefill 1024 --json {record}")
    lines = published.KINDS["prefill"](table, [_record()])
    assert "Text: SCROLLS QMSum meeting transcripts." in lines[0]
    assert "OpenVINO GenAI, s / tok/s" in lines[2] and "the draft's read: tokens, s" in lines[2]
    assert lines[4] == "| 1024 | 2.00 / 512.0 | 4.00 / 256.0 | 1.00 / 1024.0 | 2.00x | 0.50x | 640, 0.50 |"
    without = _record()
    del without["lengths"]["1024"]["draft"]
    assert "draft" not in published.KINDS["prefill"](table, [without])[2]


def test_the_table_and_the_plot_are_written(tmp_path):
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(prefill.format_table(_record()))
    text = console.export_text()
    assert "1024" in text and "2.00x" in text and "0.50x" in text and "640" in text
    assert prefill.save_plot(_record(), tmp_path / "ttft.png").stat().st_size > 1000


# ---- end to end ---------------------------------------------------------------------------------


def test_anypair_bench_prefill_end_to_end_on_the_test_pair(zoo_fetch, tmp_path, capsys, monkeypatch):
    from anypair.backends.llama_cpp import llama_cpp_available
    from anypair.cli import main

    out, plot = tmp_path / "prefill.json", tmp_path / "prefill.png"
    python = _executable(tmp_path / "python", FAKE_CHILD)
    argv = ["bench", "--prefill", "32,64", "--repeats", "1", "-m", QWEN_SMALL, "-a", SMOL, "--threads", "2",
            "--openvino-python", python, "--json", str(out), "--plot", str(plot)]
    monkeypatch.setattr(sys, "argv", ["anypair", *argv])  # the record's command is the command line's
    status = main(argv)
    assert status == 0
    record = json.loads(out.read_text())
    settings = record["settings"]
    assert settings["command"].startswith("anypair bench --prefill 32,64") and settings["release"]
    assert settings["context"] == 64 + prefill.CONTEXT_MARGIN and settings["text"]
    assert record["machine"] and record["gguf"].endswith(".gguf")
    engines = {"gguf", "openvino"} | ({"llama.cpp"} if llama_cpp_available() and "llama.cpp" not in record["left_out"]
                                      else set())
    for n in ("32", "64"):
        row = record["lengths"][n]
        assert set(row["samples"]) == engines and all(len(s) == 1 for s in row["samples"].values())
        assert row["seconds"]["openvino"] == int(n) / 10000  # the fake child's figure, through the plumbing
        assert 0 < row["draft"]["tokens"] <= settings["draft_window"] and row["draft"]["seconds"] > 0
    assert plot.stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "OpenVINO" in printed and f"saved {out}" in printed


def test_a_failing_openvino_child_is_one_line_and_the_bench_goes_on(zoo_fetch, tmp_path, capsys):
    from anypair.cli import main

    out = tmp_path / "prefill.json"
    status = main(["bench", "--prefill", "16", "-m", QWEN_SMALL, "--drafter", "lookup", "--no-llama-cpp",
                   "--threads", "2", "--openvino-python", str(tmp_path / "absent" / "python"), "--json", str(out)])
    assert status == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "OpenVINO GenAI is left out" in line]
    assert len(notes) == 1 and "no python at" in notes[0]
    record = json.loads(out.read_text())
    assert set(record["lengths"]["16"]["samples"]) == {"gguf"} and "draft" not in record["lengths"]["16"]
    assert record["left_out"]["openvino"].startswith("no python at") and record["settings"]["draft"] is None
