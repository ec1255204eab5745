"""Resumes per second on PostgresStore: one pause -> resume round trip at a time, many
sessions resumed by several threads at once, and many sessions resumed by 1, 2 and 4 worker
processes sharing one database (`docs/scaling.md`, "Measured").

This file is also the worker script of the last benchmark:
    python test_postgres.py DSN SCHEMA CLAIMS
opens a store, prints "ready", waits for a line on stdin, then works as a worker did before
issue 14 (CLAIMS "before") or does now ("after") until nothing is due, and prints its token
attempts and resumes as JSON.

Needs a server: `TARRY_TEST_POSTGRES` (a DSN), by default the one `.ci/run` sets up; skipped
when none is reachable. `make test` runs each benchmark once at a tiny size.
"""

from __future__ import annotations

import json
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


#: The workers' flow: a step, a Sleep that is due at once (the session the workers are
#: after), a step.
SLEEPER = Flow("pg_bench_sleep", [step(noop, "before"), Sleep("s", 0), step(noop, "after")])


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
    """One resume from a Gate's token up to the next Gate: resumes per second, one at a time.

    Beside it, in the same run and interleaved round by round, the floor: one `SELECT 1`
    round trip and one committed one-row UPDATE on the same pool. `extra_info` holds the
    medians in µs and the median of the per-round ratios resume ÷ SELECT 1 (a resume is two
    statements: `consume_token`, then the drive's `save`; see tests/drivers/
    test_postgres_round_trips.py for the count)."""
    rounds = 200 if _full(request) else 2
    rt = Runtime(store=dsn)
    out = rt.run(gated_loop(2 * rounds + 10))
    for _ in range(3):  # the first resumes warm the pool and the prepared statements
        out = rt.resume(out.token, True)
    last = {"out": out}

    def trip() -> None:
        last["out"] = rt.resume(last["out"].token, True)

    benchmark.pedantic(trip, rounds=rounds, iterations=1)
    assert last["out"].paused
    floors = _floors(rt, trip, rounds)
    benchmark.extra_info.update(floors)
    benchmark.extra_info["store"] = "postgres"
    print(
        f"\npostgres resume {floors['resume_us']:,.0f} µs; floor: SELECT 1 "
        f"{floors['select_1_us']:,.0f} µs, one-row UPDATE commit {floors['update_commit_us']:,.0f} "
        f"µs; resume ÷ SELECT 1 = {floors['resume_per_select_1']:.2f}"
    )
    rt.store.close()


def _floors(rt: Runtime, trip: Any, rounds: int) -> dict[str, float]:
    """Medians (µs) of a resume, a `SELECT 1` and a committed one-row UPDATE, measured in
    turns, and the median of the per-round ratios resume ÷ SELECT 1."""
    from statistics import median

    pool = rt.store._pool
    with pool.connection() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id int PRIMARY KEY, n bigint)")
        conn.execute("INSERT INTO bench_floor VALUES (1, 0) ON CONFLICT DO NOTHING")
    select, update, resume = [], [], []
    for _ in range(rounds):
        with pool.connection() as conn:
            start = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            select.append(time.perf_counter() - start)
            start = time.perf_counter()
            conn.execute("UPDATE bench_floor SET n = n + 1 WHERE id = 1")
            update.append(time.perf_counter() - start)
        start = time.perf_counter()
        trip()
        resume.append(time.perf_counter() - start)
    return {
        "resume_us": round(median(resume) * 1e6, 1),
        "select_1_us": round(median(select) * 1e6, 1),
        "update_commit_us": round(median(update) * 1e6, 1),
        "resume_per_select_1": round(median(r / s for r, s in zip(resume, select, strict=True)), 2),
        "resume_per_update_commit": round(
            median(r / u for r, u in zip(resume, update, strict=True)), 2
        ),
    }


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


#: How workers found due sessions, compared by the worker-process benchmark:
#: - "before": as until issue 14. Every round, each worker fetched the same earliest due
#:   sessions (`store.due`) and raced the other workers for their tokens, then slept the
#:   interval even after a full round (`old_round` and `old_loop` below keep that path).
#: - "after": `tarry.drivers.worker.Worker` as it is: due sessions claimed with
#:   `FOR UPDATE SKIP LOCKED` (disjoint pages per worker), no sleep after a full round.
CLAIMS = ("before", "after")
#: The worker's defaults: sessions per round, seconds between rounds that were not full.
LIMIT, INTERVAL = 100, 1.0


