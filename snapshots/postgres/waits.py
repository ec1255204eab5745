"""PostgresStore's waits, the mailbox and batches of tokens (a mixin of PostgresStore), with
the migration that adds them. (A save's part for them is in postgres_writes.py.)

Lock order, so that no two writers wait for each other in a circle: token rows (in token
order), then session rows (in id order), then wait rows. A `post` and a `save` that registers
a wait on the same key are serialised by a transaction-level advisory lock on the key's hash:
the post either sees the wait or leaves mail that the saver's `take_mail` finds.
"""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool
from tarry.engine.state.events import Event
from tarry.snapshots.codec.pack import loads
from tarry.snapshots.postgres.sql import _check_batch, _conflict, _maybe_utc
from tarry.snapshots.records import WaitRecord, decode_path, encode_events, encode_path
from tarry.snapshots.store import refusals

#: Migration 5: waits of paused sessions, one per live token of a waiting branch (by token for
#: a poll's pages, by key for a delivery, by kind for an adapter's poll, by session), and the
#: mailbox: one row per key and claimant ('' while no session claimed it).
DESCRIPTION = "waits by token, key, kind and session; the mailbox of early deliveries"
STATEMENTS = (
    """CREATE TABLE tarry_waits (
        token      text COLLATE "C" PRIMARY KEY,
        session_id text COLLATE "C" NOT NULL REFERENCES tarry_sessions ON DELETE CASCADE,
        path       bytea NOT NULL,
        kind       text COLLATE "C" NOT NULL,
        key        text COLLATE "C",
        wake_at    timestamptz,
        reason     text NOT NULL,
        payload    bytea NOT NULL
    )""",
    "CREATE INDEX tarry_waits_key ON tarry_waits (key, token) WHERE key IS NOT NULL",
    "CREATE INDEX tarry_waits_kind ON tarry_waits (kind, token)",
    "CREATE INDEX tarry_waits_session ON tarry_waits (session_id)",
    """CREATE TABLE tarry_mail (
        key        text COLLATE "C" NOT NULL,
        claimed_by text COLLATE "C" NOT NULL DEFAULT '',
        value      bytea NOT NULL,
        at         timestamptz NOT NULL,
        PRIMARY KEY (key, claimed_by)
    )""",
    "CREATE INDEX tarry_mail_claimed ON tarry_mail (claimed_by) WHERE claimed_by <> ''",
)

_WAIT = "token, session_id, path, kind, key, wake_at, reason, payload"
_EMPTY_PATH = encode_path(())

_LOCK_TOKENS = (
    "SELECT token, session_id, used FROM tarry_tokens WHERE token = ANY(%s::text[]) "
    "ORDER BY token FOR NO KEY UPDATE"
)
_LOCK_SESSIONS = (
    "SELECT session_id FROM tarry_sessions WHERE session_id = ANY(%s::text[]) "
    "ORDER BY session_id FOR NO KEY UPDATE"
)
_RESUME = """
UPDATE tarry_sessions SET status = 'running', stop = NULL,
    lease_owner = COALESCE(%(owner)s::text, lease_owner),
    lease_until = CASE WHEN %(owner)s::text IS NULL THEN lease_until
                       ELSE %(until)s::timestamptz END
WHERE session_id = ANY(%(sids)s::text[])
"""
_APPEND = """
INSERT INTO tarry_events (session_id, seq, type, blob)
SELECT %(sid)s, e.s, e.t, e.b
FROM unnest(%(seqs)s::bigint[], %(types)s::text[], %(blobs)s::bytea[]) AS e(s, t, b)
WHERE (SELECT COALESCE(max(seq), 0) FROM tarry_events WHERE session_id = %(sid)s) = %(after)s
"""


def backfill(conn: psycopg.Connection[Any]) -> None:
    """A wait for each paused session of a database made before waits: its live `token`, of
    the kind its meta names (else "external"), at path ()."""
    rows = conn.execute(
        "SELECT s.session_id, s.token, s.meta, s.wake_at FROM tarry_sessions AS s "
        "JOIN tarry_tokens AS t ON t.token = s.token AND t.session_id = s.session_id "
        "WHERE s.status = 'paused' AND NOT t.used"
    ).fetchall()
    for sid, token, meta, wake_at in rows:
        kind = "external"
        try:
            found = loads(bytes(meta))
        except Exception:  # an unreadable meta is the session's problem, not the migration's
            found = None
        if isinstance(found, dict) and isinstance(found.get("pause_kind"), str):
            kind = found["pause_kind"]
        conn.execute(
            f"INSERT INTO tarry_waits ({_WAIT}) VALUES (%s, %s, %s, %s, NULL, %s, '', '') "
            "ON CONFLICT DO NOTHING",
            (token, sid, _EMPTY_PATH, kind, wake_at),
        )


