"""Resuming a session: `Runtime.resume`, `skip`, and the resumes of timers and adapters.

Every check happens before the token is used, so a rejected resume leaves the session exactly
as it was; the token's use, the lease and the `run.resumed` event are one transaction. A
session this runtime paused is checked against the record it wrote (see statecache.py), so
that the resume's first call to the store is the token's use.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from tarry.drivers.core import Core
from tarry.drivers.drive.drive import Drive
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import AwaitableOrValue
from tarry.drivers.limits import check_actor
from tarry.drivers.reading.views import stored_state
from tarry.drivers.sessions.starting import settle_parent, start
from tarry.drivers.sessions.validation import validate
from tarry.engine.describe import describe
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import (
    ConcurrentUpdate,
    InvalidArgument,
    SessionNotResumable,
    SnapshotError,
    TarryError,
    TokenAlreadyUsed,
    UnknownToken,
)
from tarry.engine.state import events as ev
from tarry.engine.state.lanes import concurrent, pause_at, restore, unpark
from tarry.engine.state.records import ErrorInfo, PauseState, SessionState
from tarry.engine.state.reducer import fold
from tarry.snapshots.records import SessionRecord, decode_lane
from tarry.snapshots.store import MailGone


def key_of(core: Core, token: object) -> str:
    """The store key of a caller's token; UnknownToken for anything that cannot be one
    (including a signed token whose signature does not match)."""
    key = core.tokens.key(token)
    if key is None:
        raise UnknownToken()
    return key


def updated_meta(core: Core, kept: dict[str, Any], meta: Any) -> dict[str, Any]:
    """The session's `meta` with the keys of `meta` (given to a resume) set: e.g. the
    `flow_ref` of the repaired flow it now continues with."""
    if not isinstance(meta, dict):
        msg = f"meta must be a dict (got {describe(meta)})"
        raise InvalidArgument(msg)
    merged = {**kept, **meta}
    core.check(merged, "meta")
    return merged


def not_resumable(core: Core, key: str, session_id: str, status: str, action: str) -> Exception:
    """SessionNotResumable, or TokenAlreadyUsed when the token was used meanwhile: the session
    read after the token's check may be one that its use has already ended."""
    info = core.store.find_token(key)
    if info is not None and info.used:
        return TokenAlreadyUsed(session_id)
    return SessionNotResumable(session_id, status, action)


#: `wait_of`'s `found` when the caller has not read the wait: it is read then.
UNREAD: Any = object()


def wait_of(
    core: Core, key: str, state: SessionState, *, owned: bool = False, found: Any = UNREAD
) -> tuple[SessionState, PauseState | None, bytes | None]:
    """The wait that the token `key` resumes, and the state to resume it in: the session's
    own wait, or, while concurrent containers wait in several lanes, the lane's whose wait
    the store keeps under that token — a lane parked in its wait row is put back into (a copy
    of) the state first (`owned`: into `state` itself, the caller's own; see reducer.own). One
    wait row is read, whatever the number of waiting branches. (A token that is no lane's —
    an abort's, a failure's — resumes the session's own.) Third: the parked lane's bytes, for
    the `run.resumed` event to carry (see records.fold_stored), or None. `found`: the wait of
    `key` (or None) when the caller read it already, with those of other tokens."""
    if state.status != "paused" or not concurrent(state):
        return state, state.pause, None
    wait = core.store.wait(key) if found is UNREAD else found
    if wait is None:
        return state, state.pause, None
    if wait.lane:
        try:
            frame = decode_lane(wait.lane)
            state = restore(state, [frame]) if owned else unpark(state, frame)
        except SnapshotError as exc:
            msg = f"session {state.session_id!r}: its wait {key[:12]} cannot be read: {exc}"
            raise SnapshotError(msg) from exc
    pause = pause_at(state, wait.path)
    if pause is not None:
        return state, pause, wait.lane or None
    return state, state.pause, None


def accepted(core: Core, flow: Flow, pause: PauseState, value: Any) -> Any:
    """The session's own copy of `value` as the element waiting at `pause` takes it;
    InvalidResumeValue (nothing changed) when it refuses it."""
    element = flow.find(pause.path)
    if element is not None and hasattr(element, "accept"):
        value = element.accept(value)
    value, _ = core.take(value, "resume value")
    return value


@functools.lru_cache(maxsize=16)
def _seconds(seconds: float) -> timedelta:
    """`timedelta(seconds=seconds)`, made once per lease length: every resume adds its lease
    to the time (the constructor parses its keyword on every call)."""
    return timedelta(seconds=seconds)


#: How long a resume waits, at most, for a session whose other branch is being resumed by
#: another call (in this process or another) before it gives up with ConcurrentUpdate.
BUSY_SECONDS = 30.0


