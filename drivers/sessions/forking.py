"""Forking a session: `Runtime.fork` starts a new session from an existing one's past.

The new session's state is the fold of the original's stored events up to the fork point
(`derive_state`), so a fork is exact for any session whose log is kept, whatever its snapshot
holds now; a pruned session has no log and cannot be forked. The new session's log begins with
a copy of those events (renumbered under its own id, the same seqs), so `derive_state(events)
== state` holds for it as for any session and the values it keeps out of line in its events
(a large input, large top-level outputs) are its own. Then one `run.resumed` event records the
fork (`forked_from`), and the run goes on from there like a recovery: completed steps are not
run again, a step in flight at that point runs again, and every wait that was pending at that
point is entered again (a new token, its timeout and key evaluated afresh) — DBOS'
`fork_workflow` re-runs from the step given, LangGraph resumes from the checkpoint.

A ForEach in progress at the fork point keeps its items and results out of line: they are
copied to the new session (from the original's events where they show them, else from its
stored values), the results only of the iterations completed by that point.

Nothing is written until every check passed: a bad argument raises InvalidArgument, an unknown
or pruned session UnknownSession, a flow that does not fit FlowMismatch, and the original
session is never changed.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from tarry.drivers.core import Core
from tarry.drivers.drive.ledger import ITEMS, RESULTS
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import AwaitableOrValue
from tarry.drivers.limits import MAX_SESSION_ID, check_actor, valid_session_id
from tarry.drivers.reading.inspecting import session as view_of
from tarry.drivers.reading.views import SessionView
from tarry.drivers.sessions.children import PARENT
from tarry.drivers.sessions.starting import Resume, start
from tarry.drivers.sessions.validation import validate
from tarry.engine.describe import describe
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import InvalidArgument, SnapshotError, UnknownSession
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.engine.state.lanes import frames, pauses
from tarry.engine.state.records import SessionState
from tarry.engine.state.reducer import apply, fold
from tarry.snapshots.codec.pack import dumps
from tarry.snapshots.records import SessionRecord, encode_state, path_key

#: Events read at a time from the original's log.
PAGE = 1000

#: The key of the new session's meta (and of its first events' data) that names its origin.
FORKED_FROM = "forked_from"


def fork(
    core: Core,
    session_id: str,
    *,
    at_seq: Any = None,
    at: Any = None,
    new_id: str | None = None,
    flow: Flow | None = None,
    meta: dict[str, Any] | None = None,
    asynchronous: bool = False,
    actor: str | None = None,
    resume: Resume,
) -> AwaitableOrValue[Outcome]:
    """Start a new session from the state of `session_id` after its event `at_seq` (or just
    before the element at path `at` first started) and drive it from there; see the module
    docstring. `meta`: keys to set in the new session's meta (which starts as a copy of the
    original's). `resume`: how the new session's waits are resumed (resuming.prepare)."""
    check_actor(actor)
    core.tokens.check()  # SecretRequired: no unsigned session goes into a signed store
    if (at_seq is None) == (at is None):
        msg = f"fork needs exactly one of at_seq and at (got at_seq={at_seq!r}, at={at!r})"
        raise InvalidArgument(msg)
    if at_seq is not None and (type(at_seq) is not int or at_seq < 1):
        msg = f"at_seq must be an int >= 1 (got {describe(at_seq)})"
        raise InvalidArgument(msg)
    path = None if at is None else _path(at)
    if new_id is not None and not valid_session_id(new_id):
        msg = (
            f"session_id must be a non-empty str of at most {MAX_SESSION_ID} characters, "
            f"valid UTF-8 (got {describe(new_id)})"
        )
        raise InvalidArgument(msg)
    if meta is not None and not isinstance(meta, dict):
        msg = f"meta must be a dict (got {describe(meta)})"
        raise InvalidArgument(msg)
    view = view_of(core, session_id)  # UnknownSession: none, or pruned
    if path is not None:
        at_seq = _before(view, path)
    events = view.events(0, at_seq)
    if not events or events[0].seq != 1 or events[0].type != ev.RUN_STARTED:
        raise UnknownSession(session_id)  # its log is gone (pruned while we read it)
    if len(events) < at_seq or at_seq < 1:
        last = events[-1].seq
        msg = (
            f"at_seq {at_seq} is past the log of session {session_id!r}, whose last event is {last}"
        )
        raise InvalidArgument(msg)

    sid = new_id or uuid.uuid4().hex
    origin = {"session_id": session_id, "seq": at_seq}
    copied = _copied(events, sid, origin)
    state = SessionState(session_id=sid, flow=view.flow)
    for event in copied:
        state = apply(state, event)
    fingerprint = _fingerprint(view.fingerprint, events)
    if flow is None:
        flow = core.flows.matching(view.flow, fingerprint, session_id)
    else:
        # A changed flow of the session's name may carry the fork (a fix: Temporal's reset
        # after a deploy), if it fits where the session stood (validate, below).
        flow = core.flows.flow_for(_identity(view, fingerprint), flow, True)
    values = _values(core, session_id, state, view, at_seq)
    now = core.clock.now()
    specs = _going_on(state, origin, actor)
    if specs:
        state, more = fold(state, now, specs)
        validate(sid, fingerprint, state, flow)
    else:
        more = []
    # A fork is nobody's child: no parent waits for its end.
    kept = {k: v for k, v in view.meta.items() if k != PARENT}
    meta = {**kept, **(meta or {}), FORKED_FROM: origin}
    core.check(meta, "meta")
    core.flows.register(flow)
    ended = state.status == "completed"  # forked at its very end: nothing to run
    record = SessionRecord(
        session_id=sid,
        flow=view.flow,
        status=state.status,
        state=encode_state(state, fingerprint=flow.fingerprint, flow_version=flow.version),
        fingerprint=flow.fingerprint,
        flow_version=flow.version,
        lease_owner=None if ended else core.owner,
        lease_until=None if ended else now + timedelta(seconds=core.lease),
        created_at=now,
        updated_at=now,
        meta=meta,
        durability=view.durability,
    )
    written = [*copied, *more]
    core.store.create(record, events=written)  # SessionExists: nothing changed
    # Before it runs (a crash in between leaves a session whose ForEach fails with
    # SnapshotError when reached, resumably; stores create no values with a session).
    if values:
        core.store.put_values(sid, values)
    if ended:
        core.hub.announce(written)
        return view_of(core, sid).outcome
    return start(
        core,
        flow,
        record,
        state,
        written,
        asynchronous=asynchronous,
        meta={"trigger": "fork"},
        resume=resume,
    )


def _path(at: Any) -> tuple[Any, ...]:
    """`at` as an element's path: a non-empty tuple (or list) of names and indexes."""
    if (
        not isinstance(at, tuple | list)
        or not at
        or not all(type(part) in (str, int) for part in at)
    ):
        msg = (
            "at must be the path of an element, a non-empty tuple of names and indexes "
            f"such as ('tickets', 3, 'triage') (got {describe(at)})"
        )
        raise InvalidArgument(msg)
    return tuple(at)


