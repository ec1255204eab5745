"""PostgresStore's waits, the mailbox and batches of tokens (a mixin of PostgresStore), with
the migrations that add them (5: waits and a mailbox of one row per key; 7: the mailbox a queue
of messages per key). A save's part for them is in writes.py.

Lock order, so that no two writers wait for each other in a circle: token rows (in token
order), then session rows (in id order), then wait rows, then message rows. A message is
claimed (`claim_mail`) in a statement that locks nothing else, and consumed in the write that
records its effect: by the save of the session that claimed it (`mail_done`), or by a token's
use (`consume_token(mail=)`, `consume_tokens(mail=)`), which deletes it only while unclaimed.
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
from tarry.snapshots.postgres.sql import _check_batch, _conflict, _maybe_utc, _utc
from tarry.snapshots.records import (
    MailInfo,
    MailRecord,
    WaitRecord,
    decode_path,
    encode_events,
    encode_path,
)
from tarry.snapshots.store import MailGone, refusals

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

#: Migration 7: the mailbox a queue of messages per key. Each message is a row of its own, by an
#: id that only grows (FIFO order within a key); `claimed_by` is '' while no session claimed
#: it, `target` the busy session it was posted for (see SessionStore.post). The rows of
#: migration 5 (one per key and claimant) become one message each, claims kept, numbered in the
#: order they came (a key's claimed mail came before its unclaimed one). Partial indexes, so
#: that each read is one range: a key's unclaimed messages in order (claims, `queued`,
#: `pending`, `mailbox`), a session's claims (a save releases them), the messages posted for a
#: session, and the unclaimed ones by age (`purge_mail`).
QUEUE_DESCRIPTION = "the mailbox a queue of messages per key"
QUEUE_STATEMENTS = (
    "ALTER TABLE tarry_mail RENAME TO tarry_mail_by_key",
    "ALTER TABLE tarry_mail_by_key RENAME CONSTRAINT tarry_mail_pkey TO tarry_mail_by_key_pkey",
    "DROP INDEX tarry_mail_claimed",
    """CREATE TABLE tarry_mail (
        id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key        text COLLATE "C" NOT NULL,
        claimed_by text COLLATE "C" NOT NULL DEFAULT '',
        target     text COLLATE "C",
        value      bytea NOT NULL,
        at         timestamptz NOT NULL
    )""",
    "INSERT INTO tarry_mail (key, claimed_by, value, at) "
    "SELECT key, claimed_by, value, at FROM tarry_mail_by_key "
    "ORDER BY at, claimed_by = '', key, claimed_by",
    "DROP TABLE tarry_mail_by_key",
    "CREATE INDEX tarry_mail_queue ON tarry_mail (key, id) WHERE claimed_by = ''",
    "CREATE INDEX tarry_mail_claims ON tarry_mail (claimed_by) WHERE claimed_by <> ''",
    "CREATE INDEX tarry_mail_target ON tarry_mail (target, id) "
    "WHERE target IS NOT NULL AND claimed_by = ''",
    "CREATE INDEX tarry_mail_at ON tarry_mail (at, id) WHERE claimed_by = ''",
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


_MAIL = "id, key, value, at, target"
#: A token's use consumes its message only while no session claimed it.
_CONSUME_MAIL = "DELETE FROM tarry_mail WHERE id = ANY(%s::bigint[]) AND claimed_by = ''"

# The session's own oldest claim on the key not in `skip` (a drive that died before it saved
# finds its claims again), else the key's oldest unclaimed message, claimed now: only when the
# session has no such claim is a row locked at all. SKIP LOCKED: a message that another
# claimant (or a token's use) holds is passed over, never waited for, so concurrent claimants
# never get the same message and none queues behind another. (`claimed_by = %s AND claimed_by
# <> ''`, here and wherever a session's claims are read: a generic plan, a prepared
# statement's, cannot tell that the parameter is not '' and would not use the partial index of
# claims without the second half.)
_CLAIM_MAIL = """
WITH mine AS (
    SELECT id, value FROM tarry_mail
    WHERE claimed_by = %(sid)s AND claimed_by <> '' AND key = %(key)s
    AND id <> ALL(%(skip)s::bigint[])
    ORDER BY id LIMIT 1
), claimed AS (
    UPDATE tarry_mail SET claimed_by = %(sid)s
    WHERE id = (
        SELECT id FROM tarry_mail WHERE key = %(key)s AND claimed_by = ''
        AND NOT EXISTS (SELECT 1 FROM mine)
        ORDER BY id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
    ) AND claimed_by = ''
    RETURNING id, value
)
SELECT id, value FROM mine UNION ALL SELECT id, value FROM claimed
"""
# Each key that holds unclaimed mail, with the id of its oldest message: a loose scan of the
# queue index (one probe per key, from the key found last), so a key costs one probe however
# many messages it holds. Each is paired with the least token waiting on that key (one probe
# of the waits' key index; a key nothing waits on drops out); the first `limit` pairs, oldest
# message first, then get their messages (by primary key: only those values are read).
_PENDING = f"""
WITH RECURSIVE heads (key, id) AS (
    (SELECT key, id FROM tarry_mail WHERE claimed_by = '' ORDER BY key, id LIMIT 1)
    UNION ALL
    SELECT next.key, next.id FROM heads CROSS JOIN LATERAL (
        SELECT key, id FROM tarry_mail WHERE claimed_by = '' AND key > heads.key
        ORDER BY key, id LIMIT 1
    ) AS next
), paired AS (
    SELECT heads.id AS mail_id, w.* FROM heads CROSS JOIN LATERAL (
        SELECT {_WAIT} FROM tarry_waits WHERE key = heads.key ORDER BY token LIMIT 1
    ) AS w
    ORDER BY heads.id LIMIT %s
)
SELECT {", ".join(f"p.{c}" for c in _WAIT.split(", "))},
       {", ".join(f"m.{c}" for c in _MAIL.split(", "))}
