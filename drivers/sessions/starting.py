"""Starting a session: `Runtime.run` and its sync and async twins."""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from tarry.drivers.core import Core
from tarry.drivers.drive.drive import Drive
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import AwaitableOrValue, settle
from tarry.drivers.limits import DURABILITY, MAX_SESSION_ID, check_actor, valid_session_id
from tarry.engine.bounds import INLINE
from tarry.engine.describe import describe
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import (
    InvalidArgument,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownToken,
)
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.engine.state.records import SessionState
from tarry.engine.state.reducer import fold
from tarry.snapshots.codec.pack import loads
from tarry.snapshots.records import SessionRecord
from tarry.snapshots.store import MailGone

if TYPE_CHECKING:
    from tarry.snapshots.mail import MailRecord

#: How a waiting branch is resumed by its token: `resuming.prepare`, handed in by whoever drives
#: a session (resuming.py imports this module, so this one cannot import it back).
Resume = Callable[..., AwaitableOrValue[Outcome]]


def begin(
    core: Core,
    flow: Flow,
    input: Any,
    session_id: str | None,
    meta: dict[str, Any] | None,
    *,
    durability: str | None = None,
    asynchronous: bool,
    actor: str | None = None,
    resume: Resume,
    deadline: Any = None,
) -> AwaitableOrValue[Outcome]:
    """Check the arguments, create the session with its `run.started` event, and drive it.
    `durability` is the session's own (the Runtime's default when None). `resume`: how a
    wait of the session is resumed by its token (resuming.prepare; see `late_mail`).
    `deadline`: a timezone-aware datetime, or seconds from now (a number or a timedelta);
    the flow's own `deadline=` when None. Recorded in `run.started`."""
    check_actor(actor)
    core.tokens.check()  # SecretRequired: no unsigned session goes into a signed store
    if durability is None:
        durability = core.durability
    elif durability not in DURABILITY:
        msg = f"durability must be 'pause', 'step' or None (got {describe(durability)})"
        raise InvalidArgument(msg)
    core.flows.register(flow)
    input, size = core.take(input, "input")  # the session's own copy: the caller may change theirs
    started = {"input": input, "flow": flow.name}
    if actor is not None:
        started["actor"] = actor
    if size > INLINE:  # kept out of the state: stored once, with this event (state.OutOfLine)
        started["out_of_line"] = True
    if meta is not None:
        if not isinstance(meta, dict):
            msg = f"meta must be a dict (got {describe(meta)})"
            raise InvalidArgument(msg)
        core.check(meta, "meta")
    if session_id is not None and not valid_session_id(session_id):
        msg = (
            f"session_id must be a non-empty str of at most {MAX_SESSION_ID} characters, "
            f"valid UTF-8 (got {describe(session_id)})"
        )
        raise InvalidArgument(msg)
    sid = session_id or uuid.uuid4().hex
    meta = dict(meta or {})
    if core.tracing is not None:  # the session's trace context, for every drive of it
        core.tracing.started(sid, flow.name, meta)
    now = core.clock.now()
    due = deadline_at(deadline, flow, now)
    if due is not None:
        started["deadline"] = due
    if flow.cleanup is not None:
        started["cleanup"] = True
    record = SessionRecord(
        session_id=sid,
        flow=flow.name,
        status="running",
        state=b"",
        fingerprint=flow.fingerprint,
        flow_version=flow.version,
        lease_owner=core.owner,
        lease_until=now + timedelta(seconds=core.lease),
        created_at=now,
        updated_at=now,
        meta=meta,
        durability=durability,
    )
    initial = SessionState(session_id=sid, flow=flow.name)
    state, events = fold(initial, now, [(ev.RUN_STARTED, (), started)])
    core.store.create(record, events=events)  # SessionExists: nothing changed
    return start(core, flow, record, state, events, asynchronous=asynchronous, resume=resume)


def deadline_at(deadline: Any, flow: Flow, now: datetime) -> datetime | None:
    """When a session started `now` must have ended: `deadline` (a run's), else the flow's;
    InvalidArgument for anything but an aware datetime, a finite number or a timedelta. A
    time already past is kept: the session then fails at once (see drive.py)."""
    if deadline is None:
        return None if flow.deadline is None else now + timedelta(seconds=flow.deadline)
    if isinstance(deadline, datetime):
        if deadline.tzinfo is None or deadline.utcoffset() is None:
            msg = f"deadline must be a timezone-aware datetime (got the naive {deadline!r})"
            raise InvalidArgument(msg)
        return deadline.astimezone(UTC)
    if isinstance(deadline, timedelta):
        seconds = deadline.total_seconds()
    elif isinstance(deadline, int | float) and not isinstance(deadline, bool):
        seconds = float(deadline)
    else:
        msg = f"deadline must be a datetime or seconds (got {describe(deadline)})"
        raise InvalidArgument(msg)
    if not math.isfinite(seconds) or abs(seconds) > _MAX_SECONDS:
        msg = f"deadline must be a finite number of seconds (got {describe(deadline)})"
        raise InvalidArgument(msg)
    return now + timedelta(seconds=seconds)


