"""Keyed delivery: one plain test per bug that the delivery state machine
(test_delivery_machine.py) found, each its shortest reproduction, through the public API, on every
store (the `store` fixture: memory, SQLite, PostgreSQL). API.md, "Delivery you can trust"."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
import tarry
from tarry import Flow, ForEach, ManualClock, Runtime, Wait

#: A bound on how long a helper thread may take, only so that a deadlock fails instead of hanging.
GUARD = 60.0


class Crash(BaseException):
    """Stands for the process dying mid-drive: nothing in tarry catches it."""


def pair(key: str = "k0") -> Flow:
    """Two keyed Waits on one key, in a row."""
    return Flow(
        "pair",
        [
            Wait("first", key=key),
            Wait("second", key=key),
            lambda ctx: [ctx.outputs["first"], ctx.outputs["second"]],
        ],
    )


def taken(rt: Runtime, session_id: str) -> dict[tuple[Any, ...], Any]:
    """Wait path -> the value it completed with, from the session's events."""
    return {
        e.path: e.data["output"]
        for e in rt.session(session_id).events()
        if e.type == "node.completed" and e.path[-1:] in (("first",), ("second",), ("lane",))
    }


def in_thread(fn: Any) -> Any:
    """`fn()` in another thread, as another process would call it; its result (or error)."""
    got: list[Any] = []

    def call() -> None:
        try:
            got.append(fn())
        except BaseException as exc:
            got.append(exc)

    helper = threading.Thread(target=call, daemon=True)
    helper.start()
    helper.join(GUARD)
    assert got, f"the call did not return within {GUARD} s"
    if isinstance(got[0], BaseException):
        raise got[0]
    return got[0]


# --- the surface API.md names ------------------------------------------------------------------


def test_mailbox_lists_the_queued_messages_of_each_key(store) -> None:
    rt = Runtime(store=store)
    rt.deliver("k0", "m1")
    rt.deliver("k0", "m2")
    [info] = rt.mailbox()
    assert (info.key, info.count) == ("k0", 2)
    assert rt.discard("k0") == 2  # how many were dropped
    assert rt.mailbox() == []


def test_broadcast_resumes_every_waiting_branch_and_keeps_nothing(store) -> None:
    rt = Runtime(store=store)
    one, two = rt.run(pair(), session_id="one"), rt.run(pair(), session_id="two")
    outs = rt.broadcast("k0", "ready")
    assert sorted(o.session_id for o in outs) == ["one", "two"]
    assert taken(rt, one.session_id) == taken(rt, two.session_id) == {("first",): "ready"}
    assert rt.mailbox() == []  # kept nothing: both now wait on "second"
    assert [p.path for p in rt.session("one").outcome.pauses] == [("second",)]


def test_deliver_many_returns_a_delivery_report(store) -> None:
    rt = Runtime(store=store)
    out = rt.run(pair("a"))
    report = rt.deliver_many({"a": "m1", "b": "m2"})
    assert dict(report.applied) == {"a": out.session_id}
    assert list(report.queued) == ["b"]
    assert [o.session_id for o in report.outcomes] == [out.session_id]


def test_prune_older_than_zero_deletes_every_ended_session(store) -> None:
    rt = Runtime(store=store, clock=ManualClock())
    out = rt.run(pair())
    rt.cancel(out.session_id)
    assert rt.prune(older_than=timedelta(0)) == 1
    with pytest.raises(tarry.UnknownSession):
        rt.session(out.session_id)


# --- a key is a queue ------------------------------------------------------------------------------


def test_an_early_message_is_taken_by_one_wait_only(store) -> None:
    rt = Runtime(store=store)
    assert rt.deliver("k0", "m1") == []  # queued: nothing waits yet
    out = rt.run(pair())
    # "first" takes m1 and does not pause; "second" finds the queue empty and waits.
    assert out.paused and [p.path for p in out.pauses] == [("second",)]
    assert taken(rt, out.session_id) == {("first",): "m1"}


