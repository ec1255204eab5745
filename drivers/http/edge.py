"""What the HTTP API refuses or answers before any route runs.

- **NUL in the path or the query string** (`%00`, decoded): no store column holds it (PostgreSQL
  refuses it in text), and no session id, flow name, key or cursor contains it. 400, JSON,
  before anything is read or written. Request bodies are checked by `read_json` (bodies.py).
- **OPTIONS**: answered for every route, 204 with `Allow` naming its methods (404 for a path
  no route serves), instead of the router's 405. tarry serves no cross-origin callers, so
  there is no CORS preflight to answer: no `Access-Control-*` header is sent.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send


class Edge:
    """ASGI middleware in front of the routes (behind the Guard)."""

    def __init__(self, app: ASGIApp, *, routes: list[Any]) -> None:
        self.app = app
        self.routes = [r for r in routes if isinstance(r, Route)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = self.refusal(scope)
        if response is None and scope["method"] == "OPTIONS":
            response = self.options(scope)
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)

    def refusal(self, scope: Scope) -> Response | None:
        if "\x00" in scope.get("path", ""):
            return _error(400, "BadRequest", "the path holds a NUL character (%00)")
        query = scope.get("query_string", b"")
        if b"%00" in query or b"\x00" in query:
            for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
                if "\x00" in name or "\x00" in value:
                    shown = name.replace("\x00", "\\x00")[:40]
                    return _error(
                        400, "BadRequest", f"?{shown}= holds a NUL character (%00), refused"
                    )
        return None

    def options(self, scope: Scope) -> Response:
        allowed: set[str] = set()
        for route in self.routes:
            match, _ = route.matches({**scope, "method": "GET"})
            if match != Match.NONE and route.methods:
                allowed |= route.methods
            elif match != Match.NONE:
                allowed |= {"GET"}
        if not allowed:
            return _error(404, "NotFound", f"no route OPTIONS {scope.get('path', '')}")
        allowed.add("OPTIONS")
        return Response(None, 204, {"allow": ", ".join(sorted(allowed))})


def _error(status: int, error: str, message: str) -> JSONResponse:
    return JSONResponse({"error": error, "message": message}, status)
