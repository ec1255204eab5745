"""SQLiteStore's provider batch records (tarry.batches): see snapshots/batch_records.py."""

from __future__ import annotations

import builtins
import datetime as dt
import sqlite3
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tarry.snapshots.batch_records import BATCH_COLUMNS, BatchRecord, counts_of, counts_text

if TYPE_CHECKING:  # imported where used: a store of no batches does not import it
    from tarry.snapshots.batch_turns import FileLocks, Turns
from tarry.snapshots.sqlite.rows import from_micros, maybe_micros, micros

#: Made with the other tables (IF NOT EXISTS: a file made before gets them when opened).
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS batches ("
    " submission_id TEXT PRIMARY KEY, via TEXT NOT NULL, provider_id TEXT,"
    " status TEXT NOT NULL, total INTEGER NOT NULL, created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL, counts TEXT NOT NULL DEFAULT '{}', ended_at INTEGER,"
    " claimed_by TEXT, claimed_until INTEGER)",
    "CREATE INDEX IF NOT EXISTS batches_open ON batches (created_at, submission_id) "
    "WHERE ended_at IS NULL",
    # The keys of open submissions: a key is in at most one (its primary key).
    "CREATE TABLE IF NOT EXISTS batch_items ("
    " key TEXT PRIMARY KEY, submission_id TEXT NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS batch_items_submission ON batch_items (submission_id, key)",
)

#: The file beside the database whose byte-range locks say whose turn it is to check a batch.
TURNS_SUFFIX = "-turns"

#: Made on first use (a store of no batches makes no lock file).
_TURNS_GUARD = threading.Lock()

#: Keys looked up per statement (SQLite's default limit of host parameters is 999 or more).
_CHUNK = 500


def _record(row: Sequence[Any]) -> BatchRecord:
    return BatchRecord(
        submission_id=row[0],
        via=row[1],
        provider_id=row[2],
        status=row[3],
        total=row[4],
        created_at=from_micros(row[5]),
        updated_at=from_micros(row[6]),
        counts=counts_of(row[7]),
        ended_at=None if row[8] is None else from_micros(row[8]),
    )