def test_two_messages_to_one_key_are_two_messages_taken_in_order(store) -> None:
    rt = Runtime(store=store)
    rt.deliver("k0", "m1")
    rt.deliver("k0", "m2")  # a second message, not a new value for the first
    out = rt.run(pair())
    assert out.ok and out.output == ["m1", "m2"]


def test_a_message_moves_only_the_branch_that_waited_longest(store) -> None:
    rt = Runtime(store=store)
    first, later = rt.run(pair(), session_id="first"), rt.run(pair(), session_id="later")
    outs = rt.deliver("k0", "m1")
    assert [o.session_id for o in outs] == [first.session_id]
    assert taken(rt, later.session_id) == {}
    [out] = rt.deliver("k0", "m2")  # first now waits on "second", since after `later`
    assert out.session_id == later.session_id
    assert taken(rt, later.session_id) == {("first",): "m2"}


# --- many lanes, busy sessions, stops, crashes ---------------------------------------------------


def test_late_mail_for_several_waiting_lanes_is_not_lost(store) -> None:
    """While lane 0 is in its step, lanes 1 and 2 wait (in the running drive, not yet saved)
    and another process delivers to both: each lane takes its message."""
    rt = Runtime(store=store, clock=ManualClock())
    started: set[int] = set()
    changed = threading.Condition()

    def on_event(event: tarry.Event) -> None:
        if event.type == "node.started" and event.path[-1:] == ("lane",):
            with changed:
                started.add(event.path[1])
                changed.notify_all()

    rt.subscribe(on_event)

    def prep(ctx: Any) -> None:
        if ctx.item == 0:
            with changed:
                changed.wait_for(lambda: {1, 2} <= started, GUARD)
            in_thread(lambda: [rt.deliver("late/1", "one"), rt.deliver("late/2", "two")])

    lanes = [prep, Wait("lane", key=lambda ctx: f"late/{ctx.item}")]
    flow = Flow("late", [ForEach("lanes", [0, 1, 2], lanes, concurrency=3)])
    out = rt.run(flow)
    rt.poll()  # the next worker round, at the latest
    assert taken(rt, out.session_id) == {("lanes", 1, "lane"): "one", ("lanes", 2, "lane"): "two"}
    assert [p.path for p in rt.session(out.session_id).outcome.pauses] == [("lanes", 0, "lane")]


def test_deliver_many_gives_a_key_its_queued_message_before_the_new_one(store) -> None:
    """A message queued on a key (it came while its session ran) goes first when deliver_many
    brings that session new values for that key and another one at once: never the new values
    taken together past the queue's head."""
    rt = Runtime(store=store)

    def after(ctx: Any) -> Any:
        if ctx.item == 0:  # the session is running: the message to lane 1 is queued
            assert in_thread(lambda: rt.deliver("q/1", "early")) == []
        return ctx.prev

    lanes = [Wait("lane", key=lambda ctx: f"q/{ctx.item}"), after]
    flow = Flow("queued_ahead", [ForEach("lanes", [0, 1, 2], lanes, concurrency=3)])
    out = rt.run(flow)
    lane0 = next(p for p in out.pauses if p.path == ("lanes", 0, "lane"))
    assert rt.resume(lane0.token, "zero").paused
    report = rt.deliver_many({"q/1": "new", "q/2": "two"})
    assert taken(rt, out.session_id) == {
        ("lanes", 0, "lane"): "zero",
        ("lanes", 1, "lane"): "early",
        ("lanes", 2, "lane"): "two",
    }
    assert list(report.queued) == ["q/1"]
    assert [(m.key, m.count) for m in rt.mailbox(prefix="q/")] == [("q/1", 1)]
    assert rt.session(out.session_id).outcome.output == ["zero", "early", "two"]


