"""DBOS Transact's side of each workload, run in its own virtualenv (test_peers.py):

    .benchmarks/venvs/dbos/bin/python benchmarks/bench_dbos.py SIZES_JSON

Built as DBOS's docs recommend: a `@DBOS.workflow()` calling `@DBOS.step()` functions, each
step's outcome checkpointed in the system database (SQLite file, or PostgreSQL in a schema of
its own, `dbos_system_schema`); a workflow waits for a person with `DBOS.recv(topic)` and is
resumed by `DBOS.send(workflow_id, message, topic)`.

A waiting DBOS workflow holds a thread (and its stack) for as long as it waits: `recv` blocks
the thread that runs the workflow. A fresh process cannot resume it by message alone: DBOS
recovers a pending workflow at launch by running it again from the start, its recorded steps
replayed from the system database; the fresh-process row is left out for that reason.

Every step is durable: DBOS has no in-memory mode, so the in-memory chain and batch rows are
not supported and its chain is measured as the durable step.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig
from peer_timing import Results, measure_import, sizes

#: The item each waiting workflow reached, put just before it calls recv (in this process).
REACHED: dict[str, queue.Queue[int]] = {}


@DBOS.step()
def noop_step() -> None:
    return None


@DBOS.step()
def item_step(i: int) -> int:
    return i


@DBOS.workflow()
def chain(n: int) -> int:
    """n no-op steps in a row, each checkpointed."""
    for _ in range(n):
        noop_step()
    return n


@DBOS.workflow()
def review_loop(n: int, k: int, results: list[int]) -> list[int]:
    """The loop of test_pause_resume.py: a step per item, its result collected; from item k
    on, each item waits for a person's answer (recv) first.

    Started at item k with the k results the loop has there (a workflow input), not by k
    checkpointed steps (9,000 of them take minutes on this machine): a waiting workflow's
    state is its thread's, and a round trip neither reads nor replays the earlier steps."""
    reached = REACHED[DBOS.workflow_id]
    for i in range(len(results), n):
        if i >= k:
            reached.put(i)
            assert DBOS.recv("review", timeout_seconds=3600) is True
        results.append(item_step(i))
    return results


def start_paused(n: int, k: int) -> tuple[str, queue.Queue[int]]:
    wf_id = f"review-{uuid.uuid4().hex}"
    REACHED[wf_id] = reached = queue.Queue()
    from dbos import SetWorkflowID

    with SetWorkflowID(wf_id):
        DBOS.start_workflow(review_loop, n, k, list(range(k)))
    assert reached.get(timeout=600) == k
    return wf_id, reached


def pause_resume(results: Results, s: dict[str, Any], kind: str) -> None:
    n = s["loop"]
    for k in s["ks"]:
        wf_id, reached = start_paused(n, k)
        at = {"i": k}

        def trip(
            wf_id: str = wf_id, reached: queue.Queue[int] = reached, at: dict[str, int] = at
        ) -> None:
            DBOS.send(wf_id, True, "review")
            at["i"] += 1
            assert reached.get(timeout=60) == at["i"]

        # At most 30 round trips: on SQLite each waits for the notification poller (1 s).
        rounds = min(s["rounds"], 30)
        results.timed(f"pause_{kind}", trip, rounds=rounds, warmup=min(s["warmup"], 2), k=k)
        DBOS.cancel_workflow(wf_id)


def main() -> None:
    import importlib.metadata

    s = sizes()
    tmp = Path(s["tmp"])
    results = Results(importlib.metadata.version("dbos"))
    part = s["part"]
    config: DBOSConfig = {"name": "tarry-bench", "run_admin_server": False}
    schema = None
    if part == "sqlite":
        config["system_database_url"] = f"sqlite:///{tmp / 'dbos.sqlite'}"
    else:
        schema = f"dbos_bench_{uuid.uuid4().hex[:12]}"
        config["system_database_url"] = s["postgres"]
        config["dbos_system_schema"] = schema
    DBOS(config=config)
    DBOS.launch()
    try:
        # At most 200 steps a chain: every step is a commit of its own (tens of ms each here).
        n = min(s["durable_steps"], 200)
        results.timed(
            "durable_chain" if part == "sqlite" else "durable_chain_postgres",
            lambda: chain(n),
            rounds=s["durable_rounds"],
            warmup=1,
            per=n,
        )
        pause_resume(results, s, part)
        threads = threading.active_count()
        if part == "sqlite":
            measure_import(results, "import dbos", s)
            why = "every step is checkpointed to the system database: no in-memory mode"
            for workload in ("chain", "foreach", "pause_memory"):
                results.not_supported(workload, why)
            results.not_supported(
                "fresh_resume",
                "a waiting workflow lives in a thread; a new process recovers it by running "
                "it again from the start at launch (recorded steps replayed)",
            )
        results.results[-1]["extra"]["threads_alive"] = threads
    finally:
        DBOS.destroy(destroy_registry=False)
        if schema is not None:
            import psycopg

            with psycopg.connect(s["postgres"], autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    results.emit()
    # The cancelled workflows' threads still block in recv (up to its timeout): leave now.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
