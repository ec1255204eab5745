"""A Flow inside another flow's body: it runs inline, in the same session, as a container whose
path prefixes its elements'; it pauses, resumes, recovers and derives like any container."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tarry import (
    Branch,
    Flow,
    ForEach,
    Gate,
    Graph,
    InvalidFlow,
    Loop,
    ManualClock,
    Parallel,
    Route,
    Runtime,
    Wait,
    step,
)
from tarry.snapshots import MemoryStore, SQLiteStore


class Crash(BaseException):
    """Stands for the process dying: nothing in tarry catches it."""


def plus(n: int, name: str) -> Any:
    return step(lambda ctx: ctx.prev + n, name)


def outer_with_gate(ran: list[str] | None = None) -> Flow:
    def s1(ctx):
        if ran is not None:
            ran.append("s1")
        return ctx.prev + 1

    inner = Flow("inner", [step(s1, "s1"), Gate("ok"), step(lambda ctx: ctx.outputs["s1"], "s2")])
    return Flow("outer", [plus(10, "a"), inner, plus(100, "b")])


def check_state(rt: Runtime, session_id: str) -> None:
    view = rt.session(session_id)
    assert view.derive_state() == view.state


def resume_all(rt: Runtime, out: Any, value: Any = True) -> Any:
    while out.paused:
        out = rt.resume(out.token, value)
    return out


def test_a_nested_flow_runs_inline_and_hands_on_its_last_output() -> None:
    inner = Flow("inner", [plus(1, "s1"), plus(2, "s2")])
    flow = Flow("outer", [plus(10, "a"), inner, plus(100, "b")])
    rt = Runtime()
    out = rt.run(flow, 0)
    assert out.ok and out.output == 113
    events = [(e.type, e.path) for e in rt.session(out.session_id).events()]
    assert ("node.started", ("inner",)) in events
    assert ("node.started", ("inner", "s1")) in events
    assert events.index(("node.completed", ("inner", "s2"))) < events.index(
        ("node.completed", ("inner",))
    )
    [started] = [
        e
        for e in rt.session(out.session_id).events()
        if e.type == "node.started" and e.path == ("inner",)
    ]
    assert started.data["kind"] == "flow"
    assert rt.session(out.session_id).state.outputs == {"a": 10, "inner": 13, "b": 113}
    check_state(rt, out.session_id)


def test_the_context_inside_a_nested_flow() -> None:
    """`ctx.input` is the session's input; `ctx.prev` of its first element the element before
    it; `ctx.outputs` sees its own elements first, then the enclosing scopes; its scope closes
    when it ends; `ctx.item` is the enclosing ForEach's."""
    seen: dict[str, Any] = {}

    def look(ctx):
        seen["input"], seen["prev"], seen["item"] = ctx.input, ctx.prev, ctx.item
        seen["a"], seen["path"] = ctx.outputs["a"], ctx.path
        return "looked"

    def after(ctx):
        seen["after"] = ctx.outputs["look"]
        seen["s0"] = ctx.outputs["s0"]
        return ctx.prev

    inner = Flow("inner", [step(lambda ctx: ctx.prev * 2, "s0"), look, after])
    flow = Flow(
        "ctxs",
        [
            step(lambda ctx: "A", "a"),
            ForEach("items", [5], [inner]),
            step(lambda ctx: dict(ctx.outputs), "end"),
        ],
    )
    out = Runtime().run(flow, {"in": 1})
    assert out.ok
    assert seen == {
        "input": {"in": 1},
        "prev": 10,
        "item": 5,
        "a": "A",
        "path": ("items", 0, "inner", "look"),
        "after": "looked",
        "s0": 10,
    }
    assert set(out.output) == {"a", "items"}  # the inner flow's scope closed
    assert out.output["items"] == ["looked"]


@pytest.mark.parametrize("is_async", [False, True])
def test_a_pause_inside_a_nested_flow_resumes_there(is_async: bool) -> None:
    ran: list[str] = []
    flow = outer_with_gate(ran)
    if is_async:

        async def s1(ctx):
            await asyncio.sleep(0)
            ran.append("s1")
            return ctx.prev + 1

        inner = Flow(
            "inner", [step(s1, "s1"), Gate("ok"), step(lambda ctx: ctx.outputs["s1"], "s2")]
        )
        flow = Flow("outer", [plus(10, "a"), inner, plus(100, "b")])
    rt = Runtime()
    out = rt.run_sync(flow, 0)
    assert out.paused and out.pause.path == ("inner", "ok")
    state = rt.session(out.session_id).state
    assert [(f.kind, f.path) for f in state.container_stack] == [("flow", ("inner",))]
    check_state(rt, out.session_id)
    done = rt.resume_sync(out.token, True)
    assert done.ok and done.output == 111
    assert ran == ["s1"]
    check_state(rt, out.session_id)


