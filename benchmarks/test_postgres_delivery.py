"""Statements per session of `deliver_many` to N separate sessions on PostgreSQL (issue 24).

N sessions each wait on a key of their own (a batch job's prompts, one session per prompt:
docs/batch.md, way 3); one `deliver_many` of N results, from a Runtime that did not pause them
(the results come back in another process), moves them all on. The store's pool is wrapped so
that every statement it sends is counted (an `execute`, and the BEGIN and COMMIT of a
transaction): `extra_info` holds the statements, the statements per session (target: at most
3 — the token's use and the drive's save, and the batched look-ups shared by all), the
seconds per session, and what the statements were.

Needs a server: `TARRY_TEST_POSTGRES` (a DSN), by default the one `.ci/run` sets up; skipped
when none is reachable, a failure when `CI=true`. `make test` runs it once at a tiny size.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from bench_support import Sizes, label
from tarry import Flow, Runtime, Wait

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"
#: The promise (issue 24): what one session costs, its share of the batched look-ups included.
TARGET = 3


def prompt_key(ctx: Any) -> str:
    return f"eval-9/prompt-{ctx.input}"


PROMPT = Flow(
    "pg_deliver_prompt",
    [Wait("result", reason="batch", key=prompt_key), lambda ctx: len(str(ctx.prev))],
)


class _CountedConnection:
    """A pooled connection whose statements are counted (everything else passes through)."""

    def __init__(self, conn: Any, counts: Counter[str]) -> None:
        self._conn = conn
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._counts[_kind(query)] += 1
        return self._conn.execute(query, *args, **kwargs)

    @contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self._counts["BEGIN"] += 1
        with self._conn.transaction(*args, **kwargs) as tx:
            yield tx
        self._counts["COMMIT"] += 1


class _CountedPool:
    """The store's pool, handing out counted connections."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.counts: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    @contextmanager
    def connection(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with self._pool.connection(*args, **kwargs) as conn:
            yield _CountedConnection(conn, self.counts)


def _kind(query: Any) -> str:
    """A statement's first words and the first table it names: enough to tell them apart."""
    text = " ".join(str(query).split())
    verb = text.split(" ", 1)[0].upper()
    table = re.search(r"tarry_\w+", text)
    return f"{verb} {table.group(0) if table else ''}".strip()


@pytest.fixture
def store() -> Iterator[Any]:
    """A PostgresStore in a fresh schema (dropped afterwards); skipped without a server, and
    a failure under CI, where a missing server is a broken setup."""
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        psycopg.connect(server, connect_timeout=3).close()
    except psycopg.Error as exc:
        msg = f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    from tarry.snapshots import PostgresStore

    made = PostgresStore(server, schema=f"tarry_bench_{uuid.uuid4().hex[:12]}")
    try:
        yield made
    finally:
        made.close()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{made.schema}" CASCADE')


def test_postgres_deliver_many_statements_per_session(
    benchmark: Any, sizes: Sizes, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 10_000 if sizes.full else 40
    # The store's "signed tokens" mark is read at most once a second (drivers/tokens.py): a
    # slow round must not count that read as the deliveries'.
    monkeypatch.setattr("tarry.drivers.tokens.RECHECK_SECONDS", 3600.0)
    starter = Runtime(store=store)
    for i in range(n):
        assert starter.run(PROMPT, i).paused
    results = {f"eval-9/prompt-{i}": {"text": f"result {i}"} for i in range(n)}
    rt = Runtime(store=store, flows=[PROMPT])
    rt.deliver_many({})  # the mark is read, the pool warm
    counted = _CountedPool(store._pool)
    store._pool = counted
    report: dict[str, Any] = {}

    def deliver() -> None:
        started = time.perf_counter()
        report["delivery"] = rt.deliver_many(results)
        report["seconds"] = time.perf_counter() - started

    try:
        benchmark.pedantic(deliver, rounds=1, iterations=1)
    finally:
        store._pool = counted._pool
    delivery = report["delivery"]
    assert len(delivery.applied) == n and not delivery.queued
    assert len(delivery.outcomes) == n and all(o.ok for o in delivery.outcomes)
    statements = sum(counted.counts.values())
    per = statements / n
    label(
        benchmark,
        "deliver_many_statements",
        "tarry",
        variant="postgres",
        per=n,
        sessions=n,
        statements=statements,
        statements_per_session=round(per, 3),
        target_statements_per_session=TARGET,
        ms_per_session=round(report["seconds"] * 1000 / n, 3),
        statement_kinds=dict(counted.counts.most_common()),
    )
    print(f"\ndeliver_many to {n} sessions: {statements} statements ({per:.2f} a session)")
    for kind, count in counted.counts.most_common():
        print(f"  {count:>8}  {kind}")
    assert per <= TARGET
