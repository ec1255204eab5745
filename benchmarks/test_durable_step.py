"""Workload 2, durable step: the chain of no-op steps with every step persisted to SQLite
(tarry durability="step", LangGraph SqliteSaver with durability="sync"); the floor is one
stdlib sqlite3 WAL commit per step."""

from __future__ import annotations

import itertools
from pathlib import Path

import bench_floor
import bench_tarry
import pytest
from bench_support import Sizes, label
from tarry import Runtime
from tarry.snapshots import SQLiteStore


def test_floor_sqlite_commit(benchmark, sizes: Sizes, tmp_path: Path) -> None:
    label(benchmark, "durable_chain", "floor", per=sizes.steps, variant="one WAL commit")
    benchmark(bench_floor.sqlite_commits(tmp_path / "floor.db", sizes.steps))


def test_tarry_durable_chain(benchmark, sizes: Sizes, tmp_path: Path) -> None:
    label(benchmark, "durable_chain", "tarry", per=sizes.steps)
    store = SQLiteStore(tmp_path / "tarry.db")
    rt, flow = Runtime(store=store, durability="step"), bench_tarry.chain(sizes.steps)
    out = benchmark.pedantic(rt.run, (flow,), rounds=30 if sizes.full else 1, warmup_rounds=1)
    assert out.ok


def test_langgraph_durable_chain(benchmark, sizes: Sizes, tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("langgraph.checkpoint.sqlite")
    import bench_langgraph as lg

    n = sizes.peer_durable_steps
    label(benchmark, "durable_chain", "langgraph", per=n)
    saver = lg.sqlite_saver(str(tmp_path / "lg.db"))
    graph = lg.chain(n, saver)
    threads = (f"t{i}" for i in itertools.count())

    def setup():
        return ({"x": 0}, lg.config(next(threads))), {"durability": "sync"}

    benchmark.pedantic(graph.invoke, setup=setup, rounds=3 if sizes.full else 1)
    assert len(list(saver.list(lg.config("t0")))) >= n