#: The most seconds a deadline may lie ahead (or behind): about a thousand years.
_MAX_SECONDS = 3.2e10


def start(
    core: Core,
    flow: Flow,
    record: SessionRecord,
    state: SessionState,
    written: list[Event],
    *,
    asynchronous: bool = False,
    meta: dict[str, Any] | None = None,
    resume: Resume,
) -> AwaitableOrValue[Outcome]:
    """Drive a session whose opening `written` events are already in the store; then resume
    the waits it paused on that have a message queued (see `late_mail`)."""
    core.hub.announce(written)
    drive = Drive(core, flow, record, state, asynchronous=asynchronous, meta=meta)
    drive.ex.remember(written)  # the input it was started with: never read back in this run
    result = drive.start()
    if is_awaitable(result):
        return _late_mail_async(core, drive, result, resume)
    if drive.posted is not None:  # a child ended: its parent takes its end now
        settle_parent(core.wake_parent(core, drive.posted))
    if not drive.keyed and not core.running.mail_noted:
        return result
    return late_mail(core, drive, result, resume)  # type: ignore[arg-type]


def settle_parent(woken: Any) -> None:
    """Drive the parent's resume that a child's end began (`Core.wake_parent`) to its end,
    in a sync call: the parent may have async steps."""
    if is_awaitable(woken):
        settle(woken)


def late_mail(
    core: Core, drive: Drive, outcome: Outcome, resume: Resume
) -> AwaitableOrValue[Outcome]:
    """After a drive paused: the waits it paused on whose key holds a queued message take it.

    Two deliveries can miss their wait: one posted while the Wait was pausing (it found no
    message; the delivery found no wait yet) — looked for after the write that registered
    the wait, so a delivery either finds the wait or leaves a message that this finds —, and
    one that found this session running (another branch of it) and left its message for it
    (`Running.note_mail`). Each wait is resumed by its token with the message, consumed in the
    same transaction (`mail=`). Whatever this misses (a crash right after the write) the next
    worker round delivers (`SessionStore.pending`)."""
    if outcome.status != "paused":
        return outcome
    return _take_each(
        core, drive.flow, outcome, _waiting_mail(core, drive, outcome.session_id), resume
    )


#: A wait that cannot take its message now: resumed by its token meanwhile, its session ended
#: (a resume before it finished the run), or the message taken by another. What is left over
#: is the next worker round's (`SessionStore.pending`).
_PASSED = (TokenAlreadyUsed, UnknownToken, SessionNotResumable, MailGone)


def _take_each(
    core: Core,
    flow: Flow,
    outcome: Outcome,
    pending: list[tuple[str, MailRecord]],
    resume: Resume,
) -> AwaitableOrValue[Outcome]:
    """Resume each (token key, message) of `pending` in turn; the last outcome."""
    for i, (token, message) in enumerate(pending):
        try:
            got = resume(
                core,
                token,
                flow,
                False,
                value=loads(message.value),
                trigger="mail",
                mail=message.id,
            )
        except _PASSED:
            continue
        if is_awaitable(got):
            return _take_rest(core, flow, got, pending[i + 1 :], resume)
        outcome = got  # type: ignore[assignment]
    return outcome


async def _take_rest(
    core: Core,
    flow: Flow,
    got: Awaitable[Outcome],
    rest: list[tuple[str, MailRecord]],
    resume: Resume,
) -> Outcome:
    outcome = await got
    for token, message in rest:
        try:
            more = resume(
                core,
                token,
                flow,
                False,
                value=loads(message.value),
                trigger="mail",
                mail=message.id,
            )
        except _PASSED:
            continue
        outcome = await more if is_awaitable(more) else more  # type: ignore[misc]
    return outcome


def _waiting_mail(core: Core, drive: Drive, sid: str) -> list[tuple[str, MailRecord]]:
    """(token key, message) for each wait of the session that a queued message is for."""
    found: list[tuple[str, MailRecord]] = []
    taken: set[int] = set()
    keyed = drive.keyed
    if len(keyed) > 1:  # one lookup for them all (a wide pause registers thousands)
        keyed = {key: keyed[key] for key in core.store.queued_keys(list(keyed))}
    for key, token in keyed.items():
        for message in core.store.queued(key=key, limit=1):
            found.append((token, message))
            taken.add(message.id)
    if core.running.take_mail_note(sid):
        for message in core.store.queued(session_id=sid):
            if message.id in taken:
                continue
            for wait in core.store.waiting(key=message.key, limit=100):
                if wait.session_id == sid:
                    found.append((wait.token, message))
                    taken.add(message.id)
                    break
    return found


async def _late_mail_async(
    core: Core, drive: Drive, result: Awaitable[Outcome], resume: Resume
) -> Outcome:
    outcome = await result
    if drive.posted is not None:  # a child ended: its parent takes its end now
        woken = core.wake_parent(core, drive.posted)
        if is_awaitable(woken):
            await woken
    if not drive.keyed and not core.running.mail_noted:
        return outcome
    outcome = late_mail(core, drive, outcome, resume)
    if is_awaitable(outcome):
        outcome = await outcome  # type: ignore[misc]
    return outcome  # type: ignore[return-value]
