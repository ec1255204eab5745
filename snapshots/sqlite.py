"""SQLiteStore: the embedded durable store, one file shared by threads and processes (WAL)."""

from __future__ import annotations

import builtins  # `list` below is a method; annotations after it name the type this way
import datetime as dt
import os
import sqlite3
import threading
from collections.abc import Sequence
from functools import cache
from typing import Any

from tarry.engine.errors import ConcurrentUpdate, SessionExists, SnapshotError
from tarry.engine.events import Event

from . import sqlite_upkeep as upkeep
from ._codec import dumps, loads
from .records import _EPOCH, SessionRecord, TokenInfo, _micros, decode_event, encode_events
from .store import ENDED
from .tally import Totals

SCHEMA_VERSION = 1

#: Rows per multi-row INSERT. Each row count is a statement of its own in the statement cache;
#: past a few dozen rows, one more statement per chunk costs less than a row does.
_ROWS_PER_INSERT = 32
#: How `dumps` writes None and an empty map (most records' flow_version and meta).
_NIL, _EMPTY_MAP = b"\xc0", b"\x80"

# Datetimes are integer microseconds since the epoch (UTC): they compare correctly in SQL,
# which ISO strings with mixed offsets would not.
#: `list()` newest first without a status filter (the monitor's poll, `stats`) walks one of
#: these backwards instead of sorting the whole table. Neither column changes after `create`,
#: so pauses and resumes never touch them. Then what listing by status, `prune` and `stats`
#: need (sqlite_upkeep.SCHEMA).
_LATER_INDEXES = (
    "CREATE INDEX IF NOT EXISTS sessions_created ON sessions (created_at, session_id)",
    "CREATE INDEX IF NOT EXISTS sessions_flow_created ON sessions (flow, created_at, session_id)",
    *upkeep.SCHEMA,
    # Store-wide marks (SessionStore.mark), e.g. that a Runtime with a secret uses the store.
    "CREATE TABLE IF NOT EXISTS marks (name TEXT PRIMARY KEY)",
)