def test_the_gate_value_flows_on_and_no_step_runs_again() -> None:
    ran: list[str] = []
    inner = Flow(
        "inner",
        [
            step(lambda ctx: ran.append("s1") or ctx.prev + 1, "s1"),
            Gate("ok"),
            step(lambda ctx: ctx.outputs["s1"], "s2"),
        ],
    )
    flow = Flow("outer", [plus(10, "a"), inner, plus(100, "b")])
    rt = Runtime()
    out = rt.run(flow, 0)
    assert out.paused and out.pause.path == ("inner", "ok")
    done = rt.resume(out.token, True)
    assert done.ok and done.output == 111 and ran == ["s1"]
    check_state(rt, out.session_id)


def test_resume_after_decoding_in_another_runtime(tmp_path) -> None:
    ran: list[str] = []
    path = tmp_path / "nested.db"
    out = Runtime(store=SQLiteStore(path)).run(outer_with_gate(ran), 0)
    assert out.paused
    other = Runtime(store=SQLiteStore(path), flows=[outer_with_gate(ran)])
    done = other.resume(out.token, True)
    assert done.ok and done.output == 111 and ran == ["s1"]
    check_state(other, out.session_id)


def test_nested_flows_in_nested_flows_pause_and_resume() -> None:
    deepest = Flow("c", [plus(1, "c1"), Wait("g"), plus(2, "c2")])
    middle = Flow("b", [plus(10, "b1"), deepest, Wait("w")])
    flow = Flow("a", [middle, plus(100, "a2")])
    rt = Runtime(store=MemoryStore())
    out = rt.run(flow, 0)
    assert out.paused and out.pause.path == ("b", "c", "g")
    stack = rt.session(out.session_id).state.container_stack
    assert [f.path for f in stack] == [("b",), ("b", "c")]
    check_state(rt, out.session_id)
    out = rt.resume(out.token, 1)
    assert out.paused and out.pause.path == ("b", "w")
    check_state(rt, out.session_id)
    done = rt.resume(out.token, 5)
    assert done.ok and done.output == 105
    check_state(rt, out.session_id)


def test_a_nested_flow_in_each_container() -> None:
    inner = Flow("inner", [step(lambda ctx: 1, "s1"), Wait("ok")])
    flow = Flow(
        "every",
        [
            ForEach("fe", [1, 2], [inner]),
            Loop("lp", [inner], until=lambda ctx: True, max_iterations=2),
            Branch("br", lambda ctx: True, [inner], [plus(0, "other")]),
            Graph("gr", [inner], start="inner", routes={}),
            Parallel("pa", {"x": [inner], "y": [plus(1, "y1")]}),
        ],
    )
    rt = Runtime()
    out = rt.run(flow, 0)
    paths = []
    while out.paused:
        paths.append(out.pause.path)
        check_state(rt, out.session_id)
        out = rt.resume(out.token, 7)
    assert out.ok
    assert paths == [
        ("fe", 0, "inner", "ok"),
        ("fe", 1, "inner", "ok"),
        ("lp", 0, "inner", "ok"),
        ("br", "inner", "ok"),
        ("gr", 0, "inner", "ok"),
        ("pa", "x", "inner", "ok"),
    ]
    assert out.output == {"x": 7, "y": 8}
    check_state(rt, out.session_id)


def test_a_nested_flow_in_a_concurrent_foreach_pauses_each_lane() -> None:
    inner = Flow(
        "inner",
        [
            step(lambda ctx: ctx.item * 10, "s1"),
            Wait("ok"),
            step(lambda ctx: ctx.outputs["s1"] + ctx.prev, "s2"),
        ],
    )
    flow = Flow("lanes", [ForEach("items", [0, 1, 2, 3], [inner], concurrency=None)])
    rt = Runtime()
    out = rt.run(flow)
    assert out.paused
    pauses = sorted(p.path for p in out.pauses)
    assert pauses == [("items", i, "inner", "ok") for i in range(4)]
    check_state(rt, out.session_id)
    tokens = {p.path[1]: p.token for p in out.pauses}
    for i in (2, 0, 3):
        mid = rt.resume(tokens[i], i)
        assert mid.paused
        check_state(rt, out.session_id)
    done = rt.resume(tokens[1], 1)
    assert done.ok and done.output == [0, 11, 22, 33]
    check_state(rt, out.session_id)


