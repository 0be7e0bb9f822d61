"""The kernels' layout kept on disk (anypair/kernels/packed_cache.py): a model loaded from the cache,
mapped or read, gives bitwise the logits of a fresh repack; a file cached on small pages is read again
once, then read (copied) where the pages stay small; the cache is rebuilt when its GGUF or the layout code
changes; an unusable cache folder falls back to the in-memory repack with one warning; a file that
was not completely written never loads. Small seed shapes only (anypair/zoo/seed_writer.py)."""
from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np
import pytest
import torch

from anypair.kernels import packed_cache

IDS = [1, 5, 900, 31999, 17, 3, 250]


@pytest.fixture(scope="module")
def small_gguf(zoo_fetch, tmp_path_factory):
    """A 2-layer Qwen2.5-7B-family file (untied Q6_K head, Q4_K and Q6_K matrices), a few MB."""
    from anypair.zoo.seed_shapes import SHAPES
    from anypair.zoo.seed_writer import write_seed_gguf

    shape = SHAPES["qwen2.5-7b"].scaled(name="small-layout", layers=2, hidden=256, ffn=512, heads=4, kv_heads=2,
                                        head_dim=64)
    shape = dataclasses.replace(shape, tokenizer="llama-spm", vocab=32000)
    return write_seed_gguf(shape, tmp_path_factory.mktemp("layout") / "small.gguf", progress=False)


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYPAIR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ANYPAIR_LAYOUT_CACHE", raising=False)
    return tmp_path / "home"


@pytest.fixture
def copies(monkeypatch):
    """The cache read into anonymous memory (as where the OS gives a file no 2 MB pages)."""
    monkeypatch.setattr(packed_cache, "_HUGE_SHARE", 2.0)


def _load(path, **options):
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    options.setdefault("threads", 1)
    engine = QuantizedGGUFBackend(path, context=64, **options)
    logits = engine.extend(IDS, all_logits=True)
    mode = engine.layout_cache.mode
    if mode == "written":  # the file is renamed into place by a background thread
        engine.layout_cache._committer.join()
    return mode, logits


def test_a_model_mapped_or_read_from_the_cache_gives_bitwise_a_fresh_repacks_logits(small_gguf, cache_home,
                                                                                     monkeypatch):
    off_mode, fresh = _load(small_gguf, layout_cache=False)
    first_mode, first = _load(small_gguf)
    monkeypatch.setattr(packed_cache, "_huge_share", lambda region: 1.0)  # whatever pages this machine gives
    monkeypatch.setattr(packed_cache, "_huge_pages_possible", lambda: True)
    from anypair.backends.quantized_gguf import QuantizedGGUFBackend

    mapped = QuantizedGGUFBackend(small_gguf, context=64, threads=1)
    second_mode, second = mapped.layout_cache.mode, mapped.extend(IDS, all_logits=True)
    monkeypatch.setattr(packed_cache, "_HUGE_SHARE", 2.0)
    third_mode, third = _load(small_gguf)
    assert (off_mode, first_mode, second_mode, third_mode) == ("off", "written", "mapped", "read")
    assert torch.equal(fresh, first) and torch.equal(fresh, second) and torch.equal(fresh, third)
    assert [p.name for p in (cache_home / "packed").iterdir()] == [packed_cache.cache_path(small_gguf).name]
    packed = [w.packed for layer in mapped.layers for w in layer.matrices if w.packed is not None]
    assert packed and not any(p.flags.writeable for p in packed)  # the file's own pages, read-only
    assert mapped.mapped_weight_bytes == packed_cache.cache_path(small_gguf).stat().st_size


def test_a_servers_kv_budget_leaves_the_mapped_weights_out_of_the_memory_available(monkeypatch):
    """MemAvailable counts the page cache, mapped weights included: they are not the KV caches' to take."""
    from types import SimpleNamespace

    from anypair import cli, machine

    gib = 1 << 30
    monkeypatch.setattr(machine, "available_memory", lambda: 20 * gib)
    engine = SimpleNamespace(mapped_weight_bytes=8 * gib, max_context=1000)
    gen = SimpleNamespace(target_backend=engine, draft_backend=SimpleNamespace(mapped_weight_bytes=0),
                          kv_bytes_per_slot=lambda: 3 * gib, batching_unavailable=lambda: None,
                          limit_positions=lambda *a: None)
    assert cli._max_batch(gen, None)[0] == 2  # (20 - 8) / 2 GiB of budget, 3 GiB a request
    engine.mapped_weight_bytes = 0
    assert cli._max_batch(gen, None)[0] == 3


@pytest.mark.parametrize("shares, mode", [([0.0, 1.0], "mapped"), ([0.0, 0.0], "read")])
def test_a_file_cached_on_small_pages_is_read_again_once_then_copied(small_gguf, cache_home, monkeypatch,
                                                                     shares, mode):
    _, fresh = _load(small_gguf, layout_cache=False)
    assert _load(small_gguf)[0] == "written"
    seen, dropped = iter(shares), []
    monkeypatch.setattr(packed_cache, "_huge_share", lambda region: next(seen))
    monkeypatch.setattr(packed_cache, "_huge_pages_possible", lambda: True)
    real = os.posix_fadvise

    def fadvise(fd, at, size, advice):
        dropped.append(advice)
        real(fd, at, size, advice)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    loaded, logits = _load(small_gguf)
    assert loaded == mode and dropped == [os.POSIX_FADV_DONTNEED] and torch.equal(logits, fresh)


