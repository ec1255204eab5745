"""Core timings of tarry beside the plain-Python floor, measured in the same run.

`make bench` times them; `make test` runs each once (--benchmark-disable) so they cannot rot.
The comparison with peer engines lives beside these files as it is added.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tarry import Flow, ForEach, Gate, Runtime, step
from tarry.snapshots import SQLiteStore

N = 1_000


def noop(ctx):
    return None


CHAIN = Flow("chain", [step(noop, f"s{i}") for i in range(N)])
BATCH = Flow("batch", [ForEach("items", list(range(N)), noop)])


def test_floor_plain_loop(benchmark) -> None:
    def loop() -> None:
        for _ in range(N):
            noop(None)

    benchmark(loop)


def test_floor_three_deep_yield_from(benchmark) -> None:
    def leaf():
        yield None

    def mid():
        yield from leaf()

    def top():
        for _ in range(N):
            yield from mid()

    benchmark(lambda: sum(1 for _ in top()))


def test_chain_of_steps_in_memory(benchmark) -> None:
    rt = Runtime()
    out = benchmark(rt.run, CHAIN)
    assert out.ok


def test_foreach_in_memory(benchmark) -> None:
    rt = Runtime()
    out = benchmark(rt.run, BATCH)
    assert out.ok and len(out.output) == N


@pytest.mark.parametrize("k", [10, 900])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_pause_resume_round_trip(benchmark, tmp_path: Path, kind: str, k: int) -> None:
    """One resume + the next pause, at iteration k of a 1,000-item ForEach with a Gate each."""
    store = None if kind == "memory" else SQLiteStore(tmp_path / "b.db")
    rt = Runtime(store=store)
    flow = Flow("gated", [ForEach("items", list(range(N)), [noop, Gate("g")])])
    out = rt.run(flow)
    for _ in range(k):
        out = rt.resume(out.token, True)
    state = {"out": out}

    def round_trip() -> None:
        state["out"] = rt.resume(state["out"].token, True)

    benchmark.pedantic(round_trip, rounds=min(50, N - k - 1), iterations=1)
    assert state["out"].paused
