"""The plans PostgreSQL makes for the timers' statements, a poll's claims and a delivery's
look-ups: index scans only, on a store with many rows, so that a claim or a page of look-ups
costs the same however many sessions the store holds.

Each statement is the one the store sends (captured from its connection), explained twice: with
its values (a custom plan) and as a prepared statement under `plan_cache_mode =
force_generic_plan` (the plan a statement that psycopg prepared gets after its fifth run, which
guesses that `LIMIT $n` keeps a tenth of the rows). Needs a server (see tests/pgserver.py).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pgserver
import pytest

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
SESSIONS = 20_000

# Shapes of a store: which sessions are paused and due, and which tokens are used. "waiting":
# every session waits and is due, no token was ever used (where the planner, sure that no token
# is used, used to read the whole tokens table); "busy": most sessions ended, each with many
# used tokens, and a few due ones among them.
SHAPES = {
    "waiting": ("i > 0", "i > 0", "false", 0),
    "busy": ("i %% 10 = 0", "i %% 100 = 0", "i %% 10 <> 0", 5),
}


@pytest.fixture(scope="module", params=list(SHAPES))
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A PostgresStore holding SESSIONS sessions of the shape named, analysed (made once per
    shape: the tests read it, and the last one changes three of its sessions)."""
    paused, due, used, extra = SHAPES[request.param]
    store = pgserver.scratch_store()
    try:
        with store._pool.connection() as conn:
            conn.execute(
                "INSERT INTO tarry_sessions (session_id, flow, status, state, version, "
                "fingerprint, flow_version, token, wake_at, created_at, updated_at, meta) "
                f"SELECT 's' || i, 'f', CASE WHEN {paused} THEN 'paused' ELSE 'completed' END, "
                "'\\x00', 1, 'fp', '\\x00', 't' || i, "
                f"CASE WHEN NOT ({paused}) THEN NULL WHEN {due} "
                "THEN %(now)s - (i %% 997) * interval '1 minute' "
                "ELSE %(now)s + interval '1 day' END, %(now)s, %(now)s, '\\x00' "
                "FROM generate_series(1, %(n)s) AS i",
                {"now": NOW, "n": SESSIONS},
            )
            conn.execute(
                "INSERT INTO tarry_tokens (token, session_id, used) "
                f"SELECT 't' || i, 's' || i, {used} FROM generate_series(1, %(n)s) AS i",
                {"n": SESSIONS},
            )
            conn.execute(
                "INSERT INTO tarry_tokens (token, session_id, used) "
                "SELECT 'u' || i || '/' || j, 's' || i, true "
                "FROM generate_series(1, %(n)s) AS i, generate_series(1, %(extra)s) AS j",
                {"n": SESSIONS, "extra": extra},
            )
            # A wait on a key of its own for each waiting session, and as many messages queued.
            conn.execute(
                "INSERT INTO tarry_waits (token, session_id, path, kind, key, reason, payload) "
                f"SELECT 't' || i, 's' || i, '\\x90', 'external', 'k' || i, '', '' "
                f"FROM generate_series(1, %(n)s) AS i WHERE {paused}",
                {"n": SESSIONS},
            )
            conn.execute(
                "INSERT INTO tarry_mail (key, value, at) "
                "SELECT 'm' || i, '\\x00', %(now)s FROM generate_series(1, %(n)s) AS i",
                {"now": NOW, "n": SESSIONS},
            )
            for table in ("tarry_sessions", "tarry_tokens", "tarry_waits", "tarry_mail"):
                conn.execute(f"ANALYZE {table}")
        yield store
    finally:
        store.close()


class _Capture:
    """Stands for the store's pool: records each statement sent, and runs none."""

    def __init__(self, rows: list[Any]) -> None:
        self.sent: list[tuple[str, Any]] = []
        self._rows = rows

    @contextmanager
    def connection(self) -> Iterator[Any]:
        yield self

    def execute(self, query: str, args: Any = None) -> Any:
        self.sent.append((query, args))
        return self

    def fetchall(self) -> list[Any]:
        return self._rows


def sent(store: Any, call: Any) -> tuple[str, Any]:
    """The one statement `call(store)` sends, and its arguments."""
    pool, store._pool = store._pool, _Capture([])
    try:
        call(store)
        [statement] = store._pool.sent
    finally:
        store._pool = pool
    return statement


