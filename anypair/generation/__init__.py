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
  a *backend* is one loaded model on an engine (`ModelBackend`: it owns the forwards, `forward_rows`),
  a *slot* one sequence it holds (`backends.base.Slot`: its length and crop, nothing else). A session
  and its drafter hold slots; the scheduler alone runs forwards, the draft's included (`DraftCall`).
- *queue*: the scheduler's `waiting` requests (bounded; the server's worker only runs rounds);
  *cancel*: a request's sink says `cancelled()`, and the scheduler drops it at its next look.
- *cost model*: `policies.costs.EngineCosts`, one per engine (a forward's seconds by its rows), fed
  by the scheduler; the length policy, the ledger, the batch plan and row shares read it.
- *prefill*: reading the prompt into the KV cache (the session's first `TargetCall`); the draft's
  prompt read is its first `DraftCall`'s feed.
- *round*: one proposal, verified in one target forward, and the tokens it commits.
- *tree* (of candidates): a proposal whose tokens branch (`Proposal.parents`): its main chain, what
  the policy's length and calibration count, and alternatives (the draft's second choices, the
  held-back last token), all scored in the same forward, each row attending to its own ancestors
  (`SequenceRows.parents`), bitwise its chain's; the verifier follows the target's choices down it.
- *draft length*: the draft steps a round may run (the policy's `next_length()`); 0 drafts nothing.
- *verification slope*: what each extra row of a target forward adds, as a share of a one-row step
  (the engine's declared figure is its cost model's prior, `EngineCosts.relative_slope`).
- *ledger*: what drafting saved across requests (`policies.ledger`); *policy*: within a request.
"""
