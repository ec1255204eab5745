"""The HTTP API's route handlers over one runtime (see app.py for the routes they serve)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from importlib import resources
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import settle
from tarry.drivers.http.batch_routes import BatchRoutes
from tarry.drivers.http.bodies import (
    MAX_QUERY_INT,
    BadRequest,
    body_object,
    error_response,
    json_response,
    read_body,
    read_json,
    session_json,
)
from tarry.drivers.http.guard import COOKIE, PAGE_HEADERS, root_of, rooted
from tarry.drivers.http.journal import Journal, journal_feed
from tarry.drivers.http.mail_routes import MailRoutes
from tarry.drivers.http.reading import ReadingRoutes, find_flow
from tarry.drivers.http.session_routes import SessionRoutes
from tarry.drivers.http.sse import EventStreamResponse, Streams, Wakeup, session_feed
from tarry.drivers.http.users import LoginLimit, Users
from tarry.drivers.limits import valid_session_id
from tarry.drivers.runtime import Runtime
from tarry.drivers.worker import deliver_importing, register_recorded_flows
from tarry.engine.elements.waits import Gate
from tarry.engine.errors import (
    FlowMismatch,
    InvalidResumeValue,
    SessionExists,
    SessionNotResumable,
    UnknownFlow,
)

# --- the routes --------------------------------------------------------------------------------


class Api(SessionRoutes, ReadingRoutes, MailRoutes, BatchRoutes):
    """The route handlers over one runtime."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        users: Users,
        poll: float,
        heartbeat: float,
        login_limit: LoginLimit | None = None,
    ):
        self.rt = runtime
        self.users = users
        self.login_limit = login_limit or LoginLimit()
        self.poll = poll
        self.heartbeat = heartbeat
        self.journal = Journal(runtime, poll=poll)
        self.streams = Streams()
        self.page_html = static_text("monitor.html")
        self.login_html = static_text("login.html")

    # -- the page ----------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        return HTMLResponse(rooted(self.page_html, request.scope), headers=PAGE_HEADERS)

    async def login(self, request: Request) -> Response:
        """`{"token": ...}`: set the login cookie of the user whose token it is. At most
        LoginLimit.failures wrong tokens a minute per client address, then 429."""
        if not self.users:  # nothing to log in to
            home = root_of(request.scope) + "/"
            return RedirectResponse(home, 303) if request.method == "GET" else Response(None, 204)
        if request.method == "GET":
            return HTMLResponse(rooted(self.login_html, request.scope), headers=PAGE_HEADERS)
        client = request.client.host if request.client else "?"
        wait = self.login_limit.retry_after(client)
        if wait:
            return error_response(
                429,
                "TooManyRequests",
                f"too many failed logins from {client}: try again in {wait} s",
                {"retry-after": str(wait)},
            )
        body = await read_body(request, {"token"})
        given = body.get("token")
        user = self.users.by_token(given) if isinstance(given, str) and given else None
        if user is None:
            self.login_limit.failed(client)
            return error_response(
                401, "Unauthorized", "wrong token", {"www-authenticate": "Bearer"}
            )
        response = Response(None, 204)  # who logged in: GET /api/me
        response.set_cookie(
            COOKIE,
            self.users.cookie(user),
            httponly=True,
            samesite="strict",
            path="/",
            max_age=int(self.users.session_seconds),
        )
        return response

    async def logout(self, request: Request) -> Response:
        """Clear the login cookie (a bearer token is not affected: it is sent each time)."""
        response = Response(None, 204)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def me(self, request: Request) -> Response:
        return json_response({"user": request.state.user})

    # -- starting ----------------------------------------------------------------------------
    async def start_session(self, request: Request) -> Response:
        """Run a registered flow until it pauses or ends: 201 with the outcome. With a
        `session_id`, idempotent: the same request again answers 200 with that session."""
        body = await read_body(request, {"flow", "input", "session_id", "version"})
        name, sid = body.get("flow"), body.get("session_id")
        if not isinstance(name, str) or not name:
            raise BadRequest(
                "BadRequest",
                'the body must name a registered flow: {"flow": '
                f'"name", "input": ...}} (got {name!r})',
            )
        if sid is not None and (not isinstance(sid, str) or not sid):
            raise BadRequest("BadRequest", f'"session_id" must be a non-empty string (got {sid!r})')
        flow = find_flow(self.rt, name, body.get("version"))
        given = body.get("input")
        user = request.state.user

        def start() -> tuple[int, Any]:
            try:
                return 201, settle(self.rt.run(flow, given, session_id=sid, actor=user))
            except SessionExists:
                return 200, self._existing(sid, name, given)  # type: ignore[arg-type]

        status, result = await run_in_threadpool(start)
        return json_response(result, status)

    def _existing(self, sid: str, name: str, given: Any) -> dict[str, Any]:
        """The session `sid` if it was started with this flow and input; else SessionExists."""
        view = self.rt.session(sid)
        first = view.events(0, 1)
        started = first[0].data if first and first[0].type == "run.started" else {}
        if view.flow != name or "input" not in started or started["input"] != given:
            msg = (
                f"session {sid!r} exists with another flow or input (flow {view.flow!r}); "
                f"a repeated start must send the same flow and input"
            )
            raise SessionExists(msg)
        return session_json(view)

    async def fork_session(self, request: Request) -> Response:
        """A new session from this one's state after event `at_seq` (or just before the
        element at path `at` first started), run until it pauses or ends: 201 with its
        outcome (Runtime.fork)."""
        body = await read_body(request, {"at_seq", "at", "session_id"})
        sid, user = request.path_params["sid"], request.state.user
        new = body.get("session_id")
        if new is not None and (not isinstance(new, str) or not new):
            raise BadRequest("BadRequest", f'"session_id" must be a non-empty string (got {new!r})')
        fork = partial(
            self.rt.fork, sid, at_seq=body.get("at_seq"), at=body.get("at"), session_id=new
        )

        def run() -> Outcome:
            try:
                return settle(fork(actor=user))
            except (UnknownFlow, FlowMismatch):
                # A session started by `tarry run` records where its flow lives: import it
                # and try again (nothing was written: every check comes first).
                record = self.rt.store.load(sid)
                if record is None or not register_recorded_flows(self.rt, [record]):
                    raise
                return settle(fork(actor=user))

        return json_response(await run_in_threadpool(run), 201)

    # -- controls ----------------------------------------------------------------------------
    async def resume_session(self, request: Request) -> Response:
        body = await read_body(request, {"value"})
        sid, user = request.path_params["sid"], request.state.user
        return json_response(
            await run_in_threadpool(self._by_session, sid, "resume", body.get("value"), user)
        )

    async def skip_session(self, request: Request) -> Response:
        body = await read_body(request, {"output"})
        sid, user = request.path_params["sid"], request.state.user
        return json_response(
            await run_in_threadpool(self._by_session, sid, "skip", body.get("output"), user)
        )

    async def abort_session(self, request: Request) -> Response:
        """Stop a running session at its next checkpoint, whichever process runs it (a stored
        request): resumably, or as cancelled with `{"resumable": false}`. 202: asked."""
        body = await read_body(request, {"resumable"})
        resumable = body.get("resumable", True)
        if not isinstance(resumable, bool):
            raise BadRequest("BadRequest", f'"resumable" must be true or false (got {resumable!r})')
        sid = request.path_params["sid"]
        await run_in_threadpool(
            partial(self.rt.abort, sid, resumable=resumable, actor=request.state.user)
        )
        view = await self._view(request)
        requested = "abort" if resumable else "cancel"
        return json_response(
            {"session_id": sid, "requested": requested, "status": view.status}, 202
        )

    async def cancel_session(self, request: Request) -> Response:
        await read_body(request, set())
        return json_response(
            await run_in_threadpool(
                partial(self.rt.cancel, request.path_params["sid"], actor=request.state.user)
            )
        )

    async def recover_session(self, request: Request) -> Response:
        """Take over a stale session (running, its lease lapsed: its process died), importing
        its flow from the MODULE:FLOW it recorded if this server lacks it: its outcome."""
        await read_body(request, set())
        sid = request.path_params["sid"]

        def recover() -> Outcome:
            record = self.rt.store.load(sid) if valid_session_id(sid) else None
            if record is not None and self.rt.flows.get(record.flow) is None:
                register_recorded_flows(self.rt, [record])
            [outcome] = self.rt.recover(session_id=sid)
            return outcome

        return json_response(await run_in_threadpool(recover))

    async def resume_token(self, request: Request) -> Response:
        body = await read_body(request, {"token", "value"})
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise BadRequest(
                "BadRequest", 'the body must name the token: {"token": "tk_...", "value": ...}'
            )
        user = request.state.user
        return json_response(
            await run_in_threadpool(self._drive, self.rt.resume, token, body.get("value"), user)
        )

    async def deliver(self, request: Request) -> Response:
        """`{"key": ..., "value": ...}`, or a list of them: one message queued per key, taken by
        the branch that has waited longest on it (`Runtime.deliver_many`). Answers the outcomes
        of the sessions moved on, which key went to which session, and the keys still queued."""
        data = await read_json(request)
        many = isinstance(data, list)
        items = data if many else [data if data is not None else {}]
        deliveries: dict[str, Any] = {}
        for i, item in enumerate(items):
            where = f"item {i} of the request body" if many else "the request body"
            item = body_object(item, {"key", "value"}, where)
            key = item.get("key")
            if not isinstance(key, str) or not key:
                raise BadRequest(
                    "BadRequest",
                    f'{where} must name a key: {{"key": "batch-7/'
                    f'item-42", "value": ...}} (got {key!r})',
                )
            if key in deliveries:
                raise BadRequest("BadRequest", f"key {key!r} is delivered twice in one request")
            deliveries[key] = item.get("value")
        done = await run_in_threadpool(
            partial(deliver_importing, self.rt, deliveries, actor=request.state.user)
        )
        return json_response(
            {
                "outcomes": done.outcomes,
                "applied": done.applied,
                "queued": done.queued,
                "kept": done.queued,
            }
        )

    def _by_session(self, sid: str, action: str, value: Any, user: str | None) -> Outcome:
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
        return self._drive(drive, token, value, user)

    def _drive(
        self, method: Callable[..., Any], token: str, value: Any, user: str | None
    ) -> Outcome:
        """Call resume or skip in this worker thread and wait for the outcome. A Gate decision
        gets the user's name as its `by` (see `decided_by`)."""
        if user is not None and method == self.rt.resume and self._at_gate(token):
            value = decided_by(value, user)
        try:
            result = method(token, value, actor=user)
        except (UnknownFlow, FlowMismatch):
            # A session started by `tarry run` records where its flow lives: import it and try
            # again (nothing was changed: the token is consumed only after every check). Also
            # when another version of its flow is registered: the one it records may be its own.
            if not self._import_flow_of(token):
                raise
            if user is not None and method == self.rt.resume and self._at_gate(token):
                value = decided_by(value, user)
            result = method(token, value, actor=user)
        return settle(result)

    def _at_gate(self, token: str) -> bool:
        """Whether the wait of `token` is a Gate (of a flow registered here)."""
        key = self.rt.tokens.key(token)
        info = self.rt.store.find_token(key) if key is not None else None
        record = self.rt.store.load(info.session_id) if info is not None else None
        if record is None:
            return False
        flow = self.rt.flows.version(record.flow, record.fingerprint)
        if flow is None:
            return False
        waits = {w.token: w.path for w in self.rt.store.waits(record.session_id)}
        path = waits.get(key)
        if path is None:
            pause = self.rt.session(record.session_id).state.pause
            path = pause.path if pause is not None else None
        return path is not None and isinstance(flow.find(path), Gate)

    def _import_flow_of(self, token: str) -> bool:
        key = self.rt.tokens.key(token)
        info = self.rt.store.find_token(key) if key is not None else None
        record = self.rt.store.load(info.session_id) if info is not None else None
        return record is not None and bool(register_recorded_flows(self.rt, [record]))

    # -- streams -----------------------------------------------------------------------------
    async def stream_session(self, request: Request) -> Response:
        given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        if not (given.isascii() and given.isdigit() and int(given[:20]) <= MAX_QUERY_INT):
            raise BadRequest(
                "BadRequest",
                f"Last-Event-ID or ?after= must be an event seq, an int >= 0 (got {given!r})",
            )
        view = await self._view(request)
        wakeup = Wakeup()
        unsubscribe = self.rt.subscribe(wakeup.fire, session_id=view.session_id)
        self.streams.opened(wakeup)

        def close() -> None:
            unsubscribe()
            self.streams.closed(wakeup)

        feed = session_feed(
            view.events, int(given), wakeup, self.streams, poll=self.poll, heartbeat=self.heartbeat
        )
        return EventStreamResponse(feed, on_close=close)

    async def stream_all(self, request: Request) -> Response:
        cursor = request.headers.get("last-event-id") or request.query_params.get("after")
        wakeup = Wakeup(fast=False)
        start = await run_in_threadpool(self.journal.attach, wakeup.fire)
        self.streams.opened(wakeup)

        def close() -> None:
            self.journal.detach(wakeup.fire)
            self.streams.closed(wakeup)

        feed = journal_feed(
            self.journal, cursor, start, wakeup, self.streams, heartbeat=self.heartbeat
        )
        return EventStreamResponse(feed, on_close=close)


def decided_by(value: Any, user: str) -> Any:
    """A Gate decision made by `user`: `by` is the login name. A bool becomes
    `{"approved": bool, "by": user}`; a decision that names another `by` is refused
    (InvalidResumeValue, 422: nothing changes): nobody decides in another's name."""
    if isinstance(value, bool):
        return {"approved": value, "by": user}
    if isinstance(value, dict):
        claimed = value.get("by")
        if claimed is not None and claimed != user:
            msg = (
                f"a Gate decision made through the API is by the logged-in user {user!r} "
                f"(the body claims by={claimed!r}): leave out 'by'"
            )
            raise InvalidResumeValue(msg)
        return {**value, "by": user}
    return value  # refused by the Gate itself, with its own message


def static_text(name: str) -> str:
    return resources.files("tarry.drivers.http").joinpath("static", name).read_text("utf-8")
