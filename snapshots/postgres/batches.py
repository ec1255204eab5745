"""PostgresStore's provider batch records (tarry.batches), with the migration that adds them:
see snapshots/batch_records.py."""

from __future__ import annotations

import builtins
import datetime as dt
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool
from tarry.snapshots.batch_records import BATCH_COLUMNS, BatchRecord, counts_of, counts_text

if TYPE_CHECKING:  # imported where used: a store of no batches does not import it
    from tarry.snapshots.batch_turns import Turns

#: Made on first use; guards the store's connection of turns.
_TURNS_GUARD = threading.Lock()

#: The migration: one row per submission, and the keys of the open ones (a key in at most one).
DESCRIPTION = "provider batch submissions and the keys of the open ones"
STATEMENTS = (
    """CREATE TABLE tarry_batches (
        submission_id text COLLATE "C" PRIMARY KEY,
        via           text COLLATE "C" NOT NULL,
        provider_id   text COLLATE "C",
        status        text NOT NULL,
        total         bigint NOT NULL,
        created_at    timestamptz NOT NULL,
        updated_at    timestamptz NOT NULL,
        counts        text NOT NULL DEFAULT '{}',
        ended_at      timestamptz,
        claimed_by    text COLLATE "C",
        claimed_until timestamptz
    )""",
    "CREATE INDEX tarry_batches_open ON tarry_batches (created_at, submission_id) "
    "WHERE ended_at IS NULL",
    """CREATE TABLE tarry_batch_items (
        key           text COLLATE "C" PRIMARY KEY,
        submission_id text COLLATE "C" NOT NULL
    )""",
    "CREATE INDEX tarry_batch_items_submission ON tarry_batch_items (submission_id, key)",
)


def _record(row: Sequence[Any]) -> BatchRecord:
    return BatchRecord(
        submission_id=row[0],
        via=row[1],
        provider_id=row[2],
        status=row[3],
        total=int(row[4]),
        created_at=row[5],
        updated_at=row[6],
        counts=counts_of(row[7]),
        ended_at=row[8],
    )


