"""Workload 3 on PostgreSQL: one pause -> resume round trip of the loop of
test_pause_resume.py (10,000 items, paused at every item from k on) with PostgresStore, at
k = 10 and k = 9,000 — the same shape as Burr's and DBOS's PostgreSQL rows (test_peers.py).

Needs a server: `TARRY_TEST_POSTGRES`, else the one `.ci/run` sets up; skipped when none is
reachable. Each run gets a fresh schema, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import bench_tarry
import pytest
from bench_support import Sizes, label
from tarry import Runtime

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"


@pytest.fixture
def dsn() -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        admin = psycopg.connect(server, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES")
    schema = f"tarry_bench_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            option = quote(f"-csearch_path={schema}", safe="")
            yield f"{server}{'&' if '?' in server else '?'}options={option}"
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("at", [0, 1], ids=["k_early", "k_late"])
def test_tarry_pause_resume_postgres(benchmark, sizes: Sizes, dsn: str, at: int) -> None:
    k = sizes.ks[at]
    rt = Runtime(store=dsn)
    out = rt.run(bench_tarry.paused_loop(sizes.loop, k))
    assert out.paused and out.pause.path[1] == k
    last = {"out": out}

    def trip() -> None:
        last["out"] = rt.resume(last["out"].token, True)

    warmup = 10 if sizes.full else 0
    rounds = min(sizes.rounds, 200)
    assert warmup + rounds + 2 < sizes.loop - k, "the loop must outlast the rounds"
    benchmark.pedantic(trip, rounds=rounds, warmup_rounds=warmup)
    assert last["out"].paused and last["out"].pause.path[1] > k
    label(benchmark, "pause_postgres", "tarry", k=k)
    rt.store.close()
