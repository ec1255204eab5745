"""Child sessions on PostgreSQL: one parent whose `ForEach` starts N `Child` sessions, run by 1,
2 and 4 worker processes.

Reported per child, over the whole job: the statements sent to PostgreSQL (counted in every
process: the parent's start, then each worker's claims, runs, ends and the parent's
wake-ups); the wall time of the workers' share, as a throughput ratio against one worker in the
same run; the CPU time PostgreSQL's backends spent (from /proc, when the server runs here).
And the parent's snapshot at N against a parent of 100 children: its waiting lanes are rows,
so a wake-up reads and writes the same whatever N.

This file is also the worker script: `python test_children.py DSN COUNTS` counts its
statements and writes them to COUNTS when it is told to stop (SIGTERM).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench_support import Sizes, label
from tarry import Child, Flow, ForEach, Runtime

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"

#: The statements a worker process spends once, whatever the number of children (see the
#: bound in `test_children_over_worker_processes`).
PER_WORKER = 12


def work(ctx: Any) -> int:
    return ctx.input * 2


CHILD = Flow("bench_child", [work])
PARENT = Flow(
    "bench_parent",
    [
        ForEach(
            "jobs",
            lambda ctx: list(range(ctx.input)),
            Child("job", CHILD, input=lambda ctx: ctx.item),
            concurrency=None,
        ),
        lambda ctx: sum(ctx.prev),
    ],
)


_COUNTED: list[int] = []


def count_statements() -> list[int]:
    """Count every statement this process sends through psycopg from now on: a one-cell
    list that grows (patched once per process)."""
    if _COUNTED:
        return _COUNTED
    import psycopg

    counted = _COUNTED
    counted.append(0)
    for cls in (psycopg.Cursor,):  # (Connection.execute calls Cursor.execute)
        for name in ("execute", "executemany"):
            original = getattr(cls, name, None)
            if original is None:
                continue

            def counting(self: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
                counted[0] += 1
                return _original(self, *args, **kw)

            setattr(cls, name, counting)
    return counted


@pytest.fixture
def server() -> Iterator[tuple[str, str]]:
    """(the server's DSN, a schema of this benchmark's own)."""
    psycopg = pytest.importorskip("psycopg")
    dsn = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES")
    schema = f"tarry_bench_{uuid.uuid4().hex[:12]}"
    yield dsn, schema
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _server_cpu() -> float | None:
    """CPU seconds of every PostgreSQL process on this machine (None when it is elsewhere)."""
    total, found = 0.0, False
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            if comm not in ("postgres", "postmaster"):
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
        found = True
    return total if found else None


def _job(server: tuple[str, str], n: int, workers: int, tmp: Path, tag: str) -> dict[str, Any]:
    """One parent of `n` children run by `workers` processes: what it cost."""
    from tarry.snapshots import PostgresStore

    store = PostgresStore(server[0], schema=server[1])
    rt = Runtime(store=store)
    counted = count_statements()
    before = counted[0]
    out = rt.run(PARENT, n, session_id=f"parent-{tag}")
    started = counted[0] - before
    assert out.paused
    snapshot = len(store.load(out.session_id).state)
    cpu_before = _server_cpu()
    began = time.monotonic()
    here = str(Path(__file__).resolve())
    files = [tmp / f"counts-{tag}-{i}" for i in range(workers)]
    procs = [
        subprocess.Popen([sys.executable, here, *server, str(f)], stderr=subprocess.PIPE)
        for f in files
    ]
    try:
        while rt.session(out.session_id).status != "completed":
            for p in procs:
                if p.poll() is not None:
                    raise AssertionError(p.stderr.read().decode()[-2000:])  # type: ignore[union-attr]
            time.sleep(0.05)
        elapsed = time.monotonic() - began
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=60)
    cpu_after = _server_cpu()
    assert rt.session(out.session_id).state.output == sum(i * 2 for i in range(n))
    # A worker stopped before it set its SIGTERM handler (still importing, on a loaded
    # machine, while the others did the job) wrote nothing and ran nothing: it polls only
    # after the handler is set.
    for f, p in zip(files, procs, strict=True):
        assert f.exists() or p.returncode == -signal.SIGTERM, (f, p.returncode)
    worked = sum(int(f.read_text()) for f in files if f.exists())
    store.close()
    return {
        "statements_per_child": round((started + worked) / n, 2),
        "statements": started + worked,
        "start_statements_per_child": round(started / n, 2),
        "seconds": round(elapsed, 3),
        "children_per_second": round(n / elapsed, 1),
        "parent_snapshot_bytes": snapshot,
        "postgres_cpu_s": None
        if cpu_before is None or cpu_after is None
        else round(cpu_after - cpu_before, 2),
    }


def test_children_over_worker_processes(
    benchmark, sizes: Sizes, server: tuple[str, str], tmp_path: Path
) -> None:
    n = int(os.environ.get("TARRY_BENCH_CHILDREN", 10_000)) if sizes.full else 30
    small = _job(server, 100 if sizes.full else 10, 1, tmp_path, "small")
    results: dict[int, dict[str, Any]] = {}

    def jobs() -> None:
        for workers in (1, 2, 4):
            results[workers] = _job(server, n, workers, tmp_path, str(workers))

    benchmark.pedantic(jobs, rounds=1, iterations=1)
    one = results[1]["children_per_second"]
    label(benchmark, "children", "tarry", variant="postgres", per=n, children=n)
    benchmark.extra_info.update(
        {f"workers_{w}": r for w, r in results.items()},
        throughput_4_over_1=round(results[4]["children_per_second"] / one, 2),
        throughput_2_over_1=round(results[2]["children_per_second"] / one, 2),
        parent_snapshot_ratio_n_over_small=round(
            results[1]["parent_snapshot_bytes"] / small["parent_snapshot_bytes"], 2
        ),
        cores=os.cpu_count(),
    )
    for workers, r in results.items():
        # Start, claim, run, end and the parent's wake-up: at most 6 per child, the target of
        # child sessions (see docs/children.md for the count), with 1, 2 and 4 workers alike;
        # plus what each worker spends once whatever the job (its connections' setup, the
        # contention of its first rounds over the same few ends). At the smoke size (30
        # children) that contention depends on how the loaded machine schedules the workers
        # (11 per child was seen under stress-ng): asserted at full size only. The
        # deterministic bound is tests/drivers/rounds/test_postgres_children.py's.
        if sizes.full:
            assert r["statements_per_child"] <= 6 + PER_WORKER * workers / n, r


def _work(dsn: str, schema: str, out: Path) -> None:
    """A worker: poll until SIGTERM, then write the statements of the rounds that moved a
    session on (an idle round's queries depend on how fast the others go, not on the job)."""
    from tarry.snapshots import PostgresStore

    counted = count_statements()
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    worker = Runtime(store=PostgresStore(dsn, schema=schema), flows=[PARENT])
    worked = 0
    while not stopping:
        before = counted[0]
        if worker.poll(limit=20):
            worked += counted[0] - before
        else:
            time.sleep(0.01)
    out.write_text(str(worked))


if __name__ == "__main__":
    _work(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
