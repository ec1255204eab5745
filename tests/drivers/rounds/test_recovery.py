"""Step durability and recovery, in one process: a crash is a BaseException out of a step."""

from __future__ import annotations

import pytest
from tarry import Flow, ForEach, Gate, ManualClock, Runtime
from tarry.snapshots import MemoryStore, SQLiteStore


class Crash(BaseException):
    """Stands for the process dying: nothing in tarry catches it."""


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "r.db")


def make_flow(ran: list, crash_at: int | None):
    def work(ctx):
        ran.append(ctx.item)
        if ctx.item == crash_at and ran.count(ctx.item) == 1:
            raise Crash
        return ctx.item * 3

    return Flow("rec", [ForEach("items", list(range(10)), work), lambda ctx: sum(ctx.prev)])


def test_step_durability_writes_each_step_before_the_next_starts(store) -> None:
    rt = Runtime(store=store, durability="step")
    logged: list[int] = []

    def work(ctx):
        stored = [e for e in store.events(ctx.session_id) if e.type == "node.completed"]
        logged.append(len(stored))
        return ctx.item

    rt.run(Flow("step", [ForEach("items", list(range(5)), work)]))
    assert logged == [0, 1, 2, 3, 4]  # step k sees the k completed steps before it stored


def test_recover_after_a_crash_continues_from_the_last_completed_step(store) -> None:
    clock = ManualClock()
    ran: list[int] = []
    rt = Runtime(store=store, durability="step", clock=clock, lease=30)
    with pytest.raises(Crash):
        rt.run(make_flow(ran, crash_at=6))
    assert ran == list(range(7))

    other = Runtime(store=store, durability="step", clock=clock, flows=[make_flow(ran, None)])
    assert other.recover() == []  # the lease has not expired yet
    clock.advance(31)
    [out] = other.recover()
    assert out.ok and out.output == sum(i * 3 for i in range(10))
    assert ran == list(range(7)) + list(range(6, 10))  # only the step in flight ran again
    view = other.session(out.session_id)
    assert view.derive_state() == view.state
    assert other.recover() == []


def test_pause_durability_recovers_from_the_last_pause(store) -> None:
    clock = ManualClock()
    ran: list[str] = []

    def before(ctx):
        ran.append("before")
        return 1

    def after(ctx):
        ran.append("after")
        if ran.count("after") == 1:
            raise Crash
        return ctx.prev

    flow = Flow("pz", [before, Gate("g"), after])
    rt = Runtime(store=store, clock=clock)
    out = rt.run(flow)
    with pytest.raises(Crash):
        rt.resume(out.token, True)  # the decision is stored with the token's use
    clock.advance(60)
    [done] = Runtime(store=store, clock=clock, flows=[flow]).recover()
    assert done.ok and done.output == {"approved": True}
    assert ran == ["before", "after", "after"]


def test_two_recoverers_never_continue_the_same_session(store) -> None:
    clock = ManualClock()
    ran: list[int] = []
    with pytest.raises(Crash):
        Runtime(store=store, durability="step", clock=clock).run(make_flow(ran, crash_at=2))
    clock.advance(60)
    a = Runtime(store=store, durability="step", clock=clock, flows=[make_flow(ran, None)])
    b = Runtime(store=store, durability="step", clock=clock, flows=[make_flow(ran, None)])
    assert len(a.recover()) + len(b.recover()) == 1


def test_a_live_run_renews_its_lease_and_is_never_taken_over(tmp_path, ticks) -> None:
    store = SQLiteStore(tmp_path / "lease.db")
    clock = ManualClock()
    ran: list[int] = []
    stolen: list = []

    def slow(ctx):
        ran.append(ctx.item)
        # A tenth of a second passes in each step, by the clock the leases are judged by and
        # by the one the drive renews by (moved by hand: however slow the machine, no lease
        # lapses unless the run failed to renew it) ...
        clock.advance(0.1)
        ticks.advance(0.1)
        # ... and another runtime tries to take the session over meanwhile.
        stolen.extend(other.recover())
        return ctx.item

    flow = Flow("slow", [ForEach("items", list(range(12)), slow)])
    # The run lasts 1.2 s, more than twice its lease.
    rt = Runtime(store=store, durability="step", lease=0.5, clock=clock)
    other = Runtime(store=store, durability="step", lease=0.5, clock=clock, flows=[flow])
    out = rt.run(flow)
    assert out.ok and out.output == list(range(12))
    assert stolen == [] and ran == list(range(12))


def test_a_long_pause_durability_run_recovers_from_its_last_event_write(store) -> None:
    """With durability="pause", a long run writes its events every FLUSH_EVENTS: a crash then
    loses only what ran since the last of those writes."""
    from tarry.drivers.drive.drive import FLUSH_EVENTS

    clock = ManualClock()
    n = FLUSH_EVENTS  # four events an item: the first writes happen within the first quarter
    ran: list[int] = []

    def work(ctx):
        ran.append(ctx.item)
        if ctx.item == n - 1 and ran.count(ctx.item) == 1:
            raise Crash
        return ctx.item

    flow = Flow("long", [ForEach("items", list(range(n)), work), lambda ctx: sum(ctx.prev)])
    with pytest.raises(Crash):
        Runtime(store=store, clock=clock).run(flow)
    written = [e for e in store.events(store.list()[0].session_id) if e.type == "node.completed"]
    assert len(written) >= n // 2  # written while it ran, though it never paused
    clock.advance(60)
    [out] = Runtime(store=store, clock=clock, flows=[flow]).recover()
    assert out.ok and out.output == sum(range(n))
    again = ran[n:]  # what the recovery ran: from the last write on, never anything before it
    assert again == list(range(again[0], n)) and len(again) <= FLUSH_EVENTS // 4 + 1
