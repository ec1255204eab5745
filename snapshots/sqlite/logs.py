"""SQLiteStore's log records (schema version 3): a session's last records, written inside the
save that carries them (see log_records.py)."""

from __future__ import annotations

import sqlite3
from typing import Any

from tarry.snapshots.log_records import LogBatch, LogRecord, log_rows, record_of

#: Created on open (idempotent): files made before version 3 get it too.
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS logs (
        session_id TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        at         INTEGER NOT NULL,
        level      TEXT NOT NULL,
        levelno    INTEGER NOT NULL,
        logger     TEXT NOT NULL,
        message    TEXT NOT NULL,
        path       BLOB NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID""",
)

_INSERT = "INSERT INTO logs VALUES (?, ?, ?, ?, ?, ?, ?, ?)"


def put_logs(db: sqlite3.Cursor, session_id: str, batch: LogBatch) -> int:
    """Append `batch` to the session's records and drop those beyond `batch.keep`, inside the
    caller's transaction. Returns the bytes written (its messages)."""
    (last,) = db.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM logs WHERE session_id = ?", (session_id,)
    ).fetchone()
    rows, drop = log_rows(session_id, batch, last)
    db.executemany(_INSERT, rows)
    if drop:
        db.execute("DELETE FROM logs WHERE session_id = ? AND seq <= ?", (session_id, drop))
    return sum(len(row[6]) for row in rows)


def read_logs(
    db: sqlite3.Cursor, session_id: str, levelno: int, after: int, limit: int
) -> list[LogRecord] | None:
    rows = db.execute(
        "SELECT seq, at, level, levelno, logger, message, path FROM logs "
        "WHERE session_id = ? AND seq > ? AND levelno >= ? ORDER BY seq LIMIT ?",
        (session_id, after, levelno, max(limit, 0)),
    ).fetchall()
    if not rows and _unknown(db, session_id):
        return None
    return [record_of(row) for row in rows]


def dropped_logs(db: sqlite3.Cursor, session_id: str) -> int:
    (first,) = db.execute(
        "SELECT MIN(seq) FROM logs WHERE session_id = ?", (session_id,)
    ).fetchone()
    return 0 if first is None else int(first) - 1


def _unknown(db: sqlite3.Cursor, session_id: str) -> Any:
    return (
        db.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone() is None
    )
