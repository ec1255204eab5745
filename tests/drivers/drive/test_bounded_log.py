"""A drive holds a bounded log: with durability="pause" too, it writes its events (with the
values they refer to) once FLUSH_EVENTS are unwritten, so a long run neither keeps every event
since it started in memory nor fills the garbage collector's oldest generation with them."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from tarry import Flow, ForEach, Runtime, step
from tarry.drivers.drive.drive import FLUSH_EVENTS
from tarry.snapshots import MemoryStore, SQLiteStore


class CountingStore(MemoryStore):
    """Records how many events each write carried."""

    def __init__(self) -> None:
        super().__init__()
        self.appended: list[int] = []
        self.saved: list[int] = []

    def append_events(self, session_id: str, events: Any) -> None:
        self.appended.append(len(events))
        super().append_events(session_id, events)

    def save(self, record: Any, expected_version: int, **kw: Any) -> int:
        self.saved.append(len(kw.get("events", ())))
        return super().save(record, expected_version, **kw)


def noop(ctx: Any) -> None:
    return None


def test_a_long_run_writes_its_events_in_bounded_batches() -> None:
    store = CountingStore()
    rt = Runtime(store)
    steps = 3 * FLUSH_EVENTS
    out = rt.run(Flow("long", [step(noop, f"s{i}") for i in range(steps)]))
    assert out.ok
    # One step's two events at most beyond the bound, then the rest with the final save.
    assert store.appended and max(store.appended) <= FLUSH_EVENTS + 2
    assert max(store.saved) <= FLUSH_EVENTS + 2
    events = rt.session(out.session_id).events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len(events) == 2 + 2 * steps  # run.started, two per step, run.completed
    assert rt.session(out.session_id).derive_state() == rt.session(out.session_id).state


def test_a_short_run_is_written_once_at_its_end(ticks: Any) -> None:
    # `ticks`: however long the machine stalls it, the run does not tick (a tick writes the
    # progress once a second: two saves).
    store = CountingStore()
    rt = Runtime(store)
    rt.run(Flow("short", [step(noop, f"s{i}") for i in range(10)]))
    assert store.appended == [] and store.saved == [20 + 1]


def test_a_long_loop_resumed_in_another_runtime_gathers_every_result(tmp_path: Path) -> None:
    # Results written by the mid-run writes, by the pause and after the resume all come back.
    def work(ctx: Any) -> Any:
        if ctx.index == 300:
            return ctx.interrupt("halfway")
        return ctx.item * 2

    flow = Flow("loop", [ForEach("items", list(range(400)), step(work, "work"))])
    first = Runtime(SQLiteStore(tmp_path / "a.db"))
    out = first.run(flow)
    assert out.paused
    second = Runtime(SQLiteStore(tmp_path / "a.db"), flows=[flow])
    done = second.resume(out.token, "resumed")
    assert done.ok
    assert done.output == [i * 2 for i in range(300)] + ["resumed"] + [
        i * 2 for i in range(301, 400)
    ]


def test_a_long_run_keeps_a_bounded_log_in_memory() -> None:
    """Near its end, a long run holds at most about FLUSH_EVENTS of its events: what a full
    collection must walk does not grow with the run (it held all 8,000 before)."""
    seen: list[int] = []

    def probe(ctx: Any) -> None:
        gc.collect(1)  # whatever is alive and tracked is in the oldest generation now
        seen.append(len(gc.get_objects(generation=2)))

    rt = Runtime()
    flow = Flow(
        "long",
        [step(probe, "first")] + [step(noop, f"s{i}") for i in range(4000)] + [step(probe, "last")],
    )
    rt.run(flow)  # warm up
    seen.clear()
    rt.run(flow)
    first, last = seen
    assert FLUSH_EVENTS <= 500
    assert last - first < 2000, (first, last)
