"""SQLiteStore: the embedded durable store, one file shared by threads and processes (WAL)."""

from __future__ import annotations

import builtins  # `list` below is a method; annotations after it name the type this way
import datetime as dt
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tarry.engine.errors import ConcurrentUpdate, SessionExists, SnapshotError
from tarry.engine.events import Event

from ._codec import dumps, loads
from .records import _EPOCH, SessionRecord, TokenInfo, _micros, decode_event, encode_event

SCHEMA_VERSION = 1

# Datetimes are integer microseconds since the epoch (UTC): they compare correctly in SQL,
# which ISO strings with mixed offsets would not.
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
    meta         BLOB NOT NULL
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
    "wake_at", "lease_owner", "lease_until", "created_at", "updated_at", "meta",
)  # fmt: skip
_COLUMNS = ", ".join(_NAMES)
_SELECT = f"SELECT {_COLUMNS} FROM sessions"
_INSERT = f"INSERT INTO sessions ({_COLUMNS}) VALUES ({', '.join('?' * len(_NAMES))})"
# Every column but the id, then the compare-and-set condition.
_UPDATE = (
    f"UPDATE sessions SET {', '.join(f'{n} = ?' for n in _NAMES[1:])} "
    "WHERE session_id = ? AND version = ?"
)


class SQLiteStore:
    """Sessions in one SQLite file.

    One connection per store, behind a lock: SQLite runs one writer at a time anyway, and a
    single connection lets threads of one process queue on the lock instead of sleeping in
    SQLite's busy handler. Other processes (and other stores on the same file) are kept apart
    by SQLite's own locking; `timeout` is how long a write waits for them. Every method is
    one transaction. `bytes_written` / `bytes_read` count the same blobs as MemoryStore's.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self.bytes_written = 0
        self.bytes_read = 0
        self._lock = threading.Lock()
        # `timeout` becomes SQLite's busy timeout: how long a statement waits for a writer in
        # another process. isolation_level=None: no implicit transactions, each method opens
        # its own. check_same_thread=False: the lock, not the thread, guards the connection.
        self._db = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        try:
            # WAL: readers never block the writer, nor it them.
            self._db.execute("PRAGMA journal_mode = WAL")
            # NORMAL is enough under WAL: a process crash loses no commit and nothing is ever
            # corrupted; only a power cut can undo the last few commits.
            self._db.execute("PRAGMA synchronous = NORMAL")
            with self._write():
                self._migrate()
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

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and a write transaction; roll back on any error."""
        with self._lock:
            # IMMEDIATE takes the write lock now, so the reads inside the transaction
            # cannot be invalidated by another process before we write.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    # -- sessions --------------------------------------------------------------------------
    def create(self, record: SessionRecord, *, events: Sequence[Event] = ()) -> None:
        row = _row(record, version=0)
        encoded = [encode_event(e) for e in events]
        with self._write() as db:
            # The primary key decides, so two processes creating one id cannot both win.
            try:
                db.execute(_INSERT, row)
            except sqlite3.IntegrityError as exc:
                if exc.sqlite_errorname != "SQLITE_CONSTRAINT_PRIMARYKEY":
                    raise
                raise SessionExists(record.session_id) from exc
            if record.token:
                _add_token(db, record.token, record.session_id)
            written = len(record.state) + _append(db, record.session_id, events, encoded)
        self.bytes_written += written

    def load(self, session_id: str) -> SessionRecord | None:
        with self._lock:
            row = self._db.execute(f"{_SELECT} WHERE session_id = ?", (session_id,)).fetchone()
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
        row = _row(record, version=expected_version + 1)[1:]
        encoded = [encode_event(e) for e in events]
        with self._write() as db:
            cur = db.execute(_UPDATE, (*row, sid, expected_version))
            if cur.rowcount != 1:
                current = db.execute(
                    "SELECT version FROM sessions WHERE session_id = ?", (sid,)
                ).fetchone()
                found = None if current is None else current[0]
                msg = f"session {sid!r} is at version {found}, not {expected_version}"
                raise ConcurrentUpdate(msg)
            written = len(record.state)
            written += _append(db, sid, events, encoded)
            written += _put(db, sid, values)
            if record.token:
                _add_token(db, record.token, sid)
        self.bytes_written += written
        return expected_version + 1

    def delete(self, session_id: str) -> None:
        with self._write() as db:
            for table in ("sessions", "events", "vals", "tokens"):
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
        sql = f"{_SELECT} {clause}ORDER BY created_at DESC, session_id DESC LIMIT ? OFFSET ?"
        return self._select(sql, (*args, limit, offset))

    # -- events ----------------------------------------------------------------------------
    def append_events(self, session_id: str, events: Sequence[Event]) -> None:
        encoded = [encode_event(e) for e in events]
        with self._write() as db:
            if not _exists(db, session_id):
                msg = f"no session {session_id!r} to append events to"
                raise ConcurrentUpdate(msg)
            written = _append(db, session_id, events, encoded)
        self.bytes_written += written

    def events(self, session_id: str, after_seq: int = 0) -> builtins.list[Event]:
        with self._lock:
            rows = self._db.execute(
                "SELECT blob FROM events WHERE session_id = ? AND seq > ? ORDER BY seq",
                (session_id, after_seq),
            ).fetchall()
        return [decode_event(blob, session_id) for (blob,) in rows]

    # -- out-of-line values ----------------------------------------------------------------
    def put_values(self, session_id: str, values: Sequence[tuple[str, int, bytes]]) -> None:
        with self._write() as db:
            # Values of an unknown (e.g. deleted) session are dropped, as in MemoryStore.
            written = _put(db, session_id, values) if _exists(db, session_id) else 0
        self.bytes_written += written

    def get_value(self, session_id: str, key: str, index: int) -> bytes | None:
        with self._lock:
            row = self._db.execute(
                "SELECT blob FROM vals WHERE session_id = ? AND key = ? AND idx = ?",
                (session_id, key, index),
            ).fetchone()
            if row is None:
                return None
            self.bytes_read += len(row[0])
            return row[0]

    def get_values(self, session_id: str, key: str, stop: int) -> builtins.list[bytes]:
        with self._lock:
            rows = self._db.execute(
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
            row = self._db.execute(
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
        encoded = [encode_event(e) for e in events]
        with self._write() as db:
            # Of any number of racing processes, exactly one sees used = 0 (the write lock
            # of BEGIN IMMEDIATE serialises them); the lease and events go in the same commit.
            cur = db.execute("UPDATE tokens SET used = 1 WHERE token = ? AND used = 0", (token,))
            if cur.rowcount != 1:
                return False
            (sid,) = db.execute("SELECT session_id FROM tokens WHERE token = ?", (token,)).fetchone()
            if owner is not None:
                db.execute(
                    "UPDATE sessions SET lease_owner = ?, lease_until = ? WHERE session_id = ?",
                    (owner, _time(until), sid),
                )
            written = _append(db, sid, events, encoded)
        self.bytes_written += written
        return True

    # -- timers and leases -----------------------------------------------------------------
    def due(self, now: dt.datetime, limit: int = 100) -> builtins.list[SessionRecord]:
        return self._select(
            f"{_SELECT} WHERE status = 'paused' AND wake_at <= ? "
            "ORDER BY wake_at, session_id LIMIT ?",
            (_micros(now), limit),
        )

    def claim(self, session_id: str, owner: str, until: dt.datetime, now: dt.datetime) -> bool:
        with self._lock:
            cur = self._db.execute(
                "UPDATE sessions SET lease_owner = ?, lease_until = ? WHERE session_id = ? "
                "AND (lease_owner IS NULL OR lease_until IS NULL OR lease_until <= ? "
                "OR lease_owner = ?)",
                (owner, _micros(until), session_id, _micros(now), owner),
            )
            return cur.rowcount == 1

    def release(self, session_id: str, owner: str) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE sessions SET lease_owner = NULL, lease_until = NULL "
                "WHERE session_id = ? AND lease_owner = ?",
                (session_id, owner),
            )

    def expired(self, now: dt.datetime, limit: int = 100) -> builtins.list[SessionRecord]:
        return self._select(
            f"{_SELECT} WHERE lease_until <= ? "
            "ORDER BY lease_until, session_id LIMIT ?",
            (_micros(now), limit),
        )

    # -- internals ---------------------------------------------------------------------------
    def _select(self, sql: str, args: Sequence[Any]) -> builtins.list[SessionRecord]:
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [_record(row) for row in rows]


def _exists(db: sqlite3.Connection, session_id: str) -> bool:
    found = db.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    return found is not None


def _add_token(db: sqlite3.Connection, token: str, session_id: str) -> None:
    # OR IGNORE: a token already known keeps its owner and its used flag; re-registering
    # must never make a consumed token live again.
    db.execute(
        "INSERT OR IGNORE INTO tokens (token, session_id, used) VALUES (?, ?, 0)",
        (token, session_id),
    )


def _append(
    db: sqlite3.Connection, session_id: str, events: Sequence[Event], encoded: list[bytes]
) -> int:
    """Insert events that continue the stored log gap-free; bytes written. ConcurrentUpdate
    (raised inside the caller's transaction, so nothing is kept) if they do not."""
    if not events:
        return 0
    (last,) = db.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (session_id,)
    ).fetchone()
    for expected, event in enumerate(events, start=last + 1):
        if event.seq != expected:
            msg = (
                f"session {session_id!r}: event seq {event.seq} does not follow "
                f"{expected - 1} (another writer got there first)"
            )
            raise ConcurrentUpdate(msg)
    try:
        db.executemany(
            "INSERT INTO events (session_id, seq, type, blob) VALUES (?, ?, ?, ?)",
            [(session_id, e.seq, e.type, b) for e, b in zip(events, encoded, strict=True)],
        )
    except sqlite3.IntegrityError as exc:
        if exc.sqlite_errorname != "SQLITE_CONSTRAINT_PRIMARYKEY":
            raise
        msg = f"session {session_id!r}: an event seq was already stored"
        raise ConcurrentUpdate(msg) from exc
    return sum(map(len, encoded))


