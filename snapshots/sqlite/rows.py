"""SQLiteStore's rows: a time is integer microseconds since the epoch (UTC), which compares
correctly in SQL (ISO strings with mixed offsets would not), and a SessionRecord becomes a
sessions row and back through what both SQL stores share (sql_common.Rows)."""

from __future__ import annotations

import datetime as dt

from tarry.snapshots.sql_common import Rows

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def micros(at: dt.datetime) -> int:
    """`at` as SQLite keeps it."""
    return (at - _EPOCH) // _MICROSECOND  # exact, in one C call


def maybe_micros(at: dt.datetime | None) -> int | None:
    return None if at is None else micros(at)


def from_micros(kept: int) -> dt.datetime:
    """A time as SQLite keeps it, back as a datetime (UTC)."""
    return _EPOCH + dt.timedelta(microseconds=kept)


#: Records as rows and back.
ROWS = Rows(time=micros, datetime=from_micros)
