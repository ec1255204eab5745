"""SQLiteStore's waits, the mailbox and batches of tokens (a mixin of SQLiteStore), with the
tables they need and the backfill of files made before them.

Every write here is one write transaction (BEGIN IMMEDIATE). The mailbox is a queue of messages
per key: `post` appends one, `claim_mail` claims the oldest for a Wait a drive reached, and a
message leaves the queue only in the transaction that records its effect (a token's use with
`mail=`, or the save that names it in `mail_done`).
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tarry.engine.state.events import Event
from tarry.snapshots.codec.pack import loads
from tarry.snapshots.mail import MailInfo, MailRecord
from tarry.snapshots.records import (
    WaitRecord,
    encode_events,
    encode_path,
    wait_records,
    with_lanes,
)
from tarry.snapshots.sql_common import MAIL_COLUMNS, WAIT_COLUMNS, check_tokens
from tarry.snapshots.sqlite.rows import ROWS, from_micros, maybe_micros, micros
from tarry.snapshots.sqlite.sql import (
    _RESUMING,
    _RESUMING_LIVE,
    _add_token,
    _insert,
    _not_continued,
    _prev,
    _Transaction,
)
from tarry.snapshots.store import MailGone

#: Tables of schema version 2. The waits of paused sessions, one per live token of a waiting
#: branch: clustered by token (a poll pages through them in token order), indexed by key (a
#: delivery finds its waits), by kind (an adapter's poll) and by session. The mailbox: a queue
#: of messages per key (schema 4), ids from AUTOINCREMENT so that an id is never reused (a
#: delivery consumes the message by its id); indexed so that each read is a range: a key's
#: unclaimed messages in order, a session's claims, the messages meant for a busy session.
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS waits (
        token      TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        path       BLOB NOT NULL,
        kind       TEXT NOT NULL,
        key        TEXT,
        wake_at    INTEGER,
        reason     TEXT NOT NULL,
        payload    BLOB NOT NULL,
        lane       BLOB NOT NULL DEFAULT X''
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS waits_key ON waits (key, token) WHERE key IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS waits_kind ON waits (kind, token)",
    # A session's waits, and the earliest of their times (schema 5; was on session_id alone).
    "DROP INDEX IF EXISTS waits_session",
    "CREATE INDEX IF NOT EXISTS waits_session_wake ON waits (session_id, wake_at)",
    """CREATE TABLE IF NOT EXISTS mail (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        key        TEXT NOT NULL,
        claimed_by TEXT NOT NULL DEFAULT '',
        target     TEXT,
        value      BLOB NOT NULL,
        at         INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS mail_queue ON mail (key, id) WHERE claimed_by = ''",
    "CREATE INDEX IF NOT EXISTS mail_claims ON mail (claimed_by) WHERE claimed_by <> ''",
    "CREATE INDEX IF NOT EXISTS mail_target ON mail (target, id) "
    "WHERE target IS NOT NULL AND claimed_by = ''",
    "CREATE INDEX IF NOT EXISTS mail_at ON mail (at) WHERE claimed_by = ''",
)


def upgrade_waits(db: sqlite3.Connection) -> None:
    """A file of schema 2 to 4 gets the `lane` column of schema 5 (a parked lane's bytes)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(waits)")}
    if columns and "lane" not in columns:
        db.execute("ALTER TABLE waits ADD COLUMN lane BLOB NOT NULL DEFAULT X''")


def upgrade_mail(db: sqlite3.Connection) -> None:
    """A file of schema 2 or 3 kept one mail row per key and claimant: its rows become one
    message each, in the order they came, in the queue of schema 4."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(mail)")}
    if not columns or "id" in columns:
        return
    db.execute("DROP INDEX IF EXISTS mail_claimed")
    db.execute("ALTER TABLE mail RENAME TO mail_before_queue")
    db.execute(SCHEMA[5])
    db.execute(
        "INSERT INTO mail (key, claimed_by, value, at) "
        "SELECT key, claimed_by, value, at FROM mail_before_queue ORDER BY at, key"
    )
    db.execute("DROP TABLE mail_before_queue")


