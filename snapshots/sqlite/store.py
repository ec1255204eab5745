"""SQLiteStore: the embedded durable store, one file shared by threads and processes (WAL).

The class holds the sessions, events and values; tokens, timers and leases come from
tokens.py, waits and the mailbox from waits.py, retention and tallies from upkeep.py, the schema
and statements live in sql.py and times and rows in rows.py (what it shares with PostgresStore:
../sql_common.py).
"""

from __future__ import annotations

import builtins  # `list` below is a method; annotations after it name the type this way
import datetime as dt
import os
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from tarry.engine.errors import ConcurrentUpdate, SessionExists, SnapshotError
from tarry.engine.state.events import Event, rows_of
from tarry.snapshots.log_records import LogBatch, LogRecord
from tarry.snapshots.records import SessionRecord, WaitRecord, decode_event, encode_events
from tarry.snapshots.sqlite import batches as batches_
from tarry.snapshots.sqlite import logs as logs_
from tarry.snapshots.sqlite import upkeep as upkeep
from tarry.snapshots.sqlite import waits as waits_
from tarry.snapshots.sqlite.rows import ROWS, micros
from tarry.snapshots.sqlite.sql import (
    _ASSIGN_ALL,
    _FOLLOWS,
    _HOLD_UNSEEN,
    _INDEXED,
    _INSERT,
    _LATER_COLUMNS,
    _LATER_INDEXES,
    _LOAD,
    _ROWS_PER_INSERT,
    _SCHEMA,
    FILL_PHASE,
    LISTING,
    SCHEMA_VERSION,
    _add_token,
    _append_events,
    _check_run,
    _insert,
    _not_continued,
    _prev,
    _put,
    _put_values,
    _put_values_if_session,
    _Transaction,
    _update,
    event_rows,
    events_typed,
    phase_of,
)
from tarry.snapshots.sqlite.tokens import TokensAndLeases
from tarry.snapshots.sqlite.waits import WaitsAndMail
from tarry.snapshots.store import ENDED
from tarry.snapshots.tally import Totals

__all__ = ["PAGE_SIZE", "SCHEMA_VERSION", "SQLiteStore", "_ROWS_PER_INSERT"]

#: The page size of a new file (a file made before keeps its own). Each commit writes every
#: page it changed to the WAL, whole: a delivery or a pause -> resume changes a row or an index
#: entry of some twenty b-trees (the session, its events, its wait, their indexes), a few dozen
#: bytes in each, so the page is most of what it writes. With SQLite's default of 4 KB, a
#: delivery wrote 65 KB of WAL and a pause -> resume 84 KB; with 1 KB pages, 23 KB and 28 KB.
#: Rows stay within a page (a wait row holds its pause in short, see records.encode_lane); a
#: big snapshot takes a chain of overflow pages either way, as many bytes as it has.
PAGE_SIZE = 1024

#: Changed bytes a transaction keeps in memory before it writes their pages to the WAL early
#: (62 MB, a save of some 45,000 waiting branches): memory only while such a save lasts.
SPILL_BYTES = 64_000_000


def spill_pages(page_size: int) -> int:
    """SPILL_BYTES in pages of `page_size` for `PRAGMA cache_spill`: never a multiple of 256
    (SQLite also reads the pragma's number as a boolean, from its low byte, and a multiple of
    256 would turn spilling off altogether)."""
    return SPILL_BYTES // page_size | 1


