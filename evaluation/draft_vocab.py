"""Writes a draft's reduced-head table (anypair/backends/reduced_head.py): its tokenizer's ids by
falling frequency on code and prose, the top TABLE_ROWS, as uint16 .npy named by the vocabulary's key.

Corpus (on every machine, no download): the .py files at the top of this Python's standard library
(code, which the default pair's benchmarks write) and the package's CNN/DailyMail sweep articles
(prose). Ties are broken by the lower id (an earlier BPE merge), so the table is reproducible for a
given Python version. Usage: python evaluation/draft_vocab.py [MODEL] (default: the default draft).
"""
from __future__ import annotations

import collections
import glob
import json
import os
import sysconfig

import numpy as np

#: ids the table keeps at most (the corpus holds fewer distinct ones: SmolLM2's about 15,000)
TABLE_ROWS = 24576


def corpus() -> list[str]:
    """The texts counted: stdlib modules, then the sweep's articles."""
    from anypair.benchmarking import sweep

    texts = [open(f, encoding="utf-8", errors="replace").read()
             for f in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))]
    articles = os.path.join(os.path.dirname(sweep.__file__), "data", "cnn_dailymail_sweep.jsonl")
    with open(articles, encoding="utf-8") as f:
        texts += [json.loads(line)["article"] for line in f if line.strip()]
    return texts


def ranking(hf_tokenizer, texts: list[str]) -> np.ndarray:
    """Every id seen in `texts`, most frequent first (ties: lower id first)."""
    counts: collections.Counter = collections.Counter()
    for text in texts:
        for begin in range(0, len(text), 100_000):  # pieces: the tokenizer's time grows with a piece's length
            counts.update(hf_tokenizer(text[begin:begin + 100_000], add_special_tokens=False)["input_ids"])
    ranked = sorted(counts, key=lambda token: (-counts[token], token))
    return np.array(ranked[:TABLE_ROWS], dtype=np.uint16)


def main(model: str = "HuggingFaceTB/SmolLM2-135M-Instruct") -> None:
    from anypair.backends.reduced_head import TABLES, vocab_key
    from anypair.zoo.registry import ZOO_MODELS
    from anypair.zoo.served_gguf import served_gguf
    from transformers import AutoTokenizer

    _, folder = served_gguf(ZOO_MODELS[model])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if len(tokenizer) > 65536:
        raise SystemExit(f"{model}: {len(tokenizer)} ids do not fit uint16")
    table = ranking(tokenizer, corpus())
    TABLES.mkdir(parents=True, exist_ok=True)
    path = TABLES / f"{vocab_key(tokenizer)}.npy"
    np.save(path, table)
    print(f"{model}: {len(table)} ids -> {path}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python evaluation/draft_vocab.py",
                                     description="Write a draft's reduced-head table (its ids by falling frequency "
                                                 "on the standard library's code and the sweep's articles) under "
                                                 "anypair/backends/data/draft_vocab/.")
    parser.add_argument("model", nargs="?", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                        help="a zoo draft (default: the default draft, HuggingFaceTB/SmolLM2-135M-Instruct)")
    main(parser.parse_args().model)
