"""No completed session is ever unreadable: `max_value_bytes` bounds a container's gathered
output as it bounds a step's, and `max_snapshot_bytes` bounds a session's state at every node,
so the node whose output would make the state too large fails, resumably (a token; `skip` it
with a smaller output), and everything the session held stays readable."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import settle
from tarry import Branch, Flow, ForEach, Gate, Graph, Loop, Runtime, Wait, step
from tarry.snapshots import SQLiteStore
from tarry.snapshots.records import decode_state

VALUE = 1000
SNAPSHOT = 4 * VALUE


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


def node(fn: Callable[[Any], Any], name: str, mode: str) -> Any:
    if mode == "sync":
        return step(fn, name)

    async def run(ctx: Any) -> Any:
        await asyncio.sleep(0)
        return fn(ctx)

    return step(run, name)


def small(store: Any = None, **kwargs: Any) -> Runtime:
    return Runtime(store=store, max_value_bytes=VALUE, max_snapshot_bytes=SNAPSHOT, **kwargs)


def readable(rt: Runtime, sid: str) -> Any:
    """Everything a session shows can be read, and its snapshot is within the bound (a failed
    session's holds its error besides)."""
    view = rt.session(sid)
    assert view.derive_state() == view.state
    assert view.outcome is not None
    rt.stats()
    record = rt.store.load(sid)
    state = decode_state(record.state)
    if state.status == "completed":  # it holds the run's output besides (one value)
        allowance = VALUE
    elif state.error is not None:  # it holds its error besides
        allowance = len(state.error.message) + len(state.error.traceback or "") + 100
    else:
        allowance = 0
    assert len(record.state) <= SNAPSHOT + allowance
    return view


# -- a ForEach's gathered output -----------------------------------------------------------------


def test_a_foreach_output_over_the_value_bound_fails_the_foreach_resumably(store, mode) -> None:
    ran: list[int] = []

    def work(ctx):
        ran.append(ctx.index)
        return "r" * 150  # each result fits; ten of them do not

    rt = small(store)
    flow = Flow(
        "gather",
        [
            ForEach("items", list(range(10)), node(work, "work", mode)),
            node(lambda ctx: len(ctx.prev), "count", mode),
        ],
    )
    out = settle(rt.run(flow))
    assert out.failed and out.error.type == "PayloadTooLarge"
    assert out.error.path == ("items",) and "items['output']" in out.error.message
    assert str(VALUE) in out.error.message
    assert out.token is not None
    assert len(ran) < 10  # it stopped as soon as the output could no longer fit
    readable(rt, out.session_id)
    done = settle(rt.skip(out.token, output=["short"]))
    assert done.ok and done.output == 1
    readable(rt, out.session_id)


def test_a_resumed_foreach_counts_the_results_it_gathered_before(store, mode) -> None:
    def work(ctx):
        if ctx.index == 3:
            ctx.interrupt("look")
        return "r" * 180

    rt = small(store)
    flow = Flow("gather", [ForEach("items", list(range(6)), node(work, "work", mode))])
    out = settle(rt.run(flow))
    assert out.paused
    done = settle(rt.resume(out.token, True))
    assert done.failed and done.error.type == "PayloadTooLarge"
    assert done.error.path == ("items",)
    readable(rt, out.session_id)
    assert settle(rt.skip(done.token, output=[])).output == []


def test_resuming_a_foreach_that_failed_for_its_output_fails_it_again(mode) -> None:
    rt = small()
    flow = Flow(
        "gather", [ForEach("items", list(range(12)), node(lambda ctx: "r" * 150, "w", mode))]
    )
    out = settle(rt.run(flow))
    assert out.failed and out.error.type == "PayloadTooLarge"
    again = settle(rt.resume(out.token))  # the rest runs; what it gathers is still too large
    assert again.failed and again.error.type == "PayloadTooLarge" and again.error.path == ("items",)
    readable(rt, out.session_id)
    assert settle(rt.skip(again.token, output=[])).output == []


def test_a_foreach_output_within_the_bound_passes(mode) -> None:
    rt = small()
    flow = Flow(
        "gather", [ForEach("items", list(range(9)), node(lambda ctx: "r" * 100, "w", mode))]
    )
    out = settle(rt.run(flow))
    assert out.ok and out.output == ["r" * 100] * 9


# -- the whole state -----------------------------------------------------------------------------


def parts(n: int, size: int, mode: str) -> list[Any]:
    return [node(lambda ctx: "p" * size, f"part{i}", mode) for i in range(n)]


def grow(*elements: Any) -> Branch:
    """`elements` in a container, whose frame holds their outputs while it runs: a large output
    of a top-level element is kept out of the state (test_out_of_line.py), so these tests
    fill the state from inside one."""
    return Branch("grow", lambda ctx: True, list(elements))


def test_the_step_that_would_make_the_state_too_large_fails_resumably(store, mode) -> None:
    # The case, scaled down: every output fits on its own, the sum does not.
    rt = small(store)
    flow = Flow("grows", [grow(*parts(9, VALUE - 100, mode))])
    out = settle(rt.run(flow))
    assert out.failed and out.error.type == "SnapshotTooLarge"
    failed_at = out.error.path
    assert failed_at[0] == "grow" and failed_at[1].startswith("part")
    assert failed_at != ("grow", "part0")
    assert "max_snapshot_bytes" in out.error.message and failed_at[1] in out.error.message
    assert out.token is not None
    view = readable(rt, out.session_id)
    kept = sorted(view.state.container_stack[0].child_outputs)
    assert failed_at[1] not in kept and len(kept) == int(failed_at[1][4:])  # nothing lost
    # Skipping each part that does not fit (with a small output) finishes the run.
    for _ in range(9):
        if not out.failed:
            break
        assert out.error.type == "SnapshotTooLarge"
        out = settle(rt.skip(out.token, output="-"))
    assert out.ok and out.output == "-"
    readable(rt, out.session_id)


def test_a_completed_snapshot_holds_at_most_the_bound_and_the_runs_output(store) -> None:
    # Every output fits, and so does the state; the completed state holds the run's output
    # (one value: it is always read back), and the large outputs of the top-level elements,
    # the last one's included, by reference only.
    rt = small(store)
    flow = Flow(
        "end",
        [
            step(lambda ctx: "a" * 990, "a"),
            step(lambda ctx: "b" * 990, "b"),
            step(lambda ctx: "c" * 990, "c"),
        ],
    )
    out = rt.run(flow)
    assert out.ok and out.output == "c" * 990
    assert 990 < len(rt.store.load(out.session_id).state) <= SNAPSHOT
    view = readable(rt, out.session_id)
    assert view.state.outputs == {"a": "a" * 990, "b": "b" * 990, "c": "c" * 990}


def test_ctx_state_counts_against_the_bound(mode) -> None:
    def hoard(ctx):
        ctx.state[f"k{ctx.index}"] = "s" * 900

    rt = small()
    out = settle(rt.run(Flow("hoard", [ForEach("items", list(range(8)), node(hoard, "h", mode))])))
    assert out.failed and out.error.type == "SnapshotTooLarge"
    assert out.error.path[0] == "items" and out.error.path[-1] == "h"
    readable(rt, out.session_id)


def containers(big: Any) -> dict[str, Any]:
    return {
        "loop": Loop("c", big, until=lambda ctx: True, max_iterations=1),
        "graph": Graph("c", [big], "big", {}),
        "branch": Branch("c", lambda ctx: True, big),
        "foreach": ForEach("c", [1], big),
    }


@pytest.mark.parametrize("kind", ["loop", "graph", "branch", "foreach"])
def test_what_a_container_holds_counts_against_the_bound(kind: str) -> None:
    rt = small()
    container = containers(step(lambda ctx: "x" * 900, "big"))[kind]
    out = rt.run(Flow("nest", [grow(*parts(3, 900, "sync"), container)]))
    assert out.failed and out.error.type == "SnapshotTooLarge"
    assert out.error.path[:2] == ("grow", "c")
    readable(rt, out.session_id)


@pytest.mark.parametrize("kind", ["loop", "graph", "branch", "foreach"])
def test_what_a_completed_container_drops_is_not_held_against_the_bound(kind: str) -> None:
    # Inside, its frame holds the big output twice (its child's and the last iteration's);
    # once completed, the flow holds it once. The state it completes into is measured as it
    # will be, so the frame it drops is not counted with the output it adds.
    rt = small()
    container = containers(step(lambda ctx: "x" * 900, "big"))[kind]
    out = rt.run(Flow("nest", [*parts(1, 900, "sync"), container, lambda ctx: "y" * 10]))
    assert out.ok
    readable(rt, out.session_id)


def test_long_runs_whose_state_stays_small_never_fail(mode) -> None:
    # Growth that the state drops again (each iteration's outputs) is not held against it.
    rt = small()
    body = [node(lambda ctx: "i" * 500, "a", mode), node(lambda ctx: "j" * 500, "b", mode)]
    flow = Flow("long", [ForEach("items", list(range(200)), body), lambda ctx: len(ctx.prev)])
    assert settle(rt.run(flow)).failed  # the gathered output is over the value bound...
    flow = Flow(
        "long", [Loop("again", body, until=lambda ctx: ctx.iteration >= 199, max_iterations=200)]
    )
    out = settle(rt.run(flow))
    assert out.ok and out.output == "j" * 500  # ...but 200 iterations of a Loop pass


def test_a_recovered_session_is_bounded_too(tmp_path) -> None:
    from tarry import ManualClock

    class Crash(BaseException):
        pass

    clock = ManualClock()
    died: list[bool] = []

    def crash(ctx):
        if not died:
            died.append(True)
            raise Crash
        return "p" * 900

    store = SQLiteStore(tmp_path / "rec.db")
    flow = Flow(
        "rec",
        [grow(*parts(3, 900, "sync"), step(crash, "crash"), step(lambda ctx: "z" * 900, "last"))],
    )
    with pytest.raises(Crash):
        small(store, durability="step", clock=clock).run(flow)
    clock.advance(3600)
    rt = small(store, durability="step", clock=clock, flows=[flow])
    [out] = rt.recover()
    assert out.failed and out.error.type == "SnapshotTooLarge"
    readable(rt, out.session_id)


def test_a_pause_whose_snapshot_would_be_too_large_fails_there_and_keeps_everything() -> None:
    rt = small()
    flow = Flow("asks", [grow(*parts(3, 900, "sync"), Wait("ask", payload="q" * 900))])
    out = rt.run(flow)
    assert out.failed and out.error.type == "SnapshotTooLarge"
    assert out.error.path == ("grow", "ask")
    view = rt.session(out.session_id)
    assert sorted(view.state.container_stack[0].child_outputs) == ["part0", "part1", "part2"]
    assert view.derive_state() == view.state
    assert rt.cancel(out.token).error.type == "cancelled"


# -- a property ----------------------------------------------------------------------------------

sizes = st.lists(st.integers(0, VALUE - 20), min_size=1, max_size=10)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=sizes, gate=st.booleans())
def test_every_session_ends_readable_and_within_the_bound(sizes: list[int], gate: bool) -> None:
    rt = small()
    body: list[Any] = [step(lambda ctx, n=n: "v" * n, f"s{i}") for i, n in enumerate(sizes)]
    if gate:
        body.insert(len(body) // 2, Gate("look"))
    out = rt.run(Flow("prop", body))
    for _ in range(len(sizes) + 2):
        if out.ok:
            break
        if out.paused:
            out = rt.resume(out.token, True)
        elif out.error.type in ("SnapshotTooLarge", "PayloadTooLarge") and out.token:
            readable(rt, out.session_id)
            out = rt.skip(out.token, output="")
        else:
            raise AssertionError(out)
    assert out.ok
    readable(rt, out.session_id)
