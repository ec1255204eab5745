"""Recovery: `Runtime.recover` continues the sessions whose process died mid-run — each session
inside its own error boundary (boundary.py).

A session that cannot be recovered here (its flow is unknown or changed, its snapshot cannot
be read) keeps its lapsed lease, so that it stays listed for a runtime that can, and the
listing pages past it (after its (lease_until, session id)); one whose recovery raised after
the run went on is failed with a typed error.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import settle
from tarry.drivers.limits import valid_session_id
from tarry.drivers.rounds.boundary import Round, contain, flow_of, infrastructure
from tarry.drivers.sessions.resuming import prepare, stored_state
from tarry.drivers.sessions.starting import start
from tarry.drivers.sessions.validation import validate
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import (
    InconsistentSnapshot,
    SessionNotResumable,
    SnapshotError,
    UnknownSession,
)
from tarry.engine.state import events as ev
from tarry.engine.state.records import SessionState
from tarry.engine.state.reducer import fold
from tarry.snapshots.records import SessionRecord, fold_stored

#: Sessions `recover()` continues at most per call (and lists per page).
LIMIT = 100


def recover(core: Core, round: Round | None = None, limit: int = LIMIT) -> list[Outcome]:
    core.tokens.check()
    round = round or Round()
    outcomes: list[Outcome] = []
    now = core.clock.now()
    until = now + timedelta(seconds=core.lease)
    after = None
    while len(outcomes) < limit and not round.stopping():
        page = core.store.expired(now, limit, after=after)
        for stale in page:
            assert stale.lease_until is not None  # what `expired` lists
            after = (stale.lease_until, stale.session_id)
            if not round.begin(stale.session_id):
                return outcomes
            try:
                outcome = _recover_one(core, stale, now, until, round)
            finally:
                round.current = None
            if outcome is not None:
                outcomes.append(outcome)
        if len(page) < limit:
            break
    return outcomes


def recover_session(core: Core, session_id: str) -> Outcome:
    """Recover one session whose lease lapsed (`Runtime.recover(session_id=...)`).

    UnknownSession for an id no session has; SessionNotResumable when it is not running, or
    its lease still holds (its process may be alive), or another process took it over first;
    UnknownFlow, FlowMismatch or SnapshotError when this runtime cannot continue it. Each of
    those changes nothing. Then it goes on as in a `recover()` round, and its outcome is
    returned (a failure after the run went on fails the session, as there)."""
    core.tokens.check()
    if not valid_session_id(session_id):
        raise UnknownSession(session_id)
    record = core.store.load(session_id)
    if record is None:
        raise UnknownSession(session_id)
    now = core.clock.now()
    if record.status != "running":
        raise SessionNotResumable(session_id, record.status, "recover")
    if record.lease_until is None or record.lease_until > now:
        held = "" if record.lease_until is None else f" until {record.lease_until.isoformat()}"
        status = f"running and its lease holds{held} (its process may be alive)"
        raise SessionNotResumable(session_id, status, "recover")
    flow, state = recoverable(core, record)  # raises before anything is written
    if flow is None:
        raise SessionNotResumable(session_id, state.status, "recover")
    until = now + timedelta(seconds=core.lease)
    outcome = _recover_one(core, record, now, until, Round())
    if outcome is None:
        status = "running and was taken over by another process"
        raise SessionNotResumable(session_id, status, "recover")
    return outcome


def _recover_one(
    core: Core, stale: SessionRecord, now: datetime, until: datetime, round: Round
) -> Outcome | None:
    sid = stale.session_id
    claimed = resumed = False
    try:
        if flow_of(core, stale, round, "recover") is None:
            return None
        # Checked before its lease is taken: a session this runtime cannot continue keeps its
        # expired lease, for a runtime that can (one with the version that started it).
        recoverable(core, stale)
        if not core.store.claim(sid, core.owner, until, now):
            return None  # another worker got there first
        claimed = True
        record = core.store.load(sid)
        if record is None:
            return None
        # Changed since it was listed: refused the same way (its lease lapses again).
        flow, state = recoverable(core, record)
        if flow is None:
            core.store.release(sid, core.owner)
            return None
        state, events = fold(state, now, [(ev.RUN_RESUMED, (), {"recovered": True})])
        core.store.append_events(sid, events)
        resumed = True
        meta = {"trigger": "recover"}
        outcome = settle(start(core, flow, record, state, events, meta=meta, resume=prepare))
    except Exception as exc:
        if infrastructure(exc):
            raise
        if claimed and not resumed:
            # Left as it was: its lease lapsed again, so that it stays listed for a runtime
            # that can continue it (given back, it would never be listed again).
            core.store.claim(sid, core.owner, stale.lease_until or now, now)
        return contain(core, "recover", stale, exc, claimed=False, used=resumed)
    core.reported.forget(sid)
    return outcome


def recoverable(core: Core, record: SessionRecord) -> tuple[Flow | None, SessionState]:
    """The flow that continues `record` and the state it goes on from: its snapshot folded with
    the events written after it. The flow is None when the session is not running (nothing to
    recover). Raises (UnknownFlow, FlowMismatch, SnapshotError) before anything is written.

    The flow is the registered one whose fingerprint the session runs with: the one that
    started it, or the changed one a `resume(..., allow_changed=True)` recorded in its
    `run.resumed` event, which the session's row only learns when the run next writes."""
    sid = record.session_id
    state = stored_state(core, record)
    fingerprint = record.fingerprint
    try:
        events = core.store.events(sid, state.last_seq)
    except SnapshotError as exc:
        msg = f"session {sid!r}: its events cannot be read: {exc}"
        raise SnapshotError(msg) from exc
    try:
        for event in events:
            state = fold_stored(state, (event,))
            changed = event.data.get("flow") if event.type == ev.RUN_RESUMED else None
            if type(changed) is dict and type(changed.get("fingerprint")) is str:
                fingerprint = changed["fingerprint"]
    except Exception as exc:  # an event the reducer cannot apply to this state
        problem = (
            f"its events after seq {state.last_seq} do not apply ({type(exc).__name__}: {exc})"
        )
        raise InconsistentSnapshot(sid, problem) from exc
    if state.status != "running":
        return None, state
    flow = core.flows.matching(record.flow, fingerprint, sid)
    validate(sid, fingerprint, state, flow)
    return flow, state