class _Busy(Exception):
    """The session runs (another of its waits was resumed) or moved on between reading and
    using the token: nothing was written, the token is unused; try again."""


class SessionBusy(Exception):
    """`prepare_now` found the session running: nothing was written, the token is unused."""


class _Stale(Exception):
    """A resume checked against the record this runtime kept (see `_prepare`) did not go
    through: nothing was written; read the session from the store and check it again."""


def prepare(*args: Any, **kwargs: Any) -> AwaitableOrValue[Outcome]:
    """`_prepare` (see there), again while the session is busy: two calls that resume two
    waiting branches of one session at once take turns, each with the session as the other
    left it. ConcurrentUpdate (nothing used) if it stays busy for BUSY_SECONDS. (The first
    attempt is made in place: a resume that finds the session idle, nearly every one, builds
    no retry closure and reads no clock.)"""
    try:
        return _prepare(*args, **kwargs)
    except _Busy:
        pass
    return busy_retry(lambda: _prepare(*args, **kwargs))


def prepare_now(*args: Any, **kwargs: Any) -> AwaitableOrValue[Outcome]:
    """`_prepare` once: SessionBusy (nothing used) when the session is running. A delivery
    never waits for a busy session: it leaves its message queued instead."""
    try:
        return _prepare(*args, **kwargs)
    except _Busy as busy:
        raise SessionBusy(str(busy)) from None


def busy_retry(attempt: Any) -> Any:
    """`attempt()`, again after a short sleep each time it finds the session busy."""
    import time

    give_up = time.monotonic() + BUSY_SECONDS
    delay = 0.001
    while True:
        try:
            return attempt()
        except _Busy as busy:
            if time.monotonic() >= give_up:
                msg = f"{busy}; it stayed busy for {BUSY_SECONDS:g} s (the token is unused)"
                raise ConcurrentUpdate(msg) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _prepare(
    core: Core,
    key: str,
    flow: Flow | None,
    allow_changed: bool,
    **options: Any,
) -> AwaitableOrValue[Outcome]:
    """Check everything, then use the token (`key`: its store key) and record the resume
    in one transaction (see `_resume` for the `options`).

    A session this runtime paused is checked against the record it wrote (core.records), and
    its token used only while the session is still at that version. When it is not (another
    process moved it on, another token of it was used), or when a check refuses the resume
    (the refusal must be the one the stored session gives: a used token's TokenAlreadyUsed
    before a bad value's InvalidResumeValue), it is read from the store and checked again."""
    record = core.records.take(key)
    if record is not None:
        try:
            return _resume(
                core, key, record, flow, allow_changed, version=record.version, **options
            )
        except _Stale:
            pass  # nothing was written: read the session, as any other resume does
    info = core.store.find_token(key)
    if info is None:
        raise UnknownToken()
    if info.used:
        raise TokenAlreadyUsed(info.session_id)
    record = core.store.load(info.session_id)
    if record is None:
        raise UnknownToken()
    return _resume(core, key, record, flow, allow_changed, **options)


def _resume(
    core: Core,
    key: str,
    record: SessionRecord,
    flow: Flow | None,
    allow_changed: bool,
    *,
    version: int | None = None,
    value: Any = None,
    skip: bool = False,
    asynchronous: bool = False,
    trigger: str = "resume",
    failure: ErrorInfo | None = None,
    meta: dict[str, Any] | None = None,
    mail: int | None = None,
    actor: str | None = None,
) -> AwaitableOrValue[Outcome]:
    """Resume the session `record` holds by the token `key`; with `version`, `record` is the
    one this runtime wrote, and the token is used only while the store holds that version
    (else, or when a check refuses, _Stale: nothing was written).

    `trigger` says who resumes (resume, skip, timer, timeout, adapter, deliver, mail) in the
    outcome's meta. `mail`: the id of the queued message the value came from (a delivery),
    consumed in the same transaction as the token (MailGone, nothing written, when another
    delivery or a Wait took it first). With `failure`, a timeout that fails the run: the
    session is failed with it at the paused element instead of being run. `meta`: keys to set
    in the session's meta. `actor`: who resumes, recorded in the `run.resumed` event.

    The session continues with the flow whose fingerprint started it (`flow`, or the one
    registered), or with a changed flow of its name when `allow_changed`: the session then
    records that flow's fingerprint and version, in the `run.resumed` event at once (so a
    recovery after a crash goes on with it) and in its row when the run next writes."""
    check_actor(actor)
    try:
        checked = _check(
            core, key, record, flow, allow_changed, value, skip, trigger, failure, meta, actor
        )
    except (TarryError, _Busy):
        if version is not None:
            raise _Stale() from None  # refused as this runtime saw it: ask the store
        raise
    flow, state, events, session_meta, outcome_meta, now = checked
    until = now + _seconds(core.lease)
    # One transaction: the token is used, the lease taken and the resume (with its value)
    # recorded, so a crash from here on leaves a session that recover() can continue.
    try:
        used = core.store.consume_token(
            key, owner=core.owner, until=until, events=events, version=version, mail=mail
        )
    except MailGone:
        raise  # the message is another's: nothing was written, and trying again cannot help
    except ConcurrentUpdate as exc:  # it moved on since we read it: nothing was written
        if version is not None:
            raise _Stale() from None
        raise _Busy(str(exc)) from None
    if not used:
        if version is not None:
            raise _Stale()  # used or gone: the store says which
        raise TokenAlreadyUsed(record.session_id)
    core.states.drop(record.state)
    record.meta = session_meta  # written with the session's next write
    core.flows.register(flow)  # its timers and recovery find it by fingerprint from now on
    if failure is not None:
        core.hub.announce(events)
        drive = Drive(core, flow, record, state, meta=outcome_meta)
        failed = drive.fail_now(failure)
        if drive.posted is not None:  # a child failed: its parent takes its end now
            settle_parent(core.wake_parent(core, drive.posted))
        return failed
    return start(
        core,
        flow,
        record,
        state,
        events,
        asynchronous=asynchronous,
        meta=outcome_meta,
        resume=prepare,
    )


