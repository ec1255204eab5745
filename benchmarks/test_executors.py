"""Where sync steps run (issue 25): a CPU-bound step (~1 ms of pure Python) in a
`ForEach(concurrency=8)` over N items, on the default thread pool and on a
`ProcessPoolExecutor(2)`.

Threads share one GIL, so the steps' CPU seconds per wall second stay near 1 however many
threads; two worker processes run two at once. `extra_info` has the wall seconds of each, the
steps' CPU seconds per wall second (`cpu_per_wall`) and the speed-up of the process pool over
the threads; at full size (`make bench`, a machine of 2 cores or more) the speed-up is at least
1.5 (issue 25's target; `target_speedup`). The pool's workers start before the timing (a
first small run). `make test` runs it once at a tiny size (--benchmark-disable).

The two are timed in turns (benchmarks/turns.py): each round runs both, one right after the
other, in an order that alternates, and the speed-up is the median of the rounds' own ratios.
On a shared machine a run timed alone can meet a slower moment than the other (the steps' own
CPU time moved from 1.6 to 2.0 ms between two runs a second apart here), and a single ratio
then moves by 0.3 either way.

What bounds the speed-up is the driving process's work per call, which takes CPU from the
two workers on a 2-core machine: its lanes go ~2 calls to a submission to the pool (see
drivers/drive/executors.py `Batch`), which halves the round trips through the pool's queues
and threads. Time it on a quiet machine: with other processes running the wall times (and
so the ratio) mean nothing.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Any

from bench_executors import crunch
from tarry import Flow, ForEach, Runtime
from turns import in_turns, median_of_ratios


def _timed(rt: Runtime, n: int) -> tuple[float, float]:
    """Wall seconds of a run over n items, and the steps' CPU seconds in all."""
    flow = Flow(f"cpu{n}", [ForEach("items", list(range(n)), crunch, concurrency=8)])
    start = time.perf_counter()
    out = rt.run(flow)
    wall = time.perf_counter() - start
    assert out.ok, out.error
    return wall, sum(out.output)


def test_cpu_bound_steps_on_processes_and_on_threads(benchmark: Any, sizes: Any) -> None:
    n, rounds = (400, 7) if sizes.full else (8, 1)
    cpu: dict[str, list[float]] = {"threads": [], "processes": []}
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        runtimes = {"threads": Runtime(), "processes": Runtime(executor=pool)}
        for rt in runtimes.values():
            _timed(rt, 4)  # the workers start (and import tarry) before the timing

        def one(name: str) -> None:
            cpu[name].append(_timed(runtimes[name], n)[1])

        def run() -> dict[str, list[float]]:
            return in_turns(
                {name: partial(one, name) for name in runtimes},
                rounds,
                warmup=0,
                clock=time.perf_counter,
            )

        walls = benchmark.pedantic(run, rounds=1, iterations=1)
    speedup = median_of_ratios(walls["threads"], walls["processes"])
    t_wall, p_wall = statistics.median(walls["threads"]), statistics.median(walls["processes"])
    t_cpu, p_cpu = statistics.median(cpu["threads"]), statistics.median(cpu["processes"])
    benchmark.extra_info.update(
        items=n,
        rounds=rounds,
        step_ms=round(t_cpu / n * 1000, 2),
        wall_seconds={"threads": round(t_wall, 3), "processes": round(p_wall, 3)},
        cpu_per_wall={"threads": round(t_cpu / t_wall, 2), "processes": round(p_cpu / p_wall, 2)},
        speedups=[
            round(t / p, 2) for t, p in zip(walls["threads"], walls["processes"], strict=True)
        ],
        speedup=round(speedup, 2),
        target_speedup=1.5,
        cores=os.cpu_count(),
    )
    if sizes.full and (os.cpu_count() or 1) >= 2:
        assert speedup >= 1.5
