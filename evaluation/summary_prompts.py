"""The evaluation's summarization examples as a `--prompts` file for `anypair bench --target-shape NAME
--replay`: the first 5 CNN/DailyMail and the first 5 QMSum (SCROLLS) examples, each its user message
with the document cut to 900 target tokens, as raw completion prompts (the replay renders no chat
template), separated by two blank lines.

    python evaluation/summary_prompts.py prompts.txt
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from transformers import AutoTokenizer  # noqa: E402

from anypair.zoo import fetch  # noqa: E402
from anypair.zoo.registry import DEFAULT_TARGET  # noqa: E402
from evaluation.data import load_task  # noqa: E402
from evaluation.prompts import cut_document, summary_user_message  # noqa: E402


def summary_prompts(per_task: int = 5, document_tokens: int = 900) -> list[str]:
    tokenizer = AutoTokenizer.from_pretrained(fetch([DEFAULT_TARGET], progress=False)[DEFAULT_TARGET])
    texts = []
    for task in ("cnn_dailymail", "scrolls"):
        for example in load_task(task)[:per_task]:
            text = summary_user_message(example, cut_document(example.document, tokenizer, document_tokens))
            texts.append(re.sub(r"\n{3,}", "\n\n", text).strip())  # two blank lines separate prompts
    return texts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python evaluation/summary_prompts.py",
                                     description="Write the evaluation's 10 summarization examples as a --prompts "
                                                 "file for `anypair bench --target-shape NAME --replay`.")
    parser.add_argument("out", metavar="OUT.txt", help="the file to write (prompts separated by two blank lines)")
    parser.add_argument("--per-task", type=int, default=5, help="examples of each task (default 5)")
    parser.add_argument("--document-tokens", type=int, default=900,
                        help="target tokens each document is cut to (default 900)")
    args = parser.parse_args(argv)
    Path(args.out).write_text("\n\n\n".join(summary_prompts(args.per_task, args.document_tokens)) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
