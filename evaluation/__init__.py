"""The evaluation harness (`python evaluation/run.py`): data loaders, prompts, decoding methods,
metrics, resumable per-example records and the report."""