def _check(
    core: Core,
    key: str,
    record: SessionRecord,
    flow: Flow | None,
    allow_changed: bool,
    value: Any,
    skip: bool,
    trigger: str,
    failure: ErrorInfo | None,
    meta: dict[str, Any] | None,
    actor: str | None,
) -> tuple[Flow, SessionState, list[Any], dict[str, Any], dict[str, Any], datetime]:
    """Everything a resume checks before it uses the token: (the flow it continues with, the
    state after the resume's events, those events, the session's meta, the outcome's meta,
    the time of the events)."""
    kept = core.states.get(record.state)
    state = kept if kept is not None else stored_state(core, record)
    flow = core.flows.flow_for(record, flow, allow_changed)
    if record.status == "running" and not skip and failure is None:
        # Its token is live, so another of its waits is being resumed: take turns.
        raise _Busy(f"session {record.session_id!r} is running")
    if state.ending is not None and state.status == "failed":
        # Its body ended and its cleanup ran: the body does not run again (nothing to retry).
        raise not_resumable(core, key, record.session_id, "failed", "skip" if skip else "resume")
    state, pause, lane = wait_of(core, key, state)
    if kept is None or flow.fingerprint != record.fingerprint or state is not kept:
        # (A state this runtime kept is one its own run of that very flow wrote: it fits.
        # A lane read from its wait row is checked with the state it joins.)
        validate(record.session_id, record.fingerprint, state, flow)
    resumed: dict[str, Any] = {} if actor is None else {"actor": actor}
    if lane is not None:
        resumed["lane"] = lane  # a recovery from the stored snapshot puts it back
    if flow.fingerprint != record.fingerprint:
        resumed["flow"] = {"fingerprint": flow.fingerprint, "version": flow.version}
    session_meta = record.meta if meta is None else updated_meta(core, record.meta, meta)
    outcome_meta: dict[str, Any] = {"trigger": "skip" if skip else trigger}
    if pause is not None:
        outcome_meta["pause_kind"] = outcome_meta["resumed_kind"] = pause.kind
    if skip:
        if state.status != "failed" or state.error is None:
            raise not_resumable(core, key, record.session_id, state.status, "skip")
        value, _ = core.take(value, "skip output")  # the session's own copy from here on
    elif failure is not None:
        if state.status != "paused":
            raise not_resumable(core, key, record.session_id, state.status, "time out")
    else:
        if state.status not in ("paused", "failed"):
            raise not_resumable(core, key, record.session_id, state.status, "resume")
        if state.status == "paused" and pause is not None and pause.awaits_value:
            value = accepted(core, flow, pause, value)
    if failure is not None:
        specs = [(ev.RUN_RESUMED, failure.path, {"timeout": True, **resumed})]
    elif skip:
        path = state.error.path
        specs = [
            (ev.RUN_RESUMED, path, {"skip": True, **resumed}),
            (ev.NODE_COMPLETED, path, {"output": value, "skipped": True}),
        ]
    elif state.status == "paused" and pause is not None and pause.awaits_value:
        specs = [(ev.RUN_RESUMED, pause.path, {"value": value, **resumed})]
    else:
        path = pause.path if pause else state.error.path if state.error else ()
        specs = [(ev.RUN_RESUMED, path, resumed)]
    now = core.clock.now()
    state, events = fold(state, now, specs)
    return flow, state, events, session_meta, outcome_meta, now
