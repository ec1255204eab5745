"""Timers: `Runtime.resume_due` resumes every Sleep, retry back-off and timed-out Gate or Wait
whose time has come — each session inside its own error boundary (boundary.py).

Due sessions are claimed a page at a time (`SessionStore.claim_due`): the claim leases them to
this runtime in the statement that finds them, so concurrent workers take disjoint pages
instead of racing for the same earliest sessions' tokens. A session that cannot be handled is
given back and paged past (the page after it starts at its (wake_at, session id)), so however
many of them come first in line, the ones behind still fire in the same round.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import Any

from tarry.drivers.core import Core
from tarry.drivers.drive.drive import deadline_error
from tarry.drivers.drive.outcome import Outcome, all_pauses
from tarry.drivers.drive.pump import settle, settle_many
from tarry.drivers.limits import check_limit, log
from tarry.drivers.rounds.boundary import Round, flow_of, guarded, no_flow
from tarry.drivers.rounds.delivering import deferred_wakes
from tarry.drivers.sessions.batch import resume_keys
from tarry.drivers.sessions.children import QUEUED, fail_unknown_flow
from tarry.drivers.sessions.control import cancel_stopped, end_waiting
from tarry.drivers.sessions.resuming import prepare, stored_state
from tarry.drivers.sessions.starting import settle_parent
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import (
    ConcurrentUpdate,
    SessionNotResumable,
    SnapshotError,
    TokenAlreadyUsed,
    UnknownToken,
)
from tarry.engine.state.lanes import concurrent, parked, restore
from tarry.engine.state.records import DEADLINE_EXCEEDED, ErrorInfo, SessionState
from tarry.engine.state.reducer import error_to_data, own
from tarry.snapshots.records import SessionRecord, decode_lane

#: Due sessions claimed at a time: a worker holds no more than it is about to resume, so that
#: long resumes do not keep sessions from idle workers (and claims do not lapse in its hands).
PAGE = 20


def resume_due(core: Core, limit: int, round: Round | None = None) -> list[Outcome]:
    """Resume up to `limit` due sessions; the outcomes of those resumed (a session failed by
    its boundary included). Sessions set aside do not count towards `limit`."""
    check_limit(limit)
    core.tokens.check()
    round = round or Round()
    now = core.clock.now()
    until = now + timedelta(seconds=core.lease)
    outcomes: list[Outcome] = []
    after = None
    while len(outcomes) < limit and not round.stopping():
        wanted = min(limit - len(outcomes), PAGE)
        page = core.store.claim_due(now, core.owner, until, limit=wanted, after=after)
        started = 0
        # The children of the page that end wake their parents once the page is done, each
        # parent once with every end it waits for (delivering.deferred_wakes).
        with deferred_wakes(core, round):
            try:
                for record in page:
                    if round.stopping():
                        break
                    started += 1
                    outcome = guarded(
                        core,
                        "resume_due",
                        record,
                        round,
                        lambda r=record: _fire(core, r, now, round),
                        claimed=True,
                    )
                    if outcome is not None:
                        outcomes.append(outcome)
            finally:
                # Claimed but not started (the round stops, or ends with an error): let other
                # workers have them now rather than when the claims lapse.
                _give_back(core, page[started:])
        if len(page) < wanted:
            break  # nothing else is due and free
        last = page[-1]
        after = (last.wake_at, last.session_id)
    return outcomes


def _give_back(core: Core, records: list[SessionRecord]) -> None:
    for record in records:
        try:
            core.store.release(record.session_id, core.owner)
        except Exception:  # the store is away: the claims lapse after the lease instead
            return


def _fire(core: Core, record: SessionRecord, now: datetime, round: Round) -> Outcome | None:
    token = record.token
    if token is None:
        return None
    if record.stop is not None:  # a stop request its run paused before it saw
        return _honour_stop(core, record, flow_of(core, record, round, "resume_due"))
    flow = flow_of(core, record, round, "resume_due", warn=False)
    if flow is None:
        # A queued child that no worker can run fails (and so does its Child element), rather
        # than wait for a flow that may never be registered.
        ended = fail_unknown_flow(core, record)
        if ended is not None:
            log().warning(
                "resume_due: no flow %r registered for the child session %s, which no worker "
                "started yet: it failed with UnknownFlow (resume it once its flow is registered)",
                record.flow,
                record.session_id,
            )
            settle_parent(core.wake_parent(core, ended))
        else:
            no_flow(core, record, "resume_due")
        return None
    state = stored_state(core, record)
    deadline = state.deadline
    if (
        deadline is not None
        and deadline <= now
        and state.ending is None
        and state.status == "paused"
    ):
        return _expire(core, record, state, flow)
    if state.status == "paused" and concurrent(state):
        return _fire_lanes(core, record, state, flow, now)
    pause = state.pause
    if state.status != "paused" or pause is None:
        return None
    # Claimed just now, so the resume need not read it again: it uses the token only while
    # the session is still at this version (see resuming._prepare).
    core.records.keep(token, record)
    try:
        if pause.wake_at is not None and pause.wake_at <= now:
            return settle(prepare(core, token, None, False, trigger="timer"))
        if pause.wake_at is None and pause.expires_at is None and not pause.awaits_value:
            # A run a stopping worker paused at a checkpoint and handed back (`hand_back`),
            # or a child queued by its parent: due at the record's wake_at, which claim_due
            # checked.
            trigger = "child" if pause.reason == QUEUED else "timer"
            return settle(prepare(core, token, None, False, trigger=trigger))
        if pause.expires_at is None or pause.expires_at > now:
            return None
        element = flow.find(pause.path) if record.fingerprint == flow.fingerprint else None
        expire = getattr(element, "expire", None)
        if expire is None:
            if core.reported.first(record.session_id, "no timeout"):
                log().warning(
                    "resume_due: session %s waits at %s, which has no timeout in flow %r as "
                    "registered (logged once per session)",
                    record.session_id,
                    pause.path,
                    record.flow,
                )
            return None
        expiry = expire(pause)  # as the pause recorded it when reached
        if expiry.error is None:
            return settle(prepare(core, token, None, False, value=expiry.value, trigger="timeout"))
        error = ErrorInfo(
            type=expiry.error, message=expiry.message, path=pause.path, retryable=True, attempts=1
        )
        return settle(prepare(core, token, None, False, trigger="timeout", failure=error))
    except (TokenAlreadyUsed, UnknownToken, SessionNotResumable):
        return None  # resumed, cancelled or fired by someone else first


def _expire(core: Core, record: SessionRecord, state: SessionState, flow: Flow) -> Outcome | None:
    """A waiting session whose deadline passed fails with "deadline_exceeded" at its wait:
    through the token of its wait as a timeout that fails the run does, or, when its flow has
    a cleanup, with every wait ended and the cleanup run first (control.end_waiting)."""
    token = record.token
    assert token is not None  # (_fire returned before)
    pause = state.pause
    path = pause.path if pause is not None else ()
    error = deadline_error(state, path)
    try:
        if not state.cleanup:
            core.records.keep(token, record)
            return settle(prepare(core, token, flow, False, trigger="deadline", failure=error))
        if parked(state):  # its lanes come back from their rows: the cleanup drops them all
            waits = core.store.waits(record.session_id)
            with contextlib.suppress(SnapshotError):
                state = restore(own(state), [decode_lane(w.lane) for w in waits if w.lane])
        else:
            waits = core.store.waits(record.session_id)
        tokens = [w.token for w in waits]
        if token not in tokens:
            tokens.append(token)
        end = {"error": error_to_data(error), "path": path}
        done = end_waiting(core, record, state, tokens, None, DEADLINE_EXCEEDED, end, flow)
        if done is None:
            return None
        outcome = settle(done)
        # Its children that have not ended are cancelled, as by a cancel of it (a drive
        # that fails it without a cleanup does so itself: drive.py `_finish`).
        core.cancel_children(core, record.session_id)
        return outcome
    except (TokenAlreadyUsed, UnknownToken, SessionNotResumable, ConcurrentUpdate):
        return None  # resumed, cancelled or fired by someone else first


def _honour_stop(core: Core, record: SessionRecord, flow: Flow | None) -> Outcome | None:
    """A paused session that keeps a stop request (stored while it ran; its run paused before
    it saw it, so it is due now): a cancel cancels it (its cleanup run first, when its flow
    has one); an abort asked it to stop, and it waits already: the request is cleared, and it
    is due when its waits are (or its deadline)."""
    if record.stop == "cancel":
        done = cancel_stopped(core, record, None, None, flow)
        return None if done is None else settle(done)
    state = stored_state(core, record)
    times = [t for p in all_pauses(state) if (t := p.wake_at or p.expires_at) is not None]
    if state.deadline is not None and state.ending is None:
        times.append(state.deadline)
    record.wake_at = min(times) if times else None  # (the store adds those of parked lanes)
    record.lease_owner = record.lease_until = None
    # (record.stop: the request it honours. Resumed or cancelled meanwhile: its drive, or
    # the cancel, saw the request.)
    with contextlib.suppress(ConcurrentUpdate):
        core.store.save(record, record.version)
    return None


def _fire_lanes(
    core: Core, record: SessionRecord, state: SessionState, flow: Flow, now: datetime
) -> Outcome | None:
    """The due waits of a session whose concurrent containers wait in several lanes: every
    timer and back-off due, and every deadline passed with a value to go on with, resumed
    together (one drive, one write); a deadline that fails the run fails it alone."""
    # Its waits as the store keeps them: those of lanes parked in their rows, and those the
    # state holds; each with its token.
    waits = []
    tokens: dict[tuple[Any, ...], str] = {}
    for w in core.store.waits(record.session_id):
        if w.lane:
            pause = decode_lane(w.lane).pause
            if pause is not None:
                waits.append(pause)
        tokens[w.path] = w.token
    waits += all_pauses(state)
    due = [
        p
        for p in waits
        if (p.wake_at is not None and p.wake_at <= now)
        or (p.expires_at is not None and p.expires_at <= now)
        or (p.wake_at is None and p.expires_at is None and not p.awaits_value)
    ]
    if not due:
        return None
    if state.pause is not None and record.token:
        tokens.setdefault(state.pause.path, record.token)
    values: dict[str, tuple[str, Any]] = {}
    try:
        for pause in due:
            key = tokens.get(pause.path)
            if key is None:
                continue
            if pause.expires_at is None or (pause.wake_at is not None and pause.wake_at <= now):
                values[key] = (key, None)
                continue
            element = flow.find(pause.path) if record.fingerprint == flow.fingerprint else None
            expire = getattr(element, "expire", None)
            if expire is None:
                continue
            expiry = expire(pause)  # as the pause recorded it when reached
            if expiry.error is not None:
                error = ErrorInfo(
                    type=expiry.error,
                    message=expiry.message,
                    path=pause.path,
                    retryable=True,
                    attempts=1,
                )
                return settle(prepare(core, key, None, False, trigger="timeout", failure=error))
            values[key] = (key, expiry.value)
        if not values:
            return None
        outcomes = settle_many(resume_keys(core, values, trigger="timer"))
    except (TokenAlreadyUsed, UnknownToken, SessionNotResumable):
        return None  # resumed, cancelled or fired by someone else first
    return outcomes[0] if outcomes else None


def hand_back(core: Core, session_id: str) -> bool:
    """Make a session that was stopped at a checkpoint (paused with kind "system" and no timer:
    an abort) due now, so that any worker's `resume_due` continues it: what a worker that is
    told to stop does with the session it was running. False when the session is not such a
    pause (it was resumed or ended meanwhile, say)."""
    record = core.store.load(session_id)
    if record is None or record.status != "paused":
        return False
    state = stored_state(core, record)
    if record.wake_at is not None and record.wake_at != state.deadline:
        return False  # due at a timer of its own (its deadline alone is no wait's)
    pause = state.pause
    if (
        pause is None
        or pause.kind != "system"
        or pause.awaits_value
        or pause.wake_at is not None
        or pause.expires_at is not None
    ):
        return False
    now = core.clock.now()
    record.wake_at = now
    record.updated_at = now
    try:
        core.store.save(record, record.version)
    except ConcurrentUpdate:
        return False  # someone resumed or cancelled it first
    return True
