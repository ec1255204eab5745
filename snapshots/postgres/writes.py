"""PostgresStore's hot writes, each ONE statement: creating a session, using a token, saving.

A resume is two of them (`consume_token`, then the `save` that ends the drive) and a run that
pauses two (`create`, `save`): one round trip each. A statement on a connection in autocommit
mode is its own transaction, so there is no BEGIN or COMMIT to send (a pipelined transaction
still cost five round trips: BEGIN, the statements, two syncs and COMMIT). The parts of a write
are data-modifying CTEs; each part that must follow another reads that one's output, which is
what orders them (the CTEs of one statement otherwise run in no set order, all on one snapshot).

SQL has no RAISE, and a write must be all or nothing: when the part that everything hangs on
wrote no row (the session moved on, the token's session changed), the statement divides by the
number of rows it wrote: zero. The DivisionByZero undoes the whole statement, and the caller
turns it into ConcurrentUpdate (or a refusal) after reading why. The divisor is a subquery, so
the planner cannot fold it into a constant (a constant 1/0 fails while planning, always). A
token's use that was to consume a message which is no longer queued unclaimed trips a guard of
its own, so that the caller tells MailGone from a session that moved on without reading again:
the logarithm of the number of messages it deleted, ln(0), fails with another SQLSTATE.

The lock order is the one waits.py names: token rows, then session rows, then waits, then
messages.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tarry.engine.errors import ConcurrentUpdate
from tarry.engine.state.events import Event
from tarry.snapshots.postgres.sql import conflict
from tarry.snapshots.records import WaitRecord, encode_path
from tarry.snapshots.sql_common import NAMES

if TYPE_CHECKING:
    import psycopg

#: The SQLSTATE of the guard's division by zero: `psycopg.errors.DivisionByZero`.
GUARD = "22012"
#: The SQLSTATE of the mail guard's ln(0): `psycopg.errors.InvalidArgumentForLogarithm`.
MAIL_GUARD = "2201E"

_EVENTS = "unnest(%(seqs)s::bigint[], %(types)s::text[], %(blobs)s::bytea[]) AS e(s, t, b)"
_LAST_SEQ = "(SELECT COALESCE(max(seq), 0) FROM tarry_events WHERE session_id = %(sid)s)"


@functools.cache
def create_sql(events: bool, token: bool, parent: bool = False) -> str:
    """Insert a session, its token and its first events. A taken id fails on the primary key
    (the caller's SessionExists); the foreign keys of the token and the events are checked at
    the end of the statement, when the session's row is there."""
    parts = [
        f"created AS (INSERT INTO tarry_sessions ({', '.join(NAMES)}) "
        f"VALUES ({', '.join(f'%({n})s' for n in NAMES)}) RETURNING session_id)"
    ]
    if token:
        parts.append(
            "token AS (INSERT INTO tarry_tokens (token, session_id) "
            "SELECT %(token)s, session_id FROM created ON CONFLICT DO NOTHING RETURNING 1)"
        )
    if events:
        parts.append(
            "appended AS (INSERT INTO tarry_events (session_id, seq, type, blob) "
            f"SELECT created.session_id, e.s, e.t, e.b FROM created, {_EVENTS} RETURNING 1)"
        )
    if parent:  # a Child's session: its parent lists it from now on
        parts.append(
            "listed AS (INSERT INTO tarry_children (parent, child) "
            "SELECT %(parent)s, session_id FROM created RETURNING 1)"
        )
    counted = "(SELECT count(*) FROM appended)" if events else "0"
    return f"WITH {', '.join(parts)} SELECT (SELECT count(*) FROM created), {counted}"


@functools.cache
def consume_sql(events: bool, at_version: bool, mail: bool) -> str:
    """Use a token, set its session running (leased to `owner` when given), append `events`
    and drop the token's wait. With `at_version`, only while the session is still at
    %(version)s and not running. With `mail`, delete the message %(mail)s, which must still be
    queued unclaimed: else the mail guard fails (MAIL_GUARD), having written nothing. Returns
    (the token's session when it was used, the events appended, the guard, with `mail` the mail
    guard, the token's used flag and session, that session's version and status — the last
    four as the statement found them, to tell why a token was not used)."""
    # Of any number of racing consumers the first flips `used`; the others wait for its
    # commit, re-check `NOT used` and update nothing: a loser is told only once the token
    # really is used.
    moved = (
        " AND EXISTS (SELECT 1 FROM tarry_sessions AS s WHERE s.session_id = "
        "tarry_tokens.session_id AND s.version = %(version)s AND s.status <> 'running')"
    )
    same = " AND version = %(version)s AND status <> 'running'"
    continues = (
        " AND (SELECT COALESCE(max(seq), 0) FROM tarry_events AS old "
        "WHERE old.session_id = tarry_sessions.session_id) = %(after)s"
    )
    parts = [
        "used AS (UPDATE tarry_tokens SET used = true WHERE token = %(token)s AND NOT used"
        f"{moved if at_version else ''} RETURNING session_id)",
        # From the row the token names: the session's row is locked after the token's, and
        # before any event is inserted (the order a save takes them in).
        "resuming AS (UPDATE tarry_sessions SET status = 'running', "
        "lease_owner = COALESCE(%(owner)s::text, lease_owner), "
        "lease_until = CASE WHEN %(owner)s::text IS NULL THEN lease_until "
        "ELSE %(until)s::timestamptz END "
        "WHERE session_id IN (SELECT session_id FROM used)"
        f"{same if at_version else ''}{continues if events else ''} RETURNING session_id)",
        "dropped AS (DELETE FROM tarry_waits WHERE token = %(token)s "
        "AND EXISTS (SELECT 1 FROM resuming) RETURNING 1)",
    ]
    if events:
        parts.append(
            "appended AS (INSERT INTO tarry_events (session_id, seq, type, blob) "
            f"SELECT resuming.session_id, e.s, e.t, e.b FROM resuming, {_EVENTS} RETURNING 1)"
        )
    if mail:
        # Only while no session claimed it: a claimant's save consumes it, or releases it.
        parts.append(
            "mailed AS (DELETE FROM tarry_mail WHERE id = %(mail)s::bigint AND claimed_by = '' "
            "AND EXISTS (SELECT 1 FROM resuming) RETURNING 1)"
        )
    counted = "(SELECT count(*) FROM appended)" if events else "0"
    # The mail guard: a session set running (the guard above passed) without its message
    # consumed is undone.
    mailed = (
        ", CASE WHEN EXISTS (SELECT 1 FROM resuming) THEN ln((SELECT count(*) FROM mailed)) END"
        if mail
        else ""
    )
    return (
        f"WITH {', '.join(parts)} SELECT (SELECT session_id FROM used), {counted}, "
        # The guard: a token used without its session set running is undone.
        "CASE WHEN EXISTS (SELECT 1 FROM used) THEN 1 / (SELECT count(*) FROM resuming)::int END"
        f"{mailed}, t.used, t.session_id, s.version, s.status FROM (SELECT 1) AS one "
        "LEFT JOIN tarry_tokens AS t ON t.token = %(token)s "
        "LEFT JOIN tarry_sessions AS s ON s.session_id = t.session_id"
    )


def consume_args(
    token: str,
    owner: str | None,
    until: Any,
    events: Sequence[Event],
    encoded: list[bytes],
    version: int | None,
    mail: int | None,
) -> dict[str, Any]:
    return {
        "token": token,
        "owner": owner,
        "until": until,
        "version": version,
        "mail": mail,
        "after": events[0].seq - 1 if events else 0,
        "seqs": [e.seq for e in events],
        "types": [e.type for e in events],
        "blobs": encoded,
    }


# (And at once when it keeps a stop request: see SessionStore.save.)
_WAKE = (
    "CASE WHEN %(status)s = 'paused' THEN LEAST(%(wake_at)s::timestamptz, (SELECT min(w.wake_at) "
    "FROM tarry_waits AS w WHERE w.session_id = %(sid)s AND w.wake_at IS NOT NULL), "
    "CASE WHEN stop IS NOT NULL AND stop IS DISTINCT FROM %(honoured)s::text "
    "THEN %(updated_at)s::timestamptz END) "
    "ELSE %(wake_at)s::timestamptz END"
)


@functools.cache
def save_sql(
    ended: bool, events: bool, values: bool, waits: bool, mail: bool, claims: bool = True
) -> str:
    """Write a session's row if it is at %(expected)s (compare-and-set), with the parts of a
    save that are asked for (see SessionStore.save); the session's claims on messages end when
    `claims` (a drive that claimed some, or an ended session; `mail`: some are consumed,
    %(done)s). Returns (1, the events appended); fails
    with the guard's DivisionByZero, having written nothing, when the row was not written."""
    parts: list[str] = []
    first: list[str] = []  # the token parts, which the row's update waits for (lock order)
    if ended:
        # The tokens of the session's waits are used, locked in token order.
        parts.append(
            "ended AS (UPDATE tarry_tokens SET used = true WHERE token IN ("
            "SELECT t.token FROM tarry_tokens AS t WHERE t.token IN "
            "(SELECT token FROM tarry_waits WHERE session_id = %(sid)s) AND NOT t.used "
            "ORDER BY t.token FOR NO KEY UPDATE) RETURNING 1)"
        )
        first.append("ended")
    # A token already known keeps its session and its used flag (DO NOTHING): registering it
    # again never makes a used one live again. (It may be locked by a racing consume_token,
    # which then waits for the row: tokens before the row.)
    parts.append(
        "tokens AS (INSERT INTO tarry_tokens (token, session_id) "
        "SELECT t, %(sid)s FROM unnest(%(tokens)s::text[]) AS t ON CONFLICT DO NOTHING "
        "RETURNING 1)"
    )
    first.append("tokens")
    after_tokens = "".join(f" AND (SELECT count(*) FROM {name}) >= 0" for name in first)
    # Events go in only if they continue the log: the row is written only then, and two
    # writers of the same next seq meet at the events' primary key (the second fails).
    continues = f" AND {_LAST_SEQ} = %(after)s" if events else ""
    # A paused session is due at the earliest of its record's time and those of the waits it
    # keeps from earlier saves (parked lanes; the new ones' times are the record's already).
    columns = ", ".join(f"{n} = %({n})s" for n in NAMES[1:]).replace(
        "wake_at = %(wake_at)s", f"wake_at = {_WAKE}"
    )
    parts.append(
        f"saved AS (UPDATE tarry_sessions SET {columns}, "
        "stop = CASE WHEN %(status)s IN ('running', 'paused') "
        "AND stop IS DISTINCT FROM %(honoured)s::text THEN stop END "
        f"WHERE session_id = %(sid)s AND version = %(expected)s{after_tokens}{continues} "
        "RETURNING session_id)"
    )
    if events:
        parts.append(
            "appended AS (INSERT INTO tarry_events (session_id, seq, type, blob) "
            f"SELECT saved.session_id, e.s, e.t, e.b FROM saved, {_EVENTS} RETURNING 1)"
        )
    if values:
        parts.append(
            "put AS (INSERT INTO tarry_values (session_id, key, idx, blob) "
            "SELECT saved.session_id, v.k, v.i, v.b FROM saved, unnest(%(keys)s::text[], "
            "%(indexes)s::bigint[], %(values)s::bytea[]) AS v(k, i, b) "
            "ON CONFLICT (session_id, key, idx) DO UPDATE SET blob = EXCLUDED.blob RETURNING 1)"
        )
    if ended:
        parts.append(
            "dropped AS (DELETE FROM tarry_waits WHERE session_id IN "
            "(SELECT session_id FROM saved) RETURNING 1)"
        )
    if waits:
        # A wait only for a live token of its own session: one this statement registers
        # (the statement's snapshot does not hold it yet) or one it already was.
        parts.append(
            "waited AS (INSERT INTO tarry_waits "
            "(token, session_id, path, kind, key, wake_at, reason, payload, lane) "
            "SELECT w.token, saved.session_id, w.path, w.kind, w.key, w.wake_at, w.reason, "
            "w.payload, w.lane FROM saved, unnest(%(wait_tokens)s::text[], %(paths)s::bytea[], "
            "%(kinds)s::text[], %(wait_keys_each)s::text[], %(wakes)s::timestamptz[], "
            "%(reasons)s::text[], %(payloads)s::bytea[], %(lanes)s::bytea[]) "
            "AS w(token, path, kind, key, wake_at, reason, payload, lane) "
            "WHERE NOT EXISTS (SELECT 1 FROM tarry_tokens AS t WHERE t.token = w.token "
            "AND (t.used OR t.session_id <> %(sid)s)) "
            "ON CONFLICT (token) DO UPDATE SET path = EXCLUDED.path, kind = EXCLUDED.kind, "
            "key = EXCLUDED.key, wake_at = EXCLUDED.wake_at, reason = EXCLUDED.reason, "
            "payload = EXCLUDED.payload, lane = EXCLUDED.lane RETURNING 1)"
        )
    # The messages the session claimed: those in %(done)s are consumed, the others released
    # (queued again, in their place: a queue is in id order). Through the partial index of
    # claims, so a session without claims pays one probe of an index of claims only. (Spelled
    # `claimed_by = sid AND claimed_by <> ''` so that a generic plan uses that index.)
    mine = "claimed_by = %(sid)s AND claimed_by <> '' AND EXISTS (SELECT 1 FROM saved)"
    if mail:
        parts.append(
            f"consumed AS (DELETE FROM tarry_mail WHERE {mine} "
            "AND id = ANY(%(done)s::bigint[]) RETURNING 1)"
        )
    if claims or mail:
        others = " AND id <> ALL(%(done)s::bigint[])" if mail else ""
        parts.append(f"released AS (UPDATE tarry_mail SET claimed_by = '' WHERE {mine}{others})")
    counted = "(SELECT count(*) FROM appended)" if events else "0"
    # The guard: nothing stays written when the row was not (the tokens above were).
    return f"WITH {', '.join(parts)} SELECT 1 / (SELECT count(*) FROM saved)::int, {counted}"


def save_args(
    row: dict[str, Any],
    expected_version: int,
    events: Sequence[Event],
    encoded: list[bytes],
    values: Sequence[tuple[str, int, bytes]],
    waits: Sequence[WaitRecord],
    mail_done: Sequence[int] | None,
    ended: bool,
    honoured: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The statement of a save and its arguments. `row`: the session's columns by name;
    `honoured`: the stop request the save honours (SessionStore.save)."""
    sid = row["session_id"]
    token = row["token"]
    if ended:
        waits = ()
    tokens = dict.fromkeys(([token] if token else []) + [w.token for w in waits])
    args: dict[str, Any] = {
        **row,
        "sid": sid,
        "honoured": honoured,
        "expected": expected_version,
        "tokens": list(tokens),
    }
    if events:
        args["after"] = events[0].seq - 1
        args["seqs"] = [e.seq for e in events]
        args["types"] = [e.type for e in events]
        args["blobs"] = encoded
    if values:
        # One row per (key, index), the last one given winning: a single INSERT … ON CONFLICT
        # may not touch a row twice.
        rows = {(key, index): blob for key, index, blob in values}
        args["keys"] = [k for k, _ in rows]
        args["indexes"] = [i for _, i in rows]
        args["values"] = list(rows.values())
    if waits:
        # The statement's reading of the waits (for the earliest time) does not see these.
        times = [w.wake_at for w in waits if w.wake_at is not None]
        if times and row["status"] == "paused":
            args["wake_at"] = min(times) if row["wake_at"] is None else min(*times, row["wake_at"])
        args["wait_tokens"] = [w.token for w in waits]
        args["paths"] = [encode_path(w.path) for w in waits]
        args["kinds"] = [w.kind for w in waits]
        args["wait_keys_each"] = [w.key for w in waits]
        args["wakes"] = [w.wake_at for w in waits]
        args["reasons"] = [w.reason for w in waits]
        args["payloads"] = [bytes(w.payload) for w in waits]
        args["lanes"] = [bytes(w.lane) for w in waits]
    if mail_done:
        args["done"] = list(mail_done)
    claims = mail_done is not None or ended  # a drive that claimed nothing leaves them alone
    sql = save_sql(ended, bool(events), bool(values), bool(waits), bool(mail_done), claims)
    return sql, args


def with_post(
    sql: str, args: dict[str, Any], post: tuple[str, bytes], at: Any
) -> tuple[str, dict[str, Any]]:
    """The statement of a save (`save_args`) that also queues the message `post` (key, value)
    at `at`, in the same statement: only if the row is written (it reads `saved`)."""
    part = (
        "posted AS (INSERT INTO tarry_mail (key, value, at) "
        "SELECT %(post_key)s, %(post_value)s, %(post_at)s FROM saved RETURNING 1), "
    )
    head, rest = sql.split(" SELECT 1 / ", 1)
    sql = f"{head}, {part[:-2]} SELECT 1 / {rest}"
    return sql, {**args, "post_key": post[0], "post_value": bytes(post[1]), "post_at": at}


def moved(
    conn: psycopg.Connection[Any], sid: str, expected_version: int, events: Sequence[Event]
) -> ConcurrentUpdate:
    """Why a save wrote nothing: the session is at another version (or gone), or its
    log moved on."""
    current = conn.execute(
        "SELECT version FROM tarry_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    found = None if current is None else current[0]
    if found == expected_version and events:
        return conflict(None, sid, events)
    return ConcurrentUpdate(f"session {sid!r} is at version {found}, not {expected_version}")
