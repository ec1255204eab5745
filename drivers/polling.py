"""Adapters: `Runtime.poll` asks them about every paused session of their pause kind and
resumes those whose answer is ready — each session inside its own error boundary
(boundary.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from tarry.engine.errors import (
    InvalidResumeValue,
    NotSerializable,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownToken,
)
from tarry.engine.state import PauseState
from tarry.snapshots.records import SessionRecord

from .adapters import NOT_READY, ResumeRequest
from .boundary import Round, contain, flow_of, guarded, infrastructure
from .core import Core
from .limits import log
from .outcome import Outcome
from .resuming import prepare, stored_state
from .settle import is_awaitable, settle
from .timers import resume_due


def poll(core: Core, limit: int, round: Round | None = None) -> list[Outcome]:
    round = round or Round()
    outcomes = resume_due(core, limit, round)
    return outcomes + ask_adapters(core, round)


def ask_adapters(core: Core, round: Round | None = None) -> list[Outcome]:
    """Ask the adapters about every paused session of their kinds; resume the ready ones."""
    if not core.adapters:
        return []
    round = round or Round()
    outcomes = []
    for record in _paused(core):
        if round.stopping():
            break
        outcome = guarded(
            core, "poll", record, round, lambda r=record: _ask(core, r, round), claimed=False
        )
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


def _ask(core: Core, listed: SessionRecord, round: Round) -> Outcome | None:
    if flow_of(core, listed, round, "poll") is None or not _known(core, listed):
        return None
    record = core.store.load(listed.session_id)  # a listing carries no state
    if record is None:
        return None
    state = stored_state(core, record)
    pause = state.pause
    if pause is None or state.status != "paused":
        return None
    adapter = core.adapters.get(pause.kind)
    if adapter is None or record.token is None:
        return None
    sid = record.session_id
    now = core.clock.now()
    if not core.store.claim(sid, core.owner, now + timedelta(seconds=core.lease), now):
        return None  # another poller is asking about it
    try:
        outcome = _resume_if_ready(core, sid, record.token, adapter, pause)
    except Exception as exc:
        if infrastructure(exc):
            raise
        return contain(core, "poll", record, exc, claimed=True)
    if outcome is None:
        core.store.release(sid, core.owner)
    return outcome


def _resume_if_ready(
    core: Core, sid: str, key: str, adapter: Callable[..., Any], pause: PauseState
) -> Outcome | None:
    """Ask `adapter` about the claimed session `sid` (token key `key`); resume it with a ready
    value."""
    request = ResumeRequest(
        core.tokens.token(key), sid, pause.kind, pause.reason, pause.payload, pause.path
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
        return settle(prepare(core, key, None, False, value=value, trigger="adapter"))
    except (InvalidResumeValue, NotSerializable) as exc:
        log().error("adapter %r gave session %s a value it refused: %s", adapter, sid, exc)
        return None
    except (TokenAlreadyUsed, UnknownToken, SessionNotResumable):
        return None
