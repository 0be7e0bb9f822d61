"""Time to first token on long prompts: `anypair bench --prefill 1024,4096,8192,16384`.

What a request pays before its first token is the target's read of its prompt. For each length this
times, from an empty cache, the gguf engine reading that many tokens of a real text and returning the
last position's logits (`engine.reset(); engine.extend(ids[:n])`: the engine chunks the prompt
itself), beside llama.cpp alone on the same GGUF file and, where asked, OpenVINO GenAI on it too (in a
process of its own: `openvino_prefill.py`). The draft's own read of the same text is timed as well:
the draft model reading its tokenization of it, at most its prompt window, as a request's drafter does.

The text is QMSum's meeting transcripts (SCROLLS), from the project's data folder beside the checkout
(`../shared/data/scrolls_qmsum/validation.jsonl`, as `evaluation/data.py` finds it), joined to the
longest length; without it, the CNN/DailyMail articles shipped with anypair, repeated. The JSON and
the table say which. The in-process engines alternate within each repeat (the order rotating from
repeat to repeat), each warmed up first, so the machine's drift falls on all of them; medians.
`evaluation/bench_prefill.py` runs the same measurement with that script's own flags.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from anypair.errors import InputError

#: the engines, by the names the JSON, the table and the plot use
GGUF, LLAMA_CPP, OPENVINO, DRAFT = "gguf", "llama.cpp", "openvino", "draft"
LABELS = {GGUF: "anypair (gguf engine)", LLAMA_CPP: "llama.cpp", OPENVINO: "OpenVINO GenAI", DRAFT: "draft's read"}
#: the table's short column heads
SHORT = {GGUF: "anypair", LLAMA_CPP: "llama.cpp", OPENVINO: "OpenVINO"}
#: the project's data folder as evaluation/data.py finds it: beside the repository's checkout
QMSUM_FILE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scrolls_qmsum" / "validation.jsonl"
#: positions the engines hold beyond the longest prompt
CONTEXT_MARGIN = 64
#: tokens each engine reads once, untimed, before anything is timed
WARM_UP_TOKENS = 64
#: how long the OpenVINO child may take in all (a load converts the GGUF; long prompts are minutes)
OPENVINO_TIMEOUT_S = 4 * 3600
OPENVINO_SCRIPT = Path(__file__).with_name("openvino_prefill.py")


# ---- input --------------------------------------------------------------------------------------


def parse_lengths(text: str, flag: str = "--prefill") -> list[int]:
    """'1024,4096' -> [1024, 4096]: positive integers, in the order given, duplicates dropped."""
    try:
        lengths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"{flag} takes comma-separated prompt lengths in tokens, e.g. 1024,4096; "
                         f"got {text!r}") from None
    if not lengths or min(lengths) < 1:
        raise InputError(f"{flag}: each prompt length must be at least 1 token, got {text!r}")
    return list(dict.fromkeys(lengths))


def trained_context(gguf: Path) -> Optional[int]:
    """The context the GGUF's model was trained for (its `*.context_length`), None where it names none."""
    from anypair.tokenization.gguf_vocab import read_gguf_metadata

    metadata = read_gguf_metadata(gguf)
    return next((int(v) for k, v in metadata.items() if k.endswith(".context_length")), None)


def check_lengths_fit(lengths: Sequence[int], context: Optional[int], model: str) -> None:
    """A prompt must leave its first token a position within the model's trained context."""
    if context is not None and max(lengths) >= context:
        raise InputError(f"--prefill: {max(lengths)} tokens do not fit {model}'s trained context of {context} "
                         f"tokens (its first token needs a position too): ask for at most {context - 1}")


# ---- the text -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptText:
    """The target's ids of the text every engine reads (at least the longest length), and what it is."""

    ids: list[int]
    source: str


def qmsum_transcripts(path: Path) -> list[str]:
    """The meeting transcripts of a SCROLLS QMSum JSONL file (its `input` is the query, a blank line,
    then the transcript), each meeting once."""
    transcripts, seen = [], set()
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("id") in seen:
                continue
            seen.add(row.get("id"))
            _, _, transcript = str(row["input"]).partition("\n\n")
            if transcript.strip():
                transcripts.append(transcript)
    return transcripts


