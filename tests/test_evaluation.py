"""The evaluation harness: loaders on the real local data, prompt building with the real Qwen2.5
tokenizer, pass@1 and ROUGE on known cases, speedup statistics, resuming, and the report files."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `evaluation` is not an installed package

from evaluation import data, metrics, prompts, records, report, run  # noqa: E402
from evaluation.methods import BASELINE_METHOD  # noqa: E402

QWEN_SMALL = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


# ---- loaders ------------------------------------------------------------------------------------


def test_humaneval_loader_reads_all_164_problems_from_the_package():
    examples = data.load_task("humaneval")
    assert len(examples) == 164
    first = examples[0]
    assert first.example_id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert first.document.startswith("from typing import List") and "def check(candidate)" in first.test_code
    assert first.reference.strip().startswith("for idx, elem in enumerate(numbers)")


def test_cnn_dailymail_loader_reads_the_specbench_subset():
    examples = data.load_task("cnn_dailymail")
    assert len(examples) == 60
    assert examples[0].example_id == "241"
    assert examples[0].document.startswith("Hillary Clinton")
    assert examples[0].reference and not examples[0].query


def test_qmsum_loader_splits_query_from_transcript():
    examples = data.load_task("scrolls")
    assert len(examples) == 272
    first = examples[0]
    assert first.example_id == "qmsum-val-0-0"
    assert first.query == "What were the main discussion points of the meeting?"
    assert first.document.startswith("Professor E: So . OK .")
    assert len(first.document.split()) > 5000 and first.reference.startswith("The group discussed")


def test_hub_shaped_rows_give_the_same_records_as_local_ones(tmp_path):
    """The hub's rows have the same fields (QMSum repeats an id once per reference)."""
    local = data.load_task("scrolls")[:2]
    hub_rows = []
    for example in local:
        row = {"id": example.example_id, "pid": example.example_id + "_0",
               "input": f"{example.query}\n\n{example.document}", "output": example.reference}
        hub_rows += [row, dict(row, pid=example.example_id + "_1", output="another reference")]
    assert data.qmsum_from_rows(hub_rows) == local


def test_a_missing_data_folder_says_what_to_pass(tmp_path):
    with pytest.raises(data.DataError, match="--data-dir"):
        data.load_task("cnn_dailymail", data_dir=tmp_path)
    with pytest.raises(data.DataError, match="unknown task"):
        data.load_task("mmlu")


def test_a_scrolls_input_without_its_blank_line_is_refused():
    with pytest.raises(data.DataError, match="blank line"):
        data.split_scrolls_input("query and transcript run together")


# ---- pass@1 and ROUGE ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def humaneval_examples():
    return {e.example_id: e for e in data.load_task("humaneval")}


def test_canonical_solution_passes_and_a_wrong_one_fails(humaneval_examples):
    problem = humaneval_examples["HumanEval/2"]  # truncate_number
    assert metrics.execute_humaneval(problem, problem.reference).passed
    wrong = metrics.execute_humaneval(problem, "    return number\n")
    assert not wrong.passed and wrong.detail.startswith("failed")


def test_an_endless_completion_times_out(humaneval_examples):
    outcome = metrics.execute_humaneval(humaneval_examples["HumanEval/2"], "    while True:\n        pass\n", timeout_s=1.0)
    assert not outcome.passed and outcome.detail == "timed out"


def test_the_subprocess_runner_agrees_with_the_harness(humaneval_examples):
    problem = humaneval_examples["HumanEval/2"]
    assert metrics.run_in_subprocess(metrics.check_program(problem, problem.reference), 5.0).passed
    assert not metrics.run_in_subprocess(metrics.check_program(problem, "    return 0.0\n"), 5.0).passed


def test_humaneval_completion_is_cut_at_the_stop_sequences():
    body = "    return sorted(xs)\n"
    assert prompts.humaneval_completion(body + "```\n\nThis sorts the list.") == body.rstrip("\n")
    assert prompts.humaneval_completion(body + "\n\ndef main():\n    pass") == body + "\n"
    assert prompts.humaneval_completion(body) == body


def test_rouge_on_known_cases():
    reference = "The cat sat on the mat. It was happy."
    assert metrics.rouge_scores(reference, reference).rouge1 == pytest.approx(100.0)
    assert metrics.rouge_scores("Dogs bark loudly.", reference).rouge1 == pytest.approx(0.0)
    partial = metrics.rouge_scores("The cat sat.", reference)
    # 3 of the prediction's 3 unigrams match, 3 of the reference's 9: F = 2PR/(P+R) = 0.5
    assert partial.rouge1 == pytest.approx(50.0)
    assert 0 < partial.rouge2 < partial.rouge1


