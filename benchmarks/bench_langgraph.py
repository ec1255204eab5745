"""LangGraph's side of each workload, the same shapes as bench_tarry.py.

Imported only where LangGraph is installed (the benchmarks `importorskip` it first), and by
the processes the fresh-process and memory benchmarks spawn.
"""

from __future__ import annotations

import operator
import sqlite3
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

# Supersteps a run may take: a 10,000-item loop is 10,000 of them (the default is 25).
RECURSION_LIMIT = 1_000_000


class Chain(TypedDict):
    x: int


class Loop(TypedDict):
    i: int
    results: Annotated[list[Any], operator.add]


def noop(state: Any) -> None:
    return None


def chain(n: int, checkpointer: Any = None) -> Any:
    """n no-op nodes in a row."""
    g = StateGraph(Chain)
    prev = START
    for i in range(n):
        g.add_node(f"s{i}", noop)
        g.add_edge(prev, f"s{i}")
        prev = f"s{i}"
    g.add_edge(prev, END)
    return g.compile(checkpointer=checkpointer)


def loop(n: int, k: int | None = None, checkpointer: Any = None) -> Any:
    """One node run once per item (a conditional edge back to itself), collecting a result per
    item; it interrupts at every item from k on. The items are part of the definition, as in
    tarry's ForEach, and the results are in the state (a reducer channel)."""
    items = list(range(n))
    late = n if k is None else k

    def body(state: Loop) -> dict[str, Any]:
        i = state["i"]
        if i >= late:
            interrupt("review")
        return {"i": i + 1, "results": [items[i]]}

    def route(state: Loop) -> str:
        return "body" if state["i"] < n else END

    g = StateGraph(Loop)
    g.add_node("body", body)
    g.add_edge(START, "body")
    g.add_conditional_edges("body", route, ["body", END])
    return g.compile(checkpointer=checkpointer)


def ticket(checkpointer: Any) -> Any:
    """A small graph that pauses once: three nodes, one that interrupts, one more."""

    def approve(state: Any) -> None:
        interrupt("approve")

    g = StateGraph(Chain)
    prev = START
    for name, fn in (("a", noop), ("b", noop), ("c", noop), ("approve", approve), ("d", noop)):
        g.add_node(name, fn)
        g.add_edge(prev, name)
        prev = name
    g.add_edge(prev, END)
    return g.compile(checkpointer=checkpointer)


def sqlite_saver(path: str) -> Any:
    """A SqliteSaver on a WAL file with synchronous=NORMAL, the same settings as tarry's
    SQLiteStore and the floor, so every system pays the same price for one commit."""
    # Imported here: langgraph-checkpoint-sqlite is a distribution of its own, and the
    # in-memory workloads run without it.
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    saver = SqliteSaver(conn)
    saver.setup()
    return saver


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": RECURSION_LIMIT}


def stored_bytes(saver: Any) -> int:
    """Bytes of every checkpoint, its metadata and every pending write in the saver's file."""
    with saver.cursor(transaction=False) as cur:
        (a,) = cur.execute(
            "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints"
        ).fetchone()
        (b,) = cur.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes").fetchone()
    return a + b


def snapshot_bytes(saver: Any, thread_id: str) -> int:
    """Size of the latest checkpoint of a thread (what a resume loads) and its writes."""
    with saver.cursor(transaction=False) as cur:
        row = cur.execute(
            "SELECT checkpoint_id, LENGTH(checkpoint) + LENGTH(metadata) FROM checkpoints "
            "WHERE thread_id = ? ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id,),
        ).fetchone()
        (writes,) = cur.execute(
            "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes "
            "WHERE thread_id = ? AND checkpoint_id = ?",
            (thread_id, row[0]),
        ).fetchone()
    return row[1] + writes
