"""llama-index-workflows' side of each workload, run in its own virtualenv (test_peers.py):

    .benchmarks/venvs/llama-index-workflows/bin/python benchmarks/bench_llamaindex.py SIZES

Built as its docs recommend: steps are `@step` methods that take an event and return the next;
a step that needs a person returns an `InputRequiredEvent`; the caller streams the run's
events, and at that event serialises the context (`handler.ctx.to_dict()`), stores it and
cancels the run. A resume restores it (`Context.from_dict`), runs the workflow with it, sends
the answer (`HumanResponseEvent`) and streams to the next `InputRequiredEvent`. The library
stores nothing itself: "in memory" keeps the dict, "SQLite" keeps its JSON in a row (WAL,
synchronous=NORMAL, one commit), as its docstring's `my_db.set(key, json.dumps(ctx_dict))`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from peer_timing import Results, measure_import, sizes, spawn
from workflows import Context, Workflow, step
from workflows.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)


class Go(Event):
    i: int


class Steps(Workflow):
    """n no-op steps as n events through one step: the chain (and the batch)."""

    def __init__(self, n: int) -> None:
        super().__init__(timeout=None)
        self.n = n

    @step
    async def go(self, ev: StartEvent | Go) -> Go | StopEvent:
        i = ev.i + 1 if isinstance(ev, Go) else 1
        return Go(i=i) if i < self.n else StopEvent(result=i)

    async def once(self) -> Any:
        return await self.run()


class Review(Workflow):
    """The loop of test_pause_resume.py: one step per item collecting its result in the
    context's store; from item k on it asks for a person's answer first."""

    @step
    async def body(
        self, ctx: Context, ev: StartEvent | HumanResponseEvent
    ) -> InputRequiredEvent | StopEvent:
        if isinstance(ev, StartEvent):
            # Started at item k with the loop's state there (i = k, the k results).
            await ctx.store.set("i", ev.k)
            await ctx.store.set("results", list(range(ev.k)))
            await ctx.store.set("n", ev.n)
            return InputRequiredEvent(prefix="review")
        i = await ctx.store.get("i")
        results = await ctx.store.get("results")
        results.append(i)
        await ctx.store.set("results", results)
        await ctx.store.set("i", i + 1)
        if i + 1 >= await ctx.store.get("n"):
            return StopEvent(result=i + 1)
        return InputRequiredEvent(prefix="review")


REVIEW = Review(timeout=None)


async def until_input(handler: Any) -> dict[str, Any]:
    """Stream the run to its InputRequiredEvent; serialise the context; cancel the run."""
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            saved = handler.ctx.to_dict()
            await handler.cancel_run()
            return saved
    raise AssertionError("the run ended without asking for input")


async def start(n: int, k: int) -> dict[str, Any]:
    return await until_input(REVIEW.run(start_event=StartEvent(n=n, k=k)))


async def resume(saved: dict[str, Any]) -> dict[str, Any]:
    ctx = Context.from_dict(REVIEW, saved)
    handler = REVIEW.run(ctx=ctx)
    handler.ctx.send_event(HumanResponseEvent(response="yes"))
    return await until_input(handler)


class Rows:
    """The context's JSON in one SQLite row per run."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, ctx TEXT)")

    def save(self, run_id: str, saved: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO runs (id, ctx) VALUES (?, ?)", (run_id, json.dumps(saved))
        )

    def load(self, run_id: str) -> dict[str, Any]:
        (text,) = self.db.execute("SELECT ctx FROM runs WHERE id = ?", (run_id,)).fetchone()
        return json.loads(text)


async def resume_row(rows: Rows, run_id: str) -> None:
    rows.save(run_id, await resume(rows.load(run_id)))


FRESH = """
import asyncio, sys
sys.path.insert(0, {here!r})
import bench_llamaindex as b
asyncio.run(b.resume_row(b.Rows({path!r}), sys.argv[1]))
"""


def main() -> None:
    import importlib.metadata

    s = sizes()
    tmp = Path(s["tmp"])
    results = Results(importlib.metadata.version("llama-index-workflows"))
    run = asyncio.new_event_loop().run_until_complete  # one event loop for every call
    n = s["steps"]
    chain = Steps(n)
    # At most 5 rounds: one is 1,000 events through its runtime (seconds on this machine).
    results.timed(
        "chain",
        lambda: run(chain.once()),
        rounds=min(s["step_rounds"], 5),
        warmup=1,
        per=n,
        variant="one step, n events",
    )
    results.not_supported("foreach", "no batch step (the chain row is its loop of events)")
    loop = s["loop"]
    rows = Rows(str(tmp / "llama.db"))
    for k in s["ks"]:
        held = {"ctx": run(start(loop, k))}

        def trip(held: dict[str, Any] = held) -> None:
            held["ctx"] = run(resume(held["ctx"]))

        results.timed("pause_memory", trip, rounds=s["rounds"], warmup=s["warmup"], k=k)
        rows.save(f"k{k}", run(start(loop, k)))
        results.timed(
            "pause_sqlite",
            lambda k=k: run(resume_row(rows, f"k{k}")),
            rounds=s["rounds"],
            warmup=s["warmup"],
            k=k,
            snapshot_bytes=len(json.dumps(rows.load(f"k{k}"))),
        )
    k = s["ks"][0]
    ids = [f"fresh{i}" for i in range(s["fresh_rounds"] + 1)]
    for run_id in ids:
        rows.save(run_id, run(start(loop, k)))
    todo = iter(ids)
    code = FRESH.format(here=str(Path(__file__).parent), path=str(tmp / "llama.db"))
    spawn(code, next(todo), cwd=str(tmp))  # the bytecode cache, once
    results.timed(
        "fresh_resume",
        lambda: spawn(code, next(todo), cwd=str(tmp)),
        rounds=s["fresh_rounds"],
        k=k,
    )
    measure_import(results, "import workflows", s)
    results.not_supported(
        "durable_chain", "no persistence of each step: the caller saves the context when it chooses"
    )
    results.not_supported(
        "pause_postgres",
        "no store of its own: the context is JSON the "
        "caller stores (the SQLite row shows the shape)",
    )
    results.emit()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
