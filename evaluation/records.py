"""Per-example results and the append-only JSONL file that makes a run resumable.

Every finished (task, example, method, draft) is one line of `examples.jsonl` in the output
folder, written as soon as it is done; a restarted run reads the file and skips those keys.
The settings that change results (models, dtype, decoding) are kept beside it in
`settings.json`, and a restart with different ones is refused rather than mixed in. `run.json`
keeps the latest command, what it asked for and the machine and versions it ran on, so that
`--report-only` can rewrite the report from the folder alone.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Optional

from evaluation.metrics import RougeScores

RECORDS_FILE = "examples.jsonl"
SETTINGS_FILE = "settings.json"
RUN_FILE = "run.json"


class ResumeError(Exception):
    """The output folder holds a run made with other settings."""


@dataclass
class ExampleRecord:
    task: str
    example_id: str
    method: str
    draft: str  # draft model name; "" for methods without one
    prompt_tokens: int
    prompt_truncated: bool
    new_tokens: int
    time_to_first_token_s: float
    total_time_s: float
    tokens_per_second: float
    finish_reason: str
    text: str
    target_ids: list[int]
    acceptance_rate: Optional[float] = None
    mean_accepted_per_round: Optional[float] = None
    rounds: Optional[int] = None
    identical_to_baseline: Optional[bool] = None  # greedy only; None for the baseline itself
    # anypair ran the target alone here: drafting had lost time on its recent requests (policies.ledger)
    drafting_skipped: Optional[bool] = None
    passed: Optional[bool] = None  # HumanEval pass@1 of this output
    execution_detail: Optional[str] = None
    rouge: Optional[RougeScores] = None
    # why the method raised on this example (then no output and no figures); delete the line
    # from examples.jsonl to retry it
    error: Optional[str] = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.task, self.example_id, self.method, self.draft)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> "ExampleRecord":
        raw = json.loads(line)
        known = {f.name for f in fields(cls)}
        values = {name: value for name, value in raw.items() if name in known}
        if values.get("rouge") is not None:
            values["rouge"] = RougeScores(**values["rouge"])
        return cls(**values)


class RecordStore:
    """The output folder's examples.jsonl: what is done, and appending what gets done."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / RECORDS_FILE
        self.records: dict[tuple[str, str, str, str], ExampleRecord] = {}
        if self.path.exists():
            with open(self.path, encoding="utf-8") as lines:
                for line in lines:
                    # a run killed mid-write leaves a partial last line: that example is redone
                    try:
                        record = ExampleRecord.from_json(line)
                    except (json.JSONDecodeError, TypeError):
                        continue
                    self.records[record.key] = record

    def is_done(self, task: str, example_id: str, method: str, draft: str) -> bool:
        return (task, example_id, method, draft) in self.records

    def get(self, task: str, example_id: str, method: str, draft: str) -> Optional[ExampleRecord]:
        return self.records.get((task, example_id, method, draft))

    def append(self, record: ExampleRecord) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(record.to_json() + "\n")
        self.records[record.key] = record

    def all(self) -> Iterable[ExampleRecord]:
        return self.records.values()


def check_or_write_settings(out_dir: Path, result_settings: dict) -> None:
    """Refuse to resume into a folder whose earlier run used different result-changing settings."""
    path = Path(out_dir) / SETTINGS_FILE
    if path.exists():
        earlier = json.loads(path.read_text())
        differing = sorted(k for k in set(earlier) | set(result_settings) if earlier.get(k) != result_settings.get(k))
        if differing:
            raise ResumeError(
                f"{out_dir} holds a run with other settings ({', '.join(differing)}: "
                + "; ".join(f"{k} was {earlier.get(k)!r}, now {result_settings.get(k)!r}" for k in differing)
                + "). Use another --out folder, or the same settings to resume."
            )
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result_settings, indent=2) + "\n")


def read_settings(out_dir: Path) -> Optional[dict]:
    """The result-changing settings the folder's records were made with; None for a folder without a run."""
    path = Path(out_dir) / SETTINGS_FILE
    return json.loads(path.read_text()) if path.exists() else None


def write_run_file(out_dir: Path, description: dict) -> None:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / RUN_FILE).write_text(json.dumps(description, indent=2) + "\n")


def read_run_file(out_dir: Path) -> Optional[dict]:
    path = Path(out_dir) / RUN_FILE
    return json.loads(path.read_text()) if path.exists() else None
