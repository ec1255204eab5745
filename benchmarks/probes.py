"""Fixed amounts of work for counting (instructions, bytes, RSS), run by any system's Python:

    PYTHON benchmarks/probes.py SHAPE UNITS REPS
    PYTHON benchmarks/probes.py --smoke SHAPE,SHAPE... UNITS     (each once: make test)

tarry runs from the wheel installed in `.benchmarks/venvs/tarry` (install_peers.py), PocketFlow
and LangGraph from the same venv (PyPI wheels), pydantic-graph from its own: every system from
a regular install, none editable. Each SHAPE does some set-up, then REPS times UNITS units of
work (steps, items, round trips). `counts.py` runs it under callgrind with REPS = 1 and 4: the
difference over 3 × UNITS is the cost of one unit, start-up, imports and set-up cancelled out.
The cyclic collector is off in every system alike (a collection landing in one count and not
the other would be noise).

The shapes that measure something else print one JSON object: `*_bytes` (bytes one pause
writes: `wchar` of /proc/self/io, every write() of the process, WAL and checkpoints included,
beside the store's payload), `*_rss` (VmRSS growth per paused session held in memory).
Shapes are listed in SHAPES: the name says system and workload.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Items of the paused loop, and where it pauses first (the k of the pause rows).
LOOP = 100_000
K = 10


def wchar() -> int:
    """Bytes this process passed to write() so far (the kernel's count)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def rss_kb() -> int:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


# -- tarry -----------------------------------------------------------------------------------


def tarry_chain(units: int, reps: int) -> None:
    import bench_tarry
    from tarry import Runtime

    flow, rt = bench_tarry.chain(units), Runtime()
    for _ in range(reps):
        assert rt.run(flow).ok


def tarry_foreach(units: int, reps: int) -> None:
    import bench_tarry
    from tarry import Runtime

    flow, rt = bench_tarry.batch(units), Runtime()
    for _ in range(reps):
        assert rt.run(flow).ok


def _tarry_paused(store: Any, runtimes: int) -> tuple[list[Any], Any]:
    import bench_tarry
    from tarry import Runtime

    flow = bench_tarry.paused_loop(LOOP, K)
    rts = [Runtime(store=store, flows=[flow]) for _ in range(runtimes)]
    out = rts[0].run(flow)
    assert out.paused
    return rts, out


def _tarry_trips(rts: list[Any], out: Any, n: int) -> Any:
    """n round trips; with two runtimes, each resumed by the one that did not pause it."""
    for i in range(n):
        out = rts[(i + 1) % len(rts)].resume(out.token, True)
    assert out.paused
    return out


def tarry_pause_warm(units: int, reps: int) -> None:
    """Resumed by the Runtime that paused the session (its caches warm)."""
    from tarry.snapshots import MemoryStore

    rts, out = _tarry_paused(MemoryStore(), 1)
    _tarry_trips(rts, out, units * reps)


def tarry_pause_cold(units: int, reps: int) -> None:
    """Resumed by another Runtime on the same store (a worker), each time."""
    from tarry.snapshots import MemoryStore

    rts, out = _tarry_paused(MemoryStore(), 2)
    _tarry_trips(rts, out, units * reps)


def tarry_sqlite_bytes(units: int, reps: int) -> dict[str, Any]:
    from tarry.snapshots import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "t.db")
        rts, out = _tarry_paused(store, 2)
        out = _tarry_trips(rts, out, 20)  # past the first writes of the file
        # The start wrote the loop's 100,000 items (some 7 MB of WAL with 1 KB pages): the
        # checkpoint that copies them into the file is the start's, not the pauses', and
        # would otherwise land in the window or not by the WAL's size in pages.
        with store._lock:
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        n = units * reps
        payload, seen = store.bytes_written, wchar()
        _tarry_trips(rts, out, n)
        return {
            "disk_bytes_per_pause": (wchar() - seen) / n,
            "payload_bytes_per_pause": (store.bytes_written - payload) / n,
            "pauses": n,
        }


def tarry_rss(units: int, reps: int) -> dict[str, Any]:
    import bench_tarry
    from tarry import Runtime

    flow = bench_tarry.ticket()
    warm = Runtime()
    for _ in range(100):
        warm.resume(warm.run(flow).token, True)
    del warm
    rt = Runtime()
    n = units * reps
    before = rss_kb()
    # What a caller keeps to resume each session is its token (as LangGraph's caller keeps a
    # thread id): the Outcome, the pause's payload and partial outputs, is read and dropped.
    tokens = [_paused_token(rt.run(flow)) for _ in range(n)]
    assert len(tokens) == n
    return {"rss_bytes_per_session": (rss_kb() - before) * 1024 / n, "sessions": n}


