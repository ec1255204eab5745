"""SQLiteStore's schema and statements, shared by the store's method families (times and rows
convert in rows.py; the columns come from sql_common.py, which PostgresStore shares)."""

from __future__ import annotations

import builtins
import sqlite3
import threading
from collections.abc import Sequence
from functools import cache
from typing import Any

from tarry.engine.errors import ConcurrentUpdate
from tarry.engine.state.events import Event, Row, rows_of
from tarry.snapshots.sql_common import COLUMNS, Listing, select_sessions
from tarry.snapshots.sql_common import NAMES as _NAMES
from tarry.snapshots.sqlite import upkeep as upkeep
from tarry.snapshots.sqlite.rows import micros

#: 2: waits and the mailbox (sqlite/waits.py), backfilled for the paused sessions of a file at 1.
#: 3: log records (sqlite/logs.py), a table of their own.
#: 4: the mailbox a queue of messages per key (sqlite/waits.py), one message per earlier row.
#: 5: a wait row may hold its parked lane (`lane`); waits indexed by (session_id, wake_at).
#: 6: fewer index entries rewritten per pause and resume: the three indexes that led with
#: `status` go (sessions_list, sessions_due, sessions_expired); the timers' and the leases' are
#: partial, holding only the rows they serve (sessions_wake, sessions_lease).
#: 7: listing by status walks (phase, created_at, session_id), where `phase` is "live" for a
#: running or paused session and its status otherwise (sessions_phase_created): the index that
#: led with the status (sessions_status_created) moved an entry at every pause and every
#: resume, a page of WAL each; a phase changes only when the session ends (or a failed one is
#: resumed). Files made before get the column, filled in on open.
#: 8: a waiting branch's token lives in its wait row (sqlite/waits.py): `used` marks it used,
#: `ord` orders a key's waiters. The tokens table keeps only tokens with no wait (a failed
#: session's, a record's own before it waits) and those used before schema 8: each wait wrote
#: three more b-trees for its token (the table, its key and its session index). Files made
#: before move their live waits' tokens on open.
SCHEMA_VERSION = 8

#: A session's phase, from its status as the SQL expression `status` gives it: what the
#: listings by status walk (see SCHEMA_VERSION 7). Two comparisons, not an IN list.
_PHASE = "CASE WHEN {s} = 'running' OR {s} = 'paused' THEN 'live' ELSE {s} END"
#: The statuses whose phase is "live".
LIVE = frozenset({"running", "paused"})


def events_typed(db: sqlite3.Connection) -> bool:
    """Whether the events of the file `db` have their type in a column of its own (a file
    made before schema 8): its writes must fill it in."""
    return any(row[1] == "type" for row in db.execute("PRAGMA table_info(events)"))


def phase_of(status: str) -> str:
    """The phase a session of `status` has (see _PHASE)."""
    return "live" if status in LIVE else status


#: Rows per multi-row INSERT. Each row count is a statement of its own in the statement cache;
#: past a few dozen rows, one more statement per chunk costs less than a row does.
_ROWS_PER_INSERT = 32

