"""Upkeep: `Runtime.prune` of many ended sessions, and `stats()` on a store with long logs, each
against a baseline measured in the same run on an identical store:

- prune: the same sessions deleted one by one with `store.delete` (what a user had before);
  the ratio prune ÷ one-by-one, and for SQLite the file size before and after.
- stats: sessions whose logs are 100x longer (same sessions, same nodes) — the ratio long ÷
  short must stay near 1, since a report reads no log it has tallied — and the old way,
  every event of every session folded on each call (ratio stats ÷ full fold).

Numbers land in `extra_info` (seconds and ratios); `make test` runs each once at a tiny size.
PostgreSQL runs are skipped when no server is reachable (`TARRY_TEST_POSTGRES`).
"""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bench_support import Sizes
from tarry import ManualClock, Runtime
from tarry.engine.state.events import Event
from tarry.snapshots import MemoryStore, SessionRecord, SQLiteStore
from tarry.snapshots.tally import Tally

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"
T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
NODES = 5


def _postgres() -> tuple[Callable[[], Any], Callable[[], None]]:
    """A factory of PostgresStores, each in a fresh schema, and the cleanup; skip without a
    server."""
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        psycopg.connect(server, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES")
    from tarry.snapshots import PostgresStore

    made: list[Any] = []

    def make() -> Any:
        store = PostgresStore(server, schema=f"tarry_bench_{uuid.uuid4().hex[:12]}")
        made.append(store)
        return store

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as admin:
            for store in made:
                store.close()
                admin.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')

    return make, drop


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """A factory of empty stores of one kind."""
    if request.param == "postgres":
        make, drop = _postgres()
        yield make
        drop()
        return
    names = iter(range(1000))
    made: list[Any] = []

    def make() -> Any:
        store = (
            MemoryStore()
            if request.param == "memory"
            else SQLiteStore(tmp_path / f"s{next(names)}.db")
        )
        made.append(store)
        return store

    yield make
    for store in made:
        getattr(store, "close", lambda: None)()


def fill(store: Any, sessions: int, events: int, *, status: str = "completed") -> list[str]:
    """`sessions` sessions of `events` node events each (NODES nodes, a second per attempt), a
    value and a token apiece, last updated at T0."""
    ids = []
    for i in range(sessions):
        sid = f"s{i:07}"
        log = [Event(1, "run.started", sid, T0, (), {"input": None})]
        for k in range((events - 1) // 2):
            path = ("flow", f"node{k % NODES}")
            at = T0 + dt.timedelta(seconds=k)
            log.append(Event(len(log) + 1, "node.started", sid, at, path, {"kind": "step"}))
            done = at + dt.timedelta(seconds=1)
            log.append(Event(len(log) + 1, "node.completed", sid, done, path, {"output": k}))
        record = SessionRecord(
            sid, "bench", status, b"state" * 20, token=f"tk_{sid}", created_at=T0, updated_at=T0
        )
        store.create(record, events=log)
        store.put_values(sid, [("r", 0, b"result" * 10)])
        ids.append(sid)
    return ids


def _size(store: Any) -> int | None:
    path = getattr(store, "path", None)
    if path is None:
        return None
    wal = Path(f"{path}-wal")
    return Path(path).stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def test_prune_many_sessions(benchmark, sizes: Sizes, stores: Callable[[], Any]) -> None:
    n = 20_000 if sizes.full else 200
    one_by_one, batched = stores(), stores()
    ids = fill(one_by_one, n, 11)
    fill(batched, n, 11)
    started = time.perf_counter()
    for sid in ids:
        one_by_one.delete(sid)
    baseline = time.perf_counter() - started
    rt = Runtime(store=batched, clock=ManualClock(T0 + dt.timedelta(days=30)))
    before = _size(batched)
    timing: dict[str, float] = {}

    def prune() -> int:
        started = time.perf_counter()
        deleted = rt.prune(older_than=dt.timedelta(days=7))
        timing["s"] = time.perf_counter() - started
        return deleted

    assert benchmark.pedantic(prune, rounds=1, iterations=1) == n
    assert rt.sessions() == []
    benchmark.extra_info.update(
        sessions=n,
        one_by_one_s=round(baseline, 4),
        prune_s=round(timing["s"], 4),
        ratio_prune_to_one_by_one=round(timing["s"] / baseline, 4),
        file_bytes_before=before,
        file_bytes_after=_size(batched),
    )


def _full_fold(store: Any) -> int:
    """The old `stats()`: every event of every session read and folded, on each call."""
    executions = 0
    offset = 0
    while True:
        page = store.list(limit=500, offset=offset)
        for record in page:
            tally = Tally()
            tally.fold(store.events(record.session_id))
            executions += sum(n[0] for n in tally.nodes.values())
        if len(page) < 500:
            return executions
        offset += len(page)


def _timed(fn: Callable[[], Any], rounds: int) -> float:
    """The median of `rounds` calls, in seconds."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def test_stats_flat_in_log_length(benchmark, sizes: Sizes, stores: Callable[[], Any]) -> None:
    sessions, short, long = (200, 11, 1001) if sizes.full else (5, 11, 101)
    rounds = 5 if sizes.full else 1
    few, many = stores(), stores()
    fill(few, sessions, short)
    fill(many, sessions, long)
    first = _timed(lambda: many.stats(), 1)  # tallies every session once, and keeps them
    few.stats()
    executions = sessions * ((long - 1) // 2)
    assert sum(n.executions for n in many.stats().nodes.values()) == executions
    short_s = _timed(few.stats, rounds)
    long_s = _timed(many.stats, rounds)
    fold_s = _timed(lambda: _full_fold(many), rounds)
    assert _full_fold(many) == executions
    benchmark.pedantic(many.stats, rounds=rounds, iterations=1)
    benchmark.extra_info.update(
        sessions=sessions,
        events_short=short,
        events_long=long,
        first_stats_s=round(first, 4),
        stats_short_s=round(short_s, 5),
        stats_long_s=round(long_s, 5),
        full_fold_long_s=round(fold_s, 5),
        ratio_long_to_short=round(long_s / short_s, 3),
        ratio_stats_to_full_fold=round(long_s / fold_s, 4),
    )
