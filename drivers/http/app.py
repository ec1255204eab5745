"""The HTTP API and the live monitor page (`tarry serve`; needs the `server` extra).

`create_app(runtime)` builds the Starlette app; `serve(runtime)` runs it with uvicorn. The
routes, the JSON they take and give, the event streams and the rules of access are described
in docs/monitor.md. Every runtime call that touches the store runs in a worker thread, so a
slow store or a long run never holds up the event streams; a resume runs its flow there too
(async steps on that thread's own event loop) and answers with the outcome once the run
pauses or ends, while the streams show its events as they are stored.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route
from tarry.drivers.http.api import Api
from tarry.drivers.http.bodies import (
    BadRequest,
    on_bad_request,
    on_crash,
    on_error,
    on_http_error,
)
from tarry.drivers.http.edge import Edge
from tarry.drivers.http.guard import Guard, is_loopback_host
from tarry.drivers.http.metrics import metrics_route
from tarry.drivers.http.reading import NoSuchFlow, on_unknown_flow
from tarry.drivers.http.users import ADMIN, Users, parse_users
from tarry.drivers.runtime import Runtime
from tarry.engine.errors import TarryError

# --- building and running ----------------------------------------------------------------------


def create_app(
    runtime: Runtime,
    *,
    token: str | None = None,
    users: dict[str, str] | None = None,
    session_hours: float = 12.0,
    poll_interval: float = 1.0,
    heartbeat: float = 15.0,
) -> Starlette:
    """The HTTP API and monitor page over `runtime`, as a Starlette (ASGI) app.

    `users`: `{name: token}`; every request must carry one user's token (or the login cookie),
    and that user's name is recorded as the actor of what it does. `token`: one more user,
    named "admin" (see docs/monitor.md, "Access"). `session_hours`: how long a login cookie
    lasts.
    `poll_interval`: how often the event streams look at the store for events written by other
    processes (this runtime's own runs wake them at once). `heartbeat`: seconds of silence
    after which a stream sends a comment to keep the connection open.
    """
    if token is not None and (not isinstance(token, str) or not token.strip()):
        msg = f"token must be a non-empty string (got {token!r})"
        raise ValueError(msg)
    named = dict(users or {})
    if token is not None:
        if ADMIN in named and named[ADMIN] != token:
            msg = f"the --token user is named {ADMIN!r}, and the users already name one"
            raise ValueError(msg)
        named[ADMIN] = token
    for name, value in (
        ("poll_interval", poll_interval),
        ("heartbeat", heartbeat),
        ("session_hours", session_hours),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            msg = f"{name} must be a positive number of seconds (got {value!r})"
            raise ValueError(msg)
    known = Users(named, session_seconds=float(session_hours) * 3600)
    api = Api(runtime, users=known, poll=float(poll_interval), heartbeat=float(heartbeat))
    api.login_html = login_page(api.login_html, users=bool(users), token=token is not None)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        api.journal.close()

    routes = [
        Route("/", api.page, methods=["GET"]),
        Route("/login", api.login, methods=["GET", "POST"]),
        Route("/logout", api.logout, methods=["POST"]),
        Route("/api/me", api.me, methods=["GET"]),
        Route("/api/openapi.json", api.openapi, methods=["GET"]),
        Route("/api/flows", api.list_flows, methods=["GET"]),
        Route("/api/flows/{name}", api.get_flow, methods=["GET"]),
        Route("/api/sessions", api.list_sessions, methods=["GET"]),
        Route("/api/sessions", api.start_session, methods=["POST"]),
        Route("/api/sessions/{sid}", api.get_session, methods=["GET"]),
        Route("/api/sessions/{sid}/events", api.list_events, methods=["GET"]),
        Route("/api/sessions/{sid}/replay", api.replay_session, methods=["GET"]),
        Route("/api/sessions/{sid}/events/stream", api.stream_session, methods=["GET"]),
        Route("/api/sessions/{sid}/logs", api.list_logs, methods=["GET"]),
        Route("/api/sessions/{sid}/batches", api.list_session_batches, methods=["GET"]),
        Route("/api/sessions/{sid}/items", api.list_items, methods=["GET"]),
        Route("/api/inbox", api.list_inbox, methods=["GET"]),
        Route("/api/sessions/{sid}/resume", api.resume_session, methods=["POST"]),
        Route("/api/sessions/{sid}/abort", api.abort_session, methods=["POST"]),
        Route("/api/sessions/{sid}/cancel", api.cancel_session, methods=["POST"]),
        Route("/api/sessions/{sid}/skip", api.skip_session, methods=["POST"]),
        Route("/api/sessions/{sid}/fork", api.fork_session, methods=["POST"]),
        Route("/api/sessions/{sid}/recover", api.recover_session, methods=["POST"]),
        Route("/api/resume", api.resume_token, methods=["POST"]),
        Route("/api/deliver", api.deliver, methods=["POST"]),
        Route("/api/mail", api.list_mail, methods=["GET"]),
        # `:path`: a key may hold slashes (`batch-7/item-42`), sent as they are or as %2F.
        Route("/api/mail/{key:path}", api.discard_mail, methods=["DELETE"]),
        Route("/api/stats", api.stats, methods=["GET"]),
        Route("/api/stats/timeline", api.stats_timeline, methods=["GET"]),
        Route("/api/events/stream", api.stream_all, methods=["GET"]),
    ]
    metrics_at, metrics = metrics_route(runtime)  # with tarry[prometheus] only
    if metrics_at is not None:
        routes.append(metrics_at)
    handlers: dict[Any, Any] = {}
    psycopg = sys.modules.get("psycopg")  # loaded when the store is PostgreSQL
    if psycopg is not None:  # a value PostgreSQL refuses is the caller's: 400, not logged
        handlers[psycopg.DataError] = on_crash
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(Guard, users=known, login_page=lambda: api.login_html),
            Middleware(Edge, routes=routes),  # NUL refused, OPTIONS answered (edge.py)
        ],
        exception_handlers={
            **handlers,
            Exception: on_crash,
            TarryError: on_error,
            ValueError: on_error,
            BadRequest: on_bad_request,
            NoSuchFlow: on_unknown_flow,
            HTTPException: on_http_error,
        },
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.metrics = metrics
    #: Ends every open event stream; `serve` calls it when the server begins to shut down.
    app.state.close_streams = api.streams.close_all
    return app


def login_page(html: str, *, users: bool, token: bool) -> str:
    """The login page, saying which token it asks for: a user's own (named users: `--users`,
    `$TARRY_USERS`), the server's single one (`--token`, `$TARRY_TOKEN`), or either."""
    mine = "your own token (the one your name has in this server's users file)"
    single = (
        "the server's token (the one given with <code>--token</code> or <code>TARRY_TOKEN</code>)"
    )
    if users and token:
        how = f"This server asks for {mine}, or {single}."
    elif users:
        how = f"This server asks for {mine}."
    else:
        how = f"This server asks for {single}."
    start, end = html.index("<!--how-->"), html.index("<!--/how-->") + len("<!--/how-->")
    return html[:start] + how + html[end:]