def _paused_token(out: Any) -> str:
    assert out.paused
    return out.token


# -- PocketFlow (no persistence) ---------------------------------------------------------------


def pocketflow_chain(units: int, reps: int) -> None:
    import bench_pocketflow

    flow = bench_pocketflow.chain(units)
    for _ in range(reps):
        flow.run({})


def pocketflow_batchflow(units: int, reps: int) -> None:
    import bench_pocketflow

    flow, shared = bench_pocketflow.batch_flow(units)
    for _ in range(reps):
        flow.run(shared)


def pocketflow_batchnode(units: int, reps: int) -> None:
    import bench_pocketflow

    node, shared = bench_pocketflow.batch_node(units)
    for _ in range(reps):
        node.run(shared)


# -- LangGraph ---------------------------------------------------------------------------------


def langgraph_sqlite_bytes(units: int, reps: int) -> dict[str, Any]:
    import bench_langgraph as lg
    from langgraph.types import Command

    with tempfile.TemporaryDirectory() as tmp:
        saver = lg.sqlite_saver(str(Path(tmp) / "lg.db"))
        graph = lg.loop(LOOP, K, saver)
        cfg = lg.config("t")
        graph.invoke({"i": 0, "results": []}, cfg, durability="exit")

        def trips(n: int) -> None:
            for _ in range(n):
                graph.invoke(Command(resume=True), cfg, durability="exit")

        trips(20)
        n = units * reps
        payload, seen = lg.stored_bytes(saver), wchar()
        trips(n)
        return {
            "disk_bytes_per_pause": (wchar() - seen) / n,
            "payload_bytes_per_pause": (lg.stored_bytes(saver) - payload) / n,
            "pauses": n,
        }


def langgraph_rss(units: int, reps: int) -> dict[str, Any]:
    import bench_langgraph as lg
    from langgraph.checkpoint.memory import InMemorySaver

    graph = lg.ticket(InMemorySaver())
    for i in range(20):
        graph.invoke({"x": 0}, lg.config(f"w{i}"), durability="exit")
    n = units * reps
    before = rss_kb()
    for i in range(n):
        out = graph.invoke({"x": 0}, lg.config(str(i)), durability="exit")
        assert "__interrupt__" in out
    return {"rss_bytes_per_session": (rss_kb() - before) * 1024 / n, "sessions": n}


# -- pydantic-graph (its own venv) ---------------------------------------------------------------


def pydantic_graph_pause(units: int, reps: int) -> None:
    """SimpleStatePersistence: each resume loads the snapshot (`load_next`), as a worker does."""
    import bench_pydantic_graph as pg

    persistence = pg.paused(LOOP, K, pg.SimpleStatePersistence())
    loop = asyncio.new_event_loop()
    for _ in range(units * reps):
        loop.run_until_complete(pg.resume(persistence))


def pydantic_graph_rss(units: int, reps: int) -> dict[str, Any]:
    """Sessions paused at the ticket's review, each in a SimpleStatePersistence of its own."""
    import bench_pydantic_graph as pg

    for _ in range(20):
        pg.paused(20, 3, pg.SimpleStatePersistence())
    n = units * reps
    before = rss_kb()
    held = [pg.paused(20, 3, pg.SimpleStatePersistence()) for _ in range(n)]
    assert len(held) == n
    return {"rss_bytes_per_session": (rss_kb() - before) * 1024 / n, "sessions": n}


# -- Burr and llama-index-workflows (their own venvs) -------------------------------------------


def burr_pause(units: int, reps: int) -> None:
    """Each resume rebuilds the application from its InMemoryPersister, as a worker does."""
    import bench_burr as b

    persister = b.InMemoryPersister()
    last, _result, _state = b.paused_loop(LOOP, K, persister, "t").run(halt_after=["wait", "done"])
    assert last.name == "wait"
    for _ in range(units * reps):
        b.trip(LOOP, K, persister, "t")


def burr_pause_kept(units: int, reps: int) -> None:
    """One application object kept in memory (no rebuild): Burr's lightest shape."""
    import bench_burr as b

    app = b.paused_loop(LOOP, K, b.InMemoryPersister(), "t")
    app.run(halt_after=["wait", "done"])
    for _ in range(units * reps):
        last, _result, _state = app.run(halt_after=["wait", "done"], inputs={"approval": True})
    assert last.name == "wait"


