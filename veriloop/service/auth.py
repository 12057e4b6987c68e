"""Optional bearer-token auth for the whole app, as ASGI middleware so no route can forget it.

With `service.api_token` set, every request but those to the open paths (`/health` for probes)
needs `Authorization: Bearer <token>`; others get OpenAI's 401 error shape.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from veriloop.service.http_errors import error_response


class BearerTokenMiddleware:
    def __init__(self, app: ASGIApp, token: str, open_paths: Iterable[str] = ("/health",)) -> None:
        self.app = app
        self._token = token.encode()
        self.open_paths = frozenset(open_paths)

    def allows(self, authorization: str | None) -> bool:
        scheme, _, supplied = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(supplied.strip().encode(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        if not self.allows(Headers(scope=scope).get("authorization")):
            response = error_response(
                401, "missing or invalid bearer token", "authentication_error", headers={"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
