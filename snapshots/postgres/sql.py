"""PostgresStore's statements, times and rows, shared by the store's method families (the
columns and the row conversion come from sql_common.py, which SQLiteStore shares)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from tarry.engine.errors import ConcurrentUpdate
from tarry.engine.state.events import Event
from tarry.snapshots.sql_common import COLUMNS, Listing, Rows, select_sessions

try:
    import psycopg
    from psycopg import errors as pg_errors
except ModuleNotFoundError as exc:  # the optional extra is missing (postgres.py says so first)
    msg = "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'tarry[postgres]'"
    raise ModuleNotFoundError(msg, name=exc.name) from exc

SELECT = select_sessions("tarry_sessions")
# Events go in only if they continue the log: the last stored seq must be the one before
# the first. Two writers that both read the same last seq insert the same next one, and the
# primary key makes the second wait for the first and then fail: the log stays gap-free.
_APPEND = (
    "INSERT INTO tarry_events (session_id, seq, type, blob) "
    "SELECT %(sid)s, s, t, b "
    "FROM unnest(%(seqs)s::bigint[], %(types)s::text[], %(blobs)s::bytea[]) AS e(s, t, b) "
    "WHERE (SELECT COALESCE(max(seq), 0) FROM tarry_events WHERE session_id = %(sid)s) "
    "= %(after)s"
)
_PUT = (
    "INSERT INTO tarry_values (session_id, key, idx, blob) "
    "SELECT %(sid)s, k, i, b "
    "FROM unnest(%(keys)s::text[], %(indexes)s::bigint[], %(blobs)s::bytea[]) AS v(k, i, b) "
    "WHERE EXISTS (SELECT 1 FROM tarry_sessions WHERE session_id = %(sid)s) "
    "ON CONFLICT (session_id, key, idx) DO UPDATE SET blob = EXCLUDED.blob"
)
_FREE = (
    "(lease_owner IS NULL OR lease_until IS NULL OR lease_until <= %(now)s "
    "OR lease_owner = %(owner)s)"
)
# SKIP LOCKED: a claimant that finds the row locked gives up at once instead of queueing
# behind whoever holds it (another claimant, or a resumer saving it). NO KEY UPDATE is the
# lock the UPDATE itself takes; it does not conflict with the key-share locks that inserts
# of events and values take through their foreign keys.
CLAIM = (
    "UPDATE tarry_sessions SET lease_owner = %(owner)s, lease_until = %(until)s "
    "WHERE session_id = (SELECT session_id FROM tarry_sessions "
    f"WHERE session_id = %(sid)s AND {_FREE} FOR NO KEY UPDATE SKIP LOCKED)"
)
# Due, free sessions (see SessionStore.claim_due), leased in the statement that finds them.
# SKIP LOCKED: rows that another worker is claiming (or a resumer is saving) are passed over,
# so concurrent workers take disjoint pages instead of all fetching the earliest sessions and
# racing for their tokens. Written so that every plan is index scans only, whatever the
# statistics say (a claim must not cost more as the store grows; see tests/snapshots/postgres/
# test_postgres_plans.py):
# - the partial index tarry_sessions_due serves the scan in order, and the LIMIT stops it;
# - the token's use is a scalar subquery, a probe of the tokens' primary key per row read: as
#   `NOT EXISTS (… used)` it was an anti join, which a planner that believes no token is used
#   (a store whose waits were never resumed) ran as a scan of the whole tokens table;
# - the rows found go to the UPDATE as an array of ids, each updated through the primary key:
#   `session_id IN (…)` became a hash semi join over a scan of the whole sessions table under a
#   generic plan (the one a prepared statement gets after five runs), which assumes that
#   LIMIT $n keeps a tenth of the rows.
_CLAIM_DUE_ROWS = """
    SELECT c.session_id FROM tarry_sessions AS c
    WHERE c.status = 'paused' AND c.wake_at IS NOT NULL AND c.wake_at <= %(now)s {after}
    AND c.token IS NOT NULL AND (c.lease_until IS NULL OR c.lease_until <= %(now)s)
    AND (SELECT t.used FROM tarry_tokens AS t WHERE t.token = c.token) IS NOT TRUE
    ORDER BY c.wake_at, c.session_id LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
