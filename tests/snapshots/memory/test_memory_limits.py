"""MemoryStore limits: TTL and max-sessions evict idle sessions, never running ones."""

from __future__ import annotations

import pytest
from tarry import Flow, ManualClock, Runtime, UnknownToken, Wait
from tarry.snapshots import MemoryStore


def test_ttl_evicts_idle_sessions_but_not_running_ones() -> None:
    clock = ManualClock()
    store = MemoryStore(ttl=60)
    rt = Runtime(store=store, clock=clock)
    paused = rt.run(Flow("w", [Wait("w")]))
    done = rt.run(Flow("d", [lambda ctx: 1]))
    clock.advance(61)
    fresh = rt.run(Flow("n", [lambda ctx: 2]))  # creating triggers the sweep
    ids = {s.session_id for s in rt.sessions()}
    assert ids == {fresh.session_id}
    with pytest.raises(UnknownToken):
        rt.resume(paused.token, 1)
    del done


def test_running_sessions_survive_eviction() -> None:
    clock = ManualClock()
    store = MemoryStore(ttl=1, max_sessions=2)
    rt = Runtime(store=store, clock=clock)
    seen = {}

    def long_step(ctx):
        clock.advance(100)
        for _ in range(5):
            rt.run(Flow("filler", [lambda c: 0]))  # would evict anything idle
        seen["alive"] = rt.session(ctx.session_id).status
        return "done"

    out = rt.run(Flow("long", [long_step]))
    assert out.ok and seen["alive"] == "running"


def test_max_sessions_evicts_ended_before_paused_oldest_first() -> None:
    clock = ManualClock()
    store = MemoryStore(max_sessions=10)
    rt = Runtime(store=store, clock=clock)
    waiting = []
    for i in range(10):
        clock.advance(1)
        if i % 2:
            waiting.append(rt.run(Flow("w", [Wait("w")])).session_id)
        else:
            rt.run(Flow("d", [lambda ctx: 1]))
    clock.advance(1)
    rt.run(Flow("d", [lambda ctx: 1]))
    assert len(store) <= 10
    left = {s.session_id for s in rt.sessions(limit=100)}
    assert set(waiting) <= left  # the ended one went first


def test_many_sessions_stay_bounded() -> None:
    store = MemoryStore(max_sessions=100)
    rt = Runtime(store=store)
    flow = Flow("many", [lambda ctx: ctx.input])
    for i in range(2_000):
        rt.run(flow, i)
    assert len(store) <= 100