# A wait is kept only for a live token of its own session: a used one is never made live again.
_ADD_WAIT = (
    f"INSERT OR REPLACE INTO waits ({WAIT_COLUMNS}, lane) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9 "
    "WHERE EXISTS (SELECT 1 FROM tokens WHERE token = ?1 AND session_id = ?2 AND used = 0)"
)
# The wait of a token this save registered: live, the session's, and with no wait row yet (a
# wait row is only ever written for a registered token). One row of VALUES and no REPLACE, so
# SQLite opens no statement journal for it: inside a save's transaction, a statement that may
# write several rows (an INSERT ... SELECT, a REPLACE) first copies every page it is about to
# change, and a start of 10,000 waiting branches copied 250 MB that way.
_NEW_WAIT = f"INSERT INTO waits ({WAIT_COLUMNS}, lane) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_TOKENS = "SELECT value FROM json_each(?)"
# The first time of a session's waits: the first entry past the NULLs of its index range.
# And whether it keeps a stop request (due at once then: see SessionStore.save).
_EARLIEST = (
    "SELECT (SELECT min(wake_at) FROM waits WHERE session_id = ?1 AND wake_at IS NOT NULL), "
    "(SELECT stop FROM sessions WHERE session_id = ?1)"
)
# Written only when it is earlier than the record's own (which the save just wrote).
_WAKE_EARLIER = (
    "UPDATE sessions SET wake_at = ?1 WHERE session_id = ?2 AND (wake_at IS NULL OR wake_at > ?1)"
)
_EMPTY_PATH = encode_path(())


def save_waits(
    db: sqlite3.Cursor,
    sid: str,
    status: str,
    token: str | None,
    fresh: bool,
    waits: Sequence[WaitRecord],
    mail_done: Sequence[int] | None,
    now: int = 0,
) -> None:
    """What a save does to a session's waits and claimed mail, inside its transaction (after
    it registered the record's own `token`, which was new if `fresh`); `now`: the record's
    `updated_at` (microseconds)."""
    for wait in waits:
        # The record's own token is registered already.
        new = fresh if wait.token == token else _add_token(db, wait.token, sid)
        db.execute(_NEW_WAIT if new else _ADD_WAIT, (*_wait_row(wait, sid), bytes(wait.lane)))
    if status == "paused":  # due at the earliest time of all its waits, parked ones too
        earliest, stop = db.execute(_EARLIEST, (sid,)).fetchone()
        if stop is not None:
            earliest = now if earliest is None else min(earliest, now)
        if earliest is not None:
            db.execute(_WAKE_EARLIER, (earliest, sid))
    ended = status != "paused" and status != "running"
    if ended:  # the session ended: so did its waits
        # One statement when it had none (the usual end): their tokens are then used.
        ended = db.execute("DELETE FROM waits WHERE session_id = ? RETURNING token", (sid,))
        tokens = [token for (token,) in ended.fetchall()]
        if tokens:
            db.execute(
                f"UPDATE tokens SET used = 1 WHERE token IN ({_TOKENS})", (json.dumps(tokens),)
            )
    if mail_done is not None or ended:  # a drive that claimed nothing costs nothing here
        settle_claims(db, sid, mail_done or ())


def settle_claims(db: sqlite3.Cursor, sid: str, done: Sequence[int]) -> None:
    """The messages of `done` that the session claimed are consumed; its other claims are
    released (queued again in their place: a queue is ordered by id)."""
    if done:
        db.execute(
            f"DELETE FROM mail WHERE id IN ({_TOKENS}) AND claimed_by = ?",
            (json.dumps(list(done)), sid),
        )
    db.execute("UPDATE mail SET claimed_by = '' WHERE claimed_by = ?", (sid,))


def backfill(db: sqlite3.Connection) -> None:
    """A wait for each paused session of a file made before waits: its live `token`, of the
    kind its meta names (else "external"), at path ()."""
    rows = db.execute(
        "SELECT s.session_id, s.token, s.meta, s.wake_at FROM sessions AS s "
        "JOIN tokens AS t ON t.token = s.token AND t.session_id = s.session_id "
        "WHERE s.status = 'paused' AND t.used = 0"
    ).fetchall()
    for sid, token, meta, wake_at in rows:
        kind = "external"
        try:
            found = loads(meta)
        except Exception:  # an unreadable meta is the session's problem, not the open's
            found = None
        if isinstance(found, dict) and isinstance(found.get("pause_kind"), str):
            kind = found["pause_kind"]
        db.execute(
            f"INSERT OR IGNORE INTO waits ({WAIT_COLUMNS}) VALUES (?, ?, ?, ?, NULL, ?, '', X'')",
            (token, sid, _EMPTY_PATH, kind, wake_at),
        )