def burr_rss(units: int, reps: int) -> dict[str, Any]:
    """Sessions paused in one InMemoryPersister, their applications let go."""
    import bench_burr as b

    persister = b.InMemoryPersister()
    for i in range(20):
        b.paused_loop(20, 3, persister, f"w{i}").run(halt_after=["wait", "done"])
    n = units * reps
    before = rss_kb()
    for i in range(n):
        b.paused_loop(20, 3, persister, f"s{i}").run(halt_after=["wait", "done"])
    return {"rss_bytes_per_session": (rss_kb() - before) * 1024 / n, "sessions": n}


def llamaindex_pause(units: int, reps: int) -> None:
    """The context's dict kept in memory; each resume builds the context from it."""
    import bench_llamaindex as li

    loop = asyncio.new_event_loop()
    held = loop.run_until_complete(li.start(LOOP, K))
    for _ in range(units * reps):
        held = loop.run_until_complete(li.resume(held))


def llamaindex_rss(units: int, reps: int) -> dict[str, Any]:
    """Sessions paused: each run's serialised context (`ctx.to_dict()`) kept in a list."""
    import bench_llamaindex as li

    loop = asyncio.new_event_loop()
    for _ in range(20):
        loop.run_until_complete(li.start(20, 3))
    n = units * reps
    before = rss_kb()
    held = [loop.run_until_complete(li.start(20, 3)) for _ in range(n)]
    assert len(held) == n
    return {"rss_bytes_per_session": (rss_kb() - before) * 1024 / n, "sessions": n}


# -- the floor ---------------------------------------------------------------------------------


def floor_chain(units: int, reps: int) -> None:
    import bench_floor

    run = bench_floor.yield_from(units)
    for _ in range(reps):
        run()


def import_none(units: int, reps: int) -> None:
    """Nothing (make test's smoke run; counts.py counts `python -c "import X"` against
    `python -c pass`, without this module's own imports)."""


def import_tarry(units: int, reps: int) -> None:
    import tarry  # noqa: F401


def import_pocketflow(units: int, reps: int) -> None:
    import pocketflow  # noqa: F401


# -- in turns (turns.py): CPU ratios within rounds, for the rows peers share in one process --------


def turns_chain(units: int, reps: int) -> dict[str, Any]:
    """tarry's chain against PocketFlow's and the floor's, `reps` rounds of `units` steps."""
    import bench_floor
    import bench_pocketflow
    import bench_tarry
    from tarry import Runtime
    from turns import in_turns, ratios

    flow, rt = bench_tarry.chain(units), Runtime()
    pf = bench_pocketflow.chain(units)
    spent = in_turns(
        {
            "tarry": lambda: rt.run(flow),
            "pocketflow": lambda: pf.run({}),
            "floor": bench_floor.yield_from(units),
        },
        reps,
    )
    return {"ratios": ratios(spent, "tarry"), "rounds": reps}


def turns_foreach(units: int, reps: int) -> dict[str, Any]:
    """tarry's ForEach against PocketFlow's BatchNode and BatchFlow."""
    import bench_pocketflow
    import bench_tarry
    from tarry import Runtime
    from turns import in_turns, ratios

    flow, rt = bench_tarry.batch(units), Runtime()
    node, shared = bench_pocketflow.batch_node(units)
    batch, items = bench_pocketflow.batch_flow(units)
    spent = in_turns(
        {
            "tarry": lambda: rt.run(flow),
            "BatchNode": lambda: node.run(shared),
            "BatchFlow": lambda: batch.run(items),
        },
        reps,
    )
    return {"ratios": ratios(spent, "tarry"), "rounds": reps}


SHAPES: dict[str, Callable[[int, int], Any]] = {
    name: fn
    for name, fn in globals().items()
    if callable(fn)
    and name.split("_")[0]
    in {"tarry", "pocketflow", "langgraph", "floor", "turns", "burr", "llamaindex"}
    or name.startswith(("pydantic_graph_", "import_"))
}


def main(argv: list[str]) -> None:
    if argv[0] == "--smoke":  # every shape named, once, small, in this one process
        for shape in argv[1].split(","):
            SHAPES[shape](int(argv[2]), 1)
        return
    shape, units, reps = argv[0], int(argv[1]), int(argv[2])
    gc.disable()
    found = SHAPES[shape](units, reps)
    if found is not None:
        print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1:])
