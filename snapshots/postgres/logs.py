"""PostgresStore's log records (migration 6): a session's last records, written inside the save
that carries them (see log_records.py), and read a page at a time (a mixin of PostgresStore)."""

from __future__ import annotations

import builtins
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool
from tarry.snapshots.log_records import LogBatch, LogRecord, record_of
from tarry.snapshots.postgres.sql import session_exists
from tarry.snapshots.records import encode_path

DESCRIPTION = "log records captured from steps"

STATEMENTS = (
    """CREATE TABLE tarry_logs (
        session_id text COLLATE "C" NOT NULL REFERENCES tarry_sessions ON DELETE CASCADE,
        seq        bigint NOT NULL,
        at         timestamptz NOT NULL,
        level      text NOT NULL,
        levelno    integer NOT NULL,
        logger     text NOT NULL,
        message    text NOT NULL,
        path       bytea NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
)

# Numbered after the session's last record in the statement itself, so that the pipelined save
# sends it with its other statements and reads nothing back. The save's UPDATE of the session's
# row comes first and locks it: two writers of one session's records never interleave.
_INSERT = (
    "INSERT INTO tarry_logs (session_id, seq, at, level, levelno, logger, message, path) "
    "SELECT %(sid)s, last.n + %(skipped)s + r.ord, r.at, r.level, r.levelno, r.logger, "
    "r.message, r.path "
    "FROM (SELECT COALESCE(MAX(seq), 0) AS n FROM tarry_logs WHERE session_id = %(sid)s) AS last, "
    "unnest(%(at)s::timestamptz[], %(level)s::text[], %(levelno)s::integer[], "
    "%(logger)s::text[], %(message)s::text[], %(path)s::bytea[]) "
    "WITH ORDINALITY AS r(at, level, levelno, logger, message, path, ord)"
)
_TRIM = (
    "DELETE FROM tarry_logs WHERE session_id = %(sid)s AND seq <= "
    "(SELECT MAX(seq) FROM tarry_logs WHERE session_id = %(sid)s) - %(keep)s"
)


def put_logs(conn: psycopg.Connection[Any], session_id: str, batch: LogBatch) -> int:
    """Append `batch` to the session's records and drop those beyond `batch.keep`, inside the
    caller's transaction. Returns the bytes written (its messages)."""
    records = batch.records
    args = {
        "sid": session_id,
        "skipped": batch.skipped,
        "keep": batch.keep,
        "at": [r.at for r in records],
        "level": [r.level for r in records],
        "levelno": [r.levelno for r in records],
        "logger": [r.logger for r in records],
        "message": [r.message for r in records],
        "path": [encode_path(r.path) for r in records],
    }
    conn.execute(_INSERT, args)
    conn.execute(_TRIM, args)
    return sum(len(r.message) for r in records)


class Logs:
    """The log methods of PostgresStore."""

    _pool: ConnectionPool[Any]

    def logs(
        self, session_id: str, *, levelno: int = 0, after: int = 0, limit: int = 1000
    ) -> builtins.list[LogRecord] | None:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT seq, at, level, levelno, logger, message, path FROM tarry_logs "
                "WHERE session_id = %s AND seq > %s AND levelno >= %s ORDER BY seq LIMIT %s",
                (session_id, after, levelno, max(limit, 0)),
            ).fetchall()
            if not rows and not session_exists(conn, session_id):
                return None
        return [record_of(row) for row in rows]

    def dropped_logs(self, session_id: str) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT MIN(seq) FROM tarry_logs WHERE session_id = %s", (session_id,)
            ).fetchone()
        return 0 if row is None or row[0] is None else int(row[0]) - 1
