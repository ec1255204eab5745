"""The engine's fast paths equal its general ones.

A sync step is called in place (`Step._call`: no generator, its events recorded as rows and
folded by the reducer's own functions, its completion inlined), and a ForEach whose body is one
sync step calls it without a body generator. Each is a copy of what the general path does, so
random flows are run both ways (the general way by turning `direct` off) and must give the
same events, the same state, and a state equal to the fold of the stored events.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tarry import Branch, Flow, ForEach, Graph, Loop, Runtime, step
from tarry.engine.elements.element import Element
from tarry.engine.elements.step import Step
from tarry.engine.state.events import EventLog, Row, at_of, ns_of

outputs = st.one_of(
    st.none(),
    st.integers(-(2**40), 2**40),
    st.text(max_size=8),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=2),
)


@st.composite
def steps(draw: Any, name: str) -> Step:
    value = draw(outputs)
    effect = draw(st.sampled_from(["none", "state", "metric", "prev", "raise_once", "pause"]))
    failed: set[str] = set()

    def fn(ctx: Any) -> Any:
        if effect == "state":
            ctx.state[name] = value
        elif effect == "metric":
            ctx.metric("n", 1)
        elif effect == "prev":
            return [ctx.prev, value]
        elif effect == "pause":  # the state of every frame open here is checked at the pause
            return [ctx.interrupt("check"), value]
        elif effect == "raise_once" and ctx.session_id + repr(ctx.path) not in failed:
            failed.add(ctx.session_id + repr(ctx.path))
            raise ValueError("once")
        return value

    from tarry import Retry

    retry = Retry(attempts=2, initial=0.0) if effect == "raise_once" else None
    return step(fn, name, retry=retry)


@st.composite
def bodies(draw: Any, depth: int, prefix: str) -> list[Element]:
    n = draw(st.integers(1, 3))
    body: list[Element] = []
    for i in range(n):
        name = f"{prefix}{i}"
        kind = draw(
            st.sampled_from(
                ["step", "step", "foreach", "loop", "branch", "flow", "graph"]
                if depth
                else ["step"]
            )
        )
        if kind == "step":
            body.append(draw(steps(name)))
        elif kind == "foreach":
            items = draw(st.lists(outputs, max_size=4))
            body.append(ForEach(name, items, draw(bodies(depth - 1, name + "_"))))
        elif kind == "loop":
            times = draw(st.integers(1, 3))
            body.append(
                Loop(
                    name,
                    draw(bodies(depth - 1, name + "_")),
                    until=lambda ctx, t=times: ctx.iteration + 1 >= t,
                    max_iterations=5,
                )
            )
        elif kind == "flow":  # a nested Flow: inline, its frame of kind "flow"
            body.append(Flow(name, draw(bodies(depth - 1, name + "_"))))
        elif kind == "graph":  # its nodes in a chain, each a step or a container
            nodes = draw(bodies(depth - 1, name + "_"))
            names = [node.name for node in nodes]
            routes = {a: {"default": b} for a, b in zip(names, names[1:] + [None], strict=True)}
            body.append(Graph(name, nodes, names[0], routes))
        else:
            side = draw(st.booleans())
            body.append(
                Branch(
                    name,
                    lambda ctx, s=side: s,
                    draw(bodies(depth - 1, name + "t_")),
                    draw(bodies(depth - 1, name + "f_")),
                )
            )
    return body


def general(element: Any) -> None:
    """Turn every fast path off in `element` and below."""
    if isinstance(element, Step):
        element.direct = False
    for _, body in element._bodies():
        for child in body:
            general(child)


def run(flow: Flow, sid: str) -> tuple[list[tuple[Any, ...]], Any]:
    rt = Runtime()
    out = rt.run(flow, session_id=sid)
    view = rt.session(out.session_id)
    while out.paused:  # the live state of the frames open at the pause is the fold's
        assert view.derive_state() == view.state
        out = rt.resume(out.token, "ok")
    events = view.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert view.derive_state() == view.state
    state = view.state
    # Tracebacks name the frames that called the step, which differ by path.
    datas = [
        {k: v if k != "error" else {**v, "traceback": None} for k, v in e.data.items()}
        for e in events
    ]
    return [(e.type, e.path, d) for e, d in zip(events, datas, strict=True)], (
        out.status,
        out.output,
        state.outputs,
        state.shared,
        state.metrics,
    )


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_fast_paths_give_what_the_general_path_gives(data: Any) -> None:
    body = data.draw(bodies(2, "n"))
    events, end = run(Flow("f", body), "fast")
    for element in body:
        general(element)
    slow_events, slow_end = run(Flow("f", body), "slow")
    assert events == slow_events
    assert end == slow_end


def test_rows_become_the_events_they_stand_for() -> None:
    at = ns_of(at_of(1_700_000_000_123_456_789))
    rows: list[Row] = [
        (1, "node.started", at, ("a",), {"kind": "step"}),
        (2, "node.completed", at + 1000, ("a",), {"output": 1}),
    ]
    log = EventLog("s", rows)
    assert len(log) == 2 and log[1].seq == 2 and log[-1].data == {"output": 1}
    assert [e.at for e in log] == [at_of(at), at_of(at + 1000)]
    assert log[1:].rows == rows[1:]
    assert log[0].at.microsecond == 123456


def _fields(obj: Any) -> dict[str, Any]:
    """The slots `obj` has set (across its classes), by name."""
    names = {s for cls in type(obj).__mro__ for s in getattr(cls, "__slots__", ())}
    return {n: getattr(obj, n) for n in sorted(names) if hasattr(obj, n)}


def test_a_step_s_ctx_and_an_item_s_scope_are_built_as_their_init_builds_them() -> None:
    """Step._call and ForEach's sequential fast path set the slots of `Context` and `Scope`
    themselves (a call less per step): a field added to either `__init__` must be set there too."""
    from tarry.engine.context import Context, Scope

    seen: list[Any] = []

    def grab(ctx: Any) -> int:
        seen.append(ctx)
        return 1

    out = Runtime().run(Flow("grab", [step(grab), ForEach("each", [5], [step(grab)])]))
    assert out.ok and len(seen) == 2
    for ctx in seen:
        built = object.__new__(type(ctx))
        Context.__init__(built, ctx._ex, ctx.path, ctx.prev, ctx._scope, ctx.attempt)
        assert _fields(ctx).keys() == _fields(built).keys()
    scope = seen[1]._scope
    assert type(scope) is Scope
    assert _fields(scope) == _fields(Scope(scope.item, scope.index, scope.iteration))


def test_a_flow_keeps_the_paths_of_its_body_for_a_bounded_number_of_bases() -> None:
    from tarry.engine.elements.element import KEPT_BASES

    inner = Flow("inner", [step(lambda ctx: ctx.item, "a"), step(lambda ctx: ctx.prev, "b")])
    flow = Flow("outer", [ForEach("items", list(range(3 * KEPT_BASES)), [inner])])
    rt = Runtime()
    out = rt.run(flow)
    assert out.output == list(range(3 * KEPT_BASES))
    assert len(inner._paths) == KEPT_BASES  # one per item up to the bound, then none kept
    assert flow._paths == {(): (("items",),)}
    completed = [e.path for e in rt.session(out.session_id).events() if e.type == "node.completed"]
    assert completed[-4:] == [
        ("items", 3 * KEPT_BASES - 1, "inner", "a"),
        ("items", 3 * KEPT_BASES - 1, "inner", "b"),
        ("items", 3 * KEPT_BASES - 1, "inner"),
        ("items",),
    ]


def test_a_foreach_item_whose_completion_must_be_measured_is_folded_as_the_general_path() -> None:
    # Outputs near the value bound under a small state bound: the room estimate runs out on
    # some items' completion (measured then), which the in-place item path folds first.
    rt = Runtime(max_value_bytes=12_000, max_snapshot_bytes=14_000)
    big = step(lambda ctx: "p" * 900 + str(ctx.item), "big")
    flow = Flow("f", [ForEach("items", list(range(12)), big)])
    out = rt.run(flow)
    assert out.ok and out.output == ["p" * 900 + str(i) for i in range(12)]
    general(flow.body[0])
    slow = rt.run(Flow("f", [ForEach("items", list(range(12)), big)]))
    fast_view, slow_view = rt.session(out.session_id), rt.session(slow.session_id)
    assert fast_view.derive_state() == fast_view.state
    assert [(e.type, e.path, e.data) for e in fast_view.events()] == [
        (e.type, e.path, e.data) for e in slow_view.events()
    ]


def test_a_nested_flow_resumed_under_a_container_records_its_next_steps_in_its_own_frame() -> None:
    # Resumed inside the Loop, the Flow's frame is not the innermost when the Flow goes on:
    # its later steps still record their outputs in it (the fold's state at the next pause).
    def ask(ctx: Any) -> Any:
        return ctx.interrupt("again?")

    inner = Flow(
        "inner",
        [
            step(lambda ctx: 1, "first"),
            Loop("loop", [step(ask, "ask")], until=lambda ctx: True, max_iterations=2),
            step(lambda ctx: 2, "between"),
            step(ask, "last"),
        ],
    )
    rt = Runtime()
    out = rt.run(Flow("outer", [inner]))
    assert out.pauses[0].path == ("inner", "loop", 0, "ask")
    out = rt.resume(out.token, "a")
    assert out.pauses[0].path == ("inner", "last")
    view = rt.session(out.session_id)
    assert view.derive_state() == view.state
    (frame,) = view.state.container_stack
    assert (frame.child, frame.child_outputs) == (3, {"first": 1, "loop": "a", "between": 2})
    assert rt.resume(out.token, "b").output == "b"
