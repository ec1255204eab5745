"""Control: `Runtime.abort` and `Runtime.cancel`."""

from __future__ import annotations

from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome, outcome_of
from tarry.drivers.limits import check_actor, valid_session_id
from tarry.drivers.sessions.resuming import key_of, stored_state
from tarry.drivers.tokens import looks_like_token
from tarry.engine.describe import describe
from tarry.engine.errors import (
    InvalidArgument,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownSession,
    UnknownToken,
)
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.engine.state.reducer import apply
from tarry.snapshots.records import encode_state


def abort(core: Core, session_id: str, resumable: bool, actor: str | None = None) -> None:
    """Stop a running session at its next checkpoint: at once when this process drives it
    (its stop event then names `actor`), else through a request stored for the process that
    does (read within a TICK)."""
    check_actor(actor)
    if core.running.request_abort(session_id, resumable, actor):
        return
    if not valid_session_id(session_id):
        raise UnknownSession(session_id)  # no such id can have been stored
    status = core.store.request_stop(session_id, "abort" if resumable else "cancel")
    if status is None:
        raise UnknownSession(session_id)
    if not resumable and status in ("paused", "failed"):
        cancel(core, session_id, actor)
    # Running: the request is stored. Paused or failed with resumable=True: stopped already.


def cancel(core: Core, token_or_session_id: str, actor: str | None = None) -> Outcome:
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
    if key is not None and record.token != key:
        # Used by a resume since it was looked up: that resume won, the token is spent.
        raise TokenAlreadyUsed(sid)
    if record.status == "running" and key is None:
        requested = _request_cancel(core, sid, actor)
        if requested is not None:
            return requested
        record = core.store.load(sid)  # it stopped meanwhile: cancel what it left
        if record is None:
            raise UnknownSession(sid)
    if record.status not in ("paused", "failed"):
        raise SessionNotResumable(sid, record.status, "cancel")
    if record.token is not None and not core.store.consume_token(record.token):
        if key is not None:
            raise TokenAlreadyUsed(sid)
        raise SessionNotResumable(sid, "running", "cancel")
    state = stored_state(core, record)
    core.states.drop(record.state)
    data = {} if actor is None else {"actor": actor}
    event = Event(state.last_seq + 1, ev.RUN_CANCELLED, sid, core.clock.now(), (), data)
    state = apply(state, event)
    core.hub.notify(event)
    record.state = encode_state(
        state, fingerprint=record.fingerprint, flow_version=record.flow_version
    )
    record.status = state.status
    record.token = None
    record.wake_at = None
    record.updated_at = core.clock.now()
    core.store.save(record, record.version, events=[event])
    return outcome_of(state, None)


def _request_cancel(core: Core, sid: str, actor: str | None) -> Outcome | None:
    """Ask a running session to stop as cancelled at its next checkpoint: an outcome with
    status "running" that says so, or None if it is no longer running."""
    stored = core.running.request_abort(sid, False, actor) or (
        core.store.request_stop(sid, "cancel") == "running"
    )
    if not stored:
        return None
    return Outcome("running", sid, meta={"stop_requested": "cancel"})
