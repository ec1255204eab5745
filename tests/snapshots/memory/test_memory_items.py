"""MemoryStore writes the four events of a ForEach item of one step as one array (an item array, see records.batch_arrays)
and reads them back as the same four events; likewise a step's node.started and node.completed
in a row as one step array, read back as the same two events.

What is checked: a batch reads back as exactly the events it was given, at every page (skip and
limit), whatever the rows around an item and however an item's rows differ from the in-place
path's (times, data, outputs); a batch written without item arrays (before them) reads as it
did; and runs through a Runtime store what the engine recorded, event for event.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tarry import Flow, ForEach, ManualClock, Retry, Runtime, step
from tarry.engine.state import events as ev
from tarry.engine.state.events import EventLog, Row
from tarry.snapshots import MemoryStore
from tarry.snapshots.codec.pack import dumps
from tarry.snapshots.memory import entry as memory_entry
from tarry.snapshots.memory.entry import _decode_batch, _elements, _encode_batch
from tarry.snapshots.records import encode_event, event_arrays

NS = 1_900_000_000_123_456_000
values = st.one_of(
    st.none(),
    st.integers(-(2**40), 2**40),
    st.text(max_size=4),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=2),
    st.tuples(st.integers(0, 9)),
)


def item_rows(seq: int, path: tuple[Any, ...], index: int, item: Any, output: Any) -> list[Row]:
    """The rows a sequential ForEach records in place for one item of a step named "s"."""
    cpath = path + (index, "s")
    at, at2 = NS + seq, NS + seq + 5000  # each one int, as the engine shares them
    return [
        (seq, ev.ITEM_STARTED, at, path, {"index": index, "item": item}),
        (seq + 1, ev.NODE_STARTED, at, cpath, ev.STEP_STARTED_DATA),
        (seq + 2, ev.NODE_COMPLETED, at2, cpath, {"output": output}),
        (seq + 3, ev.ITERATION_COMPLETED, at2, path, {"index": index, "output": output}),
    ]


def changed(rows: list[Row], what: str, value: Any) -> list[Row]:
    """The rows of an item with one thing as the in-place path would not record it."""
    rows = [list(r) for r in rows]  # type: ignore[misc]
    if what == "started_at":
        rows[1][2] = rows[0][2] + 1000
    elif what == "completed_at":
        rows[3][2] = rows[2][2] + 1000
    elif what == "equal_times":  # equal, not the same int: written as four events
        rows[1][2] = int(str(rows[0][2]))
    elif what == "step_data":
        rows[2][4] = {"output": value, "route": "x"}
    elif what == "other_output":
        rows[3][4] = {"index": rows[3][4]["index"], "output": [value]}
    elif what == "not_a_step":
        rows[1][4] = {"kind": "step"}  # equal, not the shared dict: written as four events
    elif what == "plain_start":
        rows[0][1] = ev.ITERATION_STARTED
    return [tuple(r) for r in rows]  # type: ignore[misc]


def step_rows(seq: int, path: tuple[Any, ...], output: Any) -> list[Row]:
    """The rows a step run in place records: its start, then its completion."""
    return [
        (seq, ev.NODE_STARTED, NS + seq, path, ev.STEP_STARTED_DATA),
        (seq + 1, ev.NODE_COMPLETED, NS + seq + 7000, path, {"output": output}),
    ]


def changed_step(rows: list[Row], what: str, value: Any) -> list[Row]:
    """A step's two rows with one thing as a step run in place would not record it."""
    rows = [list(r) for r in rows]  # type: ignore[misc]
    if what == "other_path":  # equal, not the same tuple: written as two events
        rows[1][3] = tuple(list(rows[0][3]))
    elif what == "step_data":
        rows[1][4] = {"output": value, "route": "x"}
    elif what == "not_a_step":
        rows[0][4] = {"kind": "step"}
    elif what == "not_started":
        rows[0][1] = ev.NODE_COMPLETED
    elif what == "not_completed":
        rows[1][1] = ev.NODE_FAILED
    elif what == "seq_gap":
        rows[1][0] = rows[0][0] + 2
    return [tuple(r) for r in rows]  # type: ignore[misc]


