"""Control: `Runtime.abort` and `Runtime.cancel`."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from tarry.drivers.core import Core
from tarry.drivers.drive.drive import CLEANUP_CANCELLED
from tarry.drivers.drive.outcome import Outcome, outcome_of
from tarry.drivers.drive.pump import AwaitableOrValue, settle
from tarry.drivers.limits import check_actor, valid_session_id
from tarry.drivers.sessions.children import children_of, end_post
from tarry.drivers.sessions.resuming import key_of, prepare, stored_state
from tarry.drivers.sessions.starting import settle_parent, start
from tarry.drivers.tokens import looks_like_token
from tarry.engine.describe import describe
from tarry.engine.elements.child import end_key
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import (
    ConcurrentUpdate,
    InvalidArgument,
    SessionNotResumable,
    SnapshotError,
    TokenAlreadyUsed,
    UnknownSession,
    UnknownToken,
)
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.engine.state.lanes import parked, restore
from tarry.engine.state.records import DEADLINE_EXCEEDED, SessionState
from tarry.engine.state.reducer import apply, error_to_data, fold, own
from tarry.snapshots.records import SessionRecord, decode_lane, encode_state
from tarry.snapshots.store import ENDED

#: How many times a cancel looks again at a session that a resume moved on meanwhile.
CANCEL_TRIES = 5


def abort(core: Core, session_id: str, resumable: bool, actor: str | None = None) -> None:
    """Stop a running session at its next checkpoint: at once when this process drives it
    (its stop event then names `actor`), else through a request stored for the process that
    does (read within a TICK)."""
    check_actor(actor)
    if not core.running.request_abort(session_id, resumable, actor):
        if not valid_session_id(session_id):
            raise UnknownSession(session_id)  # no such id can have been stored
        status = core.store.request_stop(session_id, "abort" if resumable else "cancel")
        if status is None:
            raise UnknownSession(session_id)
        if not resumable and status in ("paused", "failed"):
            cancel(core, session_id, actor)
            return  # (its children were cancelled with it)
        # Running: the request is stored. Paused or failed with resumable=True: stopped already.
    for child in _live_children(core, session_id):  # aborting a parent aborts its children
        with contextlib.suppress(UnknownSession):
            abort(core, child, resumable, actor)


def cancel(core: Core, token_or_session_id: str, actor: str | None = None) -> Outcome:
    """Cancel a session (by its id or a token of it), and the children it started that have
    not ended (each with their own)."""
    outcome = _cancel(core, token_or_session_id, actor)
    cancel_children(core, outcome.session_id, actor)
    return outcome


def cancel_children(core: Core, session_id: str, actor: str | None = None) -> None:
    """Cancel the children a session started that have not ended: it is being cancelled, or
    its deadline passed (`Core.cancel_children`, which drives call after their last write)."""
    for child in _live_children(core, session_id):
        with contextlib.suppress(UnknownSession, SessionNotResumable, ConcurrentUpdate):
            cancel(core, child, actor)
            # Its end is for a parent that has ended its wait on it: nothing will take it.
            core.store.discard(end_key(child))


def _live_children(core: Core, session_id: str) -> list[str]:
    """The children a session started that have not ended (read from its events: a cancel or
    an abort is no per-step path)."""
    ids = children_of(core, session_id)
    if not ids:
        return []
    records = core.store.load_many(ids)
    return [cid for cid in ids if cid in records and records[cid].status not in ENDED]


def _cancel(core: Core, token_or_session_id: str, actor: str | None) -> Outcome:
    check_actor(actor)
    given = token_or_session_id
    key = None  # the store key of the token given, if one was
    if looks_like_token(given):
        key = key_of(core, given)
        info = core.store.find_token(key)
        if info is None:
            raise UnknownToken()
        if info.used:
            raise TokenAlreadyUsed(info.session_id)
        sid = info.session_id
    elif valid_session_id(given):
        sid = given
    elif isinstance(given, str):
        raise UnknownSession(given)
    else:
        msg = f"cancel() takes a token or a session id (got {describe(given)})"
        raise InvalidArgument(msg)
    record = core.store.load(sid)
    if record is None:
        raise UnknownSession(sid)
    if record.status == "running" and key is None:
        requested = _request_cancel(core, sid, actor)
        if requested is not None:
            return requested
        record = core.store.load(sid)  # it stopped meanwhile: cancel what it left
        if record is None:
            raise UnknownSession(sid)
    for _ in range(CANCEL_TRIES):
        if record.status not in ("paused", "failed"):
            raise SessionNotResumable(sid, record.status, "cancel")
        done = cancel_stopped(core, record, key, actor)
        if done is not None:
            return settle(done)  # a cleanup that met an async step: driven to its end here
        record = core.store.load(sid)  # a resume moved it on meanwhile: look again
        if record is None:
            raise UnknownSession(sid)
        if record.status == "running" and key is None:
            requested = _request_cancel(core, sid, actor)
            if requested is not None:
                return requested
            record = core.store.load(sid)
            if record is None:
                raise UnknownSession(sid)
    msg = f"session {sid!r} kept moving on while it was being cancelled; nothing was changed"
    raise ConcurrentUpdate(msg)


def cancel_stopped(
    core: Core,
    record: SessionRecord,
    key: str | None,
    actor: str | None,
    flow: Flow | None = None,
) -> AwaitableOrValue[Outcome] | None:
    """Cancel a paused or failed session as `record` shows it, or None when it moved on
    since (nothing changed).

    A session whose flow has a cleanup that has not run yet (`cleanup=`) runs it first, with
    `ctx.ending == "cancelled"`, and ends cancelled after it (see `end_waiting`): with `flow`,
    or the one registered (UnknownFlow, nothing changed, when this process has none).

    Every live token of the session — one per waiting branch, and the record's own — is used
    in ONE transaction with the `run.cancelled` event (`consume_tokens`, all or nothing), so a
    resume of any branch racing the cancel either went first (the cancel then finds a token
    used, changes nothing and looks again) or finds its token used: never a token used and a
    wait row dropped by a cancel that then did not happen."""
    sid = record.session_id
    waits = core.store.waits(sid)
    tokens = [w.token for w in waits]
    if record.token is not None and record.token not in tokens:
        tokens.append(record.token)
    if key is not None and key not in tokens:
        raise TokenAlreadyUsed(sid)
    state = stored_state(core, record)
    if parked(state):
        # Its waits end here: the lanes parked in their rows come back into its last
        # snapshot, which is then the whole state (as a fold of its events makes it).
        # (A row that cannot be read leaves the snapshot as it was.)
        with contextlib.suppress(SnapshotError):
            state = restore(own(state), [decode_lane(w.lane) for w in waits if w.lane])
    data = {} if actor is None else {"actor": actor}
    if state.cleanup and state.ending is None and tokens:
        return end_waiting(
            core, record, state, tokens, key, "cancelled", {**data, "path": ()}, flow
        )
    now = core.clock.now()
    specs: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    if state.ending is not None and not state.cleaned:
        # Its cleanup waits: it ends here, stopped by the cancel (see drive._finish_cleanup).
        specs.append((ev.CLEANUP_ENDED, (), {"error": error_to_data(CLEANUP_CANCELLED)}))
    specs.append((ev.RUN_CANCELLED, (), data))
    after, events = fold(state, now, specs)
    until = now + timedelta(seconds=core.lease)
    try:
        refused = core.store.consume_tokens(
            tokens, owner=core.owner, until=until, events={sid: events} if tokens else {}
        )
    except ConcurrentUpdate:  # its log moved on since we read it
        return None
    if refused:
        if key is not None and refused.get(key) == "used":
            raise TokenAlreadyUsed(sid)
        return None
    # With no token to use, the save's compare-and-set is the whole check; else the event went
    # with the tokens.
    written = [] if tokens else events
    core.states.drop(record.state)
    state = after
    for event in events:
        core.hub.notify(event)
    record.state = encode_state(
        state, fingerprint=record.fingerprint, flow_version=record.flow_version
    )
    record.status = state.status
    record.token = None
    record.wake_at = None
    record.lease_owner = None
    record.lease_until = None
    record.updated_at = now
    post = end_post(record, state)  # a child's end, for its parent
    try:
        core.store.save(
            record, record.version, events=written, **({} if post is None else {"post": post})
        )
    except ConcurrentUpdate:
        if not tokens:
            return None
        raise  # its tokens are used and its lease ours: recover() ends it as cancelled
    if post is not None:
        settle_parent(core.wake_parent(core, post[0]))
    return outcome_of(state, None)


def end_waiting(
    core: Core,
    record: SessionRecord,
    state: SessionState,
    tokens: list[str],
    key: str | None,
    ending: str,
    end: dict[str, Any],
    flow: Flow | None,
) -> AwaitableOrValue[Outcome] | None:
    """End the body of a waiting session whose flow has a cleanup (cancelled, or its deadline
    passed) and run the cleanup: every live token (`tokens`) is used in ONE transaction with
    the `cleanup.started` event (as a cancel uses them with `run.cancelled`), and the session
    is then driven here, its cleanup first. None when it moved on since (nothing changed).

    `state`: the stored state with its parked lanes back; `end`: the data of the event that
    ends the run after the cleanup (with its `path`)."""
    sid = record.session_id
    flow = core.flows.flow_for(record, flow, False)  # UnknownFlow before anything is used
    now = core.clock.now()
    event = Event(
        state.last_seq + 1, ev.CLEANUP_STARTED, sid, now, (), {"ending": ending, "end": end}
    )
    until = now + timedelta(seconds=core.lease)
    try:
        refused = core.store.consume_tokens(
            tokens, owner=core.owner, until=until, events={sid: [event]}
        )
    except ConcurrentUpdate:  # its log moved on since we read it
        return None
    if refused:
        if key is not None and refused.get(key) == "used":
            raise TokenAlreadyUsed(sid)
        return None
    core.states.drop(record.state)
    state = apply(state, event)
    return start(
        core,
        flow,
        record,
        state,
        [event],
        meta={"trigger": "deadline" if ending == DEADLINE_EXCEEDED else "cancel"},
        resume=prepare,
    )


def _request_cancel(core: Core, sid: str, actor: str | None) -> Outcome | None:
    """Ask a running session to stop as cancelled at its next checkpoint: an outcome with
    status "running" that says so, or None if it is no longer running."""
    stored = core.running.request_abort(sid, False, actor) or (
        core.store.request_stop(sid, "cancel") == "running"
    )
    if not stored:
        return None
    return Outcome("running", sid, meta={"stop_requested": "cancel"})