def serve(
    runtime: Runtime,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    users: dict[str, str] | None = None,
    session_hours: float = 12.0,
    forwarded_allow_ips: str | None = None,
) -> None:
    """Serve the HTTP API and the monitor page with uvicorn until interrupted. Blocks.

    `X-Forwarded-For` and `X-Forwarded-Proto` are ignored (the client is the connection's
    peer, which the login rate limit counts) unless `forwarded_allow_ips` names the proxies
    trusted to set them (uvicorn's list: addresses, networks, or "*"). The address is bound
    before anything is logged: one in use raises OSError saying so (`tarry serve` exits 1).

    `token` defaults to `$TARRY_TOKEN`, `users` to the `name:token` lines of `$TARRY_USERS`
    (see users.py). Without a token or users only a loopback `host` is allowed (ValueError
    otherwise, before anything starts): a server reachable from other machines must ask for
    a token.
    """
    if token is None:
        token = os.environ.get("TARRY_TOKEN") or None
    if users is None and os.environ.get("TARRY_USERS"):
        users = parse_users(os.environ["TARRY_USERS"], "$TARRY_USERS")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        msg = f"token must be a non-empty string (got {token!r})"
        raise ValueError(msg)
    if not isinstance(host, str) or not host:
        msg = f"host must be a host name or address (got {host!r})"
        raise ValueError(msg)
    if token is None and not users and not is_loopback_host(host):
        msg = (
            f"refusing to serve on {host!r} without a token: anyone who can reach it could "
            f"resume and cancel sessions; pass --token (or set TARRY_TOKEN), or bind 127.0.0.1"
        )
        raise ValueError(msg)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        msg = f"port must be an int from 0 to 65535 (got {port!r})"
        raise ValueError(msg)
    server, sock = server_of(
        create_app(runtime, token=token, users=users, session_hours=session_hours),
        host,
        port,
        forwarded_allow_ips,
    )
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def server_of(
    app: Starlette, host: str, port: int, forwarded_allow_ips: str | None = None
) -> tuple[Any, socket.socket]:
    """The uvicorn server of `serve` and the socket it listens on, bound here (OSError when
    it cannot be). `server.run(sockets=[sock])` serves until `server.should_exit` is set."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            # Open event streams never end by themselves: end them first, so the connections
            # close and a run still answering a resume gets the graceful period.
            app.state.close_streams()
            await super().shutdown(sockets=sockets)

    sock = bind(host, port)
    config = uvicorn.Config(
        app,
        host=host,
        port=sock.getsockname()[1],
        lifespan="on",
        timeout_graceful_shutdown=5,
        log_level="info",
        # uvicorn trusts X-Forwarded-For from 127.0.0.1 by default: any local process (or a
        # proxy that passes the header on) could then rotate it past the login rate limit.
        proxy_headers=forwarded_allow_ips is not None,
        forwarded_allow_ips=forwarded_allow_ips or "",
    )
    return Server(config), sock


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (`host`, `port`); OSError naming them when it cannot be had (an
    address in use, a host not of this machine)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        msg = f"cannot serve on {host}:{port}: {exc.strerror or exc}"
        raise OSError(exc.errno, msg) from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        what = exc.strerror or str(exc)
        hint = (
            " (another server runs there: pass another --port)"
            if exc.errno == errno.EADDRINUSE
            else ""
        )
        msg = f"cannot serve on {host}:{port}: {what}{hint}"
        raise OSError(exc.errno, msg) from exc
    sock.set_inheritable(True)
    return sock
