"""PostgresStore: sessions in PostgreSQL, shared by any number of workers on any number of machines.

The class holds the sessions; events and values come from values.py, tokens, timers and
leases from tokens.py, waits and the mailbox (a queue of messages per key) from waits.py, the
migrations from schema.py, the one-statement writes of a run and a resume from writes.py, and
the other statements, times and rows from sql.py (what it shares with SQLiteStore:
../sql_common.py).
"""

from __future__ import annotations

import builtins  # `list` below is a method; annotations after it name the type this way
import datetime as dt
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tarry.engine.errors import ConcurrentUpdate, InvalidArgument, SessionExists

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ModuleNotFoundError as exc:  # the optional extra is missing
    msg = "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'tarry[postgres]'"
    raise ModuleNotFoundError(msg, name=exc.name) from exc

from tarry.engine.state.events import Event
from tarry.snapshots.log_records import LogBatch
from tarry.snapshots.postgres import logs as logs_
from tarry.snapshots.postgres import schema as schema_
from tarry.snapshots.postgres import upkeep as upkeep
from tarry.snapshots.postgres import writes as writes
from tarry.snapshots.postgres.batches import Batches
from tarry.snapshots.postgres.logs import Logs
from tarry.snapshots.postgres.schema import Migration
from tarry.snapshots.postgres.sql import (
    LISTING,
    ROWS,
    SELECT,
    check_batch,
    conflict,
    values_size,
)
from tarry.snapshots.postgres.tokens import TokensAndLeases
from tarry.snapshots.postgres.values import EventsAndValues
from tarry.snapshots.postgres.waits import WaitsAndMail
from tarry.snapshots.records import SessionRecord, WaitRecord, encode_events
from tarry.snapshots.sql_common import NAMES
from tarry.snapshots.store import ENDED
from tarry.snapshots.tally import Totals

__all__ = ["MIGRATIONS", "Migration", "PostgresStore", "latest_version"]

#: Every migration, oldest first (see schema.py). Opening a store applies the ones
#: named here: tests put a later one in to check how an upgrade goes.
MIGRATIONS: tuple[Migration, ...] = schema_.MIGRATIONS

# Pipeline mode (libpq 14+) sends the statements of a transaction together.
_PIPELINE = psycopg.Pipeline.is_supported()

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


# Sessions by id, each one probe of the primary key (the LIMIT keeps the LATERAL a nested loop:
# `session_id = ANY(…)` of a thousand ids may be planned as a scan of the whole table).
_LOAD_MANY = (
    "SELECT s.* FROM unnest(%s::text[]) AS k(wanted) CROSS JOIN LATERAL "
    f"({SELECT} WHERE session_id = k.wanted LIMIT 1) AS s"
)


def latest_version() -> int:
    """The schema version this tarry writes."""
    return schema_.latest(MIGRATIONS)


def _upgrade(conn: psycopg.Connection[Any], schema: str | None) -> builtins.list[int]:
    return schema_.upgrade(conn, schema, MIGRATIONS)


def _version(conn: psycopg.Connection[Any]) -> int:
    return schema_.version(conn)


def _check_not_newer(found: int) -> None:
    schema_.check_not_newer(found, MIGRATIONS)


def _nothing() -> None:
    pass


