"""Child sessions: starting one where a `Child` element is reached, the message its end leaves
for its parent, and the links between the two.

A child is stored queued: a session paused before its first element (a system pause, reason
"queued", that takes no value) and due at once, like a run a stopping worker handed back. Any
process sharing the store runs it: a worker's timers round claims it (`claim_due`, SKIP LOCKED
on PostgreSQL), so the children of one parent spread over every worker. Nothing holds the
parent meanwhile: its lane waits on the child's end key (engine/elements/child.py).

The save that ends a child (completed, failed, cancelled) queues its end on that key in the
same transaction (`SessionStore.save(post=...)`), so the end is recorded once and reaches the
parent once: the process that ended the child delivers it — at once, or, in a worker round,
when the round's page of children is done, every end of one parent in one resume
(rounds/delivering.deferred_wakes) — and if it dies first, the next worker round does
(`SessionStore.pending`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tarry.drivers.limits import MAX_SESSION_ID, valid_session_id
from tarry.drivers.reading.views import stored_state
from tarry.engine.bounds import INLINE
from tarry.engine.describe import describe
from tarry.engine.elements.child import child_end, end_key
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import ConcurrentUpdate, InvalidArgument, SessionExists, UnknownFlow
from tarry.engine.short_hash import short_hash
from tarry.engine.signals import NO_MAIL
from tarry.engine.state import events as ev
from tarry.engine.state.records import ErrorInfo, PauseState, SessionState, pause_to_data
from tarry.engine.state.reducer import error_to_data, fold
from tarry.snapshots.codec.pack import dumps
from tarry.snapshots.records import SessionRecord, encode_state
from tarry.snapshots.store import ENDED

if TYPE_CHECKING:
    from tarry.drivers.core import Core

#: The reason of the pause a child is stored with until a worker starts it.
QUEUED = "queued"

#: The key of a child's meta that names its parent.
PARENT = "parent"

#: The key of a session's meta that names its flow as `MODULE:FLOW` (worker.FLOW_REF).
FLOW_REF = "flow_ref"


def derived_id(parent: str, path: tuple[Any, ...]) -> str:
    """The id of the child that the element at `path` of session `parent` starts: the same
    on every run of that element, so a re-run after a crash finds the child it started."""
    sid = f"{parent}.{'.'.join(map(str, path))}"  # no "/": an id is one segment of a URL
    if len(sid) <= MAX_SESSION_ID:
        return sid
    return f"{parent[: MAX_SESSION_ID - 34]}.{short_hash(sid)}"


def start_child(
    core: Core,
    parent: SessionRecord,
    path: tuple[Any, ...],
    session_id: Any,
    flow: Flow,
    input: Any,
    *,
    lookup: bool = False,
) -> tuple[str, Any, bool]:
    """Store the child that the element at `path` of `parent` starts, queued for any worker:
    (its id, NO_MAIL, False). When it exists already (a re-run of the element), nothing is
    written: (its id, its end or NO_MAIL while it has not ended, True). InvalidArgument for an
    id no store can hold, or one taken by a session that is not this parent's child there.
    `lookup`: only find it, never store it ((its id, NO_MAIL, False) when it is not there)."""
    cid = derived_id(parent.session_id, path) if session_id is None else session_id
    if not valid_session_id(cid):
        msg = (
            f"a child's session_id must be a non-empty str of at most {MAX_SESSION_ID} "
            f"characters, valid UTF-8 (got {describe(cid)})"
        )
        raise InvalidArgument(msg)
    core.flows.register(flow)  # this process may run it (and its end resumes the parent here)
    if lookup:
        existing = core.store.load(cid)
        if existing is None or existing.meta.get(PARENT) != parent.session_id:
            return cid, NO_MAIL, False
        if existing.status in ENDED:
            return cid, end_of(core, existing), True
        return cid, NO_MAIL, True
    record, events = queued(core, cid, flow, input, parent)
    try:
        core.store.create(record, events=events, parent=parent.session_id)
    except SessionExists:
        existing = core.store.load(cid)
        if existing is None or existing.meta.get(PARENT) != parent.session_id:
            msg = (
                f"a child's session_id {cid!r} is taken by a session that is not a child of "
                f"{parent.session_id!r}"
            )
            raise InvalidArgument(msg) from None
        if existing.status in ENDED:
            return cid, end_of(core, existing), True
        return cid, NO_MAIL, True
    core.hub.announce(events)
    return cid, NO_MAIL, False


def queued(
    core: Core, cid: str, flow: Flow, input: Any, parent: SessionRecord
) -> tuple[SessionRecord, list[Any]]:
    """The record and the first events of a child stored queued: started, then paused before
    its first element, due now."""
    input, size = core.take(input, "input")  # NotSerializable: the Child fails, nothing written
    started: dict[str, Any] = {"input": input, "flow": flow.name, PARENT: parent.session_id}
    if size > INLINE:  # kept out of the state (state.OutOfLine), as `run` keeps a large input
        started["out_of_line"] = True
    meta: dict[str, Any] = {PARENT: parent.session_id}
    ref = parent.meta.get(FLOW_REF)
    if isinstance(ref, str):
        # The module that defines the parent's flow: a worker that imports it registers the
        # child's flow too (FlowRegistry.register), so it can run the child.
        meta[FLOW_REF] = ref
    now = core.clock.now()
    # The child's flow's own deadline and cleanup hold for it as for a run of that flow (its
    # deadline counts from the child's start, when it is stored).
    if flow.deadline is not None:
        started["deadline"] = now + timedelta(seconds=flow.deadline)
    if flow.cleanup is not None:
        started["cleanup"] = True
    first = (flow.body[0].name,)
    pause = PauseState("system", QUEUED, first, awaits_value=False)
    state, events = fold(
        SessionState(session_id=cid, flow=flow.name),
        now,
        [(ev.RUN_STARTED, (), started), (ev.RUN_PAUSED, first, pause_to_data(pause))],
    )
    record = SessionRecord(
        session_id=cid,
        flow=flow.name,
        status="paused",
        state=encode_state(state, fingerprint=flow.fingerprint, flow_version=flow.version),
        fingerprint=flow.fingerprint,
        flow_version=flow.version,
        token=core.tokens.new_key(),
        wake_at=now,
        created_at=now,
        updated_at=now,
        meta=meta,
        durability=parent.durability,
    )
    return record, events


def end_of(core: Core, record: SessionRecord) -> dict[str, Any]:
    """The end of the ended child `record`, as its end message carries it."""
    return ending(stored_state(core, record))


def ending(state: SessionState) -> dict[str, Any]:
    """The end message of a child whose state has ended."""
    error = None if state.error is None else error_to_data(state.error)
    return child_end(state.session_id, state.status, state.output, error)


def end_post(record: SessionRecord, state: SessionState) -> tuple[str, bytes] | None:
    """What the save that leaves `record` (with `state`) posts for a parent: the child's end
    on its end key when it is a child that ends, else None."""
    if PARENT not in record.meta or record.status not in ENDED:
        return None
    return end_key(record.session_id), dumps(ending(state))


def parent_of(meta: dict[str, Any]) -> str | None:
    """The parent of a session with `meta`, if it is a child."""
    parent = meta.get(PARENT)
    return parent if isinstance(parent, str) else None


def children_of(core: Core, session_id: str) -> list[str]:
    """The children a session started, in the order it started them (the store lists each
    from the transaction that created it: a parent whose drive died or failed before it
    wrote again lists it too)."""
    return core.store.children(session_id)


def is_queued(state: SessionState) -> bool:
    """Whether `state` is a child's that no worker started yet."""
    pause = state.pause
    return state.status == "paused" and pause is not None and pause.reason == QUEUED


