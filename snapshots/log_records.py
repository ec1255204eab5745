"""Log records captured from a session's steps, as stores keep them (see drivers/logs.py).

A session keeps its LAST `keep` records: every store numbers the records of a session 1, 2, …
as it writes them (the numbering counts every record captured, also those dropped unwritten),
and deletes the oldest beyond `keep` in the same transaction. The records a store holds are
therefore gap-free, and how many were dropped is the first stored seq less one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import attrs
from tarry.snapshots.records import decode_path, encode_path

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


@attrs.frozen(slots=True)
class LogRecord:
    """One Python `logging` record emitted inside a step of a session.

    `seq` numbers the session's records (1, 2, …; gap-free among those kept), `at` is when it
    was logged (UTC, by the Runtime's clock), `level`/`levelno` its level ("WARNING", 30),
    `logger` the logger's name, `message` the formatted message (with the exception's traceback
    when one was logged; at most `drivers.logs.MAX_MESSAGE_BYTES`), and `path` the path of the
    step (or container) in progress when it was logged."""

    seq: int
    at: dt.datetime
    level: str
    levelno: int
    logger: str
    message: str
    path: tuple[Any, ...] = ()


@attrs.frozen(slots=True)
class LogBatch:
    """The records a drive captured since its last write, for `SessionStore.save(logs=...)`.

    `records` carry seq 0: the store numbers them after the session's last one, leaving room
    for the `skipped` records captured before them but dropped unwritten (over `keep`). The
    session then keeps only its last `keep` records."""

    records: tuple[LogRecord, ...]
    skipped: int = 0
    keep: int = 1000


def micros(at: dt.datetime) -> int:
    return (at - _EPOCH) // _MICROSECOND


def log_rows(session_id: str, batch: LogBatch, last: int) -> tuple[list[tuple[Any, ...]], int]:
    """The rows `(session_id, seq, at µs, level, levelno, logger, message, path blob)` to insert
    for `batch` after the session's last stored seq `last`, and the seq at and below which
    older records are to be deleted (0: none)."""
    seq = last + batch.skipped
    rows = []
    for record in batch.records:
        seq += 1
        rows.append((
            session_id, seq, micros(record.at), record.level, record.levelno, record.logger,
            record.message, encode_path(record.path),
        ))  # fmt: skip
    return rows, max(seq - batch.keep, 0)


def numbered(batch: LogBatch, last: int) -> list[LogRecord]:
    """The records of `batch` with their seq (for a store that keeps records as objects)."""
    seq = last + batch.skipped
    out = []
    for r in batch.records:  # the constructor: attrs.evolve costs twice as much
        seq += 1
        out.append(LogRecord(seq, r.at, r.level, r.levelno, r.logger, r.message, r.path))
    return out


def record_of(row: Sequence[Any]) -> LogRecord:
    """The LogRecord of a row `(seq, at (µs or a datetime), level, levelno, logger, message, path blob)`."""
    seq, at, level, levelno, logger, message, path = row
    return LogRecord(
        seq=int(seq),
        # SQLite keeps µs since the epoch, PostgreSQL a timestamptz.
        at=at.astimezone(dt.UTC)
        if isinstance(at, dt.datetime)
        else _EPOCH + dt.timedelta(microseconds=at),
        level=level,
        levelno=levelno,
        logger=logger,
        message=message,
        path=decode_path(bytes(path)),
    )
