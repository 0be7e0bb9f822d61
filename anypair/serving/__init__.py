"""`anypair serve`: an OpenAI-compatible HTTP server for one target and its draft.

- `schemas`: the request bodies (pydantic models, validated by FastAPI) and the response bodies.
- `fields`: every OpenAI request field the schemas do not serve, ignored or refused with a 400.
- `tools`: tool calls parsed from the target's text (`<tool_call>` JSON), whole or streamed, and the
  grammar that forces one (`tool_choice` "required" or named).
- `errors`: OpenAI-style error objects, `{"error": {"message", "type", "param", "code"}}`, for every
  failure a request can meet (bad JSON, bad fields, a full queue, the generator's own InputError).
- `worker`: the one thread that runs the generator's scheduler (up to `max_batch` requests sharing each
  forward), fed by a bounded first-in-first-out queue.
- `app`: the FastAPI application (`create_app(generator, ServeSettings(...))`).
- `server`: uvicorn on a socket bound beforehand, in the foreground (`anypair serve`) or in a thread.

    from anypair.serving import ServeSettings, create_app
    app = create_app(AnyPairGenerator(target, draft), ServeSettings(model_name="my-model"))
"""
from anypair.serving.app import ServeSettings, create_app

__all__ = ["ServeSettings", "create_app"]