def test_a_cancel_while_a_resume_runs_is_honoured_when_the_run_pauses(store) -> None:
    """Lane 0 is resumed; while its next step runs, another process cancels the session; the
    drive then pauses (lane 1 still waits) before any checkpoint. The cancel still wins."""
    rt = Runtime(store=store)
    asked: list[tarry.Outcome] = []

    def post(ctx: Any) -> Any:
        if ctx.item == 0:
            asked.append(in_thread(lambda: rt.cancel(ctx.session_id)))
        return ctx.prev

    lanes = [Wait("lane", key=lambda ctx: f"c/{ctx.item}"), post]
    out = rt.run(Flow("cancelled", [ForEach("lanes", [0, 1], lanes, concurrency=3)]))
    rt.resume(out.pauses[0].token, "v0")
    assert [o.status for o in asked] == ["running"]  # a stop request, for the running drive
    view = rt.session(out.session_id)
    assert view.status == "cancelled", [p.path for p in view.outcome.pauses]


def test_a_cancel_from_another_process_is_honoured_after_the_run_paused(store) -> None:
    """Another process (a second Runtime on the store) cancels the session while one of its
    lanes runs a step; the run pauses (its other lanes wait) before it reads the stored
    request. The request stays stored with the paused session, which is due at once: the
    next worker round cancels it, every wait's token used."""
    rt, other = Runtime(store=store), Runtime(store=store)
    asked: list[tarry.Outcome] = []

    def post(ctx: Any) -> Any:
        if ctx.item == 2:
            asked.append(in_thread(lambda: other.cancel(ctx.session_id)))
        return ctx.prev

    lanes = [Wait("lane", key=lambda ctx: f"x/{ctx.item}"), post]
    flow = Flow("far", [ForEach("lanes", [0, 1, 2], lanes, concurrency=3)])
    out = rt.run(flow)
    [moved] = rt.deliver("x/2", "v2")
    assert [o.meta for o in asked] == [{"stop_requested": "cancel"}]
    assert moved.paused and len(moved.pauses) == 2  # it paused without seeing the request
    [done] = other.resume_due()  # a worker's timers round
    assert done.status == "error" and done.error.type == "cancelled"
    assert rt.session(out.session_id).status == "cancelled"
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(out.pauses[0].token, "late")


def test_an_abort_from_another_process_leaves_the_paused_session_resumable(store) -> None:
    """The same with an abort: the run paused anyway, so the worker round only clears the
    request; a later resume goes on and is not aborted by it."""
    rt, other = Runtime(store=store), Runtime(store=store)

    def post(ctx: Any) -> Any:
        if ctx.item == 1:
            in_thread(lambda: other.abort(ctx.session_id))
        return ctx.prev

    lanes = [Wait("lane", key=lambda ctx: f"y/{ctx.item}"), post]
    out = rt.run(Flow("aborted", [ForEach("lanes", [0, 1], lanes, concurrency=3)]))
    [moved] = rt.deliver("y/1", "v1")
    assert moved.paused and other.session(out.session_id).status == "paused"
    assert other.resume_due() == []  # the request is cleared; nothing else is due
    assert other.resume_due() == []
    [last] = rt.deliver("y/0", "v0")
    assert last.ok and last.output == ["v0", "v1"]


def test_a_stop_a_resumed_run_finds_pending_stops_it_inside_its_containers(store) -> None:
    """A stop request the run paused before it saw stays stored; the next drive (another
    process resumes the session) reads it at once, but stops only past the containers it
    re-enters: its pause lies inside the frames the state holds, so it resumes again."""
    rt, other = Runtime(store=store), Runtime(store=store)

    def mark(ctx: Any) -> Any:
        if ctx.iteration == 0 and ctx.item == 0:
            in_thread(lambda: other.abort(ctx.session_id))
        return ctx.item

    parts = tarry.ForEach("parts", [0, 1], [mark, tarry.Gate("ok")])
    loop = tarry.Loop("rounds", [lambda ctx: 0, parts], until=lambda ctx: True, max_iterations=1)
    flow = Flow("nested", [loop])
    out = rt.run(flow)
    assert out.paused and out.pause.path == ("rounds", 0, "parts", 0, "ok")
    stopped = other.resume(out.token, True, flow=flow)  # other reads the stored request
    assert stopped.paused and stopped.pause.reason == "aborted"
    assert stopped.pause.path[:3] == ("rounds", 0, "parts")  # not at ("rounds",): outside
    seen = [stopped.pause.path]
    out = stopped
    while out.paused:  # it goes on from there (a stop outside its frames would be refused)
        out = other.resume(out.token, True if out.pause.reason != "aborted" else None)
        seen.append(out.pause.path if out.paused else "done")
    assert out.ok and ("rounds", 0, "parts", 1, "ok") in seen


