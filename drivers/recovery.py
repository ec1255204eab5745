"""Recovery: `Runtime.recover` continues the sessions whose process died mid-run."""

from __future__ import annotations

from datetime import timedelta

from tarry.engine import events as ev
from tarry.engine.reducer import apply

from .core import Core
from .drive import fold
from .limits import log
from .outcome import Outcome
from .settle import settle
from .starting import start
from .views import state_of


def recover(core: Core) -> list[Outcome]:
    outcomes: list[Outcome] = []
    now = core.clock.now()
    until = now + timedelta(seconds=core.lease)
    for stale in core.store.expired(now):
        sid = stale.session_id
        flow = core.flows.get(stale.flow)
        if flow is None:
            log().warning("recover: no flow %r registered for session %s", stale.flow, sid)
            continue
        if not core.store.claim(sid, core.owner, until, now):
            continue  # another worker got there first
        record = core.store.load(sid)
        if record is None:
            continue
        state = state_of(record)
        for event in core.store.events(sid, state.last_seq):
            state = apply(state, event)
        if state.status != "running":
            core.store.release(sid, core.owner)
            continue
        state, events = fold(state, now, [(ev.RUN_RESUMED, (), {"recovered": True})])
        core.store.append_events(sid, events)
        meta = {"trigger": "recover"}
        outcomes.append(settle(start(core, flow, record, state, events, meta=meta)))
    return outcomes
