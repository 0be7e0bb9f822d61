"""The benchmark harness (anypair.benchmarking): the interleaved runner with scripted methods (order,
identical-output checks, hooks, figures, report, JSON), the prompt type with the real Qwen2.5
tokenizer, and `anypair bench` end to end on the test pair."""
from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from anypair.benchmarking.harness import Job, OutputMismatch, interleaved_order, run_interleaved
from anypair.benchmarking.methods import (
    Decoding,
    MethodOutput,
    ProposalCounter,
    cut_after_end_of_sequence,
)
from anypair.benchmarking.prompts import BenchPrompt, prompts_from_file
from anypair.benchmarking.report import BenchReport, RunFigures, format_report, save_json
from anypair.errors import InputError

QWEN_SMALL = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
GREEDY = Decoding(max_new_tokens=4)


class ScriptedMethod:
    """A method that writes `ids` (or `ids_for(job example)`) and logs every call in a shared list."""

    def __init__(self, name, log, ids=(1, 2, 3), ids_for=None, seconds=1.0, keyed_sampling=False):
        self.name, self.draft_name, self.log = name, "", log
        self.keyed_sampling = keyed_sampling
        self.ids_for = ids_for or (lambda prompt: list(ids))
        self.seconds = seconds

    def generate(self, prompt, decoding):
        self.log.append((self.name, prompt.text))
        ids = self.ids_for(prompt)
        return MethodOutput(text="x", target_ids=ids, prompt_tokens=5, time_to_first_token_s=0.1 * self.seconds,
                            total_time_s=self.seconds, finish_reason="length")


def jobs_of(*texts, decoding=GREEDY):
    return [Job(i, BenchPrompt(text), decoding) for i, text in enumerate(texts)]


def test_interleaving_puts_the_baseline_first_and_rotates_the_rest():
    names = ["target", "anypair", "hf-uag", "anypair-lookup"]
    orders = [interleaved_order(names, i) for i in range(4)]
    assert all(order[0] == "target" for order in orders)
    assert orders[0][1:] == ["anypair", "hf-uag", "anypair-lookup"]
    assert orders[1][1:] == ["hf-uag", "anypair-lookup", "anypair"]
    assert orders[3] == orders[0]
    assert interleaved_order(["target"], 5) == ["target"]


def test_every_method_is_warmed_up_then_each_job_runs_baseline_first_in_rotation():
    log = []
    methods = [ScriptedMethod(name, log) for name in ("target", "a", "b")]
    results = run_interleaved(methods, jobs_of("p0", "p1", "p2"), progress=False)
    warm, timed = log[:3], log[3:]
    assert warm == [("target", "p0"), ("a", "p0"), ("b", "p0")]
    assert timed == [("target", "p0"), ("a", "p0"), ("b", "p0"),
                     ("target", "p1"), ("b", "p1"), ("a", "p1"),
                     ("target", "p2"), ("a", "p2"), ("b", "p2")]
    # the runs come back in the order the methods were given, whatever order they ran in
    assert [[r.method for r in done.runs] for done in results] == [["target", "a", "b"]] * 3
    assert [done.runs[0].example for done in results] == [0, 1, 2]


def test_greedy_outputs_are_compared_with_the_baseline_and_sampled_ones_only_between_keyed_samplers():
    log = []
    methods = [ScriptedMethod("target", log, ids=[1, 2, 3], keyed_sampling=True),
               ScriptedMethod("same", log, ids=[1, 2, 3], keyed_sampling=True),
               ScriptedMethod("other", log, ids=[1, 2, 4], keyed_sampling=True),
               ScriptedMethod("own-sampler", log, ids=[1, 2, 4])]
    greedy = run_interleaved(methods, jobs_of("p"), progress=False)[0].runs
    assert [r.identical_to_target for r in greedy] == [None, True, False, False]
    sampled = run_interleaved(methods, jobs_of("p", decoding=Decoding(4, temperature=0.7)), progress=False)[0].runs
    assert [r.identical_to_target for r in sampled] == [None, True, False, None]


