"""Issue 15: many things in flight — concurrent ForEach, many pauses per session, resume_many.

Each workload is measured beside its baseline in the same run:

- **sleeps**: 100 async steps of `asyncio.sleep(0.05)` in a `ForEach(concurrency=100)`; the wall
  time ÷ one sleep (target ≤ 1.5), beside `asyncio.gather` of the same 100 coroutines (the
  floor; each timed call makes its own event loop, as `asyncio.run(rt.arun(...))` does).
- **no-op items**: 10,000 async no-op steps with `concurrency=100`: µs per item, beside
  `asyncio.gather` of 10,000 no-op coroutines and the same gather throttled to 100 at once
  by a semaphore.
- **resume_many**: 10,000 iterations that each wait (`concurrency=None`), then one
  `resume_many` of all 10,000 tokens, in memory and on SQLite: seconds, µs and bytes written
  per resumed branch; beside one sequential pause → resume round trip (a Gate in a
  `ForEach`), what resuming them one by one costs per branch at best.
- **waiting bytes**: with 10, 1,000 and 10,000 branches waiting, the bytes one branch's
  resume writes (it resumes, runs a step and waits again: one resume and one pause, one
  write) and the snapshot it leaves; the growth with the number waiting must be the lanes'
  own entries in the frame, nothing more (the report gives bytes per waiting lane).

Numbers land in `extra_info`; `make test` runs each once at small sizes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_support import Sizes, label
from tarry import Flow, ForEach, Gate, Runtime, Wait, step
from tarry.snapshots import MemoryStore, SQLiteStore

SLEEP = 0.05


def _store(kind: str, path: Path) -> Any:
    return MemoryStore() if kind == "memory" else SQLiteStore(path)


# -- async steps in flight -------------------------------------------------------------------


async def nap(ctx: Any) -> Any:
    await asyncio.sleep(SLEEP)
    return ctx.item


async def noop(ctx: Any) -> Any:
    return ctx.item


async def _nap(item: int) -> int:
    await asyncio.sleep(SLEEP)
    return item


async def _noop(item: int) -> int:
    return item


async def _gather(coro: Callable[[int], Any], n: int) -> list[Any]:
    return await asyncio.gather(*(coro(i) for i in range(n)))


async def _throttled(coro: Callable[[int], Any], n: int, limit: int) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(i: int) -> Any:
        async with gate:
            return await coro(i)

    return await asyncio.gather(*(one(i) for i in range(n)))


def _timed(benchmark: Any, fn: Callable[..., Any], rounds: int, **options: Any) -> float:
    """Run `fn` through `benchmark.pedantic` and return the median of its own timings, in
    seconds: the same under `make bench` and under --benchmark-disable (one call)."""
    times: list[float] = []

    def timed(*args: Any) -> Any:
        started = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - started)
        return result

    benchmark.pedantic(timed, rounds=rounds, **options)
    times.sort()
    return times[len(times) // 2]


def _median(fn: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def test_sleeps_in_flight(benchmark, sizes: Sizes) -> None:
    n = 100
    rounds = 20 if sizes.full else 1
    flow = Flow("sleeps", [ForEach("items", list(range(n)), step(nap, "nap"), concurrency=n)])
    rt = Runtime()

    def tarry() -> Any:
        out = asyncio.run(rt.arun(flow))
        assert out.ok and out.output == list(range(n))
        return out

    floor = _median(lambda: asyncio.run(_gather(_nap, n)), rounds)
    wall = _timed(benchmark, tarry, rounds)
    label(
        benchmark,
        "inflight_sleep",
        "tarry",
        steps=n,
        concurrency=n,
        sleep_s=SLEEP,
        wall_over_sleep=round(wall / SLEEP, 3),
        gather_s=round(floor, 5),
        gather_over_sleep=round(floor / SLEEP, 3),
        ratio_to_gather=round(wall / floor, 3),
    )


def test_noop_items_in_flight(benchmark, sizes: Sizes) -> None:
    n = 10_000 if sizes.full else 200
    limit = 100
    rounds = 5 if sizes.full else 1
    flow = Flow("noops", [ForEach("items", list(range(n)), step(noop, "noop"), concurrency=limit)])
    rt = Runtime()

    def tarry() -> Any:
        out = asyncio.run(rt.arun(flow))
        assert out.ok and len(out.output) == n
        return out

    gather = _median(lambda: asyncio.run(_gather(_noop, n)), rounds)
    throttled = _median(lambda: asyncio.run(_throttled(_noop, n, limit)), rounds)
    per_item = _timed(benchmark, tarry, rounds) / n
    label(
        benchmark,
        "inflight_noop",
        "tarry",
        per=n,
        concurrency=limit,
        gather_us_per_item=round(gather / n * 1e6, 2),
        throttled_gather_us_per_item=round(throttled / n * 1e6, 2),
        ratio_to_gather=round(per_item * n / gather, 2),
        ratio_to_throttled_gather=round(per_item * n / throttled, 2),
    )


# -- many pauses, one resume_many --------------------------------------------------------------


def waiting(n: int) -> Flow:
    """n iterations that each wait, all at once."""
    return Flow("waiting", [ForEach("items", list(range(n)), Wait("result"), concurrency=None)])


def _round_trip_us(kind: str, path: Path, trips: int) -> float:
    """One sequential pause → resume round trip (a Gate per item of a ForEach), in µs: the
    median of `trips`, after a few unmeasured ones."""
    rt = Runtime(store=_store(kind, path))
    flow = Flow("gated", [ForEach("items", list(range(trips + 10)), Gate("ok"))])
    out = rt.run(flow)
    for _ in range(5):
        out = rt.resume(out.token, True)
    times = []
    for _ in range(trips):
        started = time.perf_counter()
        out = rt.resume(out.token, True)
        times.append(time.perf_counter() - started)
    assert out.paused
    return sorted(times)[len(times) // 2] * 1e6


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_resume_many_of_every_waiting_branch(
    benchmark, sizes: Sizes, tmp_path: Path, kind: str
) -> None:
    n = 10_000 if sizes.full else 100
    rounds = 3 if sizes.full else 1
    flow = waiting(n)
    sessions = iter(range(100))
    paused: dict[str, Any] = {}

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        store = _store(kind, tmp_path / f"many{next(sessions)}.db")
        rt = Runtime(store=store)
        written = store.bytes_written
        started = time.perf_counter()
        out = rt.run(flow)
        paused["run_s"] = time.perf_counter() - started
        paused["pause_bytes"] = store.bytes_written - written
        assert out.paused and len(out.pauses) == n
        values = {p.token: p.path[1] for p in out.pauses}
        paused["store"], paused["written"] = store, store.bytes_written
        return (rt, values), {}

    def resume(rt: Runtime, values: dict[str, Any]) -> None:
        [out] = rt.resume_many(values)
        assert out.ok and out.output == list(range(n))

    total = _timed(benchmark, resume, rounds, setup=setup)
    store = paused["store"]
    resumed_bytes = store.bytes_written - paused["written"]
    trip = _round_trip_us(kind, tmp_path / "trips.db", 200 if sizes.full else 5)
    label(
        benchmark,
        f"resume_many_{kind}",
        "tarry",
        per=n,
        branches=n,
        resume_many_s=round(total, 4),
        us_per_branch=round(total / n * 1e6, 2),
        bytes_per_resumed_branch=round(resumed_bytes / n, 1),
        run_to_pauses_s=round(paused["run_s"], 4),
        bytes_per_pause=round(paused["pause_bytes"] / n, 1),
        round_trip_us=round(trip, 1),
        ratio_branch_to_round_trip=round(total / n * 1e6 / trip, 4),
    )
    store_close = getattr(store, "close", None)
    if store_close is not None:
        store_close()


def _one_more(ctx: Any) -> Any:
    return ctx.prev


@pytest.mark.parametrize("waiting_n", [10, 1_000, 10_000], ids=lambda n: f"w{n}")
def test_bytes_of_one_resume_beside_many_waiting(
    benchmark, sizes: Sizes, tmp_path: Path, waiting_n: int
) -> None:
    if not sizes.full and waiting_n > 1_000:
        pytest.skip("full size only")
    store = SQLiteStore(tmp_path / "w.db")
    rt = Runtime(store=store)
    body = [Wait("first"), step(_one_more, "work"), Wait("second")]
    flow = Flow("beside", [ForEach("items", list(range(waiting_n)), body, concurrency=None)])
    before = store.bytes_written
    out = rt.run(flow)
    run_bytes = store.bytes_written - before
    assert out.paused and len(out.pauses) == waiting_n
    tokens = iter([p.token for p in out.pauses])
    trips = min(waiting_n, 50 if sizes.full else 3)
    measured: dict[str, int] = {}

    def one() -> None:
        written = store.bytes_written
        after = rt.resume(next(tokens), "value")
        measured["bytes"] = store.bytes_written - written
        measured["snapshot"] = len(store.load(after.session_id).state)
        assert after.paused and len(after.pauses) == waiting_n

    benchmark.pedantic(one, rounds=trips, iterations=1)
    label(
        benchmark,
        "waiting_bytes",
        "tarry",
        waiting=waiting_n,
        bytes_per_pause=round(run_bytes / waiting_n, 1),
        resume_bytes=measured["bytes"],
        snapshot_bytes=measured["snapshot"],
        resume_bytes_beside_snapshot=measured["bytes"] - measured["snapshot"],
        snapshot_bytes_per_waiting=round(measured["snapshot"] / waiting_n, 1),
    )
    store.close()
