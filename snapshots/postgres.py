"""PostgresStore: sessions in PostgreSQL, shared by any number of workers on any number of machines."""

from __future__ import annotations

import builtins  # `list` below is a method; annotations after it name the type this way
import datetime as dt
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
from tarry.engine.errors import ConcurrentUpdate, InvalidArgument, SessionExists, SnapshotError
from tarry.engine.events import Event

from . import postgres_upkeep as upkeep
from ._codec import dumps, loads
from .records import SessionRecord, TokenInfo, decode_event, encode_events
from .store import ENDED
from .tally import Totals

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ModuleNotFoundError as exc:  # the optional extra is missing
    msg = "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'tarry[postgres]'"
    raise ModuleNotFoundError(msg, name=exc.name) from exc


# Pipeline mode (libpq 14+) sends the statements of a transaction together.
_PIPELINE = psycopg.Pipeline.is_supported()


# -- the schema --------------------------------------------------------------------------------


@attrs.frozen
class Migration:
    """One step of the schema: applied once, in order, and recorded in `tarry_schema`."""

    version: int
    description: str
    statements: tuple[str, ...]


# Datetimes are timestamptz (microseconds, like Python's): they compare as instants in SQL
# and come back as the same instant, converted to UTC. Ids are COLLATE "C" so that ordering
# is by code point, as in the other stores (and their indexes are cheaper to compare).
#: Every migration, oldest first. Never edit one that has shipped: add the next version.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, events, out-of-line values and tokens",
        (
            """CREATE TABLE tarry_sessions (
                session_id   text COLLATE "C" PRIMARY KEY,
                flow         text COLLATE "C" NOT NULL,
                status       text COLLATE "C" NOT NULL,
                state        bytea NOT NULL,
                version      bigint NOT NULL,
                fingerprint  text NOT NULL,
                flow_version bytea NOT NULL,
                token        text COLLATE "C",
                wake_at      timestamptz,
                lease_owner  text COLLATE "C",
                lease_until  timestamptz,
                created_at   timestamptz NOT NULL,
                updated_at   timestamptz NOT NULL,
                meta         bytea NOT NULL
            )""",
            "CREATE INDEX tarry_sessions_created ON tarry_sessions (created_at, session_id)",
            "CREATE INDEX tarry_sessions_status ON tarry_sessions (status, created_at, session_id)",
            "CREATE INDEX tarry_sessions_flow ON tarry_sessions (flow, created_at, session_id)",
            # Partial indexes: the timer and lease scans read only the rows they can return.
            "CREATE INDEX tarry_sessions_due ON tarry_sessions (wake_at, session_id) "
            "WHERE status = 'paused' AND wake_at IS NOT NULL",
            "CREATE INDEX tarry_sessions_leases ON tarry_sessions (lease_until, session_id) "
            "WHERE lease_until IS NOT NULL",
            # Append-only: a row is never updated; the primary key refuses a second writer
            # of the same seq. The foreign keys make delete one statement and refuse rows
            # for a session that does not exist (or was deleted meanwhile).
            """CREATE TABLE tarry_events (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES tarry_sessions ON DELETE CASCADE,
                seq        bigint NOT NULL,
                type       text NOT NULL,
                blob       bytea NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            """CREATE TABLE tarry_values (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES tarry_sessions ON DELETE CASCADE,
                key        text COLLATE "C" NOT NULL,
                idx        bigint NOT NULL,
                blob       bytea NOT NULL,
                PRIMARY KEY (session_id, key, idx)
            )""",
            """CREATE TABLE tarry_tokens (
                token      text COLLATE "C" PRIMARY KEY,
                session_id text COLLATE "C" NOT NULL
                           REFERENCES tarry_sessions ON DELETE CASCADE,
                used       boolean NOT NULL DEFAULT false
            )""",
            "CREATE INDEX tarry_tokens_session ON tarry_tokens (session_id)",
        ),
    ),
    Migration(
        2,
        "a session's own durability, and stop requests from any process",
        (
            "ALTER TABLE tarry_sessions ADD COLUMN durability text NOT NULL DEFAULT 'pause'",
            "ALTER TABLE tarry_sessions ADD COLUMN stop text",
        ),
    ),
    Migration(3, upkeep.DESCRIPTION, upkeep.STATEMENTS),
    Migration(
        4,
        "store-wide marks",
        (
            """CREATE TABLE tarry_marks (
                name      text COLLATE "C" PRIMARY KEY,
                marked_at timestamptz NOT NULL DEFAULT now()
            )""",
        ),
    ),
)

# Migrations of one schema are serialised by a transaction-level advisory lock on this
# class id (b"ta") and a hash of the schema's name.
_LOCK_CLASS = 0x7461

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

_NAMES = (
    "session_id", "flow", "status", "state", "version", "fingerprint", "flow_version", "token",
    "wake_at", "lease_owner", "lease_until", "created_at", "updated_at", "meta", "durability",
)  # fmt: skip
_COLUMNS = ", ".join(_NAMES)
# `stop` is read with every record but written only by request_stop (and cleared by a save
# that ends the run, or a token's use): a record's own `stop` is never written.
_SELECT = f"SELECT {_COLUMNS}, stop FROM tarry_sessions"
#: Every column but the state, which a listing leaves out (an empty blob in its place).
_SUMMARY = (
    "SELECT "
    + ", ".join("''::bytea" if n == "state" else n for n in _NAMES)
    + ", stop FROM tarry_sessions"
)
_INSERT = f"INSERT INTO tarry_sessions ({_COLUMNS}) VALUES ({', '.join(['%s'] * len(_NAMES))})"
# Every column but the id; the stop request lasts while the new status (the next parameter)
# is "running"; then the compare-and-set condition.
_UPDATE = (
    f"UPDATE tarry_sessions SET {', '.join(f'{n} = %s' for n in _NAMES[1:])}, "
    "stop = CASE WHEN %s = 'running' THEN stop END "
    "WHERE session_id = %s AND version = %s"
)
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
# Using a token is one statement: the UPDATE of its row is what makes it single-use (of any
# number of racing consumers the first flips `used`; the others wait for its commit, re-check
# `NOT used` and update nothing, so a loser is told False only once the token really is
# used). The lease and the events are written only through the row it returns.
_CONSUME = """
WITH used AS (
    UPDATE tarry_tokens SET used = true WHERE token = %(token)s AND NOT used
    RETURNING session_id
), resuming AS (
    UPDATE tarry_sessions SET status = 'running', stop = NULL,
        lease_owner = COALESCE(%(owner)s::text, lease_owner),
        lease_until = CASE WHEN %(owner)s::text IS NULL THEN lease_until
                           ELSE %(until)s::timestamptz END
    WHERE session_id IN (SELECT session_id FROM used)
), appended AS (
    INSERT INTO tarry_events (session_id, seq, type, blob)
    SELECT used.session_id, e.s, e.t, e.b
    FROM used, unnest(%(seqs)s::bigint[], %(types)s::text[], %(blobs)s::bytea[]) AS e(s, t, b)
    WHERE (SELECT COALESCE(max(seq), 0) FROM tarry_events AS old
           WHERE old.session_id = used.session_id) = %(after)s
    RETURNING 1
)
SELECT (SELECT session_id FROM used), (SELECT count(*) FROM appended)
"""
_FREE = (
    "(lease_owner IS NULL OR lease_until IS NULL OR lease_until <= %(now)s "
    "OR lease_owner = %(owner)s)"
)
# SKIP LOCKED: a claimant that finds the row locked gives up at once instead of queueing
# behind whoever holds it (another claimant, or a resumer saving it). NO KEY UPDATE is the
# lock the UPDATE itself takes; it does not conflict with the key-share locks that inserts
# of events and values take through their foreign keys.
_CLAIM = (
    "UPDATE tarry_sessions SET lease_owner = %(owner)s, lease_until = %(until)s "
    "WHERE session_id = (SELECT session_id FROM tarry_sessions "
    f"WHERE session_id = %(sid)s AND {_FREE} FOR NO KEY UPDATE SKIP LOCKED)"
)
# Due, free sessions (see SessionStore.claim_due), leased in the statement that finds them.
# SKIP LOCKED: rows that another worker is claiming (or a resumer is saving) are passed over,
# so concurrent workers take disjoint pages instead of all fetching the earliest sessions and
# racing for their tokens. The partial index tarry_sessions_due serves the scan in order.
_CLAIM_DUE_ROWS = """
    SELECT c.session_id FROM tarry_sessions AS c
    WHERE c.status = 'paused' AND c.wake_at IS NOT NULL AND c.wake_at <= %(now)s {after}
    AND c.token IS NOT NULL AND (c.lease_until IS NULL OR c.lease_until <= %(now)s)
    AND NOT EXISTS (SELECT 1 FROM tarry_tokens AS t WHERE t.token = c.token AND t.used)
    ORDER BY c.wake_at, c.session_id LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
"""
_CLAIM_DUE_SQL = (
    "UPDATE tarry_sessions SET lease_owner = %(owner)s, lease_until = %(until)s "
    "WHERE session_id IN ({rows}) RETURNING " + _COLUMNS + ", stop"
)
_CLAIM_DUE = _CLAIM_DUE_SQL.format(rows=_CLAIM_DUE_ROWS.format(after=""))
_CLAIM_DUE_AFTER = _CLAIM_DUE_SQL.format(
    rows=_CLAIM_DUE_ROWS.format(after="AND (c.wake_at, c.session_id) > (%(after_at)s, %(after_id)s)")
)
_RENEW = (
    "UPDATE tarry_sessions SET lease_owner = %(owner)s, lease_until = %(until)s "
    f"WHERE session_id = %(sid)s AND {_FREE}"
)


class PostgresStore:
    """Sessions in PostgreSQL, behind a pool of connections.

    `dsn`: a libpq connection string or URL (`postgresql://user:pw@host:5432/db`).
    `schema`: the PostgreSQL schema that holds tarry's tables (created if missing); by default
    the first schema of the connection's `search_path`. `min_size`/`max_size`: the pool's
    connections (each thread using the store holds one for the length of one call);
    `timeout`: seconds a call waits for a free connection; `connect_timeout`: seconds to
    reach the server. `auto_upgrade`: migrate the schema when opening (see `upgrade`).

    Every method is one transaction: a single statement on a connection in autocommit mode,
    or a transaction whose statements are pipelined (two round trips to the server, however
    many statements). `bytes_written` / `bytes_read` count the same blobs as the other
    stores. Thread-safe; not fork-safe: open the store in the process that uses it.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        auto_upgrade: bool = True,
    ) -> None:
        if schema is not None and not (isinstance(schema, str) and _IDENTIFIER.fullmatch(schema)):
            msg = f"schema must be a plain SQL identifier (letters, digits, _) (got {schema!r})"
            raise InvalidArgument(msg)
        if not (isinstance(min_size, int) and isinstance(max_size, int) and min_size >= 0):
            msg = f"min_size and max_size must be ints (got {min_size!r}, {max_size!r})"
            raise InvalidArgument(msg)
        if max_size < max(min_size, 1):
            msg = f"max_size must be at least min_size and 1 (got {min_size}, {max_size})"
            raise InvalidArgument(msg)
        self.dsn = dsn
        self.schema = schema
        self.bytes_written = 0
        self.bytes_read = 0
        self._counts = threading.Lock()
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout)),
        }
        if "application_name" not in conninfo_to_dict(dsn):
            kwargs["application_name"] = "tarry"
        self._pool = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs=kwargs,
            configure=self._configure,
            open=False,
            name="tarry",
        )
        # The first connection is made here, in the caller's thread, so that a wrong address
        # or password fails now with libpq's own message (the pool would only time out).
        with psycopg.connect(dsn, **kwargs) as conn:
            self._configure(conn)
            if auto_upgrade:
                _upgrade(conn, schema)
            else:
                _check_not_newer(_version(conn))
        try:
            self._pool.open(wait=min_size > 0, timeout=timeout)
        except BaseException:
            self._pool.close()
            raise

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Set up a new connection: UTC (times come back as plain UTC offsets, never a local
        zone's historical ones) and the store's schema."""
        conn.execute("SET TIME ZONE 'UTC'")
        if self.schema is not None:
            conn.execute(f'SET search_path TO "{self.schema}"')

    # -- schema ------------------------------------------------------------------------------
    def upgrade(self) -> builtins.list[int]:
        """Apply the migrations this database lacks, in order, in one transaction, under an
        advisory lock (so several processes opening a new database at once apply each one
        exactly once). Returns the versions applied (none when up to date). SnapshotError if
        the database is newer than this tarry."""
        with self._pool.connection() as conn:
            return _upgrade(conn, self.schema)

    def schema_version(self) -> int:
        """The version of the schema in the database (0 before the first migration)."""
        with self._pool.connection() as conn:
            return _version(conn)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close every connection of the pool. The store cannot be used afterwards."""
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        info = conninfo_to_dict(self.dsn)
        where = f"{info.get('host', '')}:{info.get('port', '')}/{info.get('dbname', '')}"
        return f"PostgresStore({where!r}, schema={self.schema!r})"

    @contextmanager
    def _batch(self) -> Iterator[tuple[psycopg.Connection[Any], Callable[[], None]]]:
        """A pooled connection inside one transaction (rolled back on any error) whose
        statements are sent together: BEGIN and every statement up to `flush()` go to the
        server in one round trip, COMMIT in a second. Results (row counts) are read after
        `flush()`; a constraint violation is raised there at the latest."""
        with self._pool.connection() as conn:
            if _PIPELINE:
                with conn.pipeline() as pipe, conn.transaction():
                    yield conn, pipe.sync
            else:  # a libpq older than 14: one round trip per statement
                with conn.transaction():
                    yield conn, _nothing

    def _count(self, written: int = 0, read: int = 0) -> None:
        with self._counts:
            self.bytes_written += written
            self.bytes_read += read

    # -- sessions --------------------------------------------------------------------------
    def create(self, record: SessionRecord, *, events: Sequence[Event] = ()) -> None:
        sid = record.session_id
        encoded = encode_events(events)
        try:
            with self._batch() as (conn, flush):
                # The primary key decides, so two processes creating one id cannot both win.
                conn.execute(_INSERT, _row(record, version=0))
                if record.token:
                    _add_token(conn, record.token, sid)
                appended = _append(conn, sid, events, encoded)
                flush()
                _check_appended(appended, sid, events)
        except pg_errors.UniqueViolation as exc:
            if exc.diag.constraint_name == "tarry_sessions_pkey":
                raise SessionExists(sid) from exc
            raise _conflict(exc, sid) from exc
        self._count(written=len(record.state) + sum(map(len, encoded)))

    def load(self, session_id: str) -> SessionRecord | None:
        with self._pool.connection() as conn:
            row = conn.execute(f"{_SELECT} WHERE session_id = %s", (session_id,)).fetchone()
        if row is None:
            return None
        self._count(read=len(row[3]))
        return _record(row)

    def save(
        self,
        record: SessionRecord,
        expected_version: int,
        *,
        events: Sequence[Event] = (),
        values: Sequence[tuple[str, int, bytes]] = (),
    ) -> int:
        row = _row(record, version=expected_version + 1)[1:]
        encoded = encode_events(events)
        try:
            self._save(record, row, expected_version, events, encoded, values)
        except psycopg.OperationalError as exc:
            if isinstance(exc, PoolTimeout):
                raise  # no connection to be had: waiting as long again would not help
            # The connection dropped (a server restart, a network cut, an idle timeout): the
            # pool discards it when it comes back. Retry once on a fresh connection, after
            # the pool has checked its idle ones (a restart drops them all), so that the final
            # save of a run is not lost to one broken socket.
            self._pool.check()
            try:
                self._save(record, row, expected_version, events, encoded, values)
            except ConcurrentUpdate:
                # The first attempt may have committed before its reply was lost.
                if not self._saved(record, expected_version):
                    raise
        self._count(written=len(record.state) + sum(map(len, encoded)) + _size(values))
        return expected_version + 1

    def _save(
        self,
        record: SessionRecord,
        row: tuple[Any, ...],
        expected_version: int,
        events: Sequence[Event],
        encoded: builtins.list[bytes],
        values: Sequence[tuple[str, int, bytes]],
    ) -> None:
        sid = record.session_id
        try:
            with self._batch() as (conn, flush):
                # The UPDATE locks the row: of two racing savers the second waits, then finds
                # the version moved on and updates nothing; everything else is then undone.
                updated = conn.execute(_UPDATE, (*row, record.status, sid, expected_version))
                appended = _append(conn, sid, events, encoded)
                _put(conn, sid, values)
                if record.token:
                    _add_token(conn, record.token, sid)
                flush()
                if updated.rowcount != 1:
                    current = conn.execute(
                        "SELECT version FROM tarry_sessions WHERE session_id = %s", (sid,)
                    ).fetchone()
                    found = None if current is None else current[0]
                    msg = f"session {sid!r} is at version {found}, not {expected_version}"
                    raise ConcurrentUpdate(msg)
                _check_appended(appended, sid, events)
        except pg_errors.IntegrityError as exc:
            raise _conflict(exc, sid) from exc

    def _saved(self, record: SessionRecord, expected_version: int) -> bool:
        """Whether the store holds `record` as a save from `expected_version` wrote it."""
        stored = self.load(record.session_id)
        return (
            stored is not None
            and stored.version == expected_version + 1
            and stored.state == bytes(record.state)
            and stored.token == record.token
            and stored.status == record.status
        )

    def delete(self, session_id: str) -> None:
        with self._pool.connection() as conn:
            # Events, values and tokens go with it (ON DELETE CASCADE), in the same statement.
            conn.execute("DELETE FROM tarry_sessions WHERE session_id = %s", (session_id,))

    def list(
        self,
        *,
        status: str | None = None,
        flow: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[SessionRecord]:
        # Only the filters given go into the WHERE clause, so the planner can use an index.
        where, args = [], []
        if status is not None:
            where.append("status = %s")
            args.append(status)
        if flow is not None:
            where.append("flow = %s")
            args.append(flow)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        sql = f"{_SUMMARY} {clause}ORDER BY created_at DESC, session_id DESC LIMIT %s OFFSET %s"
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
        with self._pool.connection() as conn:
            return upkeep.prune(conn, before, statuses, now, limit, dry_run)

    # -- events ----------------------------------------------------------------------------
    def append_events(self, session_id: str, events: Sequence[Event]) -> None:
        encoded = encode_events(events)
        with self._pool.connection() as conn:
            if not events:  # still an error for an unknown session, as in the other stores
                if not _exists(conn, session_id):
                    msg = f"no session {session_id!r} to append events to"
                    raise ConcurrentUpdate(msg)
                return
            # One statement, so all or nothing without a transaction.
            try:
                appended = _append(conn, session_id, events, encoded)
            except pg_errors.IntegrityError as exc:
                raise _conflict(exc, session_id) from exc
            _check_appended(appended, session_id, events)
        self._count(written=sum(map(len, encoded)))

    def events(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT blob FROM tarry_events WHERE session_id = %s AND seq > %s "
                "ORDER BY seq LIMIT %s",
                (session_id, after_seq, limit),
            ).fetchall()
        return [decode_event(blob, session_id) for (blob,) in rows]

    # -- reports ---------------------------------------------------------------------------
    def stats(self, *, flow: str | None = None) -> Totals:
        return upkeep.stats(self, flow)

    # -- out-of-line values ----------------------------------------------------------------
    def put_values(self, session_id: str, values: Sequence[tuple[str, int, bytes]]) -> None:
        if not values:
            return
        with self._pool.connection() as conn:
            try:
                put = _put(conn, session_id, values)
            except pg_errors.ForeignKeyViolation:
                return  # the session was deleted meanwhile: dropped, as for an unknown one
        # Values of an unknown (e.g. deleted) session are dropped, as in the other stores.
        if put is not None and put.rowcount:
            self._count(written=_size(values))

    def get_value(self, session_id: str, key: str, index: int) -> bytes | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT blob FROM tarry_values WHERE session_id = %s AND key = %s AND idx = %s",
                (session_id, key, index),
            ).fetchone()
        if row is None:
            return None
        self._count(read=len(row[0]))
        return row[0]

    def get_values(self, session_id: str, key: str, stop: int) -> builtins.list[bytes]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT blob FROM tarry_values "
                "WHERE session_id = %s AND key = %s AND idx >= 0 AND idx < %s ORDER BY idx",
                (session_id, key, stop),
            ).fetchall()
        blobs = [blob for (blob,) in rows]
        self._count(read=sum(map(len, blobs)))
        return blobs

    # -- tokens ----------------------------------------------------------------------------
    def find_token(self, token: str) -> TokenInfo | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT session_id, used FROM tarry_tokens WHERE token = %s", (token,)
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
        _check_batch(events)
        encoded = encode_events(events)
        args = {
            "token": token,
            "owner": owner,
            "until": until,
            "after": events[0].seq - 1 if events else 0,
            "seqs": [e.seq for e in events],
            "types": [e.type for e in events],
            "blobs": encoded,
        }
        try:
            with self._batch() as (conn, flush):
                cur = conn.execute(_CONSUME, args)
                flush()
                row = cur.fetchone()
                sid, appended = row if row else (None, 0)
                if sid is None:
                    return False  # used or unknown: nothing was written
                if appended != len(events):
                    raise _conflict(None, sid, events)
        except pg_errors.IntegrityError as exc:
            raise _conflict(exc, events[0].session_id if events else "?") from exc
        self._count(written=sum(map(len, encoded)))
        return True

    # -- control ---------------------------------------------------------------------------
    def request_stop(self, session_id: str, stop: str) -> str | None:
        with self._pool.connection() as conn:
            if conn.execute(
                "UPDATE tarry_sessions SET stop = %s WHERE session_id = %s AND status = 'running'",
                (stop, session_id),
            ).rowcount == 1:
                return "running"
            # Not running (any more): a statement of its own, so it sees the status of a save
            # that the UPDATE above waited for.
            row = conn.execute(
                "SELECT status FROM tarry_sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
        return None if row is None else row[0]

    def stop_requested(self, session_id: str) -> str | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT stop FROM tarry_sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
        return None if row is None else row[0]

    # -- timers and leases -----------------------------------------------------------------
    def due(self, now: dt.datetime, limit: int = 100) -> builtins.list[SessionRecord]:
        return self._select(
            f"{_SELECT} WHERE status = 'paused' AND wake_at <= %s "
            "ORDER BY wake_at, session_id LIMIT %s",
            (now, limit),
        )

    def claim(self, session_id: str, owner: str, until: dt.datetime, now: dt.datetime) -> bool:
        args = {"sid": session_id, "owner": owner, "until": until, "now": now}
        with self._pool.connection() as conn:
            if conn.execute(_CLAIM, args).rowcount == 1:
                return True
            # Nothing claimed: the lease is someone else's, or the row was locked. A renewal
            # of our own lease must not fail because another transaction held the row for a
            # moment, so it waits for the lock (one short transaction at most).
            row = conn.execute(
                "SELECT lease_owner FROM tarry_sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
            if row is None or row[0] != owner:
                return False
            return conn.execute(_RENEW, args).rowcount == 1

    def release(self, session_id: str, owner: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE tarry_sessions SET lease_owner = NULL, lease_until = NULL "
                "WHERE session_id = %s AND lease_owner = %s",
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
        args = {"owner": owner, "until": until, "now": now, "limit": limit}
        sql = _CLAIM_DUE_AFTER if after is not None else _CLAIM_DUE
        if after is not None:
            args["after_at"], args["after_id"] = after
        with self._pool.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        records = [_record(row) for row in rows]
        records.sort(key=lambda r: (r.wake_at, r.session_id))  # RETURNING has no order
        return records

    def expired(
        self, now: dt.datetime, limit: int = 100, *, after: tuple[dt.datetime, str] | None = None
    ) -> builtins.list[SessionRecord]:
        if after is None:
            return self._select(
                f"{_SELECT} WHERE lease_until <= %s ORDER BY lease_until, session_id LIMIT %s",
                (now, limit),
            )
        return self._select(
            f"{_SELECT} WHERE lease_until <= %s AND (lease_until, session_id) > (%s, %s) "
            "ORDER BY lease_until, session_id LIMIT %s",
            (now, *after, limit),
        )

    # -- store-wide marks --------------------------------------------------------------------
    def mark(self, name: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO tarry_marks (name) VALUES (%s) ON CONFLICT DO NOTHING", (name,)
            )

    def marked(self, name: str) -> bool:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT 1 FROM tarry_marks WHERE name = %s", (name,)).fetchone()
        return row is not None

    # -- internals ---------------------------------------------------------------------------
    def _select(self, sql: str, args: Sequence[Any]) -> builtins.list[SessionRecord]:
        with self._pool.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [_record(row) for row in rows]


# -- migrations --------------------------------------------------------------------------------


def latest_version() -> int:
    """The schema version this tarry writes."""
    return MIGRATIONS[-1].version if MIGRATIONS else 0


def _version(conn: psycopg.Connection[Any]) -> int:
    found = conn.execute("SELECT to_regclass('tarry_schema') IS NOT NULL").fetchone()
    if not (found and found[0]):
        return 0
    row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM tarry_schema").fetchone()
    return int(row[0]) if row else 0


def _check_not_newer(found: int) -> None:
    if found > latest_version():
        msg = (
            f"the database has tarry schema version {found}; "
            f"this tarry reads versions up to {latest_version()}"
        )
        raise SnapshotError(msg)


def _upgrade(conn: psycopg.Connection[Any], schema: str | None) -> builtins.list[int]:
    found = _version(conn)
    _check_not_newer(found)
    if found == latest_version():
        # The usual case: no lock and no DDL, so a role that may not create tables can open
        # a database migrated by another one.
        return []
    applied: list[int] = []
    with conn.transaction():
        if schema is None:
            row = conn.execute("SELECT current_schema()").fetchone()
            target = row[0] if row else None
            if target is None:
                msg = (
                    "no schema to create tarry's tables in: the search_path names none that exists"
                )
                raise SnapshotError(msg)
        else:
            target = schema
        # Held until commit: a second upgrader waits here, then finds the work done.
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s::integer, hashtext(%s))", (_LOCK_CLASS, target)
        )
        if schema is not None:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(
            "CREATE TABLE IF NOT EXISTS tarry_schema ("
            "version integer PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        found = _version(conn)  # again: another upgrader may have got the lock first
        _check_not_newer(found)
        for migration in sorted(MIGRATIONS, key=lambda m: m.version):
            if migration.version <= found:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO tarry_schema (version, description) VALUES (%s, %s)",
                (migration.version, migration.description),
            )
            applied.append(migration.version)
    return applied


# -- rows --------------------------------------------------------------------------------------


def _exists(conn: psycopg.Connection[Any], session_id: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM tarry_sessions WHERE session_id = %s", (session_id,)
    ).fetchone()
    return found is not None


def _add_token(conn: psycopg.Connection[Any], token: str, session_id: str) -> None:
    # DO NOTHING: a token already known keeps its owner and its used flag; re-registering
    # must never make a consumed token live again.
    conn.execute(
        "INSERT INTO tarry_tokens (token, session_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (token, session_id),
    )


def _check_batch(events: Sequence[Event]) -> None:
    """ConcurrentUpdate unless the events' seqs are consecutive."""
    for offset, event in enumerate(events):
        expected = events[0].seq + offset
        if event.seq != expected:
            msg = (
                f"session {event.session_id!r}: event seq {event.seq} does not follow "
                f"{expected - 1} (another writer got there first)"
            )
            raise ConcurrentUpdate(msg)


def _append(
    conn: psycopg.Connection[Any], session_id: str, events: Sequence[Event], encoded: list[bytes]
) -> psycopg.Cursor[Any] | None:
    """Send the insert of `events`, which happens only if they continue the stored log
    without a gap; `_check_appended` then tells whether it did. None for no events."""
    if not events:
        return None
    _check_batch(events)
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


def _check_appended(
    appended: psycopg.Cursor[Any] | None, session_id: str, events: Sequence[Event]
) -> None:
    """ConcurrentUpdate (inside the caller's transaction, so nothing is kept) if the insert
    `_append` sent left the events out."""
    if appended is not None and appended.rowcount != len(events):
        raise _conflict(None, session_id, events)


def _conflict(
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


def _put(
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


def _size(values: Sequence[tuple[str, int, bytes]]) -> int:
    return sum(len(blob) for _, _, blob in values)


def _nothing() -> None:
    pass


def _utc(at: dt.datetime) -> dt.datetime:
    return at.astimezone(dt.UTC)


def _maybe_utc(at: dt.datetime | None) -> dt.datetime | None:
    return None if at is None else at.astimezone(dt.UTC)


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
        record.wake_at,
        record.lease_owner,
        record.lease_until,
        record.created_at,
        record.updated_at,
        dumps(record.meta),
        record.durability,
    )


def _record(row: Sequence[Any]) -> SessionRecord:
    (sid, flow, status, state, version, fingerprint, flow_version, token, wake_at,
     lease_owner, lease_until, created_at, updated_at, meta, durability, stop) = row  # fmt: skip
    return SessionRecord(
        session_id=sid,
        flow=flow,
        status=status,
        state=bytes(state),
        version=version,
        fingerprint=fingerprint,
        flow_version=loads(flow_version),
        token=token,
        wake_at=_maybe_utc(wake_at),
        lease_owner=lease_owner,
        lease_until=_maybe_utc(lease_until),
        created_at=_utc(created_at),
        updated_at=_utc(updated_at),
        meta=loads(meta),
        durability=durability,
        stop=stop,
    )
