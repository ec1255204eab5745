"""Runtime: runs, resumes, aborts and inspects sessions over one store."""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tarry.engine import events as ev
from tarry.engine.describe import describe
from tarry.engine.errors import (
    AsyncInSyncContext,
    FlowMismatch,
    InvalidArgument,
    InvalidFlow,
    InvalidResumeValue,
    NotSerializable,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownFlow,
    UnknownSession,
    UnknownToken,
)
from tarry.engine.events import Event
from tarry.engine.flow import Flow
from tarry.engine.reducer import apply
from tarry.engine.retry import Retry
from tarry.engine.state import STATUSES, ErrorInfo, SessionState
from tarry.engine.waits import PAUSE_KINDS
from tarry.snapshots._codec import MAX_BLOB_BYTES
from tarry.snapshots.records import SessionRecord, encode_state
from tarry.snapshots.store import SessionStore

from .adapters import NOT_READY, ResumeRequest
from .clock import Clock, SystemClock
from .drive import Drive, fold, value_check
from .outcome import Outcome, outcome_of
from .pump import AwaitableOrValue
from .statecache import StateCache
from .stats import Stats, compute_stats
from .stores import open_store
from .tokens import Tokens, looks_like_token
from .views import SessionSummary, SessionView, state_of

if TYPE_CHECKING:
    import logging


def _log() -> logging.Logger:
    """The "tarry" logger; the logging module is loaded when something is first logged."""
    import logging

    return logging.getLogger("tarry")


DURABILITY = ("pause", "step")
#: Default bounds (bytes, encoded). Generous for real work, such as a ForEach whose 10,000
#: results of a few KiB each become one output, yet far below what a reader accepts.
MAX_VALUE_BYTES = 32 * 1024 * 1024
MAX_SNAPSHOT_BYTES = 128 * 1024 * 1024
#: Longest caller-chosen session id.
MAX_SESSION_ID = 256


def _is_awaitable(value: Any) -> bool:
    return hasattr(value, "__await__")


