"""Inspection: `Runtime.session`, `sessions`, `stats` and `logs`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tarry.drivers.core import Core
from tarry.drivers.limits import check_filters, check_limit, check_period, valid_session_id
from tarry.drivers.logs import level_number
from tarry.drivers.reading.stale import stale_records
from tarry.drivers.reading.stats import Stats, compute_stats
from tarry.drivers.reading.views import STALE, SessionSummary, SessionView, state_of
from tarry.engine.describe import describe
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import InvalidArgument, UnknownSession
from tarry.engine.state.events import EventLog
from tarry.snapshots.log_records import LogRecord
from tarry.snapshots.records import SessionRecord, fold_stored

#: Reads of a live session's events before settling for its stored state.
_LIVE_TRIES = 5
#: The largest seq a store keeps (a signed 64-bit int).
_LAST_SEQ = 2**63 - 1


def session(core: Core, session_id: str) -> SessionView:
    if not valid_session_id(session_id):
        raise UnknownSession(session_id)  # no such id can have been stored
    record = core.store.load(session_id)
    if record is None:
        raise UnknownSession(session_id)
    execution = core.running.sessions.get(session_id)
    if execution is not None:
        return _live(core, record, execution)
    return SessionView(core.store, record, core.tokens)


def _live(core: Core, record: SessionRecord, execution: Any) -> SessionView:
    """A view of a session this process is running: the stored snapshot, the events written
    since, and those its drive has not written yet, folded. Events never change once made and
    the fold is pure, so this is consistent whatever the drive does meanwhile; only a write
    landing between the two reads (a gap before the unwritten ones) makes it read again."""
    sid = record.session_id
    state = state_of(record)
    for _ in range(_LIVE_TRIES):
        written = core.store.events(sid, state.last_seq)
        tail = list(EventLog(sid, list(execution.rows)))  # one C-level copy: atomic
        last = written[-1].seq if written else state.last_seq
        if tail and tail[0].seq > last + 1:
            continue  # the drive wrote those between our two reads: read them again
        tail = [e for e in tail if e.seq > last]
        live = fold_stored(state, (*written, *tail))
        return SessionView(core.store, record, core.tokens, state=live, tail=tail)
    return SessionView(core.store, record, core.tokens)


def sessions(
    core: Core, status: str | None, flow: str | Flow | None, limit: int, offset: int
) -> list[SessionSummary]:
    name = flow.name if isinstance(flow, Flow) else flow
    check_filters(None if status == STALE else status, name)
    check_limit(limit)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        msg = f"offset must be an int >= 0 (got {describe(offset)})"
        raise InvalidArgument(msg)
    now = core.clock.now()
    if status == STALE:
        rows = stale_records(core.store, now, limit, skip=offset, flow=name)
    else:
        rows = core.store.list(status=status, flow=name, limit=limit, offset=offset)
    return [SessionSummary.of(r, now) for r in rows]


def stats(
    core: Core, flow: str | Flow | None, since: datetime | None, until: datetime | None
) -> Stats:
    name = flow.name if isinstance(flow, Flow) else flow
    check_filters(None, name)
    check_period(since, until)
    return compute_stats(core.store, flow=name, since=since, until=until)


def logs(
    core: Core, session_id: str, level: int | str | None, after: int, limit: int
) -> list[LogRecord]:
    if not valid_session_id(session_id):
        raise UnknownSession(session_id)  # no such id can have been stored
    levelno = 0 if level is None else level_number(level, "level")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        msg = f"after must be an int >= 0, a log record's seq (got {describe(after)})"
        raise InvalidArgument(msg)
    check_limit(limit)
    found = core.store.logs(session_id, levelno=levelno, after=after, limit=limit)
    if found is None:
        raise UnknownSession(session_id)
    return found


def dropped_logs(core: Core, session_id: str) -> int:
    if not valid_session_id(session_id):
        raise UnknownSession(session_id)
    dropped = core.store.dropped_logs(session_id)
    # A store says 0 for a session it does not have: as `logs`, UnknownSession then (asked
    # for no record: after the last seq a store can give).
    if not dropped and core.store.logs(session_id, levelno=0, after=_LAST_SEQ, limit=1) is None:
        raise UnknownSession(session_id)
    return dropped
