"""`Runtime.resume_many`: many waits, of one or several sessions, resumed in one call.

Every token is checked, and every value accepted by the element it resumes, before any is
used; then all tokens are used in ONE store transaction (`consume_tokens`), which also records
each session's `run.resumed` events and takes its lease; then each session is driven once,
with all of its resumed waits at once, and written once. A token that is unknown, used, given
twice or whose value is refused fails the whole call with that error, naming the token, and
nothing is used or changed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from datetime import timedelta
from typing import Any

from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import AwaitableOrValue
from tarry.drivers.sessions.resuming import (
    UNREAD,
    SessionBusy,
    _Busy,
    accepted,
    busy_retry,
    key_of,
    not_resumable,
    prepare,
    stored_state,
    wait_of,
)
from tarry.drivers.sessions.starting import start
from tarry.drivers.sessions.validation import validate
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import (
    ConcurrentUpdate,
    InvalidArgument,
    TokenAlreadyUsed,
    UnknownToken,
)
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.state import events as ev
from tarry.engine.state.lanes import concurrent
from tarry.engine.state.records import SessionState
from tarry.engine.state.reducer import fold, own
from tarry.snapshots.records import SessionRecord
from tarry.snapshots.store import MailGone


class _Session:
    """One session touched by a resume_many: what it was, and the resumes it gets."""

    __slots__ = ("record", "state", "flow", "specs", "events", "kinds", "owned")

    def __init__(self, record: SessionRecord, state: SessionState, flow: Flow) -> None:
        self.record = record
        self.state = state
        self.flow = flow
        self.specs: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.events: list[Any] = []
        self.kinds: list[str] = []
        #: Whether `state` is its own copy (see reducer.own), changed in place from then on.
        self.owned = False


def resume_many(
    core: Core, values: Mapping[str, Any], *, asynchronous: bool = False
) -> AwaitableOrValue[list[Outcome]]:
    """Resume the wait of each token with its value (see the module's docstring); one Outcome
    per session touched, in the order of their first token."""
    if not isinstance(values, Mapping):
        msg = f"resume_many takes a dict token -> value (got {type(values).__name__})"
        raise InvalidArgument(msg)
    keyed: dict[str, tuple[str, Any]] = {}
    for token, value in values.items():
        try:
            key = key_of(core, token)
        except UnknownToken:
            raise UnknownToken(str(token)) from None
        if key in keyed:
            raise TokenAlreadyUsed("(given twice in one call)", str(token))
        keyed[key] = (token, value)
    return resume_keys(core, keyed, asynchronous=asynchronous)


def resume_keys(
    core: Core,
    keyed: Mapping[str, tuple[str, Any]],
    *,
    asynchronous: bool = False,
    trigger: str = "resume",
    actor: str | None = None,
    mail: Mapping[str, int] | None = None,
    wait_busy: bool = True,
) -> AwaitableOrValue[list[Outcome]]:
    """`resume_many` by store keys: `{key: (the caller's token, value)}` (the token names it in
    errors). Timers resume the due waits of a session this way too (`trigger="timer"`). A
    session another call is resuming meanwhile is waited for (see resuming.busy_retry), unless
    `wait_busy` is false: then SessionBusy, nothing used. `mail`: {key: id of the queued
    message its value came from}, consumed with the tokens (MailGone: nothing written)."""
    if not wait_busy:
        try:
            return _resume_keys(core, keyed, asynchronous, trigger, actor, mail or {})
        except _Busy as busy:
            raise SessionBusy(str(busy)) from None
    return busy_retry(lambda: _resume_keys(core, keyed, asynchronous, trigger, actor, mail or {}))


def _resume_keys(
    core: Core,
    keyed: Mapping[str, tuple[str, Any]],
    asynchronous: bool,
    trigger: str,
    actor: str | None = None,
    mail: Mapping[str, int] = {},  # noqa: B006 - read only
) -> AwaitableOrValue[list[Outcome]]:
    sessions: dict[str, _Session] = {}
    keys = {key: token for key, (token, _) in keyed.items()}
    found = core.store.find_tokens(list(keys))  # one read for every token
    # The waits of the tokens, with their parked lanes: read at once, when the first lane is
    # to be restored and the store reads many in one go (else one at a time, by wait_of).
    rows: dict[str, Any] | None = None
    many = getattr(core.store, "wait_many", None) if len(keys) > 1 else None
    for key, (token, value) in keyed.items():
        info = found.get(key)
        if info is None:
            raise UnknownToken(token)
        if info.used:
            raise TokenAlreadyUsed(info.session_id, token)
        session = sessions.get(info.session_id)
        if session is None:
            session = sessions[info.session_id] = _load(core, info.session_id, token)
        state = session.state
        if session.record.status == "running":
            raise _Busy(f"session {info.session_id!r} is running")
        if state.status != "paused":
            raise not_resumable(core, key, info.session_id, state.status, "resume")
        if not session.owned and concurrent(state):
            # Its own copy, once: each parked lane resumed goes back into it in place.
            session.state, session.owned = own(state), True
        got = UNREAD
        if many is not None and concurrent(state):
            if rows is None:
                rows = many(list(keys))
            got = rows.get(key)
        state, pause, lane = wait_of(core, key, session.state, owned=session.owned, found=got)
        if pause is None:
            raise not_resumable(core, key, info.session_id, state.status, "resume")
        data: dict[str, Any] = {} if actor is None else {"actor": actor}
        if lane is not None:
            data["lane"] = lane  # a recovery from the stored snapshot puts it back
        if pause.awaits_value:
            data["value"] = accepted(core, session.flow, pause, value)
        session.specs.append((ev.RUN_RESUMED, pause.path, data))
        session.kinds.append(pause.kind)
    now = core.clock.now()
    for session in sessions.values():
        # Folded into a copy of its own, in place: a fold that copied the state at every event
        # would copy the lanes of every waiting branch once per branch resumed.
        mine = session.state if session.owned else own(session.state)
        session.state, session.events = fold(mine, now, session.specs, owned=True)
    until = now + timedelta(seconds=core.lease)
    try:
        problems = core.store.consume_tokens(
            list(keys),
            owner=core.owner,
            until=until,
            events={sid: s.events for sid, s in sessions.items()},
            mail=mail,
        )
    except MailGone:
        raise  # a message is another's: nothing was written
    except ConcurrentUpdate as exc:  # a session moved on since we read it: nothing written
        raise _Busy(str(exc)) from None
    if problems:
        key, problem = next(iter(problems.items()))
        token = keys.get(key, key)
        if problem == "used":
            info = core.store.find_token(key)
            raise TokenAlreadyUsed(info.session_id if info else "?", token)
        raise UnknownToken(token)
    outcomes: list[AwaitableOrValue[Outcome]] = []
    for session in sessions.values():
        core.states.drop(session.record.state)
        core.flows.register(session.flow)
        meta = {"trigger": trigger, "resumed_kind": session.kinds[0], "resumed": len(session.kinds)}
        outcomes.append(
            start(
                core,
                session.flow,
                session.record,
                session.state,
                session.events,
                asynchronous=asynchronous,
                meta=meta,
                resume=prepare,
            )
        )
    if asynchronous or any(is_awaitable(o) for o in outcomes):
        return _gather(outcomes)
    return outcomes  # type: ignore[return-value]


def _load(core: Core, session_id: str, token: str) -> _Session:
    record = core.store.load(session_id)
    if record is None:
        raise UnknownToken(token)
    state = stored_state(core, record)
    flow = core.flows.flow_for(record, None, False)
    if core.states.get(record.state) is None:
        validate(record.session_id, record.fingerprint, state, flow)
    return _Session(record, state, flow)


async def _gather(outcomes: list[AwaitableOrValue[Outcome]]) -> list[Outcome]:
    """The outcomes, each awaited in turn where it is awaitable (the sessions were resumed in
    the store already: each is driven to its next pause or end)."""
    done = []
    for outcome in outcomes:
        if is_awaitable(outcome):
            outcome = await outcome  # type: ignore[misc]
        done.append(outcome)
    return done


def awaitable(result: AwaitableOrValue[list[Outcome]]) -> Awaitable[list[Outcome]]:
    """`result` as an awaitable (for `aresume_many`)."""
    if is_awaitable(result):
        return result  # type: ignore[return-value]

    async def ready() -> list[Outcome]:
        return result  # type: ignore[return-value]

    return ready()
