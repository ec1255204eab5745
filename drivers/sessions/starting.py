"""Starting a session: `Runtime.run` and its sync and async twins."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from tarry.drivers.core import Core
from tarry.drivers.drive.checking import fold
from tarry.drivers.drive.drive import Drive
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import AwaitableOrValue
from tarry.drivers.limits import DURABILITY, MAX_SESSION_ID, check_actor, valid_session_id
from tarry.engine.bounds import INLINE
from tarry.engine.describe import describe
from tarry.engine.errors import InvalidArgument, TokenAlreadyUsed
from tarry.engine.flow import Flow
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.engine.state.records import SessionState
from tarry.snapshots.codec.pack import loads
from tarry.snapshots.records import SessionRecord

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
) -> AwaitableOrValue[Outcome]:
    """Check the arguments, create the session with its `run.started` event, and drive it.
    `durability` is the session's own (the Runtime's default when None). `resume`: how a
    wait of the session is resumed by its token (resuming.prepare; see `late_mail`)."""
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
    now = core.clock.now()
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
        meta=dict(meta or {}),
        durability=durability,
    )
    initial = SessionState(session_id=sid, flow=flow.name)
    state, events = fold(initial, now, [(ev.RUN_STARTED, (), started)])
    core.store.create(record, events=events)  # SessionExists: nothing changed
    return start(core, flow, record, state, events, asynchronous=asynchronous, resume=resume)


def start(
    core: Core,
    flow: Flow,
    record: SessionRecord,
    state: SessionState,
    written: list[Event],
    *,
    asynchronous: bool = False,
    meta: dict[str, Any] | None = None,
    mail_done: Sequence[str] = (),
    resume: Resume,
) -> AwaitableOrValue[Outcome]:
    """Drive a session whose opening `written` events are already in the store. `mail_done`:
    keys of mail the session took before this drive (see `late_mail`), deleted with its first
    write."""
    core.hub.announce(written)
    drive = Drive(core, flow, record, state, asynchronous=asynchronous, meta=meta)
    drive.ex.remember(written)  # the input it was started with: never read back in this run
    drive.mail_done = list(mail_done)
    result = drive.start()
    if not drive.keyed and not is_awaitable(result):
        return result
    if is_awaitable(result):
        return _late_mail_async(core, drive, result, resume)
    return late_mail(core, drive, result, resume)  # type: ignore[arg-type]


def late_mail(
    core: Core, drive: Drive, outcome: Outcome, resume: Resume
) -> AwaitableOrValue[Outcome]:
    """After a drive paused at keyed waits: mail for those keys that was posted while the Wait
    was pausing (it had found none, and the delivery had found no wait yet) resumes the wait
    now. Looked up after the write that registered the waits, so a delivery either finds the
    wait or leaves mail that this finds."""
    if not drive.keyed:
        return outcome
    found = core.store.take_mail(list(drive.keyed), outcome.session_id)
    if not found:
        return outcome
    key, blob = next(iter(found.items()))  # one wait at a time (resume_many: all of them)
    try:
        return resume(
            core,
            drive.keyed[key],
            drive.flow,
            False,
            value=loads(blob),
            trigger="mail",
            mail_done=[key],
        )
    except TokenAlreadyUsed:
        return outcome  # resumed by its token meanwhile; the mail stays this session's


async def _late_mail_async(
    core: Core, drive: Drive, result: Awaitable[Outcome], resume: Resume
) -> Outcome:
    outcome = late_mail(core, drive, await result, resume)
    if is_awaitable(outcome):
        outcome = await outcome  # type: ignore[misc]
    return outcome  # type: ignore[return-value]