def test_resume_many_inside_nested_flows_in_lanes() -> None:
    inner = Flow("inner", [Wait("ok"), step(lambda ctx: ctx.prev + ctx.item, "s")])
    flow = Flow("many", [ForEach("items", [1, 2, 3], [inner], concurrency=2)])
    rt = Runtime()
    out = rt.run(flow)
    while out.paused:
        [out] = rt.resume_many({p.token: 100 for p in out.pauses})
        check_state(rt, out.session_id)
    assert out.ok and out.output == [101, 102, 103]


def test_a_failure_inside_a_nested_flow_is_retried_and_skipped() -> None:
    calls: list[int] = []

    def flaky(ctx):
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first")
        return "fixed"

    def broken(ctx):
        raise RuntimeError("always")

    inner = Flow("inner", [step(flaky, "flaky"), step(broken, "broken"), plus(1, "after")])
    flow = Flow("fails", [inner])
    rt = Runtime()
    out = rt.run(flow, 0)
    assert out.failed and out.error.path == ("inner", "flaky")
    check_state(rt, out.session_id)
    out = rt.resume(out.token)
    assert out.failed and out.error.path == ("inner", "broken")
    check_state(rt, out.session_id)
    done = rt.skip(out.token, 41)
    assert done.ok and done.output == 42 and len(calls) == 2
    check_state(rt, out.session_id)


def test_an_abort_inside_a_nested_flow_stops_at_its_next_checkpoint() -> None:
    rt = Runtime()

    def first(ctx):
        rt.abort(ctx.session_id)
        return 1

    ran: list[str] = []
    inner = Flow(
        "inner", [step(first, "first"), step(lambda ctx: ran.append("second") or 2, "second")]
    )
    out = rt.run(Flow("aborts", [inner]))
    assert out.paused and out.pause.reason == "aborted" and out.pause.path == ("inner", "second")
    assert ran == []
    check_state(rt, out.session_id)
    done = rt.resume(out.token)
    assert done.ok and done.output == 2 and ran == ["second"]
    check_state(rt, out.session_id)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_recovery_after_a_crash_inside_a_nested_flow(kind: str, tmp_path) -> None:
    ran: list[int] = []

    def make(crash_at: int | None) -> Flow:
        def work(ctx):
            ran.append(ctx.item)
            if ctx.item == crash_at and ran.count(ctx.item) == 1:
                raise Crash
            return ctx.item * 3

        inner = Flow("inner", [step(work, "work"), step(lambda ctx: ctx.prev + 1, "plus")])
        return Flow("rec", [ForEach("items", list(range(6)), [inner]), lambda ctx: sum(ctx.prev)])

    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "r.db")
    clock = ManualClock()
    rt = Runtime(store=store, durability="step", clock=clock, lease=30)
    with pytest.raises(Crash):
        rt.run(make(4))
    other = Runtime(store=store, durability="step", clock=clock, flows=[make(None)])
    clock.advance(31)
    [out] = other.recover()
    assert out.ok and out.output == sum(i * 3 + 1 for i in range(6))
    assert ran == [0, 1, 2, 3, 4, 4, 5]
    check_state(other, out.session_id)


def test_durability_pause_and_step_resume_inside_a_nested_flow(tmp_path) -> None:
    for durability in ("pause", "step"):
        store = SQLiteStore(tmp_path / f"{durability}.db")
        out = Runtime(store=store, durability=durability).run(outer_with_gate(), 0)
        done = Runtime(store=store, flows=[outer_with_gate()]).resume(out.token, True)
        assert done.ok and done.output == 111


def test_a_nested_flow_as_a_graph_node_routes_by_its_last_route() -> None:
    inner = Flow(
        "decide",
        [
            plus(1, "inc"),
            step(lambda ctx: Route("big" if ctx.prev > 5 else "small", ctx.prev), "route"),
        ],
    )
    graph = Graph(
        "g",
        [
            inner,
            step(lambda ctx: "big:" + str(ctx.prev), "big"),
            step(lambda ctx: "small", "small"),
        ],
        start="decide",
        routes={"decide": {"big": "big", "small": "small"}},
    )
    rt = Runtime()
    assert rt.run(Flow("routes", [graph]), 9).output == "big:10"
    assert rt.run(Flow("routes", [graph]), 1).output == "small"