def test_a_mismatch_stops_the_run_when_asked():
    log = []
    methods = [ScriptedMethod("target", log), ScriptedMethod("drifts", log, ids_for=lambda p: [9] if p.text == "p1" else [1, 2, 3])]
    finished = []
    with pytest.raises(OutputMismatch, match="drifts changed the output of example 1"):
        run_interleaved(methods, jobs_of("p0", "p1", "p2"), progress=False, after_job=finished.append,
                        stop_on_mismatch=True)
    assert [done.job.example for done in finished] == [0]
    assert ("target", "p2") not in log
    # without the check the run goes on and reports the mismatch
    results = run_interleaved(methods, jobs_of("p0", "p1", "p2"), progress=False)
    assert [done.runs[1].identical_to_target for done in results] == [True, False, True]


def test_hooks_see_every_timed_output_and_every_finished_job():
    log, seen, finished = [], [], []
    methods = [ScriptedMethod("target", log), ScriptedMethod("a", log, ids=[1, 2])]

    def logprob(job, output):
        seen.append((job.example, len(output.target_ids)))
        return -0.5 * len(output.target_ids)

    results = run_interleaved(methods, jobs_of("p0", "p1"), progress=False, target_logprob=logprob,
                              after_job=finished.append)
    assert sorted(seen) == [(0, 2), (0, 3), (1, 2), (1, 3)]  # timed runs only: not the warm-up
    assert finished == results
    assert [r.target_logprob for r in results[0].runs] == [-1.5, -1.0]
    assert [o.target_ids for o in results[1].outputs] == [[1, 2, 3], [1, 2]]


def test_methods_need_distinct_names():
    log = []
    with pytest.raises(ValueError, match="distinct names"):
        run_interleaved([ScriptedMethod("a", log), ScriptedMethod("a", log)], jobs_of("p"), progress=False)


def test_figures_from_a_method_output():
    output = MethodOutput(text="x", target_ids=[1, 2, 3, 4, 5], prompt_tokens=10, time_to_first_token_s=0.2,
                          total_time_s=1.0, finish_reason="length", rounds=2, draft_tokens_proposed=8,
                          draft_tokens_accepted=2, drafting_s=0.3, verifying_s=0.5, translating_s=0.01)
    assert output.tokens_per_second == 5.0 and output.acceptance_rate == 0.25 and output.mean_accepted_per_round == 1.0
    figures = RunFigures.of("anypair-model", 3, output, identical_to_target=True, target_logprob=-0.2)
    assert (figures.example, figures.new_tokens, figures.prompt_tokens) == (3, 5, 10)
    assert figures.prefill_ms == pytest.approx(200.0) and figures.ms_per_token == pytest.approx(200.0)  # 800 ms / 4
    assert figures.tokens_per_s == 5.0 and figures.acceptance == 0.25 and figures.mean_accepted == 1.0
    assert (figures.draft_ms, figures.verify_ms, figures.translate_ms) == pytest.approx((300.0, 500.0, 10.0))
    assert figures.rounds == 2 and figures.identical_to_target and figures.target_logprob == -0.2
    # a method without a draft, or that reports neither rounds nor phases
    alone = RunFigures.of("llama.cpp-alone", 0, MethodOutput("x", [1], 10, 0.1, 0.5, "eos"))
    assert alone.acceptance is None and alone.mean_accepted is None and alone.rounds == 0 and alone.draft_ms == 0.0
    assert alone.ms_per_token == pytest.approx(400.0)  # one token: the time after it, not divided by zero
    undrafted = MethodOutput("x", [1, 2], 10, 0.1, 1.0, "length", rounds=2, draft_tokens_proposed=0, draft_tokens_accepted=0)
    assert RunFigures.of("anypair-model", 0, undrafted).acceptance is None


def test_method_output_conventions():
    baseline = MethodOutput("x", [1], 10, 0.1, 1.0, "length")
    assert baseline.acceptance_rate is None and baseline.mean_accepted_per_round is None
    # every method's ids end at (and keep) the first EOS, as anypair's target_ids do
    assert cut_after_end_of_sequence([5, 6, 7], frozenset({7})) == [5, 6, 7]
    assert cut_after_end_of_sequence([5, 7, 6, 7], frozenset({7})) == [5, 7]
    assert cut_after_end_of_sequence([5, 6], frozenset({7})) == [5, 6]
    assert Decoding(16).do_sample is False and Decoding(16, temperature=0.7).do_sample