#: Every commit writes each page it touched to the WAL, so each index a pause or a resume
#: updates costs a page (two when an entry moves across the index): the sessions table keeps
#: only indexes whose entries a pause -> resume leaves alone or that hold few rows.
#:
#: `list()` newest first without a status filter (the monitor's poll, `stats`) walks one of
#: the first two backwards instead of sorting the whole table; with a flow and a status, the
#: flow's (the status is a filter on it). Neither column changes after `create`, so pauses and
#: resumes never touch them. Timers (`due`, `claim_due`) walk the paused sessions that have a
#: time, by time: a session enters the index when it pauses with a timer and leaves it when it
#: resumes, and a pause without one never touches it. Lapsed leases (`expired`, of any status)
#: walk the leased sessions by lease: the resume that leases and the save that releases write
#: one entry each. Schema 6 dropped what led with status: an entry under (status, ...) moved at
#: every pause and every resume (sessions_list, sessions_due, sessions_expired). Then what
#: listing by status, `prune` and `stats` need (upkeep.SCHEMA).
_LATER_INDEXES = (
    "CREATE INDEX IF NOT EXISTS sessions_created ON sessions (created_at, session_id)",
    "CREATE INDEX IF NOT EXISTS sessions_flow_created ON sessions (flow, created_at, session_id)",
    "DROP INDEX IF EXISTS sessions_list",
    "DROP INDEX IF EXISTS sessions_due",
    "DROP INDEX IF EXISTS sessions_expired",
    # Schema 7: by phase instead of status (see SCHEMA_VERSION).
    "DROP INDEX IF EXISTS sessions_status_created",
    "CREATE INDEX IF NOT EXISTS sessions_phase_created ON sessions (phase, created_at, session_id)",
    "CREATE INDEX IF NOT EXISTS sessions_wake ON sessions (wake_at, session_id) "
    "WHERE status = 'paused' AND wake_at IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS sessions_lease ON sessions (lease_until, session_id) "
    "WHERE lease_until IS NOT NULL",
    *upkeep.SCHEMA,
    # Store-wide marks (SessionStore.mark), e.g. that a Runtime with a secret uses the store.
    "CREATE TABLE IF NOT EXISTS marks (name TEXT PRIMARY KEY)",
    # Each session a Child element started, by its parent, in the order they were created
    # (SessionStore.children): written with the child, so a parent whose drive never wrote
    # again (it died, it failed) still lists it and a cancel of it reaches it.
    "CREATE TABLE IF NOT EXISTS children (parent TEXT NOT NULL, child TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS children_parent ON children (parent)",
)

#: Columns added since version 1, with their definitions: added to files made before them.
_LATER_COLUMNS = (
    ("durability", "TEXT NOT NULL DEFAULT 'pause'"),
    ("stop", "TEXT"),
    ("phase", "TEXT"),
)
#: Fills in the phase of the sessions of a file made before schema 7.
FILL_PHASE = f"UPDATE sessions SET phase = {_PHASE.format(s='status')} WHERE phase IS NULL"