class PostgresStore(EventsAndValues, Logs, TokensAndLeases, WaitsAndMail, Batches):
    """Sessions in PostgreSQL, behind a pool of connections.

    `dsn`: a libpq connection string or URL (`postgresql://user:pw@host:5432/db`).
    `schema`: the PostgreSQL schema that holds tarry's tables (created if missing); by default
    the first schema of the connection's `search_path`. `min_size`/`max_size`: the pool's
    connections (each thread using the store holds one for the length of one call);
    `timeout`: seconds a call waits for a free connection; `connect_timeout`: seconds to
    reach the server. `auto_upgrade`: migrate the schema when opening (see `upgrade`).

    Every method is one transaction: a single statement on a connection in autocommit mode
    (one round trip: `create`, `save` and `consume_token` are each one statement, see
    writes.py), or a transaction whose statements are pipelined. `bytes_written` / `bytes_read` count the same blobs as the other
    stores. Thread-safe; not fork-safe: open the store in the process that uses it.
    """

    #: Its consume_token takes `version=` (drivers/core.py reads this, never a signature).
    consume_at_version = True

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
        self._close_turns()
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
    def create(
        self, record: SessionRecord, *, events: Sequence[Event] = (), parent: str | None = None
    ) -> None:
        sid = record.session_id
        check_batch(events)
        if events and events[0].seq != 1:  # a new session's log starts at 1
            raise conflict(None, sid, events)
        encoded = encode_events(events)
        args: dict[str, Any] = dict(zip(NAMES, ROWS.session_row(record, version=0), strict=True))
        if events:
            args.update(seqs=[e.seq for e in events], types=[e.type for e in events], blobs=encoded)
        if parent is not None:
            args["parent"] = parent
        try:
            with self._pool.connection() as conn:
                # The primary key decides, so two processes creating one id cannot both win.
                sql = writes.create_sql(bool(events), bool(record.token), parent is not None)
                row = conn.execute(sql, args)
                _created, appended = row.fetchone() or (0, 0)
        except pg_errors.UniqueViolation as exc:
            if exc.diag.constraint_name == "tarry_sessions_pkey":
                raise SessionExists(sid) from exc
            raise conflict(exc, sid) from exc
        if appended != len(events):  # cannot be: the log of a new session is empty
            raise conflict(None, sid, events)
        self._count(written=len(record.state) + sum(map(len, encoded)))

    def children(self, session_id: str) -> builtins.list[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT child FROM tarry_children WHERE parent = %s ORDER BY id", (session_id,)
            ).fetchall()
        return [child for (child,) in rows]

    def load(self, session_id: str) -> SessionRecord | None:
        with self._pool.connection() as conn:
            row = conn.execute(f"{SELECT} WHERE session_id = %s", (session_id,)).fetchone()
        if row is None:
            return None
        self._count(read=len(row[3]))
        return ROWS.session(row)

    def load_many(self, session_ids: Sequence[str]) -> dict[str, SessionRecord]:
        if not session_ids:
            return {}
        with self._pool.connection() as conn:
            rows = conn.execute(_LOAD_MANY, (list(dict.fromkeys(session_ids)),)).fetchall()
        self._count(read=sum(len(row[3]) for row in rows))
        return {row[0]: ROWS.session(row) for row in rows}

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
        row = dict(zip(NAMES, ROWS.session_row(record, version=expected_version + 1), strict=True))
        more = (waits, mail_done, logs if logs is not None and logs.records else None, post)
        encoded = encode_events(events)
        try:
            self._save(record, row, expected_version, events, encoded, values, *more)
        except psycopg.OperationalError as exc:
            if isinstance(exc, PoolTimeout):
                raise  # no connection to be had: waiting as long again would not help
            # The connection dropped (a server restart, a network cut, an idle timeout): the
            # pool discards it when it comes back. Retry once on a fresh connection, after
            # the pool has checked its idle ones (a restart drops them all), so that the final
            # save of a run is not lost to one broken socket.
            self._pool.check()
            try:
                self._save(record, row, expected_version, events, encoded, values, *more)
            except ConcurrentUpdate:
                # The first attempt may have committed before its reply was lost.
                if not self._saved(record, expected_version):
                    raise
        self._count(written=len(record.state) + sum(map(len, encoded)) + values_size(values))
        return expected_version + 1

    def _save(
        self,
        record: SessionRecord,
        row: dict[str, Any],
        expected_version: int,
        events: Sequence[Event],
        encoded: builtins.list[bytes],
        values: Sequence[tuple[str, int, bytes]],
        waits: Sequence[WaitRecord],
        mail_done: Sequence[int] | None,
        logs: LogBatch | None,
        post: tuple[str, bytes] | None = None,
    ) -> None:
        """One statement (see writes.py): the row's compare-and-set, the events, the values,
        the tokens, the waits, the session's claims on messages and the message it posts,
        all or nothing."""
        sid = record.session_id
        # A session that ends ends its waits: their tokens are used, the waits deleted.
        ended = record.status != "paused" and record.status != "running"
        check_batch(events)
        sql, args = writes.save_args(
            row, expected_version, events, encoded, values, waits, mail_done, ended, record.stop
        )
        if post is not None:
            sql, args = writes.with_post(sql, args, post, record.updated_at)
        try:
            with self._pool.connection() as conn:
                try:
                    _one, appended = conn.execute(sql, args).fetchone() or (0, 0)
                except pg_errors.DivisionByZero:  # the guard: the row was not written
                    raise writes.moved(conn, sid, expected_version, events) from None
        except pg_errors.IntegrityError as exc:
            raise conflict(exc, sid) from exc
        if appended != len(events):  # cannot be: the row is written only if they continue
            raise conflict(None, sid, events)
        if logs is not None:
            # The step logs of this write, in a statement of their own after it (the save
            # stays one statement when nothing was logged): a crash between the two loses
            # those records, never the session's progress.
            with self._pool.connection() as conn:
                logs_.put_logs(conn, sid, logs)

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
        with self._batch() as (conn, _flush):
            # Events, values, tokens, waits and logs go with it (ON DELETE CASCADE). The messages
            # it claimed name it in no foreign key: they are released, queued again (a claim is
            # not a consumption).
            conn.execute("DELETE FROM tarry_sessions WHERE session_id = %s", (session_id,))
            conn.execute(
                "UPDATE tarry_mail SET claimed_by = '' WHERE claimed_by = %s AND claimed_by <> ''",
                (session_id,),
            )

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
        with self._pool.connection() as conn:
            return upkeep.prune(conn, before, statuses, now, limit, dry_run)

    # -- reports ---------------------------------------------------------------------------
    def stats(
        self,
        *,
        flow: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
    ) -> Totals:
        return upkeep.stats(self, flow, since, until)
