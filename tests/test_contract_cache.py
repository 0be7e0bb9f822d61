"""The contract's verdict kept on disk (backends/contract_cache.py): reused for the same weights, engine
choice, threads, CPU and code; measured again when any of them changes, when the entry does not read
back, or when the cache is off; and a second load of a real target does not measure it again."""
from __future__ import annotations

import os

import pytest
import torch

from anypair.backends import contract, contract_cache
from anypair.backends.contract import ContractReport, InvarianceReport
from anypair.backends.contract_cache import measured_or_kept, verdict_key

REPORT = ContractReport((InvarianceReport(2, 0.0, 31.5, True, bitwise_required=True, context=16),
                         InvarianceReport(5, 0.0, 29.25, True, bitwise_required=True, context=64)))
ENGINE = "gguf Q4_K/Q6_K (kernels)"


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    """The cache in a folder of the test's own; the cache on whatever the environment says."""
    monkeypatch.setattr(contract_cache, "cache_folder", lambda: tmp_path / "contract")
    monkeypatch.delenv("ANYPAIR_CONTRACT_CACHE", raising=False)
    return tmp_path / "contract"


@pytest.fixture()
def weights(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    return path


class Measure:
    """A stand-in for the check that counts its calls."""

    def __init__(self, report: ContractReport = REPORT):
        self.report, self.calls = report, 0

    def __call__(self) -> ContractReport:
        self.calls += 1
        return self.report


def test_a_verdict_is_kept_and_read_back_whole(folder, weights):
    measure = Measure()
    key = verdict_key(weights, ENGINE)
    assert measured_or_kept(key, measure) == (REPORT, False)
    report, kept = measured_or_kept(key, measure)
    assert kept and measure.calls == 1 and report == REPORT and report.describe() == REPORT.describe()
    failing = ContractReport((InvarianceReport(9, 0.2, 30.0, False, context=300),))
    other = verdict_key(weights, "torch fp16 (fbgemm)")
    assert measured_or_kept(other, Measure(failing)) == (failing, False)
    assert measured_or_kept(other, Measure()) == (failing, True)  # a failing verdict is kept as well
    assert sorted(p.suffix for p in folder.iterdir()) == [".json", ".json"]  # no temporary file left


def test_the_key_follows_the_weights_engine_threads_and_code(folder, weights, monkeypatch):
    key = verdict_key(weights, ENGINE)
    assert key == verdict_key(weights, ENGINE)
    assert verdict_key(weights, "gguf Q8_0 (kernels)") != key
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    touched = verdict_key(weights, ENGINE)
    assert touched != key
    weights.write_bytes(b"GGUF" + bytes(61))
    assert verdict_key(weights, ENGINE) not in (key, touched)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads != 1 else 2)
        on_other_threads = verdict_key(weights, ENGINE)
    finally:
        torch.set_num_threads(threads)
    assert on_other_threads != verdict_key(weights, ENGINE)
    before = verdict_key(weights, ENGINE)
    monkeypatch.setattr(contract_cache, "_source_digest", "an edited engine")
    edited = verdict_key(weights, ENGINE)
    monkeypatch.setattr(contract, "RELATIVE_TOLERANCE", 1e-3)
    assert len({before, edited, verdict_key(weights, ENGINE)}) == 3


def test_a_model_folder_is_stamped_by_every_file(folder, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(bytes(8))
    key = verdict_key(model, "torch fp32")
    (model / "model.safetensors").write_bytes(bytes(9))
    assert verdict_key(model, "torch fp32") != key


def test_nothing_is_kept_when_off_or_with_nothing_to_stamp(folder, weights, tmp_path, monkeypatch):
    assert verdict_key(tmp_path / "missing.gguf", ENGINE) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verdict_key(empty, ENGINE) is None
    monkeypatch.setenv("ANYPAIR_CONTRACT_CACHE", "0")
    assert verdict_key(weights, ENGINE) is None
    measure = Measure()
    assert measured_or_kept(None, measure) == (REPORT, False) and measured_or_kept(None, measure)[1] is False
    assert measure.calls == 2 and not folder.exists()


def test_a_damaged_entry_is_measured_again_and_replaced(folder, weights):
    key = verdict_key(weights, ENGINE)
    measured_or_kept(key, Measure())
    entry = folder / f"{key}.json"
    for damage in ("{not json", '{"checks": [{"k": 2}]}', '{"format": 1}', "", '{"format": 1, "checks": []}'):
        entry.write_text(damage)
        measure = Measure()
        assert measured_or_kept(key, measure) == (REPORT, False) and measure.calls == 1
        assert measured_or_kept(key, measure) == (REPORT, True)


def test_an_unwritable_cache_still_answers(tmp_path, weights, monkeypatch, caplog):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setattr(contract_cache, "cache_folder", lambda: blocker / "contract")
    monkeypatch.delenv("ANYPAIR_CONTRACT_CACHE", raising=False)
    key = verdict_key(weights, ENGINE)
    measure = Measure()
    with caplog.at_level("DEBUG", logger="anypair"):
        assert measured_or_kept(key, measure) == (REPORT, False)
        assert measured_or_kept(key, measure) == (REPORT, False)
    assert measure.calls == 2 and "was not kept" in caplog.text


def test_a_second_load_of_a_gguf_target_reads_the_kept_verdict(zoo_fetch, folder, monkeypatch):
    """SmolLM2's GGUF loaded as a target twice: the second load runs no check and says so."""
    from anypair.backends.member import LoadOptions
    from anypair.backends.quantized_gguf import load_gguf_member

    calls = []
    measuring = contract.check_contract
    monkeypatch.setattr(contract, "check_contract", lambda *args: calls.append(1) or measuring(*args))
    first = load_gguf_member("HuggingFaceTB/SmolLM2-135M-Instruct", role="target", options=LoadOptions())
    second = load_gguf_member("HuggingFaceTB/SmolLM2-135M-Instruct", role="target", options=LoadOptions())
    assert len(calls) == 1 and "holds bitwise" in first.invariance and "kept" not in first.invariance
    assert second.invariance == first.invariance + " (kept from an earlier check of these weights here)"
    assert len(list(folder.iterdir())) == 1