def text_pieces(qmsum: Path = QMSUM_FILE) -> tuple[list[str], str]:
    """QMSum's transcripts where the data folder has them, else the packaged CNN/DailyMail articles."""
    if qmsum.is_file():
        try:
            transcripts = qmsum_transcripts(qmsum)
        except (OSError, ValueError, KeyError):
            transcripts = []
        if transcripts:
            return transcripts, f"SCROLLS QMSum meeting transcripts ({qmsum.name}), joined in file order"
    from anypair.benchmarking.sweep import DEFAULT_ARTICLES, articles_from_jsonl

    return articles_from_jsonl(DEFAULT_ARTICLES), ("CNN/DailyMail articles shipped with anypair, repeated "
                                                   f"(QMSum not found at {qmsum})")


def prompt_text(tokenizer: Any, tokens: int, qmsum: Path = QMSUM_FILE) -> PromptText:
    """At least `tokens` target ids of real text: whole pieces joined by blank lines until long enough,
    the pieces repeated where all of them are shorter."""
    pieces, source = text_pieces(qmsum)
    ids: list[int] = []
    joined: list[str] = []
    while len(ids) < tokens:
        joined.append(pieces[len(joined) % len(pieces)])
        ids = tokenizer("\n\n".join(joined), add_special_tokens=False)["input_ids"]
    return PromptText(list(ids), source)


# ---- timing -------------------------------------------------------------------------------------


@dataclass
class Reader:
    """One engine reading a prompt: `ids_for(n)` is what it reads for the target's n-token prompt."""

    name: str
    backend: Any  # a ModelBackend: reset(), extend(ids)
    ids_for: Callable[[int], list[int]]


def time_read(backend: Any, ids: Sequence[int]) -> float:
    """Seconds to read `ids` from an empty cache, to the last position's logits."""
    backend.reset()
    started = time.perf_counter()
    backend.extend(list(ids))
    seconds = time.perf_counter() - started
    backend.reset()
    return seconds


def measure(readers: Sequence[Reader], lengths: Sequence[int], repeats: int,
            progress: bool = True) -> dict[int, dict[str, list[float]]]:
    """{n: {reader: [seconds per repeat]}}: each reader warmed up once; then per repeat and length every
    reader in turn, the order rotating from repeat to repeat."""
    for reader in readers:
        time_read(reader.backend, reader.ids_for(min(lengths))[:WARM_UP_TOKENS])
    samples: dict[int, dict[str, list[float]]] = {n: {r.name: [] for r in readers} for n in lengths}
    for repeat in range(repeats):
        order = list(readers[repeat % len(readers):]) + list(readers[:repeat % len(readers)])
        for n in lengths:
            for reader in order:
                seconds = time_read(reader.backend, reader.ids_for(n))
                samples[n][reader.name].append(seconds)
                if progress:
                    print(f"  repeat {repeat + 1}/{repeats}, {n} tokens, {reader.name}: {seconds:.2f} s",
                          file=sys.stderr, flush=True)
    return samples