def test_sentence_splitting_for_rouge_lsum():
    text = 'He said "stop." Then he left! Prices rose 3.5 percent.\nA new line.'
    assert metrics.split_sentences(text) == ['He said "stop."', "Then he left!", "Prices rose 3.5 percent.", "A new line."]


# ---- speedup statistics -------------------------------------------------------------------------


def test_speedup_summary_median_geomean_and_interval():
    summary = metrics.summarize_speedups([1.0, 2.0, 4.0, 0.5, 2.0], resamples=500, seed=1)
    assert summary.n == 5 and summary.median == 2.0
    assert summary.geometric_mean == pytest.approx(math.exp((0 + math.log(2) + math.log(4) + math.log(0.5) + math.log(2)) / 5))
    assert summary.median_ci.low <= summary.median <= summary.median_ci.high
    assert summary.geometric_mean_ci.low <= summary.geometric_mean <= summary.geometric_mean_ci.high
    assert summary.geometric_mean_ci.low >= 0.5 and summary.geometric_mean_ci.high <= 4.0


def test_speedup_summary_edge_cases():
    assert metrics.summarize_speedups([]) is None
    single = metrics.summarize_speedups([1.5])
    assert single.median_ci.low == single.median_ci.high == 1.5
    assert metrics.summarize_speedups([2.0, float("inf"), 0.0]).n == 1



def test_bootstrap_interval_is_seeded_contains_the_median_and_can_exclude_a_goal():
    import numpy as np

    speedups = np.array([0.8, 0.82, 0.84, 0.85, 0.86, 0.87, 0.88, 0.9, 0.92, 1.0])
    first = metrics.bootstrap_interval(speedups, np.median, resamples=1000, seed=7)
    assert metrics.bootstrap_interval(speedups, np.median, resamples=1000, seed=7) == first  # same seed, same interval
    others = {metrics.bootstrap_interval(speedups, np.median, resamples=1000, seed=s) for s in range(5)}
    assert len(others) > 1  # the interval does come from resampling
    assert first.low <= float(np.median(speedups)) <= first.high
    # a claim the data do not support fails: the goal ">= 0.95x median" lies above the interval
    assert first.high < 0.95
    summary = metrics.summarize_speedups(speedups, resamples=1000, seed=7)
    assert summary.median_ci == first and summary.median_ci.high < 0.95 < 1.0
    # a clearly faster method's interval excludes 1.0 from below
    assert metrics.summarize_speedups([1.3, 1.4, 1.5, 1.45, 1.35, 1.6], resamples=1000).median_ci.low > 1.0

# ---- records, resuming, report ------------------------------------------------------------------


def synthetic_record(task, example_id, method, draft, tokens_per_second, **extra):
    new_tokens = 32
    return records.ExampleRecord(
        task=task, example_id=example_id, method=method, draft=draft, prompt_tokens=100, prompt_truncated=False,
        new_tokens=new_tokens, time_to_first_token_s=0.4, total_time_s=new_tokens / tokens_per_second,
        tokens_per_second=tokens_per_second, finish_reason="length", text="a summary.", target_ids=[1, 2, 3], **extra,
    )


def synthetic_records():
    rows = []
    for i in range(4):
        rows.append(synthetic_record("cnn_dailymail", str(i), BASELINE_METHOD, "", 2.0,
                                     rouge=metrics.RougeScores(40.0, 18.0, 30.0, 36.0)))
        rows.append(synthetic_record("cnn_dailymail", str(i), "anypair", "org/Draft-A", 3.0 + i, acceptance_rate=0.5,
                                     mean_accepted_per_round=1.5, rounds=12, identical_to_baseline=i != 3,
                                     rouge=metrics.RougeScores(40.0, 18.0, 30.0, 36.0)))
        rows.append(synthetic_record("humaneval", f"HumanEval/{i}", BASELINE_METHOD, "", 2.0, passed=i % 2 == 0))
        rows.append(synthetic_record("humaneval", f"HumanEval/{i}", "hf-uag", "org/Draft-A", 1.0, passed=i % 2 == 0,
                                     identical_to_baseline=True))
    return rows


