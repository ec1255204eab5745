"""PostgresStore's tokens, stop requests, timers, leases and marks (a mixin of PostgresStore)."""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool
from tarry.engine.errors import ConcurrentUpdate
from tarry.engine.state.events import Event
from tarry.snapshots.postgres import writes as writes
from tarry.snapshots.postgres.sql import (
    CLAIM,
    CLAIM_DUE,
    CLAIM_DUE_AFTER,
    CLAIM_WAITS,
    RENEW,
    ROWS,
    SELECT,
    check_batch,
    conflict,
)
from tarry.snapshots.records import SessionRecord, TokenInfo, encode_events
from tarry.snapshots.store import MailGone, stale


class TokensAndLeases:
    """The token, control, timer, lease and mark methods of PostgresStore."""

    _pool: ConnectionPool[Any]
    _batch: Callable[[], AbstractContextManager[tuple[psycopg.Connection[Any], Callable[[], None]]]]
    _count: Callable[..., None]

    # -- tokens ----------------------------------------------------------------------------
    def find_token(self, token: str) -> TokenInfo | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT session_id, used FROM tarry_tokens WHERE token = %s", (token,)
            ).fetchone()
        return None if row is None else TokenInfo(row[0], bool(row[1]))

    def find_tokens(self, tokens: Sequence[str]) -> dict[str, TokenInfo]:
        if not tokens:
            return {}
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT token, session_id, used FROM tarry_tokens WHERE token = ANY(%s::text[])",
                (list(tokens),),
            ).fetchall()
        return {token: TokenInfo(sid, bool(used)) for token, sid, used in rows}

    def consume_token(
        self,
        token: str,
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Sequence[Event] = (),
        version: int | None = None,
        mail: int | None = None,
    ) -> bool:
        check_batch(events)
        encoded = encode_events(events)
        args = writes.consume_args(token, owner, until, events, encoded, version, mail)
        sql = writes.consume_sql(bool(events), version is not None, mail is not None)
        named = events[0].session_id if events else "?"
        try:
            with self._pool.connection() as conn:
                row = conn.execute(sql, args).fetchone()
        except pg_errors.DivisionByZero:  # the guard: the session moved on, nothing written
            if version is None:
                raise conflict(None, named, events) from None
            msg = f"session {named!r} changed since version {version} (the token is unused)"
            raise ConcurrentUpdate(msg) from None
        except pg_errors.InvalidArgumentForLogarithm:  # the mail guard: nothing written
            msg = f"message {mail} is no longer queued: another delivery or Wait took it"
            raise MailGone(msg) from None
        except pg_errors.IntegrityError as exc:
            raise conflict(exc, named) from exc
        sid, appended, *_guards, used, owner_id, found_version, status = row
        if sid is None:
            if version is not None and used is False:  # live, and not used by this call: why?
                found = None if found_version is None else (found_version, status)
                moved = stale(owner_id, found, version)
                if moved is not None:
                    raise moved
            return False  # used or unknown: nothing was written
        if appended != len(events):  # cannot be: the session is set running only if they continue
            raise conflict(None, sid, events)
        self._count(written=sum(map(len, encoded)))
        return True

    # -- control ---------------------------------------------------------------------------
    def request_stop(self, session_id: str, stop: str) -> str | None:
        with self._pool.connection() as conn:
            if (
                conn.execute(
                    "UPDATE tarry_sessions SET stop = %s WHERE session_id = %s AND status = 'running'",
                    (stop, session_id),
                ).rowcount
                == 1
            ):
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
            f"{SELECT} WHERE status = 'paused' AND wake_at <= %s "
            "ORDER BY wake_at, session_id LIMIT %s",
            (now, limit),
        )

    def claim(self, session_id: str, owner: str, until: dt.datetime, now: dt.datetime) -> bool:
        args = {"sid": session_id, "owner": owner, "until": until, "now": now}
        with self._pool.connection() as conn:
            if conn.execute(CLAIM, args).rowcount == 1:
                return True
            # Nothing claimed: the lease is someone else's, or the row was locked. A renewal
            # of our own lease must not fail because another transaction held the row for a
            # moment, so it waits for the lock (one short transaction at most).
            row = conn.execute(
                "SELECT lease_owner FROM tarry_sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
            if row is None or row[0] != owner:
                return False
            return conn.execute(RENEW, args).rowcount == 1

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
        sql = CLAIM_DUE_AFTER if after is not None else CLAIM_DUE
        if after is not None:
            args["after_at"], args["after_id"] = after
        with self._pool.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        records = [ROWS.session(row) for row in rows]
        records.sort(key=lambda r: (r.wake_at, r.session_id))  # RETURNING has no order
        return records

    def claim_waits(
        self, tokens: Sequence[str], owner: str, until: dt.datetime, now: dt.datetime
    ) -> dict[str, SessionRecord]:
        if not tokens:
            return {}
        args = {"tokens": list(tokens), "owner": owner, "until": until, "now": now}
        with self._pool.connection() as conn:
            rows = conn.execute(CLAIM_WAITS, args).fetchall()
        claimed: dict[str, SessionRecord] = {}
        for row in rows:
            record = ROWS.session(row[:-1])
            claimed.update(dict.fromkeys(row[-1], record))
        return claimed

    def expired(
        self, now: dt.datetime, limit: int = 100, *, after: tuple[dt.datetime, str] | None = None
    ) -> builtins.list[SessionRecord]:
        if after is None:
            return self._select(
                f"{SELECT} WHERE lease_until <= %s ORDER BY lease_until, session_id LIMIT %s",
                (now, limit),
            )
        return self._select(
            f"{SELECT} WHERE lease_until <= %s AND (lease_until, session_id) > (%s, %s) "
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
        return [ROWS.session(row) for row in rows]
