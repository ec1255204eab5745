"""The HTTP API and the live monitor page (`tarry serve`; needs the `server` extra).

`create_app(runtime)` builds the Starlette app; `serve(runtime)` runs it with uvicorn. The
routes, the JSON they take and give, the event streams and the rules of access are described
in docs/monitor.md. Every runtime call that touches the store runs in a worker thread, so a
slow store or a long run never holds up the event streams; a resume runs its flow there too
(async steps on that thread's own event loop) and answers with the outcome once the run
pauses or ends, while the streams show its events as they are stored.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from tarry.engine.errors import (
    ConcurrentUpdate,
    FlowMismatch,
    InvalidResumeValue,
    NotSerializable,
    SessionExists,
    SessionNotResumable,
    TarryError,
    TokenAlreadyUsed,
    UnknownFlow,
    UnknownSession,
    UnknownToken,
)

from .guard import COOKIE, PAGE_HEADERS, Guard, cookie_value, is_loopback_host, same
from .journal import Journal, journal_feed
from .jsonable import dumps, event_to_dict, session_to_dict
from .outcome import Outcome
from .runtime import Runtime
from .sse import EventStreamResponse, Streams, Wakeup, session_feed
from .views import SessionView
from .worker import register_recorded_flows

#: The largest request body read (a resume value or a skip output), in bytes.
MAX_BODY = 1 << 20
#: The most events one `GET .../events` returns.
MAX_EVENTS = 10_000

#: HTTP status by what the caller can do about the error.
STATUS: list[tuple[tuple[type[Exception], ...], int]] = [
    ((UnknownSession, UnknownToken), 404),
    ((TokenAlreadyUsed, SessionNotResumable, ConcurrentUpdate, SessionExists, FlowMismatch,
      UnknownFlow), 409),
    ((InvalidResumeValue, NotSerializable), 422),
    ((ValueError,), 400),  # InvalidArgument, and any other value a method refused
]


class BadRequest(Exception):
    """The request itself is malformed: 400 with `error` as the type."""

    def __init__(self, error: str, message: str) -> None:
        self.error = error
        self.message = message
        super().__init__(message)


# --- building and running ----------------------------------------------------------------------


def create_app(
    runtime: Runtime,
    *,
    token: str | None = None,
    poll_interval: float = 1.0,
    heartbeat: float = 15.0,
) -> Starlette:
    """The HTTP API and monitor page over `runtime`, as a Starlette (ASGI) app.

    `token`: when given, every request must carry it (see docs/monitor.md, "Access").
    `poll_interval`: how often the event streams look at the store for events written by other
    processes (this runtime's own runs wake them at once). `heartbeat`: seconds of silence
    after which a stream sends a comment to keep the connection open.
    """
    if token is not None and (not isinstance(token, str) or not token.strip()):
        msg = f"token must be a non-empty string (got {token!r})"
        raise ValueError(msg)
    for name, value in (("poll_interval", poll_interval), ("heartbeat", heartbeat)):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            msg = f"{name} must be a positive number of seconds (got {value!r})"
            raise ValueError(msg)
    api = _Api(runtime, token=token, poll=float(poll_interval), heartbeat=float(heartbeat))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        api.journal.close()

    routes = [
        Route("/", api.page, methods=["GET"]),
        Route("/login", api.login, methods=["GET", "POST"]),
        Route("/api/sessions", api.list_sessions, methods=["GET"]),
        Route("/api/sessions/{sid}", api.get_session, methods=["GET"]),
        Route("/api/sessions/{sid}/events", api.list_events, methods=["GET"]),
        Route("/api/sessions/{sid}/events/stream", api.stream_session, methods=["GET"]),
        Route("/api/sessions/{sid}/resume", api.resume_session, methods=["POST"]),
        Route("/api/sessions/{sid}/cancel", api.cancel_session, methods=["POST"]),
        Route("/api/sessions/{sid}/skip", api.skip_session, methods=["POST"]),
        Route("/api/resume", api.resume_token, methods=["POST"]),
        Route("/api/stats", api.stats, methods=["GET"]),
        Route("/api/events/stream", api.stream_all, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(Guard, token=token, login_page=lambda: api.login_html)],
        exception_handlers={
            TarryError: _on_error,
            ValueError: _on_error,
            BadRequest: _on_bad_request,
            HTTPException: _on_http_error,
        },
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    #: Ends every open event stream; `serve` calls it when the server begins to shut down.
    app.state.close_streams = api.streams.close_all
    return app


def serve(
    runtime: Runtime, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None
) -> None:
    """Serve the HTTP API and the monitor page with uvicorn until interrupted. Blocks.

    `token` defaults to `$TARRY_TOKEN`. Without a token only a loopback `host` is allowed
    (ValueError otherwise, before anything starts): a server reachable from other machines
    must ask for a token.
    """
    if token is None:
        token = os.environ.get("TARRY_TOKEN") or None
    if token is not None and (not isinstance(token, str) or not token.strip()):
        msg = f"token must be a non-empty string (got {token!r})"
        raise ValueError(msg)
    if not isinstance(host, str) or not host:
        msg = f"host must be a host name or address (got {host!r})"
        raise ValueError(msg)
    if token is None and not is_loopback_host(host):
        msg = (
            f"refusing to serve on {host!r} without a token: anyone who can reach it could "
            f"resume and cancel sessions; pass --token (or set TARRY_TOKEN), or bind 127.0.0.1"
        )
        raise ValueError(msg)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        msg = f"port must be an int from 0 to 65535 (got {port!r})"
        raise ValueError(msg)
    import uvicorn

    app = create_app(runtime, token=token)

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            # Open event streams never end by themselves: end them first, so the connections
            # close and a run still answering a resume gets the graceful period.
            app.state.close_streams()
            await super().shutdown(sockets=sockets)

    config = uvicorn.Config(app, host=host, port=port, lifespan="on",
                            timeout_graceful_shutdown=5, log_level="info")
    Server(config).run()


# --- the routes --------------------------------------------------------------------------------


class _Api:
    """The route handlers over one runtime."""

    def __init__(self, runtime: Runtime, *, token: str | None, poll: float, heartbeat: float):
        self.rt = runtime
        self.token = token
        self.poll = poll
        self.heartbeat = heartbeat
        self.journal = Journal(runtime, poll=poll)
        self.streams = Streams()
        self.page_html = _static("monitor.html")
        self.login_html = _static("login.html")

    # -- the page ----------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        return HTMLResponse(self.page_html, headers=PAGE_HEADERS)

    async def login(self, request: Request) -> Response:
        if self.token is None:  # nothing to log in to
            return RedirectResponse("/", 303) if request.method == "GET" else Response(None, 204)
        if request.method == "GET":
            return HTMLResponse(self.login_html, headers=PAGE_HEADERS)
        body = await _body(request, {"token"})
        given = body.get("token")
        if not isinstance(given, str) or not same(given, self.token):
            return _error(401, "Unauthorized", "wrong token", {"www-authenticate": "Bearer"})
        response = Response(None, 204)
        response.set_cookie(COOKIE, cookie_value(self.token), httponly=True, samesite="strict",
                            path="/")
        return response

    # -- reading -----------------------------------------------------------------------------
    async def list_sessions(self, request: Request) -> Response:
        q = request.query_params
        limit = _int_param(request, "limit", 50, 1, 1000)
        offset = _int_param(request, "offset", 0, 0, None)
        status, flow = q.get("status") or None, q.get("flow") or None
        rows = await run_in_threadpool(
            partial(self.rt.sessions, status=status, flow=flow, limit=limit, offset=offset)
        )
        return _json({"sessions": rows, "limit": limit, "offset": offset})

    async def get_session(self, request: Request) -> Response:
        view = await self._view(request)
        return _json(await run_in_threadpool(_session_json, view))

    async def list_events(self, request: Request) -> Response:
        after = _int_param(request, "after", 0, 0, None)
        limit = _int_param(request, "limit", 1000, 1, MAX_EVENTS)
        view = await self._view(request)
        events = await run_in_threadpool(view.events, after)
        return _json({
            "session_id": view.session_id,
            "events": [event_to_dict(e) for e in events[:limit]],
            "last_seq": events[-1].seq if events else after,
            "more": len(events) > limit,
        })

    async def stats(self, request: Request) -> Response:
        flow = request.query_params.get("flow") or None
        return _json(await run_in_threadpool(partial(self.rt.stats, flow=flow)))

    # -- controls ----------------------------------------------------------------------------
    async def resume_session(self, request: Request) -> Response:
        body = await _body(request, {"value"})
        sid = request.path_params["sid"]
        return _json(await run_in_threadpool(self._by_session, sid, "resume", body.get("value")))

    async def skip_session(self, request: Request) -> Response:
        body = await _body(request, {"output"})
        sid = request.path_params["sid"]
        return _json(await run_in_threadpool(self._by_session, sid, "skip", body.get("output")))

    async def cancel_session(self, request: Request) -> Response:
        await _body(request, set())
        return _json(await run_in_threadpool(self.rt.cancel, request.path_params["sid"]))

    async def resume_token(self, request: Request) -> Response:
        body = await _body(request, {"token", "value"})
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise BadRequest("BadRequest", 'the body must name the token: {"token": "tk_...", '
                             '"value": ...}')
        return _json(await run_in_threadpool(self._drive, self.rt.resume, token, body.get("value")))

    def _by_session(self, sid: str, action: str, value: Any) -> Outcome:
        """Resume or skip a session by id, with the live token looked up here: the page never
        needs to hold a token."""
        view = self.rt.session(sid)
        token = view.outcome.token
        if token is None:
            status = view.status
            if status in ("paused", "failed"):  # its token was just used: a resume is running
                status = "being resumed"
            raise SessionNotResumable(sid, status, action)
        drive = self.rt.resume if action == "resume" else self.rt.skip
        return self._drive(drive, token, value)

    def _drive(self, method: Callable[..., Any], token: str, value: Any) -> Outcome:
        """Call resume or skip in this worker thread and wait for the outcome."""
        try:
            result = method(token, value)
        except UnknownFlow:
            # A session started by `tarry run` records where its flow lives: import it and try
            # again (nothing was changed: the token is consumed only after every check).
            if not self._import_flow_of(token):
                raise
            result = method(token, value)
        return _settle(result)

    def _import_flow_of(self, token: str) -> bool:
        key = self.rt.tokens.key(token)
        info = self.rt.store.find_token(key) if key is not None else None
        record = self.rt.store.load(info.session_id) if info is not None else None
        return record is not None and bool(register_recorded_flows(self.rt, [record]))

    # -- streams -----------------------------------------------------------------------------
    async def stream_session(self, request: Request) -> Response:
        given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        if not (given.isascii() and given.isdigit()):
            raise BadRequest("BadRequest", f"Last-Event-ID or ?after= must be an event seq, "
                                           f"an int >= 0 (got {given!r})")
        view = await self._view(request)
        wakeup = Wakeup()
        unsubscribe = self.rt.subscribe(wakeup.fire, session_id=view.session_id)
        self.streams.opened(wakeup)

        def close() -> None:
            unsubscribe()
            self.streams.closed(wakeup)

        feed = session_feed(view.events, int(given), wakeup, self.streams, poll=self.poll,
                            heartbeat=self.heartbeat)
        return EventStreamResponse(feed, on_close=close)

    async def stream_all(self, request: Request) -> Response:
        cursor = request.headers.get("last-event-id") or request.query_params.get("after")
        wakeup = Wakeup(fast=False)
        start = await run_in_threadpool(self.journal.attach, wakeup.fire)
        self.streams.opened(wakeup)

        def close() -> None:
            self.journal.detach(wakeup.fire)
            self.streams.closed(wakeup)

        feed = journal_feed(self.journal, cursor, start, wakeup, self.streams,
                            heartbeat=self.heartbeat)
        return EventStreamResponse(feed, on_close=close)

    async def _view(self, request: Request) -> SessionView:
        return await run_in_threadpool(self.rt.session, request.path_params["sid"])


# --- JSON in and out ---------------------------------------------------------------------------


def _session_json(view: SessionView) -> dict[str, Any]:
    """A session for the API: where it stands, and what may be done with it next. The token is
    included: only callers who passed the guard get here."""
    data = session_to_dict(view)
    token, status = data["token"], data["status"]
    data["actions"] = {
        "resume": token is not None and status in ("paused", "failed"),
        "cancel": status in ("paused", "failed"),
        "skip": token is not None and status == "failed",
    }
    return data


async def _body(request: Request, fields: set[str]) -> dict[str, Any]:
    """The JSON object in the body (an empty body is `{}`), with only the `fields` named."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest("BadRequest", f"the request body is larger than {MAX_BODY} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except RecursionError as exc:
        raise BadRequest("MalformedJSON", "the request body nests arrays or objects too deeply "
                                          f"(at most about {sys.getrecursionlimit()} levels)") from exc
    except UnicodeDecodeError as exc:
        raise BadRequest("MalformedJSON", f"the request body is not valid JSON: it is not UTF-8 "
                                          f"({exc.reason} at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise BadRequest("MalformedJSON", f"the request body is not valid JSON: {exc.msg} at "
                                          f"line {exc.lineno} column {exc.colno}") from exc
    except ValueError as exc:
        raise BadRequest("MalformedJSON", f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        example = ", ".join(f'"{f}": ...' for f in sorted(fields)) or ""
        raise BadRequest("BadRequest", f"the request body must be a JSON object {{{example}}} "
                                       f"(got {type(data).__name__})")
    unknown = sorted(set(data) - fields)
    if unknown:
        expected = ", ".join(sorted(fields)) or "nothing"
        raise BadRequest("BadRequest", f"unknown field {unknown[0]!r} in the request body "
                                       f"(expected: {expected})")
    return data


def _no_constant(name: str) -> Any:
    msg = f"{name} is not a JSON number"
    raise ValueError(msg)


def _finite(text: str) -> float:
    # 1e400 parses as inf, which no JSON answer could hold: refused like Infinity itself.
    value = float(text)
    if not math.isfinite(value):
        msg = f"{text[:40]} is too large for a JSON number"
        raise ValueError(msg)
    return value


def _int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f">= {low}"
        raise BadRequest("BadRequest", f"?{name}= must be an int {bounds} (got {text!r})")
    return value


def _json(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(value), status, headers, media_type="application/json")


def _error(status: int, error: str, message: str, headers: dict[str, str] | None = None
           ) -> Response:
    return _json({"error": error, "message": message}, status, headers)


async def _on_error(request: Request, exc: Exception) -> Response:
    status = next((code for kinds, code in STATUS if isinstance(exc, kinds)), 500)
    return _error(status, type(exc).__name__, str(exc))


async def _on_bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadRequest)
    return _error(400, exc.error, exc.message)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    names = {404: "NotFound", 405: "MethodNotAllowed"}
    error = names.get(exc.status_code, "HTTPError")
    message = f"no route {request.method} {request.url.path}" if exc.status_code in names \
        else str(exc.detail)
    return _error(exc.status_code, error, message, dict(exc.headers or {}))


def _settle(result: Any) -> Outcome:
    """An outcome from what resume or skip returned: awaited on this (worker) thread's own
    event loop when the flow met an async step."""
    if not hasattr(result, "__await__"):
        return result

    async def wait() -> Outcome:
        return await result

    return asyncio.run(wait())


def _static(name: str) -> str:
    return resources.files("tarry.drivers").joinpath("static", name).read_text("utf-8")

