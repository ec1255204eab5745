"""Aborts and resumes inside ForEach: the position is kept, completed work never runs again."""

from __future__ import annotations

import threading

from support import WAIT, resume_all
from tarry import Flow, ForEach, Gate, Runtime


def test_abort_during_item_47_stops_before_item_48(rt: Runtime) -> None:
    ran: list[int] = []

    def work(ctx):
        ran.append(ctx.item)
        if ctx.item == 47 and len(ran) == 48:
            rt.abort(ctx.session_id)
        return ctx.item * 10

    flow = Flow("batch", [ForEach("items", list(range(100)), work)])
    out = rt.run(flow)

    assert out.paused
    assert (out.pause.kind, out.pause.reason) == ("system", "aborted")
    assert out.meta["pause_kind"] == "system"
    assert ran == list(range(48))  # item 48 never started
    [frame] = rt.session(out.session_id).state.container_stack
    assert (frame.node, frame.kind) == ("items", "foreach")
    assert frame.iteration == 48
    assert frame.completed_iterations == 48

    done = rt.resume(out.token)
    assert done.ok
    assert ran == list(range(100))  # 48..99 ran once each after the resume
    assert done.output == [i * 10 for i in range(100)]


def test_abort_from_another_thread_while_a_step_blocks(rt: Runtime) -> None:
    entered, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def work(ctx):
        ran.append(ctx.item)
        if ctx.item == 47:
            entered.set()
            assert release.wait(WAIT)
        return ctx.item

    flow = Flow("threaded", [ForEach("items", list(range(100)), work)])
    result: dict = {}
    runner = threading.Thread(target=lambda: result.setdefault("out", rt.run(flow)))
    runner.start()
    assert entered.wait(WAIT)
    sid = rt.sessions(status="running")[0].session_id
    rt.abort(sid)
    release.set()
    runner.join(WAIT)
    out = result["out"]
    assert out.paused and out.pause.reason == "aborted"
    assert ran == list(range(48))
    assert rt.resume(out.token).output == list(range(100))


def test_abort_during_child_two_of_three_keeps_finished_children(rt: Runtime) -> None:
    seen: list[tuple] = []

    def first(ctx):
        seen.append(("first", ctx.index))
        return f"a{ctx.index}"

    def second(ctx):
        seen.append(("second", ctx.index))
        if ctx.index == 5 and ("second", 5) not in seen[:-1]:
            rt.abort(ctx.session_id)
        return f"b{ctx.index}"

    def third(ctx):
        seen.append(("third", ctx.index))
        return (ctx.outputs["first"], ctx.prev, ctx.item)

    flow = Flow("three", [ForEach("items", list(range(8)), [first, second, third])])
    out = rt.run(flow)
    assert out.paused
    [frame] = rt.session(out.session_id).state.container_stack
    assert frame.iteration == 5 and frame.child == 2
    assert frame.child_outputs == {"first": "a5", "second": "b5"}

    before = len(seen)
    done = rt.resume(out.token)
    assert done.ok
    after = seen[before:]
    assert after[0] == ("third", 5)  # only child 3 of iteration 5, then 6..
    assert after[1:] == [(n, i) for i in (6, 7) for n in ("first", "second", "third")]
    assert done.output[5] == ("a5", "b5", 5)  # restored outputs reach ctx.outputs / ctx.prev
    assert done.output == [(f"a{i}", f"b{i}", i) for i in range(8)]


def test_nested_foreach_pause_and_resume(rt: Runtime) -> None:
    ran: list[tuple[int, int]] = []

    def inner_step(ctx):
        pos = (ctx.state.get("outer", -1), ctx.index)
        ran.append(pos)
        if pos == (1, 2):  # pauses the first time, returns the resume value the second
            return ctx.interrupt("check cell", kind="human")
        return ctx.item

    def mark_outer(ctx):
        ctx.state["outer"] = ctx.index
        return ctx.index

    flow = Flow(
        "grid",
        [
            ForEach(
                "outer",
                [0, 1, 2],
                [
                    mark_outer,
                    ForEach("inner", lambda ctx: [ctx.item * 10 + j for j in range(5)], inner_step),
                ],
            )
        ],
    )
    out = rt.run(flow, {"grid": 1})
    assert out.paused and out.pause.path == ("outer", 1, "inner", 2, "inner_step")
    stack = rt.session(out.session_id).state.container_stack
    assert [(f.node, f.iteration) for f in stack] == [("outer", 1), ("inner", 2)]

    count = len(ran)
    done = rt.resume(out.token, "ok")
    assert done.ok
    # the paused step re-runs with the value; then inner 3-4; then outer 2 with inner 0-4
    assert ran[count:] == [(1, 2), (1, 3), (1, 4)] + [(2, j) for j in range(5)]
    assert done.output == [
        [i * 10 + j if (i, j) != (1, 2) else "ok" for j in range(5)] for i in range(3)
    ]


def test_three_levels_deep(rt: Runtime) -> None:
    runs: dict[tuple, int] = {}

    def leaf(ctx):
        key = ctx.path
        runs[key] = runs.get(key, 0) + 1
        return ctx.item

    flow = Flow(
        "deep",
        [
            ForEach(
                "a",
                [0, 1],
                ForEach("b", [0, 1, 2], ForEach("c", [0, 1], [leaf, Gate("g", "ok?")])),
            )
        ],
    )
    out = rt.run(flow)
    assert out.paused
    stack = rt.session(out.session_id).state.container_stack
    assert [f.node for f in stack] == ["a", "b", "c"]
    out = resume_all(rt, out, True)
    assert out.ok
    assert len(runs) == 2 * 3 * 2 and set(runs.values()) == {1}  # every leaf exactly once


def test_gate_in_each_of_many_iterations_each_resume_runs_once(rt: Runtime) -> None:
    count = {"n": 0}

    def work(ctx):
        count["n"] += 1
        return ctx.item

    flow = Flow("gates", [ForEach("t", list(range(20)), [work, Gate("approve")])])
    out = rt.run(flow)
    pauses = 0
    while out.paused:
        pauses += 1
        out = rt.resume(out.token, {"approved": True, "by": "ann"})
    assert pauses == 20 and count["n"] == 20
    assert out.output == [{"approved": True, "by": "ann"}] * 20


def test_empty_foreach_completes(rt: Runtime) -> None:
    flow = Flow("empty", [ForEach("none", [], lambda ctx: 1 / 0), lambda ctx: ("after", ctx.prev)])
    out = rt.run(flow)
    assert out.ok and out.output == ("after", [])


def test_an_abort_too_late_for_this_drive_does_not_stop_the_next(rt: Runtime) -> None:
    asked: list[int] = []

    def ask(ctx):
        if not asked:
            asked.append(1)
            rt.abort(ctx.session_id)  # too late: this step pauses before any checkpoint
        return ctx.interrupt("question")

    out = rt.run(Flow("late", [ask, Gate("g"), lambda ctx: "after"]))
    assert out.paused and out.pause.reason == "question"
    out = rt.resume(out.token, "answer")
    assert out.paused and out.pause.path == ("g",)
    done = rt.resume(out.token, True)
    assert done.ok and done.output == "after"
