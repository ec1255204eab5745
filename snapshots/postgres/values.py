"""PostgresStore's event log pages and out-of-line values (a mixin of PostgresStore)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool
from tarry.engine.errors import ConcurrentUpdate
from tarry.engine.state.events import Event
from tarry.snapshots.postgres.sql import (
    check_appended,
    conflict,
    insert_events,
    insert_values,
    session_exists,
    values_size,
)
from tarry.snapshots.records import decode_event, encode_events


class EventsAndValues:
    """The event and value methods of PostgresStore."""

    _pool: ConnectionPool[Any]
    _count: Callable[..., None]

    # -- events ----------------------------------------------------------------------------
    def append_events(self, session_id: str, events: Sequence[Event]) -> None:
        encoded = encode_events(events)
        with self._pool.connection() as conn:
            if not events:  # still an error for an unknown session, as in the other stores
                if not session_exists(conn, session_id):
                    msg = f"no session {session_id!r} to append events to"
                    raise ConcurrentUpdate(msg)
                return
            # One statement, so all or nothing without a transaction.
            try:
                appended = insert_events(conn, session_id, events, encoded)
            except pg_errors.IntegrityError as exc:
                raise conflict(exc, session_id) from exc
            check_appended(appended, session_id, events)
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

    # -- out-of-line values ----------------------------------------------------------------
    def put_values(self, session_id: str, values: Sequence[tuple[str, int, bytes]]) -> None:
        if not values:
            return
        with self._pool.connection() as conn:
            try:
                sent = insert_values(conn, session_id, values)
            except pg_errors.ForeignKeyViolation:
                return  # the session was deleted meanwhile: dropped, as for an unknown one
        # Values of an unknown (e.g. deleted) session are dropped, as in the other stores.
        if sent is not None and sent.rowcount:
            self._count(written=values_size(values))

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

    def get_values_at(self, session_id: str, key: str, indexes: Sequence[int]) -> dict[int, bytes]:
        """The blobs of `key` at `indexes`, by index (missing ones left out), in one read:
        one probe of the primary key per index, whatever else the key holds (the items of
        the lanes a resume of several waits restores)."""
        if not indexes:
            return {}
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT v.idx, v.blob FROM unnest(%s::bigint[]) AS k(wanted) CROSS JOIN LATERAL "
                "(SELECT idx, blob FROM tarry_values WHERE session_id = %s AND key = %s "
                "AND idx = k.wanted) AS v",
                (list(dict.fromkeys(indexes)), session_id, key),
            ).fetchall()
        found = {int(idx): bytes(blob) for idx, blob in rows}
        self._count(read=sum(map(len, found.values())))
        return found
