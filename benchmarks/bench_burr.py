"""Apache Burr's side of each workload, run in Burr's own virtualenv (test_peers.py):

    .benchmarks/venvs/burr/bin/python benchmarks/bench_burr.py SIZES_JSON

Built as Burr's docs recommend: function actions (`@action`) and transitions; persistence by a
state persister (`with_state_persister`, which saves after every step), and a paused
application resumed by building it again from the persister (`initialize_from(...,
resume_at_next_action=True)`) and running it to the next halt (`halt_after`). The pause is a
`wait` action the run halts after; the resume passes the reviewer's answer as an input.
"""

from __future__ import annotations

import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from burr.core import ApplicationBuilder, State, action, default, expr
from burr.core.persistence import InMemoryPersister, SQLitePersister
from peer_timing import Results, measure_import, sizes, spawn


@action(reads=[], writes=[])
def noop(state: State) -> State:
    return state


@action(reads=["i"], writes=["i"])
def step_item(state: State) -> State:
    return state.update(i=state["i"] + 1)


def chain(n: int, persister: Any = None, app_id: str | None = None) -> Any:
    """n no-op actions in a row."""
    names = [f"s{i}" for i in range(n)]
    builder = (
        ApplicationBuilder()
        .with_actions(**{name: noop for name in names})
        .with_transitions(*zip(names, names[1:], strict=False))
        .with_state(x=0)
        .with_entrypoint(names[0])
    )
    if persister is not None:
        builder = builder.with_state_persister(persister).with_identifiers(
            app_id=app_id, partition_key="bench"
        )
    return builder.build(), names[-1]


def loop(n: int) -> Any:
    """One action run once per item (a transition back to itself): tarry's ForEach."""
    app = (
        ApplicationBuilder()
        .with_actions(body=step_item, done=noop)
        .with_transitions(("body", "done", expr(f"i >= {n}")), ("body", "body", default))
        .with_state(i=0)
        .with_entrypoint("body")
        .build()
    )
    return app


def paused_loop(n: int, k: int, persister: Any, app_id: str) -> Any:
    """The loop of test_pause_resume.py: one action per item collecting a result, which needs
    the reviewer's answer (an input) from item k on; the run halts after `wait`.

    A new application starts at `wait` with the state the loop has at item k (i = k, the k
    results): the state is all Burr keeps, so this is the application that ran the k items,
    without k persisted steps to reach it (18,000 PostgreSQL commits at k = 9,000)."""

    @action(reads=["i", "results"], writes=["i", "results"])
    def body(state: State, approval: bool | None = None) -> State:
        i = state["i"]
        if i >= k:
            assert approval is not None
        return state.update(i=i + 1).append(results=i)

    return (
        ApplicationBuilder()
        .with_actions(body=body, wait=noop, done=noop)
        .with_transitions(
            ("body", "done", expr(f"i >= {n}")),
            ("body", "wait", expr(f"i >= {k}")),
            ("body", "body", default),
            ("wait", "body", default),
        )
        .initialize_from(
            persister,
            resume_at_next_action=True,
            default_state={"i": k, "results": list(range(k))},
            default_entrypoint="wait",
        )
        .with_state_persister(persister)
        .with_identifiers(app_id=app_id, partition_key="bench")
        .build()
    )


def sqlite_persister(path: str) -> SQLitePersister:
    """On a WAL file with synchronous=NORMAL, as tarry's SQLiteStore and the floor."""
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    persister = SQLitePersister(path, connection=conn)
    persister.initialize()
    return persister


def postgres_persister(dsn: str, table: str) -> Any:
    from burr.integrations.persisters.b_psycopg2 import PostgreSQLPersister

    url = urlparse(dsn)
    persister = PostgreSQLPersister.from_values(
        url.path.lstrip("/"),
        url.username,
        url.password,
        url.hostname,
        url.port or 5432,
        table_name=table,
    )
    persister.initialize()
    return persister


def drop_table(persister: Any, table: str) -> None:
    with persister.connection.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
    persister.connection.commit()


def trip(n: int, k: int, persister: Any, app_id: str) -> None:
    """One round trip: rebuild the application from the persister, resume it with the answer,
    run it to the next halt."""
    app = paused_loop(n, k, persister, app_id)
    last, _result, state = app.run(halt_after=["wait", "done"], inputs={"approval": True})
    assert last.name == "wait", last.name


