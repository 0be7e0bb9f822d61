"""Time to first token on long prompts: the gguf engine's prefill beside llama.cpp's on the same GGUF.

The measurement is `anypair bench --prefill` (`anypair.benchmarking.prefill`: QMSum meeting transcripts,
or the packaged CNN/DailyMail articles without the data folder; engines alternating within each repeat;
medians; the draft's read of the same text; OpenVINO GenAI with --openvino-python). This script keeps
its own flags and defaults, the command of a published record; its JSON is the bench's.

    python evaluation/bench_prefill.py                              # 1,000- and 2,000-token prompts
    python evaluation/bench_prefill.py --lengths 500,1000,2000 --repeats 5 --json out.json
"""
from __future__ import annotations

import argparse
import shlex
import sys
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--target", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
    parser.add_argument("--draft", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                        help="the draft whose read of the same text is timed too ('' : none)")
    parser.add_argument("--lengths", default="1000,2000", help="comma-separated prompt lengths in target tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out")
    parser.add_argument("--openvino-python", help="the python of a venv with openvino-genai: OpenVINO GenAI beside")
    parser.add_argument("--json", help="save the figures to this JSON file")
    parser.add_argument("--plot", help="save time to first token against prompt length to this PNG")
    args = parser.parse_args(argv)

    from anypair.benchmarking.prefill import parse_lengths, run_prefill, show_and_save
    from anypair.errors import InputError

    try:
        lengths = parse_lengths(args.lengths, "--lengths")
        if args.repeats < 1:
            raise InputError(f"--repeats must be at least 1, got {args.repeats}")
        command = shlex.join(["python", "evaluation/bench_prefill.py", *(sys.argv[1:] if argv is None else argv)])
        record = run_prefill(args.target, args.draft or None, lengths, threads=args.threads, repeats=args.repeats,
                             llama_cpp=not args.no_llama_cpp, openvino_python=args.openvino_python, command=command)
    except InputError as exc:
        print(f"bench_prefill: {exc}", file=sys.stderr)
        return 2
    show_and_save(record, args.json, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
