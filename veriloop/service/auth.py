"""Optional token auth for the whole app, as ASGI middleware so no route can forget it.

With a token configured, every request but those to the open paths (`/health` for probes, the
login page) needs `Authorization: Bearer <token>` or the dashboard's `veriloop_token` cookie (set
by the login page, since a browser cannot add headers to page loads or server-sent events).
Others get OpenAI's 401 error shape; a browser asking for a page is sent to the login page instead.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from veriloop.service.http_errors import error_response

COOKIE = "veriloop_token"
OPEN_PATHS = ("/health", "/login")


class BearerTokenMiddleware:
    def __init__(self, app: ASGIApp, token: str, open_paths: Iterable[str] = ("/health",)) -> None:
        self.app = app
        self._token = token.encode()
        self.open_paths = frozenset(open_paths)

    def matches(self, supplied: str) -> bool:
        return secrets.compare_digest(supplied.strip().encode(), self._token)

    def allows(self, authorization: str | None, cookie: str | None = None) -> bool:
        scheme, _, supplied = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and self.matches(supplied):
            return True
        return bool(cookie) and self.matches(cookie or "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        if self.allows(headers.get("authorization"), cookie):
            await self.app(scope, receive, send)
            return
        wants_page = scope["method"] == "GET" and "text/html" in headers.get("accept", "")
        response: Response
        if wants_page and not scope["path"].startswith(("/api/", "/v1/")):
            response = RedirectResponse(f"/login?next={quote(scope['path'])}", status_code=303)
        else:
            response = error_response(
                401, "missing or invalid bearer token", "authentication_error", headers={"WWW-Authenticate": "Bearer"}
            )
        await response(scope, receive, send)