def test_records_round_trip_and_resume_skips_finished_work(tmp_path):
    store = records.RecordStore(tmp_path)
    written = synthetic_records()[:3]
    for record in written:
        store.append(record)
    with open(store.path, "a") as out:
        out.write('{"task": "cnn_dailymail", "example_id": "9", "meth')  # a run killed mid-line
    reopened = records.RecordStore(tmp_path)
    assert sorted(reopened.records) == sorted(r.key for r in written)
    assert reopened.get("cnn_dailymail", "0", "anypair", "org/Draft-A") == written[1]
    assert reopened.is_done("humaneval", "HumanEval/0", BASELINE_METHOD, "")
    assert not reopened.is_done("humaneval", "HumanEval/0", "hf-uag", "org/Draft-A")


class NamedMethod:
    """Stands in for a model-backed method where only its name and draft are read."""

    def __init__(self, name, draft_name=""):
        self.name, self.draft_name = name, draft_name


def test_examples_run_example_major_across_tasks_so_a_stopped_run_covers_every_task():
    examples_by_task = {"humaneval": ["h0", "h1", "h2"], "scrolls": ["s0"], "cnn_dailymail": ["c0", "c1"]}
    order = [(task, index, example) for task, index, example in run.example_order(examples_by_task)]
    assert order == [
        ("humaneval", 0, "h0"), ("scrolls", 0, "s0"), ("cnn_dailymail", 0, "c0"),
        ("humaneval", 1, "h1"), ("cnn_dailymail", 1, "c1"),
        ("humaneval", 2, "h2"),
    ]
    assert run.example_order({}) == []


def test_settings_mismatch_is_refused(tmp_path):
    records.check_or_write_settings(tmp_path, {"target": "a", "max_new_tokens": 32})
    records.check_or_write_settings(tmp_path, {"target": "a", "max_new_tokens": 32})
    with pytest.raises(records.ResumeError, match="max_new_tokens"):
        records.check_or_write_settings(tmp_path, {"target": "a", "max_new_tokens": 64})


def test_report_files_from_synthetic_records(tmp_path):
    settings = report.RunSettings(
        target="org/Target", drafts=["org/Draft-A"], methods=["target", "anypair", "hf-uag"], tasks=["humaneval", "cnn_dailymail"],
        n_requested=4, max_new_tokens=32, temperature=0.0, max_prompt_tokens=1024, engines="target weights fp32, draft engine torch", threads=2,
        data_source="local", command="python evaluation/run.py --n 4", versions=report.package_versions(),
        machine=report.machine_description(), examples_per_task=report.examples_per_task(synthetic_records()),
    )
    summaries = report.write_report(synthetic_records(), settings, tmp_path)
    by_key = {(s.task, s.method): s for s in summaries}
    anypair_cnn = by_key[("cnn_dailymail", "anypair")]
    assert anypair_cnn.speedup.median == pytest.approx(2.25)  # speedups 1.5, 2, 2.5, 3
    assert anypair_cnn.identical_rate == 0.75 and anypair_cnn.rouge["rouge1"] == 40.0
    assert by_key[("humaneval", "hf-uag")].speedup.geometric_mean == pytest.approx(0.5)
    assert by_key[("humaneval", BASELINE_METHOD)].pass_at_1 == 0.5 and by_key[("humaneval", BASELINE_METHOD)].speedup is None

    markdown = (tmp_path / report.REPORT_MARKDOWN).read_text()
    assert "4 examples per task" in markdown
    assert "| method (draft) | cnn_dailymail | humaneval |" in markdown  # medians at a glance
    assert "| anypair (Draft-A) | 2.25x (n=4) | – |" in markdown and "| hf-uag (Draft-A) | – | 0.50x (n=4) |" in markdown
    settings.n_requested = 20  # a run stopped early says what its figures rest on
    assert "humaneval 4, cnn_dailymail 4 (of 20 asked for)" in report.examples_phrase(settings)

    saved = json.loads((tmp_path / report.REPORT_JSON).read_text())
    assert saved["settings"]["threads"] == 2 and saved["settings"]["versions"]["torch"]
    assert len(saved["examples"]) == 16 and len(saved["summaries"]) == 4
    table = (tmp_path / report.REPORT_MARKDOWN).read_text()
    assert "| cnn_dailymail | anypair (Draft-A) | 4 | 2.25 [" in table and "pass@1 50.0%" in table
    # time to first token beside the request end to end (medians), with the prompt's length
    assert "| tok/s | prompt tokens | TTFT s | end-to-end s |" in table
    assert anypair_cnn.time_to_first_token_s_median == 0.4 and anypair_cnn.total_time_s_median == pytest.approx(7.2)
    assert "| 4.50 | 100 | 0.40 | 7.20 |" in table  # 32 tokens at 3-6 tok/s: 10.7, 8, 6.4, 5.3 s
    assert "| 2.00 | 100 | 0.40 | 16.00 |" in table  # the baseline
    assert "prompts cut to 1024 tokens" in table
    settings.max_prompt_tokens = None
    assert "documents whole (prompts up to the target's context)" in report.settings_lines(settings)
    assert "Command: `python evaluation/run.py --n 4`" in table
    png = (tmp_path / report.REPORT_PLOT).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_failed_generations_are_counted_not_averaged(tmp_path):
    rows = synthetic_records()
    example = data.Example(task="humaneval", example_id="HumanEval/9", document="def f():\n", reference="")
    prompt = prompts.BuiltPrompt(text="def f():\n", prompt_tokens=4, truncated=False, uses_chat_template=False)
    failing = NamedMethod("hf-uag", "org/Draft-A")
    failed = run.failure_record(example, failing, prompt, RuntimeError("size of tensor a (518)\n must match"))
    assert failed.error == "RuntimeError: size of tensor a (518) must match" and failed.finish_reason == "error"
    rows.append(synthetic_record("humaneval", "HumanEval/9", BASELINE_METHOD, "", 2.0, passed=True))
    rows.append(failed)
    # a method that failed everywhere still gets a row that says so
    rows.append(run.failure_record(example, NamedMethod("anypair", "org/Draft-B"), prompt, ValueError("boom")))
    summaries = {(s.task, s.method, s.draft): s for s in report.summarize(rows)}
    uag = summaries[("humaneval", "hf-uag", "org/Draft-A")]
    assert uag.n == 4 and uag.failed == 1 and uag.speedup.median == pytest.approx(0.5)
    assert uag.errors == ["RuntimeError: size of tensor a (518) must match"]
    dead = summaries[("humaneval", "anypair", "org/Draft-B")]
    assert dead.n == 0 and dead.failed == 1
    table = report.markdown_table(list(summaries.values()))
    assert "| 4 (1 failed) |" in table and "| 0 (1 failed) | failed: ValueError: boom" in table
    glance = report.glance_table(list(summaries.values()))
    assert "| hf-uag (Draft-A) | – | 0.50x (n=4, 1 failed) |" in glance and "| anypair (Draft-B) | – | failed 1/1 |" in glance
    # a failure is a finished job: resuming does not retry it
    store = records.RecordStore(tmp_path)
    store.append(failed)
    assert records.RecordStore(tmp_path).is_done("humaneval", "HumanEval/9", "hf-uag", "org/Draft-A")


