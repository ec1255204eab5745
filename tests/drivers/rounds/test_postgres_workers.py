"""Many workers on one PostgreSQL: every due session resumed exactly once, and a worker killed
mid-step is recovered by another one without running a completed step again.

This file is also the worker script:
    python test_postgres_workers.py DSN LOGDIR LEASE
loops `resume_due()` + `recover()` until killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tarry import Flow, Runtime, Sleep

SESSIONS = 1_000
WORKERS = 4
# Seconds: how long a killed worker's session waits before another takes it over. Live leases
# are renewed every LEASE/3 s, so only a worker stalled for LEASE seconds would lose one.
LEASE = 5.0
HANG = 500  # the session whose second step hangs (once) so that its worker can be killed


def record(ctx, what: str) -> None:
    """One line per side effect, in a file of this process's own (appends survive SIGKILL)."""
    path = Path(ctx.input["log"]) / f"effects-{os.getpid()}.log"
    with open(path, "a") as f:
        f.write(f"{what} {ctx.session_id} {os.getpid()} {ctx.idempotency_key}\n")


def first(ctx):
    record(ctx, "first")
    return ctx.input["n"]


def second(ctx):
    record(ctx, "second.start")
    if ctx.input["n"] == HANG:
        marker = Path(ctx.input["log"]) / "hung"
        try:  # only the first attempt hangs: it leaves its pid for the test to kill
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            time.sleep(120)
    record(ctx, "second.end")
    return ctx.prev * 2


FLOW = Flow("pg_workers", [Sleep("nap", 0), first, second])


# -- the test ----------------------------------------------------------------------------------


@pytest.fixture
def dsn() -> Iterator[str]:
    import pgserver

    with pgserver.scratch_schema() as schema:
        yield pgserver.schema_dsn(schema)


def read_effects(logdir: Path) -> list[tuple[str, str, str, str]]:
    rows = []
    for path in logdir.glob("effects-*.log"):
        rows += [tuple(line.split()) for line in path.read_text().splitlines()]
    return rows  # (what, session, pid, idempotency key)


def query(dsn: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


def statuses(dsn: str) -> Counter[str]:
    return Counter(dict(query(dsn, "SELECT status, count(*) FROM tarry_sessions GROUP BY status")))


def test_workers_resume_each_session_once_and_recover_a_killed_one(
    dsn: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    logdir = tmp_path / "effects"
    logdir.mkdir()
    rt = Runtime(store=dsn, durability="step", lease=LEASE)
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda n: rt.run(FLOW, {"n": n, "log": str(logdir)}), range(SESSIONS)))
    assert all(o.paused and o.pause.kind == "system" for o in outs)
    assert len(rt.store.due(rt.clock.now(), limit=SESSIONS)) == SESSIONS  # all due at once
    created = time.monotonic() - started

    here = str(Path(__file__).resolve())
    workers = [
        subprocess.Popen(
            [sys.executable, here, dsn, str(logdir), str(LEASE)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(WORKERS)
    ]
    killed = None
    try:
        deadline = time.monotonic() + 600  # a bound against a hang, not a speed requirement
        while time.monotonic() < deadline:
            marker = logdir / "hung"
            if killed is None and marker.exists() and marker.read_text():
                killed = int(marker.read_text())
                os.kill(killed, signal.SIGKILL)  # in the middle of `second`
            if statuses(dsn)["completed"] == SESSIONS:
                break
            for w in workers:
                if w.poll() is not None and w.pid != killed:
                    pytest.fail(f"a worker died: {w.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
    finally:
        for w in workers:
            if w.poll() is None:
                w.terminate()
        for w in workers:
            w.wait(timeout=30)
    elapsed = time.monotonic() - started

    assert killed is not None, "no worker picked up the hanging session"
    assert statuses(dsn) == Counter({"completed": SESSIONS}), f"after {elapsed:.0f} s"

    # Every session ran to its output, resumed once by a timer (the killed one: recovered once).
    ids = {o.session_id: o for o in outs}
    hung = next(sid for sid in ids if rt.session(sid).state.input["n"] == HANG)
    logs = query(
        dsn,
        "SELECT session_id, count(*), min(seq), max(seq), "
        "count(*) FILTER (WHERE type = 'run.resumed') FROM tarry_events GROUP BY session_id",
    )
    assert len(logs) == SESSIONS
    for sid, count, low, high, resumed in logs:
        assert (low, high) == (1, count), f"session {sid}: seqs are not 1..{count}"
        assert resumed == (2 if sid == hung else 1), sid
    view = rt.session(hung)
    assert view.state.output == HANG * 2
    assert view.derive_state() == view.state
    events = view.events()
    assert [e.data.get("recovered") for e in events if e.type == "run.resumed"] == [None, True]

    # Side effects: every completed step exactly once; the step in flight of the killed worker
    # ran again (same idempotency key), by another process.
    effects = read_effects(logdir)
    per_step = Counter((what, sid) for what, sid, _, _ in effects)
    for sid in ids:
        assert per_step[("first", sid)] == 1, sid
        assert per_step[("second.end", sid)] == 1, sid
        assert per_step[("second.start", sid)] == (2 if sid == hung else 1), sid
    starts = [
        (pid, key) for what, sid, pid, key in effects if what == "second.start" and sid == hung
    ]
    assert starts[0][1] == starts[1][1] and starts[0][0] != starts[1][0]
    assert int(starts[0][0]) == killed or int(starts[1][0]) == killed
    by_worker = Counter(pid for what, _, pid, _ in effects if what == "first")
    assert len(by_worker) > 1, "one worker did everything"
    print(
        f"created {SESSIONS} sessions in {created:.1f} s; all done in {elapsed:.1f} s; "
        f"first steps per worker: {sorted(by_worker.values())}"
    )
    rt.store.close()


def test_workers_claim_disjoint_sessions_and_try_each_token_once(dsn: str) -> None:
    """Workers claim due sessions with SKIP LOCKED: none fetches a session another one holds,
    so each token is tried once (not once per worker that fetched it)."""
    import threading

    from tarry.snapshots import PostgresStore

    flow = Flow("pg_claims", [Sleep("nap", 0), lambda ctx: ctx.session_id])
    starter = Runtime(store=dsn)
    sids = {starter.run(flow).session_id for _ in range(60)}
    attempts: Counter[str] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(WORKERS)
    done: list[str] = []

    def work() -> None:
        store = PostgresStore(dsn, max_size=1)
        consume = store.consume_token

        def counted(token: str, **kwargs):
            with lock:
                attempts[token] += 1
            return consume(token, **kwargs)

        store.consume_token = counted  # type: ignore[method-assign]
        rt = Runtime(store=store, flows=[flow])
        barrier.wait(timeout=300)
        try:
            while True:
                got = rt.resume_due(limit=5)
                with lock:
                    done.extend(o.session_id for o in got)
                if not got and not store.due(rt.clock.now(), 1):
                    return
        finally:
            store.close()

    threads = [threading.Thread(target=work) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(done) == sorted(sids)
    assert sum(attempts.values()) == len(sids) and set(attempts.values()) == {1}
    starter.store.close()


# -- the worker --------------------------------------------------------------------------------


def work(dsn: str, lease: float) -> None:
    rt = Runtime(store=dsn, flows=[FLOW], durability="step", lease=lease)
    while True:
        done = rt.resume_due(limit=50)
        done += rt.recover()
        if not done:
            time.sleep(0.05)


if __name__ == "__main__":
    work(sys.argv[1], float(sys.argv[3]))
