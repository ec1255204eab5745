"""pydantic-graph's side of each workload, run in its own virtualenv (test_peers.py):

    .benchmarks/venvs/pydantic-graph/bin/python benchmarks/bench_pydantic_graph.py SIZES_JSON

pydantic-graph 1.107.10, the newest release with state persistence: 2.0.0 dropped the
`BaseNode` graphs and `pydantic_graph.persistence` (SimpleStatePersistence,
FullStatePersistence, FileStatePersistence) for the builder API, which has none.

Built as its docs recommend: dataclass nodes whose `run` returns the next node; a pause is the
caller stopping `graph.iter` when the next node is the one that needs a person (`Review`), as
the docs' question graph does; a resume loads the persisted snapshot (`load_next`) and iterates
again from the node that takes the answer. Persistence: SimpleStatePersistence (memory, the
latest snapshot) and FileStatePersistence (a JSON file). It has no SQLite or PostgreSQL
persistence of its own.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peer_timing import Results, measure_import, sizes, spawn
from pydantic_graph import BaseNode, End, Graph, GraphRunContext
from pydantic_graph.persistence.file import FileStatePersistence
from pydantic_graph.persistence.in_mem import SimpleStatePersistence


@dataclass
class Loop:
    i: int = 0
    n: int = 0
    k: int = 0
    results: list[int] = field(default_factory=list)


@dataclass
class Step(BaseNode[Loop, None, int]):
    """A no-op node run once per step: the chain (and the batch) of step-overhead."""

    async def run(self, ctx: GraphRunContext[Loop]) -> Step | End[int]:
        ctx.state.i += 1
        return Step() if ctx.state.i < ctx.state.n else End(ctx.state.i)


@dataclass
class Work(BaseNode[Loop, None, int]):
    """One item of the paused loop: its result collected; from item k on it needs the answer."""

    approved: bool = False

    async def run(self, ctx: GraphRunContext[Loop]) -> Work | Review | End[int]:
        s = ctx.state
        if s.i >= s.k:
            assert self.approved
        s.results.append(s.i)
        s.i += 1
        if s.i >= s.n:
            return End(s.i)
        return Review() if s.i >= s.k else Work()


@dataclass
class Review(BaseNode[Loop, None, int]):
    """Where the run stops for a person; resumed by Work(approved=True)."""

    async def run(self, ctx: GraphRunContext[Loop]) -> Work:
        return Work(approved=True)


STEPS = Graph(nodes=(Step,))
LOOP = Graph(nodes=(Work, Review))


async def run_to_review(node: Any, state: Loop, persistence: Any) -> None:
    async with LOOP.iter(node, state=state, persistence=persistence) as run:
        while True:
            node = await run.next()
            if isinstance(node, Review | End):
                assert isinstance(node, Review)
                return


async def resume(persistence: Any) -> None:
    """Load the snapshot the pause left, and run from the answer to the next pause."""
    snapshot = await persistence.load_next()
    assert snapshot is not None and isinstance(snapshot.node, Review)
    await run_to_review(Work(approved=True), snapshot.state, persistence)


def paused(n: int, k: int, persistence: Any) -> Any:
    """A run paused at item k: started from the state the loop has at item k (i = k, the k
    results), as the docs' question graph starts from a snapshot's state; a file that also
    held the k earlier snapshots would make each resume cost more, not less."""
    persistence.set_graph_types(LOOP)
    asyncio.run(run_to_review(Review(), Loop(i=k, n=n, k=k, results=list(range(k))), persistence))
    return persistence


FRESH = """
import asyncio, sys
sys.path.insert(0, {here!r})
import bench_pydantic_graph as b
p = b.FileStatePersistence(b.Path(sys.argv[1]))
p.set_graph_types(b.LOOP)
asyncio.run(b.resume(p))
"""


def main() -> None:
    import importlib.metadata

    s = sizes()
    tmp = Path(s["tmp"])
    results = Results(importlib.metadata.version("pydantic-graph"))
    n = s["steps"]
    results.timed(
        "chain",
        lambda: STEPS.run_sync(Step(), state=Loop(n=n)),
        rounds=s["step_rounds"],
        warmup=1,
        per=n,
        variant="one node class run n times",
    )
    results.not_supported(
        "foreach", "no batch or map node in the BaseNode graphs (the chain row is its loop)"
    )
    loop = s["loop"]
    # One event loop for every round trip, so none pays for starting one.
    run = asyncio.new_event_loop().run_until_complete
    for k in s["ks"]:
        persistence = paused(loop, k, SimpleStatePersistence())
        results.timed(
            "pause_memory",
            lambda p=persistence: run(resume(p)),
            rounds=s["rounds"],
            warmup=s["warmup"],
            k=k,
            variant="SimpleStatePersistence",
        )
        # At most 30 round trips: the file holds every snapshot, each with the whole state,
        # and is read and written whole at each one (it grows by two snapshots a round trip).
        path = tmp / f"k{k}.json"
        persistence = paused(loop, k, FileStatePersistence(path))
        results.timed(
            "pause_file",
            lambda p=persistence: run(resume(p)),
            rounds=min(s["rounds"], 30),
            warmup=min(s["warmup"], 2),
            k=k,
            variant="FileStatePersistence",
            file_bytes_after=None,
        )
        results.results[-1]["extra"]["file_bytes_after"] = path.stat().st_size
    k = s["ks"][0]
    files = [tmp / f"fresh{i}.json" for i in range(s["fresh_rounds"] + 1)]
    for path in files:
        paused(loop, k, FileStatePersistence(path))
    todo = iter(files)
    code = FRESH.format(here=str(Path(__file__).parent))
    spawn(code, str(next(todo)), cwd=str(tmp))  # the bytecode cache, once
    results.timed(
        "fresh_resume",
        lambda: spawn(code, str(next(todo)), cwd=str(tmp)),
        rounds=s["fresh_rounds"],
        k=k,
        variant="FileStatePersistence",
    )
    measure_import(results, "import pydantic_graph, pydantic_graph.persistence.file", s)
    for workload in ("pause_sqlite", "pause_postgres", "durable_chain"):
        results.not_supported(workload, "persistence to memory or a JSON file only")
    results.emit()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
