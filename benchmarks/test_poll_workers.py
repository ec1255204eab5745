"""Workers fed by one bulk adapter must not herd (issue 24): token attempts and store calls per
resume with 1, 2, 4 and 8 workers polling one store.

N sessions each wait on a key of their own (docs/batch.md, way 3); a bulk adapter answers every
request it is asked about (`many(requests)`: all ready). W workers — threads, each with a
Runtime and a store of its own on one SQLite file (or one PostgreSQL schema), as W processes
would — are released together and each calls `poll()` until a round resumes nothing. Counted
on every worker's store:

- **token attempts per resume**: `consume_token` calls plus the tokens given to
  `consume_tokens`, over the sessions resumed. 1.00 means no worker tried a token another one
  used (target: 1.00 at 8 workers);
- **statements per resume**: every call to a store method, over the sessions resumed. A call is
  one statement (one round trip) on PostgreSQL and one transaction on SQLite; the reads of the
  waits, the adapter's round and the claims are shared by everything a round resumes (target:
  at most 3 at 8 workers; the timer path, which claims due sessions first, costs 2).

`extra_info` holds both per worker count, and the calls by method at the largest count.
PostgreSQL runs when a server is reachable (`TARRY_TEST_POSTGRES`, by default the one `.ci/run`
sets up): skipped when none is, a failure when `CI=true`. `make test` runs it once at a tiny
size; the targets are asserted at full size only.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bench_support import Sizes, label
from tarry import Flow, Outcome, ResumeRequest, Runtime, Wait
from tarry.snapshots import SessionStore, SQLiteStore

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"
WORKERS = (1, 2, 4, 8)
TARGET_ATTEMPTS = 1.0
TARGET_STATEMENTS = 3.0
#: What every call counts as: the methods of the store protocol.
METHODS = frozenset(n for n in dir(SessionStore) if not n.startswith("_"))


def job_key(ctx: Any) -> str:
    return f"bulk-9/job-{ctx.input}"


JOB = Flow("bulk_job", [Wait("result", reason="batch", key=job_key), lambda ctx: ctx.prev])


class AllReady:
    """A batch API whose every job is done once `done` is set: asked once a round, it then
    answers every request by key."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def many(self, requests: list[ResumeRequest]) -> dict[str, Any]:
        if not self.done.is_set():
            return {}
        return {r.key: {"done": r.key} for r in requests}


class Counted:
    """A store whose method calls are counted (shared by the workers: under `lock`)."""

    def __init__(self, inner: Any, calls: Counter[str], lock: threading.Lock) -> None:
        self.inner = inner
        self.calls = calls
        self.lock = lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in METHODS:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.calls[name] += 1
                if name == "consume_token":
                    self.calls["token attempts"] += 1
                elif name == "consume_tokens":
                    self.calls["token attempts"] += len(args[0])
            return attr(*args, **kwargs)

        return counted


def _herd(opener: Callable[[], Any], workers: int, n: int) -> dict[str, Any]:
    """n sessions waiting; `workers` pollers released together, each polling until a round
    resumes nothing. Token attempts and store calls per resume, and the calls by method."""
    starter = opener()
    sids = [Runtime(store=starter).run(JOB, i).session_id for i in range(n)]
    calls: Counter[str] = Counter()
    lock = threading.Lock()
    api = AllReady()
    warm = threading.Barrier(workers + 1)
    go = threading.Event()
    done: list[Outcome] = []
    errors: list[BaseException] = []

    def work() -> None:
        store = opener()
        try:
            rt = Runtime(store=Counted(store, calls, lock), flows=[JOB], adapters={"external": api})
            assert rt.poll() == []  # nothing done yet: the store's mark read, its pool warm
            warm.wait(timeout=600)
            go.wait(timeout=600)
            while got := rt.poll():
                with lock:
                    done.extend(got)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            warm.abort()
        finally:
            close = getattr(store, "close", None)
            if close is not None:
                close()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a worker failed: see `errors`
        warm.wait(timeout=600)
    with lock:
        calls.clear()
    api.done.set()
    go.set()
    for t in threads:
        t.join(900)
    close = getattr(starter, "close", None)
    if close is not None:
        close()
    assert not errors, errors
    resumed = Counter(o.session_id for o in done)
    assert sorted(resumed) == sorted(sids) and set(resumed.values()) == {1}
    assert all(o.ok for o in done)
    statements = sum(v for k, v in calls.items() if k in METHODS)
    return {
        "attempts_per_resume": round(calls["token attempts"] / n, 3),
        "statements_per_resume": round(statements / n, 3),
        "calls": dict(calls.most_common()),
    }


def _measure(
    benchmark: Any, sizes: Sizes, store: str, opener: Callable[[], Callable[[], Any]]
) -> None:
    """Every worker count, each on a store of its own (`opener()` gives a new one's opener)."""
    n = 1_000 if sizes.full else 24
    found: dict[int, dict[str, Any]] = {}

    def run() -> None:
        for workers in WORKERS:
            found[workers] = _herd(opener(), workers, n)

    benchmark.pedantic(run, rounds=1, iterations=1)
    most = max(WORKERS)
    label(
        benchmark,
        "poll_workers",
        "tarry",
        variant=store,
        per=n,
        sessions=n,
        workers=WORKERS,
        attempts_per_resume=[found[w]["attempts_per_resume"] for w in WORKERS],
        statements_per_resume=[found[w]["statements_per_resume"] for w in WORKERS],
        target_attempts_per_resume=TARGET_ATTEMPTS,
        target_statements_per_resume=TARGET_STATEMENTS,
        calls_at_most_workers=found[most]["calls"],
    )
    print(f"\n{store}: {n} sessions, one bulk adapter")
    for w in WORKERS:
        print(
            f"  {w} workers: {found[w]['attempts_per_resume']:.2f} token attempts and "
            f"{found[w]['statements_per_resume']:.2f} statements per resume"
        )
    print(f"  calls at {most} workers: {found[most]['calls']}")
    if sizes.full:
        assert found[most]["attempts_per_resume"] <= TARGET_ATTEMPTS
        assert found[most]["statements_per_resume"] <= TARGET_STATEMENTS


def test_sqlite_workers_polling_one_bulk_adapter(
    benchmark: Any, sizes: Sizes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's "signed tokens" mark is read at most once a second (drivers/tokens.py): a
    # slow run must not count those reads as the resumes'.
    monkeypatch.setattr("tarry.drivers.tokens.RECHECK_SECONDS", 3600.0)

    def opener() -> Callable[[], Any]:
        path = tmp_path / f"{uuid.uuid4().hex[:8]}.db"
        return lambda: SQLiteStore(path)

    _measure(benchmark, sizes, "sqlite", opener)


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """(the server's DSN, the schemas made on it: dropped afterwards); skipped without a
    server, and a failure under CI, where a missing server is a broken setup."""
    psycopg = pytest.importorskip("psycopg")
    dsn = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        msg = f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    schemas: list[str] = []
    try:
        yield dsn, schemas
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            for schema in schemas:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_postgres_workers_polling_one_bulk_adapter(
    benchmark: Any, sizes: Sizes, server: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tarry.snapshots import PostgresStore

    monkeypatch.setattr("tarry.drivers.tokens.RECHECK_SECONDS", 3600.0)
    dsn, schemas = server

    def opener() -> Callable[[], Any]:
        schema = f"tarry_bench_{uuid.uuid4().hex[:12]}"
        schemas.append(schema)
        return lambda: PostgresStore(dsn, schema=schema, max_size=2)

    _measure(benchmark, sizes, "postgres", opener)
