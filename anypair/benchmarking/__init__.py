"""Benchmarks of anypair against the target alone, transformers' assisted generation and llama.cpp.

- `prompts`: what a benchmark prompt is (`BenchPrompt`), how the target encodes it, HumanEval prompts
- `methods`: the method protocol (`Method.generate(prompt, Decoding) -> MethodOutput`) and its
  implementations: anypair, transformers' `generate` (the one place its assisted generation is
  driven) and the target's GGUF on llama.cpp alone
- `harness`: one interleaved runner for every benchmark (warm-up, baseline first, rotation, checks)
- `report`: per-run figures, medians and speedups, the rich tables and the JSON file
- `costs`: what scoring k tokens costs the target, and one draft step
- `bench`: `anypair bench`, built from the parts above
- `prefill`: `anypair bench --prefill`, time to first token on long prompts beside llama.cpp and
  OpenVINO GenAI (`openvino_prefill`: its child process)
"""