def test_a_read_in_pieces_on_two_threads_gives_bitwise_the_same_logits(small_gguf, cache_home, monkeypatch, copies):
    _, fresh = _load(small_gguf, layout_cache=False)
    assert _load(small_gguf)[0] == "written"
    monkeypatch.setattr(packed_cache, "_PIECE", 4096)  # every matrix in many pieces, shared by the threads
    mode, logits = _load(small_gguf, threads=2)
    assert mode == "read" and torch.equal(logits, fresh)


def test_a_matrix_whose_read_fails_is_repacked_with_one_warning(small_gguf, cache_home, monkeypatch, caplog, copies):
    _, fresh = _load(small_gguf, layout_cache=False)
    assert _load(small_gguf)[0] == "written"
    reads = []
    real = packed_cache._read_piece

    def failing_third(fd, view, offset):
        reads.append(offset)
        if len(reads) == 3:
            view[:] = 0  # half-read garbage must not survive
            raise OSError("input/output error")
        real(fd, view, offset)

    monkeypatch.setattr(packed_cache, "_read_piece", failing_third)
    with caplog.at_level(logging.WARNING, logger="anypair"):
        mode, logits = _load(small_gguf)
    assert mode == "read" and len(reads) > 3 and torch.equal(logits, fresh)
    assert len([r for r in caplog.records if "could not be read" in r.getMessage()]) == 1


def test_the_cache_is_rebuilt_when_the_gguf_or_the_layout_code_changes(small_gguf, cache_home, monkeypatch):
    assert _load(small_gguf)[0] == "written"
    stat = small_gguf.stat()
    os.utime(small_gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file "replaced in place"
    assert _load(small_gguf)[0] == "written"
    assert _load(small_gguf)[0] in ("mapped", "read")
    old = packed_cache.cache_path(small_gguf)
    monkeypatch.setattr(packed_cache, "layout_key", lambda: "0123456789ab")  # the repack code edited
    assert _load(small_gguf)[0] == "written"
    assert not old.exists() and packed_cache.cache_path(small_gguf).exists()


def test_an_incomplete_file_never_loads(small_gguf, cache_home):
    _, fresh = _load(small_gguf, layout_cache=False)
    path = packed_cache.cache_path(small_gguf)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\0" * 4096)  # a crash mid-write would leave no trailer
    assert packed_cache.read_index(path) is None
    mode, logits = _load(small_gguf)
    assert mode == "written" and torch.equal(logits, fresh)
    assert packed_cache.read_index(path) is not None


def test_an_unusable_cache_folder_falls_back_to_memory_with_one_warning(small_gguf, cache_home, caplog):
    _, fresh = _load(small_gguf, layout_cache=False)
    cache_home.mkdir(parents=True)
    (cache_home / "packed").write_text("not a folder")  # mkdir fails as on a read-only disk
    with caplog.at_level(logging.WARNING, logger="anypair"):
        mode, logits = _load(small_gguf)
    assert mode == "off" and torch.equal(logits, fresh)
    assert len([r for r in caplog.records if "layout cache" in r.getMessage()]) == 1


def test_pages_are_faulted_in_without_madvise_populate(tmp_path, monkeypatch):
    """Before Linux 5.14 MADV_POPULATE_READ is refused: a byte of every page is read instead."""
    import mmap

    path = tmp_path / "pages.bin"
    path.write_bytes(b"\1" * (3 * mmap.PAGESIZE + 5))
    monkeypatch.setattr(packed_cache, "_MADV_POPULATE_READ", 12345)  # an advice no kernel knows: refused
    with open(path, "rb") as handle:
        region = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)
    assert _mapped_kib(region) == 0
    packed_cache._populate(region, 2)
    assert _mapped_kib(region) == 4 * mmap.PAGESIZE // 1024  # every page in this process's page tables
    region.close()  # nothing exported is left behind


def _mapped_kib(region) -> int:
    """Rss of `region`'s mapping in /proc/self/smaps (pages this process has mapped, not the cache's)."""
    header, found = f"{packed_cache.mapping_address(region):x}-", False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            found = found or line.startswith(header)
            if found and line.startswith("Rss:"):
                return int(line.split()[1])
    raise AssertionError("the mapping is not in /proc/self/smaps")


def test_the_environment_turns_the_cache_off(small_gguf, cache_home, monkeypatch):
    monkeypatch.setenv("ANYPAIR_LAYOUT_CACHE", "0")
    assert _load(small_gguf)[0] == "off"
    assert not (cache_home / "packed").exists()


@pytest.mark.parametrize("name", ["token_embd.weight", "output.weight", "blk.0.ffn_down.weight"])
def test_rows_gathered_from_the_gguf_layout_are_bitwise_the_interleaved_ones(small_gguf, name):
    from anypair.backends.gguf_file import GGUFFile
    from anypair.kernels import QuantWeight, dequant_rows

    tensor = GGUFFile(small_gguf).tensors[name]
    packed = QuantWeight.from_gguf_tensor(tensor)
    raw = QuantWeight.from_gguf_tensor(tensor, interleave=False)
    assert packed.packed is not None and raw.packed is None
    rows = sorted({0, 1, 15, 16, 17, packed.rows // 2, packed.rows - 1})
    assert np.array_equal(dequant_rows(packed, rows).numpy(), dequant_rows(raw, rows).numpy())
    with pytest.raises(IndexError):
        dequant_rows(raw, [packed.rows])