class Batches:
    """The batch records of a SQLiteStore; each method one transaction."""

    _lock: threading.Lock
    _write: Any
    _cur: sqlite3.Cursor
    path: str
    _turns: Turns | None = None
    _turn_locks: FileLocks | None = None

    def batch_intent(self, record: BatchRecord, keys: Sequence[str]) -> builtins.list[str]:
        """Record `record` with those of `keys` that something still waits on, that hold no
        queued message and that no open submission holds; returns them (nothing is recorded
        when none is free): a key whose result was delivered since the caller read the waits
        (to its session, or queued for it while it was busy) is not submitted again."""
        with self._write as db:
            if db.execute(
                "SELECT 1 FROM batches WHERE submission_id = ?", (record.submission_id,)
            ).fetchone():
                return []
            free = []
            for key in dict.fromkeys(keys):
                db.execute(
                    "INSERT OR IGNORE INTO batch_items (key, submission_id) "
                    "SELECT ?, ? WHERE EXISTS (SELECT 1 FROM waits INDEXED BY waits_queue "
                    "WHERE key = ? AND used = 0) AND NOT "
                    "EXISTS (SELECT 1 FROM mail INDEXED BY mail_queue WHERE key = ? "
                    "AND claimed_by = '')",
                    (key, record.submission_id, key, key),
                )
                if db.rowcount == 1:
                    free.append(key)
            if free:
                db.execute(
                    f"INSERT INTO batches ({BATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.submission_id,
                        record.via,
                        record.provider_id,
                        record.status,
                        len(free),
                        micros(record.created_at),
                        micros(record.updated_at),
                        counts_text(record.counts),
                        maybe_micros(record.ended_at),
                    ),
                )
            return free

    def batch_update(
        self,
        submission_id: str,
        *,
        status: str,
        at: dt.datetime,
        provider_id: str | None = None,
        counts: dict[str, int] | None = None,
    ) -> None:
        with self._write as db:
            db.execute(
                "UPDATE batches SET status = ?, updated_at = ?,"
                " provider_id = COALESCE(?, provider_id), counts = COALESCE(?, counts)"
                " WHERE submission_id = ?",
                (
                    status,
                    micros(at),
                    provider_id,
                    None if counts is None else counts_text(counts),
                    submission_id,
                ),
            )

    def batch_end(
        self, submission_id: str, *, status: str, at: dt.datetime, counts: dict[str, int]
    ) -> None:
        """Mark a submission ended and free its keys."""
        with self._write as db:
            db.execute(
                "UPDATE batches SET status = ?, updated_at = ?, ended_at = ?, counts = ?"
                " WHERE submission_id = ?",
                (status, micros(at), micros(at), counts_text(counts), submission_id),
            )
            db.execute("DELETE FROM batch_items WHERE submission_id = ?", (submission_id,))

    def batches(
        self, *, open: bool = True, via: str | None = None, limit: int = 1000
    ) -> builtins.list[BatchRecord]:
        """Submissions oldest first: the open ones (or every one), of `via` (or any)."""
        where = ["ended_at IS NULL"] if open else []
        params: list[Any] = []
        if via is not None:
            where.append("via = ?")
            params.append(via)
        sql = f"SELECT {BATCH_COLUMNS} FROM batches"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, submission_id LIMIT ?"
        with self._lock:
            rows = self._cur.execute(sql, (*params, limit)).fetchall()
        return [_record(row) for row in rows]

    def batch_claim(
        self, submission_id: str, owner: str, until: dt.datetime, now: dt.datetime
    ) -> bool:
        """Lease an open submission to `owner` until `until` (to deliver its results or upload
        it again), unless another owner holds it; whether it is `owner`'s now."""
        with self._write as db:
            db.execute(
                "UPDATE batches SET claimed_by = ?, claimed_until = ? WHERE submission_id = ?"
                " AND ended_at IS NULL AND (claimed_by IS NULL OR claimed_by = ?"
                " OR claimed_until < ?)",
                (owner, micros(until), submission_id, owner, micros(now)),
            )
            return bool(db.rowcount == 1)

    def batch_keys(self, submission_id: str) -> builtins.list[str]:
        with self._lock:
            rows = self._cur.execute(
                "SELECT key FROM batch_items WHERE submission_id = ? ORDER BY key",
                (submission_id,),
            ).fetchall()
        return [key for (key,) in rows]

    def batch_submitted(self, keys: Sequence[str]) -> set[str]:
        """Those of `keys` that an open submission holds."""
        keys = list(dict.fromkeys(keys))
        found: set[str] = set()
        with self._lock:
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start : start + _CHUNK]
                marks = ", ".join("?" * len(chunk))
                rows = self._cur.execute(
                    f"SELECT key FROM batch_items WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update(key for (key,) in rows)
        return found

    def batch_turns(
        self, submission_ids: Sequence[str], *, owner: str, slot: int
    ) -> builtins.set[str]:
        """Those of the open submissions whose status check is `owner`'s in round `slot`
        (snapshots/batch_turns.py). The runtimes of other processes on this file are kept
        out by a lock of one byte per turn of the file `<database>-turns` beside it, which the
        operating system drops when its process dies; nothing is written to the database."""
        if not submission_ids and self._turns is None:
            return set()  # no batch was ever open here: no lock file made
        return self._batch_turns().turns(submission_ids, owner, slot)

    def _batch_turns(self) -> Turns:
        from tarry.snapshots.batch_turns import FileLocks, Turns

        with _TURNS_GUARD:
            if self._turns is None:
                if self.path in ("", ":memory:") or self.path.startswith("file:"):
                    self._turns = Turns()
                else:
                    locks = self._turn_locks = FileLocks(self.path + TURNS_SUFFIX)
                    self._turns = Turns(take=locks.take, give=locks.give)
            return self._turns

    def _close_turns(self) -> None:
        """Give back the turns this store holds (when it is closed)."""
        with _TURNS_GUARD:
            if self._turn_locks is not None:
                self._turn_locks.close()
            if self._turns is not None:
                self._turns.clear()