def test_one_proposal_counter_per_target_model():
    class FakeModel:
        def _get_candidate_generator(self, *args, **kwargs):
            raise AssertionError("not called here")

    model = FakeModel()
    first = ProposalCounter.for_model(model)
    wrapped = model._get_candidate_generator
    assert ProposalCounter.for_model(model) is first and model._get_candidate_generator is wrapped
    assert ProposalCounter.for_model(FakeModel()) is not first


def scripted_report():
    """Two prompts: target at 2 and 4 tok/s, anypair at 3 and 8 (1.5x, 2x), llama.cpp at 6 and 8."""
    log = []
    speeds = {"target": {"p0": 2.0, "p1": 4.0}, "anypair-model": {"p0": 3.0, "p1": 8.0},
              "llama.cpp-alone": {"p0": 6.0, "p1": 8.0}}

    class Timed(ScriptedMethod):
        def generate(self, prompt, decoding):
            output = super().generate(prompt, decoding)
            output.target_ids = [1] * 12
            output.total_time_s = 12 / speeds[self.name][prompt.text]
            return output

    methods = [Timed(name, log) for name in speeds]
    results = run_interleaved(methods, jobs_of("p0", "p1"), progress=False)
    return BenchReport(settings={"target": "t", "engines": "torch", "verify_ms": {"1": 100.0, "4": 130.0},
                                 "draft_step_ms": 5.0},
                       runs=[r for done in results for r in done.runs])


def test_report_medians_speedups_and_tables():
    report = scripted_report()
    assert report.median("target", "tokens_per_s") == pytest.approx(3.0)
    assert report.speedups("anypair-model") == pytest.approx([1.5, 2.0])
    assert report.speedups("target", baseline="llama.cpp-alone") == pytest.approx([1 / 3, 0.5])
    assert report.median("target", "acceptance") != report.median("target", "acceptance")  # nan: no figures
    text = format_report(report)
    assert "1.75x" in text  # the median of the per-prompt speedups
    assert "2/2" in text  # anypair's outputs identical to the target's on both prompts
    assert "vs llama.cpp" in text and "x k=1" in text and "1.30" in text
    assert "draft step 5.0 ms = 5.0% of a single-token target step" in text


def test_json_round_trip(tmp_path):
    report = scripted_report()
    path = tmp_path / "bench.json"
    save_json(report, str(path))
    saved = json.loads(path.read_text())
    assert saved["settings"] == report.settings
    assert [RunFigures(**row) for row in saved["runs"]] == report.runs
    assert list(saved["runs"][0]) == list(asdict(report.runs[0]))  # the row layout `anypair bench` has always saved