def test_run_cli_arguments():
    args = run.parse_args(["--task", "all", "--n", "3", "--max-new-tokens", "32", "--methods", "anypair,hf-uag",
                           "--draft", "a/x, b/y"])
    assert args.tasks == ["humaneval", "scrolls", "cnn_dailymail"]
    assert args.method_names == ["target", "anypair", "hf-uag"]  # the baseline is always run
    assert args.drafts == ["a/x", "b/y"]
    with pytest.raises(SystemExit):
        run.parse_args(["--methods", "beam-search"])


def test_documents_are_read_whole_by_default_and_a_limit_still_cuts_them():
    args = run.parse_args([])
    assert args.max_prompt_tokens is None and run.result_settings(args)["max_prompt_tokens"] is None
    # whole: what the target's context leaves beside the new tokens (a 13k-token meeting fits 32k)
    assert run.prompt_limit(None, 32768, 128) == 32640
    assert run.prompt_limit(1024, 32768, 128) == 1024
    assert run.parse_args(["--max-prompt-tokens", "1024"]).max_prompt_tokens == 1024
    with pytest.raises(SystemExit):
        run.parse_args(["--max-prompt-tokens", "0"])


# ---- prompts, with the real Qwen2.5 tokenizer ---------------------------------------------------


@pytest.fixture(scope="module")
def qwen_tokenizer(zoo_fetch):
    """Qwen2.5-Coder-0.5B's tokenizer and chat template: the 1.5B target's, in the test group."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(zoo_fetch[QWEN_SMALL])


def test_scrolls_prompt_is_cut_in_the_transcript_and_keeps_the_query(qwen_tokenizer):
    example = data.load_task("scrolls")[0]
    built = prompts.build_prompt(example, qwen_tokenizer, max_prompt_tokens=600)
    assert built.truncated and built.uses_chat_template
    assert built.prompt_tokens <= 600
    assert built.prompt_tokens == len(qwen_tokenizer(built.text, add_special_tokens=False)["input_ids"])
    assert built.text.endswith(f"Query:\n{example.query}\n\nAnswer:<|im_end|>\n<|im_start|>assistant\n")
    kept_transcript = built.text.split("Transcript:\n", 1)[1].split("\n\nQuery:", 1)[0]
    assert example.document.startswith(kept_transcript)  # the start of the meeting, cut at a line end
    assert example.document[len(kept_transcript)] == "\n"
    assert prompts.QMSUM_INSTRUCTION in built.text
    # The cut is as late as it can be: one more utterance would not have fitted.
    next_utterance = example.document[len(kept_transcript) + 1 :].split("\n", 1)[0]
    one_more_line = built.text.replace(kept_transcript, kept_transcript + "\n" + next_utterance, 1)
    assert len(qwen_tokenizer(one_more_line, add_special_tokens=False)["input_ids"]) > 600


def test_a_prompt_that_fits_is_left_whole(qwen_tokenizer):
    example = data.load_task("cnn_dailymail")[0]
    built = prompts.build_prompt(example, qwen_tokenizer, max_prompt_tokens=4096)
    assert not built.truncated and example.document in built.text
    assert built.text.startswith("<|im_start|>system\n") and prompts.SUMMARIZE_INSTRUCTION in built.text


def test_a_meeting_is_read_whole_without_a_limit_and_the_warm_up_reads_a_short_cut(qwen_tokenizer, monkeypatch):
    example = data.load_task("scrolls")[0]
    whole = prompts.build_prompt(example, qwen_tokenizer)  # no limit: the document whole
    assert not whole.truncated and example.document in whole.text and whole.prompt_tokens > 5000
    assert whole.prompt_tokens == len(qwen_tokenizer(whole.text, add_special_tokens=False)["input_ids"])
    assert prompts.build_prompt(example, qwen_tokenizer, whole.prompt_tokens).text == whole.text
    warm = run.warm_up_prompt(example, qwen_tokenizer, run.prompt_limit(None, 32768, 128))
    assert warm.truncated and warm.prompt_tokens <= run.WARM_UP_PROMPT_TOKENS
    code = data.load_task("humaneval")[0]  # code is never cut: past the warm-up's length, its own prompt
    monkeypatch.setattr(run, "WARM_UP_PROMPT_TOKENS", 20)
    assert run.warm_up_prompt(code, qwen_tokenizer, 32640).text == prompts.build_prompt(code, qwen_tokenizer).text


def test_humaneval_prompt_opens_the_reply_with_the_function(qwen_tokenizer):
    example = data.load_task("humaneval")[0]
    built = prompts.build_prompt(example, qwen_tokenizer)
    assert built.text.endswith("<|im_start|>assistant\n```python\n" + example.document)
    with pytest.raises(prompts.PromptError, match="cannot be cut"):
        prompts.build_prompt(example, qwen_tokenizer, max_prompt_tokens=50)


def test_an_instruction_longer_than_the_limit_is_refused(qwen_tokenizer):
    with pytest.raises(prompts.PromptError, match="raise --max-prompt-tokens"):
        prompts.build_prompt(data.load_task("scrolls")[0], qwen_tokenizer, max_prompt_tokens=40)



# ---- resuming a run, refusing another configuration, the report from the folder alone ----------


class ScriptedEvaluationMethod:
    """A method for run.run_examples: writes fixed ids at a fixed speed, logs its timed calls (the
    warm-up is not logged) and raises KeyboardInterrupt once `budget["calls"]` timed calls are used up."""

    def __init__(self, name, log, budget, draft_name="", tokens_per_second=2.0):
        self.name, self.draft_name, self.log, self.budget = name, draft_name, log, budget
        self.tokens_per_second = tokens_per_second

    def generate(self, prompt, decoding):
        from anypair.benchmarking.methods import MethodOutput

        if decoding.max_new_tokens != run.WARM_UP_TOKENS:
            if "calls" in self.budget:
                if self.budget["calls"] == 0:
                    raise KeyboardInterrupt  # what Ctrl-C or a lost session does mid-run
                self.budget["calls"] -= 1
            self.log.append((self.name, self.draft_name, prompt.text))
        ids = [5, 6, 7, 8]
        return MethodOutput(text="A summary.", target_ids=ids, prompt_tokens=3, time_to_first_token_s=0.1,
                            total_time_s=len(ids) / self.tokens_per_second, finish_reason="length")


def scripted_run(tmp_path, log, budget):
    from anypair.benchmarking.methods import Decoding

    examples = {"cnn_dailymail": [data.Example(task="cnn_dailymail", example_id=str(i), document=f"Article {i}.",
                                               reference="A summary.") for i in range(3)]}
    methods = [ScriptedEvaluationMethod("target", log, budget),
               ScriptedEvaluationMethod("anypair", log, budget, draft_name="org/Draft-A", tokens_per_second=3.0),
               ScriptedEvaluationMethod("llama.cpp-alone", log, budget, tokens_per_second=2.5)]
    store = records.RecordStore(tmp_path)

    def prompt_for(example):
        return prompts.BuiltPrompt(text=example.document, prompt_tokens=3, truncated=False, uses_chat_template=False)

    run.run_examples(methods, store, examples, Decoding(max_new_tokens=16), prompt_for)
    return examples


def test_an_interrupted_run_continues_without_redoing_what_is_recorded(tmp_path):
    first_log = []
    with pytest.raises(KeyboardInterrupt):
        scripted_run(tmp_path, first_log, {"calls": 4})
    assert len(first_log) == 4
    done_before = set(records.RecordStore(tmp_path).records)
    assert len(done_before) == 4  # each finished generation was appended at once

    second_log = []
    scripted_run(tmp_path, second_log, {})
    assert len(second_log) == 9 - 4
    redone = [(name, draft, text) for name, draft, text in second_log
              if ("cnn_dailymail", text.split()[1].rstrip("."), name, draft) in done_before]
    assert redone == []
    store = records.RecordStore(tmp_path)
    assert len(store.records) == 9 and len(store.path.read_text().splitlines()) == 9  # nothing twice
    # the resumed methods still compare with the baseline recorded before the interruption
    assert all(store.get("cnn_dailymail", str(i), "anypair", "org/Draft-A").identical_to_baseline for i in range(3))

    third_log = []
    scripted_run(tmp_path, third_log, {})
    assert third_log == []  # everything recorded: nothing runs again


def test_the_warm_up_reads_its_own_short_prompt_and_every_timed_call_the_whole_one(tmp_path):
    from anypair.benchmarking.methods import Decoding

    seen = []

    class Logging(ScriptedEvaluationMethod):
        def generate(self, prompt, decoding):
            seen.append((self.name, decoding.max_new_tokens == run.WARM_UP_TOKENS, prompt.text))
            return super().generate(prompt, decoding)

    examples = {"scrolls": [data.Example(task="scrolls", example_id="m", document="a long meeting", reference="x")]}

    def built(text):
        return prompts.BuiltPrompt(text=text, prompt_tokens=3, truncated=False, uses_chat_template=False)

    methods = [Logging("target", [], {}), Logging("llama.cpp-alone", [], {})]
    run.run_examples(methods, records.RecordStore(tmp_path), examples, Decoding(max_new_tokens=16),
                     lambda e: built("whole: " + e.document), lambda e: built("cut"))
    assert [(name, text) for name, warm, text in seen if warm] == [("target", "cut"), ("llama.cpp-alone", "cut")]
    assert {text for _, warm, text in seen if not warm} == {"whole: a long meeting"}
    store = records.RecordStore(tmp_path)  # each whole meeting's generation is on disk as soon as it ends
    assert store.is_done("scrolls", "m", "target", "") and store.is_done("scrolls", "m", "llama.cpp-alone", "")


def test_the_published_evaluation_table_shows_both_times_where_the_record_has_them():
    from anypair.benchmarking import published

    settings = dict(target="org/Target", n_requested=2, max_new_tokens=128, threads=2, max_prompt_tokens=None)
    summary = dict(task="scrolls", method="llama.cpp-alone", draft="", n=2, speedup=None, tokens_per_second_mean=5.0,
                   prompt_tokens_mean=13210.4, time_to_first_token_s_median=61.25, total_time_s_median=88.5,
                   rouge={"rouge1": 30.0, "rouge2": 8.0, "rougeLsum": 25.0})
    table = published.Table("t", "evaluation", ("r.json",), "python evaluation/run.py")
    lines = published.KINDS["evaluation"](table, [{"settings": settings, "summaries": [summary]}])
    assert "documents whole" in lines[0]
    assert "time to first token, s (median)" in lines[2] and "end to end, s (median)" in lines[2]
    assert "| 5.00 | 13210 | 61.25 | 88.50 |" in lines[4] and "R-1/2/L 30.0/8.0/25.0" in lines[4]
    del summary["total_time_s_median"]  # a record made before: its table as published
    assert "end to end" not in published.KINDS["evaluation"](table, [{"settings": settings, "summaries": [summary]}])[2]


def test_llama_cpp_alone_grows_its_context_for_a_whole_meeting(zoo_fetch):
    from types import SimpleNamespace

    from anypair.backends.llama_cpp import llama_cpp_available
    from anypair.backends.llama_cpp_guard import probe_failure
    from anypair.backends.sources import gguf_of
    from anypair.benchmarking.methods import LlamaCppAloneMethod
    from anypair.errors import InputError

    gguf = gguf_of(QWEN_SMALL)
    if not llama_cpp_available() or probe_failure(gguf, 1) is not None:
        pytest.skip("llama.cpp does not run here")
    method = LlamaCppAloneMethod("llama.cpp-alone", gguf, SimpleNamespace(), threads=1)
    assert method.llama.n_ctx() == 8192 and method.trained_context == 32768
    method._hold(8000)
    assert method.llama.n_ctx() == 8192  # enough already: nothing reloaded
    method._hold(13210 + 128)
    assert method.llama.n_ctx() == 14336  # the next 1,024 up
    with pytest.raises(InputError, match="trained context of 32768"):
        method._hold(40000)


def test_a_finished_run_loads_no_model_when_run_again(tmp_path, monkeypatch, capsys):
    args = run.parse_args(["--out", str(tmp_path), "--task", "cnn_dailymail", "--n", "1", "--methods", "target"])
    example = data.load_task("cnn_dailymail")[0]
    records.RecordStore(tmp_path).append(synthetic_record("cnn_dailymail", example.example_id, BASELINE_METHOD, "", 2.0))
    monkeypatch.setattr(run, "load_models", lambda *a, **k: pytest.fail("a finished run must not load models"))
    run.run_all(args, records.RecordStore(tmp_path), {"cnn_dailymail": [example]})
    assert "nothing to do" in capsys.readouterr().err


def test_a_run_with_other_settings_is_refused_in_one_line_and_not_mixed_in(tmp_path, monkeypatch, capsys):
    first = ["--out", str(tmp_path), "--task", "cnn_dailymail", "--n", "1"]
    records.check_or_write_settings(tmp_path, run.result_settings(run.parse_args(first)))
    records.RecordStore(tmp_path).append(synthetic_record("cnn_dailymail", "241", BASELINE_METHOD, "", 2.0))
    before = (tmp_path / records.RECORDS_FILE).read_text()
    monkeypatch.setattr(run, "run_all", lambda *a, **k: pytest.fail("a refused run must not run"))
    assert run.main(first + ["--max-new-tokens", "64"]) == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and "max_new_tokens was 128, now 64" in message and "another --out" in message
    assert (tmp_path / records.RECORDS_FILE).read_text() == before
    assert json.loads((tmp_path / records.SETTINGS_FILE).read_text())["max_new_tokens"] == 128


def pair_records():
    """Two pairs (drafts A and B) on two tasks, 5 examples each, with llama.cpp alone beside them."""
    rows = []
    for task in ("humaneval", "cnn_dailymail"):
        for i in range(5):
            example_id = f"{task}-{i}"
            rows.append(synthetic_record(task, example_id, BASELINE_METHOD, "", 2.0))
            rows.append(synthetic_record(task, example_id, "llama.cpp-alone", "", 2.5))
            for draft, speed in (("org/Draft-A", 2.4 + 0.1 * i), ("org/Draft-B", 1.8 + 0.05 * i)):
                rows.append(synthetic_record(task, example_id, "anypair", draft, speed, acceptance_rate=0.6,
                                             mean_accepted_per_round=1.2, rounds=10, identical_to_baseline=True))
                rows.append(synthetic_record(task, example_id, "anypair-hybrid", draft, speed + 0.2, acceptance_rate=0.5,
                                             mean_accepted_per_round=1.0, rounds=12, identical_to_baseline=True))
    return rows


def test_report_only_writes_tables_and_figures_from_the_saved_records_alone(tmp_path, monkeypatch, capsys):
    args = run.parse_args(["--out", str(tmp_path)])
    records.check_or_write_settings(tmp_path, run.result_settings(args))
    records.write_run_file(tmp_path, dict(run.run_description(args, ["--out", "evaluation/measured/x"]),
                                          machine={"cpu": "the measuring machine"}))
    store = records.RecordStore(tmp_path)
    for record in pair_records():
        store.append(record)
    monkeypatch.setattr(run, "load_models", lambda *a, **k: pytest.fail("--report-only must not load a model"))
    monkeypatch.setattr(run, "load_task", lambda *a, **k: pytest.fail("--report-only needs no data"))

    assert run.main(["--report-only", "--out", str(tmp_path)]) == 0
    for name in (report.REPORT_MARKDOWN, report.REPORT_JSON):
        assert (tmp_path / name).stat().st_size > 0
    for name in (report.REPORT_PLOT, report.LLAMA_CPP_PLOT):
        png = (tmp_path / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5000
    markdown = (tmp_path / report.REPORT_MARKDOWN).read_text()
    assert "### Qwen2.5-Coder-1.5B-Instruct + Draft-A" in markdown and "### Qwen2.5-Coder-1.5B-Instruct + Draft-B" in markdown
    assert "tok/s over llama.cpp alone" in markdown and "| 1.00 (itself) |" in markdown
    assert "examples per task: humaneval 5, cnn_dailymail 5 (of 20 asked for)" in markdown
    assert "the measuring machine" in markdown  # the run's machine, not the one writing the report
    assert "Command: `python evaluation/run.py --out evaluation/measured/x`" in markdown
    # a cell: pair A, humaneval, anypair: speedups 1.2..1.4 over the target, 0.96..1.12 over llama.cpp
    saved = json.loads((tmp_path / report.REPORT_JSON).read_text())
    cell = next(s for s in saved["summaries"]
                if (s["task"], s["method"], s["draft"]) == ("humaneval", "anypair", "org/Draft-A"))
    assert cell["speedup"]["median"] == pytest.approx(1.3) and cell["versus_llama_cpp"]["median"] == pytest.approx(1.04)
    assert cell["speedup"]["median_ci"]["low"] <= 1.3 <= cell["speedup"]["median_ci"]["high"]
    printed = capsys.readouterr().out
    assert "### Qwen2.5-Coder-1.5B-Instruct + Draft-A" in printed and "vs_llama_cpp.png" in printed

    # restricted to the first examples of a task, the data order is read (still no model)
    monkeypatch.setattr(run, "load_task", lambda task, **k: [data.Example(task, f"{task}-{i}", "", "") for i in range(2)])
    assert run.main(["--report-only", "--out", str(tmp_path), "--task", "humaneval", "--n", "2"]) == 0
    saved = json.loads((tmp_path / report.REPORT_JSON).read_text())
    assert {e["task"] for e in saved["examples"]} == {"humaneval"} and len(saved["examples"]) == 2 * 6


def test_report_only_on_a_folder_without_a_run_says_so(tmp_path, capsys):
    assert run.main(["--report-only", "--out", str(tmp_path / "nothing")]) == 1
    assert "holds no run" in capsys.readouterr().err


def test_the_default_run_is_the_published_one():
    args = run.parse_args([])
    assert args.n == 20 and args.max_new_tokens == 128 and args.tasks == ["humaneval", "scrolls", "cnn_dailymail"]
    assert args.drafts == ["HuggingFaceTB/SmolLM2-135M-Instruct", "google/gemma-3-270m", "Qwen/Qwen2.5-Coder-0.5B-Instruct"]
    assert args.method_names == ["target", "anypair", "anypair-hybrid", "hf-uag", "llama.cpp-alone"]
    planned = run.planned_methods(args.method_names, args.drafts)
    assert len(planned) == 2 + 3 * 3 and ("llama.cpp-alone", "") in planned and ("anypair-hybrid", "google/gemma-3-270m") in planned


def test_every_measured_record_is_in_the_index_and_every_indexed_one_exists():
    """evaluation/measured/README.md names every record there, so none is a file nobody can place."""
    import re

    measured = Path(__file__).resolve().parent.parent / "evaluation" / "measured"
    indexed = set()
    for line in (measured / "README.md").read_text().splitlines():
        if line.startswith("| `"):  # a table row: its first cell names the record(s)
            names = re.findall(r"`([^`]+)`", line.split("|")[1])
            # "`x.json`, `.md`": the sweep's table beside its JSON
            indexed |= {names[0].rsplit(".", 1)[0] + n if n.startswith(".") else n for n in names}
    on_disk = {p.name + ("/" if p.is_dir() else "") for p in measured.iterdir() if p.name != "README.md"}
    assert on_disk - indexed == set(), "records missing from evaluation/measured/README.md"
    assert indexed - on_disk == set(), "records indexed in evaluation/measured/README.md but absent"
