"""Where sync steps run (issue 25): a CPU-bound step (~1 ms of pure Python) in a
`ForEach(concurrency=8)` over N items, on the default thread pool and on a
`ProcessPoolExecutor(2)`.

Threads share one GIL, so the steps' CPU seconds per wall second stay near 1 however many
threads; two worker processes run two at once. `extra_info` has the wall seconds of each, the
steps' CPU seconds per wall second (`cpu_per_wall`) and the speed-up of the process pool over
the threads; at full size (`make bench`, a machine of 2 cores or more) the speed-up is at least
1.5 (issue 25's target; `target_speedup`). The pool's workers start before the timing (a
first small run). `make test` runs it once at a tiny size (--benchmark-disable).

What bounds the speed-up is the driving process's work per call, which takes CPU from the
two workers on a 2-core machine: its lanes go ~2 calls to a submission to the pool (see
drivers/drive/executors.py `Batch`), which halves the round trips through the pool's queues
and threads. Time it on a quiet machine: with other processes running the wall times (and
so the ratio) mean nothing.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench_executors import crunch
from tarry import Flow, ForEach, Runtime


def _timed(rt: Runtime, n: int) -> tuple[float, float]:
    """Wall seconds of a run over n items, and the steps' CPU seconds in all."""
    flow = Flow(f"cpu{n}", [ForEach("items", list(range(n)), crunch, concurrency=8)])
    start = time.perf_counter()
    out = rt.run(flow)
    wall = time.perf_counter() - start
    assert out.ok, out.error
    return wall, sum(out.output)


def test_cpu_bound_steps_on_processes_and_on_threads(benchmark: Any, sizes: Any) -> None:
    n = 400 if sizes.full else 8
    timings: dict[str, tuple[float, float]] = {}
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        processes = Runtime(executor=pool)
        threads = Runtime()
        _timed(processes, 4)  # the workers start (and import tarry) before the timing
        _timed(threads, 4)

        def run() -> None:
            timings["threads"] = _timed(threads, n)
            timings["processes"] = _timed(processes, n)

        benchmark.pedantic(run, rounds=1, iterations=1)
    (t_wall, t_cpu), (p_wall, p_cpu) = timings["threads"], timings["processes"]
    speedup = t_wall / max(p_wall, 1e-9)
    benchmark.extra_info.update(
        items=n,
        step_ms=round(t_cpu / n * 1000, 2),
        wall_seconds={"threads": round(t_wall, 3), "processes": round(p_wall, 3)},
        cpu_per_wall={"threads": round(t_cpu / t_wall, 2), "processes": round(p_cpu / p_wall, 2)},
        speedup=round(speedup, 2),
        target_speedup=1.5,
        cores=os.cpu_count(),
    )
    if sizes.full and (os.cpu_count() or 1) >= 2:
        assert speedup >= 1.5
