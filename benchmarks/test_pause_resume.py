"""Workloads 3 and 5: one pause -> resume round trip of a loop over 10,000 items paused at item
k (k = 10 and k = 9,000), in memory and with SQLite, and the bytes each pause writes.

A round trip is the resume from the token at item i up to the next pause, at item i + 1: the
step at i runs again with the resume value, the step at i + 1 interrupts. tarry must cost the
same at k = 9,000 as at k = 10 (the report gives the ratio). PocketFlow has no persistence.

Persistence is at the pause for both systems: tarry's default durability="pause" and
LangGraph's durability="exit" (a checkpoint when the run interrupts), which is the fastest
setting each offers that still survives a restart at the pause.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_tarry
import pytest
from bench_support import Sizes, label
from tarry import Runtime
from tarry.snapshots import MemoryStore, SQLiteStore

KINDS = ["memory", "sqlite"]


def _warmup(sizes: Sizes) -> int:
    return 10 if sizes.full else 0


def _round_trips(benchmark: Any, sizes: Sizes, k: int, trip: Callable[[], Any]) -> None:
    warmup = _warmup(sizes)
    assert warmup + sizes.rounds + 2 < sizes.loop - k, "the loop must outlast the rounds"
    benchmark.pedantic(trip, rounds=sizes.rounds, warmup_rounds=warmup)


def _tarry_session(sizes: Sizes, path: Path, kind: str, k: int, variant: str = "interrupt"):
    """A tarry session paused at item k, and the function doing one round trip."""
    store = MemoryStore() if kind == "memory" else SQLiteStore(path)
    rt = Runtime(store=store)
    make = bench_tarry.paused_loop if variant == "interrupt" else bench_tarry.gated_loop
    out = rt.run(make(sizes.loop, k))
    assert out.paused and out.pause.path[1] == k
    last = {"out": out}

    def trip() -> None:
        last["out"] = rt.resume(last["out"].token, True)

    return store, last, trip


def _langgraph_session(sizes: Sizes, path: Path, kind: str, k: int):
    """A LangGraph thread interrupted at item k, and the function doing one round trip."""
    import bench_langgraph as lg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    saver = InMemorySaver() if kind == "memory" else lg.sqlite_saver(str(path))
    graph = lg.loop(sizes.loop, k, saver)
    cfg = lg.config("t")
    out = graph.invoke({"i": 0, "results": []}, cfg, durability="exit")
    assert "__interrupt__" in out and out["i"] == k

    def trip() -> None:
        graph.invoke(Command(resume=True), cfg, durability="exit")

    return saver, graph, cfg, trip


def _skip_langgraph(kind: str) -> None:
    pytest.importorskip("langgraph")
    if kind == "sqlite":
        pytest.importorskip("langgraph.checkpoint.sqlite")


@pytest.mark.parametrize("variant", ["interrupt", "Gate"])
@pytest.mark.parametrize("at", [0, 1], ids=["k_early", "k_late"])
@pytest.mark.parametrize("kind", KINDS)
def test_tarry_pause_resume(
    benchmark, sizes: Sizes, tmp_path: Path, kind: str, at: int, variant: str
) -> None:
    k = sizes.ks[at]
    store, last, trip = _tarry_session(sizes, tmp_path / "tarry.db", kind, k, variant)
    _round_trips(benchmark, sizes, k, trip)
    # The bytes of one more round trip, and the snapshot it leaves.
    written, read = store.bytes_written, store.bytes_read
    trip()
    out = last["out"]
    assert out.paused and out.pause.path[1] > k
    label(
        benchmark,
        f"pause_{kind}",
        "tarry",
        k=k,
        variant=None if variant == "interrupt" else variant,
        bytes_written=store.bytes_written - written,
        bytes_read=store.bytes_read - read,
        snapshot_bytes=len(store.load(out.session_id).state),
    )


@pytest.mark.parametrize("at", [0, 1], ids=["k_early", "k_late"])
@pytest.mark.parametrize("kind", KINDS)
def test_langgraph_pause_resume(
    benchmark, sizes: Sizes, tmp_path: Path, kind: str, at: int
) -> None:
    _skip_langgraph(kind)
    import bench_langgraph as lg

    k = sizes.ks[at]
    saver, graph, cfg, trip = _langgraph_session(sizes, tmp_path / "lg.db", kind, k)
    _round_trips(benchmark, sizes, k, trip)
    extra: dict[str, Any] = {}
    if kind == "sqlite":
        written = lg.stored_bytes(saver)
        trip()
        extra = {
            "bytes_written": lg.stored_bytes(saver) - written,
            "snapshot_bytes": lg.snapshot_bytes(saver, "t"),
        }
    state = graph.get_state(cfg)
    assert state.next == ("body",) and state.values["i"] > k
    label(benchmark, f"pause_{kind}", "langgraph", k=k, **extra)


@pytest.mark.parametrize("system", ["tarry", "langgraph"])
@pytest.mark.parametrize("kind", KINDS)
def test_resume_cost_flat_in_k(
    benchmark, sizes: Sizes, tmp_path: Path, kind: str, system: str
) -> None:
    """The k = 9,000 ÷ k = 10 ratio from round trips taken in turns (one at each k per round),
    so that a busy moment of the machine weighs on both alike; the medians are in extra_info.
    The timing of this benchmark itself is the pair."""
    if system == "langgraph":
        _skip_langgraph(kind)
        trips = [_langgraph_session(sizes, tmp_path / f"lg{k}.db", kind, k)[-1] for k in sizes.ks]
    else:
        trips = [_tarry_session(sizes, tmp_path / f"t{k}.db", kind, k)[-1] for k in sizes.ks]
    assert _warmup(sizes) + sizes.rounds + 2 < sizes.loop - sizes.ks[1]
    times: tuple[list[float], list[float]] = ([], [])

    def pair() -> None:
        for trip, spent in zip(trips, times, strict=True):
            started = time.perf_counter()
            trip()
            spent.append(time.perf_counter() - started)

    benchmark.pedantic(pair, rounds=sizes.rounds, warmup_rounds=_warmup(sizes))
    early, late = (statistics.median(t[_warmup(sizes) :]) for t in times)
    label(
        benchmark,
        f"pause_ratio_{kind}",
        system,
        ks=list(sizes.ks),
        early_us=round(early * 1e6, 1),
        late_us=round(late * 1e6, 1),
        ratio=round(late / early, 3),
    )
