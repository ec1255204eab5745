"""Batch waits (issue 16): many sessions each waiting on its own key, as a batch job's
prompts do, on SQLite and PostgreSQL.

- `poll()` rounds with 10,000 keyed waits and a bulk adapter that has nothing ready: seconds
  per round (targets: 50 ms on SQLite, 200 ms on PostgreSQL) and rows written (0; on SQLite the
  connection's own `total_changes`, on both the calls to the store's writing methods); then
  one round in which 100 of them are ready: writes per ready item.
- `deliver_many` of 10,000 results to 10,000 waiting sessions: total seconds.
- `deliver_many` of 10,000 results to one session whose sequential ForEach waits on each
  prompt's key in turn: the mailbox keeps them and the loop takes them without pausing.
- `deliver_many` to one session with 10,000 waiting branches: skipped until concurrent
  ForEach lands (issue 15).

`make test` runs each once at a tiny size; PostgreSQL runs are skipped when no server is
reachable (`TARRY_TEST_POSTGRES`). Numbers land in `extra_info`, and docs/batch.md quotes them.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bench_support import Sizes, label
from tarry import Flow, ForEach, ResumeRequest, Runtime, Wait
from tarry.snapshots import SQLiteStore

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"
READY = 100

WRITES = frozenset(
    {
        "create",
        "save",
        "delete",
        "prune",
        "append_events",
        "put_values",
        "consume_token",
        "consume_tokens",
        "request_stop",
        "claim",
        "claim_waits",
        "release",
        "post",
        "claim_mail",
        "purge_mail",
        "discard",
        "mark",
    }
)


def prompt_key(ctx: Any) -> str:
    return f"batch-7/prompt-{ctx.input}"


PROMPT = Flow(
    "prompt",
    [
        Wait("result", reason="batch", payload={"batch": "batch-7"}, key=prompt_key),
        lambda ctx: len(str(ctx.prev)),
    ],
)


class Counting:
    """A store that counts the calls to its methods that write."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in WRITES:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            return attr(*args, **kwargs)

        return counted


