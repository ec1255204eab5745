"""Recovery: `Runtime.recover` continues the sessions whose process died mid-run."""

from __future__ import annotations

from datetime import timedelta

from tarry.engine import events as ev
from tarry.engine.errors import FlowMismatch, InconsistentSnapshot, SnapshotError, UnknownFlow
from tarry.engine.flow import Flow
from tarry.engine.reducer import apply
from tarry.engine.state import SessionState
from tarry.snapshots.records import SessionRecord

from .core import Core
from .drive import fold
from .limits import log
from .outcome import Outcome
from .resuming import stored_state
from .settle import settle
from .starting import start
from .validate import validate

#: What leaves a session as it is: no flow at hand for it, or a state that cannot go on.
REFUSED = (UnknownFlow, FlowMismatch, SnapshotError)


def recover(core: Core) -> list[Outcome]:
    outcomes: list[Outcome] = []
    now = core.clock.now()
    until = now + timedelta(seconds=core.lease)
    for stale in core.store.expired(now):
        sid = stale.session_id
        if stale.flow not in core.flows:
            log().warning("recover: no flow %r registered for session %s", stale.flow, sid)
            continue
        # Checked before its lease is taken: a session this runtime cannot continue keeps its
        # expired lease, for a runtime that can (one with the version that started it).
        try:
            recoverable(core, stale)
        except REFUSED as exc:
            log().warning("recover: session %s left as it is: %s", sid, exc)
            continue
        if not core.store.claim(sid, core.owner, until, now):
            continue  # another worker got there first
        record = core.store.load(sid)
        if record is None:
            continue
        try:
            flow, state = recoverable(core, record)
        except REFUSED as exc:  # changed since: left to this lease's end, then to others
            log().warning("recover: session %s left as it is: %s", sid, exc)
            continue
        if flow is None:
            core.store.release(sid, core.owner)
            continue
        state, events = fold(state, now, [(ev.RUN_RESUMED, (), {"recovered": True})])
        core.store.append_events(sid, events)
        meta = {"trigger": "recover"}
        outcomes.append(settle(start(core, flow, record, state, events, meta=meta)))
    return outcomes


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
            state = apply(state, event)
            changed = event.data.get("flow") if event.type == ev.RUN_RESUMED else None
            if type(changed) is dict and type(changed.get("fingerprint")) is str:
                fingerprint = changed["fingerprint"]
    except Exception as exc:  # an event the reducer cannot apply to this state
        problem = f"its events after seq {state.last_seq} do not apply ({type(exc).__name__}: {exc})"
        raise InconsistentSnapshot(sid, problem) from exc
    if state.status != "running":
        return None, state
    flow = core.flows.matching(record.flow, fingerprint, sid)
    validate(sid, fingerprint, state, flow)
    return flow, state