@st.composite
def logs(draw: Any) -> EventLog:
    rows: list[Row] = []
    seq = 1
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(
            st.sampled_from(
                ["item", "item", "changed", "cut", "other", "step", "step", "step_changed"]
            )
        )
        path = draw(st.sampled_from([("items",), ("outer", 2, "inner"), ()]))
        index = draw(st.integers(0, 2**20))
        if kind == "other":
            got: list[Row] = [(seq, ev.NODE_COMPLETED, NS, path, {"output": draw(values)})]
        elif kind.startswith("step"):
            got = step_rows(seq, path, draw(values))
            if kind == "step_changed":
                what = draw(
                    st.sampled_from(
                        [
                            "other_path",
                            "step_data",
                            "not_a_step",
                            "not_started",
                            "not_completed",
                            "seq_gap",
                            "cut",
                        ]
                    )
                )
                got = got[:1] if what == "cut" else changed_step(got, what, draw(values))
        else:
            got = item_rows(seq, path, index, draw(values), draw(values))
            if kind == "changed":
                what = draw(
                    st.sampled_from(
                        [
                            "started_at",
                            "completed_at",
                            "equal_times",
                            "step_data",
                            "other_output",
                            "not_a_step",
                            "plain_start",
                        ]
                    )
                )
                got = changed(got, what, draw(values))
            elif kind == "cut":  # an item interrupted (a stop, a pause) after 1 to 3 rows
                got = got[: draw(st.integers(1, 3))]
        rows += got
        seq = got[-1][0] + 1
    return EventLog("s", rows, draw(st.booleans()))


@settings(max_examples=300, deadline=None)
@given(logs())
def test_a_batch_reads_back_as_the_events_it_was_given_at_every_page(log: EventLog) -> None:
    events = list(log)
    blob, counted = _encode_batch(log)
    assert counted == len(blob) - len(memory_entry._header(_elements(blob)))
    assert _decode_batch(blob, "s") == events
    for skip in range(len(events) + 1):
        assert _decode_batch(blob, "s", skip) == events[skip:]
        for limit in range(1, len(events) - skip + 1):
            assert _decode_batch(blob, "s", skip, limit) == events[skip : skip + limit]


def test_an_item_of_the_in_place_path_takes_one_array_and_fewer_bytes() -> None:
    rows = [r for i in range(3) for r in item_rows(1 + 4 * i, ("items",), i, i, None)]
    log = EventLog("s", rows, True)
    blob, counted = _encode_batch(log)
    assert _elements(blob) == 3
    assert counted < sum(len(encode_event(e)) for e in log) / 3
    # Rows not said to hold such items (an EventLog's default) are not looked through for
    # items: each item's step takes a step array, its iteration's events one array each.
    plain, _ = _encode_batch(EventLog("s", rows))
    assert _elements(plain) == 9 and _decode_batch(plain, "s") == list(log)
    # A different output for the iteration than the step's (not the same object) is kept.
    other = item_rows(1, ("items",), 0, "x", [1])
    other[3] = (4, ev.ITERATION_COMPLETED, other[2][2], ("items",), {"index": 0, "output": [1]})
    blob, _ = _encode_batch(EventLog("s", other, True))
    assert _elements(blob) == 1 and _decode_batch(blob, "s") == list(EventLog("s", other, True))


def test_a_step_run_in_place_takes_one_array_and_fewer_bytes() -> None:
    rows = [r for i in range(3) for r in step_rows(1 + 2 * i, ("f", "s"), {"n": i})]
    log = EventLog("s", rows)
    blob, counted = _encode_batch(log)
    assert _elements(blob) == 3
    assert counted < sum(len(encode_event(e)) for e in log) / 1.5
    assert _decode_batch(blob, "s") == list(log)
    assert _decode_batch(blob, "s", 3, 2) == list(log)[3:5]


def test_a_batch_of_plain_event_arrays_reads_as_before() -> None:
    # What MemoryStore wrote before item arrays: every event its own array, an item's four included.
    rows = [r for i in range(3) for r in item_rows(1 + 4 * i, ("items",), i, i, {"n": i})]
    log = EventLog("s", rows, True)
    blob = dumps(event_arrays(log))
    assert _decode_batch(blob, "s") == list(log)
    assert _decode_batch(blob, "s", 5, 4) == list(log)[5:9]