class Runtime:
    """Runs flows over one store. Safe to share between threads.

    `run`/`resume` return an `Outcome` for an all-sync flow and an awaitable as soon as an async
    step is met; `run_sync`/`resume_sync` always return an Outcome; `arun`/`aresume` always
    return an awaitable.

    Keywords: `store` (a SessionStore or a URL; in memory by default), `flows` (registered for
    resume and recovery), `clock`, `adapters` ({pause kind: callable}), `durability`
    ("pause" or "step"), `secret` (str or bytes of 16+ bytes, or a list for rotation: signs
    tokens so that a store's contents cannot resume its sessions), `lease` (seconds),
    `retry` (the default Retry), `max_value_bytes` (largest value one event carries) and
    `max_snapshot_bytes` (largest snapshot of a waiting session). See docs/guarantees.md.
    """

    def __init__(
        self,
        store: None | str | SessionStore = None,
        *,
        flows: Iterable[Flow] = (),
        clock: Clock | None = None,
        adapters: dict[str, Callable[..., Any]] | None = None,
        durability: str = "pause",
        secret: str | bytes | None = None,
        lease: float = 30.0,
        retry: Retry | None = None,
        max_value_bytes: int = MAX_VALUE_BYTES,
        max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
    ) -> None:
        if durability not in DURABILITY:
            msg = f"durability must be 'pause' or 'step' (got {durability!r})"
            raise InvalidArgument(msg)
        if not (isinstance(lease, int | float) and lease > 0):
            msg = f"lease must be a positive number of seconds (got {lease!r})"
            raise InvalidArgument(msg)
        #: Seconds a running session's lease lasts; renewed at checkpoints. `recover()` in
        #: another process takes over sessions whose lease ran out.
        self.lease = float(lease)
        #: This runtime's name on the leases it holds.
        self.owner = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.store: SessionStore = open_store(store)
        self.clock: Clock = clock or SystemClock()
        self.durability = durability
        if retry is not None and not isinstance(retry, Retry):
            msg = f"retry= must be a tarry.Retry (got {retry!r})"
            raise InvalidArgument(msg)
        #: The retry policy of steps that have none of their own.
        self.retry = retry
        self.adapters = dict(adapters or {})
        for kind, adapter in self.adapters.items():
            if kind not in PAUSE_KINDS or not callable(adapter):
                msg = f"adapters maps a pause kind {PAUSE_KINDS} to a callable (got {kind!r}: {adapter!r})"
                raise InvalidArgument(msg)
        #: Bounds on what a session may hold: one value an event carries (an input, a step's
        #: output, a ctx.state value, a resume value, a pause payload) and a whole snapshot.
        self.max_value_bytes = _positive_int(max_value_bytes, "max_value_bytes")
        self.max_snapshot_bytes = _positive_int(max_snapshot_bytes, "max_snapshot_bytes")
        if self.max_snapshot_bytes > MAX_BLOB_BYTES:
            msg = (
                f"max_snapshot_bytes must be at most {MAX_BLOB_BYTES}, the largest snapshot "
                f"tarry reads back (got {max_snapshot_bytes})"
            )
            raise InvalidArgument(msg)
        #: The check of every value a session takes in: encodable and within max_value_bytes.
        self._check = value_check(self.max_value_bytes)
        #: Mints tokens and checks them (signed with `secret` when one is given).
        self.tokens = Tokens(secret)
        self._flows: dict[str, Flow] = {}
        for flow in flows:
            self.register(flow)
        self._lock = threading.Lock()
        # session id -> resumable; read at every checkpoint, so kept as a plain dict (a dict
        # lookup is atomic under the GIL; writes take the lock).
        self._aborts: dict[str, bool] = {}
        self._running: set[str] = set()
        #: The states of the snapshots this runtime last wrote, for resuming them undecoded.
        self._states = StateCache()
        self._subscribers: list[tuple[Callable[[Event], Any], str | None]] = []

    # -- flows ---------------------------------------------------------------------------------
    def register(self, flow: Flow) -> Flow:
        """Make `flow` available to `resume` by name."""
        if not isinstance(flow, Flow):
            msg = f"expected a tarry.Flow (got {flow!r})"
            raise InvalidFlow(msg)
        self._flows[flow.name] = flow
        return flow

    # -- running -------------------------------------------------------------------------------
    def run(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> AwaitableOrValue[Outcome]:
        """Start a session of `flow`. Sync for sync flows; awaitable once an async step is met.

        `meta`: a small dict kept with the session record (not in its state or events), e.g.
        where the flow is defined (`{"flow_ref": "module:name"}`, as the CLI records it).
        """
        return self._begin(flow, input, session_id, meta, asynchronous=False)

    def _begin(
        self,
        flow: Flow,
        input: Any,
        session_id: str | None,
        meta: dict[str, Any] | None,
        *,
        asynchronous: bool,
    ) -> AwaitableOrValue[Outcome]:
        self.register(flow)
        self._check(input, "input")
        if meta is not None:
            if not isinstance(meta, dict):
                msg = f"meta must be a dict (got {describe(meta)})"
                raise InvalidArgument(msg)
            self._check(meta, "meta")
        if session_id is not None and not _valid_session_id(session_id):
            msg = (
                f"session_id must be a non-empty str of at most {MAX_SESSION_ID} characters, "
                f"valid UTF-8 (got {describe(session_id)})"
            )
            raise InvalidArgument(msg)
        sid = session_id or uuid.uuid4().hex
        now = self.clock.now()
        record = SessionRecord(
            session_id=sid,
            flow=flow.name,
            status="running",
            state=b"",
            fingerprint=flow.fingerprint,
            flow_version=flow.version,
            lease_owner=self.owner,
            lease_until=now + timedelta(seconds=self.lease),
            created_at=now,
            updated_at=now,
            meta=dict(meta or {}),
        )
        initial = SessionState(session_id=sid, flow=flow.name)
        state, events = fold(initial, now, [(ev.RUN_STARTED, (), {"input": input, "flow": flow.name})])
        self.store.create(record, events=events)  # SessionExists: nothing changed
        return self._start(flow, record, state, events, asynchronous=asynchronous)

    def _start(
        self,
        flow: Flow,
        record: SessionRecord,
        state: SessionState,
        written: list[Event],
        *,
        asynchronous: bool = False,
        meta: dict[str, Any] | None = None,
    ) -> AwaitableOrValue[Outcome]:
        """Drive a session whose opening `written` events are already in the store."""
        self._announce(written)
        return Drive(self, flow, record, state, asynchronous=asynchronous, meta=meta).start()

    def run_sync(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Outcome:
        """Like `run`, but async steps are driven on a private event loop. Never awaitable."""
        _refuse_in_loop("run_sync", "arun")
        return _settle(self.run(flow, input, session_id=session_id, meta=meta))

    async def arun(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Outcome:
        """Like `run`, always as an awaitable; back-offs wait with `asyncio.sleep`."""
        result = self._begin(flow, input, session_id, meta, asynchronous=True)
        if _is_awaitable(result):
            result = await result
        return result

    # -- resuming ------------------------------------------------------------------------------
    def resume(
        self,
        token: str,
        value: Any = None,
        *,
        flow: Flow | None = None,
        allow_changed: bool = False,
    ) -> AwaitableOrValue[Outcome]:
        """Continue a paused (or failed) session where it stopped. Every check happens before
        the token is consumed: a rejected resume leaves the session exactly as it was."""
        return self._prepare(self._key_of(token), flow, allow_changed, value=value)

    def resume_sync(
        self, token: str, value: Any = None, *, flow: Flow | None = None, allow_changed: bool = False
    ) -> Outcome:
        _refuse_in_loop("resume_sync", "aresume")
        return _settle(self.resume(token, value, flow=flow, allow_changed=allow_changed))

    async def aresume(
        self, token: str, value: Any = None, *, flow: Flow | None = None, allow_changed: bool = False
    ) -> Outcome:
        key = self._key_of(token)
        result = self._prepare(key, flow, allow_changed, value=value, asynchronous=True)
        if _is_awaitable(result):
            result = await result
        return result

    def skip(
        self, token: str, output: Any = None, *, flow: Flow | None = None
    ) -> AwaitableOrValue[Outcome]:
        """On a failed session: record the failed element as completed with `output`, go on."""
        key = self._key_of(token)
        return self._prepare(key, flow, allow_changed=flow is not None, skip=True, value=output)

    def _key_of(self, token: object) -> str:
        """The store key of a caller's token; UnknownToken for anything that cannot be one
        (including a signed token whose signature does not match)."""
        key = self.tokens.key(token)
        if key is None:
            raise UnknownToken()
        return key

    def _prepare(
        self,
        key: str,
        flow: Flow | None,
        allow_changed: bool,
        *,
        value: Any = None,
        skip: bool = False,
        asynchronous: bool = False,
        trigger: str = "resume",
        failure: ErrorInfo | None = None,
    ) -> AwaitableOrValue[Outcome]:
        """Check everything, then use the token (`key`: its store key) and record the resume
        in one transaction.

        `trigger` says who resumes (resume, skip, timer, timeout, adapter) in the outcome's
        meta. With `failure`, a timeout that fails the run: the session is failed with it at
        the paused element instead of being run."""
        info = self.store.find_token(key)
        if info is None:
            raise UnknownToken()
        if info.used:
            raise TokenAlreadyUsed(info.session_id)
        record = self.store.load(info.session_id)
        if record is None:
            raise UnknownToken()
        state = self._state_of(record)
        flow = self._flow_for(record, flow, allow_changed, state)
        meta: dict[str, Any] = {"trigger": "skip" if skip else trigger}
        if state.pause is not None:
            meta["pause_kind"] = meta["resumed_kind"] = state.pause.kind
        if skip:
            if state.status != "failed" or state.error is None:
                raise SessionNotResumable(record.session_id, state.status, "skip")
            self._check(value, "skip output")
        elif failure is not None:
            if state.status != "paused":
                raise SessionNotResumable(record.session_id, state.status, "time out")
        else:
            if state.status not in ("paused", "failed"):
                raise SessionNotResumable(record.session_id, state.status, "resume")
            pause = state.pause
            if state.status == "paused" and pause is not None and pause.awaits_value:
                element = flow.find(pause.path)
                if element is not None and hasattr(element, "accept"):
                    value = element.accept(value)  # InvalidResumeValue: nothing changed
                self._check(value, "resume value")
        if failure is not None:
            specs = [(ev.RUN_RESUMED, failure.path, {"timeout": True})]
        elif skip:
            path = state.error.path
            specs = [
                (ev.RUN_RESUMED, path, {"skip": True}),
                (ev.NODE_COMPLETED, path, {"output": value, "skipped": True}),
            ]
        elif state.status == "paused" and state.pause is not None and state.pause.awaits_value:
            specs = [(ev.RUN_RESUMED, state.pause.path, {"value": value})]
        else:
            path = state.pause.path if state.pause else state.error.path if state.error else ()
            specs = [(ev.RUN_RESUMED, path, {})]
        now = self.clock.now()
        state, events = fold(state, now, specs)
        until = now + timedelta(seconds=self.lease)
        # One transaction: the token is used, the lease taken and the resume (with its value)
        # recorded, so a crash from here on leaves a session that recover() can continue.
        if not self.store.consume_token(key, owner=self.owner, until=until, events=events):
            raise TokenAlreadyUsed(record.session_id)
        self._states.drop(record.state)
        if failure is not None:
            self._announce(events)
            return Drive(self, flow, record, state, meta=meta).fail_now(failure)
        return self._start(flow, record, state, events, asynchronous=asynchronous, meta=meta)

    def _state_of(self, record: SessionRecord) -> SessionState:
        """The state `record` holds: the one this runtime kept when it wrote that very snapshot,
        else decoded (see statecache.py). Nobody may change it."""
        return self._states.get(record.state) or state_of(record)

    def _flow_for(
        self, record: SessionRecord, flow: Flow | None, allow_changed: bool, state: SessionState
    ) -> Flow:
        if flow is None:
            flow = self._flows.get(record.flow)
            if flow is None:
                raise UnknownFlow(record.flow)
        elif not isinstance(flow, Flow):
            msg = f"flow= must be a tarry.Flow (got {flow!r})"
            raise InvalidFlow(msg)
        if flow.fingerprint == record.fingerprint:
            return flow
        if not allow_changed:
            msg = (
                f"session {record.session_id!r} was started by flow {record.flow!r} with "
                f"fingerprint {record.fingerprint}, but the flow given has {flow.fingerprint}; "
                f"pass allow_changed=True to resume with a repaired flow"
            )
            raise FlowMismatch(msg)
        _check_position(flow, state)
        return flow

    # -- timers and adapters -------------------------------------------------------------------
    def resume_due(self, *, limit: int = 100) -> list[Outcome]:
        """Resume every session whose time has come (by `clock`): a `Sleep` or a retry back-off
        whose `wake_at` passed, and a Gate or Wait whose timeout passed (which then does what
        its `on_timeout` says). Returns the outcomes of the sessions it resumed.

        Each session is resumed by using its token, so of two callers (threads, processes,
        machines) only one resumes it; the other skips it. A decision that used the token
        first wins, and then the timer does nothing. Sessions of flows this Runtime does not
        know are left for a Runtime that does. Async steps run on a private event loop.
        """
        _check_limit(limit)
        now = self.clock.now()
        outcomes = []
        for record in self.store.due(now, limit):
            outcome = self._fire(record, now)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _fire(self, record: SessionRecord, now: Any) -> Outcome | None:
        token = record.token
        flow = self._flows.get(record.flow)
        if token is None:
            return None
        if flow is None:
            _log().warning(
                "resume_due: no flow %r registered for session %s", record.flow, record.session_id
            )
            return None
        state = self._state_of(record)
        pause = state.pause
        if state.status != "paused" or pause is None:
            return None
        try:
            if pause.wake_at is not None and pause.wake_at <= now:
                return _settle(self._prepare(token, None, False, trigger="timer"))
            if pause.expires_at is None or pause.expires_at > now:
                return None
            element = flow.find(pause.path) if record.fingerprint == flow.fingerprint else None
            expire = getattr(element, "expire", None)
            if expire is None:
                _log().warning(
                    "resume_due: session %s waits at %s, which has no timeout in flow %r as "
                    "registered", record.session_id, pause.path, record.flow,
                )
                return None
            expiry = expire()
            if expiry.error is None:
                return _settle(
                    self._prepare(token, None, False, value=expiry.value, trigger="timeout")
                )
            error = ErrorInfo(type=expiry.error, message=expiry.message, path=pause.path,
                              retryable=True, attempts=1)
            return _settle(self._prepare(token, None, False, trigger="timeout", failure=error))
        except (TokenAlreadyUsed, UnknownToken, SessionNotResumable):
            return None  # resumed, cancelled or fired by someone else first

    def poll(self, *, limit: int = 100) -> list[Outcome]:
        """`resume_due()`, then ask the adapters: for each paused session whose pause kind has
        an adapter, call `adapter(ResumeRequest(...))`; a value resumes the session with it,
        `NOT_READY` leaves it paused. Returns the outcomes of every session resumed.

        A session is claimed through the store before its adapter is asked, so two pollers
        never ask about (or resume) the same session at once. An adapter that raises, or
        returns a value the paused element refuses, is logged and the session stays paused.
        """
        outcomes = self.resume_due(limit=limit)
        if not self.adapters:
            return outcomes
        for record in self._paused():
            outcome = self._ask(record)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _paused(self) -> list[SessionRecord]:
        """Every paused session with a live token (read first, so resuming does not page)."""
        rows: list[SessionRecord] = []
        page = 500
        while True:
            batch = self.store.list(status="paused", limit=page, offset=len(rows))
            rows.extend(batch)
            if len(batch) < page:
                return [r for r in rows if r.token is not None]

    def _ask(self, record: SessionRecord) -> Outcome | None:
        state = self._state_of(record)
        pause = state.pause
        if pause is None or state.status != "paused" or record.flow not in self._flows:
            return None
        adapter = self.adapters.get(pause.kind)
        if adapter is None or record.token is None:
            return None
        sid = record.session_id
        now = self.clock.now()
        if not self.store.claim(sid, self.owner, now + timedelta(seconds=self.lease), now):
            return None  # another poller is asking about it
        try:
            request = ResumeRequest(
                self.tokens.token(record.token), sid, pause.kind, pause.reason, pause.payload,
                pause.path,
            )
            try:
                value = adapter(request)
                if _is_awaitable(value):
                    value = _settle(value)
            except Exception:
                _log().exception("adapter %r failed for session %s", adapter, sid)
                return None
            if value is NOT_READY:
                return None
            try:
                return _settle(
                    self._prepare(record.token, None, False, value=value, trigger="adapter")
                )
            except (InvalidResumeValue, NotSerializable) as exc:
                _log().error("adapter %r gave session %s a value it refused: %s", adapter, sid, exc)
                return None
            except (TokenAlreadyUsed, UnknownToken, SessionNotResumable):
                return None
        finally:
            self.store.release(sid, self.owner)

    # -- recovery ------------------------------------------------------------------------------
    def recover(self) -> list[Outcome]:
        """Continue the sessions whose worker died mid-run (their lease expired), from their
        last written point: with durability="step", the last completed step (the step in
        flight runs again, with the same `ctx.idempotency_key`); with "pause", the last pause.

        Each recovered session is claimed through the store first, so two processes calling
        `recover()` never continue the same session. Sessions of flows this Runtime does not
        know are left for a Runtime that does. Async steps are driven on a private loop.
        """
        outcomes: list[Outcome] = []
        now = self.clock.now()
        until = now + timedelta(seconds=self.lease)
        for stale in self.store.expired(now):
            sid = stale.session_id
            flow = self._flows.get(stale.flow)
            if flow is None:
                _log().warning("recover: no flow %r registered for session %s", stale.flow, sid)
                continue
            if not self.store.claim(sid, self.owner, until, now):
                continue  # another worker got there first
            record = self.store.load(sid)
            if record is None:
                continue
            state = state_of(record)
            for event in self.store.events(sid, state.last_seq):
                state = apply(state, event)
            if state.status != "running":
                self.store.release(sid, self.owner)
                continue
            state, events = fold(state, now, [(ev.RUN_RESUMED, (), {"recovered": True})])
            self.store.append_events(sid, events)
            meta = {"trigger": "recover"}
            outcomes.append(_settle(self._start(flow, record, state, events, meta=meta)))
        return outcomes

    # -- control -------------------------------------------------------------------------------
    def abort(self, session_id: str, *, resumable: bool = True) -> None:
        """Stop a running session at its next checkpoint (before the next iteration or child).

        Thread-safe. It then pauses with kind "system", reason "aborted" — or is cancelled
        when `resumable=False`. A paused or failed session is cancelled by
        `abort(..., resumable=False)`; with `resumable=True` it is already stopped: no-op.
        """
        with self._lock:
            if session_id in self._running:
                self._aborts[session_id] = resumable
                return
        if not resumable and _valid_session_id(session_id):
            record = self.store.load(session_id)
            if record is not None and record.status in ("paused", "failed"):
                self.cancel(session_id)

    def _ended(self, session_id: str) -> None:
        """A drive of `session_id` in this process is over. It leaves `_running` and drops any
        abort asked of it in one step under the lock that `abort` takes: an abort landing
        between the two would otherwise be kept and stop the session's next run."""
        with self._lock:
            self._running.discard(session_id)
            self._aborts.pop(session_id, None)

    def cancel(self, token_or_session_id: str) -> Outcome:
        """End a paused or failed session as cancelled."""
        given = token_or_session_id
        key = None  # the store key of the token given, if one was
        if looks_like_token(given):
            key = self._key_of(given)
            info = self.store.find_token(key)
            if info is None:
                raise UnknownToken()
            if info.used:
                raise TokenAlreadyUsed(info.session_id)
            sid = info.session_id
        elif _valid_session_id(given):
            sid = given
        elif isinstance(given, str):
            raise UnknownSession(given)
        else:
            msg = f"cancel() takes a token or a session id (got {describe(given)})"
            raise InvalidArgument(msg)
        record = self.store.load(sid)
        if record is None:
            raise UnknownSession(sid)
        if key is not None and record.token != key:
            # Used by a resume since it was looked up: that resume won, the token is spent.
            raise TokenAlreadyUsed(sid)
        if record.status not in ("paused", "failed"):
            raise SessionNotResumable(sid, record.status, "cancel")
        if record.token is not None and not self.store.consume_token(record.token):
            if key is not None:
                raise TokenAlreadyUsed(sid)
            raise SessionNotResumable(sid, "running", "cancel")
        state = self._state_of(record)
        self._states.drop(record.state)
        event = Event(state.last_seq + 1, ev.RUN_CANCELLED, sid, self.clock.now(), (), {})
        state = apply(state, event)
        self._notify(event)
        record.state = encode_state(
            state, fingerprint=record.fingerprint, flow_version=record.flow_version
        )
        record.status = state.status
        record.token = None
        record.wake_at = None
        record.updated_at = self.clock.now()
        self.store.save(record, record.version, events=[event])
        return outcome_of(state, None)

    # -- inspecting ----------------------------------------------------------------------------
    def session(self, session_id: str) -> SessionView:
        if not _valid_session_id(session_id):
            raise UnknownSession(session_id)  # no such id can have been stored
        record = self.store.load(session_id)
        if record is None:
            raise UnknownSession(session_id)
        return SessionView(self.store, record, self.tokens)

    def sessions(
        self,
        *,
        status: str | None = None,
        flow: str | Flow | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[SessionSummary]:
        """Sessions newest first, optionally filtered by status and flow (name or Flow)."""
        name = flow.name if isinstance(flow, Flow) else flow
        _check_filters(status, name)
        _check_limit(limit)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            msg = f"offset must be an int >= 0 (got {describe(offset)})"
            raise InvalidArgument(msg)
        rows = self.store.list(status=status, flow=name, limit=limit, offset=offset)
        return [SessionSummary.of(r) for r in rows]

    def stats(self, *, flow: str | Flow | None = None) -> Stats:
        """Counts of sessions by status; per node (by name) executions, failures and mean
        duration; and the sums of every `ctx.metric` — over all sessions, or one flow's.

        Reads every session's events: a report, not something for a hot path.
        """
        name = flow.name if isinstance(flow, Flow) else flow
        _check_filters(None, name)
        return compute_stats(self.store, flow=name)

    def subscribe(
        self, callback: Callable[[Event], Any], *, session_id: str | None = None
    ) -> Callable[[], None]:
        """Call `callback(event)` for each new event (of one session, or all). Returns the
        function that unsubscribes. Runs already in progress keep the subscribers they
        started with; a callback that raises is logged and does not disturb the run."""
        entry = (callback, session_id)
        with self._lock:
            self._subscribers = self._subscribers + [entry]

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = [s for s in self._subscribers if s is not entry]

        return unsubscribe

    def _announce(self, written: list[Event]) -> None:
        """Tell the subscribers of events written outside a drive (start, resume)."""
        if self._subscribers:
            for event in written:
                self._notify(event)

    def _notify(self, event: Event) -> None:
        for callback, sid in self._subscribers:
            if sid is None or sid == event.session_id:
                try:
                    callback(event)
                except Exception:
                    _log().exception("tarry subscriber %r failed on event %s", callback, event.seq)


def _check_position(flow: Flow, state: SessionState) -> None:
    """A repaired flow must still contain every container entered and the paused element."""
    for frame in state.container_stack:
        element = flow.find(frame.path)
        if element is None or element.kind != frame.kind:
            msg = f"the repaired flow has no {frame.kind} at {'/'.join(map(str, frame.path))}"
            raise FlowMismatch(msg)
    for name in state.outputs:
        if flow.find((name,)) is None:
            msg = f"the repaired flow has no top-level element {name!r}, which already completed"
            raise FlowMismatch(msg)
    # The element where the run waits for a value, or where it failed, must still be there.
    if state.pause is not None and state.pause.awaits_value:
        at, where = state.pause.path, "waits"
    elif state.error is not None:
        at, where = state.error.path, "failed"
    else:
        return
    if at and flow.find(at) is None:
        msg = f"the repaired flow has no element at {'/'.join(map(str, at))}, where the run {where}"
        raise FlowMismatch(msg)


def _check_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        msg = f"limit must be an int >= 1 (got {describe(limit)})"
        raise InvalidArgument(msg)


def _check_filters(status: Any, flow: Any) -> None:
    if status is not None and status not in STATUSES:
        msg = f"status must be one of {STATUSES} (got {describe(status)})"
        raise InvalidArgument(msg)
    if flow is not None and not isinstance(flow, str):
        msg = f"flow must be a flow name or a tarry.Flow (got {describe(flow)})"
        raise InvalidArgument(msg)


def _refuse_in_loop(name: str, instead: str) -> None:
    if "asyncio" not in sys.modules:
        return  # no event loop can be running in a process that never imported asyncio
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    msg = f"{name}() was called inside a running event loop; use `await runtime.{instead}(...)`"
    raise AsyncInSyncContext(msg)


def _settle(result: AwaitableOrValue[Outcome]) -> Outcome:
    if not _is_awaitable(result):
        return result  # type: ignore[return-value]
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(result)  # type: ignore[arg-type]
    finally:
        loop.close()


def _positive_int(value: Any, name: str) -> int:
    if type(value) is not int or value <= 0:
        msg = f"{name} must be a positive int of bytes (got {value!r})"
        raise InvalidArgument(msg)
    return value


def _valid_session_id(value: Any) -> bool:
    """A str a store can hold as a session id: non-empty, not too long, valid UTF-8."""
    if type(value) is not str or not value or len(value) > MAX_SESSION_ID:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True
