"""Timers: `Runtime.resume_due` resumes every Sleep, retry back-off and timed-out Gate or Wait
whose time has come."""

from __future__ import annotations

from datetime import datetime

from tarry.engine.errors import SessionNotResumable, TokenAlreadyUsed, UnknownToken
from tarry.engine.state import ErrorInfo
from tarry.snapshots.records import SessionRecord

from .core import Core
from .limits import check_limit, log
from .outcome import Outcome
from .resuming import prepare, stored_state
from .settle import settle


def resume_due(core: Core, limit: int) -> list[Outcome]:
    check_limit(limit)
    now = core.clock.now()
    outcomes = []
    for record in core.store.due(now, limit):
        outcome = _fire(core, record, now)
        if outcome is not None:
            outcomes.append(outcome)
    return outcomes


def _fire(core: Core, record: SessionRecord, now: datetime) -> Outcome | None:
    token = record.token
    # The version that started the session, if registered (else any of its name, to say so).
    flow = core.flows.version(record.flow, record.fingerprint) or core.flows.get(record.flow)
    if token is None:
        return None
    if flow is None:
        log().warning(
            "resume_due: no flow %r registered for session %s", record.flow, record.session_id
        )
        return None
    state = stored_state(core, record)
    pause = state.pause
    if state.status != "paused" or pause is None:
        return None
    try:
        if pause.wake_at is not None and pause.wake_at <= now:
            return settle(prepare(core, token, None, False, trigger="timer"))
        if pause.expires_at is None or pause.expires_at > now:
            return None
        element = flow.find(pause.path) if record.fingerprint == flow.fingerprint else None
        expire = getattr(element, "expire", None)
        if expire is None:
            log().warning(
                "resume_due: session %s waits at %s, which has no timeout in flow %r as "
                "registered", record.session_id, pause.path, record.flow,
            )
            return None
        expiry = expire()
        if expiry.error is None:
            return settle(
                prepare(core, token, None, False, value=expiry.value, trigger="timeout")
            )
        error = ErrorInfo(type=expiry.error, message=expiry.message, path=pause.path,
                          retryable=True, attempts=1)
        return settle(prepare(core, token, None, False, trigger="timeout", failure=error))
    except (TokenAlreadyUsed, UnknownToken, SessionNotResumable):
        return None  # resumed, cancelled or fired by someone else first
