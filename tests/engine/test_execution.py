"""The live Execution on its own: its state is the fold of its events, a step reads the clock
once, and the driver is asked at every checkpoint, which yields only to stop the run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from tarry.engine import Branch, Flow, ForEach, Graph, Loop, Route, derive_state
from tarry.engine.elements.step import step
from tarry.engine.execution import Execution
from tarry.engine.signals import Checkpoint
from tarry.engine.state.events import Event, new_event
from tarry.engine.state.records import SessionState

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Ledger:
    """The out-of-line store of a ForEach's items and results, in memory."""

    def __init__(self) -> None:
        self.items: dict[Any, list[Any]] = {}
        self.values: dict[Any, Any] = {}

    def put_items(self, path: tuple[Any, ...], items: list[Any]) -> None:
        self.items[path] = list(items)

    def item(self, path: tuple[Any, ...], index: int) -> Any:
        return self.items[path][index]

    def put_result(self, path: tuple[Any, ...], index: int, value: Any) -> None:
        self.values[path, index] = value

    def results(self, path: tuple[Any, ...], stop: int) -> list[Any]:
        return [self.values[path, i] for i in range(stop)]


class Clock:
    """A clock that counts its reads and moves only when told to."""

    def __init__(self) -> None:
        self.at = T0
        self.reads = 0

    def now(self) -> datetime:
        self.reads += 1
        return self.at


def execute(flow: Flow, **options: Any) -> tuple[Execution, Any]:
    """Run `flow` on a bare Execution; its output, or the signal it stopped at."""
    options.setdefault("now", Clock().now)
    ex = Execution(SessionState("s", flow=flow.name), ledger=Ledger(), **options)
    gen = flow._run(ex)
    try:
        return ex, gen.send(None)
    except StopIteration as done:
        return ex, done.value


def busy(ctx: Any) -> int:
    ctx.state["seen"] = ctx.state.get("seen", 0) + 1
    ctx.metric("calls", 1)
    return ctx.index if ctx.index is not None else 0


def every_container() -> Flow:
    def pick(ctx: Any) -> Route:
        picks = ctx.state["picks"] = ctx.state.get("picks", 0) + 1
        return Route("again" if picks < 3 else "done", picks)

    return Flow(
        "all",
        [
            step(busy, "first"),
            ForEach("each", [1, 2, 3], [step(busy, "a"), Branch("b", lambda c: c.item % 2, busy)]),
            Loop("loop", step(busy, "body"), until=lambda c: c.iteration >= 2, max_iterations=5),
            Graph("g", [step(pick, "pick")], "pick", {"pick": {"again": "pick", "done": None}}),
        ],
    )


def test_the_live_state_is_the_fold_of_its_events() -> None:
    ex, out = execute(every_container())
    assert (
        out == 3
        and ex.state.shared["seen"] == 9
        and ex.state.metrics["calls"] == ex.state.shared["seen"]
    )
    assert [e.seq for e in ex.log] == list(range(1, len(ex.log) + 1))
    assert derive_state(ex.log, SessionState("s", flow="all")) == ex.state


def test_the_live_state_is_a_copy_changed_in_place() -> None:
    initial = SessionState("s", flow="chain")
    ex = Execution(initial, now=Clock().now, ledger=Ledger())
    live = ex.state
    ex.emit("node.started", ("x",), {"kind": "step"})
    ex.emit("node.completed", ("x",), {"output": 1})
    assert ex.state is live and live.last_seq == 2 and live.outputs == {"x": 1}
    # the state handed in is untouched (the driver may keep it for the next resume)
    assert initial == SessionState("s", flow="chain")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        live.last_seq = 5  # still frozen to everyone else


def test_a_step_reads_the_clock_once() -> None:
    clock = Clock()
    execute(Flow("chain", [step(busy, f"s{i}") for i in range(5)]), now=clock.now)
    assert clock.reads == 5 + 1  # the first event, then each step's completion

    clock = Clock()
    execute(Flow("each", [ForEach("items", list(range(4)), busy)]), now=clock.now)
    assert clock.reads == 4 + 1


def test_an_event_after_user_code_has_the_time_after_it() -> None:
    clock = Clock()

    def slow(ctx: Any) -> None:
        clock.at += timedelta(seconds=5)

    ex, _ = execute(Flow("f", [step(slow, "a"), step(slow, "b")]), now=clock.now)
    times = [(e.type, e.path, e.at - T0) for e in ex.log]
    assert times == [
        ("node.started", ("a",), timedelta(0)),
        ("node.completed", ("a",), timedelta(seconds=5)),
        ("node.started", ("b",), timedelta(seconds=5)),
        ("node.completed", ("b",), timedelta(seconds=10)),
    ]


def test_every_checkpoint_asks_and_only_a_stop_is_yielded() -> None:
    asked: list[tuple[Any, ...]] = []

    def stop(path: tuple[Any, ...]) -> bool:
        asked.append(path)
        return path == ("each", 1)

    ex, signal = execute(Flow("f", [step(busy, "a"), ForEach("each", [7, 8], busy)]), stop=stop)
    assert asked == [("a",), ("each",), ("each", 0), ("each", 0, "busy"), ("each", 1)]
    assert type(signal) is Checkpoint and signal.path == ("each", 1)
    assert ex.log[-1].type == "container.iteration_completed"  # item 0 done, item 1 not begun


def test_new_event_is_an_event() -> None:
    fields = (3, "node.completed", "s", T0, ("a", 0), {"output": 1})
    event = new_event(*fields)
    assert type(event) is Event and event == Event(*fields) and hash(event.path)
    assert attrs.evolve(event, seq=4) == Event(4, *fields[1:])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.seq = 5


def test_a_run_leaves_no_reference_cycle_behind() -> None:
    """The events of a run are freed when it ends, not when the cyclic collector next runs
    (which held every run's log until then and made its full passes ever longer)."""
    import gc

    from tarry import Gate, Runtime

    def asks(ctx: Any) -> Any:
        return ctx.interrupt("ok?") if ctx.index == 1 else ctx.index

    rt = Runtime()
    flows = [
        Flow("chain", [step(busy, f"s{i}") for i in range(20)]),
        Flow("each", [ForEach("items", list(range(5)), step(asks, "ask")), Gate("g")]),
    ]
    for flow in flows:  # warm up: imports and caches made on first use are not garbage
        rt.run(flow)
    gc.collect()
    gc.disable()
    try:
        for flow in flows:
            out = rt.run(flow)
            while out.paused:
                out = rt.resume(out.token, {"approved": True})
        assert gc.collect() == 0
    finally:
        gc.enable()