"""
_CLAIM_DUE_SQL = (
    "UPDATE tarry_sessions SET lease_owner = %(owner)s, lease_until = %(until)s "
    "WHERE session_id = ANY(ARRAY({rows})) RETURNING " + COLUMNS + ", stop"
)
CLAIM_DUE = _CLAIM_DUE_SQL.format(rows=_CLAIM_DUE_ROWS.format(after=""))
CLAIM_DUE_AFTER = _CLAIM_DUE_SQL.format(
    rows=_CLAIM_DUE_ROWS.format(
        after="AND (c.wake_at, c.session_id) > (%(after_at)s, %(after_id)s)"
    )
)
# The sessions of live waits (see SessionStore.claim_waits) that are paused and free, leased in
# the statement that finds them, each returned with its tokens among those asked. SKIP LOCKED,
# as in CLAIM_DUE: rounds that found the same ready waits take disjoint sessions, and none
# waits for another (or for a resumer saving one). Only session rows are locked, in id order.
# Index scans only, whatever the statistics say: a probe of the waits' primary key per token
# (LIMIT 1 keeps the planner from making it a join, which it runs as a scan of a small waits
# table), the sessions through theirs (as an array of ids, for the reason given at CLAIM_DUE).
CLAIM_WAITS = (
    "WITH live AS (SELECT w.token, w.session_id FROM unnest(%(tokens)s::text[]) AS t(token), "
    "LATERAL (SELECT token, session_id FROM tarry_waits "
    "WHERE tarry_waits.token = t.token LIMIT 1) AS w), "
    "claimed AS (UPDATE tarry_sessions SET lease_owner = %(owner)s, lease_until = %(until)s "
    "WHERE session_id = ANY(ARRAY("
    "SELECT c.session_id FROM tarry_sessions AS c "
    "WHERE c.session_id = ANY(ARRAY(SELECT DISTINCT session_id FROM live)) "
    "AND c.status = 'paused' AND (c.lease_until IS NULL OR c.lease_until <= %(now)s) "
    "ORDER BY c.session_id FOR NO KEY UPDATE SKIP LOCKED)) "
    "RETURNING " + COLUMNS + ", stop) "
    "SELECT claimed.*, ARRAY(SELECT token FROM live WHERE live.session_id = claimed.session_id) "
    "FROM claimed"
)
RENEW = (
    "UPDATE tarry_sessions SET lease_owner = %(owner)s, lease_until = %(until)s "
    f"WHERE session_id = %(sid)s AND {_FREE}"
)


# -- events and values ---------------------------------------------------------------------------


def session_exists(conn: psycopg.Connection[Any], session_id: str) -> bool:
    """Whether the session exists."""
    found = conn.execute(
        "SELECT 1 FROM tarry_sessions WHERE session_id = %s", (session_id,)
    ).fetchone()
    return found is not None


def check_batch(events: Sequence[Event]) -> None:
    """ConcurrentUpdate unless the events' seqs are consecutive."""
    for offset, event in enumerate(events):
        expected = events[0].seq + offset
        if event.seq != expected:
            msg = (
                f"session {event.session_id!r}: event seq {event.seq} does not follow "
                f"{expected - 1} (another writer got there first)"
            )
            raise ConcurrentUpdate(msg)


def insert_events(
    conn: psycopg.Connection[Any], session_id: str, events: Sequence[Event], encoded: list[bytes]
) -> psycopg.Cursor[Any] | None:
    """Send the insert of `events`, which happens only if they continue the stored log
    without a gap; `check_appended` then tells whether it did. None for no events."""
    if not events:
        return None
    check_batch(events)
    return conn.execute(
        _APPEND,
        {
            "sid": session_id,
            "after": events[0].seq - 1,
            "seqs": [e.seq for e in events],
            "types": [e.type for e in events],
            "blobs": encoded,
        },
    )


def check_appended(
    appended: psycopg.Cursor[Any] | None, session_id: str, events: Sequence[Event]
) -> None:
    """ConcurrentUpdate (inside the caller's transaction, so nothing is kept) if the insert
    `insert_events` sent left the events out."""
    if appended is not None and appended.rowcount != len(events):
        raise conflict(None, session_id, events)


def conflict(
    exc: Exception | None, session_id: str, events: Sequence[Event] = ()
) -> ConcurrentUpdate:
    """The ConcurrentUpdate for a write that lost: to a missing session (foreign key), to
    another writer of the same seq (primary key), or to a log that moved on."""
    if isinstance(exc, pg_errors.ForeignKeyViolation):
        return ConcurrentUpdate(f"no session {session_id!r} to write to")
    if isinstance(exc, pg_errors.UniqueViolation):
        return ConcurrentUpdate(f"session {session_id!r}: an event seq was already stored")
    first = events[0].seq if events else "?"
    return ConcurrentUpdate(
        f"session {session_id!r}: events from seq {first} do not continue its log "
        "(another writer got there first)"
    )


def insert_values(
    conn: psycopg.Connection[Any], session_id: str, values: Sequence[tuple[str, int, bytes]]
) -> psycopg.Cursor[Any] | None:
    """Send the insert (or replacement) of values; a row count of 0 means the session is
    unknown and they were dropped, as in the other stores. None for no values."""
    if not values:
        return None
    # One row per (key, index), the last one given winning: a single INSERT … ON CONFLICT
    # may not touch a row twice.
    rows = {(key, index): blob for key, index, blob in values}
    return conn.execute(
        _PUT,
        {
            "sid": session_id,
            "keys": [k for k, _ in rows],
            "indexes": [i for _, i in rows],
            "blobs": list(rows.values()),
        },
    )


def values_size(values: Sequence[tuple[str, int, bytes]]) -> int:
    """The bytes of the blobs of `values`."""
    return sum(len(blob) for _, _, blob in values)


# -- times and rows ------------------------------------------------------------------------------


def as_timestamptz(at: dt.datetime) -> dt.datetime:
    """`at` as PostgreSQL takes it: as it is, a timestamptz."""
    return at


def utc(at: dt.datetime) -> dt.datetime:
    """A timestamptz as read, in UTC (connections use UTC: see PostgresStore._configure)."""
    return at.astimezone(dt.UTC)


#: Records as rows and back.
ROWS = Rows(time=as_timestamptz, datetime=utc)
#: `list`: every column but the state, which a listing leaves out (an empty blob in its place).
LISTING = Listing(
    select_sessions("tarry_sessions", state="''::bytea"),
    "%s",
    as_timestamptz,
    "(starts_with(session_id, %s) OR strpos(flow, %s) > 0)",
)
