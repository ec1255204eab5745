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
    FIND_TOKENS,
    USED_WAIT,
    _add_token,
    _insert,
    _not_continued,
    _prev,
    _Transaction,
)
from tarry.snapshots.store import MailGone

#: Tables of schema version 2. The waits of paused sessions, one per token of a waiting branch
#: (schema 8: the token lives here; `used` is 0 while it is live, and when it was used after):
#: clustered by token (a poll pages
#: through them in token order); the live ones indexed by key in the order they came (a
#: delivery finds the longest waiter: `ord` counts up per key) and by kind (an adapter's
#: poll); all by session (live ones first, by time). A used row keeps only what refuses its
#: token again (see sql.USED_WAIT) until its session is pruned. The mailbox: a queue of
#: messages per key (schema 4), ids from AUTOINCREMENT so that an id is never reused (a
#: delivery consumes the message by its id); indexed so that each read is a range: a key's
#: unclaimed messages in order, a session's claims, the messages meant for a busy session.
WAITS_TABLE = """CREATE TABLE IF NOT EXISTS waits (
        token      TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        path       BLOB NOT NULL,
        kind       TEXT NOT NULL,
        key        TEXT,
        wake_at    INTEGER,
        reason     TEXT NOT NULL,
        payload    BLOB NOT NULL,
        lane       BLOB NOT NULL DEFAULT X'',
        used       INTEGER NOT NULL DEFAULT 0,
        ord        INTEGER
    ) WITHOUT ROWID"""
MAIL_TABLE = """CREATE TABLE IF NOT EXISTS mail (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        key        TEXT NOT NULL,
        claimed_by TEXT NOT NULL DEFAULT '',
        target     TEXT,
        value      BLOB NOT NULL,
        at         INTEGER NOT NULL
    )"""
SCHEMA = (
    WAITS_TABLE,
    # Schema 8: the indexes of schemas 2 to 7 held used waits' rows too, which had none.
    "DROP INDEX IF EXISTS waits_key",
    "DROP INDEX IF EXISTS waits_kind",
    "DROP INDEX IF EXISTS waits_session",
    "DROP INDEX IF EXISTS waits_session_wake",
    "CREATE INDEX IF NOT EXISTS waits_queue ON waits (key, ord) WHERE key IS NOT NULL AND used = 0",
    "CREATE INDEX IF NOT EXISTS waits_live_kind ON waits (kind, token) WHERE used = 0",
    "CREATE INDEX IF NOT EXISTS waits_session_live ON waits (session_id, used, wake_at)",
    MAIL_TABLE,
    "CREATE INDEX IF NOT EXISTS mail_queue ON mail (key, id) WHERE claimed_by = ''",
    "CREATE INDEX IF NOT EXISTS mail_claims ON mail (claimed_by) WHERE claimed_by <> ''",
    "CREATE INDEX IF NOT EXISTS mail_target ON mail (target, id) "
    "WHERE target IS NOT NULL AND claimed_by = ''",
    "CREATE INDEX IF NOT EXISTS mail_at ON mail (at) WHERE claimed_by = ''",
)


def upgrade_waits(db: sqlite3.Connection) -> None:
    """A file of schema 2 to 7 gets the columns its waits lack: `lane` (schema 5), `used` and
    `ord` (schema 8; `fold_tokens` fills them in)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(waits)")}
    if not columns:
        return
    for name, definition in (
        ("lane", "BLOB NOT NULL DEFAULT X''"),
        ("used", "INTEGER NOT NULL DEFAULT 0"),
        ("ord", "INTEGER"),
    ):
        if name not in columns:
            db.execute(f"ALTER TABLE waits ADD COLUMN {name} {definition}")


def fold_tokens(db: sqlite3.Connection) -> None:
    """A file made before schema 8 kept every token in the tokens table: the tokens of its
    waits move into their rows. A key's waiters keep their order (the tokens' rowids, the order
    they were registered in); a token that was used (a wait left behind) stays used."""
    db.execute(
        "UPDATE waits SET ord = (SELECT t.rowid FROM tokens AS t WHERE t.token = waits.token) "
        "WHERE key IS NOT NULL AND ord IS NULL"
    )
    db.execute(
        f"UPDATE waits SET {USED_WAIT} WHERE used = 0 "
        "AND token IN (SELECT token FROM tokens WHERE used = 1)"
    )
    db.execute("DELETE FROM tokens WHERE token IN (SELECT token FROM waits)")


def upgrade_mail(db: sqlite3.Connection) -> None:
    """A file of schema 2 or 3 kept one mail row per key and claimant: its rows become one
    message each, in the order they came, in the queue of schema 4."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(mail)")}
    if not columns or "id" in columns:
        return
    db.execute("DROP INDEX IF EXISTS mail_claimed")
    db.execute("ALTER TABLE mail RENAME TO mail_before_queue")
    db.execute(MAIL_TABLE)
    db.execute(
        "INSERT INTO mail (key, claimed_by, value, at) "
        "SELECT key, claimed_by, value, at FROM mail_before_queue ORDER BY at, key"
    )
    db.execute("DROP TABLE mail_before_queue")


