"""Every error leaves the service as OpenAI's JSON shape: `{"error": {"message", "type", "param", "code"}}`.

OpenAI clients (and our own `openai` backend) read that shape and decide from the status whether
to retry: 4xx means the request is wrong, 5xx that the server failed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from veriloop.errors import BackendError, ConfigError, NotFoundError, VeriloopError
from veriloop.service.openai_schema import ErrorBody, ErrorResponse

logger = logging.getLogger(__name__)


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
    return (f"{param}: {message}" if param else message), param


def install_error_handlers(app: FastAPI) -> None:
    """Map validation errors, HTTP errors, veriloop errors and crashes to OpenAI-shaped JSON."""

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
        return error_response(exc.status_code, message, _type_for(exc.status_code), headers=exc.headers)

    @app.exception_handler(VeriloopError)
    async def _veriloop_error(request: Request, exc: VeriloopError) -> JSONResponse:
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