FROM paired AS p JOIN tarry_mail AS m ON m.id = p.mail_id
ORDER BY m.id
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
        mail: Mapping[str, int] = {},  # noqa: B006 - read only
    ) -> dict[str, str]:
        if not tokens:
            return {}
        messages = [mail[token] for token in tokens if token in mail]
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
                # Messages last in the lock order. One message named for two tokens is deleted
                # once: a delivery is one message for one wait, so that is refused too.
                if messages:
                    consumed = conn.execute(_CONSUME_MAIL, (messages,)).rowcount
                    if consumed != len(messages):
                        msg = (
                            f"messages {messages} are not all queued any more: another "
                            "delivery or Wait took one (nothing was written)"
                        )
                        raise MailGone(msg)
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
    def post(self, key: str, value: bytes, at: dt.datetime, *, target: str | None = None) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO tarry_mail (key, value, at, target) VALUES (%s, %s, %s, %s) "
                "RETURNING id",
                (key, bytes(value), at, target),
            ).fetchone()
        assert row is not None  # an INSERT … RETURNING of one row
        return int(row[0])

    def claim_mail(
        self, key: str, session_id: str, skip: Sequence[int] = ()
    ) -> tuple[int, bytes] | None:
        args = {"sid": session_id, "key": key, "skip": list(skip)}
        with self._pool.connection() as conn:
            row = conn.execute(_CLAIM_MAIL, args).fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]))

    def queued(
        self,
        *,
        key: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> builtins.list[MailRecord]:
        if key is not None:
            where, args = "key = %s", (key, limit)
        elif session_id is not None:
            where, args = "target = %s", (session_id, limit)
        else:
            return []
        sql = (
            f"SELECT {_MAIL} FROM tarry_mail WHERE {where} AND claimed_by = '' ORDER BY id LIMIT %s"
        )
        with self._pool.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [_message(row) for row in rows]

    def pending(self, limit: int = 100) -> builtins.list[tuple[WaitRecord, MailRecord]]:
        with self._pool.connection() as conn:
            rows = conn.execute(_PENDING, (limit,)).fetchall()
        return [(_wait(row[:8]), _message(row[8:])) for row in rows]

    def discard(self, key: str) -> int:
        with self._pool.connection() as conn:
            cur = conn.execute("DELETE FROM tarry_mail WHERE key = %s AND claimed_by = ''", (key,))
        return int(cur.rowcount)

    def mailbox(
        self, *, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> builtins.list[MailInfo]:
        where, args = ["claimed_by = ''"], []
        if prefix is not None:
            # A range of the index (no LIKE: a prefix's % and _ are plain characters), checked
            # with starts_with, which the range already implies.
            where.append("key >= %s AND starts_with(key, %s)")
            args += [prefix, prefix]
            past = _past_prefix(prefix)
            if past is not None:
                where.append("key < %s")
                args.append(past)
        if after is not None:
            where.append("key > %s")
            args.append(after)
        sql = (
            f"SELECT key, count(*), min(at) FROM tarry_mail WHERE {' AND '.join(where)} "
            "GROUP BY key ORDER BY key LIMIT %s"
        )
        with self._pool.connection() as conn:
            rows = conn.execute(sql, (*args, limit)).fetchall()
        return [MailInfo(key, int(count), _utc(oldest)) for key, count, oldest in rows]

    def purge_mail(self, before: dt.datetime, limit: int = 1000) -> int:
        with self._pool.connection() as conn:
            # Rows another transaction holds (being claimed or consumed) are left to it. The ids
            # as an array: each is deleted through the primary key, whatever the plan thinks
            # `limit` may be.
            cur = conn.execute(
                "DELETE FROM tarry_mail WHERE id = ANY(ARRAY(SELECT id FROM tarry_mail "
                "WHERE claimed_by = '' AND at < %s ORDER BY at, id LIMIT %s "
                "FOR UPDATE SKIP LOCKED)) AND claimed_by = ''",
                (before, limit),
            )
        return int(cur.rowcount)


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


def _message(row: Sequence[Any]) -> MailRecord:
    mid, key, value, at, target = row
    return MailRecord(int(mid), key, bytes(value), _utc(at), target)


def _past_prefix(prefix: str) -> str | None:
    """The least str above every str that starts with `prefix`, in code point order (the
    order of COLLATE "C" on a UTF-8 database), or None when there is none (an empty prefix,
    or one of only the last code point)."""
    kept = prefix.rstrip("\U0010ffff")
    if not kept:
        return None
    following = ord(kept[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:  # surrogates are no characters of a text
        following = 0xE000
    return kept[:-1] + chr(following)