#: Columns added since version 1, with their definitions: added to files made before them.
_LATER_COLUMNS = (
    ("durability", "TEXT NOT NULL DEFAULT 'pause'"),
    ("stop", "TEXT"),
)

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
    stop         TEXT
);
CREATE INDEX IF NOT EXISTS sessions_list ON sessions (status, flow, created_at);
CREATE INDEX IF NOT EXISTS sessions_due ON sessions (status, wake_at);
CREATE INDEX IF NOT EXISTS sessions_expired ON sessions (status, lease_until);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    blob       BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS vals (
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    idx        INTEGER NOT NULL,
    blob       BLOB NOT NULL,
    PRIMARY KEY (session_id, key, idx)
);
CREATE TABLE IF NOT EXISTS tokens (
    token      TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    used       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tokens_session ON tokens (session_id);
"""

_NAMES = (
    "session_id", "flow", "status", "state", "version", "fingerprint", "flow_version", "token",
    "wake_at", "lease_owner", "lease_until", "created_at", "updated_at", "meta", "durability",
)  # fmt: skip
_COLUMNS = ", ".join(_NAMES)
# `stop` is read with every record but written only by request_stop (and cleared by a save
# that ends the run, or a token's use): a record's own `stop` is never written.
_SELECT = f"SELECT {_COLUMNS}, stop FROM sessions"
#: Every column but the state, which a listing leaves out (an empty blob in its place).
_SUMMARY = (
    "SELECT " + ", ".join("X''" if n == "state" else n for n in _NAMES) + ", stop FROM sessions"
)
_INSERT = f"INSERT INTO sessions ({_COLUMNS}) VALUES ({', '.join('?' * len(_NAMES))})"
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


@cache
def _update(held: tuple[bool, ...]) -> str:
    """Set every column but the id (?1) and the indexed ones `held` marks, which must hold
    their new value already; then the compare-and-set condition (?15) and the check (?16)."""
    kept = {i for i, h in zip(_INDEXED, held, strict=True) if h}
    sets = ", ".join(f"{n} = ?{i + 1}" for i, n in enumerate(_NAMES) if i and i not in kept)
    held = "".join(f"AND {_NAMES[i]} IS ?{i + 1} " for i in sorted(kept))
    # ?3 is the new status: a stop request lasts while the session runs.
    sets += ", stop = CASE WHEN ?3 = 'running' THEN stop END"
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


class SQLiteStore:
    """Sessions in one SQLite file.

    One connection per store, behind a lock: SQLite runs one writer at a time anyway, and a
    single connection lets threads of one process queue on the lock instead of sleeping in
    SQLite's busy handler. Other processes (and other stores on the same file) are kept apart
    by SQLite's own locking; `timeout` is how long a write waits for them. Every method is
    one transaction (a single statement is one by itself). `bytes_written` / `bytes_read`
    count the same blobs as MemoryStore's.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self.bytes_written = 0
        self.bytes_read = 0
        self._lock = threading.Lock()
        # `timeout` becomes SQLite's busy timeout: how long a statement waits for a writer in
        # another process. isolation_level=None: no implicit transactions, each method opens
        # its own. check_same_thread=False: the lock, not the thread, guards the connection.
        # The statement cache holds every statement this store prepares (multi-row INSERTs
        # have one text per row count), so none is parsed twice.
        self._db = sqlite3.connect(
            self.path,
            timeout=timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )
        self._write = _Transaction(self._db, self._lock)
        #: (session id, its indexed columns) as this store last wrote or read them: a hint
        #: for the next save (see _INDEXED), never trusted without a check.
        self._seen: tuple[Any, ...] | None = None
        # One cursor for every statement (under the lock): Connection.execute makes a cursor
        # per call, which costs a tenth of a simple statement.
        self._cur = self._write._cur
        try:
            # Pages freed by deletes go back to the file system (`prune` shrinks the file with
            # `PRAGMA incremental_vacuum`). Set first: on a new file it must precede anything
            # that writes the file's header (WAL mode does); an older file is converted below.
            self._db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            # WAL: readers never block the writer, nor it them.
            self._db.execute("PRAGMA journal_mode = WAL")
            # NORMAL is enough under WAL: a process crash loses no commit and nothing is ever
            # corrupted; only a power cut can undo the last few commits.
            self._db.execute("PRAGMA synchronous = NORMAL")
            # A checkpoint (copying the WAL into the file, with two fsyncs) every 10,000 pages
            # (40 MB of WAL) instead of SQLite's 1,000: at 17 pages a pause -> resume, the
            # default checkpoints every 60 round trips and costs a fifth of their time.
            self._db.execute("PRAGMA wal_autocheckpoint = 10000")
            with self._write:
                self._migrate()
            upkeep.convert_to_incremental_vacuum(self._db, self.path)
        except BaseException:
            self._db.close()
            raise

    def _migrate(self) -> None:
        (found,) = self._db.execute("PRAGMA user_version").fetchone()
        if found > SCHEMA_VERSION:
            msg = (
                f"{self.path!r} has schema version {found}; "
                f"this tarry reads versions up to {SCHEMA_VERSION}"
            )
            raise SnapshotError(msg)
        if found < SCHEMA_VERSION:
            # executescript() would commit our transaction; run the statements one by one.
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        # Columns, indexes and tables added since version 1, so files made before them get
        # them too (idempotent).
        have = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
        for name, definition in _LATER_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {definition}")
        for statement in _LATER_INDEXES:
            self._db.execute(statement)

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions --------------------------------------------------------------------------
    def create(self, record: SessionRecord, *, events: Sequence[Event] = ()) -> None:
        row = _row(record, version=0)
        encoded = encode_events(events)
        _check_run(record.session_id, events, after=0)
        with self._write as db:
            # The primary key decides, so two processes creating one id cannot both win.
            try:
                db.execute(_INSERT, row)
            except sqlite3.IntegrityError as exc:
                if exc.sqlite_errorname != "SQLITE_CONSTRAINT_PRIMARYKEY":
                    raise
                raise SessionExists(record.session_id) from exc
            if record.token:
                _add_token(db, record.token, record.session_id)
            written = len(record.state) + _insert(db, record.session_id, events, encoded)
            self._seen = (record.session_id, *(row[i] for i in _INDEXED))
        self.bytes_written += written

    def load(self, session_id: str) -> SessionRecord | None:
        with self._lock:
            row = self._cur.execute(_LOAD, (session_id,)).fetchone()
            if row is None:
                return None
            self.bytes_read += len(row[3])
        return _record(row)

    def save(
        self,
        record: SessionRecord,
        expected_version: int,
        *,
        events: Sequence[Event] = (),
        values: Sequence[tuple[str, int, bytes]] = (),
    ) -> int:
        sid = record.session_id
        row = _row(record, version=expected_version + 1)
        encoded = encode_events(events)
        prev = _prev(sid, events)
        args = (*row, expected_version, prev)
        with self._write as db:
            seen, self._seen = self._seen, None
            held = _ASSIGN_ALL
            if seen is not None and seen[0] == sid:
                held = tuple(row[i] == old for i, old in zip(_INDEXED, seen[1:], strict=True))
            updated = db.execute(_update(held), args).rowcount
            if updated != 1 and held != _ASSIGN_ALL:  # what the store saw is out of date
                updated = db.execute(_update(_ASSIGN_ALL), args).rowcount
            if updated != 1:
                current = db.execute(
                    "SELECT version FROM sessions WHERE session_id = ?", (sid,)
                ).fetchone()
                found = None if current is None else current[0]
                if found != expected_version or not events:
                    msg = f"session {sid!r} is at version {found}, not {expected_version}"
                    raise ConcurrentUpdate(msg)
                raise _not_continued(db, sid, events[0].seq)
            self._seen = (sid, *(row[i] for i in _INDEXED))
            written = len(record.state)
            written += _insert(db, sid, events, encoded)
            written += _put(db, sid, values, _put_values)
            if record.token:
                _add_token(db, record.token, sid)
        self.bytes_written += written
        return expected_version + 1

    def delete(self, session_id: str) -> None:
        with self._write as db:
            for table in ("sessions", "events", "vals", "tokens", "tallies"):
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))

    def list(
        self,
        *,
        status: str | None = None,
        flow: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[SessionRecord]:
        # Only the filters given go into the WHERE clause, so SQLite can use the index.
        where, args = [], []
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if flow is not None:
            where.append("flow = ?")
            args.append(flow)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        sql = f"{_SUMMARY} {clause}ORDER BY created_at DESC, session_id DESC LIMIT ? OFFSET ?"
        return self._select(sql, (*args, limit, offset))

    def prune(
        self,
        *,
        before: dt.datetime,
        statuses: Sequence[str] = ENDED,
        now: dt.datetime,
        limit: int = 1000,
        dry_run: bool = False,
    ) -> int:
        return upkeep.prune(self, before, statuses, now, limit, dry_run)

    # -- events ----------------------------------------------------------------------------
    def append_events(self, session_id: str, events: Sequence[Event]) -> None:
        encoded = encode_events(events)
        prev = _prev(session_id, events)
        if prev is None:
            return
        if len(events) <= _ROWS_PER_INSERT:
            # The durable-step case: one statement, a transaction by itself, that checks and
            # inserts (measured: 5% faster a step than BEGIN, SELECT, INSERT, COMMIT).
            args: builtins.list[Any] = [session_id, prev]
            for event, blob in zip(events, encoded, strict=True):
                args += (event.seq, event.type, blob)
            with self._lock:
                try:
                    inserted = self._cur.execute(_append_events(len(events)), args).rowcount
                except sqlite3.IntegrityError as exc:
                    if exc.sqlite_errorname != "SQLITE_CONSTRAINT_PRIMARYKEY":
                        raise
                    inserted = -1
                if inserted != len(events):
                    raise _not_continued(self._cur, session_id, prev + 1)
        else:
            with self._write as db:
                if db.execute(_FOLLOWS, (session_id, prev)).fetchone() is None:
                    raise _not_continued(db, session_id, prev + 1)
                _insert(db, session_id, events, encoded)
        self.bytes_written += sum(map(len, encoded))

    def events(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        with self._lock:
            rows = self._cur.execute(
                "SELECT blob FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (session_id, after_seq, -1 if limit is None else limit),
            ).fetchall()
        return [decode_event(blob, session_id) for (blob,) in rows]

    # -- reports ---------------------------------------------------------------------------
    def stats(self, *, flow: str | None = None) -> Totals:
        return upkeep.stats(self, flow)

    # -- out-of-line values ----------------------------------------------------------------
    def put_values(self, session_id: str, values: Sequence[tuple[str, int, bytes]]) -> None:
        # Values of an unknown (e.g. deleted) session are dropped, as in MemoryStore: the
        # INSERT itself checks that the session exists.
        if len(values) <= _ROWS_PER_INSERT:
            with self._lock:
                written = _put(self._cur, session_id, values, _put_values_if_session)
        else:
            with self._write as db:
                written = _put(db, session_id, values, _put_values_if_session)
        self.bytes_written += written

    def get_value(self, session_id: str, key: str, index: int) -> bytes | None:
        with self._lock:
            row = self._cur.execute(
                "SELECT blob FROM vals WHERE session_id = ? AND key = ? AND idx = ?",
                (session_id, key, index),
            ).fetchone()
            if row is None:
                return None
            self.bytes_read += len(row[0])
            return row[0]

    def get_values(self, session_id: str, key: str, stop: int) -> builtins.list[bytes]:
        with self._lock:
            rows = self._cur.execute(
                "SELECT blob FROM vals WHERE session_id = ? AND key = ? AND idx >= 0 AND idx < ? "
                "ORDER BY idx",
                (session_id, key, stop),
            ).fetchall()
            blobs = [blob for (blob,) in rows]
            self.bytes_read += sum(map(len, blobs))
            return blobs

    # -- tokens ----------------------------------------------------------------------------
    def find_token(self, token: str) -> TokenInfo | None:
        with self._lock:
            row = self._cur.execute(
                "SELECT session_id, used FROM tokens WHERE token = ?", (token,)
            ).fetchone()
        return None if row is None else TokenInfo(row[0], bool(row[1]))

    def consume_token(
        self,
        token: str,
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Sequence[Event] = (),
    ) -> bool:
        encoded = encode_events(events)
        prev = _prev(None, events)
        with self._write as db:
            # Of any number of racing processes, exactly one sees used = 0 (the write lock
            # of BEGIN IMMEDIATE serialises them); the lease and events go in the same commit.
            if db.execute(_USE_TOKEN, (token,)).rowcount != 1:
                return False
            # The session's indexed columns come with its id: the save that ends this drive
            # leaves those it does not change alone (see _INDEXED).
            seen = db.execute(_TOKEN_SESSION, (token,)).fetchone()
            sid = seen[0]
            if seen[1] is None:  # the session is gone: only the token is used
                continues = prev is None
            else:
                continues = db.execute(_RESUMING, (sid, owner, _time(until), prev)).rowcount == 1
                self._seen = (sid, "running", *seen[2:])
            if not continues:
                raise _not_continued(db, sid, events[0].seq)
            written = _insert(db, sid, events, encoded)
        self.bytes_written += written
        return True

    # -- control ---------------------------------------------------------------------------
    def request_stop(self, session_id: str, stop: str) -> str | None:
        with self._write as db:
            db.execute(
                "UPDATE sessions SET stop = ? WHERE session_id = ? AND status = 'running'",
                (stop, session_id),
            )
            row = db.execute(
                "SELECT status FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return None if row is None else row[0]

    def stop_requested(self, session_id: str) -> str | None:
        with self._lock:
            row = self._cur.execute(
                "SELECT stop FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return None if row is None else row[0]

    # -- timers and leases -----------------------------------------------------------------
    def due(self, now: dt.datetime, limit: int = 100) -> builtins.list[SessionRecord]:
        return self._select(
            f"{_SELECT} WHERE status = 'paused' AND wake_at <= ? "
            "ORDER BY wake_at, session_id LIMIT ?",
            (_micros(now), limit),
        )

    def claim(self, session_id: str, owner: str, until: dt.datetime, now: dt.datetime) -> bool:
        with self._lock:
            cur = self._cur.execute(
                "UPDATE sessions SET lease_owner = ?, lease_until = ? WHERE session_id = ? "
                "AND (lease_owner IS NULL OR lease_until IS NULL OR lease_until <= ? "
                "OR lease_owner = ?)",
                (owner, _micros(until), session_id, _micros(now), owner),
            )
            return cur.rowcount == 1

    def release(self, session_id: str, owner: str) -> None:
        with self._lock:
            self._cur.execute(
                "UPDATE sessions SET lease_owner = NULL, lease_until = NULL "
                "WHERE session_id = ? AND lease_owner = ?",
                (session_id, owner),
            )

    def claim_due(
        self,
        now: dt.datetime,
        owner: str,
        until: dt.datetime,
        *,
        limit: int = 100,
        after: tuple[dt.datetime, str] | None = None,
    ) -> builtins.list[SessionRecord]:
        # One statement under the write lock: no other claimant (thread or process) can take
        # the same rows between the SELECT and the UPDATE.
        cursor = (_micros(after[0]), after[1]) if after is not None else (-(2**63), "")
        args = (owner, _micros(until), _micros(now), *cursor, limit)
        with self._lock:
            rows = self._cur.execute(_CLAIM_DUE, args).fetchall()
        records = [_record(row) for row in rows]
        records.sort(key=lambda r: (r.wake_at, r.session_id))  # RETURNING has no order
        return records

    def expired(
        self, now: dt.datetime, limit: int = 100, *, after: tuple[dt.datetime, str] | None = None
    ) -> builtins.list[SessionRecord]:
        cursor = (_micros(after[0]), after[1]) if after is not None else (-(2**63), "")
        return self._select(_EXPIRED, (_micros(now), *cursor, limit))

    # -- store-wide marks --------------------------------------------------------------------
    def mark(self, name: str) -> None:
        with self._lock:
            self._cur.execute("INSERT OR IGNORE INTO marks (name) VALUES (?)", (name,))

    def marked(self, name: str) -> bool:
        with self._lock:
            row = self._cur.execute("SELECT 1 FROM marks WHERE name = ?", (name,)).fetchone()
        return row is not None

    # -- internals ---------------------------------------------------------------------------
    def _select(self, sql: str, args: Sequence[Any]) -> builtins.list[SessionRecord]:
        with self._lock:
            rows = self._cur.execute(sql, args).fetchall()
        return [_record(row) for row in rows]


_LOAD = f"{_SELECT} WHERE session_id = ?"
_FOLLOWS = "SELECT 1 FROM sessions WHERE session_id = ?1 AND " + _CONTINUES.format(p=2)
# A used token's session runs from then on; the lease is taken when an owner (?2) is given.
_RESUMING = (
    "UPDATE sessions SET status = 'running', stop = NULL, "
    "lease_owner = COALESCE(?2, lease_owner), "
    "lease_until = CASE WHEN ?2 IS NULL THEN lease_until ELSE ?3 END "
    "WHERE session_id = ?1 AND " + _CONTINUES.format(p=4)
)
_USE_TOKEN = "UPDATE tokens SET used = 1 WHERE token = ? AND used = 0"
_TOKEN_SESSION = (
    f"SELECT session_id, {_SEEN} FROM tokens LEFT JOIN sessions USING (session_id) "
    "WHERE tokens.token = ?"
)
# The index on (status, lease_until) serves a search by lease only once the statuses are named:
# the recursive part lists the distinct statuses with one index seek each (a loose index scan),
# so finding lapsed leases never reads the whole table, whatever statuses there are.
_EXPIRED = f"""
WITH RECURSIVE statuses(status) AS (
    SELECT (SELECT MIN(status) FROM sessions)
    UNION ALL
    SELECT (SELECT MIN(status) FROM sessions WHERE status > statuses.status)
    FROM statuses WHERE status IS NOT NULL
)
{_SELECT} WHERE status IN (SELECT status FROM statuses) AND lease_until <= ?
AND (lease_until, session_id) > (?, ?)
ORDER BY lease_until, session_id LIMIT ?
"""
# Due, free sessions (see SessionStore.claim_due), leased in the statement that finds them.
_CLAIM_DUE = f"""
UPDATE sessions SET lease_owner = ?1, lease_until = ?2 WHERE session_id IN (
    SELECT session_id FROM sessions
    WHERE status = 'paused' AND wake_at <= ?3 AND (wake_at, session_id) > (?4, ?5)
    AND token IS NOT NULL AND (lease_until IS NULL OR lease_until <= ?3)
    AND NOT EXISTS (SELECT 1 FROM tokens WHERE tokens.token = sessions.token AND used)
    ORDER BY wake_at, session_id LIMIT ?6
) RETURNING {_COLUMNS}, stop
"""


def _triples(rows: int, first: int, lead: str = "") -> str:
    """`rows` VALUES tuples of three numbered parameters each, from ?`first` on, each after
    `lead`: `_triples(2, 2, "?1, ")` is "(?1, ?2, ?3, ?4), (?1, ?5, ?6, ?7)"."""
    return ", ".join(
        f"({lead}?{first + 3 * i}, ?{first + 3 * i + 1}, ?{first + 3 * i + 2})" for i in range(rows)
    )


@cache
def _insert_events(rows: int) -> str:
    """Insert `rows` events of one session: the session id, then (seq, type, blob) per row."""
    return f"INSERT INTO events (session_id, seq, type, blob) VALUES {_triples(rows, 2, '?1, ')}"


@cache
def _append_events(rows: int) -> str:
    """Insert `rows` events if they continue the log: the session id, the seq before the first
    event, then (seq, type, blob) per row. (Reading `events` in an INSERT into `events` makes
    SQLite stage the rows in a temporary table: inside a transaction, a SELECT and a plain
    INSERT cost less.)"""
    return (
        "INSERT INTO events (session_id, seq, type, blob) "
        f"SELECT ?1, column1, column2, column3 FROM (VALUES {_triples(rows, 3)}) "
        f"WHERE EXISTS ({_FOLLOWS})"
    )


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


def _add_token(db: sqlite3.Cursor, token: str, session_id: str) -> None:
    # OR IGNORE: a token already known keeps its owner and its used flag; re-registering
    # must never make a consumed token live again.
    db.execute(
        "INSERT OR IGNORE INTO tokens (token, session_id, used) VALUES (?, ?, 0)",
        (token, session_id),
    )


def _prev(session_id: str | None, events: Sequence[Event]) -> int | None:
    """The seq the stored log must end at for `events` to continue it (None for no events);
    ConcurrentUpdate at once if they do not follow each other."""
    if not events:
        return None
    prev = events[0].seq - 1
    _check_run(session_id or events[0].session_id, events, after=prev)
    return prev


def _check_run(session_id: str, events: Sequence[Event], *, after: int) -> None:
    for expected, event in enumerate(events, start=after + 1):
        if event.seq != expected:
            msg = (
                f"session {session_id!r}: event seq {event.seq} does not follow "
                f"{expected - 1} (another writer got there first)"
            )
            raise ConcurrentUpdate(msg)


def _insert(
    db: sqlite3.Cursor, session_id: str, events: Sequence[Event], encoded: builtins.list[bytes]
) -> int:
    """Insert events whose continuity was checked; the bytes written. An event that is already
    stored raises ConcurrentUpdate (inside the caller's transaction, so nothing is kept)."""
    for start in range(0, len(events), _ROWS_PER_INSERT):
        stop = min(start + _ROWS_PER_INSERT, len(events))
        args: builtins.list[Any] = [session_id]
        for i in range(start, stop):
            args += (events[i].seq, events[i].type, encoded[i])
        try:
            db.execute(_insert_events(stop - start), args)
        except sqlite3.IntegrityError as exc:
            if exc.sqlite_errorname != "SQLITE_CONSTRAINT_PRIMARYKEY":
                raise
            raise _not_continued(db, session_id, events[0].seq) from exc
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


def _time(at: dt.datetime | None) -> int | None:
    return None if at is None else _micros(at)


def _datetime(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


def _maybe_datetime(micros: int | None) -> dt.datetime | None:
    return None if micros is None else _datetime(micros)


def _dumps(value: Any) -> bytes:
    # Most records have no flow version and no meta: those need no encoder call.
    if value is None:
        return _NIL
    if type(value) is dict and not value:
        return _EMPTY_MAP
    return dumps(value)


def _loads(blob: bytes) -> Any:
    if blob == _NIL:
        return None
    if blob == _EMPTY_MAP:
        return {}
    return loads(blob)


def _row(record: SessionRecord, *, version: int) -> tuple[Any, ...]:
    """The record as a sessions row, in _NAMES order."""
    return (
        record.session_id,
        record.flow,
        record.status,
        bytes(record.state),
        version,
        record.fingerprint,
        _dumps(record.flow_version),
        record.token,
        _time(record.wake_at),
        record.lease_owner,
        _time(record.lease_until),
        _micros(record.created_at),
        _micros(record.updated_at),
        _dumps(record.meta),
        record.durability,
    )


def _record(row: tuple[Any, ...]) -> SessionRecord:
    (sid, flow, status, state, version, fingerprint, flow_version, token, wake_at,
     lease_owner, lease_until, created_at, updated_at, meta, durability, stop) = row  # fmt: skip
    return SessionRecord(
        session_id=sid,
        flow=flow,
        status=status,
        state=state,
        version=version,
        fingerprint=fingerprint,
        flow_version=_loads(flow_version),
        token=token,
        wake_at=_maybe_datetime(wake_at),
        lease_owner=lease_owner,
        lease_until=_maybe_datetime(lease_until),
        created_at=_datetime(created_at),
        updated_at=_datetime(updated_at),
        meta=_loads(meta),
        durability=durability,
        stop=stop,
    )