def _put(db: sqlite3.Connection, session_id: str, values: Sequence[tuple[str, int, bytes]]) -> int:
    db.executemany(
        "INSERT OR REPLACE INTO vals (session_id, key, idx, blob) VALUES (?, ?, ?, ?)",
        [(session_id, key, index, blob) for key, index, blob in values],
    )
    return sum(len(blob) for _, _, blob in values)


def _time(at: dt.datetime | None) -> int | None:
    return None if at is None else _micros(at)


def _datetime(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


def _maybe_datetime(micros: int | None) -> dt.datetime | None:
    return None if micros is None else _datetime(micros)


def _row(record: SessionRecord, *, version: int) -> tuple[Any, ...]:
    """The record as a sessions row, in _NAMES order."""
    return (
        record.session_id,
        record.flow,
        record.status,
        bytes(record.state),
        version,
        record.fingerprint,
        dumps(record.flow_version),
        record.token,
        _time(record.wake_at),
        record.lease_owner,
        _time(record.lease_until),
        _micros(record.created_at),
        _micros(record.updated_at),
        dumps(record.meta),
    )


def _record(row: tuple[Any, ...]) -> SessionRecord:
    (sid, flow, status, state, version, fingerprint, flow_version, token, wake_at,
     lease_owner, lease_until, created_at, updated_at, meta) = row  # fmt: skip
    return SessionRecord(
        session_id=sid,
        flow=flow,
        status=status,
        state=state,
        version=version,
        fingerprint=fingerprint,
        flow_version=loads(flow_version),
        token=token,
        wake_at=_maybe_datetime(wake_at),
        lease_owner=lease_owner,
        lease_until=_maybe_datetime(lease_until),
        created_at=_datetime(created_at),
        updated_at=_datetime(updated_at),
        meta=loads(meta),
    )