def test_prompts_file_splits_on_two_blank_lines(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("def a():\n\n    pass\n\n\ndef b():\n\n\n\n\ndef c():\n")
    assert prompts_from_file(str(path), 2) == ["def a():\n\n    pass", "def b():"]
    assert len(prompts_from_file(str(path), 10)) == 3
    (tmp_path / "empty.txt").write_text("\n\n\n")
    with pytest.raises(InputError, match="holds no prompt"):
        prompts_from_file(str(tmp_path / "empty.txt"), 2)
    with pytest.raises(InputError, match="cannot read"):
        prompts_from_file(str(tmp_path / "missing.txt"), 2)


def test_a_chat_prompt_gives_every_method_the_ids_the_chat_template_gives(zoo_fetch):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(zoo_fetch[QWEN_SMALL])
    prompt = BenchPrompt.chat(tokenizer, "def fib(n):\n    ")
    assert prompt.uses_chat_template and prompt.messages == ({"role": "user", "content": "def fib(n):\n    "},)
    templated = tokenizer.apply_chat_template(list(prompt.messages), add_generation_prompt=True, tokenize=True)
    templated = templated["input_ids"] if hasattr(templated, "keys") else templated
    assert prompt.target_ids(tokenizer) == list(templated)
    raw = BenchPrompt("def fib(n):")
    assert raw.target_ids(tokenizer) == tokenizer("def fib(n):")["input_ids"]


@pytest.mark.slow
def test_anypair_bench_end_to_end_on_the_test_pair(zoo_fetch, tmp_path):
    """`anypair bench` on Qwen2.5-Coder-0.5B + SmolLM2: the target, anypair, transformers' UAG and
    llama.cpp alone each write a row, and anypair's output is the target's."""
    from anypair.cli import main

    path = tmp_path / "bench.json"
    status = main(["bench", "-m", QWEN_SMALL, "-a", SMOL, "--n", "1", "--max-new-tokens", "12", "--compare-hf",
                   "--threads", "2", "--json", str(path)])
    assert status == 0
    saved = json.loads(path.read_text())
    rows = {row["method"]: row for row in saved["runs"]}
    assert list(rows) == ["target", "anypair-model", "hf-uag", "llama.cpp-alone"]
    assert rows["anypair-model"]["identical_to_target"] is True
    assert all(row["new_tokens"] > 0 and row["tokens_per_s"] > 0 for row in rows.values())
    assert rows["anypair-model"]["rounds"] > 0 and rows["anypair-model"]["acceptance"] is not None
    settings = saved["settings"]
    assert settings["target"] == QWEN_SMALL and settings["compare_hf"] is True
    assert set(settings["verify_ms"]) == {"1", "2", "3", "4", "6", "8", "12", "16"} and settings["draft_step_ms"] > 0


# ---- anypair bench --sweep -------------------------------------------------------------------------


def test_sweep_prompts_are_cut_to_exactly_the_asked_number_of_target_tokens(zoo_fetch):
    from transformers import AutoTokenizer

    from anypair.benchmarking.sweep import DEFAULT_ARTICLES, articles_from_jsonl, prompt_of_exactly, sweep_prompts

    tokenizer = AutoTokenizer.from_pretrained(zoo_fetch[QWEN_SMALL])  # the 1.5B target's tokenizer
    articles = articles_from_jsonl(DEFAULT_ARTICLES)
    prompts = sweep_prompts(tokenizer, articles, [256, 512], per_length=3)
    for length, found in prompts.items():
        assert len(found) == 3
        for prompt in found:
            assert len(prompt.target_ids(tokenizer)) == length and not prompt.uses_chat_template
            assert any(article.startswith(prompt.text) for article in articles)
    assert prompt_of_exactly(tokenizer, "A short article.", 256) is None
    with pytest.raises(InputError, match="long enough"):
        sweep_prompts(tokenizer, ["A short article."], [256], per_length=1)


def test_the_sweep_articles_ship_inside_the_package():
    """An installed anypair has no ../shared/data: the sweep's default articles are package data."""
    import fnmatch
    import tomllib
    from pathlib import Path

    import anypair
    from anypair.benchmarking.sweep import DEFAULT_ARTICLES, articles_from_jsonl

    package = Path(anypair.__file__).resolve().parent
    assert DEFAULT_ARTICLES.is_relative_to(package) and len(articles_from_jsonl(DEFAULT_ARTICLES)) >= 3
    pyproject = tomllib.loads((package.parent / "pyproject.toml").read_text())
    shipped = pyproject["tool"]["setuptools"]["package-data"]["anypair.benchmarking"]
    inside = DEFAULT_ARTICLES.relative_to(package / "benchmarking").as_posix()
    assert any(fnmatch.fnmatch(inside, pattern) for pattern in shipped), (inside, shipped)


class LengthMethod(ScriptedMethod):
    """Writes `max_new_tokens` ids when EOS is ignored (one id and EOS otherwise), at `speed` tok/s."""

    def __init__(self, name, log, speed):
        super().__init__(name, log)
        self.speed = speed
        self.decodings = []

    def generate(self, prompt, decoding):
        self.decodings.append(decoding)
        ids = [1] * decoding.max_new_tokens if decoding.ignore_eos else [1, 0]
        drafts = self.name.startswith("anypair")
        return MethodOutput(text="x", target_ids=ids, prompt_tokens=len(prompt.text), time_to_first_token_s=0.05,
                            total_time_s=len(ids) / self.speed, finish_reason="length",
                            drafting_s=0.1 if drafts else None, verifying_s=0.2 if drafts else None,
                            rounds=2 if drafts else None)


def test_the_sweep_table_has_one_row_per_example_length_decoding_and_method(tmp_path):
    from anypair.benchmarking.sweep import run_sweep, save_sweep, sweep_markdown

    log = []
    target, anypair, alone = LengthMethod("target", log, 2.0), LengthMethod("anypair-model", log, 3.0), \
        LengthMethod("llama.cpp-alone", log, 2.5)
    prompts = {8: [BenchPrompt("x" * 8), BenchPrompt("y" * 8)], 16: [BenchPrompt("z" * 16), BenchPrompt("w" * 16)]}
    rows = run_sweep([target, anypair, alone], [target, anypair], prompts, [4, 2], [0.0, 1.0], progress=False)
    assert all(d.ignore_eos for d in target.decodings)  # every length holds
    assert {d.temperature for d in target.decodings} == {0.0, 1.0}
    assert all(d.temperature == 0 for d in alone.decodings)  # llama.cpp alone: greedy only
    # 2 prompt lengths x 2 articles x 2 lengths: 3 methods greedy, 2 sampling
    assert len(rows) == 8 * 3 + 8 * 2
    assert {(r.prompt_tokens, r.new_tokens) for r in rows} == {(8, 2), (8, 4), (16, 2), (16, 4)}
    assert all(r.new_tokens in (2, 4) for r in rows)
    by_method = {r.method: r for r in rows if (r.prompt_tokens, r.new_tokens, r.decoding, r.article) == (16, 4, "greedy", 1)}
    assert set(by_method) == {"target", "anypair-model", "llama.cpp-alone"}
    assert by_method["anypair-model"].speedup == pytest.approx(1.5) and by_method["target"].speedup is None
    assert by_method["llama.cpp-alone"].tokens_per_s == pytest.approx(2.5)
    assert by_method["anypair-model"].identical_to_target is True
    # where an assisted run's time went, for reading a losing cell
    assert (by_method["anypair-model"].draft_ms, by_method["anypair-model"].verify_ms) == pytest.approx((100, 200))
    assert by_method["anypair-model"].rounds == 2 and by_method["target"].draft_ms == 0
    assert {r.decoding for r in rows} == {"greedy", "T=1"}

    settings = {"target": "t", "draft": "d", "threads": 2}
    markdown = sweep_markdown(rows, settings)
    table_rows = [line for line in markdown.splitlines() if line.startswith("| 8 |") or line.startswith("| 16 |")]
    assert len(table_rows) == len(rows)
    assert "| new tokens | anypair-model, greedy, prompt 8 |" in markdown
    assert "| 4 | 1.50x |" in markdown
    assert "| draft ms | verify ms | rounds |" in markdown and "| 100 | 200 | 2 |" in markdown
    markdown_path = save_sweep(rows, settings, str(tmp_path / "sweep.json"))
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert len(saved["rows"]) == len(rows) and saved["settings"] == settings
    assert markdown_path.read_text() == markdown


def test_sweep_options_are_checked_before_any_model_loads(tmp_path):
    from anypair.cli import main

    assert main(["bench", "--sweep", "--sweep-new-tokens", "64,x"]) == 2
    assert main(["bench", "--sweep", "--sweep-temperatures", "-1"]) == 2
    assert main(["bench", "--sweep", "--sweep-articles", str(tmp_path / "missing.jsonl")]) == 2


@pytest.mark.slow
def test_anypair_bench_sweep_end_to_end_on_the_test_pair(zoo_fetch, tmp_path):
    """`anypair bench --sweep` on Qwen2.5-Coder-0.5B + SmolLM2, a tiny grid: every row has the prompt
    length and the number of new tokens asked for (EOS ignored), greedy rows are identical."""
    from anypair.cli import main

    path = tmp_path / "sweep.json"
    status = main(["bench", "--sweep", "-m", QWEN_SMALL, "-a", SMOL, "--sweep-prompt-lengths", "48",
                   "--sweep-new-tokens", "3,6", "--sweep-temperatures", "0,1", "--threads", "2", "--json", str(path)])
    assert status == 0
    rows = json.loads(path.read_text())["rows"]
    assert {(r["method"], r["decoding"]) for r in rows} == {
        ("target", "greedy"), ("anypair-model", "greedy"), ("llama.cpp-alone", "greedy"),
        ("target", "T=1"), ("anypair-model", "T=1")}
    assert all(r["prompt_tokens"] == 48 and r["new_tokens"] in (3, 6) for r in rows)
    assert sorted(r["new_tokens"] for r in rows if r["method"] == "target") == [3, 3, 6, 6]
    assert all(r["identical_to_target"] for r in rows if r["decoding"] == "greedy" and r["method"] == "anypair-model")
    assert (tmp_path / "sweep.md").read_text().startswith("Per example")


def test_decode_speedups_leave_out_the_prefill_that_lengths_would_weigh_differently():
    def run(method, new_tokens, prefill_s, ms_per_token):
        total = prefill_s + (new_tokens - 1) * ms_per_token / 1000
        return RunFigures(method, 0, 100, new_tokens, total, 1000 * prefill_s, ms_per_token, new_tokens / total)

    # the same prompt: the target wrote 20 tokens at 40 ms, anypair 120 at 25 ms, both after a 1 s prefill
    report = BenchReport(settings={}, runs=[run("target", 20, 1.0, 40.0), run("anypair", 120, 1.0, 25.0)])
    assert report.decode_speedups("anypair") == pytest.approx([1.6])
    assert report.speedups("anypair")[0] > 2.5  # tok/s: most of the target's short run was its prefill


# ---- anypair bench --regret ------------------------------------------------------------------------


def test_regret_is_the_policy_over_the_best_fixed_length_in_hindsight_per_prompt():
    from anypair.benchmarking.regret import RegretReport, RegretRow

    rows = [RegretRow(0, "model", policy_tps=12.0, fixed_tps={0: 10.0, 1: 11.0, 4: 15.0}, identical=True),
            RegretRow(1, "model", policy_tps=10.0, fixed_tps={0: 10.0, 1: 9.0, 4: 8.0}, identical=True),
            RegretRow(2, "model", policy_tps=9.0, fixed_tps={0: 10.0, 1: 12.0, 4: 11.0}, identical=False)]
    assert [r.best_k for r in rows] == [4, 0, 1]  # the target alone can be the best fixed choice
    assert [round(r.regret, 3) for r in rows] == [0.8, 1.0, 0.75]
    summary = RegretReport({}, rows).summary("model")
    assert summary["median_regret"] == pytest.approx(0.8) and summary["worst_regret"] == pytest.approx(0.75)
    assert summary["worst_vs_target"] == pytest.approx(0.9) and summary["identical"] == 2
    # each fixed length's median speedup over the target alone, the yardstick of a single k for all prompts
    assert summary["median_speedup_by_k"] == {"0": 1.0, "1": 1.1, "4": 1.1}


def test_regret_options_are_checked_before_any_model_loads():
    from anypair.cli import main

    assert main(["bench", "--regret", "--regret-lengths", "0,x"]) == 2
    assert main(["bench", "--regret", "--regret-lengths=-1,2"]) == 2


@pytest.mark.slow
def test_anypair_bench_regret_end_to_end_on_the_test_pair(zoo_fetch, tmp_path):
    """`anypair bench --regret` on Qwen2.5-Coder-0.5B + SmolLM2: one prompt, the policy beside k = 0, 2
    for two drafters; every output is the target's and the JSON holds the per-prompt regret."""
    from anypair.cli import main

    path = tmp_path / "regret.json"
    status = main(["bench", "--regret", "-m", QWEN_SMALL, "-a", SMOL, "--n", "1", "--max-new-tokens", "12",
                   "--drafters", "model,hybrid", "--regret-lengths", "0,2", "--threads", "2", "--json", str(path)])
    assert status == 0
    saved = json.loads(path.read_text())
    assert [(r["drafter"], sorted(r["fixed_tps"])) for r in saved["rows"]] == [("model", ["0", "2"]), ("hybrid", ["0", "2"])]
    assert all(r["identical"] and r["policy_tps"] > 0 and r["regret"] > 0 for r in saved["rows"])
    assert [s["drafter"] for s in saved["summary"]] == ["model", "hybrid"]
    assert saved["settings"]["lengths"] == [0, 2] and saved["settings"]["machine"]