def fail_unknown_flow(core: Core, record: SessionRecord) -> str | None:
    """Fail a queued child whose flow this runtime cannot find (no worker registered it):
    its parent then fails with ChildFailed instead of waiting for a flow that may never come.
    Returns the end key its end was queued on (for `Core.wake_parent`), or None when it is not
    such a child or moved on meanwhile (nothing written). The child keeps a token, as any
    failed session does: resumed once its flow is registered, it runs."""
    if PARENT not in record.meta or record.token is None:
        return None
    state = stored_state(core, record)
    if not is_queued(state):
        return None
    assert state.pause is not None  # is_queued
    now = core.clock.now()
    error = ErrorInfo(
        type="UnknownFlow",
        message=str(UnknownFlow(record.flow, session_id=record.session_id)),
        path=(),
        retryable=True,
    )
    resumed = (ev.RUN_RESUMED, state.pause.path, {})
    state, events = fold(
        state, now, [resumed, (ev.RUN_FAILED, (), {"error": error_to_data(error)})]
    )
    try:
        if not core.store.consume_token(record.token, version=record.version):
            return None
    except ConcurrentUpdate:
        return None
    token = core.tokens.new_key()
    record.state = encode_state(
        state, fingerprint=record.fingerprint, flow_version=record.flow_version
    )
    record.status = state.status
    record.token = token
    record.wake_at = record.lease_owner = record.lease_until = None
    record.updated_at = now
    post = end_post(record, state)
    assert post is not None  # a child that ended
    core.store.save(record, record.version, events=events, post=post)
    core.hub.announce(events)
    return post[0]
