"""evaluation/bench_kernel_builds.py end to end on a small GGUF: two builds (here the same checkout twice)
loaded into one process run the same matrices and the JSON says what ran. No timing is checked."""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation import bench_kernel_builds  # noqa: E402

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_two_builds_run_the_same_matrices_and_the_json_says_what_ran(zoo_fetch, tmp_path, capsys):
    from anypair.backends.sources import gguf_of

    out = tmp_path / "builds.json"
    assert bench_kernel_builds.main(["--gguf", str(gguf_of(SMOL)), "--builds", str(REPO), str(REPO),
                                     "--matrices", "ffn_gate,head", "--threads", "1", "--rows", "1,5",
                                     "--layers", "2", "--repeats", "1", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [(r["matrix"], r["k"]) for r in record["results"]] == [("ffn_gate", 1), ("ffn_gate", 5), ("head", 1), ("head", 5)]
    for result in record["results"]:
        assert len(result["ms"]) == 2 and all(ms > 0 for ms in result["ms"]) and result["x_first"][0] == 1.0
    assert "ffn_gate" in capsys.readouterr().out


def test_a_folder_that_is_no_checkout_is_named_in_one_line(tmp_path):
    import pytest

    with pytest.raises(SystemExit, match="is not an anypair checkout"):
        bench_kernel_builds.build_library(tmp_path)
