"""Who may talk to the HTTP API: checked once, in front of every route.

With users configured (named tokens, see users.py, or one `--token`), every request must carry
a user's token: `Authorization: Bearer <token>`, or the cookie that `POST /login` sets for the
page (a browser's EventSource cannot send headers). The cookie names the user and its expiry
under an HMAC keyed by the user's token, and is `HttpOnly` and `SameSite=Strict`. Tokens are
never accepted in the query string, which ends up in logs and browser history. The user found
is put in the request's scope (`request.state.user`; None without users).

Without a token the server is for this machine only: the peer must be a loopback address and
the `Host` a loopback name (a page on another site that rebinds its DNS name to 127.0.0.1 is
refused). Either way, a request that changes something must not come from another origin.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send
from tarry.drivers.http.users import Users

COOKIE = "tarry_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Reachable without the token: the login page, the login itself, and the logout.
OPEN_PATHS = frozenset({"/login", "/logout"})

#: Headers of every HTML page: it may not be framed (its buttons resume and cancel sessions)
#: and loads nothing from elsewhere.
PAGE_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
        "base-uri 'none'; form-action 'self'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}


def root_of(scope: Any) -> str:
    """Where the app is mounted: "" at the root of its host, "/tarry" under a prefix (the
    ASGI `root_path`, which a mounting app or a proxy's `--root-path` sets)."""
    return str(scope.get("root_path", "") or "").rstrip("/")


def route_path(scope: Any) -> str:
    """The request's path within the app (without the prefix it is mounted under)."""
    path, root = scope.get("path", ""), root_of(scope)
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def rooted(html: str, scope: Any) -> str:
    """A page of the app with its mount point written in (`<meta name="tarry-root">`), from
    which its scripts make every URL they use: it works mounted under any prefix."""
    import html as markup

    root = markup.escape(root_of(scope), quote=True)
    return html.replace(
        '<meta name="tarry-root" content="">', f'<meta name="tarry-root" content="{root}">', 1
    )


def same(given: str, expected: str) -> bool:
    """Compare secrets in constant time."""
    return hmac.compare_digest(given.encode(), expected.encode())


def is_loopback_host(host: str) -> bool:
    """`localhost`, `127.x.x.x` or `::1` (brackets allowed)."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):  # [::1]:8765
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Guard:
    """ASGI middleware: answers 401/403 itself, or passes the request on untouched."""

    def __init__(self, app: ASGIApp, *, users: Users | None, login_page: Callable[[], str]) -> None:
        self.app = app
        self.users = users if users else None
        self.login_page = login_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        user = self.user(request)
        scope.setdefault("state", {})["user"] = user
        response = self.refusal(request, user)
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)

    def user(self, request: Request) -> str | None:
        """The user whose token (header) or login cookie the request carries, or None."""
        if self.users is None:
            return None
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and given.strip():
            return self.users.by_token(given.strip())
        cookie = request.cookies.get(COOKIE)
        return self.users.by_cookie(cookie) if cookie else None

    def refusal(self, request: Request, user: str | None) -> Response | None:
        if request.method not in SAFE_METHODS and not _same_origin(request):
            return _error(
                403,
                "Forbidden",
                "cross-origin requests may not change anything "
                f"(Origin {request.headers.get('origin')!r})",
            )
        if self.users is not None:
            if route_path(request.scope) in OPEN_PATHS or user is not None:
                return None
            message = (
                "this server requires its token: send `Authorization: Bearer <token>`, "
                "or log in at /login"
            )
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                headers = {**PAGE_HEADERS, "www-authenticate": "Bearer"}
                return HTMLResponse(rooted(self.login_page(), request.scope), 401, headers)
            return _error(401, "Unauthorized", message, {"www-authenticate": "Bearer"})
        peer = request.client.host if request.client else None
        if peer is not None and not is_loopback_host(peer):
            return _error(
                401,
                "Unauthorized",
                f"this server has no token, so it answers loopback clients only "
                f"(not {peer}); start it with a token to serve other machines",
                {"www-authenticate": "Bearer"},
            )
        host = _host_name(request.headers.get("host", ""))
        if not is_loopback_host(host):
            return _error(
                403,
                "Forbidden",
                f"Host {host!r} is not a loopback name; a server without a token "
                f"answers only to localhost, 127.0.0.1 and [::1]",
            )
        return None


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not from a browser page, or a same-origin navigation of an old browser
    return origin == f"{request.url.scheme}://{request.headers.get('host', '')}"


def _error(
    status: int, error: str, message: str, headers: dict[str, Any] | None = None
) -> JSONResponse:
    return JSONResponse({"error": error, "message": message}, status, headers)
