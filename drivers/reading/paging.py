"""`Runtime.sessions_page`: sessions newest first, a page at a time, by an opaque keyset cursor.

A cursor names the (creation time, session id) of the last session of a page; the next page
starts strictly after it in that order. So paging is stable while sessions are created (they
are newer: they never push rows from one page onto the next) and each page is an index range
read, however deep the page.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
from tarry.drivers.core import Core
from tarry.drivers.limits import check_filters, check_limit, check_period
from tarry.drivers.reading.stale import stale_records
from tarry.drivers.reading.views import STALE, SessionSummary
from tarry.engine.describe import describe
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import InvalidArgument

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@attrs.frozen
class SessionPage:
    """One page of `Runtime.sessions_page()`: its sessions, newest first, and the cursor of
    the next page (None on the last one)."""

    sessions: list[SessionSummary]
    next_cursor: str | None = None


def encode_cursor(created_at: dt.datetime, session_id: str) -> str:
    import base64
    import json  # loaded on first use: `import tarry` stays quick and loads no json

    micros = (created_at - _EPOCH) // dt.timedelta(microseconds=1)
    raw = json.dumps([micros, session_id], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: Any) -> tuple[dt.datetime, str]:
    """The (created_at, session id) a cursor names; InvalidArgument for anything else."""
    import base64
    import binascii
    import json

    try:
        if not isinstance(cursor, str) or not cursor:
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        micros, sid = json.loads(raw.decode("utf-8"))
        if type(micros) is not int or type(sid) is not str or not sid:
            raise ValueError
        return _EPOCH + dt.timedelta(microseconds=micros), sid
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, OverflowError):
        msg = (
            f"cursor must be the next_cursor of a previous page (got {describe(cursor)}, "
            f"which is not one)"
        )
        raise InvalidArgument(msg) from None


def sessions_page(
    core: Core,
    *,
    status: str | None,
    flow: str | Flow | None,
    q: str | None,
    since: dt.datetime | None,
    until: dt.datetime | None,
    limit: int,
    cursor: str | None,
) -> SessionPage:
    name = flow.name if isinstance(flow, Flow) else flow
    check_filters(None if status == STALE else status, name)
    check_limit(limit)
    check_period(since, until)
    if q is not None and not isinstance(q, str):
        msg = f"q must be None or a str (got {describe(q)})"
        raise InvalidArgument(msg)
    before = decode_cursor(cursor) if cursor is not None else None
    # One more than asked for says whether a next page exists; the store reads that far only.
    now = core.clock.now()
    filters = {"flow": name, "before": before, "since": since, "until": until, "search": q or None}
    if status == STALE:  # shown, not stored: the running sessions whose lease lapsed
        rows = stale_records(core.store, now, limit + 1, **filters)
    else:
        rows = core.store.list(status=status, limit=limit + 1, **filters)
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if rows and more else None
    next_cursor = encode_cursor(last.created_at, last.session_id) if last is not None else None
    return SessionPage([SessionSummary.of(r, now) for r in rows], next_cursor)
