"""Every error leaves the service as OpenAI's JSON shape: `{"error": {"message", "type", "param", "code"}}`.

OpenAI clients (and our own `openai` backend) read that shape and decide from the status whether
to retry: 4xx means the request is wrong, 5xx that the server failed. The OpenAPI schema says so
too (`document_errors`): every operation declares the statuses these handlers can answer with and
their error body, so a generated client sees the real contract.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from veriloop.errors import BackendError, ConfigError, NotFoundError, UnavailableError, VeriloopError
from veriloop.service.openai_schema import ErrorBody, ErrorResponse

logger = logging.getLogger(__name__)

ERROR_DESCRIPTIONS = {
    400: "The request is invalid: a parameter or body field fails validation, or names something unknown.",
    401: "A bearer token is required (the service runs with VERILOOP_API_TOKEN) and was missing or wrong.",
    404: "No such resource (run, node, task, export or model).",
    409: "The resource is in a state that does not allow this (a run that already ended, an unfinished export).",
    500: "The server failed; the message names the error.",
    502: "The model backend failed or could not be reached.",
    503: "A valid request this server cannot serve now: data it needs is neither cached nor fetchable (offline).",
}
ERROR_SCHEMA_REF = "#/components/schemas/ErrorResponse"
# Paths that never ask for the token (auth.OPEN_PATHS; that module imports this one).
_OPEN_PATHS = frozenset({"/health", "/login"})
_HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


class APIError(Exception):
    """An error a route raises on purpose, with the status and OpenAI error type to answer with."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code


def error_response(
    status: int,
    message: str,
    type: str,
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = ErrorResponse(error=ErrorBody(message=message, type=type, param=param, code=code))
    return JSONResponse(body.model_dump(), status_code=status, headers=dict(headers) if headers else None)


def _type_for(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def _validation_message(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str | None]:
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    param = ".".join(loc) or None
    message = str(first.get("msg", "invalid request"))
    error = (first.get("ctx") or {}).get("error")
    if first.get("type") == "value_error" and error is not None:
        message = str(error)  # a validator's own words, without pydantic's "Value error, "
    elif first.get("type") in ("literal_error", "enum") and isinstance(first.get("input"), str | int | float | bool):
        message = f"{message}, not {first['input']!r}"
    return (f"{param}: {message}" if param else message), param


def allowed_methods(request: Request) -> list[str]:
    """The methods the schema documents for this request's path (what a 405's Allow header must list)."""
    schema = request.app.openapi()
    path = request.url.path
    for parameter in ("[^/]+", ".+"):  # a path parameter is one segment, except a trailing {task_id:path}
        methods = {
            method.upper()
            for template, item in schema.get("paths", {}).items()
            if re.fullmatch(re.sub(r"\\{[^}]+\\}", parameter, re.escape(template)), path)
            for method in item
            if method in _HTTP_METHODS
        }
        if methods:
            return sorted(methods)
    return []


def install_error_handlers(app: FastAPI) -> None:
    """Map validation errors, HTTP errors, veriloop errors and crashes to OpenAI-shaped JSON (and document them)."""
    document_errors(app)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.type, exc.param, exc.code)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(list(exc.errors()))
        return error_response(400, message, "invalid_request_error", param)

    @app.exception_handler(ValidationError)
    async def _invalid_value(request: Request, exc: ValidationError) -> JSONResponse:
        message, param = _validation_message(exc.errors())
        return error_response(400, message, "invalid_request_error", param)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every method of the path, not just those of the first route that matched it
            headers["Allow"] = ", ".join(allowed_methods(request))
        return error_response(exc.status_code, message, _type_for(exc.status_code), headers=headers)

    @app.exception_handler(VeriloopError)
    async def _veriloop_error(request: Request, exc: VeriloopError) -> JSONResponse:
        if isinstance(exc, UnavailableError):  # a valid request this server cannot serve now (offline data)
            return error_response(503, str(exc), "server_error", code="unavailable")
        if isinstance(exc, ConfigError):
            return error_response(400, str(exc), "invalid_request_error")
        if isinstance(exc, NotFoundError):
            return error_response(404, str(exc), "not_found_error")
        status = 502 if isinstance(exc, BackendError) else 500
        return error_response(status, str(exc), "server_error")

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error in %s %s", request.method, request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}", "server_error")


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries for a route: each status with the OpenAI-shaped error body it carries."""
    return {status: {"model": ErrorResponse, "description": ERROR_DESCRIPTIONS[status]} for status in statuses}


def sse_event_schema(events: Sequence[str] | None, data: str) -> dict[str, Any]:
    """The schema of one server-sent event (as clients parse them: `event`, `data`, `id`, `retry` fields)."""
    event: dict[str, Any] = {"type": "string"} if events is None else {"type": "string", "enum": list(events)}
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": event,
            "data": {"type": "string", "description": data},
            "id": {"type": "string"},
            "retry": {"type": "integer"},
        },
    }


def _error_entry(status: int) -> dict[str, Any]:
    return {
        "description": ERROR_DESCRIPTIONS[status],
        "content": {"application/json": {"schema": {"$ref": ERROR_SCHEMA_REF}}},
    }


def _has_stream_flag(schema: dict[str, Any], operation: dict[str, Any]) -> bool:
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    ref = body.get("$ref", "")
    if ref.startswith("#/components/schemas/"):
        body = schema.get("components", {}).get("schemas", {}).get(ref.rsplit("/", 1)[1], {})
    return "stream" in body.get("properties", {})


def document_operations(schema: dict[str, Any]) -> dict[str, Any]:
    """Declare, on every operation, the errors the handlers above can answer with (in place; returns `schema`).

    400 for any operation with parameters or a body (validation errors are 400 here, never FastAPI's 422), 401
    everywhere but the open paths, 404 where a path names a resource, 500 everywhere, 502 where the model answers;
    a 200 of an operation whose body has `stream` is also `text/event-stream`.
    """
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    error_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(error_schema.pop("$defs", {}))
    components["ErrorResponse"] = error_schema
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            responses: dict[str, Any] = operation.setdefault("responses", {})
            responses.pop("422", None)
            statuses = [500]
            if operation.get("parameters") or operation.get("requestBody"):
                statuses.append(400)
            if path not in _OPEN_PATHS:
                statuses.append(401)
            if "{" in path:
                statuses.append(404)
            if path.startswith("/v1/") and method == "post":
                statuses += [404, 502]  # an unknown model; the backend's failure
            for status in statuses:
                responses.setdefault(str(status), _error_entry(status))
            if _has_stream_flag(schema, operation) and "200" in responses:
                content = responses["200"].setdefault("content", {})
                content.setdefault("text/event-stream", {"schema": sse_event_schema(None, "One JSON chunk.")})
    if "/HTTPValidationError" not in json.dumps(schema["paths"]):  # only the 422s (removed) referred to them
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
    return schema


def document_errors(app: FastAPI) -> None:
    """Make `app.openapi()` declare the error statuses and content types the app really answers with."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_operations(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
