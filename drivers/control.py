"""Control: `Runtime.abort` and `Runtime.cancel`."""

from __future__ import annotations

from tarry.engine import events as ev
from tarry.engine.describe import describe
from tarry.engine.errors import (
    InvalidArgument,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownSession,
    UnknownToken,
)
from tarry.engine.events import Event
from tarry.engine.reducer import apply
from tarry.snapshots.records import encode_state

from .core import Core
from .limits import valid_session_id
from .outcome import Outcome, outcome_of
from .resuming import key_of, stored_state
from .tokens import looks_like_token


def abort(core: Core, session_id: str, resumable: bool) -> None:
    if core.running.request_abort(session_id, resumable):
        return
    if not resumable and valid_session_id(session_id):
        record = core.store.load(session_id)
        if record is not None and record.status in ("paused", "failed"):
            cancel(core, session_id)


def cancel(core: Core, token_or_session_id: str) -> Outcome:
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
    if record.status not in ("paused", "failed"):
        raise SessionNotResumable(sid, record.status, "cancel")
    if record.token is not None and not core.store.consume_token(record.token):
        if key is not None:
            raise TokenAlreadyUsed(sid)
        raise SessionNotResumable(sid, "running", "cancel")
    state = stored_state(core, record)
    core.states.drop(record.state)
    event = Event(state.last_seq + 1, ev.RUN_CANCELLED, sid, core.clock.now(), (), {})
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
