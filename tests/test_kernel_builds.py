"""evaluation/bench_kernel_builds.py and bench_engine_settings.py end to end on a small GGUF: two builds (here the same checkout twice)
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


def test_q6k_layouts_are_a_second_axis_and_the_process_keeps_its_own(zoo_fetch, tmp_path):
    """Qwen2.5-Coder-0.5B's ffn_down of layers 0-1 are Q6_K: packed as bytes and as bits, both timed per build."""
    from anypair.backends.sources import gguf_of
    from anypair.kernels.build import Q6K_LAYOUTS, load_library, q6k_layout

    out = tmp_path / "layouts.json"
    assert bench_kernel_builds.main(["--gguf", str(gguf_of("Qwen/Qwen2.5-Coder-0.5B-Instruct")), "--builds", str(REPO),
                                     "--matrices", "ffn_down", "--layers", "2", "--threads", "1", "--rows", "1",
                                     "--repeats", "1", "--q6k-layouts", "bytes,bits", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["columns"] == [f"{REPO.name}/bytes", f"{REPO.name}/bits"] and len(record["results"][0]["ms"]) == 2
    library = load_library()  # packing after the run uses the process's own layout again
    assert library.ap_packed_type(14) == Q6K_LAYOUTS[q6k_layout(avx512=library.ap_simd_level() == 3)]


def test_an_unknown_q6k_layout_is_refused_in_one_line(zoo_fetch):
    import pytest
    from anypair.backends.sources import gguf_of

    with pytest.raises(SystemExit, match="--q6k-layouts takes bits, bytes, got nibbles"):
        bench_kernel_builds.main(["--gguf", str(gguf_of(SMOL)), "--builds", str(REPO), "--q6k-layouts", "nibbles"])


def test_settings_alternate_in_one_process_and_the_process_keeps_its_own(zoo_fetch, tmp_path, capsys):
    """evaluation/bench_engine_settings.py: the prefetch threshold on one engine, then restored; no timing checked."""
    from anypair.backends.sources import gguf_of
    from anypair.kernels.build import load_library, prefetch_min_rows

    from evaluation import bench_engine_settings

    out = tmp_path / "settings.json"
    assert bench_engine_settings.main(["--gguf", str(gguf_of(SMOL)), "--prefetch-rows", "4,1", "--ks", "1,3",
                                       "--rounds", "1", "--context", "40", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["setting"] == "prefetch_min_rows" and list(record["median_ms"]) == ["4", "1"]
    assert all(len(v["1"]) == len(v["3"]) == 1 for v in record["samples_ms"].values())
    import ctypes

    assert ctypes.c_int.in_dll(load_library(), "ap_prefetch_min_rows").value == prefetch_min_rows()
    assert "k=3" in capsys.readouterr().out


def test_unknown_settings_are_refused_in_one_line(zoo_fetch):
    import pytest
    from anypair.backends.sources import gguf_of

    from evaluation import bench_engine_settings

    with pytest.raises(SystemExit, match="--q6k-layouts takes bits, bytes, got nibbles"):
        bench_engine_settings.main(["--gguf", str(gguf_of(SMOL)), "--q6k-layouts", "bytes,nibbles"])
    with pytest.raises(SystemExit, match="whole numbers of rows"):
        bench_engine_settings.main(["--gguf", str(gguf_of(SMOL)), "--prefetch-rows", "4,many"])


def test_q6k_layouts_load_one_engine_each_and_leave_the_cache_setting_as_it_was(zoo_fetch, tmp_path, monkeypatch):
    import os

    from anypair.backends.sources import gguf_of

    from evaluation import bench_engine_settings

    monkeypatch.setenv("ANYPAIR_LAYOUT_CACHE", "1")
    out = tmp_path / "layouts.json"
    assert bench_engine_settings.main(["--gguf", str(gguf_of("Qwen/Qwen2.5-Coder-0.5B-Instruct")), "--q6k-layouts",
                                       "bytes,bits", "--ks", "1", "--rounds", "1", "--context", "20", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["setting"] == "q6k_layout" and list(record["median_ms"]) == ["bytes", "bits"]
    assert os.environ["ANYPAIR_LAYOUT_CACHE"] == "1"
