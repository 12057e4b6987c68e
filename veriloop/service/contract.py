"""How the service reads a JSON request body, so that its OpenAPI schema is the whole contract.

The request models validate strictly (JSON's types as the schema writes them: no `"3"` for 3, no `0` for false),
and JSON Schema counts a number with no fractional part as an integer (`332.0` is an `integer`), which a strict
integer field refuses. `JSONRoute` reads bodies with such numbers parsed as ints; a `number` field takes them all
the same. `as_json` reads one field of a model that is lax for its Python callers with the same strictness.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BeforeValidator, TypeAdapter


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


class JSONRequest(Request):
    """A request whose JSON body reads whole numbers (`2.0`, `1e3`) as ints, as JSON Schema counts them."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), parse_float=_number)
        return self._json


class JSONRoute(APIRoute):
    """An `APIRouter(route_class=JSONRoute)` route: its handler reads the body as `JSONRequest` does."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(JSONRequest(request.scope, request.receive))

        return route


def as_json(kind: Any) -> BeforeValidator:
    """A before-validator reading a field with JSON's types only (strict, nested models too), as the schema says:
    for a model that stays lax for Python callers (a tuple of cases, a number as a string) but not over HTTP."""
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    return BeforeValidator(lambda value: adapter.validate_python(value, strict=True))