@pytest.mark.parametrize("claims", CLAIMS)
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_postgres_resumes_from_worker_processes(
    benchmark, server_schema: tuple[str, str], request, workers: int, claims: str
) -> None:
    """S sessions asleep on a due Sleep, resumed to the end by `workers` processes. Timed from
    the go signal (the processes are started and connected beforehand) to the last worker's
    exit; the rate is S / that time. Every session must be resumed exactly once. Each worker
    counts its token attempts (`consume_token` calls): attempts per resume is their sum over
    S (1.0: no worker ever tried a token that another one used)."""
    from tarry.snapshots import PostgresStore

    if not _full(request) and workers != 2:
        pytest.skip(
            "smoke run (make test): the 2-worker case runs this path; starting processes is slow"
        )
    server, schema = server_schema
    sessions = 2_000 if _full(request) else 20
    store = PostgresStore(server, schema=schema, max_size=4)
    rt = Runtime(store=store, flows=[SLEEPER])

    def setup() -> tuple[tuple, dict]:
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda _: rt.run(SLEEPER), range(sessions)))
        assert all(o.paused for o in outs)
        assert len(store.due(rt.clock.now(), sessions)) == sessions
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, server, schema, claims],
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
    counts: list[dict[str, int]] = []

    def resume_all(procs: list[subprocess.Popen]) -> None:
        start = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, err[-2000:]
            counts.append(json.loads(out.strip().splitlines()[-1]))
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
    assert sum(c["resumed"] for c in counts) == sessions
    attempts = sum(c["attempts"] for c in counts) / sessions
    if claims == "after":
        assert attempts == 1.0

    elapsed = benchmark.stats.stats.mean if benchmark.stats is not None else timed[0]
    rate = sessions / elapsed
    benchmark.extra_info["workload"] = "pg_workers"
    benchmark.extra_info["system"] = "tarry"
    benchmark.extra_info["variant"] = claims
    benchmark.extra_info["resumes_per_second"] = round(rate, 1)
    benchmark.extra_info["token_attempts_per_resume"] = round(attempts, 2)
    benchmark.extra_info["workers"] = workers
    benchmark.extra_info["sessions"] = sessions
    benchmark.extra_info["store"] = "postgres"
    print(
        f"\n{claims}: {workers} worker process(es): {sessions} resumes in {elapsed:.2f} s = "
        f"{rate:.0f}/s, {attempts:.2f} token attempts per resume"
    )
    store.close()


# -- the worker processes -------------------------------------------------------------------------


def old_round(rt: Runtime, limit: int) -> int:
    """One round of `resume_due` as it was before due sessions were claimed: fetch the
    earliest due sessions, the same ones every other worker fetches, and try each token; a
    worker that loses a race skips the session. Returns how many it resumed."""
    from tarry.drivers.drive.pump import settle
    from tarry.drivers.sessions.resuming import prepare
    from tarry.engine.errors import SessionNotResumable, TokenAlreadyUsed, UnknownToken

    core = rt._core
    resumed = 0
    for record in core.store.due(core.clock.now(), limit):
        try:
            settle(prepare(core, record.token, None, False, trigger="timer"))
        except (TokenAlreadyUsed, UnknownToken, SessionNotResumable):
            continue
        resumed += 1
    return resumed


def old_loop(rt: Runtime) -> None:
    """The worker loop as it was: recover, a round, and then the interval, every time."""
    while True:
        rt.recover()
        old_round(rt, LIMIT)
        if not rt.store.due(rt.clock.now(), 1):
            return
        time.sleep(INTERVAL)


def new_loop(rt: Runtime, watcher_store: Any) -> None:
    """The worker as it is, until nothing is due (a watcher with a store of its own stops
    it)."""
    import threading

    from tarry.drivers.worker import Worker

    worker = Worker(rt, interval=INTERVAL, limit=LIMIT)

    def watch() -> None:
        while watcher_store.due(rt.clock.now(), 1):
            time.sleep(0.02)
        worker.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    worker.run_forever()
    watcher.join()


def _worker(server: str, schema: str, claims: str) -> None:
    from tarry.snapshots import PostgresStore

    store = PostgresStore(server, schema=schema, max_size=1)
    counts = {"attempts": 0, "resumed": 0}
    consume = store.consume_token

    def counted(token: str, **kwargs: Any) -> bool:
        won = consume(token, **kwargs)
        counts["attempts"] += 1
        counts["resumed"] += won
        return won

    store.consume_token = counted  # type: ignore[method-assign]
    rt = Runtime(store=store, flows=[SLEEPER])
    watcher_store = PostgresStore(server, schema=schema, max_size=1)
    for warm in (store, watcher_store):  # connected and warm before the go signal
        warm.due(rt.clock.now(), 1)
    print("ready", flush=True)
    sys.stdin.readline()
    if claims == "before":
        old_loop(rt)
    else:
        new_loop(rt, watcher_store)
    store.close()
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2], sys.argv[3])
