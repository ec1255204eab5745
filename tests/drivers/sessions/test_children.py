"""Child sessions: a flow started as a session of its own by a `Child` element, run by any
process sharing the store, whose end resumes its parent through the store exactly once."""

from __future__ import annotations

from typing import Any

import pytest
from tarry import (
    Child,
    ChildFailed,
    Flow,
    ForEach,
    InvalidFlow,
    InvalidResumeValue,
    Runtime,
    Wait,
)
from tarry.drivers.sessions.children import derived_id
from tarry.engine.elements.child import end_key

RUNS: list[Any] = []


def double(ctx: Any) -> Any:
    RUNS.append(ctx.input)
    return ctx.input * 2


def boom(ctx: Any) -> Any:
    raise ValueError("nope")


INNER = Flow("inner", [double])
OUTER = Flow("outer", [Child("c", INNER, input=lambda ctx: ctx.input), lambda ctx: ctx.prev + 1])


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RUNS.clear()


def test_a_child_runs_in_a_worker_round_and_its_end_resumes_the_parent(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(OUTER, 5, session_id="p")
    # The parent waits, holding nothing; the child is stored queued, not run yet.
    assert out.paused and out.pause.reason == "child"
    assert out.pause.payload == {"session_id": "p.c", "flow": "inner"}
    assert RUNS == []
    child = rt.session("p.c")
    assert child.status == "paused" and child.parent == "p"
    assert rt.session("p").children == ["p.c"]
    done = rt.resume_due()
    assert [(o.session_id, o.output) for o in done] == [("p.c", 10)]
    assert done[0].meta["trigger"] == "child"
    parent = rt.session("p")
    assert parent.status == "completed" and parent.state.output == 11
    assert RUNS == [5]
    assert rt.mailbox() == []  # the end was consumed by the parent's resume
    assert parent.derive_state() == parent.state


def test_another_runtime_on_the_store_runs_the_child(store: Any) -> None:
    parent_rt = Runtime(store=store)
    assert parent_rt.run(OUTER, 2, session_id="p").paused
    worker = Runtime(store=store, flows=[OUTER])  # knows the parent's flow: the child's too
    assert [o.output for o in worker.resume_due()] == [4]
    assert parent_rt.session("p").state.output == 5


def test_a_foreach_of_children_each_run_once(store: Any) -> None:
    fan = Flow(
        "fan",
        [
            ForEach(
                "items",
                [1, 2, 3, 4],
                Child("c", INNER, input=lambda ctx: ctx.item),
                concurrency=None,
            )
        ],
    )
    rt = Runtime(store=store)
    out = rt.run(fan, None, session_id="f")
    assert out.paused and len(out.pauses) == 4
    rt.resume_due()
    view = rt.session("f")
    assert view.status == "completed" and view.state.output == [2, 4, 6, 8]
    assert sorted(RUNS) == [1, 2, 3, 4]
    assert view.children == [f"f.items.{i}.c" for i in range(4)]
    assert rt.mailbox() == []


def test_a_failed_child_fails_the_element_with_child_failed(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(Flow("outer", [Child("c", Flow("bad", [boom]))]), None, session_id="q")
    rt.resume_due()
    view = rt.session("q")
    assert view.status == "failed"
    assert view.state.error.type == "ChildFailed" and not view.state.error.retryable
    assert "ValueError: nope" in view.state.error.message
    assert rt.session("q.c").status == "failed"
    assert issubclass(ChildFailed, Exception)


FLAKY = {"fail": True}


def flaky(ctx: Any) -> Any:
    if FLAKY["fail"]:
        raise ValueError("not yet")
    return ctx.input * 3


def test_resuming_a_failed_child_then_its_parent_goes_on_with_the_childs_output(
    store: Any,
) -> None:
    """The docs' way on after a failed child: resume the child, then the parent. The parent's
    element reads the child's end again (it was failed when the parent last ran it)."""
    FLAKY["fail"] = True
    inner = Flow("flaky_inner", [flaky])
    outer = Flow(
        "flaky_outer", [Child("c", inner, input=lambda ctx: ctx.input), lambda ctx: ctx.prev * 2]
    )
    rt = Runtime(store=store)
    rt.run(outer, 2, session_id="r")
    rt.resume_due()
    assert rt.session("r").status == "failed"
    assert rt.session("r").state.error.type == "ChildFailed"
    FLAKY["fail"] = False
    child = rt.session("r.c").outcome
    assert rt.resume(child.token).output == 6
    out = rt.resume(rt.session("r").outcome.token)
    assert out.status == "ok" and out.output == 12, out.error
    assert rt.mailbox() == []  # the child's second end was taken by the parent's resume
    view = rt.session("r")
    assert view.derive_state() == view.state


def test_a_parent_resumed_while_its_child_still_fails_fails_again(store: Any) -> None:
    FLAKY["fail"] = True
    outer = Flow("flaky_outer2", [Child("c", Flow("flaky_inner2", [flaky]))])
    rt = Runtime(store=store)
    rt.run(outer, 1, session_id="t")
    rt.resume_due()
    out = rt.resume(rt.session("t").outcome.token)
    assert out.status == "error" and out.error.type == "ChildFailed"
    assert rt.session("t.c").status == "failed"


def test_a_parent_resumed_after_its_child_was_resumed_and_paused_waits_again(
    store: Any,
) -> None:
    outer = Flow("gate_outer", [Child("c", Flow("gate_inner", [boom_once, Wait("w")]))])
    BOOM["left"] = 1
    rt = Runtime(store=store)
    rt.run(outer, None, session_id="u")
    rt.resume_due()
    assert rt.session("u").status == "failed"
    assert rt.resume(rt.session("u.c").outcome.token).paused  # the child now waits at "w"
    again = rt.resume(rt.session("u").outcome.token)
    assert again.paused and again.pause.reason == "child"
    done = rt.resume(rt.session("u.c").outcome.token, "hi")
    assert done.output == "hi"
    view = rt.session("u")
    assert view.status == "completed" and view.state.output == "hi"


BOOM = {"left": 0}


def boom_once(ctx: Any) -> None:
    if BOOM["left"]:
        BOOM["left"] -= 1
        raise ValueError("once")


def test_a_cancelled_child_fails_the_element(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(Flow("outer", [Child("c", Flow("slow", [Wait("w")]))]), None, session_id="s")
    rt.resume_due()
    assert rt.session("s.c").status == "paused"
    rt.cancel("s.c")
    view = rt.session("s")
    assert view.status == "failed" and view.state.error.type == "child_cancelled"


def test_cancelling_the_parent_cancels_its_children(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(Flow("outer", [Child("c", Flow("slow", [Wait("w")]))]), None, session_id="r")
    rt.resume_due()
    rt.cancel("r")
    assert rt.session("r").status == "cancelled"
    assert rt.session("r.c").status == "cancelled"
    assert rt.mailbox() == []  # the child's end had nobody to go to


def test_cancelling_a_parent_cancels_a_queued_child(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(OUTER, 1, session_id="p")
    rt.cancel("p")
    assert rt.session("p.c").status == "cancelled"
    assert rt.resume_due() == []
    assert RUNS == []


def test_aborting_the_parent_aborts_a_running_child(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(Flow("outer", [Child("c", Flow("slow", [Wait("w")]))]), None, session_id="a")
    rt.abort("a")  # the parent waits, the child is queued: both stopped already
    assert rt.session("a").status == "paused"
    assert rt.session("a.c").status == "paused"


def test_a_parent_rerun_after_a_crash_takes_the_end_of_the_child_it_started() -> None:
    """The parent's process dies after it stored the child and before it saved its wait; the
    child runs and ends meanwhile (its end queued, nobody waiting). The parent, recovered,
    runs the Child again: it finds its child, takes the queued end, and the child never runs
    twice."""
    from tarry import ManualClock
    from tarry.snapshots import MemoryStore

    class Dies(MemoryStore):
        died = False

        def save(self, record: Any, expected_version: int, **kw: Any) -> int:
            if record.session_id == "p" and record.status == "paused" and not self.died:
                self.died = True
                raise KeyboardInterrupt  # the process dies before its write
            return super().save(record, expected_version, **kw)

    store = Dies()
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock, lease=5)
    with pytest.raises(KeyboardInterrupt):
        rt.run(OUTER, 5, session_id="p")
    assert rt.session("p").status == "running"
    worker = Runtime(store=store, clock=clock, flows=[OUTER])
    worker.resume_due()  # the child runs; its end is queued for nobody yet
    assert rt.session("p.c").status == "completed"
    assert [m.key for m in rt.mailbox()] == [end_key("p.c")]
    clock.advance(10)
    [recovered] = worker.recover()
    assert recovered.status == "ok" and recovered.output == 11
    assert RUNS == [5]
    assert rt.mailbox() == []


def test_an_explicit_child_id(store: Any) -> None:
    rt = Runtime(store=store)
    flow = Flow("named", [Child("c", INNER, input=7, session_id=lambda ctx: f"job-{ctx.input}")])
    assert rt.run(flow, "x", session_id="n").paused
    assert rt.session("job-x").parent == "n"
    rt.resume_due()
    assert rt.session("n").state.output == 14


def test_a_child_id_taken_by_another_session_fails_the_element(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(Flow("other", [Wait("w")]), None, session_id="taken")
    out = rt.run(Flow("named", [Child("c", INNER, session_id="taken")]), None, session_id="n")
    assert out.status == "error" and out.error.type == "InvalidArgument"
    assert "taken" in out.error.message


def test_a_child_whose_flow_no_runtime_knows_fails_after_one_round(store: Any) -> None:
    rt = Runtime(store=store)
    assert rt.run(OUTER, 1, session_id="p").paused
    stranger = Runtime(store=store)  # knows neither flow
    stranger.resume_due()
    assert rt.session("p.c").status == "failed"
    assert rt.session("p.c").state.error.type == "UnknownFlow"
    assert rt.session("p").status == "paused"  # the stranger cannot run the parent either
    rt.poll()  # the parent's runtime delivers the child's end to it
    view = rt.session("p")
    assert view.status == "failed" and view.state.error.type == "ChildFailed"


def test_a_parent_resumed_by_hand_with_a_bad_value_is_refused(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(OUTER, 1, session_id="p")
    with pytest.raises(InvalidResumeValue):
        rt.resume(out.token, "not an end")
    assert rt.session("p").status == "paused"


def test_child_needs_a_flow() -> None:
    with pytest.raises(InvalidFlow):
        Child("c", lambda ctx: 1)


def test_derived_ids_fit_a_store() -> None:
    assert derived_id("p", ("items", 3, "c")) == "p.items.3.c"
    long = derived_id("p" * 250, ("items", 3, "c"))
    assert len(long) <= 256 and long.startswith("p" * 200)
    assert end_key("p.c") == "tarry/child/p.c"


def test_async_parent_and_child(store: Any) -> None:
    import asyncio

    async def adouble(ctx: Any) -> Any:
        await asyncio.sleep(0)
        return ctx.input * 2

    async def after(ctx: Any) -> Any:
        await asyncio.sleep(0)
        return ctx.prev + 1

    inner = Flow("ainner", [adouble])
    outer = Flow("aouter", [Child("c", inner, input=4), after])
    rt = Runtime(store=store)
    out = rt.run_sync(outer, 1, session_id="ap")
    assert out.paused
    rt.resume_due()
    assert rt.session("ap").state.output == 9


def test_cancelling_a_running_parent_cancels_the_children_its_drive_started() -> None:
    """The parent's drive stores lane 0's child, then its process dies in lane 1's first step
    (durability="pause": nothing of the parent is saved). A cancel of the parent, which is
    running, is honoured when a recovered drive reaches its next checkpoint: the parent ends
    cancelled, and the child it started must end cancelled with it."""
    from tarry import ManualClock
    from tarry.snapshots import MemoryStore

    died: list[int] = []

    def dies_on_one(ctx: Any) -> Any:
        if ctx.item == 1 and not died:
            died.append(1)
            raise KeyboardInterrupt  # the process dies mid-drive
        return ctx.item

    slow = Flow("slow", [double, Wait("w")])
    fan = Flow(
        "fan_dies",
        [
            ForEach(
                "items",
                [0, 1],
                [dies_on_one, Child("c", slow, input=lambda ctx: ctx.item)],
                concurrency=None,
            )
        ],
    )
    store = MemoryStore()
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock, lease=5)
    with pytest.raises(KeyboardInterrupt):
        rt.run(fan, None, session_id="p", durability="pause")
    assert rt.session("p").status == "running"
    assert rt.session("p.items.0.c").status == "paused"  # stored queued before the crash
    after = Runtime(store=store, clock=clock, flows=[fan])
    assert after.cancel("p").meta["stop_requested"] == "cancel"
    clock.advance(10)
    after.recover()
    assert after.session("p").status == "cancelled"
    assert after.session("p.items.0.c").status == "cancelled"
    after.resume_due()
    assert RUNS == []  # nobody runs a cancelled parent's child


def test_a_parent_lists_and_cancels_a_child_started_in_a_drive_that_failed(store: Any) -> None:
    """Lane 1 stores its child; lane 0's Child fails (its id is taken), and so does the
    parent, in the same drive. The child is the parent's all the same: listed, and cancelled
    with it."""
    slow = Flow("slow", [double, Wait("w")])
    fan = Flow(
        "fan_taken",
        [
            ForEach(
                "items",
                [0, 1],
                [
                    lambda ctx: ctx.item,
                    Child(
                        "c",
                        slow,
                        input=lambda ctx: ctx.item,
                        session_id=lambda ctx: "taken" if ctx.item == 0 else None,
                    ),
                ],
                concurrency=None,
            )
        ],
    )
    rt = Runtime(store=store)
    rt.run(Flow("other", [Wait("w")]), None, session_id="taken")
    out = rt.run(fan, None, session_id="p")
    assert out.status == "error" and out.error.type == "InvalidArgument"
    assert rt.session("p.items.1.c").parent == "p"
    assert rt.session("p").children == ["p.items.1.c"]
    rt.cancel("p")
    assert rt.session("p.items.1.c").status == "cancelled"


FAN = Flow(
    "fan_of_children",
    [
        ForEach(
            "items",
            lambda ctx: list(range(ctx.input)),
            Child("c", INNER, input=lambda ctx: ctx.item),
            concurrency=None,
        ),
        lambda ctx: sum(ctx.prev),
    ],
)


def _parent_drives(rt: Runtime, sid: str) -> list[str]:
    """The types of the events that end each of the parent's drives after its first one (a
    drive pauses on its new waits with a run.paused each: counted once)."""
    events = [e.type for e in rt.session(sid).events()]
    ends: list[str] = []
    tail = events[events.index("run.resumed") :]
    for before, now in zip(tail, tail[1:], strict=False):
        if now in ("run.paused", "run.completed") and before != now:
            ends.append(now)
    return ends


def test_a_round_wakes_a_parent_once_with_the_ends_of_the_children_it_ran(store: Any) -> None:
    rt = Runtime(store=store)
    assert rt.run(FAN, 6, session_id="f").paused
    done = rt.resume_due()
    # Each child ran in the round; their parent was resumed once, after the page, with all
    # six ends (a run.resumed each), and completed: no pause between them.
    assert sorted(o.session_id for o in done) == [f"f.items.{i}.c" for i in range(6)]
    view = rt.session("f")
    assert view.status == "completed" and view.state.output == 30
    assert _parent_drives(rt, "f") == ["run.completed"]
    assert [e.type for e in view.events()].count("run.resumed") == 6
    assert rt.mailbox() == []
    assert view.derive_state() == view.state


def test_a_round_of_a_page_of_children_wakes_the_parent_once_per_page(store: Any) -> None:
    from tarry.drivers.rounds.timers import PAGE

    rt = Runtime(store=store)
    assert rt.run(FAN, PAGE + 3, session_id="f").paused
    rt.resume_due()
    view = rt.session("f")
    assert view.status == "completed" and view.state.output == sum(range(PAGE + 3)) * 2
    # The first page's ends in one resume (it pauses again: three children wait), then the
    # second page's.
    assert _parent_drives(rt, "f") == ["run.paused", "run.completed"]
    assert view.derive_state() == view.state


def test_a_child_resumed_by_hand_still_wakes_its_parent_at_once(store: Any) -> None:
    gate = Flow("gated", [Wait("go", key=lambda ctx: f"go-{ctx.input}"), double])
    outer = Flow("outer_gated", [Child("c", gate, input=lambda ctx: ctx.input)])
    rt = Runtime(store=store)
    assert rt.run(outer, 3, session_id="g").paused
    rt.resume_due()  # the child starts, and waits on its key
    assert rt.session("g.c").status == "paused" and rt.session("g").status == "paused"
    rt.deliver("go-3", None)  # no round: the child's end resumes its parent in this call
    assert rt.session("g").status == "completed" and rt.session("g").state.output == 6


def test_a_busy_parent_keeps_the_ends_of_a_round_queued_without_trying_each(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = Runtime(store=store)
    out = rt.run(FAN, 3, session_id="f")
    # Another process resumes a wait of the parent's (here: its token used in the store), so
    # the parent runs while the round ends its children.
    other = next(p for p in out.pauses if p.payload["session_id"] == "f.items.2.c")
    assert rt.store.consume_token(other.token)
    asked: list[str] = []
    find_token = rt.store.find_token
    monkeypatch.setattr(rt.store, "find_token", lambda t: asked.append(t) or find_token(t))
    done = rt.resume_due()
    assert sorted(o.session_id for o in done) == [f"f.items.{i}.c" for i in range(3)]
    assert rt.session("f").status == "running"
    # Their ends stay queued for the parent, and no resume was tried one end at a time.
    assert sorted(m.key for m in rt.mailbox()) == [f"tarry/child/f.items.{i}.c" for i in range(3)]
    assert asked == []


def test_a_worker_that_cannot_run_a_parent_leaves_its_ends_queued_and_goes_on(
    store: Any, caplog: Any
) -> None:
    """A worker that knows the children's flow but not the parent's runs the children; the
    parent's ends stay queued for a Runtime that knows it, and the worker's rounds go on with
    every other session (they neither fail nor stop at it), saying so once."""
    import logging

    from tarry import Sleep

    fan = Flow(
        "fan_unknown_parent",
        [ForEach("items", [1, 2], Child("c", INNER, input=lambda ctx: ctx.item), concurrency=None)],
    )
    owner = Runtime(store=store)
    assert owner.run(fan, None, session_id="up").paused
    nap = Flow("nap_other", [Sleep("s", 0), double])
    worker = Runtime(store=store, flows=[INNER, nap])
    assert worker.run(nap, 4, session_id="other").paused
    with caplog.at_level(logging.WARNING, logger="tarry"):
        for _ in range(3):
            worker.poll()
    assert worker.session("other").status == "completed"
    assert sorted(RUNS) == [1, 2, 4]
    assert worker.session("up").status == "paused"
    assert sum(m.count for m in worker.mailbox()) == 2  # the children's ends, kept
    unknown = [r for r in caplog.records if "fan_unknown_parent" in r.getMessage()]
    assert len(unknown) == 1, [r.getMessage() for r in unknown]
    owner.poll()
    view = owner.session("up")
    assert view.status == "completed" and view.state.output == [2, 4]
    assert owner.mailbox() == []


def test_a_child_failed_for_its_unknown_flow_is_logged_as_failed(store: Any, caplog: Any) -> None:
    import logging

    rt = Runtime(store=store)
    assert rt.run(OUTER, 1, session_id="lg").paused
    stranger = Runtime(store=store)
    with caplog.at_level(logging.WARNING, logger="tarry"):
        stranger.resume_due()
    said = [r.getMessage() for r in caplog.records if "lg.c" in r.getMessage()]
    assert said and all("left for a Runtime" not in s for s in said), said
    assert any("UnknownFlow" in s or "failed" in s for s in said), said