class SQLiteStore(TokensAndLeases, WaitsAndMail, batches_.Batches):
    """Sessions in one SQLite file.

    One connection per store, behind a lock: SQLite runs one writer at a time anyway, and a
    single connection lets threads of one process queue on the lock instead of sleeping in
    SQLite's busy handler. Other processes (and other stores on the same file) are kept apart
    by SQLite's own locking; `timeout` is how long a write waits for them. Every method is
    one transaction (a single statement is one by itself). `bytes_written` / `bytes_read`
    count the same blobs as MemoryStore's.
    """

    #: Its consume_token takes `version=` (drivers/core.py reads this, never a signature).
    consume_at_version = True

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
            self._db.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # a new file only
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
            # A transaction whose changed pages outgrow the page cache (2 MB) writes them to
            # the WAL before it commits ("spills") and writes each again when it changes it
            # once more: a start of 10,000 waiting branches (14 MB of pages) wrote its pages
            # three times over. Up to SPILL_BYTES of changed pages stay in memory instead, each
            # written once at the commit; the cache of unchanged pages keeps its size.
            (page_size,) = self._db.execute("PRAGMA page_size").fetchone()
            self._db.execute(f"PRAGMA cache_spill = {spill_pages(page_size)}")
            with self._write:
                self._migrate()
            #: Whether its events have a `type` column to fill in (a file made before schema 8).
            self._typed = events_typed(self._db)
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
        # Columns, indexes and tables added since version 1, so files made before them get
        # them too (idempotent).
        have = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
        for name, definition in _LATER_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {definition}")
        if found < 7:  # the phase of each session of a file made before it (schema 7)
            self._db.execute(FILL_PHASE)
        for statement in _LATER_INDEXES:
            self._db.execute(statement)
        waits_.upgrade_mail(self._db)
        waits_.upgrade_waits(self._db)
        for statement in (*waits_.SCHEMA, *logs_.SCHEMA, *batches_.SCHEMA):
            self._db.execute(statement)
        if found < SCHEMA_VERSION:
            if 1 <= found < 2:  # a file made before waits: its paused sessions get theirs
                waits_.backfill(self._db)
            if 1 <= found < 8:  # a file made before schema 8: its waits' tokens move into them
                waits_.fold_tokens(self._db)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        self._close_turns()
        with self._lock:
            self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions --------------------------------------------------------------------------
    def create(
        self, record: SessionRecord, *, events: Sequence[Event] = (), parent: str | None = None
    ) -> None:
        row = ROWS.session_row(record, version=0)
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
            if parent is not None:
                db.execute(
                    "INSERT INTO children (parent, child) VALUES (?, ?)",
                    (parent, record.session_id),
                )
            written = len(record.state) + _insert(
                db, record.session_id, events, encoded, self._typed
            )
            self._seen = (record.session_id, *(row[i] for i in _INDEXED))
        self.bytes_written += written

    def load(self, session_id: str) -> SessionRecord | None:
        with self._lock:
            row = self._cur.execute(_LOAD, (session_id,)).fetchone()
            if row is None:
                return None
            self.bytes_read += len(row[3])
        return ROWS.session(row)

    def save(
        self,
        record: SessionRecord,
        expected_version: int,
        *,
        events: Sequence[Event] = (),
        values: Sequence[tuple[str, int, bytes]] = (),
        waits: Sequence[WaitRecord] = (),
        mail_done: Sequence[int] | None = None,
        logs: LogBatch | None = None,
        post: tuple[str, bytes] | None = None,
    ) -> int:
        sid = record.session_id
        row = ROWS.session_row(record, version=expected_version + 1)
        encoded = encode_events(events)
        prev = _prev(sid, events)
        args = (*row, expected_version, prev, record.stop)
        with self._write as db:
            seen, self._seen = self._seen, None
            held, phase_held = _HOLD_UNSEEN, False
            if seen is not None and seen[0] == sid:
                held = tuple(row[i] == old for i, old in zip(_INDEXED, seen[1:], strict=True))
                phase_held = phase_of(record.status) == phase_of(seen[1])
            updated = db.execute(_update(held, phase_held), args).rowcount
            if updated != 1 and (held != _ASSIGN_ALL or phase_held):  # the hint is out of date
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
            written += _insert(db, sid, events, encoded, self._typed)
            written += _put(db, sid, values, _put_values)
            waits_.save_waits(
                db,
                sid,
                record.status,
                record.token or None,
                waits,
                mail_done,
                micros(record.updated_at),
            )
            if logs is not None and logs.records:
                written += logs_.put_logs(db, sid, logs)
            if post is not None:
                db.execute(
                    "INSERT INTO mail (key, value, at) VALUES (?, ?, ?)",
                    (post[0], bytes(post[1]), micros(record.updated_at)),
                )
                written += len(post[1])
        self.bytes_written += written
        return expected_version + 1

    def children(self, session_id: str) -> builtins.list[str]:
        with self._lock:
            rows = self._cur.execute(
                "SELECT child FROM children WHERE parent = ? ORDER BY rowid", (session_id,)
            ).fetchall()
        return [child for (child,) in rows]

    def delete(self, session_id: str) -> None:
        with self._write as db:
            for table in ("sessions", "events", "vals", "tokens", "tallies", "waits", "logs"):
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM children WHERE parent = ?", (session_id,))
            waits_.settle_claims(db, session_id, ())  # its claims are queued again

    def list(
        self,
        *,
        status: str | None = None,
        flow: str | None = None,
        limit: int = 50,
        offset: int = 0,
        before: tuple[dt.datetime, str] | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        search: str | None = None,
    ) -> list[SessionRecord]:
        sql, args = LISTING.sql(
            status=status,
            flow=flow,
            limit=limit,
            offset=offset,
            before=before,
            since=since,
            until=until,
            search=search,
        )
        return self._select(sql, args)

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
            event_rows(args, rows_of(events), encoded, self._typed)
            with self._lock:
                try:
                    insert = _append_events(len(events), self._typed)
                    inserted = self._cur.execute(insert, args).rowcount
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
                _insert(db, session_id, events, encoded, self._typed)
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

    # -- logs ------------------------------------------------------------------------------
    def logs(
        self, session_id: str, *, levelno: int = 0, after: int = 0, limit: int = 1000
    ) -> builtins.list[LogRecord] | None:
        with self._lock:
            return logs_.read_logs(self._cur, session_id, levelno, after, limit)

    def dropped_logs(self, session_id: str) -> int:
        with self._lock:
            return logs_.dropped_logs(self._cur, session_id)

    # -- reports ---------------------------------------------------------------------------
    def stats(
        self,
        *,
        flow: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
    ) -> Totals:
        return upkeep.stats(self, flow, since, until)

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
            blob: bytes = row[0]
            self.bytes_read += len(blob)
            return blob

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

    def load_many(self, session_ids: Sequence[str]) -> dict[str, SessionRecord]:
        # One look-up of the primary key each, under one hold of the lock (no round trips to
        # save in an embedded database).
        with self._lock:
            rows = [self._cur.execute(_LOAD, (sid,)).fetchone() for sid in session_ids]
            found = [row for row in rows if row is not None]
            self.bytes_read += sum(len(row[3]) for row in found)
        return {row[0]: ROWS.session(row) for row in found}