def test_deliver_to_a_running_session_is_queued_at_once(store) -> None:
    """A delivery to a lane of a session that is running (here: its process died and its lease
    still runs) is queued at once — never a wait for the session, never an error — and the
    session takes it when it goes on."""
    clock = ManualClock()
    crashed: list[int] = []

    def post(ctx: Any) -> Any:
        if ctx.item == 0 and not crashed:
            crashed.append(0)
            raise Crash
        return ctx.prev

    lanes = [Wait("lane", key=lambda ctx: f"busy/{ctx.item}"), post]
    flow = Flow("busy", [ForEach("lanes", [0, 1], lanes, concurrency=3)])
    rt = Runtime(store=store, clock=clock, lease=30)
    out = rt.run(flow)
    with pytest.raises(Crash):
        rt.resume(out.pauses[0].token, "a")
    other = Runtime(store=store, clock=clock, lease=30, flows=[flow])  # another process
    assert other.deliver("busy/1", "b") == []
    clock.advance(31)
    other.recover()
    other.poll()
    view = other.session(out.session_id)
    assert view.status == "completed" and view.outcome.output == ["a", "b"]


def test_a_session_that_crashed_before_its_first_write_derives_its_state(store) -> None:
    def first(ctx: Any) -> None:
        raise Crash

    rt = Runtime(store=store, clock=ManualClock())
    with pytest.raises(Crash):
        rt.run(Flow("early", [first, Wait("w", key="early")]), session_id="s1")
    view = Runtime(store=store).session("s1")  # another process looks at it
    assert view.status == "running"
    assert view.derive_state() == view.state


def test_messages_a_worker_cannot_deliver_do_not_starve_the_ones_it_can(store) -> None:
    """The oldest crossed messages belong to sessions whose flow this worker does not know
    (they stay queued for a Runtime that does): the worker's next rounds page past them, so a
    message it can deliver, queued after a full page of them, still moves its session on."""
    from tarry.snapshots import dumps

    clock = ManualClock()
    theirs = Flow("theirs", [Wait("w", key=lambda ctx: f"a/{ctx.input}")])
    mine = Flow("mine", [Wait("w", key=lambda ctx: f"b/{ctx.input}")])
    owner = Runtime(store, clock=clock, flows=[theirs])
    worker = Runtime(store, clock=clock, flows=[mine])
    for n in range(3):
        assert owner.run(theirs, n, session_id=f"a{n}").paused
    assert worker.run(mine, 0, session_id="b0").paused
    # Messages that crossed their waits (no process joined them): the oldest are the others'.
    for key in ("a/0", "a/1", "a/2", "b/0"):
        store.post(key, dumps(key.upper()), clock.now())
    for _ in range(2):
        worker.poll(limit=2)
    assert worker.session("b0").status == "completed"
    assert worker.session("b0").state.output == "B/0"
    assert sorted(m.key for m in worker.mailbox()) == ["a/0", "a/1", "a/2"]
    worker.poll(limit=2)  # past the last message: from the oldest again, nothing it can do
    owner.poll(limit=2)
    owner.poll(limit=2)
    assert [owner.session(f"a{n}").status for n in range(3)] == ["completed"] * 3
    assert owner.mailbox() == []