# The wait of a new token: one row of VALUES and no REPLACE, so SQLite opens no statement
# journal for it (inside a save's transaction, a statement that may write several rows, an
# INSERT ... SELECT or a REPLACE, first copies every page it is about to change: a start of
# 10,000 waiting branches copied 250 MB that way). A keyed wait comes last in its key's queue.
_NEW_WAIT = (
    f"INSERT INTO waits ({WAIT_COLUMNS}, lane, ord) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
    "CASE WHEN ?5 IS NOT NULL THEN (SELECT coalesce(max(ord), 0) + 1 "
    "FROM waits INDEXED BY waits_queue WHERE key = ?5 AND used = 0) END)"
)
# The wait of a token registered before: written again only while it is live and the
# session's (a used token is never made live again).
_RENEW_WAIT = (
    "UPDATE waits SET path = ?3, kind = ?4, key = ?5, wake_at = ?6, reason = ?7, payload = ?8, "
    "lane = ?9 WHERE token = ?1 AND session_id = ?2 AND used = 0"
)
_TOKENS = "SELECT value FROM json_each(?)"
# The first time of a session's live waits: the first entry past the NULLs of its index range.
# And whether it keeps a stop request (due at once then: see SessionStore.save).
_EARLIEST = (
    "SELECT (SELECT min(wake_at) FROM waits "
    "WHERE session_id = ?1 AND used = 0 AND wake_at IS NOT NULL), "
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
    waits: Sequence[WaitRecord],
    mail_done: Sequence[int] | None,
    now: int = 0,
) -> None:
    """What a save does to a session's tokens, waits and claimed mail, inside its transaction:
    the record's own `token` is registered (in its wait if it has one, else in the tokens
    table), and each wait; `now`: the record's `updated_at` (microseconds)."""
    for wait in waits:
        _put_wait(db, sid, wait)
    if token is not None and not any(wait.token == token for wait in waits):
        _add_token(db, token, sid)
    if status == "paused":  # due at the earliest time of all its waits, parked ones too
        earliest, stop = db.execute(_EARLIEST, (sid,)).fetchone()
        if stop is not None:
            earliest = now if earliest is None else min(earliest, now)
        if earliest is not None:
            db.execute(_WAKE_EARLIER, (earliest, sid))
    ended = status != "paused" and status != "running"
    if ended:  # the session ended: so did its waits, and their tokens are used
        db.execute(f"UPDATE waits SET {USED_WAIT} WHERE session_id = ? AND used = 0", (sid,))
    if mail_done is not None or ended:  # a drive that claimed nothing costs nothing here
        settle_claims(db, sid, mail_done or ())


def _put_wait(db: sqlite3.Cursor, sid: str, wait: WaitRecord) -> None:
    """Write `wait` of session `sid`: a new token's, or again a live one's of the session. A
    token of the tokens table (a record's own, registered before it had a wait) moves into
    its wait if it is live and the session's; a used one stays used, with no wait."""
    row = (*_wait_row(wait, sid), bytes(wait.lane))
    known = db.execute("SELECT session_id, used FROM tokens WHERE token = ?", (wait.token,))
    found = known.fetchone()
    if found is not None:
        if found[0] != sid or found[1]:
            return
        db.execute("DELETE FROM tokens WHERE token = ?", (wait.token,))
    try:
        db.execute(_NEW_WAIT, row)
    except sqlite3.IntegrityError as exc:
        if exc.sqlite_errorname != "SQLITE_CONSTRAINT_PRIMARYKEY":
            raise
        db.execute(_RENEW_WAIT, row)


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
    _typed: bool
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
            refused, sids = check_tokens(tokens, db.execute(FIND_TOKENS, (batch,)))
            if refused:
                return refused  # nothing was written: the transaction commits nothing
            db.execute(
                f"UPDATE waits SET {USED_WAIT} WHERE token IN ({_TOKENS}) AND used = 0", (batch,)
            )
            db.execute(f"UPDATE tokens SET used = 1 WHERE token IN ({_TOKENS})", (batch,))
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
                    written += _insert(db, sid, given, encode_events(given), self._typed)
            self._seen = None
        self.bytes_written += written
        return {}

    # -- waits -----------------------------------------------------------------------------
    def wait(self, token: str) -> WaitRecord | None:
        with self._lock:
            rows = self._cur.execute(
                f"SELECT {WAIT_COLUMNS}, lane FROM waits WHERE token = ? AND used = 0", (token,)
            ).fetchall()
        found = with_lanes(rows, from_micros)
        return found[0] if found else None

    def waits(self, session_id: str, *, limit: int | None = None) -> builtins.list[WaitRecord]:
        with self._lock:
            rows = self._cur.execute(
                f"SELECT {WAIT_COLUMNS}, lane FROM waits WHERE session_id = ? AND used = 0 "
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
        where, args = ["token > ?", "used = 0"], [after or ""]
        table = "waits"
        if key is not None:
            # The key's own entries (a key has few waits to sort): never the kind index.
            table = "waits INDEXED BY waits_queue"
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
        # The key's live waits by how long they have waited: its range of waits_queue.
        return self._waits(
            f"SELECT {WAIT_COLUMNS} FROM waits INDEXED BY waits_queue "
            "WHERE key = ? AND used = 0 ORDER BY ord LIMIT ?",
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

    def pending(
        self, limit: int = 100, after: int = 0
    ) -> builtins.list[tuple[WaitRecord, MailRecord]]:
        # Each key with unclaimed mail (a skip-scan of the queue index), its oldest message
        # and the least token waiting on it.
        sql = (
            f"SELECT {', '.join('w.' + c for c in WAIT_COLUMNS.split(', '))}, "
            f"{', '.join('m.' + c for c in MAIL_COLUMNS.split(', '))} "
            "FROM (SELECT key, min(id) AS id FROM mail INDEXED BY mail_queue "
            "WHERE claimed_by = '' GROUP BY key) AS q "
            "JOIN mail AS m ON m.id = q.id "
            "JOIN waits AS w ON w.token = (SELECT w2.token FROM waits AS w2 INDEXED BY waits_queue "
            "WHERE w2.key = q.key AND w2.used = 0 ORDER BY w2.ord LIMIT 1) "
            "WHERE q.id > ? ORDER BY q.id LIMIT ?"
        )
        with self._lock:
            rows = self._cur.execute(sql, (after, limit)).fetchall()
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
