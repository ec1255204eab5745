"""stats() times what it says: a concurrent lane's step from when its call began (not from
its `node.started`, queued behind a busy thread), the waiting of pauses apart from run time,
and nodes kept apart by flow and path."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import tarry
from support import WAIT
from tarry import Flow, ForEach, Gate, ManualClock, Runtime, Sleep, Wait, step
from tarry.snapshots.codec.pack import dumps


def one_thread(store) -> tuple[Runtime, ManualClock, threading.Event]:
    """A Runtime on a ManualClock with a single thread for sync steps, and an event set when
    the step "work" of the item at index 1 has emitted node.started."""
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock, max_threads=1)
    second_started = threading.Event()

    def watch(event: tarry.Event) -> None:
        if event.type == "node.started" and event.path[1:] == (1, "work"):
            second_started.set()

    rt.subscribe(watch)
    return rt, clock, second_started


def test_a_step_queued_for_a_thread_is_timed_from_when_it_began(store) -> None:
    rt, clock, second_started = one_thread(store)

    @step
    def work(ctx: tarry.Context) -> int:
        if ctx.item == "slow":
            # Both lanes have emitted node.started; the other one waits for the only thread.
            assert second_started.wait(WAIT)
            clock.advance(5)
        return 1

    flow = Flow("queued", [ForEach("items", lambda ctx: ctx.input, [work], concurrency=2)])
    assert rt.run(flow, ["slow", "trivial"]).ok
    node = rt.stats().nodes["work"]
    assert node.executions == 2
    # 5 s for the slow one, 0 s for the one that waited for the thread: 2.5 s on average
    # (timing from node.started would give 5 s each).
    assert node.mean_seconds == pytest.approx(2.5)
    assert rt.stats().flows["queued"]["items/work"] == node


def test_a_failed_attempt_queued_for_a_thread_is_timed_from_when_it_began(store) -> None:
    rt, clock, second_started = one_thread(store)

    @step
    def work(ctx: tarry.Context) -> int:
        if ctx.item == "slow":
            assert second_started.wait(WAIT)
            clock.advance(4)
            return 1
        raise ValueError("at once")

    flow = Flow("queued", [ForEach("items", lambda ctx: ctx.input, [work], concurrency=2)])
    assert rt.run(flow, ["slow", "failing"]).failed
    node = rt.stats().nodes["work"]
    assert (node.executions, node.failures) == (2, 1)
    assert node.mean_seconds == pytest.approx(2.0)  # 4 s and 0 s, not 4 s and 4 s


def test_the_waiting_of_a_pause_is_reported_apart(store) -> None:
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock)

    def think(ctx: tarry.Context) -> int:
        clock.advance(3)
        return 1

    flow = Flow("wait", [Wait("answer"), think, Gate("approve"), Sleep("nap", 60)])
    out = rt.run(flow)
    clock.advance(20)
    out = rt.resume(out.token, "yes")
    clock.advance(7)
    out = rt.resume(out.token, True)
    assert out.paused  # the Sleep
    clock.advance(60)
    assert [o.ok for o in rt.resume_due()] == [True]

    stats = rt.stats()
    answer = stats.nodes["answer"]
    assert (answer.executions, answer.waits) == (1, 1)
    assert answer.waiting_seconds == pytest.approx(20)
    assert answer.mean_waiting_seconds == pytest.approx(20)
    assert answer.mean_seconds == 0  # waiting is not run time
    assert stats.nodes["think"].mean_seconds == pytest.approx(3)
    assert stats.nodes["think"].waits == 0
    assert stats.nodes["approve"].waiting_seconds == pytest.approx(7)
    assert stats.nodes["nap"].waiting_seconds == pytest.approx(60)
    assert stats.nodes["nap"].mean_seconds == 0


def test_a_pause_not_resumed_yet_has_no_waiting_time(store) -> None:
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock)
    rt.run(Flow("open", [Gate("g")]))
    clock.advance(30)
    node = rt.stats().nodes.get("g")
    assert node is None or (node.waits, node.waiting_seconds) == (0, 0)


def test_nodes_are_kept_apart_by_flow_and_path(store) -> None:
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock)

    def fast(ctx: tarry.Context) -> int:
        clock.advance(1)
        return 1

    def slow(ctx: tarry.Context) -> int:
        clock.advance(9)
        return 1

    a = Flow("a", [step(fast, name="load")])
    b = Flow("b", [ForEach("each", lambda ctx: [1, 2], [step(slow, name="load")])])
    assert rt.run(a).ok and rt.run(b).ok

    stats = rt.stats()
    assert set(stats.flows) == {"a", "b"}
    assert stats.flows["a"]["load"].mean_seconds == pytest.approx(1)
    assert stats.flows["a"]["load"].executions == 1
    assert stats.flows["b"]["each/load"].mean_seconds == pytest.approx(9)
    assert stats.flows["b"]["each/load"].executions == 2
    assert stats.flows["b"]["each"].executions == 1
    # `nodes` adds up one name across flows, as before.
    assert stats.nodes["load"].executions == 3
    assert stats.nodes["load"].mean_seconds == pytest.approx(19 / 3)
    assert set(rt.stats(flow="a").flows) == {"a"}


def test_a_tally_of_the_older_layout_is_folded_again(tmp_path: Path) -> None:
    clock = ManualClock()
    rt = Runtime(store=f"sqlite:///{tmp_path / 's.db'}", clock=clock)

    def work(ctx: tarry.Context) -> int:
        clock.advance(2)
        return 1

    assert rt.run(Flow("f", [work]), None).ok
    expected = rt.stats()
    store = rt.store
    # What an older tarry stored: [nodes by name, open attempts], no version, no waits.
    old = dumps([{"work": [5, 5, 50.0, 5, {}]}, []])
    with store._lock:
        store._db.execute("UPDATE tallies SET blob = ?", (old,))
    assert rt.stats() == expected
    assert rt.stats().flows["f"]["work"].executions == 1