def plans(store: Any, query: str, args: Any) -> dict[str, str]:
    """EXPLAIN of `query` with `args`: its custom plan and its generic one."""
    from psycopg import sql

    names: list[Any] = []

    def numbered(match: re.Match[str]) -> str:
        name = match.group(1) if match.group(1) is not None else len(names)
        names.append(name)
        return f"${len(names)}"

    generic = re.sub(r"%\((\w+)\)s|%s", numbered, query)
    values = [args[name] for name in names]
    with store._pool.connection() as conn:
        custom = conn.execute(f"EXPLAIN {query}", args).fetchall()
        conn.execute(f"PREPARE explained AS {generic}")
        try:
            conn.execute("SET plan_cache_mode = force_generic_plan")
            literals = ", ".join(sql.Literal(v).as_string(conn) for v in values)
            prepared = conn.execute(f"EXPLAIN EXECUTE explained({literals})").fetchall()
        finally:
            conn.execute("RESET plan_cache_mode")
            conn.execute("DEALLOCATE explained")
    return {
        "custom": "\n".join(row[0] for row in custom),
        "generic": "\n".join(row[0] for row in prepared),
    }


CALLS = {
    "claim_due": lambda s: s.claim_due(NOW, "w", NOW + dt.timedelta(minutes=5), limit=100),
    "claim_due after": lambda s: s.claim_due(
        NOW, "w", NOW + dt.timedelta(minutes=5), limit=100, after=(NOW - dt.timedelta(days=1), "s")
    ),
    "due": lambda s: s.due(NOW, limit=100),
}
#: A delivery's look-ups for a page of a thousand keys or sessions: a probe of an index each,
#: however many rows the tables hold.
PAGE = range(1, 1001)
LOOKUPS = {
    "waiters_many": lambda s: s.waiters_many([f"k{i}" for i in PAGE], 1000),
    "queued_keys": lambda s: s.queued_keys([f"m{i}" for i in PAGE]),
    "load_many": lambda s: s.load_many([f"s{i}" for i in PAGE]),
}

#: A poll's claim of a page of ready waits (polling.PAGE sessions): a probe of an index per wait
#: and per session, however many wait.
CLAIMS = {
    "claim_waits": lambda s: s.claim_waits(
        [f"t{i}" for i in range(1, 21)], "w", NOW + dt.timedelta(minutes=5), NOW
    ),
}


@pytest.mark.parametrize("call", list(LOOKUPS))
def test_a_deliverys_lookups_scan_only_indexes(store: Any, call: str) -> None:
    query, args = sent(store, LOOKUPS[call])
    for kind, plan in plans(store, query, args).items():
        assert "Seq Scan" not in plan, f"{call}, {kind} plan:\n{plan}"
        assert "Index" in plan, f"{call}, {kind} plan:\n{plan}"


@pytest.mark.parametrize("call", list(CALLS))
def test_the_timers_statements_scan_only_indexes(store: Any, call: str) -> None:
    query, args = sent(store, CALLS[call])
    for kind, plan in plans(store, query, args).items():
        assert "Seq Scan" not in plan, f"{call}, {kind} plan:\n{plan}"
        assert "Index" in plan, f"{call}, {kind} plan:\n{plan}"


@pytest.mark.parametrize("call", list(CLAIMS))
def test_a_polls_claims_scan_only_indexes(store: Any, call: str) -> None:
    query, args = sent(store, CLAIMS[call])
    for kind, plan in plans(store, query, args).items():
        assert "Seq Scan" not in plan, f"{call}, {kind} plan:\n{plan}"
        assert "Index" in plan, f"{call}, {kind} plan:\n{plan}"


def test_claim_due_still_claims_the_earliest_free_sessions(store: Any) -> None:
    """The statement explained above is the one that works: it claims due, free sessions in
    order, and passes over leased ones and ones whose token was used."""
    with store._pool.connection() as conn:
        first = conn.execute(
            "SELECT session_id, token FROM tarry_sessions WHERE status = 'paused' "
            "AND wake_at <= %s ORDER BY wake_at, session_id LIMIT 3",
            (NOW,),
        ).fetchall()
        conn.execute(
            "UPDATE tarry_sessions SET lease_owner = 'other', lease_until = %s "
            "WHERE session_id = %s",
            (NOW + dt.timedelta(hours=1), first[0][0]),
        )
        conn.execute("UPDATE tarry_tokens SET used = true WHERE token = %s", (first[1][1],))
    claimed = store.claim_due(NOW, "w", NOW + dt.timedelta(minutes=5), limit=1)
    assert [r.session_id for r in claimed] == [first[2][0]]
    assert claimed[0].lease_owner == "w"