class WaitsAndMail:
    """The wait, mailbox and many-token methods of PostgresStore."""

    _pool: ConnectionPool[Any]
    _batch: Callable[[], AbstractContextManager[tuple[psycopg.Connection[Any], Callable[[], None]]]]
    _count: Callable[..., None]

    # -- tokens ----------------------------------------------------------------------------
    def consume_tokens(
        self,
        tokens: Sequence[str],
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Mapping[str, Sequence[Event]] = {},  # noqa: B006 - read only
    ) -> dict[str, str]:
        if not tokens:
            return {}
        for given in events.values():
            _check_batch(given)
        written = 0
        try:
            with self._pool.connection() as conn, conn.transaction():
                # Locked in token order: a racing consumer waits here, then sees them used.
                found = {
                    token: (sid, used)
                    for token, sid, used in conn.execute(_LOCK_TOKENS, (list(tokens),))
                }
                refused = refusals(tokens, {t: used for t, (_, used) in found.items()})
                if refused:
                    raise _Refused(refused)
                sids = sorted({found[t][0] for t in tokens})
                conn.execute("UPDATE tarry_tokens SET used = true WHERE token = ANY(%s)",
                             (list(tokens),))  # fmt: skip
                conn.execute(_LOCK_SESSIONS, (sids,))
                conn.execute(_RESUME, {"owner": owner, "until": until, "sids": sids})
                conn.execute("DELETE FROM tarry_waits WHERE token = ANY(%s)", (list(tokens),))
                for sid in sids:
                    given = events.get(sid, ())
                    if not given:
                        continue
                    encoded = encode_events(given)
                    appended = conn.execute(
                        _APPEND,
                        {
                            "sid": sid,
                            "after": given[0].seq - 1,
                            "seqs": [e.seq for e in given],
                            "types": [e.type for e in given],
                            "blobs": encoded,
                        },
                    )
                    if appended.rowcount != len(given):
                        raise _conflict(None, sid, given)
                    written += sum(map(len, encoded))
        except _Refused as refused:
            return refused.tokens
        except pg_errors.IntegrityError as exc:
            raise _conflict(exc, "?") from exc
        self._count(written=written)
        return {}

    # -- waits -----------------------------------------------------------------------------
    def waits(self, session_id: str) -> builtins.list[WaitRecord]:
        return self._waits(
            f"SELECT {_WAIT} FROM tarry_waits WHERE session_id = %s ORDER BY path, token",
            (session_id,),
        )

    def waiting(
        self,
        *,
        kind: str | None = None,
        key: str | None = None,
        after: str | None = None,
        limit: int = 1000,
    ) -> builtins.list[WaitRecord]:
        where, args = ["token > %s"], [after or ""]
        if key is not None:
            where.append("key = %s")
            args.append(key)
        if kind is not None:
            where.append("kind = %s")
            args.append(kind)
        sql = f"SELECT {_WAIT} FROM tarry_waits WHERE {' AND '.join(where)} ORDER BY token LIMIT %s"
        return self._waits(sql, (*args, limit))

    def _waits(self, sql: str, args: Sequence[Any]) -> builtins.list[WaitRecord]:
        with self._pool.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [_wait(row) for row in rows]

    # -- the mailbox -----------------------------------------------------------------------
    def post(self, key: str, value: bytes, at: dt.datetime) -> builtins.list[WaitRecord]:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
            # A statement of its own after the lock: it sees the waits of a save that held it.
            rows = conn.execute(
                f"SELECT {_WAIT} FROM tarry_waits WHERE key = %s ORDER BY token", (key,)
            ).fetchall()
            if not rows:
                conn.execute(
                    "INSERT INTO tarry_mail (key, claimed_by, value, at) VALUES (%s, '', %s, %s) "
                    "ON CONFLICT (key, claimed_by) DO UPDATE SET value = EXCLUDED.value, "
                    "at = EXCLUDED.at",
                    (key, bytes(value), at),
                )
        return [_wait(row) for row in rows]

    def take_mail(self, keys: Sequence[str], session_id: str) -> dict[str, bytes]:
        if not keys:
            return {}
        with self._pool.connection() as conn, conn.transaction():
            mine = conn.execute(
                "SELECT key, value FROM tarry_mail WHERE claimed_by = %s AND key = ANY(%s)",
                (session_id, list(keys)),
            ).fetchall()
            taken = {key: bytes(value) for key, value in mine}
            free = [k for k in dict.fromkeys(keys) if k not in taken]
            if free:
                claimed = conn.execute(
                    "UPDATE tarry_mail SET claimed_by = %s WHERE claimed_by = '' "
                    "AND key = ANY(%s) RETURNING key, value",
                    (session_id, free),
                ).fetchall()
                taken.update((key, bytes(value)) for key, value in claimed)
        return taken

    def discard(self, key: str) -> bool:
        with self._pool.connection() as conn:
            cur = conn.execute("DELETE FROM tarry_mail WHERE key = %s AND claimed_by = ''", (key,))
            return cur.rowcount == 1

    def mail(self, key: str) -> bytes | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT value FROM tarry_mail WHERE key = %s AND claimed_by = ''", (key,)
            ).fetchone()
        return None if row is None else bytes(row[0])


class _Refused(Exception):
    """Raised inside consume_tokens' transaction to roll it back (nothing was written)."""

    def __init__(self, tokens: dict[str, str]) -> None:
        super().__init__(tokens)
        self.tokens = tokens


def _wait(row: Sequence[Any]) -> WaitRecord:
    token, sid, path, kind, key, wake_at, reason, payload = row
    return WaitRecord(
        token, sid, decode_path(bytes(path)), kind, key, _maybe_utc(wake_at), reason, bytes(payload)
    )
