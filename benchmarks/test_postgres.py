"""Resumes per second on PostgresStore: one pause -> resume round trip at a time, many
sessions resumed by several threads at once, and many sessions resumed by 1, 2 and 4 worker
processes sharing one database (`docs/scaling.md`, "Measured").

This file is also the worker script of the last benchmark:
    python test_postgres.py DSN SCHEMA
opens a store, prints "ready", waits for a line on stdin, then loops `resume_due()` until
nothing is due and exits.

Needs a server: `TARRY_TEST_POSTGRES` (a DSN), by default the one `.ci/run` sets up; skipped
when none is reachable. `make test` runs each benchmark once at a tiny size.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import pytest
from tarry import Flow, ForEach, Gate, Runtime, Sleep, step

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"
THREADS = 4


def noop(ctx: Any) -> None:
    return None


def gated_loop(n: int) -> Flow:
    """A loop that pauses at a Gate in every iteration."""
    return Flow("pg_bench", [ForEach("items", list(range(n)), [noop, Gate("review")])])


def one_gate() -> Flow:
    return Flow("pg_bench_one", [step(noop, "before"), Gate("review"), step(noop, "after")])


#: The workers' flow: a step, a one-second Sleep (the session all workers race for), a step.
SLEEPER = Flow("pg_bench_sleep", [step(noop, "before"), Sleep("s", 1), step(noop, "after")])


@pytest.fixture
def server_schema() -> Iterator[tuple[str, str]]:
    """(the server's DSN, a fresh schema on it), dropped afterwards; skip without a server."""
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        admin = psycopg.connect(server, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES")
    schema = f"tarry_bench_{uuid.uuid4().hex[:12]}"
    with admin:
        try:
            yield server, schema  # the store (or `dsn`) creates the schema
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def dsn(server_schema: tuple[str, str]) -> str:
    """A URL whose search_path is a fresh schema (dropped afterwards); skip without a server."""
    import psycopg

    server, schema = server_schema
    with psycopg.connect(server, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    option = quote(f"-csearch_path={schema}", safe="")
    return f"{server}{'&' if '?' in server else '?'}options={option}"


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


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_postgres_resumes_from_worker_processes(
    benchmark, server_schema: tuple[str, str], request, workers: int
) -> None:
    """S sessions asleep on a due Sleep, resumed to the end by `workers` processes, each
    looping `resume_due(limit=50)` until nothing is due. Timed from the go signal (the
    processes are started and connected beforehand) to the last worker's exit; the rate is
    S / that time. Every session must be resumed exactly once."""
    from tarry.snapshots import PostgresStore

    server, schema = server_schema
    sessions = 1_000 if _full(request) else 40
    store = PostgresStore(server, schema=schema, max_size=4)
    rt = Runtime(store=store, flows=[SLEEPER])

    def setup() -> tuple[tuple, dict]:
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda _: rt.run(SLEEPER), range(sessions)))
        assert all(o.paused for o in outs)
        time.sleep(1.05)  # the last one's Sleep is due too
        assert len(store.due(rt.clock.now(), sessions)) == sessions
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, server, schema],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(workers)
        ]
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()[-2000:]
        return (procs,), {}

    timed: list[float] = []

    def resume_all(procs: list[subprocess.Popen]) -> None:
        start = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-2000:]
        timed.append(time.perf_counter() - start)  # also when the benchmarks are disabled

    benchmark.pedantic(resume_all, setup=setup, rounds=1, iterations=1)

    with store._pool.connection() as conn:
        rows = conn.execute(
            "SELECT s.status, (SELECT count(*) FROM tarry_events e"
            " WHERE e.session_id = s.session_id AND e.type = 'run.resumed')"
            " FROM tarry_sessions s"
        ).fetchall()
    assert len(rows) == sessions
    assert all(status == "completed" and resumed == 1 for status, resumed in rows), rows[:5]

    elapsed = benchmark.stats.stats.mean if benchmark.stats is not None else timed[0]
    rate = sessions / elapsed
    benchmark.extra_info["resumes_per_second"] = round(rate, 1)
    benchmark.extra_info["workers"] = workers
    benchmark.extra_info["sessions"] = sessions
    benchmark.extra_info["store"] = "postgres"
    print(f"\n{workers} worker process(es): {sessions} resumes in {elapsed:.2f} s = {rate:.0f}/s")
    store.close()


def _worker(server: str, schema: str) -> None:
    from tarry.snapshots import PostgresStore

    store = PostgresStore(server, schema=schema, max_size=1)
    rt = Runtime(store=store, flows=[SLEEPER])
    store.due(rt.clock.now(), 1)  # connected and warm before the go signal
    print("ready", flush=True)
    sys.stdin.readline()
    while True:
        if not rt.resume_due(limit=50) and not store.due(rt.clock.now(), 1):
            break  # nothing resumed this round and nothing left due (others hold the rest)
    store.close()


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
