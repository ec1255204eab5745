"""Resumes per second on PostgresStore: one pause -> resume round trip at a time, and many
sessions resumed by several threads at once (as workers sharing one database do).

Needs a server: `TARRY_TEST_POSTGRES` (a DSN), by default the one `.ci/run` sets up; skipped
when none is reachable. `make test` runs each benchmark once at a tiny size.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import pytest
from tarry import Flow, ForEach, Gate, Runtime, step

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"
THREADS = 4


def noop(ctx: Any) -> None:
    return None


def gated_loop(n: int) -> Flow:
    """A loop that pauses at a Gate in every iteration."""
    return Flow("pg_bench", [ForEach("items", list(range(n)), [noop, Gate("review")])])


def one_gate() -> Flow:
    return Flow("pg_bench_one", [step(noop, "before"), Gate("review"), step(noop, "after")])


@pytest.fixture
def dsn() -> Iterator[str]:
    """A URL whose search_path is a fresh schema, dropped afterwards; skip without a server."""
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        admin = psycopg.connect(server, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES")
    schema = f"tarry_bench_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        option = quote(f"-csearch_path={schema}", safe="")
        try:
            yield f"{server}{'&' if '?' in server else '?'}options={option}"
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _full(request: pytest.FixtureRequest) -> bool:
    return not request.config.getoption("benchmark_disable")


def test_postgres_pause_resume_round_trip(benchmark, dsn: str, request) -> None:
    """One resume from a Gate's token up to the next Gate: resumes per second, one at a time."""
    rounds = 200 if _full(request) else 2
    rt = Runtime(store=dsn)
    out = rt.run(gated_loop(rounds + 10))
    for _ in range(3):  # the first resumes warm the pool and the prepared statements
        out = rt.resume(out.token, True)
    last = {"out": out}

    def trip() -> None:
        last["out"] = rt.resume(last["out"].token, True)

    benchmark.pedantic(trip, rounds=rounds, iterations=1)
    assert last["out"].paused
    benchmark.extra_info["store"] = "postgres"
    rt.store.close()


def test_postgres_resumes_from_threads(benchmark, dsn: str, request) -> None:
    """Sessions paused at a Gate, resumed to the end by THREADS threads sharing one Runtime
    (one pool): one round resumes them all; the rate is sessions / round time."""
    sessions = 200 if _full(request) else 4
    rt = Runtime(store=dsn)
    flow = one_gate()
    batches: list[list[str]] = []

    def setup() -> tuple[tuple, dict]:
        tokens = [rt.run(flow).token for _ in range(sessions)]
        batches.append(tokens)
        return (tokens,), {}

    def resume_all(tokens: list[str]) -> None:
        with ThreadPoolExecutor(THREADS) as pool:
            outs = list(pool.map(lambda t: rt.resume(t, True), tokens))
        assert all(o.ok for o in outs)

    benchmark.pedantic(resume_all, setup=setup, rounds=3 if _full(request) else 1)
    if benchmark.stats is not None:
        benchmark.extra_info["resumes_per_second"] = sessions / benchmark.stats.stats.mean
    benchmark.extra_info["store"] = "postgres"
    benchmark.extra_info["threads"] = THREADS
    rt.store.close()
