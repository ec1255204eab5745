"""Values cannot change behind the log's back: a value read from `ctx` is the step's own copy,
a value handed to tarry (an input, a resume value, a step's output) is tarry's own, so changing
either in place changes nothing that later steps, a resume or a recovery see. Assigning
`ctx.state[key]` is the one way to change state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import Crash, settle
from tarry import Flow, ForEach, Gate, Loop, ManualClock, Runtime, Wait, step
from tarry.snapshots import MemoryStore


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


def node(fn: Callable[[Any], Any], name: str, mode: str) -> Any:
    """`fn` as a step named `name`, sync or async."""
    if mode == "sync":
        return step(fn, name)

    async def run(ctx: Any) -> Any:
        await asyncio.sleep(0)
        return fn(ctx)

    return step(run, name)


def run(rt: Runtime, flow: Flow, input: Any = None, **kwargs: Any) -> Any:
    return settle(rt.run(flow, input, **kwargs))


def crash_then_recover(store: Any, make: Callable[[Callable[[], None]], Flow], input: Any = None):
    """Run the flow made by `make(hook)` with durability="step", dying where `hook` is called
    the first time; recover it in a fresh Runtime. Returns the recovered outcome."""
    clock = ManualClock()
    died: list[bool] = []

    def hook() -> None:
        if not died:
            died.append(True)
            raise Crash

    rt = Runtime(store=store, durability="step", clock=clock)
    with pytest.raises(Crash):
        settle(rt.run(make(hook), input))
    clock.advance(3600)
    other = Runtime(store=store, durability="step", clock=clock, flows=[make(lambda: None)])
    [out] = other.recover()
    return other, out


# -- the case: ctx.state changed in place ------------------------------------------------


def state_flow(mode: str, hook: Callable[[], None] = lambda: None) -> Flow:
    def setup(ctx):
        ctx.state["cfg"] = {"t": 1, "tags": ["a"]}

    def tamper(ctx):
        ctx.state["cfg"]["t"] = 99
        ctx.state["cfg"]["tags"].append("b")

    def read(ctx):
        hook()
        return ctx.state["cfg"]

    return Flow(
        "cfg", [node(setup, "setup", mode), node(tamper, "tamper", mode), node(read, "read", mode)]
    )


def test_a_ctx_state_value_changed_in_place_changes_nothing(mode: str) -> None:
    rt = Runtime()
    out = run(rt, state_flow(mode))
    assert out.ok and out.output == {"t": 1, "tags": ["a"]}
    assert rt.session(out.session_id).state.shared == {"cfg": {"t": 1, "tags": ["a"]}}


def test_a_recovered_run_outputs_what_the_normal_run_outputs(store, mode: str) -> None:
    normal = run(Runtime(store=store), state_flow(mode))
    rt, recovered = crash_then_recover(store, lambda hook: state_flow(mode, hook))
    assert recovered.ok and recovered.output == normal.output == {"t": 1, "tags": ["a"]}
    view = rt.session(recovered.session_id)
    assert view.derive_state() == view.state


def test_assigning_ctx_state_is_the_way_to_change_it(mode: str) -> None:
    def setup(ctx):
        ctx.state["cfg"] = {"t": 1}

    def change(ctx):
        cfg = ctx.state["cfg"]
        cfg["t"] = 99  # on the step's own copy...
        ctx.state["cfg"] = cfg  # ...which it assigns: recorded when the step completes

    flow = Flow(
        "assign",
        [
            node(setup, "setup", mode),
            node(change, "change", mode),
            node(lambda ctx: ctx.state["cfg"], "read", mode),
        ],
    )
    assert run(Runtime(), flow).output == {"t": 99}


def test_within_a_step_each_read_is_a_fresh_copy_of_the_stored_value(mode: str) -> None:
    seen: list[Any] = []

    def look(ctx):
        ctx.state["cfg"]["t"] = 99
        seen.append(ctx.state["cfg"]["t"])
        return ctx.state.get("cfg")

    flow = Flow(
        "fresh",
        [node(lambda ctx: ctx.state.update(cfg={"t": 1}), "setup", mode), node(look, "look", mode)],
    )
    assert run(Runtime(), flow).output == {"t": 1} and seen == [1]


# -- every other way in: prev, outputs, item, input ----------------------------------------------


def test_changing_ctx_prev_and_ctx_outputs_in_place_changes_nothing(mode: str) -> None:
    def make(ctx):
        return {"xs": [1], "n": 1}

    def tamper_prev(ctx):
        ctx.prev["xs"].append(2)
        ctx.prev["n"] = 2
        return "tampered"

    def tamper_outputs(ctx):
        ctx.outputs["make"]["xs"].append(3)
        for value in ctx.outputs.values():
            if isinstance(value, dict):
                value.clear()

    flow = Flow(
        "prev",
        [
            node(make, "make", mode),
            node(tamper_prev, "tamper_prev", mode),
            node(tamper_outputs, "tamper_outputs", mode),
            node(lambda ctx: ctx.outputs["make"], "read", mode),
        ],
    )
    rt = Runtime()
    out = run(rt, flow)
    assert out.output == {"xs": [1], "n": 1}
    assert rt.session(out.session_id).state.outputs["make"] == {"xs": [1], "n": 1}


def test_changing_ctx_item_changes_neither_the_results_nor_the_flow(mode: str) -> None:
    items = [{"id": 1, "seen": []}, {"id": 2, "seen": []}]

    def mark(ctx):
        ctx.item["seen"].append("mark")
        ctx.prev["seen"].append("prev")  # the body's first element gets the item as prev

    def echo(ctx):
        return ctx.item

    flow = Flow(
        "items", [ForEach("each", items, [node(mark, "mark", mode), node(echo, "echo", mode)])]
    )
    rt = Runtime()
    first, second = run(rt, flow), run(rt, flow)
    assert first.output == second.output == [{"id": 1, "seen": []}, {"id": 2, "seen": []}]
    assert items == [{"id": 1, "seen": []}, {"id": 2, "seen": []}]  # the definition too


def test_changing_ctx_input_in_place_changes_nothing(mode: str) -> None:
    def tamper(ctx):
        ctx.input["limits"]["max"] = 0

    flow = Flow("inp", [node(tamper, "tamper", mode), node(lambda ctx: ctx.input, "read", mode)])
    rt = Runtime()
    given = {"limits": {"max": 5}}
    out = run(rt, flow, given)
    assert out.output == {"limits": {"max": 5}} == given
    assert rt.session(out.session_id).state.input == {"limits": {"max": 5}}


def test_a_loop_body_changing_its_prev_in_place_changes_nothing(mode: str) -> None:
    def grow(ctx):
        acc = ctx.prev if isinstance(ctx.prev, list) else []
        acc.append(ctx.iteration)
        if ctx.iteration == 0:
            ctx.outputs["start"].append("x")
        return acc

    flow = Flow(
        "loop",
        [
            node(lambda ctx: ["s"], "start", mode),
            Loop(
                "again",
                node(grow, "grow", mode),
                until=lambda ctx: len(ctx.prev) >= 4,
                max_iterations=5,
            ),
            node(lambda ctx: ctx.outputs["start"], "read", mode),
        ],
    )
    rt = Runtime()
    out = run(rt, flow)
    assert out.output == ["s"]
    assert rt.session(out.session_id).state.outputs["again"] == ["s", 0, 1, 2]


# -- values tarry was handed ---------------------------------------------------------------------


def test_a_step_changing_the_value_it_returned_after_returning_it_changes_nothing(mode) -> None:
    kept: list[Any] = []

    def make(ctx):
        kept.append([1])
        return kept[0]

    def later(ctx):
        kept[0].append(2)  # the list it returned, changed from outside the log
        return "later"

    flow = Flow(
        "kept",
        [
            node(make, "make", mode),
            node(later, "later", mode),
            node(lambda ctx: ctx.outputs["make"], "read", mode),
        ],
    )
    rt = Runtime()
    out = run(rt, flow)
    assert out.output == [1]
    assert rt.session(out.session_id).state.outputs["make"] == [1]


def test_a_state_value_changed_by_the_step_after_assigning_it_is_recorded_as_it_completed(
    mode: str,
) -> None:
    kept: dict[str, Any] = {}

    def setup(ctx):
        kept["cfg"] = {"t": 1}
        ctx.state["cfg"] = kept["cfg"]
        kept["cfg"]["t"] = 2  # still this step: what it completes with is what is recorded

    def later(ctx):
        kept["cfg"]["t"] = 3  # another step: changes nothing

    flow = Flow(
        "kept",
        [
            node(setup, "setup", mode),
            node(later, "later", mode),
            node(lambda ctx: ctx.state["cfg"], "read", mode),
        ],
    )
    assert run(Runtime(), flow).output == {"t": 2}


def test_the_callers_input_changed_after_run_returned_changes_nothing() -> None:
    async def read(ctx):
        await asyncio.sleep(0)
        return ctx.input

    flow = Flow("late", [step(read, "read")])
    given = {"k": [1]}

    async def main():
        pending = Runtime().run(flow, given)  # returns at the async step, before it runs
        given["k"].append(2)
        return await pending

    assert asyncio.run(main()).output == {"k": [1]}


def test_a_resume_value_changed_by_the_caller_afterwards_changes_nothing(mode: str) -> None:
    flow = Flow(
        "answer", [Wait("ask"), Gate("check"), node(lambda ctx: ctx.outputs["ask"], "read", mode)]
    )
    rt = Runtime()
    out = run(rt, flow)
    answer = {"rows": [1, 2]}
    waiting = settle(rt.resume(out.token, answer))
    answer["rows"].clear()
    done = settle(rt.resume(waiting.token, True))
    assert done.output == {"rows": [1, 2]}


def test_a_resume_value_changed_while_an_async_resume_is_pending_changes_nothing() -> None:
    async def read(ctx):
        await asyncio.sleep(0)
        return ctx.prev

    flow = Flow("answer", [Wait("ask"), step(read, "read")])
    rt = Runtime()
    out = rt.run(flow)
    answer = {"rows": [1, 2]}

    async def main():
        pending = rt.resume(out.token, answer)
        answer["rows"].clear()
        return await pending

    assert asyncio.run(main()).output == {"rows": [1, 2]}


def test_an_interrupt_value_is_the_steps_own_copy(mode: str) -> None:
    def ask(ctx):
        value = ctx.interrupt("how many?")
        value["n"] += 1  # changes the step's copy only: a re-run gets the value as resumed
        return value["n"]

    flow = Flow("ask", [node(ask, "ask", mode)])
    rt = Runtime()
    out = run(rt, flow)
    assert settle(rt.resume(out.token, {"n": 1})).output == 2


# -- what stays free -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [None, True, 7, 2.5, "text", b"bytes", (1, "a", None), frozenset({1, 2}), ((1, 2), ("a",))],
    ids=repr,
)
def test_immutable_values_are_handed_on_as_they_are(value: Any) -> None:
    seen: list[Any] = []

    def read(ctx):
        seen.extend([ctx.prev, ctx.outputs["make"]])

    out = Runtime().run(Flow("free", [step(lambda ctx: value, "make"), step(read, "read")]))
    assert out.ok
    assert seen[0] is value and seen[1] is value  # no copy


# -- a property: whatever steps change in place, a recovered run ends as the normal one ----------

ops = st.lists(
    st.tuples(st.sampled_from(["prev", "state", "outputs", "input", "kept"]), st.integers(0, 3)),
    min_size=1,
    max_size=6,
)


def mutating_flow(plan: list[tuple[str, int]], hook: Callable[[], None], crash_at: int) -> Flow:
    kept: list[Any] = []

    def make(i: int, what: str, arg: int) -> Callable[[Any], Any]:
        def fn(ctx):
            if i == crash_at:
                hook()
            if what == "prev" and isinstance(ctx.prev, dict):
                ctx.prev.setdefault("xs", []).append(arg)
            elif what == "state" and "box" in ctx.state:
                ctx.state["box"]["xs"].append(arg)
            elif what == "outputs" and "s0" in ctx.outputs:
                ctx.outputs["s0"]["xs"].append(arg)
            elif what == "input":
                ctx.input["xs"].append(arg)
            elif what == "kept" and kept:
                kept[-1]["xs"].append(arg)
            if i == 0:
                ctx.state["box"] = {"xs": [i]}
            out = {"i": i, "xs": [arg], "seen": [ctx.state.get("box"), ctx.input, ctx.prev]}
            kept.append(out)
            return out

        return fn

    steps = [step(make(i, what, arg), f"s{i}") for i, (what, arg) in enumerate(plan)]
    return Flow("mut", [*steps, lambda ctx: (dict(ctx.outputs), dict(ctx.state))])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=ops, data=st.data())
def test_in_place_changes_never_make_a_recovered_run_differ(plan, data) -> None:
    crash_at = data.draw(st.integers(0, len(plan) - 1))
    normal = Runtime().run(mutating_flow(plan, lambda: None, crash_at), {"xs": [0]})
    store = MemoryStore()
    rt, recovered = crash_then_recover(
        store, lambda hook: mutating_flow(plan, hook, crash_at), {"xs": [0]}
    )
    assert normal.ok and recovered.ok
    assert recovered.output == normal.output
