"""Workload 6, run in a process of its own so that nothing else sits in its heap:

    python bench_memory.py sessions SYSTEM N   # RSS of N sessions paused in memory
    python bench_memory.py worker SYSTEM N     # RSS of a worker over N resumes
    python bench_memory.py store tarry N       # RSS of N sessions paused in a MemoryStore,
                                               # only their tokens kept by the caller

Prints one JSON object. RSS is VmRSS from /proc/self/status (kB), read after a gc.collect().
Both use the `ticket` shape (three steps, a pause, one step) with the in-memory store of each
system: tarry's MemoryStore, LangGraph's InMemorySaver.
"""

from __future__ import annotations

import collections
import gc
import json
import resource
import sys
import time
from typing import Any

# A worker keeps at most this many ended sessions (tarry: MemoryStore(max_sessions=...);
# LangGraph has no such bound, so the worker deletes the oldest thread itself).
KEEP = 1_000
SAMPLES = 10


def rss_kb() -> int:
    gc.collect()
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # peak, not current: a fallback


# -- tarry -----------------------------------------------------------------------------------


def tarry_sessions(n: int) -> dict[str, Any]:
    import bench_tarry
    from tarry import Runtime

    flow = bench_tarry.ticket()
    warm = Runtime()
    for _ in range(100):
        warm.resume(warm.run(flow).token, True)
    del warm
    rt = Runtime()
    before = rss_kb()
    outs = [rt.run(flow) for _ in range(n)]
    after = rss_kb()
    assert all(o.paused for o in outs)
    return {"rss_before_kb": before, "rss_after_kb": after}


def tarry_store(n: int) -> dict[str, Any]:
    """What a paused session costs the MemoryStore itself: as `tarry_sessions`, but the
    caller keeps each session's token (a str it needs to resume it), not its Outcome."""
    import bench_tarry
    from tarry import Runtime

    flow = bench_tarry.ticket()
    warm = Runtime()
    for _ in range(100):
        warm.resume(warm.run(flow).token, True)
    del warm
    rt = Runtime()
    before = rss_kb()
    tokens = [rt.run(flow).token for _ in range(n)]
    after = rss_kb()
    assert len(rt.store) == n and all(tokens)
    return {"rss_before_kb": before, "rss_after_kb": after}


def tarry_worker(n: int) -> dict[str, Any]:
    import bench_tarry
    from tarry import Runtime
    from tarry.snapshots import MemoryStore

    flow = bench_tarry.ticket()
    rt = Runtime(store=MemoryStore(max_sessions=KEEP))

    def one() -> None:
        out = rt.resume(rt.run(flow).token, True)
        assert out.ok

    return _worker(one, n)


# -- LangGraph -------------------------------------------------------------------------------


def langgraph_sessions(n: int) -> dict[str, Any]:
    import bench_langgraph as lg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    warm = lg.ticket(InMemorySaver())
    for i in range(20):
        warm.invoke({"x": 0}, lg.config(str(i)), durability="exit")
        warm.invoke(Command(resume=True), lg.config(str(i)), durability="exit")
    del warm
    graph = lg.ticket(InMemorySaver())
    before = rss_kb()
    for i in range(n):
        out = graph.invoke({"x": 0}, lg.config(str(i)), durability="exit")
        assert "__interrupt__" in out
    after = rss_kb()
    return {"rss_before_kb": before, "rss_after_kb": after}


def langgraph_worker(n: int) -> dict[str, Any]:
    import bench_langgraph as lg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    saver = InMemorySaver()
    graph = lg.ticket(saver)
    ended: collections.deque[str] = collections.deque()
    count = iter(range(10**9))

    def one() -> None:
        tid = str(next(count))
        graph.invoke({"x": 0}, lg.config(tid), durability="exit")
        graph.invoke(Command(resume=True), lg.config(tid), durability="exit")
        ended.append(tid)
        if len(ended) > KEEP:
            saver.delete_thread(ended.popleft())

    return _worker(one, n)


# -- common ----------------------------------------------------------------------------------


def _worker(one: Any, n: int) -> dict[str, Any]:
    """Run one session (start, pause, resume, end) n times; sample RSS every n / SAMPLES."""
    for _ in range(min(n, 100)):  # warm up: imports, caches
        one()
    every = max(1, n // SAMPLES)
    samples = [rss_kb()]
    started = time.perf_counter()
    for i in range(1, n + 1):
        one()
        if i % every == 0:
            samples.append(rss_kb())
    return {
        "rss_samples_kb": samples,
        "rss_before_kb": samples[0],
        "rss_after_kb": samples[-1],
        "seconds": time.perf_counter() - started,
    }


MODES = {
    ("sessions", "tarry"): tarry_sessions,
    ("worker", "tarry"): tarry_worker,
    ("store", "tarry"): tarry_store,
    ("sessions", "langgraph"): langgraph_sessions,
    ("worker", "langgraph"): langgraph_worker,
}

if __name__ == "__main__":
    mode, system, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    result = MODES[mode, system](count)
    result.update(mode=mode, system=system, n=count)
    print(json.dumps(result))
