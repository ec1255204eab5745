"""The HTTP API's route handlers over one runtime (see app.py for the routes they serve)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from importlib import resources
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from tarry.engine.errors import FlowMismatch, SessionNotResumable, UnknownFlow

from ..jsonable import event_to_dict, log_to_dict
from ..outcome import Outcome
from ..runtime import Runtime
from ..settle import settle
from ..views import SessionView
from ..worker import deliver_importing, register_recorded_flows
from .bodies import (
    BadRequest,
    body_object,
    error_response,
    int_param,
    json_response,
    read_body,
    read_json,
    session_json,
)
from .guard import COOKIE, PAGE_HEADERS, cookie_value, same
from .journal import Journal, journal_feed
from .sse import EventStreamResponse, Streams, Wakeup, session_feed

#: The most events one `GET .../events` returns.
MAX_EVENTS = 10_000
#: The most log records one `GET .../logs` returns.
MAX_LOGS_PAGE = 10_000


# --- the routes --------------------------------------------------------------------------------


class Api:
    """The route handlers over one runtime."""

    def __init__(self, runtime: Runtime, *, token: str | None, poll: float, heartbeat: float):
        self.rt = runtime
        self.token = token
        self.poll = poll
        self.heartbeat = heartbeat
        self.journal = Journal(runtime, poll=poll)
        self.streams = Streams()
        self.page_html = static_text("monitor.html")
        self.login_html = static_text("login.html")

    # -- the page ----------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        return HTMLResponse(self.page_html, headers=PAGE_HEADERS)

    async def login(self, request: Request) -> Response:
        if self.token is None:  # nothing to log in to
            return RedirectResponse("/", 303) if request.method == "GET" else Response(None, 204)
        if request.method == "GET":
            return HTMLResponse(self.login_html, headers=PAGE_HEADERS)
        body = await read_body(request, {"token"})
        given = body.get("token")
        if not isinstance(given, str) or not same(given, self.token):
            return error_response(401, "Unauthorized", "wrong token", {"www-authenticate": "Bearer"})
        response = Response(None, 204)
        response.set_cookie(COOKIE, cookie_value(self.token), httponly=True, samesite="strict",
                            path="/")
        return response

    # -- reading -----------------------------------------------------------------------------
    async def list_sessions(self, request: Request) -> Response:
        q = request.query_params
        limit = int_param(request, "limit", 50, 1, 1000)
        offset = int_param(request, "offset", 0, 0, None)
        status, flow = q.get("status") or None, q.get("flow") or None
        rows = await run_in_threadpool(
            partial(self.rt.sessions, status=status, flow=flow, limit=limit, offset=offset)
        )
        return json_response({"sessions": rows, "limit": limit, "offset": offset})

    async def get_session(self, request: Request) -> Response:
        view = await self._view(request)
        return json_response(await run_in_threadpool(session_json, view))

    async def list_events(self, request: Request) -> Response:
        after = int_param(request, "after", 0, 0, None)
        limit = int_param(request, "limit", 1000, 1, MAX_EVENTS)
        view = await self._view(request)
        # One more than asked for tells whether there are more: the store reads that page only.
        events = await run_in_threadpool(view.events, after, limit + 1)
        more = len(events) > limit
        del events[limit:]
        return json_response({
            "session_id": view.session_id,
            "events": [event_to_dict(e) for e in events],
            "last_seq": events[-1].seq if events else after,
            "more": more,
        })

    async def list_logs(self, request: Request) -> Response:
        level: int | str | None = request.query_params.get("level") or None
        if isinstance(level, str) and level.isdigit():
            level = int(level)
        after = int_param(request, "after", 0, 0, None)
        limit = int_param(request, "limit", 1000, 1, MAX_LOGS_PAGE)
        sid = request.path_params["sid"]

        def read() -> tuple[list[Any], int]:
            # One more than asked for tells whether there are more.
            found = self.rt.logs(sid, level=level, after=after, limit=limit + 1)
            return found, self.rt.dropped_logs(sid)

        logs, dropped = await run_in_threadpool(read)
        more = len(logs) > limit
        del logs[limit:]
        return json_response({
            "session_id": sid,
            "logs": [log_to_dict(r) for r in logs],
            "last_seq": logs[-1].seq if logs else after,
            "more": more,
            "dropped": dropped,
        })

    async def stats(self, request: Request) -> Response:
        flow = request.query_params.get("flow") or None
        return json_response(await run_in_threadpool(partial(self.rt.stats, flow=flow)))

    # -- controls ----------------------------------------------------------------------------
    async def resume_session(self, request: Request) -> Response:
        body = await read_body(request, {"value"})
        sid = request.path_params["sid"]
        return json_response(await run_in_threadpool(self._by_session, sid, "resume", body.get("value")))

    async def skip_session(self, request: Request) -> Response:
        body = await read_body(request, {"output"})
        sid = request.path_params["sid"]
        return json_response(await run_in_threadpool(self._by_session, sid, "skip", body.get("output")))

    async def abort_session(self, request: Request) -> Response:
        """Stop a running session at its next checkpoint, whichever process runs it (a stored
        request): resumably, or as cancelled with `{"resumable": false}`. 202: asked."""
        body = await read_body(request, {"resumable"})
        resumable = body.get("resumable", True)
        if not isinstance(resumable, bool):
            raise BadRequest("BadRequest", f'"resumable" must be true or false (got {resumable!r})')
        sid = request.path_params["sid"]
        await run_in_threadpool(partial(self.rt.abort, sid, resumable=resumable))
        view = await self._view(request)
        requested = "abort" if resumable else "cancel"
        return json_response(
            {"session_id": sid, "requested": requested, "status": view.status}, 202
        )

    async def cancel_session(self, request: Request) -> Response:
        await read_body(request, set())
        return json_response(await run_in_threadpool(self.rt.cancel, request.path_params["sid"]))

    async def resume_token(self, request: Request) -> Response:
        body = await read_body(request, {"token", "value"})
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise BadRequest("BadRequest", 'the body must name the token: {"token": "tk_...", '
                             '"value": ...}')
        return json_response(await run_in_threadpool(self._drive, self.rt.resume, token, body.get("value")))

    async def deliver(self, request: Request) -> Response:
        """`{"key": ..., "value": ...}`, or a list of them: resume the waits on each key with its
        value, or keep it as mail. Answers the outcomes of the sessions resumed and the keys
        kept as mail."""
        data = await read_json(request)
        many = isinstance(data, list)
        items = data if many else [data if data is not None else {}]
        deliveries: dict[str, Any] = {}
        for i, item in enumerate(items):
            where = f"item {i} of the request body" if many else "the request body"
            item = body_object(item, {"key", "value"}, where)
            key = item.get("key")
            if not isinstance(key, str) or not key:
                raise BadRequest("BadRequest", f'{where} must name a key: {{"key": "batch-7/'
                                               f'item-42", "value": ...}} (got {key!r})')
            if key in deliveries:
                raise BadRequest("BadRequest", f"key {key!r} is delivered twice in one request")
            deliveries[key] = item.get("value")
        done = await run_in_threadpool(deliver_importing, self.rt, deliveries)
        return json_response({"outcomes": done.outcomes, "kept": done.kept})

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
        except (UnknownFlow, FlowMismatch):
            # A session started by `tarry run` records where its flow lives: import it and try
            # again (nothing was changed: the token is consumed only after every check). Also
            # when another version of its flow is registered: the one it records may be its own.
            if not self._import_flow_of(token):
                raise
            result = method(token, value)
        return settle(result)

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


def static_text(name: str) -> str:
    return resources.files("tarry.drivers.http").joinpath("static", name).read_text("utf-8")
