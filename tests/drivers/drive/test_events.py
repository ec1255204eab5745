"""The event log: every element and iteration is recorded, seq is gap-free across resumes."""

from __future__ import annotations

import tarry
from tarry import Flow, ForEach, Gate, Loop, Runtime, Wait


def test_every_element_and_iteration_is_recorded_with_its_path(rt: Runtime) -> None:
    def work(ctx):
        return ctx.item * 2

    flow = Flow("ev", [ForEach("f", [1, 2], [work, Gate("g")]), lambda ctx: "end"])
    out = rt.run(flow, {"a": 1})
    out = rt.resume(out.token, True)
    out = rt.resume(out.token, True)
    events = rt.session(out.session_id).events()

    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == "run.started" and events[0].data["input"] == {"a": 1}
    assert events[-1].type == "run.completed" and events[-1].data["output"] == "end"
    kinds = [(e.type, e.path) for e in events]
    for i in (0, 1):
        assert ("container.iteration_started", ("f",)) in kinds
        assert ("node.completed", ("f", i, "work")) in kinds
        assert ("node.completed", ("f", i, "g")) in kinds
    started = [e.data for e in events if e.type == "container.iteration_started"]
    completed = [e.data for e in events if e.type == "container.iteration_completed"]
    assert started == [{"index": 0, "item": 1}, {"index": 1, "item": 2}]
    assert [d["index"] for d in completed] == [0, 1]
    assert [d["output"] for d in completed] == [{"approved": True}] * 2
    assert ("node.started", ("f",)) in kinds and ("node.completed", ("f",)) in kinds
    assert [e.type for e in events].count("run.paused") == 2
    assert [e.type for e in events].count("run.resumed") == 2
    assert all(e.at.tzinfo is not None and e.session_id == out.session_id for e in events)
    paused = next(e for e in events if e.type == "run.paused")
    assert paused.data["kind"] == "human" and paused.path == ("f", 0, "g")


def test_tokens_never_appear_in_events(rt: Runtime) -> None:
    out = rt.run(Flow("t", [Wait("w"), Wait("x")]))
    out2 = rt.resume(out.token, "v")
    blob = repr(rt.session(out.session_id).events())
    assert out.token not in blob and out2.token not in blob


def test_subscribe_sees_each_event_once_and_unsubscribes(rt: Runtime) -> None:
    seen: list[tarry.Event] = []
    stop = rt.subscribe(seen.append)
    out = rt.run(Flow("s", [Wait("w")]))
    out = rt.resume(out.token, 1)
    assert [e.seq for e in seen] == [e.seq for e in rt.session(out.session_id).events()]
    stop()
    rt.run(Flow("s2", [lambda ctx: 1]))
    assert all(e.session_id == out.session_id for e in seen)


def test_subscriber_for_one_session_and_a_failing_subscriber(rt: Runtime) -> None:
    def broken(event):
        raise RuntimeError("subscriber bug")

    rt.subscribe(broken)
    mine: list[tarry.Event] = []
    rt.subscribe(mine.append, session_id="mine")
    rt.run(Flow("other", [lambda ctx: 1]))
    out = rt.run(Flow("m", [lambda ctx: 2]), session_id="mine")
    assert out.ok  # a subscriber's exception does not disturb the run
    assert mine and {e.session_id for e in mine} == {"mine"}


def test_pause_partial_holds_completed_top_level_outputs(rt: Runtime) -> None:
    flow = Flow(
        "p", [lambda ctx: "one", Loop("l", Wait("w"), until=lambda ctx: True, max_iterations=2)]
    )
    out = rt.run(flow)
    assert out.pause.partial == {"<lambda>": "one"}
    assert out.pause.kind == "external" and out.meta == {"pause_kind": "external"}


def test_context_fields(rt: Runtime) -> None:
    seen: dict = {}

    def look(ctx):
        seen.update(
            input=ctx.input,
            item=ctx.item,
            index=ctx.index,
            iteration=ctx.iteration,
            prev=ctx.prev,
            path=ctx.path,
            attempt=ctx.attempt,
            sid=ctx.session_id,
            key=ctx.idempotency_key,
            first=ctx.outputs["first"],
        )
        ctx.state["seen"] = ctx.state.get("seen", 0) + 1
        ctx.metric("tokens", 5)
        return "ok"

    flow = Flow("ctx", [tarry.step(lambda ctx: "first!", "first"), ForEach("f", ["x"], look)])
    out = rt.run(flow, 42, session_id="sess")
    assert out.ok
    assert seen["input"] == 42 and seen["item"] == "x" and seen["index"] == 0
    assert seen["iteration"] == 0 and seen["prev"] == "x" and seen["path"] == ("f", 0, "look")
    assert seen["attempt"] == 1 and seen["sid"] == "sess" and seen["first"] == "first!"
    assert len(seen["key"]) == 32
    state = rt.session("sess").state
    assert state.shared == {"seen": 1} and state.metrics == {"tokens": 5}


def test_state_changes_of_a_paused_or_failed_step_are_discarded(rt: Runtime) -> None:
    def risky(ctx):
        ctx.state["touched"] = True
        return ctx.interrupt("wait")

    out = rt.run(Flow("disc", [risky]))
    assert rt.session(out.session_id).state.shared == {}
    rt.resume(out.token, 1)
    assert rt.session(out.session_id).state.shared == {"touched": True}


def test_module_level_run_and_resume() -> None:
    flow = Flow("module", [Gate("g"), lambda ctx: ctx.prev["approved"]])
    out = tarry.run(flow)
    assert out.paused
    assert tarry.resume(out.token, True, flow=flow).output is True
    assert tarry.default_runtime().session(out.session_id).status == "completed"


def test_sessions_lists_newest_first_with_filters(rt: Runtime) -> None:
    from tarry import ManualClock

    clock = ManualClock()
    rt = Runtime(clock=clock)
    a = Flow("a", [Wait("w")])
    b = Flow("b", [lambda ctx: 1])
    ids = []
    for flow in (a, b, a):
        clock.advance(1)
        ids.append(rt.run(flow).session_id)
    assert [s.session_id for s in rt.sessions()] == ids[::-1]
    assert [s.session_id for s in rt.sessions(flow="a")] == [ids[2], ids[0]]
    assert [s.session_id for s in rt.sessions(status="completed")] == [ids[1]]
    assert [s.session_id for s in rt.sessions(limit=1, offset=1)] == [ids[1]]