def _before(view: SessionView, path: tuple[Any, ...]) -> int:
    """The seq of the event just before the element at `path` first started — or the
    iteration: a ForEach's or Loop's by its index (`("tickets", 3)`), a Parallel's branch by
    its name; InvalidArgument when it never started."""
    after = 0
    container, last = path[:-1], path[-1]
    by = "index" if type(last) is int else "item"
    while True:
        page = view.events(after, PAGE)
        for event in page:
            if event.type == ev.NODE_STARTED and event.path == path:
                return event.seq - 1
            if (
                event.type == ev.ITERATION_STARTED
                and event.path == container
                and event.data.get(by) == last
                and type(event.data.get(by)) is type(last)
            ):
                return event.seq - 1
        if len(page) < PAGE:
            break
        after = page[-1].seq
    msg = f"no element at {list(path)!r} ever started in session {view.session_id!r}"
    raise InvalidArgument(msg)


def _copied(events: list[Event], sid: str, origin: dict[str, Any]) -> list[Event]:
    """`events` as the new session's own: its id, the same seqs, times, paths and data; its
    first (`run.started`) says where it was forked from."""
    made = [Event(e.seq, e.type, sid, e.at, e.path, e.data) for e in events]
    first = made[0]
    made[0] = Event(
        first.seq, first.type, sid, first.at, first.path, {**first.data, FORKED_FROM: origin}
    )
    return made


