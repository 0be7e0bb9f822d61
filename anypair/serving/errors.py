"""OpenAI-style errors: every failure a request can meet answers
`{"error": {"message", "type", "param", "code"}}` with a 4xx (or a 5xx for the server's own
faults), never FastAPI's 422 `detail` list, a traceback, or a connection left open.

The message names the field and says what to send instead; `param` is the field's path in the
body as OpenAI writes it (`max_tokens`, `messages[0].role`), null when no one field is at fault.
"""
from __future__ import annotations

import logging
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from anypair.serving.schemas import field_description, field_names

logger = logging.getLogger("anypair.serving")

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"


class APIError(Exception):
    """A request the server answers with an error object instead of text."""

    def __init__(self, status: int, message: str, *, param: Optional[str] = None, code: Optional[str] = None,
                 error_type: str = INVALID_REQUEST, headers: Optional[dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.error_type = error_type
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


_FIELDS = field_names()


def param_of(location: tuple) -> Optional[str]:
    """OpenAI's `param` for a pydantic error location: ('body', 'messages', 0, 'role') ->
    'messages[0].role'. Union member names in the location ('list[constrained-str]') are dropped."""
    param = ""
    for part in location[1:] if location[:1] == ("body",) else location:
        if isinstance(part, int):
            param += f"[{part}]"
        elif part in _FIELDS:
            param += f".{part}" if param else part
    return param or None


def validation_error(exc: RequestValidationError) -> APIError:
    """The first problem pydantic found in a body, as one error naming its field. A field of several
    accepted shapes (a string or a list of them) gets one error per shape: the deepest one is about
    the shape the client meant (`stop: ["a", ""]` -> stop[1], not "stop should be a string")."""
    errors = exc.errors()
    first_field = tuple(errors[0].get("loc", ()))[:2]
    error = max((e for e in errors if tuple(e.get("loc", ()))[:2] == first_field), key=lambda e: len(e.get("loc", ())))
    kind, location = error.get("type", ""), tuple(error.get("loc", ()))
    if kind == "json_invalid":
        detail = (error.get("ctx") or {}).get("error", "")
        position = location[1] if len(location) > 1 else "?"
        return APIError(400, f"the request body is not valid JSON ({detail} at character {position}): send one JSON "
                             "object, with the header Content-Type: application/json", code="invalid_json")
    param = param_of(location)
    if param is None:
        return APIError(400, "the request body must be a JSON object such as "
                             '{"model": ..., "prompt": ...} (or "messages" for chat), sent with the header '
                             "Content-Type: application/json", code="invalid_body")
    if kind == "missing":
        return APIError(400, f"{param} is missing: give {field_description(location) or 'it'}", param=param,
                        code="missing_field")
    shown = repr(error.get("input"))
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    message = f"{param}: {error.get('msg', 'invalid value')}, got {shown}"
    expected = field_description(location)
    return APIError(400, f"{message}; expected {expected}" if expected else message, param=param,
                    code="invalid_value")


def install_error_handlers(app: FastAPI) -> None:
    """Every error path of the app answers an OpenAI-style object and logs one line."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        logger.info("%s %s -> %d %s: %s", request.method, request.url.path, exc.status, exc.param or "-", exc.message)
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await _api_error(request, validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # unknown paths (404) and methods (405): say what this server offers
        message = (f"{request.method} {request.url.path}: {exc.detail}; this server offers GET /health, "
                   "GET /v1/models, POST /v1/completions and POST /v1/chat/completions")
        return await _api_error(request, APIError(exc.status_code, message, code="unknown_endpoint",
                                                  headers=dict(exc.headers or {})))

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        # a bug: the traceback goes to the server's log, never into the body
        logger.exception("%s %s -> 500: %s", request.method, request.url.path, exc)
        return APIError(500, f"internal error: {type(exc).__name__}: the server's log has the details; please "
                             "report it", error_type=SERVER_ERROR, code="internal_error").response()
