"""OpenVINO GenAI's time to first token on a GGUF, in a process of its own: the optional anchor of
`anypair bench --prefill` on Intel CPUs.

Run by the python of a virtual environment where OpenVINO GenAI is installed (anypair need not be):

    pip install openvino==2026.4.1 openvino-genai==2026.4.1.0 openvino-tokenizers==2026.4.1.0
    /path/to/venv/bin/python anypair/benchmarking/openvino_prefill.py < request.json

(or `python -m anypair.benchmarking.openvino_prefill` where anypair is importable). It imports nothing
of anypair: only the standard library, numpy and OpenVINO. The request on stdin is one JSON object:

    {"gguf": "/path/model.gguf", "threads": 2, "repeats": 3,
     "prompts": {"1024": [token ids...] or "text", ...}, "warm_up": [token ids...] or "text"}

It loads the GGUF with `openvino_genai.LLMPipeline(gguf, "CPU", ...)` (continuous batching: a
`SchedulerConfig` with `enable_prefix_caching = False`, so no prompt is served from an earlier one's
KV blocks) on `threads` inference threads, generates one untimed token for the warm-up prompt, then for
each repeat, each prompt in turn, times generating one new token (`GenerationConfig(max_new_tokens=1)`):
the prompt read and its first token. It prints one JSON object on stdout:

    {"openvino_genai": "2026.4.1.0-...", "load_s": 12.3, "scheduler": {...},
     "samples": {"1024": [seconds, ...]}, "ttft_s": {"1024": [seconds, ...]}}

`samples` are wall-clock seconds around `generate`; `ttft_s` OpenVINO's own figure
(`perf_metrics.get_ttft()`), where it gives one. A failure prints one line on stderr and exits 1.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Union

Prompt = Union[str, list]


def _inputs(prompt: Prompt) -> Any:
    """Token ids as an int64 [1, n] tensor (EncodedResults come back), or the text as it is."""
    if isinstance(prompt, str):
        return prompt
    import numpy as np
    import openvino as ov

    return ov.Tensor(np.asarray([prompt], dtype=np.int64))


def _version(openvino_genai: Any) -> str:
    getter = getattr(openvino_genai, "get_version", None)
    return str(getattr(openvino_genai, "__version__", None) or (getter() if getter else "unknown"))


def _scheduler(openvino_genai: Any) -> Any:
    config = openvino_genai.SchedulerConfig()
    config.enable_prefix_caching = False
    return config


def _scheduler_facts(config: Any) -> dict:
    facts = {}
    for name in ("enable_prefix_caching", "max_num_batched_tokens", "dynamic_split_fuse", "cache_size"):
        try:
            facts[name] = getattr(config, name)
        except Exception:  # noqa: BLE001 - a field this release lacks is left out
            continue
    return facts


def _ttft_seconds(result: Any) -> Any:
    try:
        return result.perf_metrics.get_ttft().mean / 1000.0
    except Exception:  # noqa: BLE001 - a release without the metric: the wall clock stands alone
        return None


def measure(request: dict) -> dict:
    """Load the pipeline, warm it up, time every prompt `repeats` times (repeats outermost)."""
    import openvino_genai

    scheduler = _scheduler(openvino_genai)
    started = time.perf_counter()
    pipe = openvino_genai.LLMPipeline(str(request["gguf"]), "CPU", {"INFERENCE_NUM_THREADS": int(request["threads"])},
                                      scheduler_config=scheduler)
    load_s = time.perf_counter() - started
    config = openvino_genai.GenerationConfig(max_new_tokens=1)
    prompts: dict[str, Prompt] = request["prompts"]
    warm_up = request.get("warm_up")
    if warm_up:
        pipe.generate(_inputs(warm_up), config)
    samples: dict[str, list[float]] = {length: [] for length in prompts}
    ttft: dict[str, list[float]] = {length: [] for length in prompts}
    for _ in range(int(request.get("repeats", 1))):
        for length, prompt in prompts.items():
            inputs = _inputs(prompt)
            started = time.perf_counter()
            result = pipe.generate(inputs, config)
            samples[length].append(time.perf_counter() - started)
            seconds = _ttft_seconds(result)
            if seconds is not None:
                ttft[length].append(seconds)
    return {"openvino_genai": _version(openvino_genai), "load_s": load_s, "scheduler": _scheduler_facts(scheduler),
            "samples": samples, "ttft_s": {length: s for length, s in ttft.items() if s}}


def main() -> int:
    try:
        request = json.load(sys.stdin)
        print(json.dumps(measure(request)), flush=True)
    except Exception as exc:  # noqa: BLE001 - the parent reads one line and goes on without OpenVINO
        print(f"{type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