def draft_read_ids(ids: Sequence[int], window: int, max_context: int, margin: int) -> list[int]:
    """What a model drafter reads of its prompt `ids` (`drafters.model.ModelDrafter`): the last `window`
    tokens (0: all), and of a prompt that reaches its context (less `margin`), at most half of it."""
    kept = list(ids[-window:]) if window and len(ids) > window else list(ids)
    limit = max_context - margin
    if len(kept) >= limit:
        kept = kept[-min(window or limit, limit // 2):]
    return kept


# ---- OpenVINO GenAI, in its own process -----------------------------------------------------------


@dataclass
class ChildRun:
    """OpenVINO's figures, or why it is left out (one line)."""

    samples: dict[int, list[float]] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    left_out: Optional[str] = None


def run_openvino(python: str, gguf: Path, prompts: dict[int, list[int]], threads: int, repeats: int,
                 timeout_s: float = OPENVINO_TIMEOUT_S, script: Path = OPENVINO_SCRIPT) -> ChildRun:
    """OpenVINO GenAI's seconds per prompt, from `python` running `script` with the request on stdin.
    Any failure (no such python, no openvino_genai there, a crash, a timeout, output that is no JSON)
    is one line in `left_out`, never an exception."""
    request = {"gguf": str(gguf), "threads": threads, "repeats": repeats,
               "prompts": {str(n): list(ids) for n, ids in prompts.items()},
               "warm_up": list(next(iter(prompts.values()))[:WARM_UP_TOKENS])}
    try:
        done = subprocess.run([python, str(script)], input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout_s)
    except FileNotFoundError:
        return ChildRun(left_out=f"no python at {python}")
    except PermissionError:
        return ChildRun(left_out=f"{python} cannot be run (permission denied)")
    except subprocess.TimeoutExpired:
        return ChildRun(left_out=f"it did not finish within {timeout_s:.0f} s")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return ChildRun(left_out=f"{python} failed: {' '.join(last.split())[:300]}")
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        samples = {int(n): [float(s) for s in answer["samples"][str(n)]] for n in prompts}
    except (IndexError, ValueError, KeyError, TypeError) as exc:
        return ChildRun(left_out=f"{python} answered no figures ({type(exc).__name__}: {exc})")
    if any(len(s) != repeats for s in samples.values()):
        return ChildRun(left_out=f"{python} answered {sorted(len(s) for s in samples.values())} samples a length, "
                                 f"not {repeats}")
    facts = {k: answer[k] for k in ("openvino_genai", "load_s", "scheduler", "ttft_s") if k in answer}
    return ChildRun(samples, facts)


# ---- the record, the table, the plot ------------------------------------------------------------


def figures(samples: dict[int, dict[str, list[float]]], draft_tokens: dict[int, int]) -> dict[str, dict]:
    """Per length (JSON keys are strings): the target engines' medians, rates and samples, anypair over
    llama.cpp and over OpenVINO (tok/s ratios), and the draft's read (its tokens, seconds, samples)."""
    out: dict[str, dict] = {}
    for n, by_engine in samples.items():
        engines = {name: s for name, s in by_engine.items() if name != DRAFT and s}
        seconds = {name: statistics.median(s) for name, s in engines.items()}
        rates = {name: n / s for name, s in seconds.items()}
        row: dict[str, Any] = {"seconds": seconds, "tokens_per_second": rates, "samples": engines,
                               "gguf_over_llama_cpp": rates[GGUF] / rates[LLAMA_CPP] if LLAMA_CPP in rates else None}
        if OPENVINO in rates:
            row["gguf_over_openvino"] = rates[GGUF] / rates[OPENVINO]
        if by_engine.get(DRAFT):
            draft_s = statistics.median(by_engine[DRAFT])
            row["draft"] = {"tokens": draft_tokens[n], "seconds": draft_s, "samples": by_engine[DRAFT]}
        out[str(n)] = row
    return out


def format_table(record: dict):
    """The record as a rich table: per length, each engine's seconds and tok/s, the ratios, the draft's read."""
    from rich.table import Table

    settings = record["settings"]
    rows = record["lengths"]
    engines = [e for e in (GGUF, LLAMA_CPP, OPENVINO) if any(e in r["seconds"] for r in rows.values())]
    has_draft = any("draft" in r for r in rows.values())
    table = Table(title=f"time to first token from an empty cache (median of {settings['repeats']}), "
                        f"{record['machine']}, {record['threads']} threads, {record['gguf']}\ntext: {settings['text']}",
                  caption="tokens: the target's prompt; vs: anypair's tok/s over the other engine's; the draft "
                          "reads its own tokens of the same text, at most its window")
    table.add_column("tokens", justify="right")
    for engine in engines:
        table.add_column(f"{SHORT[engine]} s (tok/s)", justify="right")
    if LLAMA_CPP in engines:
        table.add_column("vs llama.cpp", justify="right")
    if OPENVINO in engines:
        table.add_column("vs OpenVINO", justify="right")
    if has_draft:
        table.add_column("draft: tokens, s", justify="right")
    for n, row in rows.items():
        cells = [n]
        for engine in engines:
            seconds = row["seconds"].get(engine)
            cells.append("-" if seconds is None else f"{seconds:.2f} ({row['tokens_per_second'][engine]:.0f})")
        if LLAMA_CPP in engines:
            ratio = row.get("gguf_over_llama_cpp")
            cells.append(f"{ratio:.2f}x" if ratio else "-")
        if OPENVINO in engines:
            ratio = row.get("gguf_over_openvino")
            cells.append(f"{ratio:.2f}x" if ratio else "-")
        if has_draft:
            draft = row.get("draft")
            cells.append("-" if draft is None else f"{draft['tokens']}, {draft['seconds']:.2f}")
        table.add_row(*cells)
    return table


def save_plot(record: dict, path: Path) -> Path:
    """Time to first token (s) against prompt length, one line per engine (and the draft's read, at the
    target's length it belongs to), the machine in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from anypair.benchmarking.seed_bench import finish_plot

    rows = record["lengths"]
    lengths = [int(n) for n in rows]
    figure, axes = plt.subplots(figsize=(8, 5))
    styles = {GGUF: "o-", LLAMA_CPP: "s--", OPENVINO: "^-."}
    for engine, style in styles.items():
        points = [(int(n), r["seconds"][engine]) for n, r in rows.items() if engine in r["seconds"]]
        if points:
            axes.plot(*zip(*points), style, label=LABELS[engine])
    draft = [(int(n), r["draft"]["seconds"]) for n, r in rows.items() if "draft" in r]
    if draft:
        axes.plot(*zip(*draft), "x:", color="grey", label=f"{LABELS[DRAFT]} (its window of the same text)")
    axes.set_xlabel("prompt length (target tokens)")
    axes.set_ylabel("time to first token, s (median)")
    axes.set_xticks(lengths)
    axes.set_title(f"prompt read from an empty cache, {record['gguf']}, {record['threads']} threads\n"
                   f"{record['machine']}", fontsize=8)
    return finish_plot(figure, axes, path)


# ---- the whole run ------------------------------------------------------------------------------


def _fetched_gguf(model: str) -> Path:
    """The target's GGUF, fetched first where it is a zoo model."""
    from anypair.backends.sources import gguf_of
    from anypair.zoo.registry import ZOO_MODELS

    if model in ZOO_MODELS:
        from anypair.zoo import fetch

        fetch([model], progress=True)
    gguf = gguf_of(model)
    if gguf is None or not gguf.is_file():
        raise InputError(f"--prefill times the gguf engine on the target's GGUF, and {model} has none: give a zoo "
                         "model or a .gguf file with -m")
    return gguf


def run_prefill(model: str, draft: Optional[str], lengths: Sequence[int], *, threads: int, repeats: int = 1,
                llama_cpp: bool = True, openvino_python: Optional[str] = None, draft_window: Optional[int] = None,
                qmsum: Path = QMSUM_FILE, command: str = "", progress: bool = True) -> dict:
    """Measure and return the record (`anypair bench --prefill`'s JSON): its settings (the release and
    `command` among them), the machine, and per length each engine's samples and medians; `draft` None:
    no draft's read."""
    from anypair.backends.llama_cpp_guard import probe_failure
    from anypair.drafters.model import DRAFT_CONTEXT_MARGIN
    from anypair.generation.members import load_member
    from anypair.machine import describe_machine

    lengths = sorted(lengths)
    gguf = _fetched_gguf(model)
    trained = trained_context(gguf)
    check_lengths_fit(lengths, trained, model)
    context = min(max(lengths) + CONTEXT_MARGIN, trained or max(lengths) + CONTEXT_MARGIN)
    left_out: dict[str, str] = {}

    def note(engine: str, why: str) -> None:
        left_out[engine] = why
        print(f"anypair bench --prefill: {LABELS[engine]} is left out: {why}", file=sys.stderr, flush=True)

    target = load_member(model, role="target", engine="gguf", threads=threads, context=context)
    text = prompt_text(target.hf_tokenizer, max(lengths), qmsum)
    ids = text.ids
    readers = [Reader(GGUF, target.backend, lambda n: ids[:n])]
    if llama_cpp:
        failure = probe_failure(gguf, threads)
        if failure is None:
            from anypair.backends.llama_cpp import LlamaCppBackend

            llama = LlamaCppBackend(gguf, name=LLAMA_CPP, threads=threads, context=context)
            readers.append(Reader(LLAMA_CPP, llama, lambda n: ids[:n]))
        else:
            note(LLAMA_CPP, failure)
    draft_tokens: dict[int, int] = {}
    window = None
    engines = {GGUF: target.engine.describe()}
    if draft is not None:
        from anypair.generation.generator import AnyPairGenerator

        draft_member = load_member(draft, role="draft", threads=threads)
        options = {} if draft_window is None else {"draft_window": draft_window}
        window = AnyPairGenerator(target, draft_member, threads=threads, **options).draft_window
        draft_prompts = {n: draft_read_ids(draft_member.render(target.hf_tokenizer.decode(ids[:n]), None), window,
                                           draft_member.backend.max_context, DRAFT_CONTEXT_MARGIN) for n in lengths}
        draft_tokens = {n: len(p) for n, p in draft_prompts.items()}
        engines[DRAFT] = draft_member.engine.describe()
        readers.append(Reader(DRAFT, draft_member.backend, lambda n: draft_prompts[n]))
    samples = measure(readers, lengths, repeats, progress)
    openvino_facts: dict = {}
    if openvino_python:
        # after the in-process engines, which stay loaded: the child's memory is its own
        if progress:
            print(f"  OpenVINO GenAI: {repeats} repeat(s) of {', '.join(map(str, lengths))} tokens in its own process "
                  f"({openvino_python})", file=sys.stderr, flush=True)
        run = run_openvino(openvino_python, gguf, {n: ids[:n] for n in lengths}, threads, repeats)
        if run.left_out is not None:
            note(OPENVINO, run.left_out)
        for n, seconds in run.samples.items():
            samples[n][OPENVINO] = seconds
        openvino_facts = run.facts
    from anypair.benchmarking.report import release

    settings = {"target": model, "draft": draft, "draft_window": window, "lengths": list(lengths), "repeats": repeats,
                "threads": threads, "context": context, "text": text.source, "release": release(), "command": command,
                "engines": engines,
                **({"openvino": openvino_facts} if openvino_facts else {})}
    return {"settings": settings, "machine": describe_machine(), "threads": threads, "gguf": gguf.name,
            "lengths": figures(samples, draft_tokens), "left_out": left_out}


def run_prefill_cmd(args) -> int:
    """`anypair bench --prefill LENGTHS`: measure, print the table, save the JSON and the plot."""
    import shlex

    import torch

    from anypair.drafters import uses_draft_model

    lengths = parse_lengths(args.prefill)
    if args.repeats < 1:
        raise InputError(f"--repeats must be at least 1, got {args.repeats}")
    threads = args.threads or torch.get_num_threads()
    draft = args.assistant_model if uses_draft_model(args.drafter) else None
    record = run_prefill(args.model, draft, lengths, threads=threads, repeats=args.repeats,
                         llama_cpp=not args.no_llama_cpp, openvino_python=args.openvino_python,
                         draft_window=args.draft_window, command=shlex.join(["anypair", *sys.argv[1:]]))
    show_and_save(record, args.json, args.plot)
    return 0


def show_and_save(record: dict, json_path: Optional[str], plot_path: Optional[str]) -> None:
    """The record's table on the console, then its JSON and its plot where paths are given."""
    from rich.console import Console

    Console().print(format_table(record))
    if json_path:
        save_json(record, Path(json_path))
        print(f"saved {json_path}")
    if plot_path:
        print(f"saved {save_plot(record, Path(plot_path))}")


def save_json(record: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