# The event log and the values are clustered on their keys (WITHOUT ROWID, since files made
# with schema 6): a rowid table with a composite primary key keeps a second b-tree for the key,
# so each event appended wrote two pages instead of one. A file made before keeps its layout
# (no statement depends on it), and nothing else differs, so the schema version stays. Since
# schema 8 an event's row has no `type` column: its blob names its type already, and no
# statement reads the column; a file made before keeps it and fills it in (see events_typed).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id   TEXT PRIMARY KEY,
    flow         TEXT NOT NULL,
    status       TEXT NOT NULL,
    state        BLOB NOT NULL,
    version      INTEGER NOT NULL,
    fingerprint  TEXT NOT NULL,
    flow_version BLOB NOT NULL,
    token        TEXT,
    wake_at      INTEGER,
    lease_owner  TEXT,
    lease_until  INTEGER,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    meta         BLOB NOT NULL,
    durability   TEXT NOT NULL DEFAULT 'pause',
    stop         TEXT,
    phase        TEXT
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    blob       BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vals (
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    idx        INTEGER NOT NULL,
    blob       BLOB NOT NULL,
    PRIMARY KEY (session_id, key, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tokens (
    token      TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    used       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tokens_session ON tokens (session_id);
"""

_SELECT = select_sessions("sessions")
#: `list`: every column but the state, which a listing leaves out (an empty blob in its place).


class _Listing(Listing):
    """A listing by status also names the phase, so that it walks sessions_phase_created (a
    listing of running or paused sessions skips the other live ones, which are few)."""

    def sql(self, *, status: str | None, **rest: Any) -> tuple[str, builtins.list[Any]]:
        sql, args = super().sql(status=status, **rest)
        if status is None:
            return sql, args
        return sql.replace("WHERE status = ?", "WHERE phase = ? AND status = ?", 1), [
            phase_of(status),
            *args,
        ]


LISTING = _Listing(
    select_sessions("sessions", state="X''"),
    "?",
    micros,
    "(substr(session_id, 1, length(?)) = ? OR instr(flow, ?) > 0)",
)
_INSERT = (
    f"INSERT INTO sessions ({COLUMNS}, phase) VALUES ({', '.join('?' * len(_NAMES))}, "
    f"{_PHASE.format(s='?3')})"
)
# Whether events continue a session's log: the seq before the first one (?P below; NULL when
# no events are written) must be stored, unless it is 0. The log is gap-free, so that is all
# it takes, with no MAX(seq) to look up; an event that is already stored breaks the events'
# primary key. Where a write updates the session's row anyway (save, a resume's lease), the
# check rides in that UPDATE and costs no statement of its own.
_CONTINUES = (
    "(?{p} IS NULL OR ?{p} = 0 "
    "OR EXISTS (SELECT 1 FROM events WHERE session_id = ?1 AND seq = ?{p}))"
)
# The indexed columns of a session that a pause -> resume does not change, by their place in
# _NAMES. SQLite rewrites an index entry whenever an UPDATE assigns one of its columns, even
# to the value it holds, so a save that assigned them all would rewrite two index pages per
# pause for nothing. A save leaves out those the store saw with the same values just before
# (SQLiteStore._seen) and checks them in the WHERE clause instead: if another writer changed
# one meanwhile, the UPDATE matches no row and the save assigns every column after all.
_INDEXED = tuple(_NAMES.index(n) for n in ("status", "flow", "created_at", "wake_at"))
_SEEN = ", ".join(_NAMES[i] for i in _INDEXED)
_ASSIGN_ALL = (False,) * len(_INDEXED)
# What a save holds when the store saw nothing of the session (a resume of many tokens, another
# store's session): its flow and creation time, which no save changes; a record that changes
# them after all costs the second UPDATE above.
_HOLD_UNSEEN = tuple(_NAMES[i] in ("flow", "created_at") for i in _INDEXED)


@cache
def _update(held: tuple[bool, ...], phase_held: bool = False) -> str:
    """Set every column but the id (?1) and the indexed ones `held` marks, which must hold
    their new value already; then the compare-and-set condition (?15) and the check (?16).
    The phase is set from the status (?3) unless `phase_held`: then it must hold it already
    (a pause after a resume, running -> paused, leaves sessions_phase_created alone)."""
    kept = {i for i, h in zip(_INDEXED, held, strict=True) if h}
    sets = ", ".join(f"{n} = ?{i + 1}" for i, n in enumerate(_NAMES) if i and i not in kept)
    held = "".join(f"AND {_NAMES[i]} IS ?{i + 1} " for i in sorted(kept))
    phase = _PHASE.format(s="?3")
    if phase_held:
        held += f"AND phase IS {phase} "
    else:
        sets += f", phase = {phase}"
    # ?3 is the new status: a stop request lasts while the session runs or waits, unless the
    # save honours it (?{n+3}: the record's `stop`; see SessionStore.save).
    n = len(_NAMES)
    sets += f", stop = CASE WHEN ?3 IN ('running', 'paused') AND stop IS NOT ?{n + 3} THEN stop END"
    return (
        f"UPDATE sessions SET {sets} WHERE session_id = ?1 AND version = ?{len(_NAMES) + 1} "
        f"{held}AND {_CONTINUES.format(p=len(_NAMES) + 2)}"
    )


class _Transaction:
    """`with store._write as db:` holds the store's lock and one write transaction, committed
    on success and rolled back on any error; `db` is the store's cursor. A class rather than a
    @contextmanager generator: it runs on every write, and costs half as much."""

    __slots__ = ("_db", "_cur", "_lock")

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self._db = db
        self._cur = db.cursor()
        self._lock = lock

    def __enter__(self) -> sqlite3.Cursor:
        self._lock.acquire()
        try:
            # IMMEDIATE takes the write lock now, so the reads inside the transaction
            # cannot be invalidated by another process before we write.
            self._cur.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise
        return self._cur

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        try:
            if kind is None:
                try:
                    self._cur.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            else:
                self._rollback()
        finally:
            self._lock.release()

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._cur.execute("ROLLBACK")


_LOAD = f"{_SELECT} WHERE session_id = ?"
_FOLLOWS = "SELECT 1 FROM sessions WHERE session_id = ?1 AND " + _CONTINUES.format(p=2)
# A used token's session runs from then on; the lease is taken when an owner (?2) is given.
# `_RESUMING_LIVE` for a session that was paused (or running) already: its phase stays "live"
# and its entry of sessions_phase_created where it is (the statement matches no row if it was
# not live after all); `_RESUMING` for any other (a failed session resumed).
_RESUMING = (
    "UPDATE sessions SET status = 'running', phase = 'live', "
    "lease_owner = COALESCE(?2, lease_owner), "
    "lease_until = CASE WHEN ?2 IS NULL THEN lease_until ELSE ?3 END "
    "WHERE session_id = ?1 AND " + _CONTINUES.format(p=4)
)
_RESUMING_LIVE = (
    "UPDATE sessions SET status = 'running', "
    "lease_owner = COALESCE(?2, lease_owner), "
    "lease_until = CASE WHEN ?2 IS NULL THEN lease_until ELSE ?3 END "
    "WHERE session_id = ?1 AND phase = 'live' AND " + _CONTINUES.format(p=4)
)
# What a used wait row keeps: its token, session, kind and key (a used token is refused as
# used); its path, pause and parked lane go, and it leaves the indexes of live waits. `used`
# becomes the time it was used (microseconds, SQLite's clock), so that its entry of the
# session's index (session_id, used, wake_at) goes to the end of the session's range instead
# of a random place in it: one page where a growing range of used tokens split several.
USED_WAIT = (
    "used = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER), "
    "path = X'', reason = '', payload = X'', lane = X'', wake_at = NULL"
)
# Use a live token: a wait's (the usual one) or one of the tokens table (no wait: a failed
# session's; or live since before schema 8, when every token had a row there).
_USE_WAIT_TOKEN = f"UPDATE waits SET {USED_WAIT} WHERE token = ? AND used = 0"
_USE_TOKEN = "UPDATE tokens SET used = 1 WHERE token = ? AND used = 0"
# A token's session and whether it is used, wherever it lives (in one of the two at most).
FIND_TOKEN = (
    "SELECT session_id, used FROM waits WHERE token = ?1 "
    "UNION ALL SELECT session_id, used FROM tokens WHERE token = ?1"
)
# The same for many tokens: (token, session id, used) rows.
FIND_TOKENS = (
    "SELECT token, session_id, used FROM waits WHERE token IN (SELECT value FROM json_each(?1)) "
    "UNION ALL "
    "SELECT token, session_id, used FROM tokens WHERE token IN (SELECT value FROM json_each(?1))"
)
# A live token's session, at which version and status (NULLs: the session is gone).
_TOKEN_VERSION = (
    "SELECT t.session_id, version, status FROM ("
    "SELECT session_id FROM waits WHERE token = ?1 AND used = 0 "
    "UNION ALL SELECT session_id FROM tokens WHERE token = ?1 AND used = 0"
    ") AS t LEFT JOIN sessions USING (session_id)"
)
_TOKEN_SESSION = (
    f"SELECT t.session_id, {_SEEN} FROM ("
    "SELECT session_id FROM waits WHERE token = ?1 "
    "UNION ALL SELECT session_id FROM tokens WHERE token = ?1"
    ") AS t LEFT JOIN sessions USING (session_id)"
)
# Lapsed leases of any status, by lease: a range of sessions_lease (which holds leased rows only).
_DUE = (
    f"{_SELECT} INDEXED BY sessions_wake WHERE status = 'paused' AND wake_at <= ? "
    "ORDER BY wake_at, session_id LIMIT ?"
)
_EXPIRED = (
    f"{_SELECT} WHERE lease_until <= ? AND (lease_until, session_id) > (?, ?) "
    "ORDER BY lease_until, session_id LIMIT ?"
)
# Due, free sessions (see SessionStore.claim_due), leased in the statement that finds them.
# INDEXED BY (here and in `due`): without statistics, the planner would rather take the status
# index and sort every paused session.
_CLAIM_DUE = f"""
UPDATE sessions SET lease_owner = ?1, lease_until = ?2 WHERE session_id IN (
    SELECT session_id FROM sessions INDEXED BY sessions_wake
    WHERE status = 'paused' AND wake_at <= ?3 AND (wake_at, session_id) > (?4, ?5)
    AND token IS NOT NULL AND (lease_until IS NULL OR lease_until <= ?3)
    AND NOT EXISTS (SELECT 1 FROM tokens WHERE tokens.token = sessions.token AND used)
    AND NOT EXISTS (SELECT 1 FROM waits WHERE waits.token = sessions.token AND used)
    ORDER BY wake_at, session_id LIMIT ?6
) RETURNING {COLUMNS}, stop
"""
# The sessions of live waits (SessionStore.claim_waits) that are paused and free, leased in the
# statement that finds them: each wait through its primary key, each session through its own
# (the unary `+`s keep the planner off the status index, which would walk every paused session).
# `_LIVE_WAITS` then reads which of the tokens are whose, in the same write transaction.
_CLAIM_WAITS = f"""
UPDATE sessions SET lease_owner = ?2, lease_until = ?3 WHERE session_id IN (
    SELECT session_id FROM waits WHERE token IN (SELECT value FROM json_each(?1)) AND used = 0
) AND +status = 'paused' AND (+lease_until IS NULL OR +lease_until <= ?4)
RETURNING {COLUMNS}, stop
"""
_LIVE_WAITS = (
    "SELECT token, session_id FROM waits WHERE token IN (SELECT value FROM json_each(?)) "
    "AND used = 0"
)


def _triples(rows: int, first: int, lead: str = "") -> str:
    """`rows` VALUES tuples of three numbered parameters each, from ?`first` on, each after
    `lead`: `_triples(2, 2, "?1, ")` is "(?1, ?2, ?3, ?4), (?1, ?5, ?6, ?7)"."""
    return ", ".join(
        f"({lead}?{first + 3 * i}, ?{first + 3 * i + 1}, ?{first + 3 * i + 2})" for i in range(rows)
    )


def _pairs(rows: int, first: int, lead: str = "") -> str:
    """`_triples` of two parameters each: `_pairs(2, 2, "?1, ")` is "(?1, ?2, ?3), (?1, ?4, ?5)"."""
    return ", ".join(f"({lead}?{first + 2 * i}, ?{first + 2 * i + 1})" for i in range(rows))


@cache
def _insert_events(rows: int, typed: bool) -> str:
    """Insert `rows` events of one session: the session id, then (seq, blob) per row, or
    (seq, type, blob) into a file made before schema 8 (`typed`: see events_typed)."""
    if typed:
        values = _triples(rows, 2, "?1, ")
        return f"INSERT INTO events (session_id, seq, type, blob) VALUES {values}"
    return f"INSERT INTO events (session_id, seq, blob) VALUES {_pairs(rows, 2, '?1, ')}"


@cache
def _append_events(rows: int, typed: bool) -> str:
    """Insert `rows` events if they continue the log: the session id, the seq before the first
    event, then (seq, blob) or (seq, type, blob) per row, as `_insert_events`. (Reading
    `events` in an INSERT into `events` makes SQLite stage the rows in a temporary table:
    inside a transaction, a SELECT and a plain INSERT cost less.)"""
    if typed:
        columns = "session_id, seq, type, blob"
        select = f"?1, column1, column2, column3 FROM (VALUES {_triples(rows, 3)})"
    else:
        columns = "session_id, seq, blob"
        select = f"?1, column1, column2 FROM (VALUES {_pairs(rows, 3)})"
    return f"INSERT INTO events ({columns}) SELECT {select} WHERE EXISTS ({_FOLLOWS})"


def event_rows(
    args: builtins.list[Any], rows: Sequence[Row], encoded: Sequence[bytes], typed: bool
) -> None:
    """Add the parameters of events (their `rows_of` and their blobs) to `args`, as the
    statements above take them."""
    if typed:
        for row, blob in zip(rows, encoded, strict=True):
            args += (row[0], row[1], blob)
    else:
        for row, blob in zip(rows, encoded, strict=True):
            args += (row[0], blob)


@cache
def _put_values(rows: int) -> str:
    """Put `rows` values of a session that exists: the session id, then (key, idx, blob)."""
    return (
        "INSERT OR REPLACE INTO vals (session_id, key, idx, blob) "
        f"VALUES {_triples(rows, 2, '?1, ')}"
    )


@cache
def _put_values_if_session(rows: int) -> str:
    """The same, for a session that may be gone (then nothing is written)."""
    return (
        "INSERT OR REPLACE INTO vals (session_id, key, idx, blob) "
        f"SELECT ?1, column1, column2, column3 FROM (VALUES {_triples(rows, 2)}) "
        "WHERE EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1)"
    )


_ADD_TOKEN = "INSERT OR IGNORE INTO tokens (token, session_id, used) VALUES (?, ?, 0)"


def _add_token(db: sqlite3.Cursor, token: str, session_id: str) -> None:
    """Register `token`, which no wait of this save holds, for the session (a failed session's
    token, a record's own). A token known already, here or in a wait, keeps its owner and its
    used flag (OR IGNORE): re-registering must never make a used token live again."""
    if db.execute("SELECT 1 FROM waits WHERE token = ?", (token,)).fetchone() is None:
        db.execute(_ADD_TOKEN, (token, session_id))


def _prev(session_id: str | None, events: Sequence[Event]) -> int | None:
    """The seq the stored log must end at for `events` to continue it (None for no events);
    ConcurrentUpdate at once if they do not follow each other."""
    if not events:
        return None
    prev = events[0].seq - 1
    _check_run(session_id or events[0].session_id, events, after=prev)
    return prev


def _check_run(session_id: str, events: Sequence[Event], *, after: int) -> None:
    for expected, row in enumerate(rows_of(events), start=after + 1):
        if row[0] != expected:
            msg = (
                f"session {session_id!r}: event seq {row[0]} does not follow "
                f"{expected - 1} (another writer got there first)"
            )
            raise ConcurrentUpdate(msg)


def _insert(
    db: sqlite3.Cursor,
    session_id: str,
    events: Sequence[Event],
    encoded: builtins.list[bytes],
    typed: bool,
) -> int:
    """Insert events whose continuity was checked (`typed`: see `_insert_events`); the bytes
    written. An event that is already stored raises ConcurrentUpdate (inside the caller's
    transaction, so nothing is kept)."""
    rows = rows_of(events)
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        stop = min(start + _ROWS_PER_INSERT, len(rows))
        args: builtins.list[Any] = [session_id]
        event_rows(args, rows[start:stop], encoded[start:stop], typed)
        try:
            db.execute(_insert_events(stop - start, typed), args)
        except sqlite3.IntegrityError as exc:
            if exc.sqlite_errorname != "SQLITE_CONSTRAINT_PRIMARYKEY":
                raise
            raise _not_continued(db, session_id, rows[0][0]) from exc
    return sum(map(len, encoded))


def _not_continued(db: sqlite3.Cursor, session_id: str, first: int) -> ConcurrentUpdate:
    """The error for events starting at seq `first` that do not continue the stored log."""
    if db.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone() is None:
        return ConcurrentUpdate(f"no session {session_id!r} to append events to")
    (last,) = db.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (session_id,)
    ).fetchone()
    return ConcurrentUpdate(
        f"session {session_id!r}: event seq {first} does not follow {last} "
        "(another writer got there first)"
    )


def _put(
    db: sqlite3.Cursor, session_id: str, values: Sequence[tuple[str, int, bytes]], sql: Any
) -> int:
    """Put `values` with `sql` (one of the two above); the bytes written."""
    written = 0
    for start in range(0, len(values), _ROWS_PER_INSERT):
        chunk = values[start : start + _ROWS_PER_INSERT]
        args: builtins.list[Any] = [session_id]
        for value in chunk:
            args += value
        if db.execute(sql(len(chunk)), args).rowcount:
            written += sum(len(blob) for _, _, blob in chunk)
    return written
