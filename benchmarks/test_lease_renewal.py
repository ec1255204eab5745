"""What keeping a running session's lease costs: one renewal is one statement (an UPDATE of
the session row's two lease columns, `SessionStore.claim`), made once a third of a lease —
every 3.3 s with the default `Runtime(lease=10.0)`, 18 times a minute per running session,
by the drive at a checkpoint or by the lease keeper during a long step.

- **SQLite**: WAL bytes per renewal (checkpoints off, so the WAL keeps every page written),
  and statements per renewal (sqlite3's trace callback).
- **PostgreSQL**: WAL bytes per renewal (`pg_current_wal_lsn()` before and after) and
  statements per renewal (one `claim` is one `execute`). Skipped without a server.

Figures land in `extra_info`: per renewal, and per running session per minute at the default
lease. `make test` runs each once at smoke sizes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from tarry import Flow, ManualClock, Runtime
from tarry.snapshots import SQLiteStore

#: Renewals a minute per running session at the default lease (once a third of it).
PER_MINUTE = 60 / (10.0 / 3)


class _Crash(BaseException):
    pass


def _die(ctx: Any) -> None:
    raise _Crash


def _running(store: Any, n: int, clock: ManualClock) -> tuple[list[str], str]:
    """`n` sessions stored as running (each run "died" in its first step), and the owner of
    their leases."""
    rt = Runtime(store=store, durability="step", clock=clock)
    flow = Flow("held", [_die])
    ids = []
    for i in range(n):
        sid = f"held-{i}"
        with pytest.raises(_Crash):
            rt.run(flow, session_id=sid)
        ids.append(sid)
    return ids, rt.owner


def _renew_all(store: Any, ids: list[str], owner: str, clock: ManualClock) -> None:
    now = clock.now()
    until = now + timedelta(seconds=10)
    for sid in ids:
        assert store.claim(sid, owner, until, now)


def test_sqlite_lease_renewal_cost(benchmark: Any, sizes: Any, tmp_path: Path) -> None:
    n = 200 if sizes.full else 10
    path = tmp_path / "lease.db"
    store = SQLiteStore(path)
    clock = ManualClock()
    ids, owner = _running(store, n, clock)
    statements: list[str] = []
    with store._lock:  # checkpoints off: the WAL keeps every page written
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store._db.execute("PRAGMA wal_autocheckpoint = 0")
        store._db.set_trace_callback(statements.append)
    wal = Path(f"{path}-wal")
    before = wal.stat().st_size if wal.exists() else 0
    rounds = {"n": 0}

    def renew() -> None:
        clock.advance(1)
        _renew_all(store, ids, owner, clock)
        rounds["n"] += 1

    benchmark.pedantic(renew, rounds=3, iterations=1)
    with store._lock:
        store._db.set_trace_callback(None)
    renewals = n * rounds["n"]
    per = (wal.stat().st_size - before) / renewals
    updates = [s for s in statements if s.lstrip().upper().startswith("UPDATE")]
    benchmark.extra_info.update(
        running_sessions=n,
        renewals=renewals,
        statements_per_renewal=round(len(updates) / renewals, 2),
        wal_bytes_per_renewal=round(per),
        wal_bytes_per_session_minute=round(per * PER_MINUTE),
    )
    store.close()
    assert len(updates) == renewals  # one UPDATE each (its autocommit: no BEGIN/COMMIT)


DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"


@pytest.fixture
def dsn() -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        admin = psycopg.connect(server, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES")
    schema = f"tarry_lease_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            option = quote(f"-csearch_path={schema}", safe="")
            yield f"{server}{'&' if '?' in server else '?'}options={option}"
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_postgres_lease_renewal_cost(benchmark: Any, sizes: Any, dsn: str) -> None:
    from tarry.snapshots import PostgresStore

    n = 200 if sizes.full else 10
    store = PostgresStore(dsn)
    clock = ManualClock()
    ids, owner = _running(store, n, clock)
    rounds = {"n": 0}

    def lsn() -> int:
        with store._pool.connection() as conn:
            return int(conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'").fetchone()[0])

    start = lsn()

    def renew() -> None:
        clock.advance(1)
        _renew_all(store, ids, owner, clock)
        rounds["n"] += 1

    benchmark.pedantic(renew, rounds=3, iterations=1)
    renewals = n * rounds["n"]
    # Other databases on the server may write WAL meanwhile: this is an upper bound.
    per = (lsn() - start) / renewals
    benchmark.extra_info.update(
        running_sessions=n,
        renewals=renewals,
        statements_per_renewal=1,
        wal_bytes_per_renewal=round(per),
        wal_bytes_per_session_minute=round(per * PER_MINUTE),
    )
    store.close()
