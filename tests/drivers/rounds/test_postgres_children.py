"""The children of one parent spread over several worker processes on one PostgreSQL: each
child's step runs exactly once, by whichever worker claimed it, and the parent takes each
child's end exactly once (one wake-up per child), holding no process while it waits.

This file is also the worker script:
    python test_postgres_children.py DSN LOGDIR
loops `recover()` + `poll()` until killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tarry import Child, Flow, ForEach, Runtime

CHILDREN = 40
WORKERS = 3


def work(ctx):
    """The child's step: one line per run, in a file of this process's own."""
    path = Path(ctx.input["log"]) / f"effects-{os.getpid()}.log"
    with open(path, "a") as f:
        f.write(f"{ctx.session_id} {os.getpid()}\n")
    return ctx.input["n"] * 10


CHILD = Flow("pg_child", [work])
PARENT = Flow(
    "pg_parent",
    [
        ForEach(
            "jobs",
            lambda ctx: [{"n": n, "log": ctx.input["log"]} for n in range(ctx.input["count"])],
            Child("job", CHILD, input=lambda ctx: ctx.item),
            concurrency=None,
        ),
        lambda ctx: sum(ctx.prev),
    ],
)


@pytest.fixture
def dsn() -> Iterator[str]:
    import pgserver

    with pgserver.scratch_schema() as schema:
        yield pgserver.schema_dsn(schema)


def test_children_of_one_parent_run_once_each_over_many_workers(dsn: str, tmp_path: Path) -> None:
    logdir = tmp_path / "effects"
    logdir.mkdir()
    rt = Runtime(store=dsn)
    out = rt.run(PARENT, {"count": CHILDREN, "log": str(logdir)}, session_id="parent")
    assert out.paused and len(out.pauses) == CHILDREN
    assert rt.session("parent").children == [f"parent.jobs.{i}.job" for i in range(CHILDREN)]
    assert not list(logdir.iterdir())  # nothing ran in the parent's process

    here = str(Path(__file__).resolve())
    workers = [
        subprocess.Popen(
            [sys.executable, here, dsn, str(logdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(WORKERS)
    ]
    try:
        from support import wait_until  # (not at the top: the workers run this file alone)

        def parent_completed() -> bool:
            for w in workers:
                if w.poll() is not None:
                    pytest.fail(f"a worker died: {w.stderr.read().decode()[-2000:]}")
            return rt.session("parent").status == "completed"

        # a bound against a hang, not a speed requirement
        wait_until(parent_completed, "the parent to complete", timeout=600, every=0.2)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(timeout=30)

    view = rt.session("parent")
    assert view.status == "completed", view.status
    assert view.state.output == sum(n * 10 for n in range(CHILDREN))
    # One wake-up per child: each end taken once, by one resume of the parent.
    resumed = [e for e in view.events() if e.type == "run.resumed"]
    assert len(resumed) == CHILDREN
    assert view.derive_state() == view.state
    assert rt.mailbox() == []
    # Each child's step ran once, in a worker. (How they spread over the workers is up to the
    # scheduler: a round claims a page of 20, so on a loaded machine one worker may claim all.)
    runs = []
    for path in logdir.glob("effects-*.log"):
        runs += [tuple(line.split()) for line in path.read_text().splitlines()]
    per_child = Counter(sid for sid, _ in runs)
    assert per_child == Counter({f"parent.jobs.{i}.job": 1 for i in range(CHILDREN)})
    by_worker = Counter(pid for _, pid in runs)
    assert by_worker and set(by_worker) <= {str(w.pid) for w in workers}
    rt.store.close()


def test_statements_per_child_in_one_worker(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start, claim, run, end and the parent's wake-up: at most 6 statements per child, in
    total (the cost target of child sessions), counted in this process, which runs both the
    parent and its children; the parent takes the ends of a page of children in one resume."""
    import psycopg

    count = 2 * 20 + 5  # two pages of the worker round and a bit
    rt = Runtime(store=dsn)
    sent: list[str] = []
    original = psycopg.Cursor.execute

    def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    out = rt.run(SUM, count, session_id="parent")
    assert out.paused
    rounds = 0
    while rt.session("parent").status != "completed":
        rounds += 1
        assert rounds < 20, "the parent does not complete"
        rt.poll(limit=20)
    monkeypatch.undo()
    assert rt.session("parent").state.output == sum(n * 3 for n in range(count))
    per_child = len(sent) / count
    assert per_child <= 6, (per_child, Counter(q.split("(")[0][:60] for q in sent).most_common(12))
    rt.store.close()


def triple(ctx: Any) -> int:
    return ctx.input * 3


SUM = Flow(
    "pg_sum",
    [
        ForEach(
            "jobs",
            lambda ctx: list(range(ctx.input)),
            Child("job", Flow("pg_triple", [triple]), input=lambda ctx: ctx.item),
            concurrency=None,
        ),
        lambda ctx: sum(ctx.prev),
    ],
)


if __name__ == "__main__":
    worker = Runtime(store=sys.argv[1], flows=[PARENT], lease=5)
    while True:
        worker.recover()
        if not worker.poll():
            time.sleep(0.05)
