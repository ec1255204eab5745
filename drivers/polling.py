"""Adapters: `Runtime.poll` asks them about every paused session of their pause kind and
resumes those whose answer is ready."""

from __future__ import annotations

from datetime import timedelta

from tarry.engine.errors import (
    InvalidResumeValue,
    NotSerializable,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownToken,
)
from tarry.snapshots.records import SessionRecord

from .adapters import NOT_READY, ResumeRequest
from .core import Core
from .limits import log
from .outcome import Outcome
from .resuming import prepare, stored_state
from .settle import is_awaitable, settle
from .timers import resume_due


def poll(core: Core, limit: int) -> list[Outcome]:
    outcomes = resume_due(core, limit)
    if not core.adapters:
        return outcomes
    for record in _paused(core):
        outcome = _ask(core, record)
        if outcome is not None:
            outcomes.append(outcome)
    return outcomes


def _paused(core: Core) -> list[SessionRecord]:
    """Every paused session with a live token (read first, so resuming does not page)."""
    rows: list[SessionRecord] = []
    page = 500
    while True:
        batch = core.store.list(status="paused", limit=page, offset=len(rows))
        rows.extend(batch)
        if len(batch) < page:
            return [r for r in rows if r.token is not None]

def _known(core: Core, record: SessionRecord) -> bool:
    """Whether the version of the flow that started `record` is registered: no adapter is
    asked about a session that could not be resumed with its answer."""
    return core.flows.version(record.flow, record.fingerprint) is not None


def _ask(core: Core, listed: SessionRecord) -> Outcome | None:
    if not _known(core, listed):
        return None
    record = core.store.load(listed.session_id)  # a listing carries no state
    if record is None:
        return None
    state = stored_state(core, record)
    pause = state.pause
    if pause is None or state.status != "paused" or not _known(core, record):
        return None
    adapter = core.adapters.get(pause.kind)
    if adapter is None or record.token is None:
        return None
    sid = record.session_id
    now = core.clock.now()
    if not core.store.claim(sid, core.owner, now + timedelta(seconds=core.lease), now):
        return None  # another poller is asking about it
    try:
        request = ResumeRequest(
            core.tokens.token(record.token), sid, pause.kind, pause.reason, pause.payload,
            pause.path,
        )
        try:
            value = adapter(request)
            if is_awaitable(value):
                value = settle(value)
        except Exception:
            log().exception("adapter %r failed for session %s", adapter, sid)
            return None
        if value is NOT_READY:
            return None
        try:
            return settle(
                prepare(core, record.token, None, False, value=value, trigger="adapter")
            )
        except (InvalidResumeValue, NotSerializable) as exc:
            log().error("adapter %r gave session %s a value it refused: %s", adapter, sid, exc)
            return None
        except (TokenAlreadyUsed, UnknownToken, SessionNotResumable):
            return None
    finally:
        core.store.release(sid, core.owner)