class Batches:
    """The batch records of a PostgresStore; each method one transaction."""

    _pool: ConnectionPool[Any]
    dsn: str
    schema: str | None
    _turns: Turns | None = None
    _turn_conn: psycopg.Connection[Any] | None = None
    _configure: Callable[[psycopg.Connection[Any]], None]

    def batch_intent(self, record: BatchRecord, keys: Sequence[str]) -> builtins.list[str]:
        """Record `record` with those of `keys` that something still waits on and no open
        submission holds; returns them (nothing is recorded when none is free). Two workers
        that gather the same keys at once split them: each key goes to the one whose insert of
        it commits first; a key whose result was delivered since (to its session, or queued
        for it while it was busy) is not submitted again."""
        keys = list(dict.fromkeys(keys))
        with self._pool.connection() as conn, conn.transaction():
            rows = conn.execute(
                "INSERT INTO tarry_batch_items (key, submission_id) "
                "SELECT k, %s FROM unnest(%s::text[]) AS k "
                "WHERE EXISTS (SELECT 1 FROM tarry_waits w WHERE w.key = k) "
                "AND NOT EXISTS (SELECT 1 FROM tarry_mail m WHERE m.key = k AND m.claimed_by = '') "
                "ON CONFLICT (key) DO NOTHING "
                "RETURNING key",
                (record.submission_id, keys),
            ).fetchall()
            got = {key for (key,) in rows}
            free = [key for key in keys if key in got]
            if free:
                conn.execute(
                    f"INSERT INTO tarry_batches ({BATCH_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        record.submission_id,
                        record.via,
                        record.provider_id,
                        record.status,
                        len(free),
                        record.created_at,
                        record.updated_at,
                        counts_text(record.counts),
                        record.ended_at,
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
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE tarry_batches SET status = %s, updated_at = %s,"
                " provider_id = COALESCE(%s, provider_id), counts = COALESCE(%s, counts)"
                " WHERE submission_id = %s",
                (
                    status,
                    at,
                    provider_id,
                    None if counts is None else counts_text(counts),
                    submission_id,
                ),
            )

    def batch_end(
        self, submission_id: str, *, status: str, at: dt.datetime, counts: dict[str, int]
    ) -> None:
        """Mark a submission ended and free its keys."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(
                "UPDATE tarry_batches SET status = %s, updated_at = %s, ended_at = %s,"
                " counts = %s WHERE submission_id = %s",
                (status, at, at, counts_text(counts), submission_id),
            )
            conn.execute("DELETE FROM tarry_batch_items WHERE submission_id = %s", (submission_id,))

    def batches(
        self, *, open: bool = True, via: str | None = None, limit: int = 1000
    ) -> builtins.list[BatchRecord]:
        """Submissions oldest first: the open ones (or every one), of `via` (or any)."""
        where = ["ended_at IS NULL"] if open else []
        params: list[Any] = []
        if via is not None:
            where.append("via = %s")
            params.append(via)
        sql = f"SELECT {BATCH_COLUMNS} FROM tarry_batches"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, submission_id LIMIT %s"
        with self._pool.connection() as conn:
            rows = conn.execute(sql, (*params, limit)).fetchall()
        return [_record(row) for row in rows]

    def batch_claim(
        self, submission_id: str, owner: str, until: dt.datetime, now: dt.datetime
    ) -> bool:
        """Lease an open submission to `owner` until `until` (to deliver its results or upload
        it again), unless another owner holds it; whether it is `owner`'s now. The row lock
        is taken with SKIP LOCKED: a worker never waits for another one's claim."""
        with self._pool.connection() as conn:
            row = conn.execute(
                "UPDATE tarry_batches SET claimed_by = %s, claimed_until = %s"
                " WHERE submission_id = (SELECT submission_id FROM tarry_batches"
                " WHERE submission_id = %s AND ended_at IS NULL"
                " AND (claimed_by IS NULL OR claimed_by = %s OR claimed_until < %s)"
                " FOR UPDATE SKIP LOCKED) RETURNING submission_id",
                (owner, until, submission_id, owner, now),
            ).fetchone()
        return row is not None

    def batch_keys(self, submission_id: str) -> builtins.list[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT key FROM tarry_batch_items WHERE submission_id = %s ORDER BY key",
                (submission_id,),
            ).fetchall()
        return [key for (key,) in rows]

    def batch_submitted(self, keys: Sequence[str]) -> set[str]:
        """Those of `keys` that an open submission holds."""
        if not keys:
            return set()
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT key FROM tarry_batch_items WHERE key = ANY(%s::text[])",
                (list(dict.fromkeys(keys)),),
            ).fetchall()
        return {key for (key,) in rows}

    # -- turns: whose round it is to check a batch (snapshots/batch_turns.py) ----------------

    def batch_turns(
        self, submission_ids: Sequence[str], *, owner: str, slot: int
    ) -> builtins.set[str]:
        """Those of the open submissions whose status check is `owner`'s in round `slot`
        (snapshots/batch_turns.py). The other processes are kept out by a session-level
        advisory lock per turn (`pg_try_advisory_lock`: never waited for, nothing written),
        held by a connection of this store's own, beside its pool, until the slot ends; the
        server drops them when that connection goes (its process died). A failure of that
        connection forgets the turns and is raised (the round then checks every batch)."""
        if not submission_ids and self._turns is None:
            return set()  # no batch was ever open here: no connection made for turns
        turns = self._batch_turns()
        try:
            return turns.turns(submission_ids, owner, slot)
        except psycopg.Error:
            self._drop_turn_conn()
            turns.clear()
            raise

    def _batch_turns(self) -> Turns:
        from tarry.snapshots.batch_turns import Turns

        with _TURNS_GUARD:
            if self._turns is None:
                namespace = self.schema
                if namespace is None:
                    with self._pool.connection() as conn:
                        row = conn.execute("SELECT current_schema()").fetchone()
                    namespace = str(row[0]) if row else ""
                self._turns = Turns(namespace, self._take_turns, self._give_turns)
            return self._turns

    def _turn_connection(self) -> psycopg.Connection[Any]:
        if self._turn_conn is None or self._turn_conn.closed:
            kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": 10}
            if "application_name" not in conninfo_to_dict(self.dsn):
                kwargs["application_name"] = "tarry-turns"
            conn = psycopg.connect(self.dsn, **kwargs)
            self._configure(conn)
            self._turn_conn = conn
        return self._turn_conn

    def _take_turns(self, keys: list[int]) -> set[int]:
        rows = (
            self._turn_connection()
            .execute(
                "SELECT k FROM unnest(%s::bigint[]) AS k WHERE pg_try_advisory_lock(k)", (keys,)
            )
            .fetchall()
        )
        return {int(k) for (k,) in rows}

    def _give_turns(self, keys: list[int]) -> None:
        conn = self._turn_conn
        if conn is None or conn.closed:
            return  # its locks went with it
        conn.execute("SELECT pg_advisory_unlock(k) FROM unnest(%s::bigint[]) AS k", (keys,))

    def _drop_turn_conn(self) -> None:
        with _TURNS_GUARD:
            conn, self._turn_conn = self._turn_conn, None
        if conn is not None:
            try:
                if not conn.closed:
                    conn.execute("SELECT pg_advisory_unlock_all()")  # at once, for the others
                conn.close()
            except psycopg.Error:
                pass

    def _close_turns(self) -> None:
        """Close the connection of turns (the server drops its locks)."""
        self._drop_turn_conn()
        if self._turns is not None:
            self._turns.clear()