# --- the flow definition -------------------------------------------------------------------


def test_find_and_order_see_through_nested_flows() -> None:
    gate = Gate("ok")
    inner = Flow("inner", [plus(1, "s1"), gate])
    flow = Flow("outer", [ForEach("items", [1], [inner]), plus(1, "b")])
    assert flow.find(("items", 3, "inner", "ok")) is gate
    assert flow.find(("items", 3, "inner")) is inner
    assert flow.order(("items", 0, "inner", "ok")) < flow.order(("b",))
    assert flow.order(("items", 0, "inner", "s1")) < flow.order(("items", 0, "inner", "ok"))


def test_the_fingerprint_follows_the_inner_flow() -> None:
    def outer(inner: Flow) -> Flow:
        return Flow("outer", [plus(1, "a"), inner])

    base = outer(Flow("inner", [plus(1, "s1")])).fingerprint
    assert outer(Flow("inner", [plus(1, "s1")])).fingerprint == base
    assert outer(Flow("inner", [plus(1, "s1"), Gate("g")])).fingerprint != base
    assert outer(Flow("inner2", [plus(1, "s1")])).fingerprint != base
    assert outer(Flow("inner", [plus(1, "s1")], version=2)).fingerprint != base


def test_a_root_flows_fingerprint_is_unchanged_by_nesting_support() -> None:
    """Sessions started before nested flows existed keep resuming: the root's description is
    what it was."""
    from tarry.engine.short_hash import short_hash

    flow = Flow("f", [plus(1, "a")], version=3)
    described = ("flow", "f", 3, tuple(e._describe() for e in flow.body))
    assert flow.fingerprint == short_hash(repr(described))


def test_a_version_on_an_inner_flow_is_accepted_and_counts_in_the_fingerprint() -> None:
    inner = Flow("inner", [plus(1, "s1")], version="v2")
    out = Runtime().run(Flow("outer", [inner]), 1)
    assert out.ok and out.output == 2


def test_one_inner_flow_twice_in_one_body_is_a_duplicate_name() -> None:
    inner = Flow("inner", [plus(1, "s1")])
    with pytest.raises(InvalidFlow, match="'inner' appears twice"):
        Flow("outer", [inner, inner])


def test_one_inner_flow_in_two_containers_runs_in_both() -> None:
    inner = Flow("inner", [plus(1, "s1"), Wait("ok")])
    flow = Flow(
        "twice",
        [
            Loop("l1", [inner], until=lambda ctx: True, max_iterations=1),
            Branch("b", lambda ctx: True, [inner]),
        ],
    )
    rt = Runtime()
    out = rt.run(flow, 0)
    assert out.pause.path == ("l1", 0, "inner", "ok")
    out = rt.resume(out.token, 5)
    assert out.pause.path == ("b", "inner", "ok")
    assert rt.resume(out.token, 6).output == 6
    assert flow.find(("l1", 0, "inner", "ok")) is flow.find(("b", "inner", "ok"))


def test_a_flow_that_contains_itself_is_refused() -> None:
    a = Flow("a", [plus(1, "s1")])
    b = Flow("b", [a])
    a.body = (b,)  # only a body changed after the fact can close a cycle
    with pytest.raises(InvalidFlow, match="contains itself"):
        Flow("top", [a])
    loop = Loop("l", [plus(1, "s")], until=lambda ctx: True, max_iterations=1)
    c = Flow("c", [loop])
    loop.body = (c,)
    with pytest.raises(InvalidFlow, match="contains itself"):
        Flow("top", [c])


def test_a_changed_inner_flow_is_refused_on_resume_with_a_clear_reason() -> None:
    """allow_changed accepts a repaired flow only where the state fits it: a flow frame where
    the new flow has a Loop is an inconsistency, not a silent restart."""
    from tarry import FlowMismatch

    store = MemoryStore()
    out = Runtime(store=store).run(outer_with_gate(), 0)
    changed = Flow(
        "outer",
        [
            plus(10, "a"),
            Loop("inner", [Gate("ok")], until=lambda ctx: True, max_iterations=1),
            plus(100, "b"),
        ],
    )
    with pytest.raises(FlowMismatch, match="the flow has a loop there"):
        Runtime(store=store, flows=[changed]).resume(
            out.token, True, flow=changed, allow_changed=True
        )
