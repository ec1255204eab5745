"""Deadlines (`Flow(deadline=)`, `run(deadline=)`) and cleanup (`Flow(cleanup=)`, `ctx.ending`),
through the public API, on every store; time moves only by a ManualClock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tarry import (
    Flow,
    Gate,
    InvalidArgument,
    InvalidFlow,
    ManualClock,
    Runtime,
    SessionNotResumable,
    Sleep,
)

START = datetime(2030, 1, 1, tzinfo=UTC)


def runtime(store: Any, clock: ManualClock, **kw: Any) -> Runtime:
    return Runtime(store=store, clock=clock, **kw)


def recorder() -> tuple[list[Any], Any]:
    seen: list[Any] = []

    def note(name: str) -> Any:
        def step(ctx: Any) -> Any:
            seen.append(name)
            return name

        step.__name__ = name
        return step

    return seen, note


# --- deadlines ---------------------------------------------------------------------------------


def test_a_waiting_session_fails_when_its_deadline_passes_in_resume_due(store) -> None:
    clock = ManualClock(START)
    seen, note = recorder()
    flow = Flow("dl_wait", [note("a"), Gate("approve"), note("b")], deadline=60)
    rt = runtime(store, clock)
    out = rt.run(flow)
    assert out.paused and seen == ["a"]
    view = rt.session(out.session_id)
    assert view.deadline == START + timedelta(seconds=60)
    # the session is due at its deadline, a durable timer like a Sleep's
    [summary] = rt.sessions()
    assert summary.wake_at == START + timedelta(seconds=60)
    clock.advance(59)
    assert rt.resume_due() == []
    clock.advance(1)
    [failed] = rt.resume_due()
    assert failed.failed and failed.error.type == "deadline_exceeded"
    assert failed.error.path == ("approve",)
    assert rt.session(out.session_id).status == "failed"
    assert seen == ["a"]
    assert rt.resume_due() == []


def test_the_wake_time_is_the_earliest_of_the_waits_and_the_deadline(store) -> None:
    clock = ManualClock(START)
    flow = Flow("dl_sleep", [Sleep("nap", 30), Sleep("long", 600)], deadline=90)
    rt = runtime(store, clock)
    out = rt.run(flow)
    assert rt.sessions()[0].wake_at == START + timedelta(seconds=30)  # the Sleep first
    clock.advance(30)
    [again] = rt.resume_due()
    assert again.paused and again.pause.path == ("long",)
    assert rt.sessions()[0].wake_at == START + timedelta(seconds=90)  # then the deadline
    clock.advance(60)
    [failed] = rt.resume_due()
    assert failed.error.type == "deadline_exceeded" and failed.session_id == out.session_id


def test_a_running_session_fails_at_its_next_checkpoint(store) -> None:
    clock = ManualClock(START)
    seen: list[str] = []

    def slow(ctx: Any) -> int:
        seen.append("slow")
        clock.advance(120)  # the step takes two minutes
        return 1

    def after(ctx: Any) -> int:
        seen.append("after")
        return 2

    rt = runtime(store, clock)
    out = rt.run(Flow("dl_run", [slow, after], deadline=60))
    assert out.failed and out.error.type == "deadline_exceeded"
    assert out.error.path == ("after",)  # stopped before it, between steps
    assert seen == ["slow"]
    assert rt.session(out.session_id).status == "failed"


def test_a_deadline_in_the_past_fails_the_session_at_once(store) -> None:
    clock = ManualClock(START)
    seen, note = recorder()
    flow = Flow("dl_past", [note("a")])
    rt = runtime(store, clock)
    out = rt.run(flow, deadline=START - timedelta(seconds=1))
    assert out.failed and out.error.type == "deadline_exceeded" and seen == []
    out = rt.run(flow, deadline=-5)
    assert out.failed and out.error.type == "deadline_exceeded" and seen == []
    # a run's deadline replaces the flow's
    long = Flow("dl_long", [note("b")], deadline=0.001)
    assert rt.run(long, deadline=timedelta(hours=1)).ok and seen == ["b"]


def test_bad_deadlines_are_refused_and_change_nothing(store) -> None:
    rt = runtime(store, ManualClock(START))
    flow = Flow("dl_bad", [lambda ctx: 1])
    for bad in ("soon", True, float("nan"), datetime(2030, 1, 1), [1]):
        with pytest.raises(InvalidArgument):
            rt.run(flow, deadline=bad)
    assert rt.sessions() == []
    for bad in (0, -1, "1", float("inf")):
        with pytest.raises(InvalidFlow):
            Flow("dl_bad", [lambda ctx: 1], deadline=bad)


def test_a_deadline_that_passed_while_no_process_ran_fires_in_the_next_round(tmp_path) -> None:
    from tarry.snapshots import SQLiteStore

    clock = ManualClock(START)
    flow = Flow("dl_gone", [Gate("approve")], deadline=60)
    first = SQLiteStore(tmp_path / "gone.db")
    out = runtime(first, clock).run(flow)
    assert out.paused
    first.close()
    clock.advance(3600)  # no process ran meanwhile
    store = SQLiteStore(tmp_path / "gone.db")
    try:
        rt = runtime(store, clock, flows=[flow])
        [failed] = rt.resume_due()
        assert failed.session_id == out.session_id
        assert failed.error.type == "deadline_exceeded"
    finally:
        store.close()


def test_a_resume_after_the_deadline_fails_the_session(store) -> None:
    clock = ManualClock(START)
    seen, note = recorder()
    rt = runtime(store, clock)
    out = rt.run(Flow("dl_late", [Gate("approve"), note("b")], deadline=60))
    clock.advance(61)  # no worker fired it yet
    late = rt.resume(out.token, True)
    assert late.failed and late.error.type == "deadline_exceeded" and seen == []


# --- cleanup -----------------------------------------------------------------------------------


def cleanup_flow(name: str, body: list[Any], seen: list[Any], **kw: Any) -> Flow:
    def release(ctx: Any) -> str:
        seen.append(("release", ctx.ending, ctx.prev))
        return "released"

    return Flow(name, body, cleanup=release, **kw)


def test_cleanup_runs_after_a_completed_body_which_keeps_its_output(store) -> None:
    seen: list[Any] = []
    endings: list[Any] = []

    def body(ctx: Any) -> int:
        endings.append(ctx.ending)  # None outside a cleanup
        return 7

    rt = runtime(store, ManualClock(START))
    out = rt.run(cleanup_flow("cl_ok", [body], seen))
    assert out.ok and out.output == 7
    assert seen == [("release", "completed", 7)] and endings == [None]
    view = rt.session(out.session_id)
    assert view.ending == "completed" and view.cleanup_error is None
    assert view.derive_state() == view.state
    types = [e.type for e in view.events()]
    assert types.count("cleanup.started") == 1 and types.count("cleanup.ended") == 1
    assert types[-1] == "run.completed"


def test_cleanup_runs_after_a_failed_body_which_keeps_its_error(store) -> None:
    seen: list[Any] = []

    def boom(ctx: Any) -> None:
        raise ValueError("broken")

    rt = runtime(store, ManualClock(START))
    out = rt.run(cleanup_flow("cl_fail", [boom], seen))
    assert out.failed and out.error.type == "ValueError" and out.error.path == ("boom",)
    assert seen == [("release", "failed", None)]
    # its body ended and was cleaned up after: it is not run again
    with pytest.raises(SessionNotResumable):
        rt.resume(out.token)


def test_cancel_of_a_waiting_session_runs_its_cleanup_then_ends_cancelled(store) -> None:
    seen: list[Any] = []
    rt = runtime(store, ManualClock(START))
    out = rt.run(cleanup_flow("cl_cancel", [Gate("approve")], seen))
    assert out.paused and seen == []
    done = rt.cancel(out.session_id, actor="ops")
    assert done.failed and done.error.type == "cancelled"
    assert seen == [("release", "cancelled", None)]
    view = rt.session(out.session_id)
    assert view.status == "cancelled" and view.ending == "cancelled"
    assert view.events()[-1].data.get("actor") == "ops"
    assert view.derive_state() == view.state
    with pytest.raises(SessionNotResumable):
        rt.cancel(out.session_id)


def test_cancel_of_a_running_session_runs_its_cleanup_at_its_next_checkpoint(store) -> None:
    seen: list[Any] = []
    rt = runtime(store, ManualClock(START))

    def stop_me(ctx: Any) -> int:
        asked = rt.cancel(ctx.session_id)
        assert asked.status == "running"
        return 1

    def never(ctx: Any) -> None:
        seen.append("never")

    out = rt.run(cleanup_flow("cl_cancel_run", [stop_me, never], seen))
    assert out.failed and out.error.type == "cancelled"
    assert seen == [("release", "cancelled", None)]


def test_cleanup_after_a_deadline_while_waiting_and_while_running(store) -> None:
    clock = ManualClock(START)
    seen: list[Any] = []
    rt = runtime(store, clock)
    out = rt.run(cleanup_flow("cl_dl_wait", [Gate("approve")], seen, deadline=60))
    clock.advance(60)
    [failed] = rt.resume_due()
    assert failed.error.type == "deadline_exceeded" and failed.error.path == ("approve",)
    assert seen == [("release", "deadline_exceeded", None)]
    view = rt.session(out.session_id)
    assert view.status == "failed" and view.derive_state() == view.state

    seen.clear()

    def slow(ctx: Any) -> int:
        clock.advance(120)
        return 1

    out = rt.run(cleanup_flow("cl_dl_run", [slow, lambda ctx: 2], seen, deadline=60))
    assert out.failed and out.error.type == "deadline_exceeded"
    assert seen == [("release", "deadline_exceeded", None)]


def test_a_cleanup_that_pauses_is_resumed_and_then_the_session_ends_as_its_body_did(
    store,
) -> None:
    endings: list[Any] = []

    def note(ctx: Any) -> Any:
        endings.append(ctx.ending)
        return ctx.prev

    def after(ctx: Any) -> Any:
        endings.append(ctx.ending)

    clean = [note, Gate("confirm"), after]
    flow = Flow("cl_pause", [lambda ctx: {"n": 1}], cleanup=clean)
    rt = runtime(store, ManualClock(START))
    out = rt.run(flow)
    assert out.paused and out.pause.path == ("@cleanup", "confirm")
    view = rt.session(out.session_id)
    assert view.status == "paused" and view.ending == "completed"
    done = rt.resume(out.token, True)
    assert done.ok and done.output == {"n": 1}  # the body's output, not the cleanup's
    assert endings == ["completed", "completed"]

    def boom(ctx: Any) -> None:
        raise KeyError("k")

    failing = Flow("cl_pause_fail", [boom], cleanup=[Gate("confirm")])
    out = rt.run(failing)
    assert out.paused and rt.session(out.session_id).ending == "failed"
    done = rt.resume(out.token, True)
    assert done.failed and done.error.type == "KeyError" and done.error.path == ("boom",)


def test_a_cancel_of_a_waiting_cleanup_ends_the_session_cancelled(store) -> None:
    rt = runtime(store, ManualClock(START))
    out = rt.run(Flow("cl_pause_cancel", [lambda ctx: 1], cleanup=[Gate("confirm")]))
    assert out.paused
    done = rt.cancel(out.session_id)
    assert done.failed and done.error.type == "cancelled"
    view = rt.session(out.session_id)
    assert view.status == "cancelled" and view.cleanup_error.type == "cancelled"
    assert view.derive_state() == view.state


def test_a_cleanup_failure_is_recorded_and_changes_nothing_else(store) -> None:
    def bad_cleanup(ctx: Any) -> None:
        raise RuntimeError("cannot release")

    rt = runtime(store, ManualClock(START))
    out = rt.run(Flow("cl_bad", [lambda ctx: 3], cleanup=bad_cleanup))
    assert out.ok and out.output == 3
    assert out.meta["cleanup_error"].type == "RuntimeError"
    view = rt.session(out.session_id)
    assert view.status == "completed"
    assert view.cleanup_error.type == "RuntimeError"
    assert view.cleanup_error.message == "cannot release"
    assert view.cleanup_error.path == ("@cleanup", "bad_cleanup")
    assert view.state.cleanup_error == view.cleanup_error

    def boom(ctx: Any) -> None:
        raise ValueError("body")

    out = rt.run(Flow("cl_bad_fail", [boom], cleanup=bad_cleanup))
    assert out.failed and out.error.type == "ValueError"
    assert rt.session(out.session_id).cleanup_error.type == "RuntimeError"


def test_an_async_cleanup(store) -> None:
    seen: list[Any] = []

    async def release(ctx: Any) -> None:
        await asyncio.sleep(0)
        seen.append(ctx.ending)

    rt = runtime(store, ManualClock(START))
    flow = Flow("cl_async", [lambda ctx: 5], cleanup=release)
    out = asyncio.run(rt.arun(flow))
    assert out.ok and out.output == 5 and seen == ["completed"]
    out = rt.run_sync(flow)
    assert out.ok and seen == ["completed", "completed"]


def test_flows_refuse_cleanup_and_deadline_where_they_cannot_hold() -> None:
    inner = Flow("inner", [lambda ctx: 1], cleanup=lambda ctx: None)
    with pytest.raises(InvalidFlow):
        Flow("outer", [inner])
    with pytest.raises(InvalidFlow):
        Flow("outer", [Flow("timed", [lambda ctx: 1], deadline=5)])
    with pytest.raises(InvalidFlow):
        Flow("clash", [Flow("@cleanup", [lambda ctx: 1])], cleanup=lambda ctx: None)
    # a cleanup is part of the fingerprint; a deadline is not
    plain = Flow("fp", [lambda ctx: 1])
    assert Flow("fp", [lambda ctx: 1], deadline=5).fingerprint == plain.fingerprint
    assert Flow("fp", [lambda ctx: 1], cleanup=lambda ctx: 2).fingerprint != plain.fingerprint


class Crash(BaseException):
    """Stands for the process dying: nothing in tarry catches it."""


def test_a_cleanup_runs_once_across_a_crash_and_recovery(store) -> None:
    clock = ManualClock(START)
    ran: list[str] = []

    def close(ctx: Any) -> None:
        ran.append("close")

    def report(ctx: Any) -> None:
        ran.append("report")
        if ran.count("report") == 1:
            raise Crash  # the process dies in the cleanup's second step

    def make() -> Flow:
        return Flow("cl_crash", [lambda ctx: 9], cleanup=[close, report])

    rt = runtime(store, clock, durability="step", lease=30)
    with pytest.raises(Crash):
        rt.run(make())
    other = runtime(store, clock, durability="step", lease=30, flows=[make()])
    clock.advance(31)
    [out] = other.recover()
    assert out.ok and out.output == 9
    # the completed cleanup step is not run again; the one in flight is (at least once)
    assert ran == ["close", "report", "report"]
    view = other.session(out.session_id)
    types = [e.type for e in view.events()]
    assert types.count("cleanup.started") == 1 and types.count("cleanup.ended") == 1
    assert view.derive_state() == view.state
    assert other.recover() == []


@pytest.mark.parametrize("with_cleanup", [False, True])
def test_a_deadline_ends_every_waiting_branch(store, with_cleanup: bool) -> None:
    from tarry import ForEach, TarryError

    clock = ManualClock(START)
    seen: list[Any] = []
    body = [ForEach("items", [1, 2, 3], Gate("g"), concurrency=3)]
    name = f"dl_lanes_{with_cleanup}"
    flow = (
        cleanup_flow(name, body, seen, deadline=60)
        if with_cleanup
        else Flow(name, body, deadline=60)
    )
    rt = runtime(store, clock)
    out = rt.run(flow)
    assert out.paused and len(out.pauses) == 3
    tokens = [p.token for p in out.pauses]
    rt.resume(tokens[0], True)  # one branch goes on; two still wait
    clock.advance(61)
    [failed] = rt.resume_due()
    assert failed.error.type == "deadline_exceeded"
    assert seen == ([("release", "deadline_exceeded", None)] if with_cleanup else [])
    for token in tokens[1:]:
        with pytest.raises(TarryError):
            rt.resume(token, True)
    assert rt.session(out.session_id).status == "failed"
    assert rt.resume_due() == []


def test_a_body_that_ends_while_branches_wait_ends_them_before_its_cleanup_pauses(store) -> None:
    from tarry import ForEach, TarryError

    def check(ctx: Any) -> Any:
        if ctx.item == 1:
            raise ValueError("one branch fails")
        return ctx.item

    body = [ForEach("items", [0, 1, 2], [Gate("g"), check], concurrency=3)]
    flow = Flow("cl_lanes_pause", body, cleanup=[Gate("confirm")])
    rt = runtime(store, ManualClock(START))
    out = rt.run(flow)
    tokens = {p.path: p.token for p in out.pauses}
    assert len(tokens) == 3
    got = rt.resume(tokens[("items", 1, "g")], True)  # that branch fails: the body ends
    assert got.paused and got.pause.path == ("@cleanup", "confirm")
    assert [p.path for p in got.pauses] == [("@cleanup", "confirm")]
    for path in (("items", 0, "g"), ("items", 2, "g")):
        with pytest.raises(TarryError):
            rt.resume(tokens[path], True)
    done = rt.resume(got.token, True)
    assert done.failed and done.error.type == "ValueError"
    assert rt.session(out.session_id).ending == "failed"


def test_a_timeout_that_fails_the_run_runs_the_cleanup(store) -> None:
    clock = ManualClock(START)
    seen: list[Any] = []
    flow = cleanup_flow("cl_timeout", [Gate("g", timeout=30, on_timeout="reject")], seen)
    rt = runtime(store, clock)
    out = rt.run(flow)
    clock.advance(31)
    [failed] = rt.resume_due()
    assert failed.error.type == "gate_timeout" and failed.session_id == out.session_id
    assert seen == [("release", "failed", None)]


def test_an_abort_pauses_the_body_and_a_later_cancel_runs_the_cleanup(store) -> None:
    seen: list[Any] = []
    rt = runtime(store, ManualClock(START))

    def stop_me(ctx: Any) -> int:
        rt.abort(ctx.session_id)
        return 1

    out = rt.run(cleanup_flow("cl_abort", [stop_me, lambda ctx: 2], seen))
    assert out.paused and out.pause.reason == "aborted" and seen == []
    done = rt.cancel(out.token)
    assert done.error.type == "cancelled" and seen == [("release", "cancelled", None)]


@pytest.mark.parametrize("with_cleanup", [False, True])
def test_a_deadline_cancels_the_children_that_have_not_ended(store, with_cleanup: bool) -> None:
    from tarry import Child

    clock = ManualClock(START)
    seen: list[Any] = []
    inner = Flow(f"dl_child_inner_{with_cleanup}", [Gate("hold")])
    body = [Child("c", inner)]
    name = f"dl_parent_{with_cleanup}"
    parent = (
        cleanup_flow(name, body, seen, deadline=60)
        if with_cleanup
        else Flow(name, body, deadline=60)
    )
    rt = runtime(store, clock, flows=[inner])
    out = rt.run(parent, session_id=f"p{with_cleanup}")
    assert out.paused
    [child] = rt.session(out.session_id).children
    [started] = rt.resume_due()  # the child runs, and waits at its Gate
    assert started.session_id == child and started.paused
    clock.advance(61)
    rounds = rt.resume_due()
    assert [o.error.type for o in rounds if o.session_id == out.session_id] == ["deadline_exceeded"]
    assert rt.session(child).status == "cancelled"
    assert rt.session(out.session_id).status == "failed"
    assert seen == ([("release", "deadline_exceeded", None)] if with_cleanup else [])
    assert rt.mailbox() == []


def test_a_running_parent_past_its_deadline_cancels_its_waiting_children(store) -> None:
    from tarry import Child, Parallel

    clock = ManualClock(START)
    inner = Flow("dl_kid", [Gate("hold")])
    ran: list[str] = []

    def slow(ctx: Any) -> int:
        clock.advance(120)  # the deadline passes while this branch runs
        return 1

    def after(ctx: Any) -> None:
        ran.append("after")

    body = [Parallel("both", {"a": [Child("kid", inner)], "b": [Gate("go"), slow, after]})]
    rt = runtime(store, clock, flows=[inner])
    out = rt.run(Flow("dl_run_parent", body, deadline=60), session_id="rp")
    assert out.paused and len(out.pauses) == 2
    [kid] = rt.session("rp").children
    [started] = rt.resume_due()  # the child runs, and waits at its Gate
    assert started.session_id == kid and started.paused
    go = next(p.token for p in out.pauses if p.path[-1] == "go")
    done = rt.resume(go, True)  # branch b runs on, past the deadline
    assert done.failed and done.error.type == "deadline_exceeded"
    assert ran == []  # stopped at the checkpoint before it (the Parallel stops there)
    assert rt.session(kid).status == "cancelled"
    assert rt.resume_due() == [] and rt.mailbox() == []


def test_a_cancel_where_the_flow_is_unknown_changes_nothing(store) -> None:
    from tarry import UnknownFlow

    seen: list[Any] = []
    flow = cleanup_flow("cl_unknown", [Gate("approve")], seen)
    out = runtime(store, ManualClock(START)).run(flow)
    stranger = runtime(store, ManualClock(START))  # knows no flow
    with pytest.raises(UnknownFlow):
        stranger.cancel(out.session_id)
    assert stranger.session(out.session_id).status == "paused" and seen == []
    other = runtime(store, ManualClock(START), flows=[flow])
    assert other.cancel(out.session_id).error.type == "cancelled"
    assert seen == [("release", "cancelled", None)]


def test_a_childs_own_deadline_fails_it_and_then_its_parent(store) -> None:
    """A Child's flow may have a deadline of its own (docs/concepts.md): it holds from the
    child's start, as a run's does."""
    from tarry import Child

    clock = ManualClock(START)
    inner = Flow("dl_own_child", [Gate("hold")], deadline=30)
    rt = runtime(store, clock, flows=[inner])
    out = rt.run(Flow("dl_own_parent", [Child("c", inner)]), session_id="op")
    assert out.paused
    assert rt.session("op.c").deadline == START + timedelta(seconds=30)
    [started] = rt.resume_due()  # the child runs, and waits at its Gate
    assert started.session_id == "op.c" and started.paused
    clock.advance(29)
    assert rt.resume_due() == []
    clock.advance(1)
    rt.resume_due()
    child = rt.session("op.c")
    assert child.status == "failed" and child.state.error.type == "deadline_exceeded"
    parent = rt.session("op")
    assert parent.status == "failed" and parent.state.error.type == "ChildFailed"
    assert "deadline_exceeded" in parent.state.error.message


@pytest.mark.parametrize("how", ["child", "parent", "deadline"])
def test_a_cancelled_child_runs_its_own_cleanup(store, how: str) -> None:
    """Each child whose flow has a cleanup runs it when it is cancelled: on its own, with its
    parent, or when its parent's deadline passes (docs/concepts.md, "Children")."""
    from tarry import Child

    clock = ManualClock(START)
    seen: list[Any] = []
    inner = cleanup_flow(f"cl_child_{how}", [Gate("hold")], seen)
    parent = Flow(f"cl_parent_{how}", [Child("c", inner)], deadline=60)
    rt = runtime(store, clock, flows=[inner])
    out = rt.run(parent, session_id=f"cp_{how}")
    kid = f"cp_{how}.c"
    [started] = rt.resume_due()
    assert started.session_id == kid and started.paused
    if how == "child":
        rt.cancel(kid)
    elif how == "parent":
        rt.cancel(out.session_id)
    else:
        clock.advance(61)
        rt.resume_due()
    assert rt.session(kid).status == "cancelled"
    assert seen == [("release", "cancelled", None)]
    assert rt.session(kid).ending == "cancelled"
