"""Timers on a ManualClock: Sleep, Gate and Wait timeouts, decisions racing timers, cancelled
sessions, and many callers of resume_due sharing one store."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
import tarry
from tarry import Flow, ForEach, Gate, ManualClock, Runtime, Sleep, Wait


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def rt(clock: ManualClock) -> Runtime:
    return Runtime(clock=clock)


def types(rt: Runtime, sid: str) -> list[str]:
    return [e.type for e in rt.session(sid).events()]


# -- Sleep ------------------------------------------------------------------------------------


def test_sleep_pauses_until_its_wake_at(rt: Runtime, clock: ManualClock) -> None:
    flow = Flow("nap", [lambda ctx: 1, Sleep("nap", 90), lambda ctx: ctx.prev])
    out = rt.run(flow)
    assert out.paused
    assert (out.pause.kind, out.pause.reason) == ("system", "sleep")
    assert out.pause.wake_at == clock.now() + timedelta(seconds=90)
    assert out.meta["pause_kind"] == "system"
    clock.advance(89.999)
    assert rt.resume_due() == []
    clock.advance(0.001)
    [done] = rt.resume_due()
    assert done.ok and done.output is None  # Sleep's output is None
    assert done.meta == {"pause_kind": "system", "resumed_kind": "system", "trigger": "timer"}
    assert rt.resume_due() == []
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(out.token)


def test_sleep_until_a_datetime(rt: Runtime, clock: ManualClock) -> None:
    when = clock.now() + timedelta(days=1)
    out = rt.run(Flow("f", [Sleep("wait", until=when), lambda ctx: "woke"]))
    assert out.pause.wake_at == when
    clock.set(when)
    [done] = rt.resume_due()
    assert done.output == "woke"


def test_a_sleep_can_be_resumed_early_by_its_token(rt: Runtime) -> None:
    out = rt.run(Flow("f", [Sleep("s", 3600), lambda ctx: "early"]))
    assert rt.resume(out.token).output == "early"
    assert rt.resume_due() == []


def test_bad_sleeps_and_timeouts_are_refused() -> None:
    with pytest.raises(tarry.InvalidFlow):
        Sleep("s")
    with pytest.raises(tarry.InvalidFlow):
        Sleep("s", 1, until=ManualClock().now())
    with pytest.raises(tarry.InvalidFlow):
        Sleep("s", -1)
    with pytest.raises(tarry.InvalidFlow):
        Gate("g", timeout=0)
    with pytest.raises(tarry.InvalidFlow):
        Gate("g", timeout=5, on_timeout="maybe")
    with pytest.raises(tarry.InvalidFlow):
        Wait("w", timeout="soon")


# -- Gate timeouts ----------------------------------------------------------------------------


def test_gate_timeout_approve_resolves_approved_by_timeout(rt: Runtime, clock: ManualClock) -> None:
    flow = Flow(
        "f", [Gate("ok?", "Ship it?", timeout=3600, on_timeout="approve"), lambda ctx: ctx.prev]
    )
    out = rt.run(flow)
    assert out.pause.kind == "human"
    assert out.pause.expires_at == clock.now() + timedelta(hours=1)
    assert out.pause.wake_at is None
    clock.advance(3599)
    assert rt.resume_due() == []
    clock.advance(1)
    [done] = rt.resume_due()
    assert done.ok and done.output == {"approved": True, "by": "timeout"}
    assert done.meta["pause_kind"] == "human" and done.meta["trigger"] == "timeout"
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(out.token, True)


def test_gate_timeout_reject_fails_with_gate_timeout(rt: Runtime, clock: ManualClock) -> None:
    ran: list[str] = []

    def before(ctx: tarry.Context) -> str:
        ran.append("before")
        return "before"

    flow = Flow("f", [before, Gate("ok?", timeout=60), lambda ctx: "after"])
    out = rt.run(flow)
    clock.advance(60)
    [failed] = rt.resume_due()
    assert failed.failed
    assert failed.error.type == "gate_timeout"
    assert failed.error.path == ("ok?",)
    assert failed.meta["pause_kind"] == "human"
    # A decision after the timeout is too late.
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(out.token, {"approved": True})
    sid = out.session_id
    assert types(rt, sid)[-4:] == ["run.paused", "run.resumed", "node.failed", "run.failed"]
    view = rt.session(sid)
    assert view.status == "failed" and view.state == view.derive_state()
    # The failed session can be asked again: the gate pauses anew with a fresh deadline.
    again = rt.resume(failed.token)
    assert again.paused and again.pause.expires_at == clock.now() + timedelta(seconds=60)
    assert rt.resume(again.token, True).output == "after"
    assert ran == ["before"]  # the completed step never ran again


def test_a_decision_before_the_deadline_wins_and_the_timer_does_nothing(
    rt: Runtime, clock: ManualClock
) -> None:
    out = rt.run(Flow("f", [Gate("g", timeout=60), lambda ctx: ctx.prev["approved"]]))
    assert rt.resume(out.token, {"approved": False, "by": "ann"}).output is False
    before = types(rt, out.session_id)
    clock.advance(3600)
    assert rt.resume_due() == []
    assert types(rt, out.session_id) == before
    assert rt.session(out.session_id).status == "completed"


def test_two_gates_with_timers_in_one_run(rt: Runtime, clock: ManualClock) -> None:
    flow = Flow(
        "f",
        [
            Gate("first", timeout=10, on_timeout="approve"),
            Gate("second", timeout=20, on_timeout="reject"),
            lambda ctx: "never",
        ],
    )
    out = rt.run(flow)
    assert out.pause.path == ("first",)
    clock.advance(10)
    [second] = rt.resume_due()
    assert second.paused and second.pause.path == ("second",)
    assert second.pause.expires_at == clock.now() + timedelta(seconds=20)
    assert second.token != out.token
    clock.advance(19)
    assert rt.resume_due() == []
    clock.advance(1)
    [failed] = rt.resume_due()
    assert failed.error.type == "gate_timeout" and failed.error.path == ("second",)
    assert rt.session(out.session_id).state.outputs["first"] == {"approved": True, "by": "timeout"}


def test_a_timer_after_the_run_was_cancelled_is_a_no_op(rt: Runtime, clock: ManualClock) -> None:
    flows = [Flow("a", [Sleep("s", 30)]), Flow("b", [Gate("g", timeout=30)])]
    outs = [rt.run(f) for f in flows]
    for out in outs:
        rt.cancel(out.token)
    before = {o.session_id: types(rt, o.session_id) for o in outs}
    clock.advance(31)
    assert rt.resume_due() == []
    for out in outs:
        assert rt.session(out.session_id).status == "cancelled"
        assert types(rt, out.session_id) == before[out.session_id]


def test_gates_with_timeouts_inside_a_foreach(rt: Runtime, clock: ManualClock) -> None:
    flow = Flow(
        "f",
        [
            ForEach(
                "items",
                [1, 2, 3],
                [
                    Gate("ok", timeout=5, on_timeout="approve"),
                    lambda ctx: ctx.item * 10,
                ],
            )
        ],
    )
    out = rt.run(flow)
    for index in range(3):
        assert out.paused and out.pause.path == ("items", index, "ok")
        clock.advance(5)
        [out] = rt.resume_due()
    assert out.ok and out.output == [10, 20, 30]


# -- Wait timeouts ----------------------------------------------------------------------------


def test_wait_timeout_fails_with_wait_timeout(rt: Runtime, clock: ManualClock) -> None:
    out = rt.run(Flow("f", [Wait("batch", reason="results", timeout=120)]))
    assert out.pause.kind == "external"
    clock.advance(120)
    [failed] = rt.resume_due()
    assert failed.error.type == "wait_timeout" and failed.meta["pause_kind"] == "external"


def test_wait_timeout_with_a_default_value(rt: Runtime, clock: ManualClock) -> None:
    flow = Flow("f", [Wait("batch", timeout=120, on_timeout={"results": []}), lambda ctx: ctx.prev])
    assert rt.run(flow).paused
    clock.advance(121)
    [done] = rt.resume_due()
    assert done.ok and done.output == {"results": []}


def test_a_wait_without_timeout_is_never_due(rt: Runtime, clock: ManualClock) -> None:
    out = rt.run(Flow("f", [Wait("w")]))
    clock.advance(10**8)
    assert rt.resume_due() == []
    assert rt.session(out.session_id).status == "paused"


def test_resume_due_leaves_sessions_of_unknown_flows(clock: ManualClock, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    out = Runtime(store=url, clock=clock).run(Flow("f", [Sleep("s", 1)]))
    clock.advance(2)
    stranger = Runtime(store=url, clock=clock)
    assert stranger.resume_due() == []
    assert stranger.session(out.session_id).status == "paused"
    knows = Runtime(store=url, clock=clock, flows=[Flow("f", [Sleep("s", 1)])])
    [done] = knows.resume_due()
    assert done.ok


def test_resume_due_limit_is_checked(rt: Runtime) -> None:
    with pytest.raises(tarry.InvalidArgument):
        rt.resume_due(limit=0)


# -- many callers -----------------------------------------------------------------------------


def test_many_callers_of_resume_due_resume_each_session_once(tmp_path: Path) -> None:
    clock = ManualClock()
    url = f"sqlite:///{tmp_path / 'r.db'}"
    flow = Flow("f", [Sleep("s", 10), lambda ctx: "done"])
    starter = Runtime(store=url, clock=clock)
    sids = [starter.run(flow).session_id for _ in range(40)]
    clock.advance(10)
    runtimes = [Runtime(store=url, clock=clock, flows=[flow]) for _ in range(4)]
    results: list[tarry.Outcome] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(runtimes))

    def work(rt: Runtime) -> None:
        barrier.wait()
        while True:
            got = rt.resume_due(limit=7)
            with lock:
                results.extend(got)
            if not got and not starter.store.due(clock.now()):
                return

    threads = [threading.Thread(target=work, args=(r,)) for r in runtimes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(o.session_id for o in results) == sorted(sids)
    assert all(o.ok for o in results)
    for sid in sids:
        events = starter.session(sid).events()
        assert [e.type for e in events].count("run.resumed") == 1
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