def _identity(view: SessionView, fingerprint: str) -> SessionRecord:
    """A record naming the original's flow and `fingerprint`, for the registry's checks."""
    return SessionRecord(view.session_id, view.flow, view.status, b"", fingerprint=fingerprint)


def _fingerprint(fingerprint: str, events: list[Event]) -> str:
    """The fingerprint of the flow the session ran with at the fork point: the last changed
    flow a resume recorded by then (`allow_changed=True`), else the one it runs with now.
    (That is the one it started with unless a resume changed its flow after the fork point:
    the log does not say which it started with, and `validate` checks that it fits.)"""
    for event in reversed(events):
        changed = event.data.get("flow") if event.type == ev.RUN_RESUMED else None
        if type(changed) is dict and type(changed.get("fingerprint")) is str:
            return changed["fingerprint"]
    return fingerprint


def _going_on(
    state: SessionState, origin: dict[str, Any], actor: str | None
) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """The events that set the forked state running: one `run.resumed` that records the fork
    (it clears the session's own wait or failure), and one more for each lane that waited, so
    that its wait is entered again (and gets a new token) instead of being counted as waiting
    on a token of the original. None for a session that had completed by then."""
    if state.status == "completed":
        return []
    data: dict[str, Any] = {FORKED_FROM: origin}
    if actor is not None:
        data["actor"] = actor
    specs: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [(ev.RUN_RESUMED, (), data)]
    own = state.pause
    for pause in pauses(state):
        if pause is not own:
            specs.append((ev.RUN_RESUMED, pause.path, {FORKED_FROM: origin}))
    return specs


def _values(
    core: Core, sid: str, state: SessionState, view: SessionView, at_seq: int
) -> list[tuple[str, int, bytes]]:
    """The out-of-line values (key, index, blob) the forked state needs: the items of each
    ForEach in progress at the fork point, and the results of its iterations completed by
    then. Items come from the original's events (`container.iteration_started`) or, for those
    not started yet, its stored values; results from its events. SnapshotError (nothing
    written) when one cannot be found."""
    open_ = {f.path: f for f in frames(state.container_stack) if f.kind == "foreach"}
    if not open_:
        return []
    # What each ForEach's latest entry by the fork point (the one its frame stands for) did.
    items: dict[tuple[Any, ...], dict[int, Any]] = {p: {} for p in open_}
    results: dict[tuple[Any, ...], dict[int, Any]] = {p: {} for p in open_}
    done: set[tuple[Any, ...]] = set()  # entered again after the fork point
    after = 0
    while True:
        page = view.events(after, PAGE)
        for event in page:
            path = event.path
            if path not in open_ or path in done:
                continue
            if event.type == ev.NODE_STARTED:
                if event.seq <= at_seq:
                    items[path].clear()
                    results[path].clear()
                else:
                    done.add(path)
            elif event.type == ev.ITERATION_STARTED:
                items[path][event.data["index"]] = event.data.get("item")
            elif event.type == ev.ITERATION_COMPLETED and event.seq <= at_seq:
                results[path][event.data["index"]] = event.data.get("output")
        if len(page) < PAGE:
            break
        after = page[-1].seq
    values: list[tuple[str, int, bytes]] = []
    for path, frame in open_.items():
        size = frame.size or 0
        key = ITEMS + path_key(path)
        known = items[path]
        if len(known) < size:
            stored = core.store.get_values(sid, key, size)
            for index in range(size):
                if index in known:
                    continue
                blob = stored[index] if len(stored) == size else None
                if blob is None:
                    blob = core.store.get_value(sid, key, index)
                if blob is None:
                    msg = (
                        f"session {sid!r}: item {index} of {'/'.join(map(str, path))} is "
                        "missing from the store, and the fork at that point needs it"
                    )
                    raise SnapshotError(msg)
                values.append((key, index, bytes(blob)))
        values += [(key, index, dumps(item)) for index, item in known.items()]
        key = RESULTS + path_key(path)
        values += [(key, index, dumps(out)) for index, out in results[path].items()]
    return values
