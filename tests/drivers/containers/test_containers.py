"""Loop, Branch and Graph: each pauses and resumes at the right place."""

from __future__ import annotations

from typing import Any

from support import resume_all
from tarry import Branch, Flow, ForEach, Gate, Graph, Loop, Route, Runtime, Sleep, Wait, step


def test_loop_coder_reviewer_pauses_between_iterations_and_resumes_there(rt: Runtime) -> None:
    log: list[tuple[str, int]] = []

    def coder(ctx):
        log.append(("coder", ctx.iteration))
        feedback = ctx.prev if ctx.iteration else None
        return {"draft": ctx.iteration, "after": feedback}

    def reviewer(ctx):
        log.append(("reviewer", ctx.iteration))
        if ctx.iteration == 1:
            rt.abort(ctx.session_id)  # stop between iteration 1 and 2
        return {"approved": ctx.iteration == 3, "draft": ctx.prev["draft"]}

    flow = Flow(
        "review",
        [
            Loop(
                "rounds",
                [coder, reviewer],
                until=lambda ctx: ctx.prev["approved"],
                max_iterations=10,
            )
        ],
    )
    out = rt.run(flow)
    assert out.paused and out.pause.reason == "aborted"
    [frame] = rt.session(out.session_id).state.container_stack
    assert (frame.kind, frame.iteration, frame.completed_iterations) == ("loop", 2, 2)
    done = rt.resume(out.token)
    assert done.ok
    assert log == [(n, i) for i in range(4) for n in ("coder", "reviewer")]
    assert done.output == {"approved": True, "draft": 3}


def test_loop_sees_previous_iteration_through_prev_and_outputs(rt: Runtime) -> None:
    def grow(ctx):
        before = ctx.outputs.get("grow", 0)
        return before + 1

    flow = Flow("count", [Loop("l", grow, until=lambda ctx: ctx.prev >= 5, max_iterations=100)])
    assert rt.run(flow).output == 5


def test_loop_stops_at_max_iterations_with_last_output(rt: Runtime) -> None:
    flow = Flow(
        "cap", [Loop("l", lambda ctx: ctx.iteration, until=lambda ctx: False, max_iterations=3)]
    )
    assert rt.run(flow).output == 2


def test_loop_pause_inside_an_iteration_resumes_mid_body(rt: Runtime) -> None:
    runs: list[tuple[str, int]] = []

    def write(ctx):
        runs.append(("write", ctx.iteration))
        return ctx.iteration

    flow = Flow(
        "gated",
        [Loop("l", [write, Gate("ok")], until=lambda ctx: ctx.prev["approved"], max_iterations=5)],
    )
    out = rt.run(flow)
    out = rt.resume(out.token, False)
    out = rt.resume(out.token, {"approved": True})
    assert out.ok and out.output == {"approved": True}
    assert runs == [("write", 0), ("write", 1)]


def _graph_flow(log: list[str]) -> Flow:
    def draft(ctx):
        log.append("draft")
        return Route("review", (ctx.prev or 0) + 1)

    def review(ctx):
        log.append("review")
        decision = ctx.interrupt("approve draft?", payload={"draft": ctx.prev})
        return Route("approve" if decision else "revise", ctx.prev)

    def publish(ctx):
        log.append("publish")
        return f"published v{ctx.prev}"

    return Flow(
        "pocket",
        [
            Graph(
                "g",
                [draft, review, publish],
                start="draft",
                routes={
                    "draft": {"review": "review"},
                    "review": {"approve": "publish", "revise": "draft"},
                    "publish": {"default": None},
                },
            )
        ],
    )


def test_graph_routing_resumes_at_the_right_node(rt: Runtime) -> None:
    log: list[str] = []
    out = rt.run(_graph_flow(log))
    assert out.paused and out.pause.path == ("g", 1, "review")
    assert out.pause.payload == {"draft": 1}
    out = rt.resume(out.token, False)  # revise: back to draft
    assert out.paused and out.pause.path == ("g", 3, "review")
    [frame] = rt.session(out.session_id).state.container_stack
    assert frame.selected == "review" and frame.completed_iterations == 3
    out = rt.resume(out.token, True)
    assert out.ok and out.output == "published v2"
    # every node ran once per visit; the paused review re-ran once per resume
    assert log == ["draft", "review", "review", "draft", "review", "review", "publish"]


def test_graph_abort_between_nodes_keeps_the_actions_taken(rt: Runtime) -> None:
    log: list[str] = []

    def a(ctx):
        log.append("a")
        rt.abort(ctx.session_id)
        return Route("left", 1)

    def b(ctx):
        log.append("b")
        return ctx.prev + 1

    flow = Flow("ab", [Graph("g", [a, b], start="a", routes={"a": {"left": "b", "right": None}})])
    out = rt.run(flow)
    assert out.paused
    [frame] = rt.session(out.session_id).state.container_stack
    assert frame.selected == "b"  # the action "left" was taken and kept
    assert rt.resume(out.token).output == 2
    assert log == ["a", "b"]