def pause_resume(results: Results, s: dict[str, Any], kind: str, make: Any) -> None:
    n = s["loop"]
    for k in s["ks"]:
        persister = make()
        app_id = f"t{k}"
        app = paused_loop(n, k, persister, app_id)
        last, _result, state = app.run(halt_after=["wait", "done"])
        assert last.name == "wait" and state["i"] == k and len(state["results"]) == k
        results.timed(
            f"pause_{kind}",
            lambda p=persister, a=app_id, k=k: trip(n, k, p, a),
            rounds=s["rounds"],
            warmup=s["warmup"],
            k=k,
        )


def kept_in_memory(results: Results, s: dict[str, Any]) -> None:
    """The same round trips on one application object kept in memory (no rebuild): the
    lightest shape Burr allows, though not one that survives the process."""
    n = s["loop"]
    for k in s["ks"]:
        app = paused_loop(n, k, InMemoryPersister(), f"kept{k}")
        last, _result, state = app.run(halt_after=["wait", "done"])
        assert last.name == "wait" and state["i"] == k

        def again(app: Any = app) -> None:
            last, _result, _state = app.run(halt_after=["wait", "done"], inputs={"approval": True})
            assert last.name == "wait"

        results.timed(
            "pause_memory",
            again,
            rounds=s["rounds"],
            warmup=s["warmup"],
            k=k,
            variant="app kept in memory",
        )


FRESH = """
import sys
sys.path.insert(0, {here!r})
import bench_burr
bench_burr.trip({n}, {k}, bench_burr.sqlite_persister({path!r}), sys.argv[1])
"""


def main() -> None:
    import importlib.metadata

    s = sizes()
    tmp = Path(s["tmp"])
    results = Results(importlib.metadata.version("apache-burr"))
    part = s["part"]
    n = s["steps"]
    if part == "memory":
        holder: dict[str, Any] = {}

        def fresh_chain() -> None:
            holder["app"], holder["last"] = chain(n)

        results.timed(
            "chain",
            lambda: holder["app"].run(halt_after=[holder["last"]]),
            setup=fresh_chain,
            rounds=s["step_rounds"],
            warmup=1,
            per=n,
        )

        def fresh_loop() -> None:
            holder["loop"] = loop(n)

        results.timed(
            "foreach",
            lambda: holder["loop"].run(halt_after=["done"]),
            setup=fresh_loop,
            rounds=s["step_rounds"],
            warmup=1,
            per=n,
            variant="loop action",
        )
        pause_resume(results, s, "memory", InMemoryPersister)
        kept_in_memory(results, s)
    elif part == "sqlite":
        ids = iter(range(10**9))
        persister = sqlite_persister(str(tmp / "durable.db"))
        holder = {}

        def fresh_durable() -> None:
            holder["app"], holder["last"] = chain(n, persister, f"d{next(ids)}")

        results.timed(
            "durable_chain",
            lambda: holder["app"].run(halt_after=[holder["last"]]),
            setup=fresh_durable,
            rounds=s["durable_rounds"],
            warmup=1,
            per=n,
        )
        pause_resume(
            results, s, "sqlite", lambda: sqlite_persister(str(tmp / f"{uuid.uuid4().hex}.db"))
        )
        # A fresh process: import, rebuild from the SQLite file, one round trip, exit.
        path = str(tmp / "fresh.db")
        persister = sqlite_persister(path)
        k = s["ks"][0]
        for i in range(s["fresh_rounds"] + 1):
            paused_loop(s["loop"], k, persister, f"f{i}").run(halt_after=["wait", "done"])
        apps = iter(f"f{i}" for i in range(s["fresh_rounds"] + 1))
        code = FRESH.format(here=str(Path(__file__).parent), n=s["loop"], k=k, path=path)
        spawn(code, next(apps), cwd=str(tmp))  # the bytecode cache, once
        results.timed(
            "fresh_resume",
            lambda: spawn(code, next(apps), cwd=str(tmp)),
            rounds=s["fresh_rounds"],
            k=k,
        )
        measure_import(results, "import burr.core", s)
    elif part == "postgres":
        tables = []

        def make() -> Any:
            tables.append(f"burr_bench_{uuid.uuid4().hex[:12]}")
            return postgres_persister(s["postgres"], tables[-1])

        try:
            pause_resume(results, s, "postgres", make)
        finally:
            cleanup = postgres_persister(s["postgres"], "burr_bench_cleanup")
            for table in [*tables, "burr_bench_cleanup"]:
                drop_table(cleanup, table)
    results.emit()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
