"""SQLiteStore's tokens, stop requests, timers, leases and marks (a mixin of SQLiteStore)."""

from __future__ import annotations

import builtins
import datetime as dt
import json
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from tarry.engine.state.events import Event
from tarry.snapshots.records import SessionRecord, TokenInfo, encode_events
from tarry.snapshots.sqlite import waits as waits_
from tarry.snapshots.sqlite.rows import ROWS, maybe_micros, micros
from tarry.snapshots.sqlite.sql import (
    _CLAIM_DUE,
    _CLAIM_WAITS,
    _DUE,
    _EXPIRED,
    _LIVE_WAITS,
    _RESUMING,
    _RESUMING_LIVE,
    _TOKEN_SESSION,
    _TOKEN_VERSION,
    _USE_TOKEN,
    _USE_WAIT_TOKEN,
    FIND_TOKEN,
    FIND_TOKENS,
    LIVE,
    _insert,
    _not_continued,
    _prev,
    _Transaction,
)
from tarry.snapshots.store import stale


class TokensAndLeases:
    """The token, control, timer, lease and mark methods of SQLiteStore."""

    _lock: threading.Lock
    _cur: sqlite3.Cursor
    _write: _Transaction
    _seen: tuple[Any, ...] | None
    _typed: bool
    bytes_written: int

    # -- tokens ----------------------------------------------------------------------------
    def find_token(self, token: str) -> TokenInfo | None:
        with self._lock:
            row = self._cur.execute(FIND_TOKEN, (token,)).fetchone()
        return None if row is None else TokenInfo(row[0], bool(row[1]))

    def find_tokens(self, tokens: Sequence[str]) -> dict[str, TokenInfo]:
        if not tokens:
            return {}
        with self._lock:
            rows = self._cur.execute(FIND_TOKENS, (json.dumps(list(tokens)),)).fetchall()
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
        encoded = encode_events(events)
        prev = _prev(None, events)
        with self._write as db:
            if version is not None:
                row = db.execute(_TOKEN_VERSION, (token,)).fetchone()
                if row is None:
                    return False  # unknown or used
                found = None if row[1] is None else (row[1], row[2])
                if (moved := stale(row[0], found, version)) is not None:
                    raise moved
            # Of any number of racing processes, exactly one sees used = 0 (the write lock
            # of BEGIN IMMEDIATE serialises them); the lease and events go in the same commit.
            if (
                db.execute(_USE_WAIT_TOKEN, (token,)).rowcount != 1
                and db.execute(_USE_TOKEN, (token,)).rowcount != 1
            ):
                return False
            if mail is not None:
                waits_.consume_mail(db, mail)  # MailGone: the transaction rolls back
            # The session's indexed columns come with its id: the save that ends this drive
            # leaves those it does not change alone (see _INDEXED).
            seen = db.execute(_TOKEN_SESSION, (token,)).fetchone()
            sid = seen[0]
            if seen[1] is None:  # the session is gone: only the token is used
                continues = prev is None
            else:
                # A paused session stays in its phase ("live"): see sql._RESUMING_LIVE.
                resuming = _RESUMING_LIVE if seen[1] in LIVE else _RESUMING
                continues = (
                    db.execute(resuming, (sid, owner, maybe_micros(until), prev)).rowcount == 1
                )
                self._seen = (sid, "running", *seen[2:])
            if not continues:
                raise _not_continued(db, sid, events[0].seq)
            written = _insert(db, sid, events, encoded, self._typed)
        self.bytes_written += written
        return True

    # -- control ---------------------------------------------------------------------------
    def request_stop(self, session_id: str, stop: str) -> str | None:
        with self._write as db:
            db.execute(
                "UPDATE sessions SET stop = ? WHERE session_id = ? AND status = 'running'",
                (stop, session_id),
            )
            row = db.execute(
                "SELECT status FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return None if row is None else row[0]

    def stop_requested(self, session_id: str) -> str | None:
        with self._lock:
            row = self._cur.execute(
                "SELECT stop FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return None if row is None else row[0]

    # -- timers and leases -----------------------------------------------------------------
    def due(self, now: dt.datetime, limit: int = 100) -> builtins.list[SessionRecord]:
        return self._select(_DUE, (micros(now), limit))

    def claim(self, session_id: str, owner: str, until: dt.datetime, now: dt.datetime) -> bool:
        with self._lock:
            cur = self._cur.execute(
                "UPDATE sessions SET lease_owner = ?, lease_until = ? WHERE session_id = ? "
                "AND (lease_owner IS NULL OR lease_until IS NULL OR lease_until <= ? "
                "OR lease_owner = ?)",
                (owner, micros(until), session_id, micros(now), owner),
            )
            return cur.rowcount == 1

    def release(self, session_id: str, owner: str) -> None:
        with self._lock:
            self._cur.execute(
                "UPDATE sessions SET lease_owner = NULL, lease_until = NULL "
                "WHERE session_id = ? AND lease_owner = ?",
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
        # One statement under the write lock: no other claimant (thread or process) can take
        # the same rows between the SELECT and the UPDATE.
        cursor = (micros(after[0]), after[1]) if after is not None else (-(2**63), "")
        args = (owner, micros(until), micros(now), *cursor, limit)
        with self._lock:
            rows = self._cur.execute(_CLAIM_DUE, args).fetchall()
        records = [ROWS.session(row) for row in rows]
        records.sort(key=lambda r: (r.wake_at, r.session_id))  # RETURNING has no order
        return records

    def claim_waits(
        self, tokens: Sequence[str], owner: str, until: dt.datetime, now: dt.datetime
    ) -> dict[str, SessionRecord]:
        if not tokens:
            return {}
        asked = json.dumps(list(tokens))
        # One write transaction: no other claimant (thread or process) leases the same
        # sessions, and no token is used, between the claim and the read of the waits.
        with self._write as db:
            rows = db.execute(_CLAIM_WAITS, (asked, owner, micros(until), micros(now))).fetchall()
            live = db.execute(_LIVE_WAITS, (asked,)).fetchall() if rows else []
        records = {record.session_id: record for record in map(ROWS.session, rows)}
        return {token: records[sid] for token, sid in live if sid in records}

    def expired(
        self, now: dt.datetime, limit: int = 100, *, after: tuple[dt.datetime, str] | None = None
    ) -> builtins.list[SessionRecord]:
        cursor = (micros(after[0]), after[1]) if after is not None else (-(2**63), "")
        return self._select(_EXPIRED, (micros(now), *cursor, limit))

    # -- store-wide marks --------------------------------------------------------------------
    def mark(self, name: str) -> None:
        with self._lock:
            self._cur.execute("INSERT OR IGNORE INTO marks (name) VALUES (?)", (name,))

    def marked(self, name: str) -> bool:
        with self._lock:
            row = self._cur.execute("SELECT 1 FROM marks WHERE name = ?", (name,)).fetchone()
        return row is not None

    # -- internals ---------------------------------------------------------------------------
    def _select(self, sql: str, args: Sequence[Any]) -> builtins.list[SessionRecord]:
        with self._lock:
            rows = self._cur.execute(sql, args).fetchall()
        return [ROWS.session(row) for row in rows]