def test_graph_unknown_action_fails_and_a_repaired_flow_routes_without_rerunning(
    rt: Runtime,
) -> None:
    log: list[str] = []

    def a(ctx):
        log.append("a")
        return Route("sideways", 7)

    def b(ctx):
        return ctx.prev * 2

    broken = Flow("route", [Graph("g", [a, b], start="a", routes={"a": {"left": "b"}})])
    out = rt.run(broken)
    assert out.failed and out.error.type == "UnknownRoute" and "sideways" in out.error.message
    fixed = Flow(
        "route", [Graph("g", [a, b], start="a", routes={"a": {"left": "b", "sideways": "b"}})]
    )
    done = rt.resume(out.token, flow=fixed, allow_changed=True)
    assert done.ok and done.output == 14
    assert log == ["a"]


def test_branch_records_skipped_side_and_stack_holds_only_entered_containers(rt: Runtime) -> None:
    flow = Flow(
        "choose",
        [
            Branch(
                "big",
                when=lambda ctx: ctx.input > 10,
                then=[ForEach("each", [1, 2], [lambda ctx: ctx.item, Gate("ok")])],
                otherwise=[lambda ctx: "small"],
            )
        ],
    )
    out = rt.run(flow, 50)
    assert out.paused
    stack = rt.session(out.session_id).state.container_stack
    assert [(f.node, f.kind) for f in stack] == [("big", "branch"), ("each", "foreach")]
    assert stack[0].selected == "then"
    events = rt.session(out.session_id).events()
    skipped = [e.path for e in events if e.type == "node.skipped"]
    assert skipped == [("big", "<lambda>")]
    out = resume_all(rt, out, True)
    assert out.output == [{"approved": True}, {"approved": True}]

    small = rt.run(flow, 1)
    assert small.ok and small.output == "small"
    events = rt.session(small.session_id).events()
    skipped = [(e.path, e.data["reason"]) for e in events if e.type == "node.skipped"]
    assert skipped == [
        (("big", "each"), "branch_not_taken"),
        (("big", "each", "<lambda>"), "upstream_unreachable"),
        (("big", "each", "ok"), "upstream_unreachable"),
    ]
    completed = [e for e in events if e.type == "node.completed" and e.path == ("big",)]
    assert completed[0].data["selected"] == "otherwise"


def test_branch_without_otherwise_outputs_none(rt: Runtime) -> None:
    flow = Flow("maybe", [Branch("b", when=lambda ctx: False, then=lambda ctx: 1)])
    assert rt.run(flow).output is None


def test_foreach_items_from_an_output_name_and_from_a_callable(rt: Runtime) -> None:
    def load(ctx):
        return ["x", "y"]

    flow = Flow(
        "names",
        [
            load,
            ForEach("by_name", "load", lambda ctx: ctx.item.upper()),
            ForEach("by_fn", lambda ctx: ctx.outputs["by_name"], lambda ctx: ctx.item * 2),
        ],
    )
    assert rt.run(flow).output == ["XX", "YY"]


def test_foreach_items_that_are_not_iterable_fail_at_once_as_a_flow_error(rt: Runtime) -> None:
    """A flow's mistake, not a passing trouble: InvalidFlow, never retried, saying what came."""
    flow = Flow("count", [ForEach("each", lambda ctx: ctx.input, lambda ctx: ctx.item)])
    out = rt.run(flow, 5)
    assert out.status == "error"
    assert out.error.type == "InvalidFlow" and not out.error.retryable
    assert out.error.message == "ForEach 'each': the items must be iterable (got int 5)"
    assert out.error.attempts == 1


def test_every_element_below_an_untaken_side_is_skipped(rt: Runtime) -> None:
    def route(ctx: Any) -> Route:
        return Route("done", 1)

    untaken = [
        Loop(
            "loop",
            [lambda ctx: 1, ForEach("fe", [1, 2], [Gate("ok")])],
            until=lambda c: True,
            max_iterations=2,
        ),
        Branch("inner", lambda ctx: True, then=[Wait("w")], otherwise=[Sleep("s", 5)]),
        Graph("g", [step(route, "a")], "a", {"a": {"done": None}}),
        lambda ctx: "last",
    ]
    flow = Flow(
        "f",
        [Branch("b", lambda ctx: False, then=untaken, otherwise=[step(lambda ctx: "no", "no")])],
    )
    out = rt.run(flow)
    assert out.ok and out.output == "no"
    view = rt.session(out.session_id)
    skipped = [(e.path, e.data) for e in view.events() if e.type == "node.skipped"]
    not_taken, unreachable = {"reason": "branch_not_taken"}, {"reason": "upstream_unreachable"}
    assert skipped == [
        (("b", "loop"), not_taken),
        (("b", "loop", "<lambda>"), unreachable),
        (("b", "loop", "fe"), unreachable),
        (("b", "loop", "fe", "ok"), unreachable),
        (("b", "inner"), not_taken),
        (("b", "inner", "w"), unreachable),
        (("b", "inner", "s"), unreachable),
        (("b", "g"), not_taken),
        (("b", "g", "a"), unreachable),
        (("b", "<lambda>"), not_taken),
    ]
    assert view.derive_state() == view.state  # the reducer ignores node.skipped