@pytest.mark.parametrize(
    "blob",
    [
        dumps([[1, 5, ["a"], 0, 1, "s", None, 6, None, 1]]),  # an item array one too long
        dumps([[1, 5, ["a"], "0", 1, "s", None, 6]]),  # an index that is no int
        dumps([[1, 5, ["a"], 0, 1, "s", None, "6"]]),  # a time that is no int
        dumps([[1, 5, "a", 0, 1, "s", None, 6]]),  # a path that is no array
        dumps([[1, 5, ["a"], None, 6, "route"]]),  # a step array of another kind
        dumps([[1, 5, ["a"], None, "6", "step"]]),  # a step array's time that is no int
        dumps([[1, 5, "a", None, 6, "step"]]),  # a step array's path that is no array
        dumps([[1, 5, ["a"], None, 6, "step", 0]]),  # seven elements: neither
    ],
)
def test_a_malformed_item_array_is_a_snapshot_error(blob: bytes) -> None:
    from tarry import SnapshotError

    with pytest.raises(SnapshotError):
        _decode_batch(blob, "s")


def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The events each write of a MemoryStore is given, as `Event`s, before encoding."""
    given: list[Any] = []
    real = memory_entry.batch_arrays

    def spy(events: Any) -> list[list[Any]]:
        given.extend(events)
        return real(events)

    monkeypatch.setattr(memory_entry, "batch_arrays", spy)
    return given


@pytest.mark.parametrize("effect", ["none", "tick", "state", "retry", "pause", "nested"])
def test_a_run_stores_the_events_the_engine_recorded(
    monkeypatch: pytest.MonkeyPatch, effect: str
) -> None:
    given = recorded(monkeypatch)
    clock = ManualClock()
    failed: set[int] = set()

    def body(ctx: Any) -> Any:
        if effect == "tick":  # the step's completion at a time of its own
            clock.advance(0.25)
        elif effect == "state":
            ctx.state["n"] = ctx.item
        elif effect == "retry" and ctx.item not in failed:
            failed.add(ctx.item)
            raise ValueError("once")
        elif effect == "pause" and ctx.item == 2:
            return {"got": ctx.interrupt("check")}
        return {"item": ctx.item}

    one = step(body, "s", retry=Retry(attempts=2, initial=0.0))
    inner: Any = ForEach("inner", [0, 1, 2], one) if effect == "nested" else one
    flow = Flow("f", [ForEach("items", [0, 1, 2, 3], inner)])
    stored, elements = _run_to_its_end(flow, clock, given)
    if effect in ("none", "tick", "pause", "nested"):  # items of one plain step: one array each
        assert elements < len(stored) - 2 * 4


def _run_to_its_end(flow: Flow, clock: ManualClock, given: list[Any]) -> tuple[list[Any], int]:
    """Run `flow` on a MemoryStore, resuming each pause with "yes", and check that the store
    gives back exactly the events the engine recorded (`given`), at every page, and that they
    derive the session's state: the stored events, and how many elements their batches hold."""
    store = MemoryStore()
    rt = Runtime(store=store, clock=clock)
    out = rt.run(flow)
    while out.paused:
        out = rt.resume(out.token, "yes")
    assert out.ok
    view = rt.session(out.session_id)
    stored = view.events()
    assert stored == given
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert view.derive_state() == view.state
    for after in range(len(stored)):
        assert view.events(after_seq=after) == stored[after:]
    batches = store._sessions[out.session_id].batches
    return stored, sum(map(_elements, batches if type(batches) is list else [batches]))


@pytest.mark.parametrize("effect", ["none", "tick", "state", "retry", "pause", "nested"])
def test_a_chain_stores_the_events_the_engine_recorded(
    monkeypatch: pytest.MonkeyPatch, effect: str
) -> None:
    given = recorded(monkeypatch)
    clock = ManualClock()
    failed: set[str] = set()

    def make(name: str) -> Any:
        def body(ctx: Any) -> Any:
            if effect == "tick":
                clock.advance(0.25)
            elif effect == "state":
                ctx.state[name] = 1
            elif effect == "retry" and name not in failed:
                failed.add(name)
                raise ValueError("once")
            elif effect == "pause" and name == "b":
                return {"got": ctx.interrupt("check")}
            return {"name": name}

        return step(body, name, retry=Retry(attempts=2, initial=0.0))

    steps = [make(n) for n in "abcd"]
    flow = Flow("f", [Flow("inner", steps)] if effect == "nested" else steps)
    stored, elements = _run_to_its_end(flow, clock, given)
    if effect in ("none", "tick", "nested"):  # each step's two events: one array
        assert elements <= len(stored) - 4