class BatchApi:
    """A batch API's results, asked once per poll about every waiting prompt."""

    def __init__(self) -> None:
        self.ready: dict[str, Any] = {}
        self.asked = 0

    def many(self, requests: list[ResumeRequest]) -> dict[str, Any]:
        self.asked = len(requests)
        return {r.key: self.ready[r.key] for r in requests if r.key in self.ready}


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        made = SQLiteStore(tmp_path / "batch.db")
        yield made
        made.close()
        return
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        psycopg.connect(server, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES")
    from tarry.snapshots import PostgresStore

    made = PostgresStore(server, schema=f"tarry_bench_{uuid.uuid4().hex[:12]}")
    try:
        yield made
    finally:
        made.close()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{made.schema}" CASCADE')


def _kind(store: Any) -> str:
    return "sqlite" if isinstance(store, SQLiteStore) else "postgres"


def _waiting(store: Any, n: int) -> list[str]:
    """`n` sessions of PROMPT, each paused on its key; their keys."""
    rt = Runtime(store=store)
    for i in range(n):
        assert rt.run(PROMPT, i).paused
    return [f"batch-7/prompt-{i}" for i in range(n)]


def _changes(store: Any) -> Callable[[], int | None]:
    db = getattr(store, "_db", None)
    return (lambda: db.total_changes) if db is not None else (lambda: None)


def test_poll_keyed_waits(benchmark, sizes: Sizes, store: Any) -> None:
    n = 10_000 if sizes.full else 200
    ready = READY if sizes.full else 2
    keys = _waiting(store, n)
    api = BatchApi()
    counting = Counting(store)
    rt = Runtime(store=counting, flows=[PROMPT], adapters={"external": api})
    changes = _changes(store)
    before = changes()

    def idle() -> None:
        assert rt.poll() == []

    benchmark.pedantic(idle, rounds=10 if sizes.full else 1, warmup_rounds=1, iterations=1)
    assert api.asked == n
    idle_writes, idle_rows = counting.writes, changes()
    assert idle_writes == 0
    if before is not None:
        assert idle_rows == before
    api.ready = {key: {"text": "done"} for key in keys[:ready]}
    started = time.perf_counter()
    done = rt.poll()
    ready_s = time.perf_counter() - started
    assert len(done) == ready and all(o.ok for o in done)
    label(
        benchmark,
        "poll_keyed",
        "tarry",
        variant=_kind(store),
        waiting=n,
        idle_writes=idle_writes,
        idle_rows_written=0 if before is not None else None,
        ready=ready,
        ready_round_s=round(ready_s, 4),
        ready_writes=counting.writes,
        writes_per_ready=round(counting.writes / ready, 2),
        ready_rows_written=None if before is None else changes() - idle_rows,
    )


def test_deliver_many_to_waiting_sessions(benchmark, sizes: Sizes, store: Any) -> None:
    n = 10_000 if sizes.full else 50
    keys = _waiting(store, n)
    rt = Runtime(store=store, flows=[PROMPT])
    results = {key: {"text": f"result {i}"} for i, key in enumerate(keys)}
    got: list[Any] = []

    def deliver() -> None:
        got.extend(rt.deliver_many(results).outcomes)

    benchmark.pedantic(deliver, rounds=1, iterations=1)
    assert len(got) == n and all(o.ok for o in got)
    label(benchmark, "deliver_many", "tarry", variant=_kind(store), per=n, sessions=n)


def item_key(ctx: Any) -> str:
    return f"batch-7/prompt-{ctx.item}"


def test_deliver_many_to_one_sequential_session(benchmark, sizes: Sizes, store: Any) -> None:
    """One session whose ForEach (sequential) waits on each prompt's key in turn: the first
    key resumes its wait, the others are kept as mail and taken by their Waits as the loop
    reaches them, without pausing, in one drive."""
    n = 10_000 if sizes.full else 50
    flow = Flow(
        "prompts",
        [ForEach("prompts", lambda ctx: list(range(ctx.input)), [Wait("result", key=item_key)])],
    )
    rt = Runtime(store=store, flows=[flow])
    out = rt.run(flow, n)
    assert out.paused
    results = {f"batch-7/prompt-{i}": {"text": f"result {i}"} for i in range(n)}
    got: list[Any] = []

    def deliver() -> None:
        got.extend(rt.deliver_many(results).outcomes)

    benchmark.pedantic(deliver, rounds=1, iterations=1)
    [done] = got
    assert done.ok and len(done.output) == n
    label(benchmark, "deliver_many_mailbox", "tarry", variant=_kind(store), per=n, items=n)


def test_deliver_many_to_one_session_with_many_waiting_branches(
    benchmark, sizes: Sizes, store: Any
) -> None:
    """`deliver_many` of 10,000 results to one session whose ForEach(concurrency=None) has
    10,000 iterations waiting on their keys: one drive and one write for the session."""
    n = 10_000 if sizes.full else 50
    flow = Flow(
        "branches",
        [
            ForEach(
                "prompts",
                lambda ctx: list(range(ctx.input)),
                [Wait("result", key=item_key)],
                concurrency=None,
            )
        ],
    )
    rt = Runtime(store=store, flows=[flow])
    out = rt.run(flow, n)
    assert out.paused and len(out.pauses) == n
    results = {f"batch-7/prompt-{i}": {"text": f"result {i}"} for i in range(n)}
    got: list[Any] = []

    def deliver() -> None:
        got.extend(rt.deliver_many(results).outcomes)

    benchmark.pedantic(deliver, rounds=1, iterations=1)
    [done] = got
    assert done.ok and len(done.output) == n
    label(benchmark, "deliver_many_branches", "tarry", variant=_kind(store), per=n, branches=n)