class WaitsAndMail:
    """The wait, mailbox and many-token methods of SQLiteStore."""

    _lock: threading.Lock
    _cur: sqlite3.Cursor
    _write: _Transaction
    _seen: tuple[Any, ...] | None
    bytes_written: int

    # -- tokens ----------------------------------------------------------------------------
    def consume_tokens(
        self,
        tokens: Sequence[str],
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Mapping[str, Sequence[Event]] = {},  # noqa: B006 - read only
        mail: Mapping[str, int] = {},  # noqa: B006 - read only
    ) -> dict[str, str]:
        if not tokens:
            return {}
        batch = json.dumps(list(tokens))
        written = 0
        with self._write as db:
            found = db.execute(
                f"SELECT token, session_id, used FROM tokens WHERE token IN ({_TOKENS})", (batch,)
            )
            refused, sids = check_tokens(tokens, found)
            if refused:
                return refused  # nothing was written: the transaction commits nothing
            db.execute(f"UPDATE tokens SET used = 1 WHERE token IN ({_TOKENS})", (batch,))
            db.execute(f"DELETE FROM waits WHERE token IN ({_TOKENS})", (batch,))
            for token in tokens:
                if token in mail:
                    consume_mail(db, mail[token])  # raised inside: nothing is kept
            for sid in sids:
                given = events.get(sid, ())
                prev = _prev(sid, given)
                resuming = (sid, owner, maybe_micros(until), prev)
                # Most are paused: their phase stays (see sql._RESUMING_LIVE); else any.
                resumed = db.execute(_RESUMING_LIVE, resuming).rowcount
                if resumed != 1:
                    resumed = db.execute(_RESUMING, resuming).rowcount
                if resumed != 1 and prev is not None:  # raised inside: nothing is kept
                    raise _not_continued(db, sid, given[0].seq)
                if given:
                    written += _insert(db, sid, given, encode_events(given))
            self._seen = None
        self.bytes_written += written
        return {}

    # -- waits -----------------------------------------------------------------------------
    def wait(self, token: str) -> WaitRecord | None:
        with self._lock:
            rows = self._cur.execute(
                f"SELECT {WAIT_COLUMNS}, lane FROM waits WHERE token = ?", (token,)
            ).fetchall()
        found = with_lanes(rows, from_micros)
        return found[0] if found else None

    def waits(self, session_id: str, *, limit: int | None = None) -> builtins.list[WaitRecord]:
        with self._lock:
            rows = self._cur.execute(
                f"SELECT {WAIT_COLUMNS}, lane FROM waits WHERE session_id = ? "
                "ORDER BY path, token LIMIT ?",
                (session_id, -1 if limit is None else limit),
            ).fetchall()
        return with_lanes(rows, from_micros)

    def waiting(
        self,
        *,
        kind: str | None = None,
        key: str | None = None,
        after: str | None = None,
        limit: int = 1000,
    ) -> builtins.list[WaitRecord]:
        where, args = ["token > ?"], [after or ""]
        table = "waits"
        if key is not None:
            # The key's own entries, in token order: never the kind index and a sort.
            table = "waits INDEXED BY waits_key"
            where.append("key = ?")
            args.append(key)
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        sql = (
            f"SELECT {WAIT_COLUMNS} FROM {table} WHERE {' AND '.join(where)} ORDER BY token LIMIT ?"
        )
        return self._waits(sql, (*args, limit), skip_bad=True)

    def _waits(
        self, sql: str, args: Sequence[Any], *, skip_bad: bool = False
    ) -> builtins.list[WaitRecord]:
        with self._lock:
            rows = self._cur.execute(sql, args).fetchall()
        return wait_records(rows, from_micros, skip_bad=skip_bad)

    def waiters(self, key: str, limit: int = 100) -> builtins.list[WaitRecord]:
        # A token's rowid grows with each one registered (the save that pauses on it), so it
        # orders the key's waits by how long they have waited; a key has few waits to sort.
        columns = ", ".join("w." + c for c in WAIT_COLUMNS.split(", "))
        return self._waits(
            f"SELECT {columns} FROM waits AS w INDEXED BY waits_key "
            "JOIN tokens AS t ON t.token = w.token WHERE w.key = ? ORDER BY t.rowid LIMIT ?",
            (key, limit),
            skip_bad=True,
        )

    # -- the mailbox -----------------------------------------------------------------------
    def post(self, key: str, value: bytes, at: dt.datetime, *, target: str | None = None) -> int:
        with self._write as db:
            mid = db.execute(
                "INSERT INTO mail (key, value, at, target) VALUES (?, ?, ?, ?) RETURNING id",
                (key, bytes(value), micros(at), target),
            ).fetchone()[0]
        return int(mid)

    def claim_mail(
        self, key: str, session_id: str, skip: Sequence[int] = ()
    ) -> tuple[int, bytes] | None:
        with self._write as db:
            row = db.execute(
                "SELECT id, value FROM mail WHERE claimed_by = ? AND key = ? "
                f"AND id NOT IN ({_TOKENS}) ORDER BY id LIMIT 1",
                (session_id, key, json.dumps(list(skip))),
            ).fetchone()
            if row is None:
                row = db.execute(
                    "UPDATE mail SET claimed_by = ? WHERE id = (SELECT id FROM mail "
                    "INDEXED BY mail_queue WHERE key = ? AND claimed_by = '' ORDER BY id LIMIT 1) "
                    "RETURNING id, value",
                    (session_id, key),
                ).fetchone()
        return None if row is None else (row[0], row[1])

    def queued(
        self,
        *,
        key: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> builtins.list[MailRecord]:
        if key is not None:
            sql = (
                f"SELECT {MAIL_COLUMNS} FROM mail INDEXED BY mail_queue "
                "WHERE key = ? AND claimed_by = '' ORDER BY id LIMIT ?"
            )
            args: tuple[Any, ...] = (key, limit)
        else:
            sql = (
                f"SELECT {MAIL_COLUMNS} FROM mail INDEXED BY mail_target "
                "WHERE target = ? AND claimed_by = '' ORDER BY id LIMIT ?"
            )
            args = (session_id, limit)
        with self._lock:
            rows = self._cur.execute(sql, args).fetchall()
        return [ROWS.message(row) for row in rows]

    def pending(self, limit: int = 100) -> builtins.list[tuple[WaitRecord, MailRecord]]:
        # Each key with unclaimed mail (a skip-scan of the queue index), its oldest message
        # and the least token waiting on it.
        sql = (
            f"SELECT {', '.join('w.' + c for c in WAIT_COLUMNS.split(', '))}, "
            f"{', '.join('m.' + c for c in MAIL_COLUMNS.split(', '))} "
            "FROM (SELECT key, min(id) AS id FROM mail INDEXED BY mail_queue "
            "WHERE claimed_by = '' GROUP BY key) AS q "
            "JOIN mail AS m ON m.id = q.id "
            "JOIN waits AS w ON w.token = (SELECT w2.token FROM waits AS w2 INDEXED BY waits_key "
            "JOIN tokens AS t ON t.token = w2.token WHERE w2.key = q.key ORDER BY t.rowid LIMIT 1) "
            "ORDER BY q.id LIMIT ?"
        )
        with self._lock:
            rows = self._cur.execute(sql, (limit,)).fetchall()
        return [(ROWS.wait(row[:8]), ROWS.message(row[8:])) for row in rows]

    def discard(self, key: str) -> int:
        with self._write as db:
            cur = db.execute("DELETE FROM mail WHERE key = ? AND claimed_by = ''", (key,))
            return cur.rowcount

    def mailbox(
        self, *, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> builtins.list[MailInfo]:
        where, args = ["claimed_by = ''"], []
        if prefix is not None:  # a range of the index: no LIKE, so no wildcards
            where.append("key >= ? AND substr(key, 1, ?) = ?")
            args += [prefix, len(prefix), prefix]
        if after is not None:
            where.append("key > ?")
            args.append(after)
        sql = (
            "SELECT key, count(*), min(at) FROM mail INDEXED BY mail_queue "
            f"WHERE {' AND '.join(where)} GROUP BY key ORDER BY key LIMIT ?"
        )
        with self._lock:
            rows = self._cur.execute(sql, (*args, limit)).fetchall()
        return [MailInfo(key, count, from_micros(at)) for key, count, at in rows]

    def purge_mail(self, before: dt.datetime, limit: int = 1000) -> int:
        with self._write as db:
            return db.execute(
                "DELETE FROM mail WHERE id IN (SELECT id FROM mail INDEXED BY mail_at "
                "WHERE claimed_by = '' AND at < ? ORDER BY at, id LIMIT ?)",
                (micros(before), limit),
            ).rowcount

    # -- many keys at once ------------------------------------------------------------------
    def waiters_many(
        self, keys: Sequence[str], limit: int = 100
    ) -> dict[str, builtins.list[WaitRecord]]:
        # `waiters` of each key: an embedded database has no round trips to save.
        found = {key: self.waiters(key, limit) for key in dict.fromkeys(keys)}
        return {key: waits for key, waits in found.items() if waits}

    def queued_keys(self, keys: Sequence[str]) -> set[str]:
        sql = "SELECT 1 FROM mail INDEXED BY mail_queue WHERE key = ? AND claimed_by = '' LIMIT 1"
        with self._lock:
            return {key for key in keys if self._cur.execute(sql, (key,)).fetchone() is not None}


def consume_mail(db: sqlite3.Cursor, mid: int) -> None:
    """Delete the unclaimed message `mid` inside a token's use; MailGone (the caller's
    transaction then rolls back) when it is gone or claimed."""
    if db.execute("DELETE FROM mail WHERE id = ? AND claimed_by = ''", (mid,)).rowcount != 1:
        msg = f"message {mid} is no longer queued: another delivery or Wait took it"
        raise MailGone(msg)


def _wait_row(wait: WaitRecord, sid: str) -> tuple[Any, ...]:
    return (
        wait.token,
        sid,
        encode_path(wait.path),
        wait.kind,
        wait.key,
        maybe_micros(wait.wake_at),
        wait.reason,
        bytes(wait.payload),
    )
