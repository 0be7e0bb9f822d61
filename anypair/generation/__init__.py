"""Generation: a request from its door to the engines, and back.

One route. Every door (`AnyPairGenerator.generate`, `.stream`, `.generate_many`, `anypair serve`'s
handlers) builds one typed `GenerationRequest` (`options.py`), checked there; the generator plans
it (`plan_request`: drafter, verifier, policy) and makes its `DecodeSession` (`loop.py`: prefill,
then rounds of propose -> verify -> commit); the `BatchScheduler` (`batch.py`) runs every session,
alone or beside others, gathering their forwards into one call per engine.

Glossary (one name per concept):
- *request*: one generate()/stream() call or one HTTP body, as a `GenerationRequest`; inside the
  loop its decoding part is a `DecodeRequest`, and what a drafter may know of it a `DraftRequest`.
- *session*: one request's loop on one slot (`DecodeSession`).
- *engine*: what runs a model's forwards (`backends.engines.Engine`: "gguf", "llama.cpp", "torch");
  a *backend* is one loaded model on an engine (`ModelBackend`), a *slot* one sequence it holds.
- *prefill*: reading the prompt into the KV cache (the session's first `TargetCall`).
- *round*: one proposal, verified in one target forward, and the tokens it commits.
- *draft length*: the draft steps a round may run (the policy's `next_length()`); 0 drafts nothing.
- *verification slope*: what each extra row of a target forward adds, as a share of a one-row step.
- *ledger*: what drafting saved across requests (`policies.ledger`); *policy*: within a request.
"""
